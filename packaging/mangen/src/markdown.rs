//! `wardcell-zones.toml(5)` as Markdown: `docs/CONFIGURATION.md` is made from the manual
//! page, so the configuration reference has one source (the page, written by hand) and
//! the two never disagree. A test fails when the committed file is not what the page
//! makes now; `cargo run -p wardcell-mangen -- --markdown
//! packaging/man/wardcell-zones.toml.5 > docs/CONFIGURATION.md` writes it again.
//!
//! Only the man macros and escapes the page uses are known; any other is an error, so
//! that a new one is taught here rather than dropped from the document.

/// The page's roff, as Markdown. `Err` names the first line this does not understand.
pub fn from_roff(page: &str, source: &str) -> Result<String, String> {
    let mut out = format!(
        "<!-- Made from {source} by wardcell-mangen (packaging/mangen/src/markdown.rs): edit the page, then run `cargo run -p wardcell-mangen -- --markdown {source} > docs/CONFIGURATION.md`. -->\n"
    );
    let mut example = false;
    // Inside a `.TP` item or a bullet: text lines are indented under it.
    let mut item = false;
    // The next text line is a `.TP` item's tag.
    let mut tag = false;
    for (n, line) in page.lines().enumerate() {
        let bad = |why: &str| format!("{source}:{}: {why}: {line}", n + 1);
        if example {
            if line == ".EE" {
                out.push_str("```\n");
                example = false;
            } else {
                out.push_str(&escapes(line).map_err(|e| bad(&e))?);
                out.push('\n');
            }
            continue;
        }
        if line.starts_with(".\\\"") || line == "." {
            continue;
        }
        let Some(request) = line.strip_prefix('.') else {
            let text = inline(line).map_err(|e| bad(&e))?;
            if tag {
                out.push_str(&format!("\n- {text}\n\n"));
                tag = false;
            } else {
                push_text(&mut out, &text, item);
            }
            continue;
        };
        let (name, args) = request.split_once(' ').unwrap_or((request, ""));
        let args = words(args);
        match name {
            "TH" => {
                let title = args.first().map(|t| t.to_lowercase()).unwrap_or_default();
                let section = args.get(1).cloned().unwrap_or_default();
                let title = escapes(&title).map_err(|e| bad(&e))?;
                out.push_str(&format!("\n# {title}({section})\n"));
            }
            "SH" | "SS" => {
                let level = if name == "SH" { "##" } else { "###" };
                let heading = escapes(&args.join(" ")).map_err(|e| bad(&e))?;
                out.push_str(&format!("\n{level} {heading}\n\n"));
                item = false;
            }
            "PP" => {
                out.push('\n');
                item = false;
            }
            "TP" => {
                tag = true;
                item = true;
            }
            "IP" => {
                let mark = args.first().map(String::as_str).unwrap_or("");
                if mark != "\\(bu" {
                    return Err(bad("only bullets (.IP \\(bu) are known"));
                }
                out.push_str("\n- ");
                item = true;
            }
            "EX" => {
                out.push_str("\n```toml\n");
                example = true;
            }
            "B" | "I" | "BR" | "RB" | "IR" | "RI" | "BI" | "IB" => {
                let text = fonts(name, &args).map_err(|e| bad(&e))?;
                if tag {
                    out.push_str(&format!("\n- {text}\n\n"));
                    tag = false;
                } else {
                    push_text(&mut out, &text, item);
                }
            }
            _ => return Err(bad("a request this converter does not know")),
        }
    }
    if example {
        return Err(format!("{source}: .EX without .EE"));
    }
    // One blank line between blocks, and the file ends with one newline.
    let mut tidy = String::with_capacity(out.len());
    for l in out.lines() {
        let l = l.trim_end();
        if l.is_empty() && (tidy.ends_with("\n\n") || tidy.is_empty()) {
            continue;
        }
        tidy.push_str(l);
        tidy.push('\n');
    }
    Ok(tidy.trim_end().to_string() + "\n")
}

/// A line of running text, joined to the paragraph (indented inside an item).
fn push_text(out: &mut String, text: &str, item: bool) {
    if !out.ends_with('\n') && !out.ends_with("- ") {
        out.push('\n');
    }
    if item && out.ends_with('\n') {
        out.push_str("  ");
    }
    out.push_str(text);
    out.push('\n');
}

/// A request's arguments: words, or "quoted words" (`""` inside is a quote).
fn words(args: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = args.chars().peekable();
    loop {
        while chars.peek() == Some(&' ') {
            chars.next();
        }
        let Some(&c) = chars.peek() else { break };
        let mut word = String::new();
        if c == '"' {
            chars.next();
            while let Some(c) = chars.next() {
                if c == '"' {
                    if chars.peek() == Some(&'"') {
                        chars.next();
                        word.push('"');
                        continue;
                    }
                    break;
                }
                word.push(c);
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ' ' {
                    break;
                }
                word.push(c);
                chars.next();
            }
        }
        out.push(word);
    }
    out
}

/// `.B`, `.BR` and the other font requests: each argument in its font in turn, joined
/// without spaces (`.B` and `.I` join theirs with spaces).
fn fonts(name: &str, args: &[String]) -> Result<String, String> {
    let font = |f: char, text: &str| -> Result<String, String> {
        let text = escapes(text)?;
        Ok(match f {
            'B' if !text.is_empty() => format!("`{text}`"),
            'I' if !text.is_empty() => format!("*{}*", plain(&text)),
            _ => plain(&text),
        })
    };
    if name.len() == 1 {
        let f = name.chars().next().unwrap_or('R');
        return font(f, &args.join(" "));
    }
    let order: Vec<char> = name.chars().collect();
    let mut out = String::new();
    for (i, a) in args.iter().enumerate() {
        out.push_str(&font(order[i % 2], a)?);
    }
    Ok(out)
}

/// Running text with `\fB...\fR` and `\fI...\fR` in it.
fn inline(line: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = line;
    while let Some(at) = rest.find("\\f") {
        out.push_str(&plain(&escapes(&rest[..at])?));
        let f = rest[at + 2..]
            .chars()
            .next()
            .ok_or("a font escape without its font")?;
        rest = &rest[at + 3..];
        match f {
            'B' | 'I' => {
                let end = rest.find("\\f").ok_or("a font not set back")?;
                let text = escapes(&rest[..end])?;
                out.push_str(&if f == 'B' {
                    format!("`{text}`")
                } else {
                    format!("*{}*", plain(&text))
                });
                rest = &rest[end + 2..];
                let back = rest.chars().next().ok_or("a font not set back")?;
                if back != 'R' && back != 'P' {
                    return Err(format!("\\f{f} set back with \\f{back}"));
                }
                rest = &rest[1..];
            }
            'R' | 'P' => {}
            other => return Err(format!("the font \\f{other}")),
        }
    }
    out.push_str(&plain(&escapes(rest)?));
    Ok(out)
}

/// Text outside code, with what Markdown would read as emphasis or a tag escaped.
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '_' | '<' | '[' | ']' | '`') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The character escapes the page uses.
fn escapes(text: &str) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('-') => out.push('-'),
            Some('&') => {}
            Some('e') | Some('\\') => out.push('\\'),
            Some('(') => {
                let name: String = chars.by_ref().take(2).collect();
                out.push_str(match name.as_str() {
                    "ti" => "~",
                    "dq" => "\"",
                    "lq" => "\u{201c}",
                    "rq" => "\u{201d}",
                    "bu" => "\u{2022}",
                    "em" => "\u{2014}",
                    "aq" => "'",
                    other => return Err(format!("the character \\({other}")),
                });
            }
            Some(other) => return Err(format!("the escape \\{other}")),
            None => return Err("a line ending in a backslash".into()),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../man/wardcell-zones.toml.5");
    const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/CONFIGURATION.md");

    /// docs/CONFIGURATION.md is what the manual page makes now.
    #[test]
    fn the_configuration_doc_is_made_from_the_manual_page() {
        let page = std::fs::read_to_string(PAGE).unwrap();
        let made = from_roff(&page, "packaging/man/wardcell-zones.toml.5").unwrap();
        let doc = std::fs::read_to_string(DOC).unwrap_or_default();
        assert!(
            doc == made,
            "docs/CONFIGURATION.md is not what packaging/man/wardcell-zones.toml.5 makes: run `cargo run -p wardcell-mangen -- --markdown packaging/man/wardcell-zones.toml.5 > docs/CONFIGURATION.md`"
        );
        // Every key the page documents is in the document, as code.
        for key in [
            "enter_from",
            "network.internal",
            "max_log_kib",
            "unix_sockets",
        ] {
            assert!(made.contains(&format!("`{key}`")), "{key}");
        }
    }

    #[test]
    fn fonts_escapes_and_items() {
        let md = from_roff(
            ".TH X 5\n.SH \"A B\"\n.TP\n\\fBkey\\fR = \"\\fIV\\fR\"\nText \\(ti/x *and*\n.BR a\\- .\n.IP \\(bu 2\nOne.\n.EX\nk = \"\\-\"\n.EE\n",
            "t",
        )
        .unwrap();
        assert!(md.contains("# x(5)"), "{md}");
        assert!(md.contains("## A B"), "{md}");
        assert!(md.contains("- `key` = \"*V*\""), "{md}");
        assert!(md.contains("  Text ~/x \\*and\\*\n  `a-`.\n"), "{md}");
        assert!(
            md.contains("\n- \u{2022} 2\n") || md.contains("\n- One."),
            "{md}"
        );
        assert!(md.contains("```toml\nk = \"-\"\n```"), "{md}");
        assert!(from_roff(".XY z\n", "t").unwrap_err().contains("t:1:"));
        assert!(from_roff("\\(zz\n", "t").is_err());
    }
}
