//! Diagnostics: what each process does, as `tracing` events written to stderr when asked.
//!
//! Off by default and free when off: no subscriber is installed unless `WARDCELL_LOG`
//! names a level (or `wardcell run -v` asks for `debug`), and with none installed each
//! event is one load of tracing's global maximum level. Every line carries the run id,
//! the same value as the audit log and the approval request:
//!
//! ```text
//! wardcell-broker[4242] run=20261203T055800Z-1a2b3c4d DEBUG supervisor: zone entry allowed zone="push"
//! ```
//!
//! A process that does not know its run yet writes `run=-`. The shim and the proxy get
//! the level and the run id from the broker, in their specs (their environment is not the
//! caller's); the plan writer of `wardcell run` holds its lines and hands them to the
//! broker in the plan, which prints them once the run id exists. Nothing secret is ever
//! traced: events name credentials, never their values.

use std::fmt::{self, Write as _};
use std::io::Write as _;
use std::sync::OnceLock;

use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::span;
use tracing::{Event, Level, Metadata, Subscriber};

/// The variable that turns tracing on, read by the client, the broker and the approval
/// plugin (whose environment the broker sets).
pub const VAR: &str = "WARDCELL_LOG";

/// At most this many held lines travel in a plan; the rest are counted.
pub const MAX_HELD: usize = 1000;

/// The level a `WARDCELL_LOG` value asks for: `None` for off (empty or `off`).
pub fn parse(value: &str) -> Result<Option<Level>, String> {
    match value.trim().to_ascii_lowercase().as_str() {
        "" | "off" | "0" => Ok(None),
        "error" => Ok(Some(Level::ERROR)),
        "warn" => Ok(Some(Level::WARN)),
        "info" => Ok(Some(Level::INFO)),
        "debug" | "1" => Ok(Some(Level::DEBUG)),
        "trace" => Ok(Some(Level::TRACE)),
        _ => Err(format!(
            "{VAR}=\"{}\" is not a level: use off, error, warn, info, debug or trace",
            crate::text::shown(value)
        )),
    }
}

/// A level as the lowercase word [`parse`] reads back (what travels in specs).
pub fn name(level: Level) -> String {
    level.as_str().to_ascii_lowercase()
}

/// The level `WARDCELL_LOG` asks for in this process's environment; a value that is not
/// a level is off here (the client says why).
pub fn from_env() -> Option<Level> {
    std::env::var(VAR)
        .ok()
        .and_then(|v| parse(&v).ok().flatten())
}

static LEVEL: OnceLock<Level> = OnceLock::new();
static RUN: OnceLock<String> = OnceLock::new();
/// Where a line goes instead of stderr while this says it takes it (the plan writer holds
/// its lines: `wardcell/src/held.rs`).
static DIVERT: OnceLock<fn(&str) -> bool> = OnceLock::new();

/// Offer every line's body to `to` before it is written; once per process.
pub fn divert(to: fn(&str) -> bool) {
    let _ = DIVERT.set(to);
}

/// Start writing events at `level` and above to stderr, as `process`. Once per process;
/// a second call changes nothing.
pub fn install(process: &'static str, level: Level) {
    if LEVEL.set(level).is_err() {
        return;
    }
    let _ = tracing::subscriber::set_global_default(Stderr {
        process,
        pid: std::process::id(),
        max: level,
    });
}

/// The level this process traces at, if it does: what it passes on to its helpers.
pub fn level() -> Option<Level> {
    LEVEL.get().copied()
}

/// What a helper is told about tracing (in its spec): `None` while this process does
/// not trace.
pub fn spec(run: &str) -> Option<crate::plan::TraceSpec> {
    level().map(|l| crate::plan::TraceSpec {
        level: name(l),
        run: run.to_string(),
    })
}

/// The run id, once known: every later line carries it.
pub fn set_run(id: &str) {
    let _ = RUN.set(id.to_string());
}

/// The run id lines carry: `-` until it is known.
pub fn run() -> &'static str {
    RUN.get().map_or("-", String::as_str)
}

/// One line as written: `process[pid] run=ID body`, every control character escaped.
pub fn line(process: &str, pid: u32, run: &str, body: &str) -> String {
    crate::text::shown(&format!("{process}[{pid}] run={run} {body}")).into_owned()
}

/// The subscriber: events only (spans are not used), one line each.
struct Stderr {
    process: &'static str,
    pid: u32,
    max: Level,
}

impl Subscriber for Stderr {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= self.max
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::from_level(self.max))
    }

    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }

    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}

    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}

    fn event(&self, event: &Event<'_>) {
        let meta = event.metadata();
        let target = meta.target();
        // `wardcell_broker::supervisor` reads as `supervisor`.
        let target = target.split_once("::").map_or(target, |(_, t)| t);
        let mut body = format!("{} {target}:", meta.level());
        event.record(&mut Fields(&mut body));
        if DIVERT.get().is_some_and(|take| take(&body)) {
            return;
        }
        let mut text = line(self.process, self.pid, run(), &body);
        text.push('\n');
        // One write per line, so that lines of processes sharing stderr do not mix.
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
    }

    fn enter(&self, _: &span::Id) {}

    fn exit(&self, _: &span::Id) {}
}

/// ` message key=value ...`
struct Fields<'a>(&'a mut String);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, " {value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            let _ = write!(self.0, " {value}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_and_a_bad_value_says_which() {
        assert_eq!(parse("debug"), Ok(Some(Level::DEBUG)));
        assert_eq!(parse(" TRACE "), Ok(Some(Level::TRACE)));
        assert_eq!(parse("off"), Ok(None));
        assert_eq!(parse(""), Ok(None));
        let e = parse("verbose\n").unwrap_err();
        assert!(e.contains("WARDCELL_LOG=\"verbose\\n\""), "{e}");
        assert_eq!(parse(&name(Level::INFO)), Ok(Some(Level::INFO)));
    }

    #[test]
    fn a_line_carries_the_run_and_escapes_control_characters() {
        assert_eq!(
            line("wardcell-shim", 7, "R", "DEBUG main: x\ny"),
            "wardcell-shim[7] run=R DEBUG main: x\\ny"
        );
    }

    #[test]
    fn a_diverted_line_is_not_written_and_the_rest_are() {
        static TAKEN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
        fn take(body: &str) -> bool {
            let held = body.contains("held");
            if held {
                TAKEN.lock().unwrap().push(body.to_string());
            }
            held
        }
        divert(take);
        let sub = Stderr {
            process: "t",
            pid: 1,
            max: Level::DEBUG,
        };
        tracing::subscriber::with_default(sub, || {
            tracing::debug!(i = 1, "held");
            tracing::debug!("written");
            tracing::trace!("held, above the level: never offered");
        });
        let taken = TAKEN.lock().unwrap().clone();
        assert_eq!(taken, ["DEBUG trace::tests: held i=1"]);
    }
}
