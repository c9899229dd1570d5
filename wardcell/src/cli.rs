//! The command line: clap's derive types, and the command offered at each location.
//!
//! One set of types describes every command; [`command_for`] hides what does not work
//! where wardcell runs, so `--help` lists only what works here. A hidden command is
//! refused by [`crate::location::refusal`] before clap parses anything.
//!
//! packaging/mangen includes this file (and `location.rs`) by path to write the manual
//! pages: a `crate::` module used here must be included there too.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

use crate::location::Location;

#[derive(Parser, Debug)]
#[command(
    name = "wardcell",
    version,
    about = "Run a command, typically a coding agent, in a sandbox whose permissions come from a named zone",
    disable_help_subcommand = true,
    after_help = "`wardcell help COMMAND` or `wardcell COMMAND --help` prints a command's help, on the host and in a sandbox."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a command in a new sandbox, in the default zone unless --zone or --profile says otherwise
    Run(RunArgs),
    /// Check the configuration, or show what it resolves to
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// List zones, show the current one, or run a command in another
    #[command(subcommand)]
    Zone(ZoneCommand),
    /// Read the runs' audit logs, and verify them
    #[command(subcommand)]
    Logs(LogsCommand),
    /// Answer the zone entries waiting for a person's approval (the wardcell-approve plugin)
    #[command(subcommand)]
    Approvals(ApprovalsCommand),
    /// Check whether this machine can run wardcell's sandboxes, and where things are
    Doctor {
        #[command(flatten)]
        config: ConfigArg,
        /// text for people, or json (`--json` for short): one JSON document (schema: docs/OUTPUT.md)
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Print the shell completion script for bash, zsh or fish
    Completions {
        #[arg(value_enum, value_name = "SHELL")]
        shell: Shell,
    },
}

/// The shells `wardcell completions` writes for (the packages install all three).
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Start in this zone instead of the default one
    #[arg(long, value_name = "ZONE", conflicts_with = "profile")]
    pub zone: Option<String>,
    /// Run under this profile, outside any zone (no zone commands work inside)
    #[arg(long, value_name = "PROFILE")]
    pub profile: Option<String>,
    #[command(flatten)]
    pub config: ConfigArg,
    #[command(flatten)]
    pub flags: ProfileFlags,
    /// Print what each wardcell process does to stderr (as WARDCELL_LOG=debug does),
    /// each line with the run id; the command's environment does not change
    #[arg(short, long)]
    pub verbose: bool,
    /// The command and its arguments
    #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// `run` and `policy show`: entries added to the profile the run starts in, for this run
/// only (other zones keep theirs); `run.started` records them.
#[derive(Args, Debug, Clone, Default)]
pub struct ProfileFlags {
    /// Also let the sandbox read PATH (repeatable)
    #[arg(long = "read", value_name = "PATH")]
    pub read: Vec<String>,
    /// Also let the sandbox write PATH (repeatable)
    #[arg(long = "write", value_name = "PATH")]
    pub write: Vec<String>,
    /// Hide PATH from the sandbox, even inside a tree it may read or write (repeatable)
    #[arg(long = "deny", value_name = "PATH")]
    pub deny: Vec<String>,
    /// Also let the sandbox reach HOST:PORT through its proxy, as network.allow does (repeatable)
    #[arg(long = "allow", value_name = "HOST:PORT")]
    pub allow: Vec<String>,
    /// Also let the sandbox reach HOST:PORT where its name resolves to a private address (a corporate registry mirror, a git server), as network.internal does (repeatable)
    #[arg(long = "internal", value_name = "HOST:PORT")]
    pub internal: Vec<String>,
}

impl From<ProfileFlags> for wardcell_common::plan::Overrides {
    fn from(f: ProfileFlags) -> Self {
        wardcell_common::plan::Overrides {
            read: f.read,
            write: f.write,
            deny: f.deny,
            allow: f.allow,
            internal: f.internal,
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct ConfigArg {
    /// Read this configuration file instead of looking for zones.toml
    #[arg(long = "config", value_name = "FILE")]
    pub file: Option<PathBuf>,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Output {
    /// Lines for people
    #[default]
    Text,
    /// One JSON document
    Json,
}

/// `logs show --output`: also the log's own lines.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShowOutput {
    /// One event a line, in words
    #[default]
    Text,
    /// One JSON document: the run id and the array of its events
    Json,
    /// The log's own JSON lines, as written
    Jsonl,
}

#[derive(Subcommand, Debug)]
pub enum PolicyCommand {
    /// Load and check the configuration, and resolve every zone, without running anything
    Check {
        #[command(flatten)]
        config: ConfigArg,
        /// text for people, or json (`--json` for short): one JSON document (schema: docs/OUTPUT.md)
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Show what a zone (or every zone, or a profile) resolves to on this machine
    Show {
        /// Only this zone
        #[arg(value_name = "ZONE", conflicts_with = "profile")]
        zone: Option<String>,
        /// A profile, as `wardcell run --profile` would use it
        #[arg(long, value_name = "PROFILE")]
        profile: Option<String>,
        #[command(flatten)]
        flags: ProfileFlags,
        #[command(flatten)]
        config: ConfigArg,
        /// text for people, or json (`--json` for short): one JSON document (schema: docs/OUTPUT.md)
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Say whether a zone (the default one unless --zone) or a profile may read or write a path or reach HOST:PORT, which rule decides, and which zones would allow it
    Why {
        /// Ask about this zone
        #[arg(long, value_name = "ZONE", conflicts_with = "profile")]
        zone: Option<String>,
        /// Ask about this profile, as `wardcell run --profile` would use it
        #[arg(long, value_name = "PROFILE")]
        profile: Option<String>,
        #[command(flatten)]
        why: WhyArgs,
        #[command(flatten)]
        config: ConfigArg,
    },
}

/// `policy why` and `zone why`: what is asked about.
#[derive(Args, Debug, Clone)]
pub struct WhyArgs {
    /// HOST:PORT, or a path (one with a `/`, or starting with `.` or `~`)
    #[arg(value_name = "TARGET")]
    pub target: String,
    /// Ask about writing the path, not reading it
    #[arg(long)]
    pub write: bool,
    /// text for people (the first word is `allowed` or `denied`), or json (`--json` for short): one JSON document (schema: docs/OUTPUT.md)
    #[arg(long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
}

#[derive(Subcommand, Debug)]
pub enum ZoneCommand {
    /// List zones: on the host every zone, inside a sandbox the zones it may enter
    List {
        #[command(flatten)]
        config: ConfigArg,
        /// text for people, or json (`--json` for short): one JSON document (schema: docs/OUTPUT.md)
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Print the name of the zone this sandbox is in
    Current,
    /// Say whether this zone may read or write a path or reach HOST:PORT, which rule decides, and which zones this run may enter would allow it
    Why {
        #[command(flatten)]
        why: WhyArgs,
    },
    /// List the connections this sandbox's proxy refused lately (the last 64), with why
    Denials {
        /// text for people, or json (`--json` for short): one JSON document (schema: docs/OUTPUT.md)
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Run a command in another zone, in a new sandbox
    Enter {
        /// The zone to run the command in
        #[arg(value_name = "ZONE")]
        zone: String,
        /// The command and its arguments
        #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
        command: Vec<OsString>,
    },
}

#[derive(Subcommand, Debug)]
pub enum LogsCommand {
    /// List the runs that have a log, newest first: start (UTC), zone, exit status, duration, command
    List {
        /// At most this many runs
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        /// Also `wardcell doctor`'s trial runs (marked "(doctor)")
        #[arg(long)]
        all: bool,
        /// text for people, or json (`--json` for short): one JSON document (schema: docs/OUTPUT.md)
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Show one run's events
    Show {
        /// The run id (from `wardcell logs list`)
        #[arg(value_name = "ID")]
        id: String,
        /// Only this category: run, audit, proxy or sandbox
        #[arg(long, value_name = "CATEGORY")]
        category: Option<String>,
        /// text for people (one event a line, in words), json (one JSON document: the
        /// array of the events; schema: docs/OUTPUT.md) or jsonl (the log's own lines)
        #[arg(long, value_enum, default_value_t = ShowOutput::Text)]
        output: ShowOutput,
    },
    /// Check that no event of a run's log was edited, removed or reordered
    Verify {
        #[arg(value_name = "ID")]
        id: String,
        /// text for people, or json (`--json` for short): one JSON document (schema: docs/OUTPUT.md)
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
}

#[derive(Subcommand, Debug)]
pub enum ApprovalsCommand {
    /// List the requests waiting for an answer, newest first
    List {
        /// text for people, or json (`--json` for short): one JSON document (schema: docs/OUTPUT.md)
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Show one request whole, with what entering the zone would add over the calling zone
    Show {
        /// The request id (from `wardcell approvals list`)
        #[arg(value_name = "ID")]
        id: String,
        /// text for people, or json (`--json` for short): one JSON document (schema: docs/OUTPUT.md)
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Approve a request: the command starts in the zone it asked for
    Approve {
        #[arg(value_name = "ID")]
        id: String,
        /// Why (recorded in the run's audit log)
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
    },
    /// Deny a request, saying why (the caller sees the reason)
    Deny {
        #[arg(value_name = "ID")]
        id: String,
        #[arg(long, value_name = "TEXT", required = true)]
        reason: String,
    },
    /// Wait, and print each new request as it arrives
    Watch,
}

/// The command as offered at `location`: what does not work there is hidden.
pub fn command_for(location: &Location) -> clap::Command {
    let hide = |c: clap::Command| c.hide(true);
    let cmd = Cli::command();
    match location {
        Location::Host => cmd.mut_subcommand("zone", |z| {
            z.about("List the zones of the configuration")
                .mut_subcommand("list", |l| l.about("List every zone of the configuration"))
                .mut_subcommand("current", hide)
                .mut_subcommand("enter", hide)
                .mut_subcommand("why", hide)
                .mut_subcommand("denials", hide)
        }),
        Location::Zone { zone, .. } => cmd
            .mut_subcommand("run", hide)
            .mut_subcommand("policy", hide)
            .mut_subcommand("doctor", hide)
            .mut_subcommand("logs", hide)
            .mut_subcommand("approvals", hide)
            .mut_subcommand("zone", |z| {
                z.mut_subcommand("list", |l| {
                    l.about("List the zones this sandbox may enter")
                        .mut_arg("file", |a| a.hide(true))
                })
            })
            .after_help(format!(
                "This process is in a wardcell sandbox, in zone '{zone}'; only zone commands work here; `wardcell help COMMAND` prints any command's help."
            )),
        Location::NoZones => cmd
            .mut_subcommand("run", hide)
            .mut_subcommand("policy", hide)
            .mut_subcommand("doctor", hide)
            .mut_subcommand("logs", hide)
            .mut_subcommand("approvals", hide)
            .mut_subcommand("zone", hide)
            .mut_subcommand("completions", hide)
            .override_usage("wardcell [--help | --version]")
            .after_help(
                "This process is in a wardcell sandbox started without zones (`wardcell run --profile`); no wardcell command works here; `wardcell help COMMAND` prints any command's help.",
            ),
    }
}

/// The subcommand names on a command line, e.g. `["zone", "enter"]`, found without
/// parsing the rest: wardcell's own options before them take no values.
pub fn command_path(args: &[OsString]) -> Vec<String> {
    let mut out = Vec::new();
    for a in args.iter().skip(1) {
        let Some(a) = a.to_str() else { break };
        if a == "--" {
            break;
        }
        if a.starts_with('-') {
            continue;
        }
        out.push(a.to_string());
        if out.len() == 2 || !matches!(out[0].as_str(), "zone" | "policy") {
            break;
        }
    }
    out
}

/// Where a help request (`wardcell help [COMMAND...]`, or `-h`/`--help` before the
/// command's own arguments) asks for help, as the subcommand names on the way: `None`
/// when the command line asks for something else.
pub fn help_path(args: &[OsString]) -> Option<Vec<String>> {
    let words: Vec<&str> = args.iter().skip(1).map_while(|a| a.to_str()).collect();
    if words.first() == Some(&"help") {
        return Some(words[1..].iter().map(|w| w.to_string()).collect());
    }
    // Most command lines ask for no help: they cost no clap command here.
    let asks = words
        .iter()
        .take_while(|w| **w != "--")
        .any(|w| *w == "-h" || *w == "--help");
    if !asks {
        return None;
    }
    let full = Cli::command();
    let mut at = &full;
    let mut path = Vec::new();
    for w in words {
        match w {
            "--" => return None,
            "-h" | "--help" => return Some(path),
            _ if w.starts_with('-') => continue,
            _ => match at.find_subcommand(w) {
                Some(sub) => {
                    path.push(w.to_string());
                    at = sub;
                }
                // The command's own arguments: their `--help` is theirs.
                None => return None,
            },
        }
    }
    None
}

/// Print the help of the command at `path` as offered at `location`, even one that does
/// not work here (help is never refused; running is), with why it does not. An unknown
/// command is a usage error.
pub fn print_help(location: &Location, path: &[String]) -> std::process::ExitCode {
    let mut cmd = command_for(location);
    cmd.build();
    let mut at = &mut cmd;
    for (i, name) in path.iter().enumerate() {
        match at.find_subcommand_mut(name) {
            Some(sub) => at = sub,
            None => {
                wardcell_common::eprintln_line!(
                    "error: `wardcell help`: there is no command `{}`; see `wardcell --help`",
                    wardcell_common::text::shown(&path[..=i].join(" "))
                );
                return 2.into();
            }
        }
    }
    let mut text = at.render_help().to_string();
    if let Some(why) = crate::location::refusal(location, path) {
        text.push_str(&format!("\nNot available here: {why}\n"));
    }
    print!("{text}");
    std::process::ExitCode::SUCCESS
}

/// What parsing produced: a command to run, or an exit (help, version, usage error).
pub enum Parsed {
    Run(Box<Cli>),
    Exit(std::process::ExitCode),
    /// A usage error (exit code 2), in one line without `error: `, for the caller to say.
    Usage(String),
}

/// Parse `args` against the command offered at `location`. Help and version print and
/// exit 0; a usage error is one `error: ` line on stderr and exit code 2.
pub fn parse(location: &Location, args: Vec<OsString>) -> Parsed {
    // `wardcell run` on the host is parsed by its own arguments alone: building the
    // whole command tree cost the plan writer, on the path of every start, about as
    // much CPU time as everything else it does before resolving the configuration.
    // The same definitions, so the same result and the same errors
    // (tests::run_alone_parses_as_the_whole_tree_does).
    if *location == Location::Host && args.get(1).is_some_and(|a| a == "run") {
        return parsed_or_usage(parse_run(&args[1..]), &["run".to_string()]);
    }
    let cmd = command_for(location);
    let args = json_is_output_json(&cmd, args);
    // The part of the path that names real commands, for the "see --help" hint.
    let mut known = Vec::new();
    let mut at = &cmd;
    for name in command_path(&args) {
        match at.find_subcommand(&name).filter(|c| !c.is_hide_set()) {
            Some(sub) => {
                known.push(name);
                at = sub;
            }
            None => break,
        }
    }
    let parsed = cmd
        .try_get_matches_from(args)
        .and_then(|m| Cli::from_arg_matches(&m));
    parsed_or_usage(parsed, &known)
}

/// `--json` is `--output json` for every command that has `--output` (before any `--`);
/// elsewhere it is left for clap to refuse.
fn json_is_output_json(cmd: &clap::Command, args: Vec<OsString>) -> Vec<OsString> {
    let mut at = cmd;
    for a in args.iter().skip(1).map_while(|a| a.to_str()) {
        if a == "--" {
            break;
        }
        match at.find_subcommand(a) {
            Some(sub) if !a.starts_with('-') => at = sub,
            _ => {}
        }
    }
    if !at.get_arguments().any(|a| a.get_long() == Some("output")) {
        return args;
    }
    let mut out = Vec::with_capacity(args.len() + 1);
    let mut rest = false;
    for a in args {
        rest |= a == "--";
        if !rest && a == "--json" {
            out.extend(["--output", "json"].map(OsString::from));
        } else {
            out.push(a);
        }
    }
    out
}

/// Whether the command line asks for JSON (`--json`, `--output json`, `--output=json`,
/// `jsonl` too, before any `--`): then its errors are JSON as well (docs/OUTPUT.md).
pub fn asks_for_json(args: &[OsString]) -> bool {
    let words: Vec<&str> = args.iter().skip(1).map_while(|a| a.to_str()).collect();
    // `run` and `zone enter` have no `--output`: what follows them is a command's own.
    if words.first() == Some(&"run") || words.starts_with(&["zone", "enter"]) {
        return false;
    }
    let words = words.split(|w| *w == "--").next().unwrap_or_default();
    words.iter().enumerate().any(|(i, w)| {
        let value = match *w {
            "--json" => return true,
            "--output" => words.get(i + 1).copied().unwrap_or_default(),
            other => other.strip_prefix("--output=").unwrap_or_default(),
        };
        matches!(value, "json" | "jsonl")
    })
}

/// `run ARGS...` parsed by [`RunArgs`] alone, as the whole tree defines that subcommand.
fn parse_run(args: &[OsString]) -> Result<Cli, clap::Error> {
    RunArgs::augment_args(clap::Command::new("run").bin_name("wardcell run"))
        .try_get_matches_from(args)
        .and_then(|m| RunArgs::from_arg_matches(&m))
        .map(|run| Cli {
            command: Command::Run(run),
        })
}

/// The command, or what clap printed or said: help and version exit 0, a usage error
/// is one `error: ` line (`known`: the commands named, for the "see --help" hint).
fn parsed_or_usage(parsed: Result<Cli, clap::Error>, known: &[String]) -> Parsed {
    match parsed {
        Ok(cli) => Parsed::Run(Box::new(cli)),
        Err(e) => {
            use clap::error::ErrorKind;
            let code = match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => 0,
                ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                    let _ = e.print();
                    return Parsed::Exit(2.into());
                }
                _ => 2,
            };
            if code == 0 {
                let _ = e.print();
            } else {
                let first = first_paragraph(&e);
                let help = if known.is_empty() {
                    "wardcell --help".to_string()
                } else {
                    format!("wardcell {} --help", known.join(" "))
                };
                return Parsed::Usage(format!("{first}; see `{help}`"));
            }
            Parsed::Exit(code.into())
        }
    }
}

/// clap's first paragraph of `e`, on one line, without its `error: `.
fn first_paragraph(e: &clap::Error) -> String {
    let rendered = e.render().to_string();
    let first = rendered
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ");
    match first.strip_prefix("error: ") {
        Some(rest) => rest.to_string(),
        None => first,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<OsString> {
        s.split(' ').map(OsString::from).collect()
    }

    /// What parsing made of `line`: the command, or the error's kind and first
    /// paragraph (help's text aside: `main` prints help before anything is parsed).
    fn outcome(parsed: Result<Cli, clap::Error>) -> String {
        match parsed {
            Ok(cli) => format!("{:?}", cli.command),
            Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp => "help".into(),
            Err(e) => format!("{:?}: {}", e.kind(), first_paragraph(&e)),
        }
    }

    #[test]
    fn run_alone_parses_as_the_whole_tree_does() {
        for line in [
            "wardcell run -- true",
            "wardcell run true",
            "wardcell run --zone push -- git push",
            "wardcell run --zone=push git push origin --force",
            "wardcell run --profile p -v -- sh -c x",
            "wardcell run --config x.toml -- a --zone b",
            "wardcell run -v --verbose -- x",
            "wardcell run --zone a --profile b -- x",
            "wardcell run",
            "wardcell run --",
            "wardcell run --bogus -- x",
            "wardcell run -x -- y",
            "wardcell run --zone",
            "wardcell run --zone a --zone b -- x",
            "wardcell run -v",
            "wardcell run --version",
            "wardcell run -V",
            "wardcell run --help",
            "wardcell run -h -- x",
            "wardcell run -- --help",
        ] {
            let a = args(line);
            let tree = command_for(&Location::Host)
                .try_get_matches_from(a.clone())
                .and_then(|m| Cli::from_arg_matches(&m));
            assert_eq!(outcome(parse_run(&a[1..])), outcome(tree), "{line}");
        }
    }

    #[test]
    fn paths() {
        assert_eq!(command_path(&args("wardcell run -- x")), ["run"]);
        assert_eq!(
            command_path(&args("wardcell --help zone enter a -- b")),
            ["zone", "enter"]
        );
        assert_eq!(
            command_path(&args("wardcell zone --x list")),
            ["zone", "list"]
        );
        assert_eq!(command_path(&args("wardcell policy")), ["policy"]);
        assert!(command_path(&args("wardcell -- run")).is_empty());
    }

    #[test]
    fn json_is_asked_for_before_a_command_of_ones_own_only() {
        let asks = |line: &str| {
            let args: Vec<OsString> = line.split(' ').map(OsString::from).collect();
            asks_for_json(&args)
        };
        assert!(asks("wardcell zone list --json"));
        assert!(asks("wardcell logs show latest --output jsonl"));
        assert!(asks("wardcell policy check --output=json"));
        assert!(!asks("wardcell policy check --output text"));
        assert!(!asks("wardcell run --profile p true --json"));
        assert!(!asks("wardcell zone enter push echo --json"));
        assert!(!asks("wardcell zone why -- --json"));
    }

    #[test]
    fn the_cli_is_consistent() {
        for loc in [
            Location::Host,
            Location::NoZones,
            Location::Zone {
                zone: "a".into(),
                socket: "/s".into(),
            },
        ] {
            command_for(&loc).debug_assert();
        }
    }
}
