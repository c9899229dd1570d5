//! The last step of `wardcell run`'s plan writer before it hands over the plan: every
//! sandbox the run may build, prepared (`wardcell_common::prepared`).
//!
//! Before any sandbox of the run exists, and once for the whole run, this:
//! 1. makes wardcell's own directories, so that every view can mask them, and follows
//!    each name to where it really is (a link to one that a sandbox could replace refuses
//!    the run);
//! 2. finds what the run trusts where a sandbox could write it (`Plan::pinned`: the
//!    client, the broker and its helpers, the approval plugin, credential commands, the
//!    CA files), which every view binds read-only;
//! 3. records what every path the plan names is now (one `lstat` each; a final symbolic
//!    link is never recorded): a sandbox is built only from paths that, opened without
//!    following a link at any component, are still those very objects;
//! 4. makes each zone's view, its masks, what the host could undo in it, its CA files,
//!    ports and variables; or the one line that says why that profile cannot run here.
//!
//! The broker adds what a request brings (the command, its directory, the caller's
//! environment) when a sandbox is asked for, and decides who may ask.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use wardcell_common::helper;
use wardcell_common::identity::Identity;
use wardcell_common::plan::{Plan, ProfilePlan, SecretPlan, Start, ViewEntry, ViewKind};
use wardcell_common::prepared::{
    link_refusal, symlink_in_writable_tree, Prepared, PreparedEnv, Sandbox,
};
use wardcell_support::sandbox_env::{
    self, CA_VARS, NO_PROXY_VARS, PLACEHOLDER_VALUE, PROXY_VARS, SANDBOX_CA_BUNDLE,
    SANDBOX_PROXY_PORT, SYSTEM_ROOTS,
};
use wardcell_support::view;

use crate::recorded::Recorded;

/// Bound read-only into every sandbox: CPU topology (nproc and friends). Its own /proc,
/// a minimal /dev and a private /tmp are the shim's to make. macOS has no /sys (the
/// Seatbelt profile allows the sysctls that say as much).
pub const ALWAYS_READ: &[&str] = if cfg!(target_os = "linux") {
    &["/sys/devices/system/cpu"]
} else {
    &[]
};

/// Steps 1 to 4 for `plan`, whose broker is `broker`; `host_env` is the environment
/// `wardcell run` started in. Err: the run cannot start (step 1).
pub fn prepare(
    plan: &mut Plan,
    broker: &Path,
    host_env: &[(String, String)],
) -> Result<(), String> {
    make_own_dirs(plan)?;
    resolve_own_paths(plan)?;
    plan.pinned = pinned(plan, broker, host_env);
    let ids = record_identities(plan, host_env);
    plan.prepared = prepare_all(plan, &ids, host_env, &|p: &Path| p.exists());
    Ok(())
}

/// Step 4 for every sandbox the run may build.
fn prepare_all(
    plan: &Plan,
    ids: &Recorded,
    host_env: &[(String, String)],
    exists: Look,
) -> Vec<Prepared> {
    // Zones of one profile (the same, to the last path: the start zone's may have the
    // run's flags applied) and one kind share one: a plan of thousands of zones stays
    // small, and each view is made once.
    let mut sandboxes: Vec<(Option<&str>, &ProfilePlan, bool)> = Vec::new();
    let zones = plan.zones.iter();
    sandboxes.extend(zones.map(|z| (Some(z.name.as_str()), &z.profile, z.authenticated)));
    if let Start::Profile(p) = &plan.start {
        sandboxes.push((None, p, true));
    }
    // Each prepared entry's index, by kind, and the profile each was made from.
    let mut shared: HashMap<(&str, bool, bool), Vec<usize>> = HashMap::new();
    let mut made_from: Vec<&ProfilePlan> = Vec::new();
    let sockets = view::host_socket_dirs(host_env);
    let mut prepared: Vec<Prepared> = Vec::new();
    for (zone, profile, authenticated) in sandboxes {
        let kind = (profile.name.as_str(), authenticated, zone.is_some());
        let same = shared.entry(kind).or_default();
        if let Some(&i) = same.iter().find(|&&i| made_from[i] == profile) {
            prepared[i].zones.push(zone.map(str::to_string));
            continue;
        }
        same.push(prepared.len());
        made_from.push(profile);
        prepared.push(Prepared {
            zones: vec![zone.map(str::to_string)],
            // Named for each zone as it is asked about (`Plan::rules`).
            rules: crate::why::rules_of(plan, profile, None, &sockets),
            made: prepare_one(plan, ids, host_env, (zone, profile, authenticated), exists),
        });
    }
    prepared
}

/// wardcell's own directories (the runtime and state ones, the user's configuration
/// where it is missing), made where missing, private, so that their identities are
/// recorded and every view can mask them. Each must then be, at its own name, a directory
/// of the caller's: never a link to one (someone else's link would lead the run's files,
/// and the sweep, where they chose). The broker checks again, where each really is, that
/// it is the caller's and private.
fn make_own_dirs(plan: &Plan) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let uid = nix::unistd::getuid().as_raw();
    let user_config = plan.dirs.config.first().filter(|d| !d.exists());
    let state_runs = plan.dirs.state.join("runs");
    let dirs = [Some(&plan.dirs.runtime), Some(&state_runs), user_config];
    for d in dirs.into_iter().flatten() {
        let _ = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(d);
        match std::fs::symlink_metadata(d) {
            Ok(m) if !m.is_dir() || m.uid() != uid => {
                let d = d.display();
                return Err(format!(
                    "{d}: exists but is not a directory you own; remove it and try again"
                ));
            }
            // Missing still: the broker says why it cannot be made.
            _ => {}
        }
    }
    Ok(())
}

/// What a sandbox's CA bundle is made of: the distribution's bundle, then each file a CA
/// variable of the host environment `env` names (a corporate CA, say), each once, when
/// named without a symbolic link on the way. Only their certificates go into the bundle
/// (the shim keeps nothing else of them).
pub fn ca_files(env: &[(String, String)], exists: &dyn Fn(&Path) -> bool) -> Vec<PathBuf> {
    let mut out = Vec::from_iter(SYSTEM_ROOTS.iter().map(PathBuf::from).find(|p| exists(p)));
    // A link on the way (one a sandbox may have planted in a tree it writes) is not
    // followed: the file must be named as it is.
    let as_named = |p: &PathBuf| std::fs::canonicalize(p).is_ok_and(|c| &c == p);
    for k in CA_VARS {
        let named = env.iter().find(|(n, _)| n == k);
        let p = named
            .map(|(_, v)| PathBuf::from(v))
            .filter(|p| p.is_absolute());
        if let Some(p) = p.filter(|p| exists(p) && as_named(p) && !out.contains(p)) {
            out.push(p);
        }
    }
    out
}

/// wardcell's own directories and the credential files, where they really are. A link on
/// the way to one of them that a sandbox of this run could replace (its directory lies in
/// a tree some profile writes) refuses the run; otherwise each name is followed now, once,
/// before any sandbox exists, so that masks, pins and identities are the real object's,
/// not the link's (a `~/.config/wardcell` linked into a project would otherwise stay
/// writable there).
pub fn resolve_own_paths(plan: &mut Plan) -> Result<(), String> {
    let profiles: Vec<&ProfilePlan> = plan.profiles().collect();
    let real = |p: &Path| -> Result<PathBuf, String> {
        for profile in &profiles {
            if let Some((link, w)) = symlink_in_writable_tree(p, &profile.write, &Path::is_symlink)
            {
                return Err(link_refusal(p, &link, &profile.name, &w));
            }
        }
        Ok(std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()))
    };
    let mut dirs = plan.dirs.clone();
    for d in dirs.config.iter_mut() {
        *d = real(d)?;
    }
    dirs.state = real(&dirs.state)?;
    dirs.runtime = real(&dirs.runtime)?;
    let mut credentials = plan.credentials.clone();
    for c in credentials.iter_mut() {
        if let SecretPlan::File(f) = &mut c.secret {
            *f = real(f)?;
        }
    }
    plan.dirs = dirs;
    plan.credentials = credentials;
    Ok(())
}

/// What every view binds read-only where a tree is writable (`Plan::pinned`), where each
/// really is: the programs the broker will open for this plan (its helpers beside it, the
/// approval plugin, the credentials' commands, found as it finds them), the broker, the
/// directory of this build's helpers (so that none this run does not start, and no
/// program named like a tool beside them or in `wardcell-nested`, which goes first on a
/// sandbox's `PATH`, can be put there), the client's directory and the CA files.
fn pinned(plan: &Plan, broker: &Path, host_env: &[(String, String)]) -> Vec<PathBuf> {
    let helpers = broker.parent().unwrap_or(Path::new("/"));
    let mut paths = vec![broker.to_path_buf(), helpers.to_path_buf()];
    paths.push(helpers.join("wardcell-shim"));
    if plan.profiles().any(|p| p.network.enabled()) {
        paths.push(helpers.join("wardcell-proxy"));
    }
    let found = |prog: &String| helper::program_path(prog, &|p| p.is_file());
    if plan.zones.iter().any(|z| z.requires_approval) {
        paths.extend(
            plan.approval
                .as_ref()
                .and_then(|a| a.first())
                .and_then(found),
        );
    }
    for c in &plan.credentials {
        if let SecretPlan::Command(argv) = &c.secret {
            paths.extend(argv.first().and_then(found));
        }
    }
    paths.extend(ca_files(host_env, &|p| p.exists()));
    paths.extend(
        plan.client
            .as_ref()
            .and_then(|c| c.parent())
            .map(PathBuf::from),
    );
    let mut real: Vec<PathBuf> = paths
        .iter()
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .collect();
    real.sort();
    real.dedup();
    real
}

/// What every path the plan names is now (step 3).
fn record_identities(plan: &Plan, host_env: &[(String, String)]) -> Recorded {
    // Host socket directories (masked where a tree shows them) and the trees every
    // sandbox reads, besides the plan's own paths.
    let mut paths = view::host_socket_dirs(host_env);
    paths.extend(ALWAYS_READ.iter().map(PathBuf::from));
    paths.extend(
        plan.profiles()
            .flat_map(|p| view::profile_paths(p).cloned()),
    );
    paths.extend(plan.dirs.all());
    paths.extend(view::credential_files(plan));
    paths.extend(plan.client.iter().chain(&plan.pinned).cloned());
    let now = |path: PathBuf| match std::fs::symlink_metadata(&path) {
        Ok(m) if !m.is_symlink() => Some((path, Identity::of(&m))),
        _ => None,
    };
    paths.into_iter().filter_map(now).collect()
}

/// What a path is, asked of the filesystem (or of a test).
type Look<'a> = &'a dyn Fn(&Path) -> bool;

/// One profile's sandbox (step 4): `zone` (None: `run --profile`'s), its profile, and
/// whether its proxy attaches the profile's credentials.
fn prepare_one(
    plan: &Plan,
    ids: &Recorded,
    host_env: &[(String, String)],
    (zone, profile, authenticated): (Option<&str>, &ProfilePlan, bool),
    exists: Look,
) -> Result<Sandbox, String> {
    // A limit, not best effort, that nothing here can enforce: the profile cannot run.
    let limits = crate::machine::choose(&profile.limits, &plan.machine, &profile.name)?;
    let mut denied = plan.dirs.all();
    denied.extend(view::credential_files(plan));
    let masks = masks(profile, &denied, host_env);
    let view = view_of(plan, ids, profile, &masks)?;
    // The supervisor's socket lies in the run's directory, under the runtime directory:
    // where it is there changes nothing of what is held.
    let socket = zone.map(|_| plan.dirs.runtime.join("run").join("s.sock"));
    let with_socket = socket.map(|s| ViewEntry::new(s, ViewKind::Socket, None));
    let all: Vec<ViewEntry> = view.iter().cloned().chain(with_socket).collect();
    let held = view::held(&all, &masks);
    let network = profile.network.enabled();
    let intercept = network && authenticated && !profile.credentials.is_empty();
    // A CA bundle where the proxy intercepts, or where the host names CA files of its
    // own (a corporate CA): read by the shim only as recorded at the start.
    let named_ca = host_env.iter().any(|(n, _)| CA_VARS.contains(&n.as_str()));
    let ca_files: Vec<_> = match intercept || (network && named_ca) {
        true => ca_files(host_env, exists)
            .into_iter()
            .filter_map(|p| std::fs::canonicalize(p).ok())
            .filter_map(|p| ids.get(&p).map(|id| (p, id)))
            .collect(),
        false => Vec::new(),
    };
    // Transparent egress: a listener per allowed port, each reachable only because every
    // address is the proxy's inside (PROTOCOL.md, "Transparent egress").
    let egress_ports = match network {
        true => crate::checks::egress_ports(&profile.network.entries())?,
        false => Vec::new(),
    };
    let proxy_port = network.then_some(SANDBOX_PROXY_PORT);
    let bundle = intercept || !ca_files.is_empty();
    let env = env_of(plan, ids, profile, host_env, (intercept, bundle));
    Ok(Sandbox {
        view,
        denied,
        held,
        ca_files,
        proxy_port,
        tcp_connect: proxy_port.into_iter().chain(egress_ports.clone()).collect(),
        egress_ports,
        env,
        limits,
    })
}

/// The view: the profile's trees and every sandbox's, each with its identity at the
/// start; the masks; the Unix sockets the profile names; the client; what the run trusts;
/// the links. The supervisor's socket is each sandbox's own, added when it is built.
fn view_of(
    plan: &Plan,
    ids: &Recorded,
    profile: &ProfilePlan,
    masks: &[PathBuf],
) -> Result<Vec<ViewEntry>, String> {
    let mut view: Vec<ViewEntry> = Vec::new();
    let trees = profile
        .read
        .iter()
        .cloned()
        .chain(ALWAYS_READ.iter().map(PathBuf::from))
        .map(|p| (p, ViewKind::Read))
        .chain(profile.write.iter().map(|p| (p.clone(), ViewKind::Write)));
    let name = &profile.name;
    for (path, what) in trees {
        let shown = path.display();
        if path.starts_with("/proc") {
            return Err(format!("profile '{name}' names {shown}, but every sandbox has a /proc of its own; remove it from the profile"));
        }
        let Some(id) = ids.get(&path) else {
            return Err(format!("{shown} could not be opened without following a symbolic link when the run started; make it a real directory or remove it from profile '{name}'"));
        };
        view.push(ViewEntry::new(path, what, Some(id)));
    }
    // Masks: one missing at the start has no identity: the shim keeps its name out of
    // the view all the same (it may be made later).
    for path in masks {
        view.push(ViewEntry::new(path.clone(), ViewKind::Mask, ids.get(path)));
    }
    for sock in &profile.unix_sockets {
        let Some(id) = ids.get(sock) else {
            let s = sock.display();
            return Err(format!(
                "the socket {s} could not be opened when the run started"
            ));
        };
        view.push(ViewEntry::new(sock.clone(), ViewKind::Socket, Some(id)));
    }
    // The client, at the path it was started from, in every sandbox: `wardcell zone ...`
    // works wherever it is installed (and says what does not work where it is).
    if let Some((client, id)) = client(plan, ids) {
        view.push(ViewEntry::new(client, ViewKind::Read, Some(id)));
    }
    // What the run trusts, where this profile could write it: read-only, and its
    // directories there pinned (a sandbox can neither change it nor move it away).
    for p in &plan.pinned {
        let writable = profile.write.iter().any(|w| p.starts_with(w));
        let id = ids.get(p).filter(|_| writable);
        view.extend(id.map(|id| ViewEntry::new(p.clone(), ViewKind::Read, Some(id))));
    }
    let links = profile.links.iter();
    view.extend(links.map(|(l, to)| ViewEntry::new(l.clone(), ViewKind::Link(to.clone()), None)));
    Ok(view)
}

/// The client, and what it was when the run started.
fn client(plan: &Plan, ids: &Recorded) -> Option<(PathBuf, Identity)> {
    let client = plan.client.as_ref()?;
    Some((client.clone(), ids.get(client)?))
}

/// Every path masked in the view: the profile's deny list, `denied` (never readable in
/// any sandbox, whatever the profile says), what the profile says is absent, and the
/// host's socket directories the profile named nothing in; sorted, each once.
fn masks(profile: &ProfilePlan, denied: &[PathBuf], host_env: &[(String, String)]) -> Vec<PathBuf> {
    let mut mask: Vec<PathBuf> = profile.deny.clone();
    mask.extend(denied.iter().chain(&profile.absent).cloned());
    let named: Vec<&PathBuf> = profile.read.iter().chain(&profile.write).collect();
    for s in view::host_socket_dirs(host_env) {
        if !named.iter().any(|n| n.starts_with(&s)) {
            mask.push(s);
        }
    }
    mask.sort();
    mask.dedup();
    mask
}

/// The placeholder variables of the credentials `names` (a profile's), each set to
/// `PLACEHOLDER_VALUE`: what a sandbox whose proxy attaches them gets.
fn placeholder_env(plan: &Plan, names: &[String]) -> Vec<(String, String)> {
    let ours = plan.credentials.iter().filter(|c| names.contains(&c.name));
    let vars = ours.filter_map(|c| c.placeholder.clone());
    vars.map(|var| (var, PLACEHOLDER_VALUE.to_string()))
        .collect()
}

/// What wardcell does to the environment of this profile's sandboxes besides the
/// profile's filter: SSH_AUTH_SOCK only where it names a socket the view holds; the
/// placeholders where the proxy attaches credentials (`intercept`); the proxy's and the
/// CA bundle's (`bundle`) variables, never the caller's.
fn env_of(
    plan: &Plan,
    ids: &Recorded,
    profile: &ProfilePlan,
    host_env: &[(String, String)],
    (intercept, bundle): (bool, bool),
) -> PreparedEnv {
    let ours = [PROXY_VARS, NO_PROXY_VARS, CA_VARS].concat();
    // A placeholder named like a variable wardcell sets is not set (the configuration
    // refuses one; wardcell's own value wins).
    let mut placeholders = match intercept {
        true => placeholder_env(plan, &profile.credentials),
        false => Vec::new(),
    };
    placeholders.retain(|(k, _)| !ours.contains(&k.as_str()));
    let mut removed = vec!["SSH_AUTH_SOCK".to_string()];
    removed.extend(placeholders.iter().map(|(k, _)| k.clone()));
    removed.extend(ours.iter().map(|k| k.to_string()));
    let in_view =
        |v: &str| std::fs::canonicalize(v).is_ok_and(|c| profile.unix_sockets.contains(&c));
    let agent = host_env
        .iter()
        .find(|(k, v)| k == "SSH_AUTH_SOCK" && in_view(v))
        .filter(|(k, _)| !placeholders.iter().any(|(p, _)| p == k));
    let mut set = placeholders.clone();
    let mut put = |names: &[&str], value: &str| {
        set.extend(names.iter().map(|k| (k.to_string(), value.to_string())))
    };
    // Network: only the zone's proxy, on the sandbox's own loopback.
    if profile.network.enabled() {
        put(
            PROXY_VARS,
            &format!("http://127.0.0.1:{SANDBOX_PROXY_PORT}"),
        );
        put(
            NO_PROXY_VARS,
            &sandbox_env::no_proxy(&profile.network.entries()),
        );
    }
    if bundle {
        put(CA_VARS, SANDBOX_CA_BUNDLE);
    }
    PreparedEnv {
        removed,
        agent: agent.cloned(),
        client: client(plan, ids),
        set,
    }
}

#[cfg(test)]
mod network_tests {
    use super::tests::*;
    use super::*;
    use wardcell_common::plan::SandboxSpec;

    #[test]
    fn no_network_means_no_proxy_and_no_tcp() {
        let plan = plan();
        let p = profile(&["/usr", "/home/u"], &["/home/u/src"]);
        let argv = vec!["true".to_string()];
        let mut r = req(&plan, &p, &argv, Path::new("/home/u/src"));
        r.asked
            .env
            .push(("HTTPS_PROXY".into(), "http://evil:1".into()));
        let spec = build(&r, &|_| true).unwrap();
        assert_eq!(spec.proxy_port, None);
        assert!(spec.tcp_connect.is_empty());
        assert!(
            !spec
                .env
                .iter()
                .any(|(k, _)| PROXY_VARS.contains(&k.as_str())),
            "{:?}",
            spec.env
        );
    }

    #[test]
    fn network_gets_the_proxy_and_credentials_the_ca() {
        let plan = plan();
        let mut p = profile(&["/usr", "/home/u"], &["/home/u/src"]);
        p.network.allow = vec!["git.example.com:443".into()];
        let argv = vec!["true".to_string()];
        let spec = build(&req(&plan, &p, &argv, Path::new("/home/u/src")), &|_| true).unwrap();
        let get =
            |s: &SandboxSpec, k: &str| s.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(spec.proxy_port, Some(SANDBOX_PROXY_PORT));
        assert_eq!(spec.tcp_connect, vec![SANDBOX_PROXY_PORT, 443]);
        assert_eq!(spec.egress_ports, vec![443]);
        assert_eq!(
            get(&spec, "HTTPS_PROXY").as_deref(),
            Some("http://127.0.0.1:3128")
        );
        assert_eq!(
            get(&spec, "SSL_CERT_FILE"),
            None,
            "no credentials, no interception"
        );

        p.credentials = vec!["git".into()];
        let mut r = req(&plan, &p, &argv, Path::new("/home/u/src"));
        r.asked.authenticated = true;
        // A request's own SSL_CERT_FILE is never read: only the host's.
        r.asked
            .env
            .push(("SSL_CERT_FILE".into(), "/home/u/.ssh/id_ed25519".into()));
        let spec = build(&r, &|_| true).unwrap();
        for k in CA_VARS {
            assert_eq!(get(&spec, k).as_deref(), Some(SANDBOX_CA_BUNDLE), "{k}");
        }
        // Not recorded at the start (it does not exist here): no roots rather than any.
        assert_eq!(spec.ca_files, vec![]);
    }

    #[test]
    fn a_placeholder_only_where_its_credential_is_attached() {
        let mut plan = plan();
        plan.credentials[0].placeholder = Some("GIT_KEY".into());
        let mut p = profile(&["/usr", "/home/u"], &["/home/u/src"]);
        p.network.allow = vec!["git.example.com:443".into()];
        p.credentials = vec!["git".into()];
        p.env.set = vec![("GIT_KEY".into(), "from-the-profile".into())];
        let argv = vec!["true".to_string()];
        let values = |authenticated: bool| {
            let mut r = req(&plan, &p, &argv, Path::new("/home/u/src"));
            r.asked.authenticated = authenticated;
            r.asked.env.push(("GIT_KEY".into(), "the-real-key".into()));
            let spec = build(&r, &|_| true).unwrap();
            spec.env
                .iter()
                .filter(|(k, _)| k == "GIT_KEY")
                .map(|(_, v)| v.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(values(true), [PLACEHOLDER_VALUE]);
        // Not attached here: the profile's own value, never the caller's.
        assert_eq!(values(false), ["from-the-profile"]);
    }

    #[test]
    fn a_placeholder_never_takes_the_place_of_a_variable_wardcell_sets() {
        let mut plan = plan();
        plan.credentials[0].placeholder = Some("PIP_CERT".into());
        let mut p = profile(&["/usr", "/home/u"], &["/home/u/src"]);
        p.network.allow = vec!["git.example.com:443".into()];
        p.credentials = vec!["git".into()];
        let argv = vec!["true".to_string()];
        let mut r = req(&plan, &p, &argv, Path::new("/home/u/src"));
        r.asked.authenticated = true;
        let spec = build(&r, &|_| true).unwrap();
        let set: Vec<&str> = spec
            .env
            .iter()
            .filter(|(k, _)| k == "PIP_CERT")
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(set, [SANDBOX_CA_BUNDLE]);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    use wardcell_common::plan::SandboxSpec;
    use wardcell_common::prepared::Asked;

    /// One sandbox asked for, with what the run started with.
    pub struct Request<'a> {
        pub plan: &'a Plan,
        pub asked: Asked<'a>,
        pub host_env: &'a [(String, String)],
        pub zone_socket: Option<&'a Path>,
    }

    /// The sandbox prepared as the plan writer does, then its spec made as the broker
    /// does when it is asked for; `exists` answers for the preparation.
    pub fn build(req: &Request<'_>, exists: &dyn Fn(&Path) -> bool) -> Result<SandboxSpec, String> {
        let a = &req.asked;
        let one = (a.zone, a.profile, a.authenticated);
        let made = prepare_one(req.plan, &recorded(), req.host_env, one, exists)?;
        made.spec(req.plan, a, req.zone_socket)
    }

    use wardcell_common::plan::{
        AuditPlan, CredentialPlan, CredentialScheme, Dirs, EnvPlan, SecretPlan, Start,
    };

    pub fn plan() -> Plan {
        Plan {
            source: "test".into(),
            cwd: "/home/u/src".into(),
            home: "/home/u".into(),
            command: vec!["true".into()],
            start: Start::Zone("agent".into()),
            zones: vec![],
            approval: None,
            audit: AuditPlan::default(),
            dirs: Dirs {
                config: vec!["/home/u/.config/wardcell".into(), "/etc/wardcell".into()],
                state: "/home/u/.local/state/wardcell".into(),
                runtime: "/run/user/1000/wardcell".into(),
            },
            credentials: vec![
                CredentialPlan {
                    name: "git".into(),
                    hosts: vec!["git.example.com".into()],
                    paths: vec![],
                    methods: vec![],
                    placeholder: None,
                    scheme: CredentialScheme::Basic,
                    username: Some("x".into()),
                    header: None,
                    secret: SecretPlan::Env("COMPANY_GIT_TOKEN".into()),
                },
                CredentialPlan {
                    name: "file".into(),
                    hosts: vec!["h".into()],
                    paths: vec![],
                    methods: vec![],
                    placeholder: None,
                    scheme: CredentialScheme::Bearer,
                    username: None,
                    header: None,
                    secret: SecretPlan::File("/home/u/src/token.txt".into()),
                },
            ],
            client: None,
            pinned: Vec::new(),
            prepared: Vec::new(),
            upstream_roots: Vec::new(),
            open_files: None,
            overrides: Default::default(),
            trace: None,
            machine: Default::default(),
        }
    }

    /// Identities "recorded at the start" for every path these tests name.
    fn recorded() -> Recorded {
        use wardcell_common::identity::{Identity, Kind};
        let paths = [
            "/usr",
            "/etc",
            "/home/u",
            "/home/u/src",
            "/home/u/.ssh",
            "/home/u/.config/wardcell",
            "/etc/wardcell",
            "/home/u/.local/state/wardcell",
            "/run",
            "/var/run",
            "/run/user/1000",
            "/run/user/1000/wardcell",
            "/home/u/.agent",
            "/home/u/src/token.txt",
            "/sys/devices/system/cpu",
            "/tmp/x",
            "/run/postgresql",
        ];
        let id = |i: usize| Identity {
            dev: 1,
            ino: i as u64 + 1,
            kind: Kind::Dir,
        };
        let each = paths.iter().enumerate();
        each.map(|(i, p)| (PathBuf::from(p), id(i))).collect()
    }

    /// The masks of a spec.
    pub fn masks(spec: &SandboxSpec) -> Vec<PathBuf> {
        wardcell_seatbelt::view_paths(spec, ViewKind::Mask)
            .cloned()
            .collect()
    }

    pub fn profile(read: &[&str], write: &[&str]) -> ProfilePlan {
        ProfilePlan {
            name: "p".into(),
            read: read.iter().map(PathBuf::from).collect(),
            write: write.iter().map(PathBuf::from).collect(),
            deny: vec!["/home/u/.ssh".into()],
            env: EnvPlan {
                deny: vec!["*_TOKEN".into()],
                set: vec![],
            },
            ..Default::default()
        }
    }

    pub fn req<'a>(
        plan: &'a Plan,
        profile: &'a ProfilePlan,
        argv: &'a [String],
        cwd: &'a Path,
    ) -> Request<'a> {
        Request {
            plan,
            asked: Asked {
                profile,
                zone: Some("agent"),
                chain: &[],
                argv,
                cwd: cwd.to_path_buf(),
                env: vec![
                    ("PATH".into(), "/usr/bin".into()),
                    ("GH_TOKEN".into(), "x".into()),
                    ("COMPANY_GIT_TOKEN".into(), "s3cret".into()),
                    ("WARDCELL_ZONE".into(), "forged".into()),
                    ("XDG_RUNTIME_DIR".into(), "/run/user/1000".into()),
                    ("SSH_AUTH_SOCK".into(), "/home/u/.agent/sock".into()),
                ],
                pty: false,
                authenticated: false,
            },
            zone_socket: None,
            host_env: host_env(),
        }
    }

    /// The environment `wardcell run` started in, in these tests.
    pub fn host_env() -> &'static [(String, String)] {
        static ENV: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();
        ENV.get_or_init(|| {
            vec![
                ("XDG_RUNTIME_DIR".into(), "/run/user/1000".into()),
                ("SSH_AUTH_SOCK".into(), "/home/u/.agent/sock".into()),
                ("SSL_CERT_FILE".into(), "/opt/roots.pem".into()),
            ]
        })
    }

    #[test]
    fn masks_wardcell_dirs_deny_paths_and_host_sockets() {
        let plan = plan();
        let p = profile(&["/usr", "/home/u"], &["/home/u/src"]);
        let argv = vec!["true".to_string()];
        let spec = build(&req(&plan, &p, &argv, Path::new("/home/u/src")), &|_| true).unwrap();
        for m in [
            "/home/u/.ssh",
            "/home/u/.config/wardcell",
            "/etc/wardcell",
            "/home/u/.local/state/wardcell",
            "/run",
            "/var/run",
            "/run/user/1000",
            "/home/u/.agent",
            "/home/u/src/token.txt",
        ] {
            assert!(
                masks(&spec).contains(&PathBuf::from(m)),
                "{m} not masked: {:?}",
                masks(&spec)
            );
        }
        // Linux: /sys/devices/system/cpu (macOS has no /sys).
        for always in ALWAYS_READ {
            assert!(wardcell_seatbelt::view_paths(&spec, ViewKind::Read)
                .any(|p| p == Path::new(always)));
        }
    }

    #[test]
    fn denied_holds_own_dirs_and_credential_files_even_where_no_mask_is() {
        let mut plan = plan();
        // Not recorded at the start: a mask without an identity (its name kept out of
        // the view all the same), and denied by path.
        plan.dirs.state = "/home/u/Library/Logs/wardcell".into();
        let p = profile(&["/usr", "/home/u"], &["/home/u/src"]);
        let argv = vec!["true".to_string()];
        let spec = build(&req(&plan, &p, &argv, Path::new("/home/u/src")), &|_| true).unwrap();
        let state = PathBuf::from("/home/u/Library/Logs/wardcell");
        let entry = spec.view.iter().find(|e| e.path == state).expect("a mask");
        assert_eq!((&entry.what, entry.id), (&ViewKind::Mask, None));
        let own = [
            "/home/u/.config/wardcell",
            "/etc/wardcell",
            "/home/u/Library/Logs/wardcell",
            "/run/user/1000/wardcell",
            "/home/u/src/token.txt",
        ];
        for d in own {
            assert!(
                spec.denied.contains(&PathBuf::from(d)),
                "{d}: {:?}",
                spec.denied
            );
        }
        assert!(spec.seatbelt_identity.is_empty());
        // The Seatbelt profile of this very spec denies each of them, last.
        let text = wardcell_seatbelt::profile(&spec).unwrap();
        let (_, last) = text.rsplit_once("\n; 8.").unwrap();
        for d in own {
            assert!(last.contains(&format!("(subpath \"{d}\")")), "{d}:\n{last}");
        }
    }

    #[test]
    fn host_sockets_come_from_the_host_environment_not_the_request() {
        let plan = plan();
        let p = profile(&["/usr", "/home/u"], &["/home/u/src"]);
        let argv = vec!["true".to_string()];
        let mut r = req(&plan, &p, &argv, Path::new("/home/u/src"));
        // A `zone enter` request carries the sandbox's environment, which has none.
        r.asked
            .env
            .retain(|(k, _)| k != "XDG_RUNTIME_DIR" && k != "SSH_AUTH_SOCK");
        let spec = build(&r, &|_| true).unwrap();
        assert!(masks(&spec).contains(&PathBuf::from("/run/user/1000")));
        assert!(masks(&spec).contains(&PathBuf::from("/home/u/.agent")));
    }

    #[test]
    fn environment_is_filtered_and_zone_set() {
        let plan = plan();
        let p = profile(&["/usr", "/home/u"], &["/home/u/src"]);
        let argv = vec!["true".to_string()];
        let spec = build(&req(&plan, &p, &argv, Path::new("/home/u/src")), &|_| true).unwrap();
        let get = |k: &str| {
            spec.env
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(get("PATH").as_deref(), Some("/usr/bin"));
        assert_eq!(get("GH_TOKEN"), None);
        // Read by a credential: removed although no deny pattern names it.
        assert_eq!(get("COMPANY_GIT_TOKEN"), None);
        assert_eq!(get("WARDCELL_ZONE").as_deref(), Some("agent"));
        assert_eq!(get("WARDCELL_SANDBOX").as_deref(), Some("1"));
        assert_eq!(get("XDG_RUNTIME_DIR"), None);
        assert_eq!(
            spec.env
                .iter()
                .filter(|(k, _)| k == "WARDCELL_ZONE")
                .count(),
            1
        );
    }

    #[test]
    fn unreachable_or_hidden_cwd_is_refused() {
        let plan = plan();
        let p = profile(&["/usr"], &[]);
        let argv = vec!["true".to_string()];
        let e = build(&req(&plan, &p, &argv, Path::new("/home/u/src")), &|_| true).unwrap_err();
        assert!(
            e.contains("cannot reach the working directory /home/u/src"),
            "{e}"
        );

        let p = profile(&["/usr", "/home/u"], &[]);
        let e = build(&req(&plan, &p, &argv, Path::new("/home/u/.ssh")), &|_| true).unwrap_err();
        assert!(e.contains("hidden from the sandbox"), "{e}");

        let p = profile(&["/usr", "/tmp/x"], &[]);
        let e = build(&req(&plan, &p, &argv, Path::new("/tmp/x")), &|_| true);
        assert!(
            e.is_ok(),
            "a tree under /tmp is bound over the private /tmp: {e:?}"
        );

        // A tree whose identity was not recorded (a link, or gone) is refused.
        let p = profile(&["/usr", "/home/u", "/nowhere"], &[]);
        let e = build(&req(&plan, &p, &argv, Path::new("/home/u/src")), &|_| true).unwrap_err();
        assert!(e.starts_with("/nowhere could not be opened"), "{e}");
    }

    #[test]
    fn missing_wardcell_dir_inside_a_writable_tree_is_refused() {
        use wardcell_common::prepared::own_dirs_now;
        let plan = plan();
        let p = profile(&["/usr"], &["/etc"]);
        let exists = |p: &Path| p != Path::new("/etc/wardcell");
        let e = own_dirs_now(&plan, &p, &exists, &|_| false).unwrap_err();
        assert!(e.starts_with("/etc/wardcell does not exist"), "{e}");
        assert!(own_dirs_now(&plan, &p, &|_| true, &|_| false).is_ok());
        // Asked when a sandbox is, never when the run starts: made during the run, the
        // next sandbox of that zone is built.
        let argv = vec!["true".to_string()];
        let r = req(&plan, &p, &argv, Path::new("/etc"));
        let one = (r.asked.zone, r.asked.profile, r.asked.authenticated);
        assert!(prepare_one(&plan, &recorded(), host_env(), one, &exists).is_ok());
    }

    #[test]
    fn a_symlink_to_wardcells_config_inside_a_writable_tree_is_refused() {
        use wardcell_common::prepared::own_dirs_now;
        let plan = plan();
        let p = profile(&["/usr", "/home/u"], &["/home/u"]);
        let link = |q: &Path| q == Path::new("/home/u/.config");
        let e = own_dirs_now(&plan, &p, &|_| true, &link).unwrap_err();
        assert!(
            e.contains("through the symbolic link /home/u/.config"),
            "{e}"
        );
        // The same link outside any writable tree is harmless.
        let p = profile(&["/usr", "/home/u"], &["/home/u/src"]);
        assert!(own_dirs_now(&plan, &p, &|_| true, &link).is_ok());
    }

    #[test]
    fn a_profile_naming_run_keeps_it() {
        let plan = plan();
        let p = profile(&["/usr", "/home/u", "/run/postgresql"], &["/home/u/src"]);
        let argv = vec!["true".to_string()];
        let spec = build(&req(&plan, &p, &argv, Path::new("/home/u/src")), &|_| true).unwrap();
        assert!(!masks(&spec).contains(&PathBuf::from("/run")));
        assert!(masks(&spec).contains(&PathBuf::from("/run/user/1000")));
    }

    #[test]
    fn zones_of_one_profile_share_one_prepared_sandbox() {
        use wardcell_common::plan::ZonePlan;
        let mut plan = plan();
        let zone = |name: &str, profile: &ProfilePlan, authenticated| ZonePlan {
            name: name.into(),
            description: None,
            default: false,
            enter_from: Vec::new(),
            requires_approval: false,
            approval_timeout_secs: None,
            authenticated,
            profile: profile.clone(),
        };
        let p = profile(&["/usr", "/home/u"], &["/home/u/src"]);
        let mut flagged = p.clone();
        flagged.read.push("/etc".into());
        plan.zones = vec![
            zone("agent", &flagged, false),
            zone("a", &p, false),
            zone("b", &p, false),
            zone("push", &p, true),
        ];
        let all = prepare_all(&plan, &recorded(), host_env(), &|_| true);
        let served: Vec<Vec<Option<String>>> = all.iter().map(|p| p.zones.clone()).collect();
        let names = |n: &[&str]| n.iter().map(|n| Some(n.to_string())).collect::<Vec<_>>();
        // The start zone's profile, with a run's flags, is its own; an authenticated
        // zone's sandbox differs (its proxy may attach credentials).
        assert_eq!(
            served,
            [names(&["agent"]), names(&["a", "b"]), names(&["push"])]
        );
        plan.prepared = all;
        let read = |z: &str| plan.prepared(Some(z)).unwrap().view.len();
        assert_eq!(read("a"), read("b"));
        assert_eq!(read("agent"), read("a") + 1);
    }

    #[test]
    fn a_directory_of_ours_missing_when_asked_for_is_refused_where_it_could_be_planted() {
        // Prepared while it existed (as the run started); gone by the time a sandbox
        // that writes its parent is asked for (these paths do not exist here).
        let plan = plan();
        let p = profile(&["/usr", "/home/u"], &["/home/u"]);
        let argv = vec!["true".to_string()];
        let e = build(&req(&plan, &p, &argv, Path::new("/home/u/src")), &|_| true).unwrap_err();
        assert!(
            e.starts_with("/home/u/.config/wardcell does not exist and profile 'p' lets the sandbox write /home/u"),
            "{e}"
        );
    }
}
