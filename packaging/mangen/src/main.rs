//! `wardcell-mangen OUT_DIR`: writes wardcell's section 1 manual pages, one for the client
//! and one for each command (`wardcell-zone-enter.1`, ...), from the very clap types the
//! client parses its command line with. `packaging/build` runs it; the packages install
//! what it writes. `wardcell-zones.toml(5)` is written by hand (packaging/man/).
//!
//! Why a program of its own, not a build script of the client: a build script runs on
//! every build and would compile clap a second time, for the host, in every build of
//! the client. This crate builds with the workspace (clap_mangen and roff are small) and
//! runs only when packages are made.
//!
//! The client is a binary crate, so its command line is taken in here by path: the
//! client's `cli.rs` and the `location.rs` it names. If `cli.rs` comes to use another of
//! the client's modules, include that one here too.
#![forbid(unsafe_code)]

use std::io::Write;
use std::path::{Path, PathBuf};

#[allow(dead_code)]
#[path = "../../../wardcell/src/cli.rs"]
mod cli;
#[allow(dead_code)]
#[path = "../../../wardcell/src/location.rs"]
mod location;

use clap::CommandFactory;

mod markdown;
mod prose;

/// What the client's own page says beyond its options and its prose (prose.rs): where
/// each command works (after the commands), and the files it reads and writes.
const CLIENT_EXTRA: &str = r#".SH "WHERE COMMANDS WORK"
On the host: \fBrun\fR, \fBpolicy\fR (\fBcheck\fR, \fBshow\fR, \fBwhy\fR), \fBzone list\fR,
\fBlogs\fR, \fBapprovals\fR, \fBdoctor\fR, \fBcompletions\fR.
Inside a sandbox started in a zone: \fBzone list\fR, \fBzone current\fR,
\fBzone enter\fR, \fBzone why\fR, \fBzone denials\fR, \fBcompletions\fR.
Inside a run started with \fBrun \-\-profile\fR: none.
\fB\-\-help\fR lists only what works where it runs; any other command is refused,
before it does anything, with one line saying why and what to use instead.
"#;

/// The client's FILES, after its ENVIRONMENT.
const CLIENT_FILES: &str = r#".SH FILES
.TP
\fI$XDG_CONFIG_HOME/wardcell/zones.toml\fR (default \fI~/.config/wardcell/zones.toml\fR)
The user's configuration, read first unless \fB\-\-config\fR names a file.
.TP
\fI/etc/wardcell/zones.toml\fR
The machine's configuration, read when the user has none. A file holding only
comments (as installed) is no configuration: the built-in default is used.
.TP
\fI$XDG_STATE_HOME/wardcell/runs/\fR (default \fI~/.local/state/wardcell/runs/\fR)
One audit log per run, JSON Lines, hash-chained; see \fBwardcell logs\fR.
.TP
\fI$XDG_STATE_HOME/wardcell/approvals/\fR
The queue of zone entries waiting for a person (\fBwardcell approvals\fR).
.TP
\fI/usr/libexec/wardcell/\fR
The helpers: \fBwardcell\-broker\fR, \fBwardcell\-shim\fR, \fBwardcell\-proxy\fR,
\fBwardcell\-approve\fR. A build tree's helpers are found next to \fBwardcell\fR instead;
never through \fBPATH\fR.
.TP
\fI/etc/apparmor.d/wardcell\fR
The AppArmor profile that lets wardcell create user namespaces where
\fBkernel.apparmor_restrict_unprivileged_userns\fR is 1 (Ubuntu 24.04 and later).
"#;

/// Every page: (file name, roff text), for the client and each command under it. A
/// command without its prose in prose.rs is an error.
fn pages() -> Result<Vec<(String, Vec<u8>)>, String> {
    let mut cmd = cli::Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut out = Vec::new();
    collect(&cmd, "wardcell", &mut out)?;
    Ok(out)
}

fn collect(
    cmd: &clap::Command,
    path: &str,
    out: &mut Vec<(String, Vec<u8>)>,
) -> Result<(), String> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        collect(sub, &format!("{path} {}", sub.get_name()), out)?;
    }
    out.push(page(cmd, path)?);
    Ok(())
}

/// roff text for a name: `-` as `\-`.
fn esc(s: &str) -> String {
    s.replace('-', "\\-")
}

/// One page: NAME, SYNOPSIS (with every option's value), DESCRIPTION, OPTIONS and
/// SUBCOMMANDS from clap; EXIT STATUS, ENVIRONMENT, EXAMPLES and SEE ALSO from prose.rs.
fn page(cmd: &clap::Command, path: &str) -> Result<(String, Vec<u8>), String> {
    let man = clap_mangen::Man::new(cmd.clone())
        .manual("wardcell")
        .source(format!("wardcell {}", env!("CARGO_PKG_VERSION")));
    let file = man.get_filename();
    let stem = file.trim_end_matches(".1");
    let prose = prose::ALL
        .iter()
        .find(|p| p.page == stem)
        .ok_or_else(|| format!("no prose for {stem} in packaging/mangen/src/prose.rs"))?;
    let mut text = rendered(|w| man.render_title(w), true);
    text += &rendered(|w| man.render_name_section(w), false);
    text += &synopsis(cmd, path);
    text += ".SH DESCRIPTION\n";
    text += prose.description;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        text += &rendered(|w| man.render_options_section(w), false);
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        text += &rendered(|w| man.render_subcommands_section(w), false);
    }
    if path == "wardcell" {
        text += CLIENT_EXTRA;
    }
    text += ".SH \"EXIT STATUS\"\n";
    text += prose.exit;
    text += ".SH ENVIRONMENT\n";
    text += prose.environment.trim_start_matches('\n');
    if path == "wardcell" {
        text += CLIENT_FILES;
    }
    text += ".SH EXAMPLES\n";
    text += prose.examples;
    let mut see: Vec<String> = Vec::new();
    if path != "wardcell" {
        see.push("\\fBwardcell\\fR(1)".to_string());
    }
    for p in prose.see_also {
        see.push(format!("\\fB{}\\fR(1)", esc(p)));
    }
    see.push("\\fBwardcell\\-zones.toml\\fR(5)".to_string());
    text += &format!(".SH \"SEE ALSO\"\n{}\n", see.join(",\n"));
    Ok((file, text.into_bytes()))
}

/// What one of clap_mangen's section writers writes, without the string definitions it
/// puts before each part but the first (`first`).
fn rendered(write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>, first: bool) -> String {
    let mut out = Vec::new();
    write(&mut out).expect("writing to a Vec");
    let text = String::from_utf8(out).expect("roff is UTF-8");
    text.lines()
        .filter(|l| first || !(l.starts_with(".ie \\n(.g .ds Aq") || l.starts_with(".el .ds Aq")))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// SYNOPSIS: the command's path, its options each with its value's name (or its
/// values), then its positional arguments or its subcommand.
fn synopsis(cmd: &clap::Command, path: &str) -> String {
    let mut line = format!("\\fB{}\\fR", esc(path));
    let shown =
        |a: &&clap::Arg| !a.is_hide_set() && !matches!(a.get_id().as_str(), "help" | "version");
    for a in cmd
        .get_arguments()
        .filter(shown)
        .filter(|a| !a.is_positional())
    {
        let mut item = match (a.get_short(), a.get_long()) {
            (Some(c), Some(l)) => format!("\\fB\\-{c}\\fR|\\fB\\-\\-{}\\fR", esc(l)),
            (None, Some(l)) => format!("\\fB\\-\\-{}\\fR", esc(l)),
            (Some(c), None) => format!("\\fB\\-{c}\\fR"),
            (None, None) => continue,
        };
        if a.get_action().takes_values() {
            let values: Vec<String> = a
                .get_possible_values()
                .iter()
                .filter(|v| !v.is_hide_set())
                .map(|v| format!("\\fB{}\\fR", esc(v.get_name())))
                .collect();
            if values.is_empty() {
                item += &format!(" \\fI{}\\fR", value_name(a));
            } else {
                item += &format!(" {}", values.join("|"));
            }
        }
        if matches!(a.get_action(), clap::ArgAction::Append) {
            item += " ...";
        }
        line += &if a.is_required_set() {
            format!(" {item}")
        } else {
            format!(" [{item}]")
        };
    }
    for a in cmd
        .get_arguments()
        .filter(shown)
        .filter(|a| a.is_positional())
    {
        let name = format!("\\fI{}\\fR", value_name(a));
        line += &match (a.is_required_set(), a.is_trailing_var_arg_set()) {
            (_, true) => format!(" [\\fB\\-\\-\\fR] {name} [\\fIARG\\fR ...]"),
            (true, false) => format!(" {name}"),
            (false, false) => format!(" [{name}]"),
        };
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        line += " \\fICOMMAND\\fR";
    }
    format!(".SH SYNOPSIS\n{line}\n")
}

fn value_name(a: &clap::Arg) -> String {
    a.get_value_names()
        .and_then(|v| v.first())
        .map_or_else(|| a.get_id().as_str().to_uppercase(), |v| v.to_string())
}

fn write_all(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    for (name, text) in pages().map_err(std::io::Error::other)? {
        let path = dir.join(name);
        let mut f = std::fs::File::create(&path)?;
        f.write_all(&text)?;
        f.sync_all()?;
        written.push(path);
    }
    Ok(written)
}

fn main() -> std::process::ExitCode {
    // `--markdown PAGE`: the page as Markdown on stdout (docs/CONFIGURATION.md is
    // `--markdown packaging/man/wardcell-zones.toml.5`; a test keeps them equal).
    let all: Vec<_> = std::env::args().skip(1).collect();
    if let [flag, page] = &all[..] {
        if flag == "--markdown" {
            return match std::fs::read_to_string(page)
                .map_err(|e| e.to_string())
                .and_then(|text| markdown::from_roff(&text, page))
            {
                Ok(md) => {
                    print!("{md}");
                    0.into()
                }
                Err(e) => {
                    eprintln!("error: {page}: {e}");
                    1.into()
                }
            };
        }
    }
    let mut args = std::env::args_os().skip(1);
    let (Some(dir), None) = (args.next(), args.next()) else {
        eprintln!("error: usage: wardcell-mangen OUT_DIR; it writes the section 1 pages there");
        return 2.into();
    };
    match write_all(Path::new(&dir)) {
        Ok(pages) => {
            for p in pages {
                println!("{}", p.display());
            }
            0.into()
        }
        Err(e) => {
            eprintln!(
                "error: writing manual pages in {}: {e}; check that the directory is writable",
                Path::new(&dir).display()
            );
            1.into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page for the client and for each command a user types, and `man` reads each
    /// without a warning (groff's own check, where groff is installed), and so does the
    /// hand-written wardcell-zones.toml(5).
    #[test]
    fn a_page_per_command_that_man_renders() {
        let dir = std::env::temp_dir().join(format!("wardcell-mangen-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let written = write_all(&dir).unwrap();
        let names: Vec<String> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        for page in [
            "wardcell.1",
            "wardcell-run.1",
            "wardcell-zone.1",
            "wardcell-zone-enter.1",
            "wardcell-zone-list.1",
            "wardcell-policy-check.1",
            "wardcell-logs-show.1",
            "wardcell-approvals-watch.1",
            "wardcell-doctor.1",
            "wardcell-completions.1",
        ] {
            assert!(names.iter().any(|n| n == page), "no {page} in {names:?}");
        }
        // Every page has every section, and its SYNOPSIS names each option's value.
        for path in &written {
            let name = path.file_name().unwrap().to_string_lossy();
            let text = std::fs::read_to_string(path).unwrap();
            for section in [
                ".SH SYNOPSIS",
                ".SH DESCRIPTION",
                ".SH OPTIONS",
                ".SH \"EXIT STATUS\"",
                ".SH ENVIRONMENT",
                ".SH EXAMPLES",
                ".SH \"SEE ALSO\"",
            ] {
                assert_eq!(text.matches(section).count(), 1, "{name}: {section}");
            }
            let synopsis = text.split(".SH SYNOPSIS\n").nth(1).unwrap();
            let synopsis = synopsis.lines().next().unwrap();
            assert!(!synopsis.contains('<'), "{name}: {synopsis}");
            if name == "wardcell-run.1" {
                for want in [
                    "\\-\\-zone\\fR \\fIZONE",
                    "\\-\\-allow\\fR \\fIHOST:PORT\\fR ...",
                ] {
                    assert!(synopsis.contains(want), "{synopsis}");
                }
            }
        }
        let top = std::fs::read_to_string(dir.join("wardcell.1")).unwrap();
        assert!(top.contains(".SH FILES") && top.contains("wardcell\\-zones.toml"));
        let run = std::fs::read_to_string(dir.join("wardcell-run.1")).unwrap();
        assert!(run.contains("\\-\\-zone"), "{run}");
        let show = std::fs::read_to_string(dir.join("wardcell-logs-show.1")).unwrap();
        assert!(
            show.contains("\\fB\\-\\-output\\fR \\fBtext\\fR|\\fBjson\\fR|\\fBjsonl\\fR"),
            "{show}"
        );
        let by_hand = Path::new(env!("CARGO_MANIFEST_DIR")).join("../man/wardcell-zones.toml.5");
        if std::process::Command::new("groff")
            .arg("-v")
            .output()
            .is_ok()
        {
            for page in written.iter().chain([&by_hand]) {
                let o = std::process::Command::new("groff")
                    .args(["-man", "-ww", "-z", "-Tutf8"])
                    .arg(page)
                    .output()
                    .unwrap();
                assert!(o.status.success(), "{}", page.display());
                assert_eq!(String::from_utf8_lossy(&o.stderr), "", "{}", page.display());
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The exit codes the pages give are README's: each code README lists for a relayed
    /// command is on the pages of `run` and `zone enter`, and no page gives another.
    #[test]
    fn exit_statuses_agree_with_the_readme() {
        let readme =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
                .unwrap();
        let sentence = readme
            .split("Exit codes: ")
            .nth(1)
            .and_then(|r| r.split("Every error").next())
            .expect("README says `Exit codes: ...`");
        for code in [
            "128+N",
            "1 for a refusal",
            "2 for a usage error",
            "124",
            "126",
            "127",
        ] {
            assert!(sentence.contains(code), "README: {sentence}");
        }
        for p in prose::ALL {
            if matches!(p.page, "wardcell" | "wardcell-run" | "wardcell-zone-enter") {
                for code in [
                    "128+",
                    "1 for a refusal",
                    "2 for a usage",
                    "124 ",
                    "126 ",
                    "127 ",
                ] {
                    assert!(
                        p.exit.replace('\n', " ").contains(code),
                        "{}: {code}",
                        p.page
                    );
                }
            }
            let words = p.exit.replace('\n', " ");
            for n in words
                .split(|c: char| !c.is_ascii_digit())
                .filter(|w| !w.is_empty())
            {
                assert!(
                    ["0", "1", "2", "124", "126", "127", "128"].contains(&n),
                    "{}: exit status {n} is not one README lists",
                    p.page
                );
            }
        }
    }
}
