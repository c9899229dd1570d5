//! Shell completion. `wardcell completions bash|zsh|fish` prints a small script that
//! hands each completion to `wardcell __complete`, which answers from the very clap
//! types the command line is parsed with, plus what they cannot know: the zones and
//! profiles of the user's configuration (loaded as `policy show` loads it), the built-in
//! profiles, and the run ids of the audit log directory (newest first).
//!
//! The protocol between script and client (internal; both come from this file):
//! `wardcell __complete SHELL CWORD WORD...`, where WORD... is the whole command line
//! (`wardcell` first) and CWORD the index of the word being completed. The answer is one
//! directive line, `words` or `files` (let the shell complete file names), then the
//! candidates, one a line. A configuration that does not load, a log directory that
//! cannot be read, a supervisor that does not answer: fewer candidates, never an error
//! (completion says nothing on stderr and always exits 0).

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use crate::cli::{self, Shell};
use crate::error::Error;
use crate::location::Location;

/// The hidden first argument that asks for candidates.
pub const COMPLETE: &str = "__complete";

const BASH: &str = r#"# bash completion for wardcell. Candidates come from `wardcell __complete`, which
# knows the commands, the zones and profiles of your configuration, and the run ids.
_wardcell() {
    local IFS=$'\n' out
    out=$(command "${COMP_WORDS[0]/#\~/$HOME}" __complete bash "$COMP_CWORD" "${COMP_WORDS[@]}" 2>/dev/null) || return 0
    COMPREPLY=()
    case ${out%%$'\n'*} in
    files) compopt -o default 2>/dev/null ;;
    words) [[ $out == *$'\n'* ]] && mapfile -t COMPREPLY <<<"${out#*$'\n'}" ;;
    esac
    return 0
}
complete -o nosort -F _wardcell wardcell 2>/dev/null || complete -F _wardcell wardcell
"#;

const ZSH: &str = r#"#compdef wardcell
# zsh completion for wardcell. Candidates come from `wardcell __complete`, which
# knows the commands, the zones and profiles of your configuration, and the run ids.
_wardcell() {
    local -a out
    out=("${(@f)$(${~words[1]} __complete zsh $((CURRENT - 1)) "${words[@]}" 2>/dev/null)}")
    case $out[1] in
    files) _files ;;
    words) (( $#out > 1 )) && compadd -V wardcell -- "${(@)out[2,-1]}" ;;
    esac
}
if [ "$funcstack[1]" = "_wardcell" ]; then
    _wardcell "$@"
else
    compdef _wardcell wardcell
fi
"#;

const FISH: &str = r#"# fish completion for wardcell. Candidates come from `wardcell __complete`, which
# knows the commands, the zones and profiles of your configuration, and the run ids.
function __wardcell_complete
    set -l tokens (commandline -opc)
    set -l cur (commandline -ct)
    set -l out ($tokens[1] __complete fish (count $tokens) $tokens "$cur" 2>/dev/null)
    switch "$out[1]"
        case files
            __fish_complete_path "$cur"
        case words
            test (count $out) -gt 1; and printf '%s\n' $out[2..-1]
    end
end
complete -c wardcell -f -a '(__wardcell_complete)'
"#;

/// The completion script for `shell`.
pub fn script(shell: Shell) -> &'static str {
    match shell {
        Shell::Bash => BASH,
        Shell::Zsh => ZSH,
        Shell::Fish => FISH,
    }
}

pub fn print(shell: Shell) -> Result<(), Error> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(script(shell).as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(Error::Stdout)
}

/// What the shell should offer.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    /// These words (already filtered by what is typed).
    Words(Vec<String>),
    /// File names: the shell's own completion.
    Files,
}

/// `wardcell __complete SHELL CWORD WORD...` (`args`: what follows `__complete`).
/// Always exits 0; whatever goes wrong means fewer candidates.
pub fn complete(location: &Location, args: &[OsString]) -> ExitCode {
    let words: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let (Some(shell), Some(cword)) = (
        words.first(),
        words.get(1).and_then(|c| c.parse::<usize>().ok()),
    ) else {
        return ExitCode::SUCCESS;
    };
    let line = &words[2..];
    let (line, cword) = if shell == "bash" {
        join_equals(line, cword)
    } else {
        (line.to_vec(), cword)
    };
    let answer = if *location == Location::NoZones {
        Answer::Words(Vec::new())
    } else {
        answer(location, &line, cword, shell == "bash", &Sources)
    };
    let text = match answer {
        Answer::Files => "files\n".to_string(),
        Answer::Words(w) => {
            let mut t = String::from("words\n");
            for w in w {
                t.push_str(&w);
                t.push('\n');
            }
            t
        }
    };
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
    ExitCode::SUCCESS
}

/// bash splits `--zone=wo` into `--zone`, `=`, `wo` (`=` is in COMP_WORDBREAKS): join
/// them back, and move the index of the current word with them.
fn join_equals(words: &[String], cword: usize) -> (Vec<String>, usize) {
    let mut out: Vec<String> = Vec::new();
    let mut at = None;
    let mut i = 0;
    while i < words.len() {
        let glue = words[i] == "="
            && out
                .last()
                .is_some_and(|p| p.starts_with("--") && !p.contains('='));
        if glue {
            let here = out.len() - 1;
            let last = &mut out[here];
            last.push('=');
            if i == cword {
                at = Some(here);
            }
            if let Some(value) = words.get(i + 1) {
                last.push_str(value);
                if i + 1 == cword {
                    at = Some(here);
                }
                i += 1;
            }
        } else {
            if i == cword {
                at = Some(out.len());
            }
            out.push(words[i].clone());
        }
        i += 1;
    }
    let at = at.unwrap_or(out.len());
    (out, at)
}

/// Where the values that clap does not know come from (a trait, for the unit tests).
trait Source {
    fn zones(&self, location: &Location, config: Option<&str>) -> Vec<String>;
    fn profiles(&self, config: Option<&str>) -> Vec<String>;
    fn run_ids(&self) -> Vec<String>;
}

/// The real ones: the configuration, the supervisor, the audit log directory.
struct Sources;

impl Source for Sources {
    fn zones(&self, location: &Location, config: Option<&str>) -> Vec<String> {
        match location {
            Location::Host => crate::context::load(config.map(std::path::Path::new))
                .map(|h| h.config.zones.into_iter().map(|z| z.name).collect())
                .unwrap_or_default(),
            Location::Zone { socket, .. } => crate::zones::enterable(socket),
            Location::NoZones => Vec::new(),
        }
    }

    fn profiles(&self, config: Option<&str>) -> Vec<String> {
        let mut names: Vec<String> = crate::context::load(config.map(std::path::Path::new))
            .map(|h| h.config.profiles.into_keys().collect())
            .unwrap_or_default();
        names.extend(
            wardcell_config::config::BUILTIN_AGENT_NAMES
                .iter()
                .map(|n| n.to_string()),
        );
        names.sort();
        names.dedup();
        names
    }

    fn run_ids(&self) -> Vec<String> {
        crate::logs::ids_newest_first()
    }
}

/// The candidates for word `cword` of `line` (`wardcell` first), as offered at
/// `location`. `bare`: a value typed after `--option=` is completed without that part
/// (bash replaces only what follows the `=`).
fn answer(
    location: &Location,
    line: &[String],
    cword: usize,
    bare: bool,
    src: &dyn Source,
) -> Answer {
    let mut cmd = cli::command_for(location);
    cmd.build();
    let cur = line.get(cword).map_or("", String::as_str);
    let before = &line[1.min(line.len())..cword.min(line.len())];
    let mut walk = Walk::new(&cmd);
    for w in before {
        if !walk.step(w) {
            return Answer::Files;
        }
    }
    if walk.lost || (walk.help && !walk.at.has_subcommands()) {
        return Answer::Words(Vec::new());
    }
    let filter = |words: Vec<String>, typed: &str, prefix: &str| {
        Answer::Words(
            words
                .into_iter()
                .filter(|w| w.starts_with(typed))
                .map(|w| format!("{prefix}{w}"))
                .collect(),
        )
    };
    if let Some(arg) = walk.pending {
        return values(arg, &walk, location, src).map_or(Answer::Files, |v| filter(v, cur, ""));
    }
    if !walk.after_dashes {
        if let Some((name, typed)) = cur.strip_prefix("--").and_then(|c| c.split_once('=')) {
            let prefix = if bare {
                String::new()
            } else {
                format!("--{name}=")
            };
            return match walk.at.get_arguments().find(|a| a.get_long() == Some(name)) {
                Some(arg) => values(arg, &walk, location, src)
                    .map_or(Answer::Files, |v| filter(v, typed, &prefix)),
                None => Answer::Words(Vec::new()),
            };
        }
        if cur.starts_with('-') {
            let longs = walk
                .at
                .get_arguments()
                .filter(|a| !a.is_hide_set())
                .filter_map(|a| a.get_long())
                .map(|l| format!("--{l}"))
                .collect();
            return filter(longs, cur, "");
        }
        if walk.at.has_subcommands() {
            let mut subs: Vec<String> = walk
                .at
                .get_subcommands()
                .filter(|s| !s.is_hide_set())
                .map(|s| s.get_name().to_string())
                .collect();
            subs.sort();
            return filter(subs, cur, "");
        }
    }
    match walk.positional() {
        Some(arg) => {
            values(arg, &walk, location, src).map_or(Answer::Files, |v| filter(v, cur, ""))
        }
        None => Answer::Words(Vec::new()),
    }
}

/// The command line read so far, word by word, as clap would read it.
struct Walk<'a> {
    at: &'a clap::Command,
    /// The names of the commands on the way (`["logs", "show"]`).
    path: Vec<&'a str>,
    /// An option read that waits for its value.
    pending: Option<&'a clap::Arg>,
    /// Positional arguments read in the current command.
    positionals: usize,
    after_dashes: bool,
    /// `--config FILE` on the line: the configuration the candidates come from.
    config: Option<String>,
    /// A word that is no command where one was due: nothing to offer after it.
    lost: bool,
    /// `wardcell help COMMAND...`: only command names follow.
    help: bool,
}

impl<'a> Walk<'a> {
    fn new(top: &'a clap::Command) -> Walk<'a> {
        Walk {
            at: top,
            path: Vec::new(),
            pending: None,
            positionals: 0,
            after_dashes: false,
            config: None,
            lost: false,
            help: false,
        }
    }

    /// Read one word; false once the words are the command to run (`run -- CMD ...`).
    fn step(&mut self, w: &str) -> bool {
        if let Some(arg) = self.pending.take() {
            self.took(arg, w);
            return true;
        }
        if !self.after_dashes {
            if w == "--" {
                self.after_dashes = true;
                return true;
            }
            if let Some(long) = w.strip_prefix("--") {
                let (name, value) = match long.split_once('=') {
                    Some((n, v)) => (n, Some(v)),
                    None => (long, None),
                };
                if let Some(arg) = self.at.get_arguments().find(|a| a.get_long() == Some(name)) {
                    match value {
                        Some(v) => self.took(arg, v),
                        None if arg.get_action().takes_values() => self.pending = Some(arg),
                        None => {}
                    }
                }
                return true;
            }
            if w.len() > 1 && w.starts_with('-') {
                // Short flags: only `-v`, `-h` and `-V` exist, none takes a value.
                return true;
            }
            if self.path.is_empty() && w == "help" && !self.help {
                self.help = true;
                return true;
            }
            if let Some(sub) = self.at.find_subcommand(w) {
                self.at = sub;
                self.path.push(sub.get_name());
                self.positionals = 0;
                return true;
            }
            if self.at.has_subcommands() {
                self.lost = true;
                return true;
            }
        }
        let trailing = self
            .positional()
            .is_some_and(|a| a.is_trailing_var_arg_set());
        self.positionals += 1;
        !trailing
    }

    fn took(&mut self, arg: &clap::Arg, value: &str) {
        if arg.get_id() == "file" {
            self.config = Some(value.to_string());
        }
    }

    /// The positional argument the next word is.
    fn positional(&self) -> Option<&'a clap::Arg> {
        let mut all = self.at.get_positionals();
        all.nth(self.positionals)
    }
}

/// The values `arg` takes, or None for file names.
fn values(
    arg: &clap::Arg,
    walk: &Walk<'_>,
    location: &Location,
    src: &dyn Source,
) -> Option<Vec<String>> {
    let config = walk.config.as_deref();
    let possible: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| v.get_name().to_string())
        .collect();
    if !possible.is_empty() {
        return Some(possible);
    }
    Some(match arg.get_id().as_str() {
        "zone" => src.zones(location, config),
        "profile" => src.profiles(config),
        "id" if walk.path.first() == Some(&"logs") => {
            let mut ids = vec![crate::logs::LATEST.to_string()];
            ids.extend(src.run_ids());
            ids
        }
        "category" => crate::logs::CATEGORIES
            .iter()
            .map(|c| c.to_string())
            .collect(),
        "file" | "read" | "write" | "deny" | "target" | "command" => return None,
        _ => Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fake;

    impl Source for Fake {
        fn zones(&self, _: &Location, config: Option<&str>) -> Vec<String> {
            match config {
                Some(c) => vec![format!("from-{c}")],
                None => vec!["agent".into(), "push".into()],
            }
        }
        fn profiles(&self, _: Option<&str>) -> Vec<String> {
            vec!["base".into(), "codex".into()]
        }
        fn run_ids(&self) -> Vec<String> {
            vec!["20261202T093212Z-3f9a1c2b".into()]
        }
    }

    fn ask(at: &Location, line: &str, bash: bool) -> Answer {
        let words: Vec<String> = line.split(' ').map(String::from).collect();
        let (words, cword) = if bash {
            join_equals(&words, words.len() - 1)
        } else {
            let n = words.len() - 1;
            (words, n)
        };
        answer(at, &words, cword, bash, &Fake)
    }

    fn w(list: &[&str]) -> Answer {
        Answer::Words(list.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn commands_options_and_values() {
        let host = Location::Host;
        assert_eq!(ask(&host, "wardcell lo", false), w(&["logs"]));
        assert_eq!(ask(&host, "wardcell zone ", false), w(&["list"]));
        assert_eq!(
            ask(&host, "wardcell run --zone ", false),
            w(&["agent", "push"])
        );
        assert_eq!(
            ask(&host, "wardcell run --zone=p", false),
            w(&["--zone=push"])
        );
        assert_eq!(ask(&host, "wardcell run --zone = p", true), w(&["push"]));
        assert_eq!(
            ask(&host, "wardcell run --zone =", true),
            w(&["agent", "push"])
        );
        assert_eq!(
            ask(&host, "wardcell run --config x.toml --zone ", false),
            w(&["from-x.toml"])
        );
        assert_eq!(ask(&host, "wardcell run --profile c", false), w(&["codex"]));
        assert_eq!(ask(&host, "wardcell run --read ", false), Answer::Files);
        assert_eq!(ask(&host, "wardcell run -- ", false), Answer::Files);
        assert_eq!(ask(&host, "wardcell run ls -", false), Answer::Files);
        assert_eq!(ask(&host, "wardcell run --ver", false), w(&["--verbose"]));
        assert_eq!(
            ask(&host, "wardcell policy show ", false),
            w(&["agent", "push"])
        );
        assert_eq!(
            ask(&host, "wardcell logs show ", false),
            w(&["latest", "20261202T093212Z-3f9a1c2b"])
        );
        assert_eq!(
            ask(&host, "wardcell logs show x --category p", false),
            w(&["proxy"])
        );
        assert_eq!(
            ask(&host, "wardcell logs verify 2026", false),
            w(&["20261202T093212Z-3f9a1c2b"])
        );
        assert_eq!(
            ask(&host, "wardcell completions ", false),
            w(&["bash", "zsh", "fish"])
        );
        assert_eq!(
            ask(&host, "wardcell doctor --output ", false),
            w(&["text", "json"])
        );
        assert_eq!(ask(&host, "wardcell approvals show ", false), w(&[]));
        assert_eq!(ask(&host, "wardcell bogus ", false), w(&[]));
        assert_eq!(ask(&host, "wardcell help lo", false), w(&["logs"]));
        assert_eq!(ask(&host, "wardcell help logs s", false), w(&["show"]));
        assert_eq!(ask(&host, "wardcell help logs show ", false), w(&[]));
    }

    #[test]
    fn only_what_works_where_it_runs() {
        let zone = Location::Zone {
            zone: "agent".into(),
            socket: "/nonexistent".into(),
        };
        assert_eq!(ask(&zone, "wardcell ", false), w(&["completions", "zone"]));
        assert_eq!(
            ask(&zone, "wardcell zone enter ", false),
            w(&["agent", "push"])
        );
        assert_eq!(
            ask(&zone, "wardcell zone enter push ", false),
            Answer::Files
        );
        assert_eq!(
            ask(&Location::Host, "wardcell ", false),
            w(&[
                "approvals",
                "completions",
                "doctor",
                "logs",
                "policy",
                "run",
                "zone"
            ])
        );
    }

    #[test]
    fn each_script_calls_back() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            assert!(script(shell).contains("__complete"), "{shell:?}");
        }
        assert!(BASH.contains("complete -F _wardcell wardcell"));
    }
}
