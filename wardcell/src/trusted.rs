//! What a run trusts that a sandbox could change through another name (issue 35, item 1).
//!
//! Every view binds the programs and files the run trusts read-only where a profile
//! writes their tree (the broker's `Plan::pinned`), but a bind covers one name: a file
//! with a second hard link inside a writable tree (cargo links `target/release/wardcell`
//! to `target/release/deps/wardcell-<hash>`) stays writable through it, and the next
//! program the run starts, or the next `wardcell run`, would be the sandbox's. Such a run
//! is refused, in `run` and in `policy check` alike, with what to do. A secret file with
//! a second name is refused wherever it is: the mask covers only the name the
//! configuration gives.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use wardcell_common::helper;
use wardcell_common::paths;
use wardcell_common::plan::{Plan, SecretPlan};

use crate::error::Error;

/// Refuse `plan` when a file it trusts has another name a sandbox of it could write, or
/// a secret file has another name at all.
pub fn check(plan: &Plan) -> Result<(), Error> {
    let writes: Vec<(&str, &PathBuf)> = plan
        .profiles()
        .flat_map(|p| p.write.iter().map(move |w| (p.name.as_str(), w)))
        .collect();
    // The directories of wardcell's programs are bound read-only where a tree is
    // writable; one that is a written tree itself cannot be.
    let client = std::env::current_exe().ok();
    let dirs = client.iter().flat_map(|c| {
        [
            c.parent().map(Path::to_path_buf),
            Some(paths::helper_dir(c)),
        ]
    });
    for dir in dirs.flatten().filter_map(|d| std::fs::canonicalize(d).ok()) {
        if let Some((profile, _)) = writes.iter().find(|(_, w)| **w == dir) {
            return Err(Error::Refused(format!(
                "{} holds wardcell's programs, and profile '{profile}' writes it, so a sandbox could replace them or put a program beside them that a later run or another zone starts; install wardcell outside every tree a profile writes (README, \"Try it\")",
                dir.display()
            )));
        }
    }
    for (file, what) in trusted(plan) {
        let Ok(real) = std::fs::canonicalize(&file) else {
            continue;
        };
        let names = std::fs::metadata(&real).map_or(1, |m| m.nlink());
        if names < 2 {
            continue;
        }
        if let Some((profile, tree)) = writes.iter().find(|(_, w)| real.starts_with(w)) {
            return Err(Error::Refused(format!(
                "{} ({what}) has {names} names (hard links), and profile '{profile}' writes {}, so a sandbox could change it through another one; copy it to a file of its own (`cp --remove-destination`), or run wardcell from outside {}",
                real.display(),
                tree.display(),
                tree.display()
            )));
        }
    }
    for file in plan.credential_files() {
        let names = std::fs::metadata(&file).map_or(1, |m| m.nlink());
        if names > 1 {
            return Err(Error::Refused(format!(
                "the secret file {} has {names} names (hard links): every sandbox is kept from this one only; give the secret a file of its own",
                file.display()
            )));
        }
    }
    Ok(())
}

/// The programs the run trusts, and what each is.
fn trusted(plan: &Plan) -> Vec<(PathBuf, &'static str)> {
    let mut out = Vec::new();
    if let Ok(client) = std::env::current_exe() {
        let dir = paths::helper_dir(&client);
        for name in ["wardcell-broker", "wardcell-shim", "wardcell-proxy"] {
            out.push((dir.join(name), "a helper of wardcell"));
        }
        out.push((client, "the wardcell client"));
    }
    let program = |argv: Option<&Vec<String>>| {
        let prog = argv.and_then(|a| a.first())?;
        helper::program_path(prog, &Path::is_file)
    };
    out.extend(program(plan.approval.as_ref()).map(|p| (p, "the approval plugin")));
    for c in &plan.credentials {
        if let SecretPlan::Command(argv) = &c.secret {
            out.extend(program(Some(argv)).map(|p| (p, "a credential's command")));
        }
    }
    out
}
