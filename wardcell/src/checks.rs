//! What `run` and `policy check` both say of a plan before anything starts.

use wardcell_common::plan::{self, ProfilePlan};

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
    2 * p.paths().count() as u64 + OPEN_FILES_BASE
}

/// What `run` would refuse about a sandbox of this profile before building it, in one
/// line: more egress ports than a sandbox can have, or more paths than `open_files`
/// (the hard open-file limit, which wardcell raises its own soft limit to) lets a
/// sandbox hold while its view is built. `policy check` says the same.
pub fn runnable(p: &ProfilePlan, open_files: Option<u64>) -> Result<(), String> {
    plan::egress_ports(&p.network.entries()).map_err(|e| format!("profile '{}': {e}", p.name))?;
    // The broker refuses it too, as it builds the view (spec.rs): said here first,
    // so that `policy check` refuses what `run` refuses.
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
            p.paths().count()
        )),
        _ => Ok(()),
    }
}

/// The descriptors a sandbox needs besides two per path of its profile: measured as 27
/// (`ulimit -n N; wardcell run -- true` with 11 to 211 paths, with and without network,
/// needs exactly 2 per path and 27), with room for the descriptors a caller passes.
pub const OPEN_FILES_BASE: u64 = 48;

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
}
