//! The wardcell client: parses the command line, loads and checks the configuration,
//! resolves it into a plan, and prints or launches it.
//!
//! What works depends on where it runs (see `location`): the host, a sandbox in a
//! zone, or a sandbox without zones. A command that does not work here is refused
//! before anything else happens.
// `unsafe` is allowed in `sys` alone (one fork).
#![deny(unsafe_code)]

mod agent_home;
mod apparmor;
mod approvals;
mod chain;
mod checks;
mod cli;
mod completions;
mod context;
mod credentials;
mod doctor;
#[cfg(target_os = "linux")]
mod enter_tty;
mod error;
mod held;
mod keeper;
mod location;
mod logs;
mod machine;
mod nested;
mod output;
mod policy;
mod prepare;
mod recorded;
mod run;
mod sys;
mod trusted;
mod tty;
mod why;
mod zones;

use std::process::ExitCode;

#[global_allocator]
static ALLOCATOR: sys::Allocator = sys::Allocator;

use cli::{ApprovalsCommand, Command, LogsCommand, Parsed, PolicyCommand, ZoneCommand};
use error::Error;
use location::Location;
use wardcell_common::trace;

fn main() -> ExitCode {
    // Started as one of the sandbox tools linked to this binary inside sandboxes.
    if let Some(tool) = nested::tool_called() {
        return nested::refuse(tool);
    }
    // 0. Tracing, when WARDCELL_LOG asks; a value that is not a level is a usage error.
    //    `run` holds its lines for the broker, which prints them with the run id.
    let traced = match std::env::var(trace::VAR).map(|v| trace::parse(&v)) {
        Ok(Err(why)) => return report(Error::Usage(why)),
        Ok(Ok(level)) => level,
        Err(_) => None,
    };
    if std::env::args_os().nth(1).is_some_and(|a| a == "run") {
        crate::held::hold();
    }
    if let Some(level) = traced {
        trace::install("wardcell", level);
    }

    // Asked for JSON, every error is JSON too (docs/OUTPUT.md).
    if cli::asks_for_json(&std::env::args_os().collect::<Vec<_>>()) {
        output::errors_as_json();
    }

    // 1. Where are we: the host, a sandbox in a zone, or a sandbox without zones.
    let location = Location::detect(&|k| std::env::var(k).ok());
    // In a zone, the supervisor's socket lies in the run's directory, named by its id:
    // trace lines carry it (a label only; nothing is decided by it).
    if let Location::Zone { socket, .. } = &location {
        if let Some(run) = socket
            .parent()
            .and_then(|d| d.file_name())
            .and_then(|n| n.to_str())
            .filter(|n| logs::valid_id(n))
        {
            trace::set_run(run);
        }
    }
    tracing::debug!(location = ?location, "started");

    // Completion, which the scripts `wardcell completions` prints call: candidates only,
    // never an error, wherever it runs.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == completions::COMPLETE) {
        return completions::complete(&location, &args[2..]);
    }

    // 2. Help is never refused: `wardcell help COMMAND` and `COMMAND --help` print it
    //    anywhere. Refuse a command that does not work here, before doing anything else.
    if let Some(path) = cli::help_path(&args) {
        return cli::print_help(&location, &path);
    }
    if let Some(why) = location::refusal(&location, &cli::command_path(&args)) {
        return report(Error::Refused(why));
    }

    // 3. `wardcell run` on the host: the broker starts now, in this process, and a copy of
    //    it (the plan writer) goes on below to parse, resolve and hand over the plan.
    let mut to_broker = None;
    if location == Location::Host && args.get(1).is_some_and(|a| a == "run") {
        match run::start_broker_early() {
            Ok(socket) => to_broker = Some(socket),
            Err(e) => return report(e),
        }
    }

    // 4. Parse the command line as offered here (help and usage errors end here).
    let cli = match cli::parse(&location, args) {
        Parsed::Run(cli) => cli,
        Parsed::Exit(code) => return code,
        Parsed::Usage(message) => return report(Error::Usage(message)),
    };

    // 5. Do it.
    match dispatch(cli.command, &location, to_broker) {
        Ok(code) => code,
        Err(e) => report(e),
    }
}

fn dispatch(
    command: Command,
    location: &Location,
    to_broker: Option<std::os::unix::net::UnixStream>,
) -> Result<ExitCode, Error> {
    match (command, location) {
        (Command::Run(args), Location::Host) => {
            // `main` started the broker for every `run` on the host.
            let to_broker =
                to_broker.ok_or_else(|| Error::Launch("no broker was started".into()))?;
            match run::run(args, to_broker)? {}
        }
        (Command::Policy(PolicyCommand::Check { config, output }), Location::Host) => {
            policy::check(&config, output)?;
        }
        (
            Command::Policy(PolicyCommand::Show {
                zone,
                profile,
                flags,
                config,
                output,
            }),
            Location::Host,
        ) => policy::show(zone, profile, flags, &config, output)?,
        (Command::Zone(ZoneCommand::List { config, output }), Location::Host) => {
            zones::host_list(&config, output)?;
        }
        (Command::Zone(ZoneCommand::List { config, output }), Location::Zone { socket, .. }) => {
            if config.file.is_some() {
                return Err(Error::Usage(
                    "--config does not apply inside a sandbox: its supervisor answers from the configuration the run started with; drop --config".to_string(),
                ));
            }
            zones::inside_list(socket, output)?;
        }
        (Command::Zone(ZoneCommand::Denials { output }), Location::Zone { zone, .. }) => {
            zones::inside_denials(zone, output)?;
        }
        (Command::Zone(ZoneCommand::Why { why }), Location::Zone { socket, .. }) => {
            return zones::inside_why(socket, &why);
        }
        (
            Command::Policy(PolicyCommand::Why {
                zone,
                profile,
                why,
                config,
            }),
            Location::Host,
        ) => return policy::why(zone, profile, &why, &config),
        (Command::Zone(ZoneCommand::Current), Location::Zone { zone, .. }) => {
            zones::current(zone)?;
        }
        (Command::Zone(ZoneCommand::Enter { zone, command }), Location::Zone { socket, .. }) => {
            let command = run::utf8_command(command)?;
            return Ok(ExitCode::from(zones::inside_enter(socket, &zone, command)?));
        }
        (Command::Logs(LogsCommand::List { output, limit, all }), Location::Host) => {
            logs::list(output, limit, all)?
        }
        (
            Command::Logs(LogsCommand::Show {
                id,
                category,
                output,
            }),
            Location::Host,
        ) => logs::show(&id, category.as_deref(), output)?,
        (Command::Logs(LogsCommand::Verify { id, output }), Location::Host) => {
            logs::verify(&id, output)?
        }
        (Command::Approvals(cmd), Location::Host) => match cmd {
            ApprovalsCommand::List { output } => approvals::list(output)?,
            ApprovalsCommand::Show { id, output } => approvals::show(&id, output)?,
            ApprovalsCommand::Approve { id, reason } => {
                approvals::answer(&id, true, reason.as_deref().unwrap_or("approved"))?;
            }
            ApprovalsCommand::Deny { id, reason } => approvals::answer(&id, false, &reason)?,
            ApprovalsCommand::Watch => approvals::watch()?,
        },
        (Command::Completions { shell }, Location::Host | Location::Zone { .. }) => {
            completions::print(shell)?;
        }
        (Command::Doctor { config, output }, Location::Host) => {
            return Ok(ExitCode::from(doctor::run(config.file.as_deref(), output)));
        }
        // Step 2 refused everything else; this is a second line, not a path in use.
        (_, _) => {
            return Err(Error::Refused(
                "this command does not work here; `wardcell --help` lists those that do"
                    .to_string(),
            ));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn report(e: Error) -> ExitCode {
    // Lines held for a broker that will not print them (no plan was handed over).
    for l in crate::held::take_held() {
        wardcell_common::eprintln_line!(
            "{}",
            trace::line("wardcell", std::process::id(), trace::run(), &l)
        );
    }
    // A reader that went away (`| head`) is not worth a message.
    if matches!(&e, Error::Stdout(io) if io.kind() == std::io::ErrorKind::BrokenPipe) {
        return ExitCode::from(e.exit_code());
    }
    output::error_line(&e.to_string(), e.exit_code());
    ExitCode::from(e.exit_code())
}
