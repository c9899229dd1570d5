//! Text shown to a person. Anything that came from a sandbox or a configuration (a zone
//! name, a command, a path, a message) goes through [`shown`] before it is printed as
//! text, so that it cannot start a line of its own (and pass for another event or
//! message) nor reach the terminal as a control sequence. JSON output needs no help:
//! JSON escapes control characters itself.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Characters that are never printed as themselves: the control characters (C0, DEL,
/// C1), the line and paragraph separators, and the bidirectional controls that reorder
/// what a terminal shows.
fn escaped(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}')
        || ('\u{202a}'..='\u{202e}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
}

/// `s` on one line, with `\n`, `\r`, `\t`, `\xHH` (other ASCII controls) and `\u{HHHH}`
/// (the rest) written out; unchanged (and not copied) when there is nothing to escape.
/// A backslash is left as it is: what matters is that no line can be forged, and so
/// `shown(shown(s)) == shown(s)`: a message made safe by the broker and printed by the
/// client is not escaped twice.
pub fn shown(s: &str) -> Cow<'_, str> {
    if !s.chars().any(escaped) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if escaped(c) && (c as u32) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if escaped(c) => {
                let _ = write!(out, "\\u{{{:04x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// `eprintln!`, but the line goes to stderr in one `write(2)`. `eprintln!` writes each
/// piece of its format on its own, so the lines of processes sharing a terminal or a pipe
/// (the broker's, a sandboxed `wardcell zone enter`'s) could cut into each other
/// (`error: error: the run's audit log ...`); a pipe keeps a write of up to 4096 bytes
/// whole.
#[macro_export]
macro_rules! eprintln_line {
    ($($arg:tt)*) => {{
        let line = ::std::format!("{}\n", ::std::format_args!($($arg)*));
        let _ = ::std::io::Write::write_all(&mut ::std::io::stderr().lock(), line.as_bytes());
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_left_alone() {
        assert!(matches!(shown("git push origin main"), Cow::Borrowed(_)));
        assert_eq!(shown("zone 'push': é ✓"), "zone 'push': é ✓");
    }

    #[test]
    fn controls_and_newlines_are_written_out() {
        assert_eq!(
            shown("a\n2026-12-03T00:00:00.000Z  audit  audit.decision\r\t\x1b[2J\x07\x7f\\"),
            "a\\n2026-12-03T00:00:00.000Z  audit  audit.decision\\r\\t\\x1b[2J\\x07\\x7f\\"
        );
        let once = shown("x\n\u{1b}y").into_owned();
        assert_eq!(shown(&once), once);
        assert_eq!(
            shown("\u{9b}2J\u{2028}\u{202e}x"),
            "\\u{009b}2J\\u{2028}\\u{202e}x"
        );
        for c in (0u32..0x110000).filter_map(char::from_u32) {
            let s = shown(&c.to_string()).into_owned();
            assert!(!s.chars().any(char::is_control), "{c:?} -> {s:?}");
        }
    }
}
