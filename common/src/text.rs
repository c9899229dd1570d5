//! Text that must stay on one line: a message that carries a name or a command a sandbox or
//! a configuration chose.

use std::borrow::Cow;

/// `s` with every control character written as an escape (`\n`, `\r`, `\t`, `\x1b`,
/// `\u{9b}`), so that it prints as one line and sends nothing to a terminal but text.
pub fn one_line(s: &str) -> Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() && (c as u32) < 0x80 => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        assert!(matches!(one_line("plain `git` – ok"), Cow::Borrowed(_)));
        assert_eq!(
            one_line("a\nb\r\tc\x1b[2J\u{9b}d\x7f"),
            "a\\nb\\r\\tc\\x1b[2J\\u{9b}d\\x7f"
        );
        assert!(!one_line("x\ny\u{85}z").contains(['\n', '\u{85}']));
    }
}
