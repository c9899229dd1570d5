//! `wardcell policy check` and `wardcell policy show` (host only).

use wardcell_common::resolve::{self, StartRequest};

use crate::cli::{ConfigArg, Output};
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
pub fn check(config: &ConfigArg) -> Result<(), Error> {
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
    // What `run` would refuse of each profile: the zones' as resolved, the others
    // (`run --profile`) alone.
    let open_files = crate::run::open_file_limit();
    for zone in &plan.zones {
        zone.profile.runnable(open_files).map_err(Error::Refused)?;
    }
    for name in host.config.profiles.keys() {
        if !plan.zones.iter().any(|z| &z.profile.name == name) {
            let ctx = &host.context;
            resolve::resolve_profile(&host.config, name, &plan.home, &plan.cwd, ctx.getenv)?
                .runnable(open_files)
                .map_err(Error::Refused)?;
        }
    }
    for line in plan.missing_writes() {
        wardcell_common::eprintln_line!("{}", output::shown(&line));
    }
    output::print(&format!(
        "ok: {}: {}, {}",
        host.config.source,
        plural(host.config.zones.len(), "zone"),
        plural(host.config.profiles.len(), "profile"),
    ))
}

/// Print the plan `wardcell run` would hand the broker (without a command).
pub fn show(
    zone: Option<String>,
    profile: Option<String>,
    config: &ConfigArg,
    format: Output,
) -> Result<(), Error> {
    let host = context::load(config.file.as_deref())?;
    let start = match (&zone, profile) {
        (Some(z), _) => StartRequest::Zone(z.clone()),
        (None, Some(p)) => StartRequest::Profile(p),
        (None, None) => StartRequest::Default,
    };
    let plan = resolve::resolve(&host.config, start, Vec::new(), &host.context)?;
    match format {
        Output::Json => output::print(&output::plan_json(&plan)?),
        Output::Text => output::print(&output::plan_text(&plan, zone.as_deref())),
    }
}
