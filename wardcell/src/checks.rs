//! What `run` and `policy check` both say of a plan before anything starts.

use wardcell_common::plan::ProfilePlan;
use wardcell_support::sandbox_env::{MAX_EGRESS_PORTS, SANDBOX_PROXY_PORT};

/// One line for each `write` path a profile of `plan` names that does not exist here
/// (left out of the sandbox), each profile once: what `run` and `policy check` warn of.
pub fn missing_writes(plan: &wardcell_common::plan::Plan) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for p in plan.profiles() {
        for s in p.skipped.iter().filter(|s| s.rule == "write") {
            let line = format!(
                "warning: profile '{}' writes {:?}, which {}: it is left out of the sandbox; create it first if the sandbox should write there",
                p.name, s.path, s.reason
            );
            if !out.contains(&line) {
                out.push(line);
            }
        }
    }
    out
}

/// The descriptors a sandbox of this profile needs while its view is built: two per
/// path (the tree, and its copy for Landlock or the mount), and [`OPEN_FILES_BASE`].
pub fn open_files_needed(p: &ProfilePlan) -> u64 {
    2 * wardcell_support::view::profile_paths(p).count() as u64 + OPEN_FILES_BASE
}

/// What `run` would refuse about a sandbox of this profile before building it, in one
/// line: more egress ports than a sandbox can have, or more paths than `open_files`
/// (the hard open-file limit, which wardcell raises its own soft limit to) lets a
/// sandbox hold while its view is built. `policy check` says the same.
pub fn runnable(p: &ProfilePlan, open_files: Option<u64>) -> Result<(), String> {
    egress_ports(&p.network.entries()).map_err(|e| format!("profile '{}': {e}", p.name))?;
    // The plan writer refuses it too, as it prepares the view (prepare.rs): said here
    // first, so that `policy check` refuses what `run` refuses.
    if let Some(path) = p
        .read
        .iter()
        .chain(&p.write)
        .find(|path| path.starts_with("/proc"))
    {
        let (name, shown) = (&p.name, path.display());
        return Err(format!("profile '{name}' names {shown}, but every sandbox has a /proc of its own; remove it from the profile"));
    }
    let needed = open_files_needed(p);
    match open_files {
        Some(limit) if limit < needed => Err(format!(
            "profile '{}' names {} paths, and building its sandbox needs about {needed} open files, above this session's hard open-file limit of {limit}: raise it (as root, `ulimit -Hn {needed}`; for a service, LimitNOFILE=) or name fewer paths in the profile",
            p.name,
            wardcell_support::view::profile_paths(p).count()
        )),
        _ => Ok(()),
    }
}

/// The descriptors a sandbox needs besides two per path of its profile: measured as 27
/// (`ulimit -n N; wardcell run -- true` with 11 to 211 paths, with and without network,
/// needs exactly 2 per path and 27), with room for the descriptors a caller passes.
pub const OPEN_FILES_BASE: u64 = 48;

/// The distinct ports an allow list names, ascending, without the proxy's own port (its
/// listener is the explicit proxy's, on 127.0.0.1 only). Entries are `host:port`, already
/// validated by the config; anything else is skipped. Refused when there are more than
/// `MAX_EGRESS_PORTS`.
pub fn egress_ports(allow: &[String]) -> Result<Vec<u16>, String> {
    let mut ports: Vec<u16> = allow
        .iter()
        .filter_map(|e| e.rsplit_once(':')?.1.parse::<u16>().ok())
        .filter(|&p| p != 0 && p != SANDBOX_PROXY_PORT)
        .collect();
    ports.sort_unstable();
    ports.dedup();
    if ports.len() > MAX_EGRESS_PORTS {
        return Err(format!(
            "network.allow and network.internal name {} distinct ports; a sandbox can have at most {MAX_EGRESS_PORTS}: drop some ports from the profile's network entries",
            ports.len()
        ));
    }
    Ok(ports)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn a_profile_is_runnable_within_its_ports_and_the_open_file_limit() {
        let mut p = ProfilePlan {
            name: "big".into(),
            read: (0..100).map(|i| PathBuf::from(format!("/r/{i}"))).collect(),
            write: vec!["/w".into()],
            ..Default::default()
        };
        // 101 paths: two descriptors each, and the base.
        assert_eq!(open_files_needed(&p), 202 + OPEN_FILES_BASE);
        assert_eq!(runnable(&p, None), Ok(()));
        assert_eq!(runnable(&p, Some(202 + OPEN_FILES_BASE)), Ok(()));
        let e = runnable(&p, Some(201 + OPEN_FILES_BASE)).unwrap_err();
        assert!(e.starts_with("profile 'big' names 101 paths"), "{e}");
        assert!(
            e.contains(&format!(
                "hard open-file limit of {}",
                201 + OPEN_FILES_BASE
            )),
            "{e}"
        );
        // Internal entries count too: 6 ports under allow and 5 more under internal.
        p.network.allow = (1..=6).map(|p| format!("h.io:{p}")).collect();
        p.network.internal = (6..=11).map(|p| format!("git.corp:{p}")).collect();
        let e = runnable(&p, None).unwrap_err();
        assert!(
            e.starts_with(
                "profile 'big': network.allow and network.internal name 11 distinct ports"
            ),
            "{e}"
        );
    }

    #[test]
    fn egress_ports_are_distinct_sorted_and_bounded() {
        let allow = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            egress_ports(&allow(&[
                "a.io:443",
                "*.b.io:443",
                "github.com:22",
                "[::1]:8080",
                "x.io:3128"
            ]))
            .unwrap(),
            vec![22, 443, 8080]
        );
        let many: Vec<String> = (1..=11).map(|p| format!("h.io:{p}")).collect();
        assert!(egress_ports(&many).unwrap_err().contains("at most 10"));
        assert_eq!(egress_ports(&many[..10]).unwrap().len(), 10);
    }
}
