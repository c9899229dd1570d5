//! A sandbox as `wardcell run`'s plan writer prepared it when the run started, and the
//! spec of one sandbox made from it when one is asked for.
//!
//! The plan writer (`wardcell/src/prepare.rs`) records what every path is, before any
//! sandbox of the run exists, and makes each zone's view from the configuration: what it
//! binds, what it masks, what the host could undo, the CA files, the ports, the variables
//! wardcell sets. That is the configuration resolved one step further, as trusted as the
//! plan (THREAT_MODEL 2). What a request brings is added here, by the broker, when the
//! sandbox is asked for: the command, its working directory (which the view must reach)
//! and the caller's environment, filtered by the profile.

use std::path::{Path, PathBuf};

use crate::envrules;
use crate::identity::Identity;
use crate::plan::{Plan, ProfilePlan, SandboxSpec, ViewEntry, ViewKind};
pub use crate::plan::{Prepared, PreparedEnv, Sandbox};

/// One sandbox asked for, by `wardcell run` or by a `zone enter`.
pub struct Asked<'a> {
    pub profile: &'a ProfilePlan,
    /// None for `run --profile`: no zone, no supervisor.
    pub zone: Option<&'a str>,
    /// The zones from the run's first to this one (empty without zones). Read by the
    /// proxy's spec (no proxy on macOS).
    pub chain: &'a [String],
    pub argv: &'a [String],
    pub cwd: PathBuf,
    /// The environment of the command's caller, filtered into the command's.
    pub env: Vec<(String, String)>,
    pub pty: bool,
    /// The zone is `authenticated`: its proxy attaches the profile's credentials.
    pub authenticated: bool,
}

impl Sandbox {
    /// The spec of one sandbox of this profile, or why it cannot be built now.
    /// `socket`: its supervisor's, in a zone. Of what the view names, only wardcell's own
    /// directories are looked at again here (`own_dirs_now`): the shim opens every path
    /// without following a link and refuses the sandbox where one is not what was
    /// recorded.
    pub fn spec(
        &self,
        plan: &Plan,
        asked: &Asked<'_>,
        socket: Option<&Path>,
    ) -> Result<SandboxSpec, String> {
        if asked.argv.is_empty() {
            return Err("no command to run; give one after `--`".into());
        }
        own_dirs_now(plan, asked.profile, &|p| p.exists(), &Path::is_symlink)?;
        cwd_in(asked, &self.view)?;
        let mut view = self.view.clone();
        let socket_entry = |s: &Path| ViewEntry::new(s.to_path_buf(), ViewKind::Socket, None);
        view.extend(socket.map(socket_entry));
        Ok(SandboxSpec {
            argv: asked.argv.to_vec(),
            env: self.env_of(plan, asked, socket),
            cwd: asked.cwd.clone(),
            view,
            tcp_connect: self.tcp_connect.clone(),
            controlling_tty: asked.pty,
            proxy_port: self.proxy_port,
            egress_ports: self.egress_ports.clone(),
            ca_files: self.ca_files.clone(),
            denied: self.denied.clone(),
            seatbelt_identity: String::new(),
            open_files: plan.open_files,
            processes: None,
            pid_max: None,
            trace: None,
            held: self.held.clone(),
        })
    }

    /// The command's environment: the caller's, filtered by the profile (variables a
    /// credential reads never enter any sandbox), the client and the sandbox tools first
    /// on `PATH`, wardcell's own variables, then what was prepared.
    fn env_of(
        &self,
        plan: &Plan,
        asked: &Asked<'_>,
        socket: Option<&Path>,
    ) -> Vec<(String, String)> {
        let ours = &self.env;
        let removed = plan.credential_env_vars();
        let mut env = envrules::filter(asked.env.clone(), &asked.profile.env, &removed);
        env.retain(|(k, _)| !ours.removed.contains(k));
        env.extend(ours.agent.clone());
        if let Some((client, me)) = &ours.client {
            envrules::client_on_path(&mut env, client, |c| {
                std::fs::metadata(c).ok().map(|m| Identity::of(&m) == *me)
            });
            envrules::sandbox_tools_first(&mut env, client, Path::is_dir);
        }
        env.push(("WARDCELL_SANDBOX".into(), "1".into()));
        env.extend(asked.zone.map(|z| ("WARDCELL_ZONE".into(), z.to_string())));
        let socket = socket.map(|s| s.display().to_string());
        env.extend(socket.map(|s| ("WARDCELL_ZONE_SOCKET".into(), s)));
        env.extend(ours.set.iter().cloned());
        env
    }
}

/// A symbolic link on the way to `p` whose directory the sandbox may write, and that tree.
pub fn symlink_in_writable_tree(
    p: &Path,
    write: &[PathBuf],
    is_symlink: &dyn Fn(&Path) -> bool,
) -> Option<(PathBuf, PathBuf)> {
    p.ancestors().filter(|a| is_symlink(a)).find_map(|link| {
        let dir = link.parent()?;
        let tree = write.iter().find(|t| dir.starts_with(t));
        tree.map(|w| (link.to_path_buf(), w.clone()))
    })
}

pub fn link_refusal(p: &Path, link: &Path, profile: &str, w: &Path) -> String {
    let (p, link, w) = (p.display(), link.display(), w.display());
    format!("{p} is reached through the symbolic link {link}, and profile '{profile}' lets the sandbox write {w}, so it could replace the link and plant a configuration; make {link} a real directory or narrow the profile")
}

/// wardcell's own directories, as they are when a sandbox is asked for: one reached
/// through a link inside a tree `profile` writes, or missing inside one, is a place its
/// sandbox could plant a configuration, and the sandbox is refused. (The plan writer
/// refused the run for such a link when it started; since, the host may have moved one.
/// The shim refuses a sandbox whose paths are not what was recorded, but a mask of a
/// missing name masks nothing.)
pub fn own_dirs_now(
    plan: &Plan,
    profile: &ProfilePlan,
    exists: &dyn Fn(&Path) -> bool,
    is_symlink: &dyn Fn(&Path) -> bool,
) -> Result<(), String> {
    let write = &profile.write;
    for p in &plan.dirs.all() {
        if let Some((link, w)) = symlink_in_writable_tree(p, write, is_symlink) {
            return Err(link_refusal(p, &link, &profile.name, &w));
        }
        if let Some(w) = write
            .iter()
            .find(|w| p.starts_with(w))
            .filter(|_| !exists(p))
        {
            let (p, name, w) = (p.display(), &profile.name, w.display());
            return Err(format!("{p} does not exist and profile '{name}' lets the sandbox write {w}, so it could create it; create {p} (an empty directory will do) or narrow the profile"));
        }
    }
    Ok(())
}

/// The working directory must be in the view and not inside one of its masks.
fn cwd_in(asked: &Asked<'_>, view: &[ViewEntry]) -> Result<(), String> {
    let cwd = &asked.cwd;
    let tree = |e: &&ViewEntry| matches!(e.what, ViewKind::Read | ViewKind::Write);
    let reachable = view.iter().filter(tree).any(|e| cwd.starts_with(&e.path));
    let mut mask = view.iter().filter(|e| e.what == ViewKind::Mask);
    let (name, shown) = (&asked.profile.name, cwd.display());
    if !reachable {
        return Err(format!("profile '{name}' cannot reach the working directory {shown}; run from a directory it can read, or add this one to its read list"));
    }
    if let Some(m) = mask.find(|m| cwd.starts_with(&m.path)) {
        let m = m.path.display();
        return Err(format!("the working directory {shown} is inside {m}, which is hidden from the sandbox; run from another directory"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zone_gets_its_own_prepared_sandbox_or_its_reason() {
        use crate::plan::Rules;
        let mut plan: Plan = crate::approval::tests::plan(Vec::new());
        let view = vec![ViewEntry::new("/usr".into(), ViewKind::Read, None)];
        let one = Sandbox {
            view,
            ..Default::default()
        };
        let rules = Rules {
            profile: "p".into(),
            read: vec!["/usr".into()],
            ..Default::default()
        };
        let zones = |names: &[&str]| names.iter().map(|n| Some(n.to_string())).collect();
        let made = |zones, made| Prepared {
            zones,
            rules: rules.clone(),
            made,
        };
        plan.prepared = vec![
            made(zones(&["agent", "push"]), Ok(one.clone())),
            made(zones(&["bad"]), Err("names /proc".into())),
        ];
        assert_eq!(plan.prepared(Some("agent")), Ok(&one));
        assert_eq!(plan.prepared(Some("push")), Ok(&one));
        assert_eq!(plan.prepared(Some("bad")), Err("names /proc".into()));
        let none = plan.prepared(None).unwrap_err();
        assert!(none.contains("no sandbox was prepared"), "{none}");
        assert!(plan.prepared(Some("other")).is_err());
        // Each zone's rules are named for it; a zone that cannot run still has them.
        assert_eq!(plan.rules("push").unwrap().zone.as_deref(), Some("push"));
        assert_eq!(plan.rules("bad").unwrap().read, rules.read);
        assert_eq!(plan.rules("other"), None);
    }
}
