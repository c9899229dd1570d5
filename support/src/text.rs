//! Text shown to a person that only the client and the approval plugin write: a
//! command's words as a shell would need them typed. What the broker shows too
//! (`shown`) is `wardcell_common::text`.

use std::borrow::Cow;
use std::fmt::Write as _;

use wardcell_common::text;

/// A command's words as a shell would need them typed: a word of only safe characters
/// as it is, any other in single quotes, and one with a character [`text::shown`] escapes in
/// `$'...'` with that character written out (`$'a\u202eb'`); an empty word is `''`.
/// Where one word ends and the next begins is never in doubt, and nothing in the text
/// can start a line or reorder what a terminal shows.
pub fn shell_words<S: AsRef<str>>(argv: &[S]) -> String {
    let mut out = String::new();
    for (i, w) in argv.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(&shell_word(w.as_ref()));
    }
    out
}

/// One word quoted for a shell (see [`shell_words`]).
pub fn shell_word(w: &str) -> Cow<'_, str> {
    let safe = |c: char| c.is_ascii_alphanumeric() || "@%+=:,./-_".contains(c);
    if !w.is_empty() && w.chars().all(safe) {
        return Cow::Borrowed(w);
    }
    if !w.chars().any(text::escaped) {
        return Cow::Owned(format!("'{}'", w.replace('\'', "'\\''")));
    }
    let mut out = String::from("$'");
    for c in w.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\'' => out.push_str("\\'"),
            '\\' => out.push_str("\\\\"),
            c if text::escaped(c) && (c as u32) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if text::escaped(c) && (c as u32) < 0x10000 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if text::escaped(c) => {
                let _ = write!(out, "\\U{:08x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('\'');
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_as_a_shell_needs_them() {
        assert_eq!(
            shell_words(&["git", "push", "origin", "main"]),
            "git push origin main"
        );
        assert_eq!(
            shell_words(&["sh", "-c", "echo a b", "", "it's"]),
            "sh -c 'echo a b' '' 'it'\\''s'"
        );
        // Two words that join to look like one, and one that looks like two.
        assert_ne!(shell_words(&["a b"]), shell_words(&["a", "b"]));
        assert_eq!(
            shell_words(&["x\u{202e}y", "a\nb", "\u{e0041}"]),
            "$'x\\u202ey' $'a\\nb' $'\\U000e0041'"
        );
        assert_eq!(shell_words(&["a'\u{200b}\\"]), "$'a\\'\\u200b\\\\'");
        assert!(shell_words(&["rm", "-rf", "$HOME", "*"]).ends_with("'$HOME' '*'"));
    }
}
