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

/// What the client's own page says beyond its options: where each command works, the
/// files it reads and writes, the environment, the exit status, and the other pages.
const CLIENT_EXTRA: &str = r#".SH "WHERE COMMANDS WORK"
On the host: \fBrun\fR, \fBpolicy\fR (\fBcheck\fR, \fBshow\fR, \fBwhy\fR), \fBzone list\fR,
\fBlogs\fR, \fBapprovals\fR, \fBdoctor\fR, \fBcompletions\fR.
Inside a sandbox started in a zone: \fBzone list\fR, \fBzone current\fR,
\fBzone enter\fR, \fBzone why\fR, \fBzone denials\fR, \fBcompletions\fR.
Inside a run started with \fBrun \-\-profile\fR: none.
\fB\-\-help\fR lists only what works where it runs; any other command is refused,
before it does anything, with one line saying why and what to use instead.
.SH FILES
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
.SH ENVIRONMENT
.TP
\fBWARDCELL_SANDBOX\fR, \fBWARDCELL_ZONE\fR, \fBWARDCELL_ZONE_SOCKET\fR
Set inside every sandbox (the last two in a zone); they choose which commands are
offered. They are a convenience, not a boundary.
.TP
\fBXDG_CONFIG_HOME\fR, \fBXDG_STATE_HOME\fR, \fBXDG_RUNTIME_DIR\fR
Where the configuration, the audit logs and the runs' sockets are.
.SH "EXIT STATUS"
A relayed command's own status (128+N when signal N ended it); 1 for a refusal or a
wardcell error; 2 for a usage error; 124 when the profile's time limit
(\fBlimits.time\fR) ended the command; 126 when the command is not executable; 127 when
it is not found.
"#;

const SEE_ALSO: &str = ".SH \"SEE ALSO\"\n\\fBwardcell\\fR(1), \\fBwardcell\\-zones.toml\\fR(5)\n";

/// Every page: (file name, roff text), for the client and each command under it.
fn pages() -> Vec<(String, Vec<u8>)> {
    let mut cmd = cli::Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut out = Vec::new();
    collect(&cmd, true, &mut out);
    out
}

fn collect(cmd: &clap::Command, top: bool, out: &mut Vec<(String, Vec<u8>)>) {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        collect(sub, false, out);
    }
    let man = clap_mangen::Man::new(cmd.clone())
        .manual("wardcell")
        .source(format!("wardcell {}", env!("CARGO_PKG_VERSION")));
    let mut text = Vec::new();
    man.render(&mut text).expect("writing to a Vec");
    if top {
        text.extend_from_slice(CLIENT_EXTRA.as_bytes());
    }
    text.extend_from_slice(SEE_ALSO.as_bytes());
    out.push((man.get_filename(), text));
}

fn write_all(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    for (name, text) in pages() {
        let path = dir.join(name);
        let mut f = std::fs::File::create(&path)?;
        f.write_all(&text)?;
        f.sync_all()?;
        written.push(path);
    }
    Ok(written)
}

fn main() -> std::process::ExitCode {
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
        let top = std::fs::read_to_string(dir.join("wardcell.1")).unwrap();
        assert!(top.contains(".SH FILES") && top.contains("wardcell\\-zones.toml"));
        let run = std::fs::read_to_string(dir.join("wardcell-run.1")).unwrap();
        assert!(run.contains("\\-\\-zone"), "{run}");
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
}
