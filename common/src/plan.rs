//! The resolved plan (client -> broker) and the sandbox spec (broker -> shim).
//!
//! The client resolves zones.toml and the command line into one [`Plan`]; `policy show`
//! prints that same value, so what it shows cannot disagree with what is enforced.
//! Every path in a plan is absolute and canonical; paths that did not exist were left
//! out and are listed in [`ProfilePlan::skipped`].

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Everything the broker needs for one top-level run.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Plan {
    /// Where the configuration came from: a file path, or "built-in default".
    pub source: String,
    /// The directory `run` was started in (canonical): "." in profiles.
    pub cwd: PathBuf,
    /// The user's home directory: "~" in profiles.
    pub home: PathBuf,
    /// The command to run (empty for `policy show`).
    pub command: Vec<String>,
    /// Where the run starts.
    pub start: Start,
    /// Every zone of the configuration, resolved (empty for `run --profile`).
    pub zones: Vec<ZonePlan>,
    /// argv of the approval plugin, if one is configured.
    pub approval: Option<Vec<String>>,
    pub audit: AuditPlan,
    /// wardcell's own directories.
    pub dirs: Dirs,
    /// Every `[credentials.*]` entry: where each secret comes from, never a secret.
    pub credentials: Vec<CredentialPlan>,
}

impl Plan {
    /// Environment variables some credential reads: removed from every sandbox.
    pub fn credential_env_vars(&self) -> Vec<String> {
        self.credentials
            .iter()
            .filter_map(|c| match &c.secret {
                SecretPlan::Env(v) => Some(v.clone()),
                _ => None,
            })
            .collect()
    }

    /// Files some credential reads: masked in every sandbox.
    pub fn credential_files(&self) -> Vec<PathBuf> {
        self.credentials
            .iter()
            .filter_map(|c| match &c.secret {
                SecretPlan::File(p) => Some(p.clone()),
                _ => None,
            })
            .collect()
    }
}

/// A credential a zone's proxy may attach to requests.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct CredentialPlan {
    pub name: String,
    /// Host names it is attached for (exact match).
    pub hosts: Vec<String>,
    /// Request path patterns (`*` glob); empty means every path.
    pub paths: Vec<String>,
    pub scheme: CredentialScheme,
    /// For `basic`.
    pub username: Option<String>,
    /// For `header`: the header's name.
    pub header: Option<String>,
    pub secret: SecretPlan,
}

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredentialScheme {
    Basic,
    Bearer,
    Header,
}

/// Where a secret comes from. The proxy resolves it; nothing else ever does.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum SecretPlan {
    Env(String),
    /// Absolute (`~` expanded).
    File(PathBuf),
    Command(Vec<String>),
}

/// Where a run starts.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum Start {
    /// In this zone (one of [`Plan::zones`]).
    Zone(String),
    /// Under this profile, outside any zone: no zone commands work inside.
    Profile(ProfilePlan),
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct AuditPlan {
    /// Also send audit events to syslog (authpriv).
    pub syslog: bool,
}

/// One zone, its profile resolved.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ZonePlan {
    pub name: String,
    pub description: Option<String>,
    pub default: bool,
    /// Zones that may enter this one; "*" admits any.
    pub enter_from: Vec<String>,
    pub requires_approval: bool,
    /// Seconds to wait for the approval plugin; None waits as long as it takes.
    pub approval_timeout_secs: Option<u64>,
    pub authenticated: bool,
    pub profile: ProfilePlan,
}

/// A profile with `extends` applied and every path expanded and canonicalised.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct ProfilePlan {
    pub name: String,
    /// Readable (and executable) trees.
    pub read: Vec<PathBuf>,
    /// Writable trees (readable too).
    pub write: Vec<PathBuf>,
    /// Masked even inside an allowed tree.
    pub deny: Vec<PathBuf>,
    /// Paths the profile names that do not exist here: left out, reported by `policy show`.
    pub skipped: Vec<Skipped>,
    pub env: EnvPlan,
    pub network: NetworkPlan,
    /// Names of `[credentials.*]` entries this profile's proxy may attach.
    pub credentials: Vec<String>,
}

impl ProfilePlan {
    /// `/tmp` is private to the sandbox unless the profile names it.
    pub fn private_tmp(&self) -> bool {
        let tmp = std::path::Path::new("/tmp");
        !self
            .read
            .iter()
            .chain(&self.write)
            .any(|p| p == tmp || p.starts_with(tmp))
    }
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// "read", "write" or "deny".
    pub rule: String,
    /// The entry as the profile wrote it.
    pub path: String,
    pub reason: String,
}

/// Environment rules: everything of the caller's environment but what `deny` matches
/// (glob with `*`), then `set`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct EnvPlan {
    pub deny: Vec<String>,
    pub set: Vec<(String, String)>,
}

/// Egress through the zone's proxy; nothing else leaves the sandbox.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct NetworkPlan {
    /// `host:port` entries; `*.domain:port` matches subdomains only.
    pub allow: Vec<String>,
}

impl NetworkPlan {
    pub fn enabled(&self) -> bool {
        !self.allow.is_empty()
    }
}

/// wardcell's own directories. No sandbox may write them, nor read them.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Dirs {
    /// Configuration: the user's and the system's directory, and `--config FILE` if given.
    pub config: Vec<PathBuf>,
    /// Audit logs: `$XDG_STATE_HOME/wardcell`.
    pub state: PathBuf,
    /// Sockets: `$XDG_RUNTIME_DIR/wardcell` (or a 0700 directory under /tmp).
    pub runtime: PathBuf,
}

/// What the shim needs to build one sandbox and exec one command in it. Made by the
/// broker from a [`ProfilePlan`]; the shim carries it out without decisions of its own.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct SandboxSpec {
    pub argv: Vec<String>,
    /// The complete environment of the command.
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    /// Landlock: readable and executable trees.
    pub read: Vec<PathBuf>,
    /// Landlock: writable trees.
    pub write: Vec<PathBuf>,
    /// Made empty and unreadable inside the sandbox (deny paths, wardcell's directories,
    /// host sockets). Directories get an empty read-only tmpfs, files /dev/null's place.
    pub mask: Vec<PathBuf>,
    /// Mount a fresh tmpfs on /tmp (and make it writable).
    pub private_tmp: bool,
    /// TCP ports on the sandbox's loopback that it may connect to (the proxy's).
    pub tcp_connect: Vec<u16>,
    /// Make fd 0 the command's controlling terminal (the broker gave it a pty).
    pub controlling_tty: bool,
    /// Unix sockets of wardcell's own (the sandbox's supervisor) to make reachable at the
    /// same path, although a mask covers them: that mask becomes traversable (not
    /// listable) and holds only these.
    pub sockets: Vec<PathBuf>,
    /// Listen on 127.0.0.1:port in the sandbox's network namespace and hand the listener
    /// to the broker (for the zone's proxy) before the command starts.
    pub proxy_port: Option<u16>,
    /// The system's CA certificates (a PEM file), the start of the bundle given to the
    /// command when the proxy intercepts TLS.
    pub system_roots: Option<PathBuf>,
}

/// Where the CA bundle is, inside a sandbox whose proxy intercepts TLS.
pub const SANDBOX_CA_BUNDLE: &str = "/dev/wardcell-ca.pem";

/// The port the zone's proxy listens on, on the sandbox's own loopback.
pub const SANDBOX_PROXY_PORT: u16 = 3128;

/// What one zone's proxy enforces. Sent by the broker with the listener attached.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ProxySpec {
    pub run_id: String,
    pub zone: String,
    /// `host:port` entries; `*.domain:port` matches subdomains only.
    pub allow: Vec<String>,
    /// Credentials this zone's proxy attaches (empty unless the zone is authenticated).
    pub credentials: Vec<CredentialPlan>,
}
