//! Configuration + command line -> [`wardcell_common::plan::Plan`].
//!
//! [`resolve`] is the one place a plan is made: `wardcell run` hands its result to the
//! broker and `wardcell policy show` prints it, so the two cannot disagree. Here every
//! profile gets its `extends` applied and its paths expanded and canonicalised; a path
//! that does not exist on this machine is not an error but is left out and listed in
//! [`ProfilePlan::skipped`].

use std::collections::HashSet;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use crate::config::{Config, Profile};
use wardcell_common::plan::{
    AuditPlan, CredentialPlan, CredentialScheme, Dirs, EnvPlan, NetworkPlan, Overrides, Plan,
    ProfilePlan, SecretPlan, Skipped, Start, ZonePlan,
};
use wardcell_support::paths;

/// Where the user asked the run to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartRequest {
    /// The configuration's default zone.
    Default,
    /// `--zone NAME`.
    Zone(String),
    /// `--profile NAME`: outside any zone.
    Profile(String),
}

impl StartRequest {
    /// From `--zone` and `--profile` (which the command line never gives together; a
    /// zone wins).
    pub fn from_flags(zone: Option<String>, profile: Option<String>) -> StartRequest {
        match (zone, profile) {
            (Some(z), _) => StartRequest::Zone(z),
            (None, Some(p)) => StartRequest::Profile(p),
            (None, None) => StartRequest::Default,
        }
    }
}

/// What resolution needs to know about this machine and this invocation.
#[derive(Debug, Clone)]
pub struct Context {
    /// The user's home directory: "~".
    pub home: PathBuf,
    /// The directory wardcell was started in: ".".
    pub cwd: PathBuf,
    pub dirs: Dirs,
    /// The environment `run` started in, for `$NAME` entries of `unix_sockets`.
    pub getenv: fn(&str) -> Option<String>,
    /// The client binary that made the plan, bound into every zone sandbox.
    pub client: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolveError {
    UnknownZone {
        name: String,
        source: String,
        known: Vec<String>,
    },
    UnknownProfile {
        name: String,
        source: String,
        known: Vec<String>,
    },
    /// A `--read`, `--write`, `--deny` or `--allow` of `run` or `policy show` that cannot
    /// be applied (the message names the flag).
    Override(String),
    /// A `deny` entry that cannot be reached to be masked (permission denied on the
    /// way): a sandbox running as the caller could change a mode it owns and read it.
    Unmaskable { profile: String, entry: String },
    /// A write entry "." that is the home directory or `/` only because the run started
    /// there.
    WriteTrap {
        profile: String,
        path: PathBuf,
        home: bool,
    },
}

/// How a message names the configuration.
fn config_name(source: &str) -> String {
    if source == crate::config::BUILTIN_LABEL {
        "the built-in default configuration".to_string()
    } else {
        source.to_string()
    }
}

impl fmt::Display for ResolveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResolveError::UnknownZone {
                name,
                source,
                known,
            } => write!(
                f,
                "there is no zone '{name}' in {}; its zones are: {} (see `wardcell zone list`)",
                config_name(source),
                known.join(", ")
            ),
            ResolveError::UnknownProfile {
                name,
                source,
                known,
            } => write!(
                f,
                "there is no profile '{name}' in {}; the profiles are: {}",
                config_name(source),
                known.join(", ")
            ),
            ResolveError::Override(why) => f.write_str(why),
            ResolveError::Unmaskable { profile, entry } => write!(
                f,
                "profile '{profile}' denies {entry:?}, which cannot be reached to mask it (permission denied on the way); a sandbox running as you could change the mode of a directory you own and read it: make the directories above it searchable by you (chmod u+x), or remove the entry"
            ),
            ResolveError::WriteTrap {
                profile,
                path,
                home: true,
            } => write!(
                f,
                "profile '{profile}' writes \".\", and this run started in your home directory {}, so the sandbox could rewrite ~/.bashrc and your configuration; start wardcell in a project directory, or write \"~\" in the profile if the whole home is meant to be writable",
                path.display()
            ),
            ResolveError::WriteTrap { profile, .. } => write!(
                f,
                "profile '{profile}' writes \".\", and this run started in /, so the sandbox could write every file you can; start wardcell in a project directory, or write \"/\" in the profile if that is really meant"
            ),
        }
    }
}

impl std::error::Error for ResolveError {}

/// Turn a checked configuration, where to start, and the command into the plan.
pub fn resolve(
    cfg: &Config,
    start: StartRequest,
    command: Vec<String>,
    ctx: &Context,
) -> Result<Plan, ResolveError> {
    let home = canonical_or_given(&ctx.home);
    let cwd = canonical_or_given(&ctx.cwd);

    let (start, zones) = match start {
        StartRequest::Profile(name) => {
            let profile = resolve_profile(cfg, &name, &home, &cwd, ctx.getenv)?;
            (Start::Profile(profile), Vec::new())
        }
        StartRequest::Default | StartRequest::Zone(_) => {
            let name = match start {
                StartRequest::Zone(name) => {
                    if cfg.zone(&name).is_none() {
                        return Err(ResolveError::UnknownZone {
                            name,
                            source: cfg.source.clone(),
                            known: cfg.zones.iter().map(|z| z.name.clone()).collect(),
                        });
                    }
                    name
                }
                _ => cfg.default_zone().name.clone(),
            };
            let mut zones = Vec::with_capacity(cfg.zones.len());
            for z in &cfg.zones {
                zones.push(ZonePlan {
                    name: z.name.clone(),
                    description: z.description.clone(),
                    default: z.default,
                    enter_from: z.enter_from.clone(),
                    requires_approval: z.requires_approval,
                    approval_timeout_secs: z.approval_timeout_secs,
                    authenticated: z.authenticated,
                    profile: resolve_profile(cfg, &z.profile, &home, &cwd, ctx.getenv)?,
                });
            }
            zones.sort_by(|a, b| a.name.cmp(&b.name));
            (Start::Zone(name), zones)
        }
    };

    let credentials = cfg
        .credentials
        .values()
        .map(|c| credential_plan(c, &home, &cwd))
        .collect();
    Ok(Plan {
        source: cfg.source.clone(),
        cwd,
        home,
        command,
        start,
        zones,
        approval: cfg.approval.clone(),
        audit: AuditPlan {
            syslog: cfg.audit_syslog,
            max_log_kib: cfg.audit_max_log_kib,
        },
        dirs: ctx.dirs.clone(),
        credentials,
        client: ctx.client.clone(),
        prepared: Vec::new(),
        pinned: Vec::new(),
        upstream_roots: Vec::new(),
        open_files: None,
        overrides: Overrides::default(),
        trace: None,
        machine: Default::default(),
    })
}

fn credential_plan(c: &crate::config::Credential, home: &Path, cwd: &Path) -> CredentialPlan {
    use crate::config::{Scheme, SecretSource};
    CredentialPlan {
        name: c.name.clone(),
        hosts: c.hosts.clone(),
        paths: c.paths.clone(),
        methods: c.methods.clone(),
        placeholder: c.placeholder.clone(),
        scheme: match c.scheme {
            Scheme::Basic => CredentialScheme::Basic,
            Scheme::Bearer => CredentialScheme::Bearer,
            Scheme::Header => CredentialScheme::Header,
        },
        username: c.username.clone(),
        header: c.header.clone(),
        secret: match &c.secret {
            SecretSource::Env(v) => SecretPlan::Env(v.clone()),
            // Its syntax was checked when the file was parsed.
            SecretSource::File(f) => {
                SecretPlan::File(paths::expand(f, home, cwd).unwrap_or_else(|_| PathBuf::from(f)))
            }
            SecretSource::Command(argv) => SecretPlan::Command(argv.clone()),
        },
    }
}

/// One profile, `extends` applied, paths resolved against `home` and `cwd`.
pub fn resolve_profile(
    cfg: &Config,
    name: &str,
    home: &Path,
    cwd: &Path,
    getenv: fn(&str) -> Option<String>,
) -> Result<ProfilePlan, ResolveError> {
    let p: Profile = cfg
        .effective_profile(name)
        .ok_or_else(|| ResolveError::UnknownProfile {
            name: name.to_string(),
            source: cfg.source.clone(),
            // The built-in agent profiles too, read only when named.
            known: {
                let mut known: Vec<String> = cfg.profiles.keys().cloned().collect();
                for n in crate::config::BUILTIN_AGENT_NAMES {
                    if !known.iter().any(|k| k == n) {
                        known.push(n.to_string());
                    }
                }
                known.sort();
                known
            },
        })?;
    resolve_effective(p, home, cwd, getenv)
}

/// `wardcell run` (and `policy show`) `--read`, `--write`, `--deny`, `--allow` and
/// `--internal`: the
/// profile the run starts in, with these entries added for this run only (other zones,
/// even with the same profile, keep theirs; entering the start zone again gets them too).
/// The entries are checked as strictly as the configuration's, and a path that does not
/// exist is an error, not left out. The plan records them as given (`run.started`).
pub fn with_overrides(
    mut plan: Plan,
    cfg: &Config,
    ctx: &Context,
    overrides: Overrides,
) -> Result<Plan, ResolveError> {
    if overrides.is_empty() {
        return Ok(plan);
    }
    let bad = ResolveError::Override;
    for (flag, entries) in [
        ("allow", &overrides.allow),
        ("internal", &overrides.internal),
    ] {
        for entry in entries {
            let check = crate::config::check_host_port(entry);
            check.map_err(|why| bad(format!("--{flag} {why}")))?;
        }
    }
    let (start_zone, name) = match &plan.start {
        Start::Profile(p) => (None, p.name.clone()),
        Start::Zone(z) => {
            let zone = plan.zones.iter().find(|p| &p.name == z);
            (
                Some(z.clone()),
                zone.map(|z| z.profile.name.clone()).unwrap_or_default(),
            )
        }
    };
    let mut p = cfg
        .effective_profile(&name)
        .ok_or_else(|| bad(format!("no profile '{name}'")))?;
    let extend = |list: &mut Vec<String>, more: &[String]| {
        for m in more {
            if !list.contains(m) {
                list.push(m.clone());
            }
        }
    };
    // On a command line a relative path is relative to where the run starts, as a shell
    // user expects; in the configuration it must say so ("./").
    let relative = |v: &[String]| -> Vec<String> {
        v.iter()
            .map(|e| match e.as_bytes().first() {
                Some(b'/' | b'~' | b'.') => e.clone(),
                _ => format!("./{e}"),
            })
            .collect()
    };
    let (read, write, deny) = (
        relative(&overrides.read),
        relative(&overrides.write),
        relative(&overrides.deny),
    );
    extend(&mut p.read, &read);
    extend(&mut p.write, &write);
    extend(&mut p.deny, &deny);
    extend(&mut p.network_allow, &overrides.allow);
    extend(&mut p.network_internal, &overrides.internal);
    let resolved = resolve_effective(p, &plan.home, &plan.cwd, ctx.getenv)?;
    let given = |s: &Skipped| match s.rule.as_str() {
        "read" => read.contains(&s.path),
        "write" => write.contains(&s.path),
        "deny" => deny.contains(&s.path),
        _ => false,
    };
    if let Some(s) = resolved.skipped.iter().find(|s| given(s)) {
        return Err(bad(format!("--{} {}: {}", s.rule, s.path, s.reason)));
    }
    match start_zone {
        None => plan.start = Start::Profile(resolved),
        Some(z) => {
            if let Some(zone) = plan.zones.iter_mut().find(|p| p.name == z) {
                zone.profile = resolved;
            }
        }
    }
    plan.overrides = overrides;
    Ok(plan)
}

/// A profile with `extends` applied, its paths resolved against `home` and `cwd`.
fn resolve_effective(
    p: Profile,
    home: &Path,
    cwd: &Path,
    getenv: fn(&str) -> Option<String>,
) -> Result<ProfilePlan, ResolveError> {
    let mut skipped = Vec::new();
    let mut links = Vec::new();
    let mut read = resolve_paths("read", &p.read, home, cwd, &mut skipped, &mut links);
    for g in worktree_pointers(&read) {
        if !read.contains(&g) {
            read.push(g);
        }
    }
    let write = resolve_paths("write", &p.write, home, cwd, &mut skipped, &mut links);
    let mut deny = resolve_paths("deny", &p.deny, home, cwd, &mut skipped, &mut links);
    if let Some(s) = skipped
        .iter()
        .find(|s| s.rule == "deny" && s.reason == UNREACHABLE)
    {
        return Err(ResolveError::Unmaskable {
            profile: p.name.clone(),
            entry: s.path.clone(),
        });
    }
    // Deny entries not there yet, held all the same (where they would be, links resolved),
    // and those reached through a symbolic link, held as written too: the mask is on the
    // link's target, and the host replacing the link would show what it then names.
    let written = p
        .deny
        .iter()
        .filter_map(|e| paths::expand(e, home, cwd).ok());
    // From one look at each entry now, whatever the first look saw: one made meanwhile is
    // held where it now is; one behind a link to what is not there yet, as written and
    // where the link leads.
    let absent = written.flat_map(|x| {
        let mut held = Vec::new();
        match std::fs::canonicalize(&x) {
            Ok(c) => {
                if !deny.contains(&c) {
                    held.push(c.clone());
                }
                if c != x {
                    held.push(x);
                }
            }
            // Not there, or a link to what is not there.
            Err(e) if e.kind() == io::ErrorKind::NotFound => match leads_to(&x) {
                to if to == x => held.push(real_prefix(&x)),
                to => {
                    held.push(real_prefix(&to));
                    held.push(x);
                }
            },
            // Closed to the caller: left out, and said why (resolve_paths).
            Err(_) => {}
        }
        held
    });
    let absent = absent.collect();
    for secret in etc_secrets(&read, &write) {
        if !deny.contains(&secret) {
            deny.push(secret);
        }
    }
    // "." is where the run started: the home directory or / there is a trap, unless the
    // profile also names it for writing on purpose.
    let explicit = |target: &Path| {
        p.write.iter().any(|e| {
            !(e == "." || e.starts_with("./"))
                && paths::expand(e, home, cwd).is_ok_and(|x| canonical_or_given(&x) == target)
        })
    };
    if p.write.iter().any(|e| e == "." || e == "./") {
        for (target, is_home) in [(home, true), (Path::new("/"), false)] {
            if cwd == target && !explicit(target) {
                return Err(ResolveError::WriteTrap {
                    profile: p.name.clone(),
                    path: cwd.to_path_buf(),
                    home: is_home,
                });
            }
        }
    }
    let unix_sockets =
        resolve_sockets(&p.unix_sockets, home, cwd, getenv, &mut skipped, &mut links);
    let mut limits = wardcell_common::limits::Limits::default();
    for (kind, bound) in &p.limits {
        crate::sizes::set(&mut limits, *kind, *bound);
    }
    Ok(ProfilePlan {
        name: p.name,
        read,
        write,
        deny,
        absent,
        skipped,
        env: EnvPlan {
            deny: p.env_deny,
            set: p
                .env_set
                .into_iter()
                .map(|(k, v)| (k, home_value(v, home)))
                .collect(),
        },
        network: NetworkPlan {
            allow: p.network_allow,
            internal: p.network_internal,
        },
        credentials: p.credentials,
        unix_sockets,
        links,
        limits,
    })
}

/// Why a path is left out that a directory of the caller's own, closed to it, keeps
/// from being opened: the caller (and so a sandbox of its) could open that directory
/// again, so a `deny` entry there refuses the run rather than be left unmasked.
const UNREACHABLE: &str = "cannot be reached: permission denied";

/// Why a path is left out behind another user's directory closed to the caller: no
/// sandbox of the caller's can open that directory either.
const CLOSED_TO_CALLER: &str =
    "cannot be reached: a directory on the way is another user's and closed to you";

/// Whether the directory that keeps `p` from being opened (the deepest ancestor the
/// caller can still look at) is the caller's own, whose mode it could change.
fn closed_by_caller(p: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::Uid::current().as_raw();
    p.ancestors()
        .skip(1)
        .find_map(|a| std::fs::symlink_metadata(a).ok())
        .is_none_or(|m| m.uid() == me)
}

/// An `env.set` value: `~` or `~/...` is in the home directory (as in paths); anything
/// else as written.
fn home_value(value: String, home: &Path) -> String {
    match value.strip_prefix('~') {
        Some("") => home.to_string_lossy().into_owned(),
        Some(rest) if rest.starts_with('/') => format!("{}{rest}", home.to_string_lossy()),
        _ => value,
    }
}

use wardcell_git::guard::WORKTREE_FILES;

/// At most this many linked worktrees are protected by read-only binds; the guard's
/// detection covers the rest.
const MAX_WORKTREES: usize = 64;

/// For each repository whose `.git/config` a profile names read-only (the built-in
/// developer profile does), the files of its linked worktrees that exist now
/// (`.git/worktrees/*/commondir`, `gitdir`, `config.worktree`, `config`) and
/// `.git/config.worktree`: read-only too, so a sandbox cannot point a worktree's git at
/// other configuration. What is created during a run is detected (`wardcell_git::guard`,
/// in the repository's watcher).
fn worktree_pointers(read: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for r in read {
        let Some(git) = r.parent() else { continue };
        if r.file_name() != Some("config".as_ref()) || git.file_name() != Some(".git".as_ref()) {
            continue;
        }
        let plain = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file());
        let main = git.join("config.worktree");
        if plain(&main) {
            out.push(main);
        }
        let Ok(dir) = std::fs::read_dir(git.join("worktrees")) else {
            continue;
        };
        for wt in dir.flatten().take(MAX_WORKTREES) {
            if !wt.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            for name in WORKTREE_FILES {
                let f = wt.path().join(name);
                if plain(&f) {
                    out.push(f);
                }
            }
        }
    }
    out
}

/// Root-only secrets under `/etc`, masked when a profile reads `/etc` whole (all the
/// built-in profiles do) unless it names one of them, or a directory holding it, itself.
const ETC_SECRETS: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh/ssh_host_rsa_key",
    "/etc/ssh/ssh_host_dsa_key",
    "/etc/ssh/ssh_host_ecdsa_key",
    "/etc/ssh/ssh_host_ed25519_key",
    "/etc/ssl/private",
    "/etc/pki/tls/private",
    "/etc/security/opasswd",
    "/etc/krb5.keytab",
    "/etc/ipsec.secrets",
    "/etc/ipsec.d/private",
    "/etc/ppp/chap-secrets",
    "/etc/ppp/pap-secrets",
    "/etc/wireguard",
    "/etc/NetworkManager/system-connections",
    "/etc/letsencrypt/archive",
    "/etc/letsencrypt/live",
    "/etc/credstore",
    "/etc/credstore.encrypted",
    "/etc/libvirt/secrets",
    "/etc/openvpn/server",
    "/etc/openvpn/client",
];

/// Which of [`ETC_SECRETS`] to mask. They are root-only: a caller who cannot read
/// `/etc/shadow` cannot read them either, so an unprivileged run pays one refused open and
/// masks nothing. A caller who can (root, or a capability that overrides permissions)
/// gets each that exists and is not world-readable.
fn etc_secrets(read: &[PathBuf], write: &[PathBuf]) -> Vec<PathBuf> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let etc = Path::new("/etc");
    let named: Vec<&PathBuf> = read.iter().chain(write).collect();
    if !named.iter().any(|p| etc.starts_with(p)) {
        return Vec::new();
    }
    let probe = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open("/etc/shadow");
    if matches!(&probe, Err(e) if e.kind() == io::ErrorKind::PermissionDenied) {
        return Vec::new();
    }
    drop(probe);
    ETC_SECRETS
        .iter()
        .map(Path::new)
        .filter(|s| {
            !named
                .iter()
                .any(|n| n.starts_with(etc) && n.as_path() != etc && s.starts_with(n))
        })
        .filter(|s| {
            std::fs::symlink_metadata(s)
                .is_ok_and(|m| !m.file_type().is_symlink() && m.mode() & 0o004 == 0)
        })
        .map(Path::to_path_buf)
        .collect()
}

/// `unix_sockets`: `$NAME` from the environment `run` started in, or a path; each must
/// be a socket now. What cannot be is skipped, with the reason.
fn resolve_sockets(
    raw: &[String],
    home: &Path,
    cwd: &Path,
    getenv: fn(&str) -> Option<String>,
    skipped: &mut Vec<Skipped>,
    links: &mut Vec<(PathBuf, PathBuf)>,
) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for entry in raw {
        let path = match entry.strip_prefix('$') {
            Some(var) => match getenv(var) {
                Some(v) if v.starts_with('/') => Ok(PathBuf::from(v)),
                Some(_) => Err(format!("${var} is not an absolute path")),
                None => Err(format!("${var} is not set")),
            },
            None => paths::expand(entry, home, cwd),
        };
        let resolved = path.and_then(|p| {
            let c = std::fs::canonicalize(&p).map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => "does not exist".to_string(),
                _ => format!("cannot be resolved: {e}"),
            })?;
            if c != p {
                links_on_the_way(&p, links);
            }
            use std::os::unix::fs::FileTypeExt;
            match std::fs::metadata(&c) {
                Ok(m) if m.file_type().is_socket() => Ok(c),
                Ok(_) => Err(format!("{} is not a socket", c.display())),
                Err(e) => Err(format!("cannot be resolved: {e}")),
            }
        });
        match resolved {
            Ok(p) if !out.contains(&p) => out.push(p),
            Ok(_) => {}
            Err(reason) => skipped.push(Skipped {
                rule: "unix_sockets".into(),
                path: entry.clone(),
                reason,
            }),
        }
    }
    out
}

/// Record every symbolic link met walking to `path` (as written, expanded), with what it
/// says, following each to go on. At most 40 links, as the kernel allows.
fn links_on_the_way(path: &Path, out: &mut Vec<(PathBuf, PathBuf)>) {
    let mut cur = PathBuf::from("/");
    let mut pending: Vec<PathBuf> = path
        .components()
        .skip(1)
        .map(|c| PathBuf::from(c.as_os_str()))
        .collect();
    pending.reverse();
    let mut budget = 40;
    while let Some(comp) = pending.pop() {
        let next = cur.join(&comp);
        match std::fs::read_link(&next) {
            Ok(target) if budget > 0 => {
                budget -= 1;
                if !out.iter().any(|(l, _)| *l == next) {
                    out.push((next.clone(), target.clone()));
                }
                // Go on from where the link leads.
                match std::fs::canonicalize(&next) {
                    Ok(c) => cur = c,
                    Err(_) => return,
                }
            }
            Ok(_) => return,
            Err(_) => cur = next,
        }
    }
}

/// Expand and canonicalise each entry; what cannot be goes to `skipped`. Duplicates
/// (after canonicalisation) are dropped, first one kept; sets remember what is in, so a
/// list of 200,000 entries is not 200,000² comparisons.
fn resolve_paths(
    rule: &str,
    raw: &[String],
    home: &Path,
    cwd: &Path,
    skipped: &mut Vec<Skipped>,
    links: &mut Vec<(PathBuf, PathBuf)>,
) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let mut seen: HashSet<PathBuf> = HashSet::new();
    let mut seen_skipped: HashSet<(String, String, String)> = skipped
        .iter()
        .map(|s| (s.rule.clone(), s.path.clone(), s.reason.clone()))
        .collect();
    let mut canonical_dirs: HashSet<PathBuf> = HashSet::new();
    for entry in raw {
        let resolved = paths::expand(entry, home, cwd).and_then(|p| {
            // Most entries that are left out do not exist (a profile names credential
            // stores and histories a machine may not have): one lstat says so, where
            // canonicalising (musl's realpath reads each component) takes one a component.
            let meta = std::fs::symlink_metadata(&p);
            if meta
                .as_ref()
                .is_err_and(|e| e.kind() == io::ErrorKind::NotFound)
            {
                return Err("does not exist".to_string());
            }
            // Not a link itself, in a directory already known to be canonical: the path
            // is its own canonical form, and its siblings share the parent's work.
            let not_a_link = meta.is_ok_and(|m| !m.file_type().is_symlink());
            if not_a_link && in_canonical_dir(&p, &mut canonical_dirs) {
                return Ok(p);
            }
            let c = std::fs::canonicalize(&p).map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => "does not exist".to_string(),
                io::ErrorKind::PermissionDenied if closed_by_caller(&p) => UNREACHABLE.to_string(),
                io::ErrorKind::PermissionDenied => CLOSED_TO_CALLER.to_string(),
                _ => format!("cannot be resolved: {e}"),
            })?;
            // Only a path that is not its own canonical form has a link on the way.
            if c != p {
                links_on_the_way(&p, links);
            }
            Ok(c)
        });
        match resolved {
            Ok(p) => {
                if seen.insert(p.clone()) {
                    out.push(p);
                }
            }
            Err(reason) => {
                if seen_skipped.insert((rule.to_string(), entry.clone(), reason.clone())) {
                    skipped.push(Skipped {
                        rule: rule.to_string(),
                        path: entry.clone(),
                        reason,
                    });
                }
            }
        }
    }
    out
}

/// Whether `p` is written in normal form (absolute, no `.`, no doubled or trailing
/// slash) and its directory is canonical (no link on the way), asking the kernel once a
/// directory: `known` remembers the directories found canonical.
fn in_canonical_dir(p: &Path, known: &mut HashSet<PathBuf>) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let b = p.as_os_str().as_bytes();
    // Normal form by bytes: each component non-empty and neither `.` nor `..`.
    if b.len() < 2
        || b[0] != b'/'
        || b[1..]
            .split(|&c| c == b'/')
            .any(|c| c.is_empty() || c == b"." || c == b"..")
    {
        return false;
    }
    let Some(dir) = p.parent() else {
        return false;
    };
    if dir == Path::new("/") || known.contains(dir) {
        return true;
    }
    let canonical = std::fs::canonicalize(dir).is_ok_and(|c| c == dir);
    if canonical {
        known.insert(dir.to_path_buf());
    }
    canonical
}

/// `p` with its deepest existing ancestor canonical: where a missing path would be.
fn real_prefix(p: &Path) -> PathBuf {
    let found = p
        .ancestors()
        .find_map(|a| Some((a, std::fs::canonicalize(a).ok()?)));
    match found {
        Some((a, real)) => real.join(p.strip_prefix(a).unwrap_or(Path::new(""))),
        None => p.to_path_buf(),
    }
}

/// Where `p` (absolute) leads: every symbolic link on the way followed by its text, even
/// where what it names does not exist yet (at most 40 links; `..` taken lexically after
/// a link): where a deny entry's content will be once it is made.
fn leads_to(p: &Path) -> PathBuf {
    use std::path::Component;
    let mut todo: Vec<std::ffi::OsString> = p
        .components()
        .rev()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect();
    let mut at = PathBuf::from("/");
    let mut hops = 0;
    while let Some(name) = todo.pop() {
        if name == ".." {
            at.pop();
            continue;
        }
        let next = at.join(&name);
        match std::fs::read_link(&next) {
            Ok(target) if hops < 40 => {
                hops += 1;
                if target.is_absolute() {
                    at = PathBuf::from("/");
                }
                let comps = target.components().rev().filter_map(|c| match c {
                    Component::Normal(n) => Some(n.to_os_string()),
                    Component::ParentDir => Some("..".into()),
                    _ => None,
                });
                todo.extend(comps);
            }
            _ => at = next,
        }
    }
    at
}

fn canonical_or_given(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_set_values_under_home_are_expanded() {
        let h = Path::new("/home/me");
        assert_eq!(home_value("~".into(), h), "/home/me");
        assert_eq!(home_value("~/.x/y".into(), h), "/home/me/.x/y");
        for kept in ["~x", "a~/b", "/abs", "", "~~/x"] {
            assert_eq!(home_value(kept.into(), h), kept);
        }
    }
    use crate::config::parse;

    struct TempDir(PathBuf);
    impl TempDir {
        fn new(tag: &str) -> TempDir {
            let p =
                std::env::temp_dir().join(format!("wardcell-resolve-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            TempDir(std::fs::canonicalize(&p).unwrap())
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn ctx(t: &TempDir) -> Context {
        let home = t.0.join("home");
        let cwd = t.0.join("src");
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::create_dir_all(&cwd).unwrap();
        Context {
            dirs: paths::dirs(&|_| None, &home, 1000, None),
            home,
            cwd,
            getenv: |_| None,
            client: None,
        }
    }

    const CFG: &str = r#"
[zones.push]
profile = "p"
description = "Pushes"
enter_from = ["agent"]
requires_approval = true
approval_timeout = "10m"
authenticated = true

[zones.agent]
profile = "developer-readonly"
default = true

[profiles.p]
extends = "developer-readonly"
read = ["~", "./missing", "~/."]
deny = ["~/.ssh", "~/.nothing"]
network = { allow = ["git.example.com:443"] }
credentials = ["c"]

[credentials.c]
hosts = ["git.example.com"]
scheme = "bearer"
secret = { env = "C_TOKEN" }

[approval]
plugin = ["/bin/true"]
"#;

    #[test]
    fn default_start_resolves_every_zone_sorted() {
        let t = TempDir::new("default");
        let c = ctx(&t);
        let cfg = parse(CFG, "/x/zones.toml").unwrap();
        let plan = resolve(&cfg, StartRequest::Default, vec!["make".into()], &c).unwrap();
        assert_eq!(plan.source, "/x/zones.toml");
        assert_eq!(plan.start, Start::Zone("agent".into()));
        assert_eq!(plan.command, ["make"]);
        assert_eq!(plan.cwd, c.cwd);
        assert_eq!(plan.home, c.home);
        assert_eq!(plan.approval, Some(vec!["/bin/true".to_string()]));
        assert_eq!(plan.dirs, c.dirs);
        let names: Vec<_> = plan.zones.iter().map(|z| z.name.as_str()).collect();
        assert_eq!(names, ["agent", "push"]);

        let push = &plan.zones[1];
        assert_eq!(push.approval_timeout_secs, Some(600));
        assert!(push.requires_approval && push.authenticated && !push.default);
        assert_eq!(push.description.as_deref(), Some("Pushes"));
        let p = &push.profile;
        assert_eq!(p.name, "p");
        // "~" from the built-in and "~" and "~/." here collapse to one entry.
        assert_eq!(p.read.iter().filter(|r| **r == c.home).count(), 1);
        assert!(p.read.contains(&c.cwd));
        assert_eq!(p.write, std::slice::from_ref(&c.cwd));
        assert!(p.deny.contains(&c.home.join(".ssh")));
        assert!(p.skipped.contains(&Skipped {
            rule: "read".into(),
            path: "./missing".into(),
            reason: "does not exist".into(),
        }));
        assert!(p.skipped.contains(&Skipped {
            rule: "deny".into(),
            path: "~/.nothing".into(),
            reason: "does not exist".into(),
        }));
        // Built-in deny entries absent from this home are skipped, not errors.
        assert!(p.skipped.iter().any(|s| s.path == "~/.aws"));
        assert!(p.env.deny.contains(&"*_TOKEN".to_string()));
        assert_eq!(p.network.allow, ["git.example.com:443"]);
        assert_eq!(p.credentials, ["c"]);
        // Every resolved path is absolute.
        for z in &plan.zones {
            let pr = &z.profile;
            assert!(pr
                .read
                .iter()
                .chain(&pr.write)
                .chain(&pr.deny)
                .all(|x| x.is_absolute()));
        }
    }

    #[test]
    fn explicit_zone_and_unknown_zone() {
        let t = TempDir::new("zone");
        let c = ctx(&t);
        let cfg = parse(CFG, "/x/zones.toml").unwrap();
        let plan = resolve(&cfg, StartRequest::Zone("push".into()), vec![], &c).unwrap();
        assert_eq!(plan.start, Start::Zone("push".into()));
        let e = resolve(&cfg, StartRequest::Zone("nope".into()), vec![], &c).unwrap_err();
        assert_eq!(
            e.to_string(),
            "there is no zone 'nope' in /x/zones.toml; its zones are: agent, push (see `wardcell zone list`)"
        );
    }

    #[test]
    fn a_deny_entry_behind_a_link_to_nothing_yet_is_held_where_it_leads() {
        let t = TempDir::new("dangling");
        let c = ctx(&t);
        let home = &c.home;
        std::fs::create_dir_all(home.join("vault")).unwrap();
        std::os::unix::fs::symlink("vault/aws", home.join(".aws")).unwrap();
        std::os::unix::fs::symlink("dotfiles/config", home.join(".config")).unwrap();
        assert_eq!(leads_to(&home.join(".aws")), home.join("vault/aws"));
        assert_eq!(
            leads_to(&home.join(".config/gh")),
            home.join("dotfiles/config/gh")
        );
        let cfg = parse(CFG, "/x/zones.toml").unwrap();
        let plan = resolve(&cfg, StartRequest::Default, vec![], &c).unwrap();
        let Start::Zone(z) = &plan.start else {
            panic!()
        };
        let p = &plan.zones.iter().find(|x| &x.name == z).unwrap().profile;
        let real = std::fs::canonicalize(home).unwrap();
        // Both the link as written and where it leads are held (made later, not shown).
        for held in [".aws", "vault/aws", ".config/gh", "dotfiles/config/gh"] {
            assert!(
                p.absent
                    .iter()
                    .any(|a| a == &real.join(held) || a == &home.join(held)),
                "{held}: {:?}",
                p.absent
            );
        }
    }

    #[test]
    fn run_flags_change_the_start_profile_only() {
        let t = TempDir::new("flags");
        let c = ctx(&t);
        std::fs::create_dir_all(c.cwd.join("out")).unwrap();
        let cfg = parse(CFG, "/x/zones.toml").unwrap();
        let plan = resolve(&cfg, StartRequest::Zone("push".into()), vec![], &c).unwrap();
        let flags = Overrides {
            write: vec!["out".into()],
            deny: vec!["~/.ssh".into()],
            allow: vec!["pypi.org:443".into()],
            internal: vec!["mirror.corp:8443".into()],
            ..Default::default()
        };
        let plan = with_overrides(plan, &cfg, &c, flags.clone()).unwrap();
        let push = plan.zones.iter().find(|z| z.name == "push").unwrap();
        assert!(push.profile.write.contains(&c.cwd.join("out")));
        assert_eq!(
            push.profile.network.allow,
            ["git.example.com:443", "pypi.org:443"]
        );
        assert_eq!(push.profile.network.internal, ["mirror.corp:8443"]);
        let agent = plan.zones.iter().find(|z| z.name == "agent").unwrap();
        assert!(!agent.profile.write.contains(&c.cwd.join("out")));
        assert_eq!(plan.overrides, flags);
        // Strict where a profile is lenient: a missing path, a bad entry.
        let plan = resolve(&cfg, StartRequest::Default, vec![], &c).unwrap();
        let missing = Overrides {
            read: vec!["nowhere".into()],
            ..Default::default()
        };
        let e = with_overrides(plan.clone(), &cfg, &c, missing).unwrap_err();
        assert_eq!(e.to_string(), "--read ./nowhere: does not exist");
        let bad = Overrides {
            allow: vec!["pypi.org".into()],
            ..Default::default()
        };
        let e = with_overrides(plan, &cfg, &c, bad).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--allow \"pypi.org\" has no port"),
            "{e}"
        );
    }

    #[test]
    fn profile_start_has_no_zones() {
        let t = TempDir::new("profile");
        let c = ctx(&t);
        let cfg = Config::builtin();
        let plan = resolve(
            &cfg,
            StartRequest::Profile("readonly".into()),
            vec!["ls".into()],
            &c,
        )
        .unwrap();
        assert!(plan.zones.is_empty());
        match &plan.start {
            Start::Profile(p) => {
                assert_eq!(p.name, "readonly");
                assert!(p.write.is_empty());
                assert!(p.read.contains(&c.home));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(plan.source, "built-in default");
        let e = resolve(&cfg, StartRequest::Profile("nope".into()), vec![], &c).unwrap_err();
        assert!(matches!(e, ResolveError::UnknownProfile { .. }));
        assert!(
            e.to_string().contains(
                "base, claude-code, codex, developer-readonly, package-managers, readonly"
            ),
            "{e}"
        );
    }

    #[test]
    fn symlinks_are_canonicalised_and_deduplicated() {
        let t = TempDir::new("links");
        let c = ctx(&t);
        std::fs::create_dir_all(t.0.join("real")).unwrap();
        std::os::unix::fs::symlink(t.0.join("real"), c.home.join("link")).unwrap();
        let text = format!(
            "[zones.a]\nprofile = \"p\"\ndefault = true\n[profiles.p]\nread = [\"~/link\", \"{}\"]\n",
            t.0.join("real").display()
        );
        let cfg = parse(&text, "f").unwrap();
        let plan = resolve(&cfg, StartRequest::Default, vec![], &c).unwrap();
        assert_eq!(plan.zones[0].profile.read, [t.0.join("real")]);
        assert!(plan.zones[0].profile.skipped.is_empty());
    }

    // Siblings share their directory's canonical check (issue 25.4): a directory behind a
    // link still resolves to where it really is, with the link recorded, however many
    // siblings came first, and a sibling that is itself a link is followed.
    #[test]
    fn siblings_in_a_linked_directory_resolve_to_the_real_one() {
        let t = TempDir::new("siblings");
        let c = ctx(&t);
        for d in ["real/a", "real/b", "plain/a", "plain/b", "elsewhere"] {
            std::fs::create_dir_all(t.0.join(d)).unwrap();
        }
        std::os::unix::fs::symlink(t.0.join("real"), t.0.join("via")).unwrap();
        std::os::unix::fs::symlink(t.0.join("elsewhere"), t.0.join("plain/c")).unwrap();
        let named = [
            "plain/a",
            "plain/b",
            "plain/c",
            "via/a",
            "via/b",
            "plain//a/",
            "plain/./b",
        ];
        let list: Vec<String> = named
            .iter()
            .map(|n| format!("\"{}/{n}\"", t.0.display()))
            .collect();
        let text = format!(
            "[zones.a]\nprofile = \"p\"\ndefault = true\n[profiles.p]\nread = [{}]\n",
            list.join(", ")
        );
        let cfg = parse(&text, "f").unwrap();
        let plan = resolve(&cfg, StartRequest::Default, vec![], &c).unwrap();
        let p = &plan.zones[0].profile;
        let want: Vec<PathBuf> = ["plain/a", "plain/b", "elsewhere", "real/a", "real/b"]
            .iter()
            .map(|n| t.0.join(n))
            .collect();
        assert_eq!(p.read, want);
        assert!(
            p.links.iter().any(|(l, _)| *l == t.0.join("via")),
            "{:?}",
            p.links
        );
        assert!(
            p.links.iter().any(|(l, _)| *l == t.0.join("plain/c")),
            "{:?}",
            p.links
        );
    }
}
