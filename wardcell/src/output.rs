//! Human and JSON output. Everything printed on stdout goes through here.
//!
//! In text output, every value that came from a sandbox or a configuration is passed
//! through [`shown`] before it is laid out: each cell of a table, each line of a plan, so
//! a value cannot add a line of its own or send the terminal a control sequence.

use std::io::Write;
use std::path::Path;

use serde::Serialize;
use wardcell_common::plan::{
    CredentialPlan, CredentialScheme, Plan, ProfilePlan, SecretPlan, Start, ZonePlan,
};
use wardcell_config::config::Config;
use wardcell_support::sandbox_env::{DEFAULT_METHODS, PLACEHOLDER_VALUE};

use crate::error::Error;
pub use wardcell_common::text::shown;

/// Write `text` (a newline is added) to stdout.
pub fn print(text: &str) -> Result<(), Error> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")
        .and_then(|()| out.flush())
        .map_err(Error::Stdout)
}

/// Columns separated by two spaces, each as wide as its widest cell; no trailing spaces.
pub fn table(rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| shown(c).into_owned()).collect())
        .collect();
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if c + 1 < row.len() {
                let pad = widths[c] - cell.chars().count() + 2;
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push(line.trim_end().to_string());
    }
    out.join("\n")
}

/// `-` for an absent or empty value, as `zone list` shows it.
fn or_dash(s: &str) -> String {
    if s.is_empty() {
        "-".to_string()
    } else {
        s.to_string()
    }
}

/// `zone list` inside a sandbox: the current zone, then the zones it may enter.
pub fn inside_zone_table(current: &str, zones: &[wardcell_common::protocol::ZoneEntry]) -> String {
    let mut out = format!("current zone: {}\n\n", shown(current));
    if zones.is_empty() {
        out.push_str("No zone may be entered from here.");
        return out;
    }
    let mut rows = vec![vec!["ZONE".to_string(), "DESCRIPTION".to_string()]];
    for z in zones {
        let name = if z.name == current {
            format!("{} (current)", z.name)
        } else {
            z.name.clone()
        };
        rows.push(vec![name, or_dash(z.description.as_deref().unwrap_or(""))]);
    }
    out.push_str(&table(&rows));
    out
}

/// The host's `zone list` table: every zone of the configuration, by name.
pub fn zone_table(cfg: &Config) -> String {
    let mut rows = vec![["ZONE", "DEFAULT", "PROFILE", "ENTER FROM", "DESCRIPTION"]
        .map(String::from)
        .to_vec()];
    for z in &cfg.zones {
        rows.push(vec![
            z.name.clone(),
            if z.default { "yes" } else { "" }.to_string(),
            z.profile.clone(),
            or_dash(&z.enter_from.join(", ")),
            or_dash(z.description.as_deref().unwrap_or("")),
        ]);
    }
    table(&rows)
}

#[derive(Serialize)]
struct HostZones<'a> {
    zones: Vec<HostZone<'a>>,
}

#[derive(Serialize)]
struct HostZone<'a> {
    name: &'a str,
    default: bool,
    profile: &'a str,
    enter_from: &'a [String],
    description: Option<&'a str>,
}

/// The host's `zone list --output json`.
pub fn zone_json(cfg: &Config) -> Result<String, Error> {
    let v = HostZones {
        zones: cfg
            .zones
            .iter()
            .map(|z| HostZone {
                name: &z.name,
                default: z.default,
                profile: &z.profile,
                enter_from: &z.enter_from,
                description: z.description.as_deref(),
            })
            .collect(),
    };
    serde_json::to_string(&v).map_err(|e| Error::Json(e.to_string()))
}

/// The plan exactly as the broker would receive it.
pub fn plan_json(plan: &Plan) -> Result<String, Error> {
    serde_json::to_string(plan).map_err(|e| Error::Json(e.to_string()))
}

/// Seconds as zones.toml writes a duration.
pub fn duration(secs: u64) -> String {
    wardcell_common::text::show_duration(secs)
}

fn list(out: &mut Vec<String>, indent: &str, title: &str, items: Vec<String>) {
    if items.is_empty() {
        out.push(format!("{indent}{title}: -"));
    } else {
        out.push(format!("{indent}{title}:"));
        out.extend(items.into_iter().map(|i| format!("{indent}  {i}")));
    }
}

fn paths(items: &[std::path::PathBuf]) -> Vec<String> {
    items.iter().map(|p| p.display().to_string()).collect()
}

fn profile(out: &mut Vec<String>, p: &ProfilePlan, indent: &str) {
    out.push(format!("{indent}profile: {}", p.name));
    let inner = format!("{indent}  ");
    list(out, &inner, "read", paths(&p.read));
    list(out, &inner, "write", paths(&p.write));
    list(out, &inner, "deny", paths(&p.deny));
    list(out, &inner, "unix sockets", paths(&p.unix_sockets));
    list(
        out,
        &inner,
        "skipped",
        p.skipped
            .iter()
            .map(|s| match (s.rule.as_str(), s.reason.as_str()) {
                // Held all the same: created on the host during a run, it ends the run.
                ("deny", "does not exist") => format!("deny {}: not there yet, held", s.path),
                _ => format!("{} {}: {}", s.rule, s.path, s.reason),
            })
            .collect(),
    );
    let tmp = std::path::Path::new("/tmp");
    out.push(format!(
        "{inner}/tmp: {}",
        if p.read.iter().chain(&p.write).any(|t| t.starts_with(tmp)) {
            "private to the sandbox, with the trees above that lie in it bound over it"
        } else {
            "private to the sandbox"
        }
    ));
    list(out, &inner, "env deny", p.env.deny.clone());
    list(
        out,
        &inner,
        "env set",
        p.env.set.iter().map(|(k, v)| format!("{k}={v}")).collect(),
    );
    if p.network.enabled() {
        list(out, &inner, "network allow", p.network.allow.clone());
        if !p.network.internal.is_empty() {
            // Shown only when there are some, so profiles without are shown as before.
            let internal = p.network.internal.iter().map(|e| {
                format!("{e} (may resolve to private, shared, reserved and loopback addresses)")
            });
            list(out, &inner, "network internal", internal.collect());
        }
    } else {
        out.push(format!("{inner}network allow: - (no network)"));
    }
    list(out, &inner, "credentials", p.credentials.clone());
    let limits: Vec<String> = wardcell_config::sizes::set_ones(&p.limits)
        .map(|(kind, b)| {
            // A best-effort limit this machine cannot enforce is shown as not applied.
            let effort = match (
                b.best_effort,
                crate::machine::mechanism(machine(), kind, b.value),
            ) {
                (false, _) => "",
                (true, Ok(_)) => " (best effort)",
                (true, Err(_)) => " (best effort: not enforced on this machine)",
            };
            format!("{} {}{effort}", kind.name(), kind.show(b.value))
        })
        .collect();
    out.push(match limits.is_empty() {
        true => format!("{inner}limits: -"),
        false => format!("{inner}limits: {}", limits.join(", ")),
    });
}

/// What this machine can enforce, looked at once.
fn machine() -> &'static wardcell_common::limits::Machine {
    static MACHINE: std::sync::OnceLock<wardcell_common::limits::Machine> =
        std::sync::OnceLock::new();
    MACHINE.get_or_init(|| crate::machine::probe(true))
}

fn zone(out: &mut Vec<String>, z: &ZonePlan) {
    out.push(format!(
        "zone {}{}",
        z.name,
        if z.default { " (default)" } else { "" }
    ));
    out.push(format!(
        "  description: {}",
        or_dash(z.description.as_deref().unwrap_or(""))
    ));
    out.push(format!(
        "  enter from: {}",
        or_dash(&z.enter_from.join(", "))
    ));
    out.push(format!(
        "  requires approval: {}",
        match (z.requires_approval, z.approval_timeout_secs) {
            (false, _) => "no".to_string(),
            (true, Some(s)) => format!("yes, waits up to {}", duration(s)),
            (true, None) => "yes, waits as long as the plugin takes".to_string(),
        }
    ));
    out.push(format!(
        "  authenticated: {}",
        if z.authenticated { "yes" } else { "no" }
    ));
    profile(out, &z.profile, "  ");
}

/// `policy show` for people: where the configuration came from, then each zone shown
/// (`only`: just that one), or the profile of a `--profile` plan.
/// One credential: what it is attached to and where its secret comes from.
fn credential(c: &CredentialPlan) -> String {
    let scheme = match c.scheme {
        CredentialScheme::Basic => format!("basic as {}", c.username.as_deref().unwrap_or("-")),
        CredentialScheme::Bearer => "bearer".to_string(),
        CredentialScheme::Header => format!("header {}", c.header.as_deref().unwrap_or("-")),
    };
    let paths = if c.paths.is_empty() {
        "all paths".to_string()
    } else {
        c.paths.join(", ")
    };
    let methods = if c.methods.is_empty() {
        DEFAULT_METHODS.join(" ")
    } else {
        c.methods.join(" ")
    };
    // A host without a port means 443: said so.
    let hosts: Vec<String> = c
        .hosts
        .iter()
        .map(|h| {
            let portless = match h.strip_prefix('[') {
                Some(_) => h.ends_with(']'),
                None => !h.contains(':'),
            };
            if portless {
                format!("{h}:443")
            } else {
                h.clone()
            }
        })
        .collect();
    let placeholder = c.placeholder.as_ref().map_or(String::new(), |v| {
        format!("; sandboxes it is attached for get {v}={PLACEHOLDER_VALUE}")
    });
    let source = match &c.secret {
        SecretPlan::Env(v) => format!("environment variable {v} (removed from every sandbox)"),
        SecretPlan::File(f) => format!("file {} (hidden from every sandbox)", f.display()),
        SecretPlan::Command(argv) => format!("command `{}`, run by the proxy", argv.join(" ")),
    };
    format!(
        "{}: {scheme} for {} ({paths}; {methods}), from {source}{placeholder}",
        c.name,
        hosts.join(", ")
    )
}

pub fn plan_text(plan: &Plan, only: Option<&str>) -> String {
    let mut out = vec![format!("config: {}", plan.source)];
    out.push(format!("home (~): {}", plan.home.display()));
    out.push(format!("current directory (.): {}", plan.cwd.display()));
    out.push(format!(
        "approval plugin: {}",
        plan.approval
            .as_ref()
            .map_or("-".to_string(), |a| a.join(" "))
    ));
    out.push(format!(
        "audit to syslog: {}",
        if plan.audit.syslog { "yes" } else { "no" }
    ));
    let o = &plan.overrides;
    if !o.is_empty() {
        let start = match &plan.start {
            wardcell_common::plan::Start::Zone(z) => format!("zone {z}"),
            wardcell_common::plan::Start::Profile(p) => format!("profile {}", p.name),
        };
        let flags: Vec<String> = [
            ("read", &o.read),
            ("write", &o.write),
            ("deny", &o.deny),
            ("allow", &o.allow),
        ]
        .iter()
        .flat_map(|(flag, v)| v.iter().map(move |e| format!("--{flag} {e}")))
        .collect();
        out.push(format!(
            "added for this run, to {start} only: {}",
            flags.join(" ")
        ));
    }
    let hidden = |p: &Path| p.display().to_string();
    list(
        &mut out,
        "",
        "hidden from every sandbox",
        plan.dirs
            .config
            .iter()
            .map(|p| hidden(p))
            .chain([hidden(&plan.dirs.state), hidden(&plan.dirs.runtime)])
            .chain(
                wardcell_support::view::credential_files(plan)
                    .iter()
                    .map(|p| hidden(p)),
            )
            .collect(),
    );
    list(
        &mut out,
        "",
        "credentials (resolved by each zone's proxy; values are never shown)",
        plan.credentials.iter().map(credential).collect(),
    );
    match &plan.start {
        Start::Profile(p) => {
            out.push(String::new());
            out.push("outside any zone (run --profile): no zone commands work inside".to_string());
            profile(&mut out, p, "");
        }
        Start::Zone(_) => {
            for z in plan
                .zones
                .iter()
                .filter(|z| only.is_none_or(|o| o == z.name))
            {
                out.push(String::new());
                zone(&mut out, z);
            }
        }
    }
    // Each entry is one line; what the configuration put in it stays on that line.
    out.iter().map(|l| shown(l)).collect::<Vec<_>>().join("\n")
}

/// `policy why` and `zone why`: the answer in words (the first word `allowed` or
/// `denied`) or as one JSON object; exit status 0 when allowed, 1 when denied.
pub fn why(
    answer: &crate::why::Answer,
    inside: bool,
    format: crate::cli::Output,
) -> Result<std::process::ExitCode, Error> {
    use crate::cli::Output;
    match format {
        Output::Json => {
            print(&serde_json::to_string(answer).map_err(|e| Error::Json(e.to_string()))?)?
        }
        Output::Text => {
            let text = answer.text(inside);
            let lines: Vec<_> = text.lines().map(shown).collect();
            print(&lines.join("\n"))?
        }
    }
    Ok(std::process::ExitCode::from(u8::from(!answer.allowed)))
}

static JSON_ERRORS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// From now on [`error_line`] writes JSON: the command line asked for JSON output.
pub fn errors_as_json() {
    JSON_ERRORS.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// An error on stderr, as one line: `error: MESSAGE` for people, or, when the command
/// line asked for JSON, `{"error": MESSAGE, "exit_code": N}` (docs/OUTPUT.md).
pub fn error_line(message: &str, exit_code: u8) {
    if JSON_ERRORS.load(std::sync::atomic::Ordering::Relaxed) {
        let doc = serde_json::json!({"error": message, "exit_code": exit_code});
        wardcell_common::eprintln_line!("{doc}");
    } else {
        wardcell_common::eprintln_line!("error: {}", shown(message));
    }
}

/// What `zone enter` says on stderr as soon as the entry waits for approval: which zone,
/// how long at most, and where the person answers.
pub fn waiting_for_approval(zone: &str, timeout_secs: Option<u64>, plugin: &str) -> String {
    let how_long = match timeout_secs {
        Some(s) => format!(
            "for at most {}, then it is refused",
            wardcell_common::limits::Kind::Time.show(s)
        ),
        None => "until someone answers".to_string(),
    };
    let who = match plugin {
        "wardcell-approve" => "the person running wardcell answers on the host: `wardcell approvals watch` shows the request".to_string(),
        "" => "the approval plugin asks someone".to_string(),
        other => format!("the approval plugin {} asks someone", shown(other)),
    };
    format!("wardcell: entering zone '{zone}' needs approval: waiting {how_long}; {who}")
}

/// `zone denials` for people: a count, then one line a refusal, oldest first (time in
/// UTC, host:port, why), then where to ask.
pub fn denials_text(zone: &str, v: &serde_json::Value) -> String {
    let total = v["total"].as_u64().unwrap_or(0);
    let recent = v["recent"].as_array().cloned().unwrap_or_default();
    if total == 0 {
        return format!("nothing refused by zone '{zone}''s proxy in this sandbox");
    }
    let mut out = format!(
        "{total} connection{} refused by zone '{zone}''s proxy in this sandbox{}:\n",
        if total == 1 { "" } else { "s" },
        if (recent.len() as u64) < total {
            format!(", the last {} of them", recent.len())
        } else {
            String::new()
        }
    );
    for d in &recent {
        let at = wardcell_support::audit::rfc3339(d["at_ms"].as_i64().unwrap_or(0));
        let host = d["host"].as_str().unwrap_or("-");
        let target = if host.contains(':') {
            format!("[{host}]:{}", d["port"])
        } else {
            format!("{host}:{}", d["port"])
        };
        out.push_str(&format!(
            "{at}  {}  {}\n",
            shown(&target),
            shown(d["reason"].as_str().unwrap_or(""))
        ));
    }
    out.push_str("`wardcell zone why HOST:PORT` says which rule refused one and which zones this run may enter allow it");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_line_says_ports_methods_and_placeholder() {
        let mut c = CredentialPlan {
            name: "api".into(),
            hosts: vec![
                "a.io".into(),
                "b.io:8443".into(),
                "[::1]".into(),
                "[::1]:9".into(),
            ],
            paths: vec![],
            methods: vec![],
            placeholder: None,
            scheme: CredentialScheme::Bearer,
            username: None,
            header: None,
            secret: SecretPlan::Env("K".into()),
        };
        assert_eq!(
            credential(&c),
            "api: bearer for a.io:443, b.io:8443, [::1]:443, [::1]:9 (all paths; GET HEAD POST PUT PATCH DELETE), from environment variable K (removed from every sandbox)"
        );
        c.methods = vec!["POST".into()];
        c.placeholder = Some("API_KEY".into());
        assert!(
            credential(&c).ends_with(
                "(all paths; POST), from environment variable K (removed from every sandbox); sandboxes it is attached for get API_KEY=wardcell-placeholder-not-a-secret"
            ),
            "{}",
            credential(&c)
        );
    }

    #[test]
    fn spec_table() {
        let cfg = wardcell_config::config::parse(
            r#"
[zones.agent]
profile    = "developer-readonly"
default    = true

[zones.push]
profile           = "git-push"
description       = "Can push to the company's git remote"
authenticated     = true
enter_from        = ["agent"]

[profiles.git-push]
extends = "developer-readonly"
"#,
            "f",
        )
        .unwrap();
        assert_eq!(
            zone_table(&cfg),
            "ZONE   DEFAULT  PROFILE             ENTER FROM  DESCRIPTION\n\
             agent  yes      developer-readonly  -           -\n\
             push            git-push            agent       Can push to the company's git remote"
        );
        assert_eq!(
            zone_json(&cfg).unwrap(),
            r#"{"zones":[{"name":"agent","default":true,"profile":"developer-readonly","enter_from":[],"description":null},{"name":"push","default":false,"profile":"git-push","enter_from":["agent"],"description":"Can push to the company's git remote"}]}"#
        );
    }

    #[test]
    fn durations() {
        assert_eq!(duration(600), "10m");
        assert_eq!(duration(5400), "1h30m");
        assert_eq!(duration(90), "1m30s");
        assert_eq!(duration(3605), "1h5s");
    }
}
