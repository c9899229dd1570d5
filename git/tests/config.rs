//! wardcell reads git's configuration files as the real git does (issue 35, item 3): on
//! generated inputs (several sections on a line, lone carriage returns, continuation
//! lines, quoted subsections with escapes, comments, values with quotes, includes and
//! `includeIf`), `wardcell_git::config::parse` lists exactly what `git config
//! --list -z --no-includes` lists, and refuses exactly what git refuses.

use std::process::Command;

use wardcell_git::config::{parse, Entry};

/// Pieces a generated file is made of: what a hostile config would use to hide a key.
const PIECES: &[&str] = &[
    "[core]",
    "[user]",
    "[user][core]",
    "[Core]",
    "[a \"Sub\"]",
    "[a \"q\\\"x\"]",
    "[a \"b\\\\c\"]",
    "[a.B]",
    "[a \"x\" ]",
    "[a  \"y\"]",
    "[include]",
    "[includeIf \"gitdir:/x/\"]",
    "fsmonitor = touch x",
    "hooksPath=/h",
    "k = v",
    "k=v",
    "\tK = \"q ; x\"",
    "k = v # c",
    "k = v ; c",
    "k = a\\\n b",
    "k = a\\",
    "k = \"a\\tb\\n\\\\\"",
    "k = \"open",
    "k = \\q",
    "path = ../x",
    "k",
    "k ",
    "k\t= v ",
    "k = \"\" ",
    "-k = v",
    "k-1 = v",
    "1k = v",
    "\r",
    "\n",
    "\r\n",
    " ",
    "\t",
    ";c",
    "#c",
    "[",
    "]",
    "\"",
    "\\",
    "=",
    "[]",
    "[a b]",
    "\u{feff}",
    "k = v\r",
    "k = x\ry",
    "[a]\r",
    "  [core]  ",
    "[a \"\r\"]",
    "k = \"a\nb\"",
];

/// A small deterministic generator (xorshift): the same inputs on every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// What git lists for `text`, or None when it refuses the file.
fn git_list(text: &[u8], dir: &std::path::Path) -> Option<Vec<Entry>> {
    let file = dir.join("config");
    std::fs::write(&file, text).unwrap();
    let out = Command::new("git")
        .args(["config", "--file"])
        .arg(&file)
        .args(["--list", "-z", "--no-includes"])
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .expect("git");
    if !out.status.success() {
        return None;
    }
    let entries = out.stdout.split(|&b| b == 0).filter(|e| !e.is_empty());
    Some(
        entries
            .map(|e| match e.iter().position(|&b| b == b'\n') {
                Some(i) => Entry {
                    key: String::from_utf8_lossy(&e[..i]).into_owned(),
                    value: Some(e[i + 1..].to_vec()),
                },
                None => Entry {
                    key: String::from_utf8_lossy(e).into_owned(),
                    value: None,
                },
            })
            .collect(),
    )
}

#[test]
fn parsed_as_git_parses_it() {
    if Command::new("git").arg("--version").output().is_err() {
        panic!("git is needed for this test (.ci/run installs it)");
    }
    let dir = std::env::temp_dir().join(format!("wardcell-gitconfig-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let (mut agreed, mut refused) = (0, 0);
    for case in 0..600 {
        let mut text = String::new();
        for _ in 0..1 + rng.below(10) {
            text.push_str(PIECES[rng.below(PIECES.len())]);
            if rng.below(3) > 0 {
                text.push('\n');
            }
        }
        let ours = parse(text.as_bytes());
        match git_list(text.as_bytes(), &dir) {
            Some(theirs) => {
                assert_eq!(ours.as_ref().ok(), Some(&theirs), "case {case}: {text:?}");
                agreed += 1;
            }
            None => {
                assert!(
                    ours.is_err(),
                    "case {case}: git refuses {text:?}, we read {ours:?}"
                );
                refused += 1;
            }
        }
    }
    // Both kinds of input were tried, plenty of each.
    assert!(
        agreed > 100 && refused > 100,
        "{agreed} read, {refused} refused"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
