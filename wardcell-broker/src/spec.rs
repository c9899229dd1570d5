//! From a resolved profile to the shim's [`SandboxSpec`]. Pure: tests call it directly.

use std::path::{Path, PathBuf};

use wardcell_common::envrules::{self, CA_VARS, NO_PROXY_VARS, PROXY_VARS, SYSTEM_ROOTS};
use wardcell_common::identity::Identity;
use wardcell_common::plan::{
    Plan, ProfilePlan, SandboxSpec, ViewEntry, ViewKind, SANDBOX_CA_BUNDLE, SANDBOX_PROXY_PORT,
};

/// Bound read-only into every sandbox: CPU topology (nproc and friends). Its own /proc,
/// a minimal /dev and a private /tmp are the shim's to make. macOS has no /sys (the
/// Seatbelt profile allows the sysctls that say as much).
pub const ALWAYS_READ: &[&str] = if cfg!(target_os = "linux") {
    &["/sys/devices/system/cpu"]
} else {
    &[]
};

/// One sandbox asked for, by `wardcell run` or by a `zone enter`: what its spec is
/// built from besides the run's plan and host.
pub struct Asked<'a> {
    pub profile: &'a ProfilePlan,
    /// None for `run --profile`: no zone, no supervisor.
    pub zone: Option<&'a str>,
    /// The zones from the run's first to this one (empty without zones). Read by the
    /// proxy's spec (no proxy on macOS).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub chain: &'a [String],
    pub argv: &'a [String],
    pub cwd: PathBuf,
    /// The environment of the command's caller, filtered into the command's.
    pub env: Vec<(String, String)>,
    pub pty: bool,
    /// The zone is `authenticated`: its proxy attaches the profile's credentials.
    pub authenticated: bool,
}

/// One sandbox to build.
pub struct Request<'a> {
    pub plan: &'a Plan,
    pub asked: Asked<'a>,
    /// The environment `wardcell run` started in: the only source of host facts (where
    /// the host's sockets and CA certificates are). Never a `zone enter` request's.
    pub host_env: &'a [(String, String)],
    pub zone_socket: Option<&'a Path>,
}

/// What a sandbox's CA bundle is made of: the distribution's bundle, then each file a CA
/// variable of the host environment `env` names (a corporate CA, say), each once, when
/// named without a symbolic link on the way. Only
/// their certificates go into the bundle (the shim keeps nothing else of them).
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

fn inside(p: &Path, trees: &[PathBuf]) -> Option<PathBuf> {
    trees.iter().find(|t| p.starts_with(t)).cloned()
}

/// A symbolic link on the way to `p` whose directory the sandbox may write, and that tree.
fn symlink_in_writable_tree(
    p: &Path,
    write: &[PathBuf],
    is_symlink: &dyn Fn(&Path) -> bool,
) -> Option<(PathBuf, PathBuf)> {
    p.ancestors().filter(|a| is_symlink(a)).find_map(|link| {
        let dir = link.parent()?;
        inside(dir, write).map(|w| (link.to_path_buf(), w))
    })
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
        if let wardcell_common::plan::SecretPlan::File(f) = &mut c.secret {
            *f = real(f)?;
        }
    }
    plan.dirs = dirs;
    plan.credentials = credentials;
    Ok(())
}

fn link_refusal(p: &Path, link: &Path, profile: &str, w: &Path) -> String {
    let (p, link, w) = (p.display(), link.display(), w.display());
    format!("{p} is reached through the symbolic link {link}, and profile '{profile}' lets the sandbox write {w}, so it could replace the link and plant a configuration; make {link} a real directory or narrow the profile")
}

/// Build the spec, or say in one line why this profile cannot run here. `exists` is asked
/// about wardcell's own directories, `is_symlink` whether a path is a symbolic link
/// (the broker gives `Path::is_symlink`; tests give their own).
pub fn build_with(
    req: &Request<'_>,
    exists: &dyn Fn(&Path) -> bool,
    is_symlink: &dyn Fn(&Path) -> bool,
) -> Result<SandboxSpec, String> {
    let profile = req.asked.profile;
    let own = own_dirs(req, exists, is_symlink)?;
    let (view, denied) = view_of(req, own)?;
    let held = wardcell_common::plan::held(&view, &masks(req, &denied));
    let network = profile.network.enabled();
    let intercept = network && req.asked.authenticated && !profile.credentials.is_empty();
    // A CA bundle where the proxy intercepts, or where the host names CA files of its
    // own (a corporate CA): read by the shim only as recorded at the start.
    let named = |(n, _): &(String, String)| CA_VARS.contains(&n.as_str());
    let named_ca = req.host_env.iter().any(named);
    let ca_files: Vec<_> = if intercept || (network && named_ca) {
        ca_files(req.host_env, exists)
            .into_iter()
            .filter_map(|p| std::fs::canonicalize(p).ok())
            .filter_map(|p| req.plan.identities.get(&p).map(|id| (p, id)))
            .collect()
    } else {
        Vec::new()
    };
    let env = env_of(req, intercept, intercept || !ca_files.is_empty());
    if req.asked.argv.is_empty() {
        return Err("no command to run; give one after `--`".into());
    }
    // Transparent egress: a listener per allowed port, each reachable only because every
    // address is the proxy's inside (PROTOCOL.md, "Transparent egress").
    let egress_ports = match network {
        true => wardcell_common::plan::egress_ports(&profile.network.entries())?,
        false => Vec::new(),
    };
    let proxy_port = network.then_some(SANDBOX_PROXY_PORT);
    let tcp_connect = proxy_port.into_iter().chain(egress_ports.clone()).collect();
    Ok(SandboxSpec {
        argv: req.asked.argv.to_vec(),
        env,
        cwd: req.asked.cwd.clone(),
        view,
        tcp_connect,
        controlling_tty: req.asked.pty,
        proxy_port,
        egress_ports,
        ca_files,
        denied,
        seatbelt_identity: String::new(),
        open_files: req.plan.open_files,
        processes: None,
        pid_max: None,
        trace: None,
        held,
    })
}

/// wardcell's own directories, masked always. A missing one inside a writable tree, or
/// one reached through a link there, is a place the sandbox could plant a
/// configuration: the sandbox is refused.
fn own_dirs(
    req: &Request<'_>,
    exists: &dyn Fn(&Path) -> bool,
    is_symlink: &dyn Fn(&Path) -> bool,
) -> Result<Vec<PathBuf>, String> {
    let profile = req.asked.profile;
    let write = &profile.write;
    let own = req.plan.dirs.all();
    for p in &own {
        if let Some((link, w)) = symlink_in_writable_tree(p, write, &is_symlink) {
            return Err(link_refusal(p, &link, &profile.name, &w));
        }
        if !exists(p) {
            if let Some(w) = inside(p, write) {
                let (p, name, w) = (p.display(), &profile.name, w.display());
                return Err(format!("{p} does not exist and profile '{name}' lets the sandbox write {w}, so it could create it; create {p} (an empty directory will do) or narrow the profile"));
            }
        }
    }
    Ok(own)
}

/// The view: the profile's trees and every sandbox's, each with its identity at the
/// start; the masks; the Unix sockets; the client; the links. The working directory
/// must be in it and not hidden. Returns it with the paths no sandbox may ever read
/// (`own` and the credential sources).
fn view_of(req: &Request<'_>, own: Vec<PathBuf>) -> Result<(Vec<ViewEntry>, Vec<PathBuf>), String> {
    let profile = req.asked.profile;
    let ids = &req.plan.identities;
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
    // Masks: deny paths, wardcell's own directories, credential sources (never readable
    // in any sandbox, whatever the profile says), and host socket directories unless the
    // profile named something in them. One missing at the start has no identity: the
    // shim keeps its name out of the view all the same (it may be made later).
    let mut denied = own;
    denied.extend(req.plan.credential_files());
    let mask = masks(req, &denied);
    for path in &mask {
        view.push(ViewEntry::new(path.clone(), ViewKind::Mask, ids.get(path)));
    }
    // Unix sockets: the supervisor's (made by the broker where no sandbox reaches), and
    // those the profile names.
    if let Some(sock) = req.zone_socket {
        view.push(ViewEntry::new(sock.to_path_buf(), ViewKind::Socket, None));
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
    if let Some((client, id)) = client(req) {
        view.push(ViewEntry::new(client.clone(), ViewKind::Read, Some(id)));
    }
    // What the run trusts, where this profile could write it: read-only, and its
    // directories there pinned (a sandbox can neither change it nor move it away).
    for p in &req.plan.pinned {
        let id = ids.get(p).filter(|_| inside(p, &profile.write).is_some());
        view.extend(id.map(|id| ViewEntry::new(p.clone(), ViewKind::Read, Some(id))));
    }
    let links = profile.links.iter();
    view.extend(links.map(|(l, to)| ViewEntry::new(l.clone(), ViewKind::Link(to.clone()), None)));
    cwd_in(req, &view, &mask)?;
    Ok((view, denied))
}

/// The client, and what it was when the run started.
fn client<'r>(req: &Request<'r>) -> Option<(&'r PathBuf, Identity)> {
    let client = req.plan.client.as_ref()?;
    Some((client, req.plan.identities.get(client)?))
}

/// The working directory must be in the view and not hidden.
fn cwd_in(req: &Request<'_>, view: &[ViewEntry], mask: &[PathBuf]) -> Result<(), String> {
    let profile = req.asked.profile;
    let cwd = &req.asked.cwd;
    let reachable = view
        .iter()
        .any(|e| matches!(e.what, ViewKind::Read | ViewKind::Write) && cwd.starts_with(&e.path));
    let (name, shown) = (&profile.name, cwd.display());
    if !reachable {
        return Err(format!("profile '{name}' cannot reach the working directory {shown}; run from a directory it can read, or add this one to its read list"));
    }
    if let Some(m) = inside(cwd, mask) {
        let m = m.display();
        return Err(format!("the working directory {shown} is inside {m}, which is hidden from the sandbox; run from another directory"));
    }
    Ok(())
}

/// Every path masked in the view: the profile's deny list, `denied`, and the host's
/// socket directories the profile named nothing in; sorted, each once.
fn masks(req: &Request<'_>, denied: &[PathBuf]) -> Vec<PathBuf> {
    let profile = req.asked.profile;
    let mut mask: Vec<PathBuf> = profile.deny.clone();
    mask.extend(denied.iter().chain(&profile.absent).cloned());
    let named: Vec<&PathBuf> = profile.read.iter().chain(&profile.write).collect();
    for s in envrules::host_socket_dirs(req.host_env) {
        if !named.iter().any(|n| n.starts_with(&s)) {
            mask.push(s);
        }
    }
    mask.sort();
    mask.dedup();
    mask
}

/// The command's environment: the caller's, filtered by the profile (variables a
/// credential reads never enter any sandbox; SSH_AUTH_SOCK only where it names a socket
/// the view holds), the client and the sandbox tools first on PATH, wardcell's own, the
/// placeholders where the proxy attaches credentials (`intercept`), the proxy's and the
/// CA bundle's (`bundle`) variables, never the caller's.
fn env_of(req: &Request<'_>, intercept: bool, bundle: bool) -> Vec<(String, String)> {
    let profile = req.asked.profile;
    let mut env = envrules::filter(
        req.asked.env.clone(),
        &profile.env,
        &req.plan.credential_env_vars(),
    );
    env.retain(|(k, _)| k != "SSH_AUTH_SOCK");
    let in_view =
        |v: &str| std::fs::canonicalize(v).is_ok_and(|c| profile.unix_sockets.contains(&c));
    let agent = req
        .host_env
        .iter()
        .find(|(k, v)| k == "SSH_AUTH_SOCK" && in_view(v));
    env.extend(agent.cloned());
    if let Some((client, me)) = client(req) {
        envrules::client_on_path(&mut env, client, |c| {
            std::fs::metadata(c).ok().map(|m| Identity::of(&m) == me)
        });
        envrules::sandbox_tools_first(&mut env, client, Path::is_dir);
    }
    env.push(("WARDCELL_SANDBOX".into(), "1".into()));
    if let Some(zone) = req.asked.zone {
        env.push(("WARDCELL_ZONE".into(), zone.to_string()));
    }
    if let Some(sock) = req.zone_socket {
        env.push(("WARDCELL_ZONE_SOCKET".into(), sock.display().to_string()));
    }
    // A placeholder stands in for the secret where the proxy attaches it (its variable
    // was removed above with those credentials read); wardcell's own variables win.
    if intercept {
        let placeholders = req.plan.placeholder_env(&profile.credentials);
        env.retain(|(k, _)| !placeholders.iter().any(|(p, _)| p == k));
        env.extend(placeholders);
    }
    let ours = [PROXY_VARS, NO_PROXY_VARS, CA_VARS].concat();
    env.retain(|(k, _)| !ours.contains(&k.as_str()));
    let mut set = |names: &[&str], value: &str| {
        env.extend(names.iter().map(|k| (k.to_string(), value.to_string())))
    };
    // Network: only the zone's proxy, on the sandbox's own loopback.
    if profile.network.enabled() {
        let proxy = format!("http://127.0.0.1:{SANDBOX_PROXY_PORT}");
        set(PROXY_VARS, &proxy);
        set(
            NO_PROXY_VARS,
            &envrules::no_proxy(&profile.network.entries()),
        );
    }
    if bundle {
        set(CA_VARS, SANDBOX_CA_BUNDLE);
    }
    env
}

#[cfg(test)]
mod network_tests {
    use super::tests_support::*;
    use super::*;
    use wardcell_common::plan::PLACEHOLDER_VALUE;

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
}

#[cfg(test)]
pub mod tests_support {
    pub use super::tests::{build, plan, profile, req};
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`build_with`] as the broker calls it.
    pub fn build(req: &Request<'_>, exists: &dyn Fn(&Path) -> bool) -> Result<SandboxSpec, String> {
        build_with(req, exists, &Path::is_symlink)
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
            identities: recorded(),
            pinned: Vec::new(),
            upstream_roots: Vec::new(),
            open_files: None,
            overrides: Default::default(),
            trace: None,
            machine: Default::default(),
        }
    }

    /// Identities "recorded at the start" for every path these tests name.
    fn recorded() -> wardcell_common::identity::Recorded {
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
        spec.paths(&ViewKind::Mask).cloned().collect()
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
            assert!(spec.paths(&ViewKind::Read).any(|p| p == Path::new(always)));
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
        let plan = plan();
        let p = profile(&["/usr"], &["/etc"]);
        let argv = vec!["true".to_string()];
        let e = build(&req(&plan, &p, &argv, Path::new("/etc")), &|p: &Path| {
            p != Path::new("/etc/wardcell")
        })
        .unwrap_err();
        assert!(e.starts_with("/etc/wardcell does not exist"), "{e}");
    }

    #[test]
    fn a_symlink_to_wardcells_config_inside_a_writable_tree_is_refused() {
        let plan = plan();
        let p = profile(&["/usr", "/home/u"], &["/home/u"]);
        let argv = vec!["true".to_string()];
        let r = req(&plan, &p, &argv, Path::new("/home/u/src"));
        let link = |q: &Path| q == Path::new("/home/u/.config");
        let e = build_with(&r, &|_| true, &link).unwrap_err();
        assert!(
            e.contains("through the symbolic link /home/u/.config"),
            "{e}"
        );
        // The same link outside any writable tree is harmless.
        let p = profile(&["/usr", "/home/u"], &["/home/u/src"]);
        let r = req(&plan, &p, &argv, Path::new("/home/u/src"));
        assert!(build_with(&r, &|_| true, &link).is_ok());
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
}
