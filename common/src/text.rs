//! Text shown to a person. Anything that came from a sandbox or a configuration (a zone
//! name, a command, a path, a message) goes through [`shown`] before it is printed as
//! text, so that it cannot start a line of its own (and pass for another event or
//! message) nor reach the terminal as a control sequence. JSON output needs no help:
//! JSON escapes control characters itself.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Characters that are never printed as themselves: the control characters (C0, DEL,
/// C1), every format character (Unicode category Cf: zero-width spaces and joiners,
/// the bidirectional controls that reorder what a terminal shows, the soft hyphen, the
/// byte order mark, tag characters, ...), the line and paragraph separators, every space
/// but U+0020, and what shows as nothing though it is not Cf (Hangul fillers, the
/// combining grapheme joiner, variation selectors, Khmer inherent vowels, the braille
/// blank). Text shown with them written out cannot look like other text.
pub fn escaped(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_control();
    }
    c.is_control() || c.is_whitespace() || format_or_invisible(c)
}

/// Unicode 15.1's Cf characters, and the invisible ones that are not Cf.
fn format_or_invisible(c: char) -> bool {
    const RANGES: &[(u32, u32)] = &[
        (0x00ad, 0x00ad),
        (0x034f, 0x034f),
        (0x0600, 0x0605),
        (0x061c, 0x061c),
        (0x06dd, 0x06dd),
        (0x070f, 0x070f),
        (0x0890, 0x0891),
        (0x08e2, 0x08e2),
        (0x115f, 0x1160),
        (0x17b4, 0x17b5),
        (0x180b, 0x180f),
        (0x200b, 0x200f),
        (0x202a, 0x202e),
        (0x2060, 0x206f),
        (0x2800, 0x2800),
        (0x3164, 0x3164),
        (0xfe00, 0xfe0f),
        (0xfeff, 0xfeff),
        (0xffa0, 0xffa0),
        (0xfff9, 0xfffb),
        (0x110bd, 0x110bd),
        (0x110cd, 0x110cd),
        (0x13430, 0x1343f),
        (0x1bca0, 0x1bca3),
        (0x1d173, 0x1d17a),
        (0xe0001, 0xe0001),
        (0xe0020, 0xe007f),
        (0xe0100, 0xe01ef),
    ];
    let c = c as u32;
    RANGES.iter().any(|&(lo, hi)| (lo..=hi).contains(&c))
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

/// Seconds as zones.toml writes a duration (what the configuration's `parse_duration` reads).
pub fn show_duration(secs: u64) -> String {
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || out.is_empty() {
        out.push_str(&format!("{s}s"));
    }
    out
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

    #[test]
    fn invisible_and_format_characters_are_written_out() {
        for c in [
            '\u{200b}',
            '\u{200c}',
            '\u{200d}',
            '\u{202e}',
            '\u{2066}',
            '\u{2060}',
            '\u{feff}',
            '\u{00ad}',
            '\u{3164}',
            '\u{115f}',
            '\u{ffa0}',
            '\u{034f}',
            '\u{fe0f}',
            '\u{e0041}',
            '\u{00a0}',
            '\u{2003}',
            '\u{3000}',
            '\u{061c}',
            '\u{180e}',
            '\u{2800}',
        ] {
            let s = format!("a{c}b");
            let got = shown(&s).into_owned();
            assert_eq!(got, format!("a\\u{{{:04x}}}b", c as u32), "{c:?}");
            assert!(got.is_ascii(), "{got}");
        }
        assert_eq!(shown("zone 'push': é ✓ 日本"), "zone 'push': é ✓ 日本");
    }
}
