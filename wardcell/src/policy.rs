//! `wardcell policy check`, `wardcell policy show` and `wardcell policy why` (host only).

use std::process::ExitCode;

use crate::why::{Rules, Target};
use wardcell_common::plan::{Plan, SecretPlan, ZonePlan};
use wardcell_common::{envrules, limits};
use wardcell_config::resolve::{self, StartRequest};

use crate::agent_home::SANDBOX_STATE;
use crate::cli::{ConfigArg, Output, ProfileFlags, WhyArgs};
use crate::context;
use crate::error::Error;
use crate::output;

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("{n} {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// Load and check the configuration and resolve every zone; run nothing.
pub fn check(config: &ConfigArg, format: Output) -> Result<(), Error> {
    match (checked(config), format) {
        (Ok((summary, warnings)), Output::Text) => {
            for line in &warnings {
                wardcell_common::eprintln_line!("{}", output::shown(line));
            }
            output::print(&format!("ok: {summary}"))
        }
        (Ok((summary, warnings)), Output::Json) => output::print(
            &serde_json::json!({"ok": true, "summary": summary, "warnings": warnings}).to_string(),
        ),
        (Err(e), Output::Json) => {
            let doc = serde_json::json!({"ok": false, "error": e.to_string(), "warnings": []});
            output::print(&doc.to_string())?;
            Err(e)
        }
        (Err(e), Output::Text) => Err(e),
    }
}

/// What `policy check` found: the one-line summary and the warnings, or the refusal.
fn checked(config: &ConfigArg) -> Result<(String, Vec<String>), Error> {
    let host = context::load(config.file.as_deref())?;
    if host.config.approval.is_none() {
        if let Some(z) = host.config.zones.iter().find(|z| z.requires_approval) {
            return Err(Error::NoPlugin(z.name.clone()));
        }
    }
    let plan = resolve::resolve(
        &host.config,
        StartRequest::Default,
        Vec::new(),
        &host.context,
    )?;
    crate::credentials::check_sources(&plan)?;
    crate::trusted::check(&plan)?;
    // A plan over the limit of what the broker takes (its frame) is refused by `run`.
    let launch = wardcell_common::protocol::Launch::Run(Box::new(plan.clone()));
    wardcell_common::protocol::encode_frame(&launch).map_err(|e| {
        Error::Refused(format!(
            "the plan of this configuration cannot be handed to the broker: {e}"
        ))
    })?;
    // What `run` would refuse of each profile: the zones' as resolved, the others
    // (`run --profile`) alone.
    let open_files = crate::run::open_file_limit();
    let machine = std::cell::OnceCell::new();
    let check = |p: &wardcell_common::plan::ProfilePlan| {
        crate::checks::runnable(p, open_files)
            .and_then(|()| enforceable_here(&p.limits, &p.name, &machine))
            .map_err(Error::Refused)
    };
    for zone in &plan.zones {
        check(&zone.profile)?;
    }
    for name in host.config.profiles.keys() {
        if !plan.zones.iter().any(|z| &z.profile.name == name) {
            let ctx = &host.context;
            check(&resolve::resolve_profile(
                &host.config,
                name,
                &plan.home,
                &plan.cwd,
                ctx.getenv,
            )?)?;
        }
    }
    // What `run` makes itself (the agent profiles' state directories) is not missing.
    let made_by_run = |w: &String| w.contains(&format!("writes \"{SANDBOX_STATE}"));
    let missing = crate::checks::missing_writes(&plan)
        .into_iter()
        .filter(|w| !made_by_run(w));
    let warned = missing
        .chain(warnings(&plan, host.context.getenv))
        .collect();
    let summary = format!(
        "{}: {}, {}",
        host.config.source,
        plural(host.config.zones.len(), "zone"),
        plural(host.config.profiles.len(), "profile"),
    );
    Ok((summary, warned))
}

/// Print the plan `wardcell run` would hand the broker (without a command).
pub fn show(
    zone: Option<String>,
    profile: Option<String>,
    flags: ProfileFlags,
    config: &ConfigArg,
    format: Output,
) -> Result<(), Error> {
    let host = context::load_naming(config.file.as_deref(), profile.as_deref())?;
    let start = StartRequest::from_flags(zone.clone(), profile);
    let plan = resolve::resolve(&host.config, start, Vec::new(), &host.context)?;
    let plan = resolve::with_overrides(plan, &host.config, &host.context, flags.into())?;
    match format {
        Output::Json => output::print(&output::plan_json(&plan)?),
        Output::Text => output::print(&output::plan_text(&plan, zone.as_deref())),
    }
}

/// What the configuration asks for that cannot work here, though `run` starts: each a
/// `warning:` line naming the zone, profile and credential.
fn warnings(plan: &Plan, getenv: fn(&str) -> Option<String>) -> Vec<String> {
    let mut out = Vec::new();
    for zone in &plan.zones {
        let (z, p) = (&zone.name, &zone.profile);
        for name in &p.credentials {
            if !zone.authenticated {
                out.push(format!(
                    "warning: zone '{z}' (profile '{}') lists credential '{name}', but the zone does not set authenticated = true, so it is never attached there; set it in [zones.{z}], or give the zone a profile that names no credential",
                    p.name
                ));
                continue;
            }
            let hosts = plan.credentials.iter().filter(|c| &c.name == name);
            for host in hosts.flat_map(|c| &c.hosts) {
                let (h, port) = host_port(host);
                if !allows(&p.network.entries(), h, port) {
                    out.push(format!(
                        "warning: credential '{name}' is for {h}:{port}, which profile '{}' (zone '{z}') does not allow, so it is never attached there; add \"{h}:{port}\" to its network.allow",
                        p.name
                    ));
                }
            }
        }
        for s in p.skipped.iter().filter(|s| s.rule == "unix_sockets") {
            if s.path.starts_with('$') && s.reason.ends_with("is not set") {
                out.push(format!(
                    "warning: profile '{}' (zone '{z}') binds the socket named by {}, which is not set here, so that sandbox gets no socket for it",
                    p.name, s.path
                ));
            }
        }
    }
    // Only the credentials some zone attaches (the built-in agent profiles' among them
    // are read whenever a profile extends one).
    let attached = |name: &String| {
        let zones = plan.zones.iter().filter(|z| z.authenticated);
        zones
            .into_iter()
            .any(|z| z.profile.credentials.contains(name))
    };
    for c in plan.credentials.iter().filter(|c| attached(&c.name)) {
        if let SecretPlan::Env(var) = &c.secret {
            if getenv(var).is_none() {
                out.push(format!(
                    "warning: credential '{}' reads environment variable {var}, which is not set here, so a zone that attaches it cannot start its proxy; set it before `wardcell run`",
                    c.name
                ));
            }
        }
    }
    out
}

/// A credential's `host` or `host:port` (no port: 443), `[v6]` brackets kept.
fn host_port(entry: &str) -> (&str, u16) {
    let (host, port) = match entry.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && (!h.contains(':') || h.ends_with(']')) => {
            (h, p.parse().ok())
        }
        _ => (entry, None),
    };
    (host, port.unwrap_or(443))
}

/// An allow list admits `host:port`: an entry names it exactly, or `*.domain:port` names
/// a domain it is under (names compared without case, as DNS does).
fn allows(allow: &[String], host: &str, port: u16) -> bool {
    allow.iter().any(|entry| {
        let (pattern, p) = host_port(entry);
        if p != port {
            return false;
        }
        match pattern.strip_prefix("*.") {
            Some(domain) => {
                let host = host.to_ascii_lowercase();
                let suffix = format!(".{}", domain.to_ascii_lowercase());
                host.len() > suffix.len() && host.ends_with(&suffix)
            }
            None => pattern.eq_ignore_ascii_case(host),
        }
    })
}

/// On the host: answer `why` for a zone (the default one unless `--zone`) or a profile,
/// and for a denial name the zones of the configuration that would allow it. Exit status
/// 0 when allowed, 1 when denied.
pub fn why(
    zone: Option<String>,
    profile: Option<String>,
    why: &WhyArgs,
    config: &ConfigArg,
) -> Result<ExitCode, Error> {
    let host = context::load_naming(config.file.as_deref(), profile.as_deref())?;
    let target = Target::parse(
        &why.target,
        why.write,
        &host.context.cwd,
        &host.context.home,
    )
    .map_err(Error::Usage)?;
    let start = StartRequest::from_flags(zone, profile);
    let plan = resolve::resolve(&host.config, start, Vec::new(), &host.context)?;
    let env = envrules::text_vars();
    let sockets = wardcell_support::view::host_socket_dirs(&env);
    let rules_of = |z: &ZonePlan| crate::why::rules_of(&plan, &z.profile, Some(&z.name), &sockets);
    let all: Vec<Rules> = plan.zones.iter().map(rules_of).collect();
    let current = match plan.start_profile() {
        Some((zone, p)) => crate::why::rules_of(&plan, p, zone, &sockets),
        None => {
            return Err(Error::Refused(
                "the plan has no zone or profile to start in".into(),
            ))
        }
    };
    let answer = crate::why::answer(&current, &all, &target);
    output::why(&answer, false, why.output)
}

/// What `run` refuses of a profile's limits too: one, not best effort, that nothing here
/// can enforce. Looks at the machine (once, in `machine`) only when there is such a limit.
fn enforceable_here(
    limits: &limits::Limits,
    profile: &str,
    machine: &std::cell::OnceCell<limits::Machine>,
) -> Result<(), String> {
    let strict = wardcell_config::sizes::set_ones(limits).filter(|(_, b)| !b.best_effort);
    if strict.map(|(k, _)| k).all(|k| k == limits::Kind::Time) {
        return Ok(());
    }
    let machine = machine.get_or_init(|| crate::machine::probe(true));
    crate::machine::choose(limits, machine, profile).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_defaults_to_443_and_keeps_v6_brackets() {
        assert_eq!(host_port("git.example.com"), ("git.example.com", 443));
        assert_eq!(host_port("git.example.com:8443"), ("git.example.com", 8443));
        assert_eq!(host_port("[::1]:8080"), ("[::1]", 8080));
        assert_eq!(host_port("[::1]"), ("[::1]", 443));
    }

    #[test]
    fn allow_lists_match_exact_names_and_subdomains_on_the_same_port() {
        let allow: Vec<String> = ["Git.Example.com:443", "*.corp.example:8443"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert!(allows(&allow, "git.example.com", 443));
        assert!(!allows(&allow, "git.example.com", 8443));
        assert!(allows(&allow, "a.b.corp.example", 8443));
        assert!(!allows(&allow, "corp.example", 8443));
        assert!(!allows(&allow, "evilcorp.example", 8443));
    }
}
