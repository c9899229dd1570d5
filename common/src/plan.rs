//! The resolved plan (client -> broker) and the sandbox spec (broker -> shim).
//!
//! The client resolves zones.toml and the command line into one [`Plan`]; `policy show`
//! prints that same value, so what it shows cannot disagree with what is enforced.
//! Every path in a plan is absolute and canonical; paths that did not exist were left
//! out and are listed in [`ProfilePlan::skipped`].

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::identity::Identity;
use crate::limits::{Bound, Kind, Mechanism};

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
    /// The `wardcell` client that started the run (canonical): bound at the same path
    /// into every zone sandbox, so `wardcell zone ...` works wherever it is installed.
    pub client: Option<PathBuf>,
    /// Files inside a tree a sandbox may write that every view binds read-only, with
    /// their directories there pinned: the programs and files the run trusts (the
    /// client, the broker and its helpers, the approval plugin, credential commands, CA
    /// files), where they really are. The broker refuses to start a program of the run
    /// that is not among them.
    pub pinned: Vec<PathBuf>,
    /// Each sandbox the run may build, as the plan writer prepared it, or why that
    /// profile cannot run here (`wardcell/src/prepare.rs`), with the zones it serves
    /// (`None`: `run --profile`'s profile). Zones of one profile share one.
    pub prepared: Vec<Prepared>,
    /// The certificates a proxy that attaches credentials trusts upstream (PEM text, at
    /// most `wardcell_support::roots::MAX_ROOTS` bytes), read once by `wardcell run` when the run
    /// starts (`wardcell_support::roots::read_roots`): empty when the plan has no credential.
    pub upstream_roots: Vec<u8>,
    /// The soft open-file limit `wardcell run` was started with. wardcell's own processes
    /// run with it raised to the hard limit (a profile of many paths needs a descriptor
    /// or two per path); every command gets this one back. `None`: leave the limit as it is.
    pub open_files: Option<u64>,
    /// `run --read/--write/--deny/--allow`, as given: already applied to the start
    /// profile (`resolve::with_overrides`); `run.started` records them.
    pub overrides: Overrides,
    /// `wardcell run -v` or `WARDCELL_LOG`: the level the run traces at, and the plan
    /// writer's own lines so far (at most `trace::MAX_HELD`), which the broker prints
    /// once the run id exists. `None`: tracing is off.
    pub trace: Option<PlanTrace>,
    /// What this machine offers for `limits`, as `wardcell run` found it when the run
    /// started (`wardcell/src/machine.rs`): where the broker makes a sandbox's cgroups.
    pub machine: crate::limits::Machine,
}

impl Plan {
    /// The zone (`None` under `run --profile`) and profile the run starts in; `None` when
    /// the plan names a zone it does not hold.
    pub fn start_profile(&self) -> Option<(Option<&str>, &ProfilePlan)> {
        match &self.start {
            Start::Profile(p) => Some((None, p)),
            Start::Zone(name) => self.zone(name).map(|z| (Some(z.name.as_str()), &z.profile)),
        }
    }

    /// Whether the sandbox the run starts attaches its profile's credentials: in a zone,
    /// when the zone is `authenticated`; in a run without zones (`run --profile`),
    /// always, as the profile is named on the caller's own command line.
    pub fn start_authenticated(&self) -> bool {
        match &self.start {
            Start::Profile(_) => true,
            Start::Zone(name) => self.zone(name).is_some_and(|z| z.authenticated),
        }
    }

    /// The sandbox prepared for `zone` (`None`: `run --profile`'s), or why there is none.
    pub fn prepared(&self, zone: Option<&str>) -> Result<&Sandbox, String> {
        let none = || format!("no sandbox was prepared for zone '{}'", zone.unwrap_or("-"));
        let found = self.serving(zone).ok_or_else(none)?;
        found.made.as_ref().map_err(String::clone)
    }

    /// The rules of zone `zone` as `zone why` answers with them.
    pub fn rules(&self, zone: &str) -> Option<Rules> {
        let mut rules = self.serving(Some(zone))?.rules.clone();
        rules.zone = Some(zone.to_string());
        Some(rules)
    }

    fn serving(&self, zone: Option<&str>) -> Option<&Prepared> {
        let serves = |p: &&Prepared| p.zones.iter().any(|z| z.as_deref() == zone);
        self.prepared.iter().find(serves)
    }

    /// The zone called `name`.
    pub fn zone(&self, name: &str) -> Option<&ZonePlan> {
        self.zones.iter().find(|z| z.name == name)
    }

    /// Every profile a sandbox of this run may be built from: each zone's, and the one
    /// `run --profile` names.
    pub fn profiles(&self) -> impl Iterator<Item = &ProfilePlan> {
        let start = match &self.start {
            Start::Profile(p) => Some(p),
            Start::Zone(_) => None,
        };
        self.zones.iter().map(|z| &z.profile).chain(start)
    }
}

/// Entries `wardcell run` (or `policy show`) adds to the start profile for one run.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct Overrides {
    pub read: Vec<String>,
    pub write: Vec<String>,
    pub deny: Vec<String>,
    /// `host:port` entries for `network.allow`.
    pub allow: Vec<String>,
    /// `host:port` entries for `network.internal` (names that may resolve to private
    /// addresses, as a corporate mirror's do).
    pub internal: Vec<String>,
}

impl Overrides {
    pub fn is_empty(&self) -> bool {
        self.read.is_empty()
            && self.write.is_empty()
            && self.deny.is_empty()
            && self.allow.is_empty()
            && self.internal.is_empty()
    }
}

/// Tracing asked for in the plan writer (see `crate::trace`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct PlanTrace {
    /// A level `trace::parse` reads (`debug`, ...).
    pub level: String,
    /// The writer's lines, each without its `wardcell[pid] run=...` head.
    pub lines: Vec<String>,
}

/// What the broker tells a helper (shim, proxy) about tracing: the level and the run id
/// its lines carry. `None` in a spec: tracing is off.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct TraceSpec {
    pub level: String,
    pub run: String,
}

impl Plan {
    /// Environment variables some credential reads or stands in for with a placeholder:
    /// removed from every sandbox (a caller's real key in a placeholder's variable never
    /// enters one).
    pub fn credential_env_vars(&self) -> Vec<String> {
        let read = self.credentials.iter().filter_map(|c| match &c.secret {
            SecretPlan::Env(v) => Some(v.clone()),
            _ => None,
        });
        let placeholders = self
            .credentials
            .iter()
            .filter_map(|c| c.placeholder.clone());
        read.chain(placeholders).collect()
    }
}

/// A credential a zone's proxy may attach to requests.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct CredentialPlan {
    pub name: String,
    /// `host` or `host:port` (without a port: 443), exact match on both.
    pub hosts: Vec<String>,
    /// Request path patterns (`*` glob) matched after normalisation; empty: every path.
    pub paths: Vec<String>,
    /// Methods it is attached for; empty: `wardcell_support::sandbox_env::DEFAULT_METHODS`.
    pub methods: Vec<String>,
    /// A variable set to `wardcell_support::sandbox_env::PLACEHOLDER_VALUE` in the
    /// sandboxes that get this credential.
    pub placeholder: Option<String>,
    pub scheme: CredentialScheme,
    /// For `basic`.
    pub username: Option<String>,
    /// For `header`: the header's name.
    pub header: Option<String>,
    pub secret: SecretPlan,
}

// Variant names in JSON (`policy show --output json`) as zones.toml writes them; frames
// (bincode) carry the variant's index, so the names change nothing there.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum CredentialScheme {
    Basic,
    Bearer,
    Header,
}

/// Where a secret comes from. The proxy resolves it; nothing else ever does.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum SecretPlan {
    Env(String),
    /// Absolute (`~` expanded).
    File(PathBuf),
    Command(Vec<String>),
}

/// Where a run starts. One value per run: its size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "lowercase")]
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
    /// `[audit] max_log_kib`: the most one run's log may hold.
    pub max_log_kib: u64,
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
    /// `deny` entries that do not exist yet (their existing part canonical), and those
    /// reached through a symbolic link, as written: nothing to mask there, but held all
    /// the same, so that the host creating one, or replacing the link, while the run
    /// holds it ends the run (wardcell_host::guard).
    #[serde(default)]
    pub absent: Vec<PathBuf>,
    /// Paths the profile names that do not exist here: left out, reported by `policy show`.
    pub skipped: Vec<Skipped>,
    pub env: EnvPlan,
    pub network: NetworkPlan,
    /// Names of `[credentials.*]` entries this profile's proxy may attach.
    pub credentials: Vec<String>,
    /// Host Unix sockets bound into this profile's sandboxes (`unix_sockets`, `$NAME`
    /// expanded from the environment `run` started in), canonical.
    pub unix_sockets: Vec<PathBuf>,
    /// Symbolic links met on the way to the paths above (`/bin` -> `usr/bin`): the link
    /// and what it says. A sandbox's view recreates them where they are not already in a
    /// bound tree, so that `/bin/sh` still works when only `/usr` is bound.
    pub links: Vec<(PathBuf, PathBuf)>,
    /// `limits`, `extends` applied: what bounds each of this profile's sandboxes.
    pub limits: crate::limits::Limits,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// "read", "write", "deny" or "unix_sockets".
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
    /// `host:port` entries; `*.domain:port` matches subdomains only. Their names reach
    /// global addresses only.
    pub allow: Vec<String>,
    /// Entries as `allow`, whose names may also resolve to private, shared, unique-local,
    /// reserved and loopback addresses (internal hosts).
    #[serde(default)]
    pub internal: Vec<String>,
}

impl NetworkPlan {
    pub fn enabled(&self) -> bool {
        !self.allow.is_empty() || !self.internal.is_empty()
    }

    /// Every entry, `allow` then `internal`: what ports, `NO_PROXY` and matching
    /// credential hosts count.
    pub fn entries(&self) -> Vec<String> {
        self.allow.iter().chain(&self.internal).cloned().collect()
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

impl Dirs {
    /// Every one of wardcell's own directories: configuration, state, runtime.
    pub fn all(&self) -> Vec<PathBuf> {
        let mut all = self.config.clone();
        all.extend([self.state.clone(), self.runtime.clone()]);
        all
    }
}

/// What the shim needs to build one sandbox and exec one command in it. Made by the
/// broker from the sandbox the plan writer prepared and the request ([`Sandbox`]); the
/// shim carries it out without decisions of its own.
/// `Default` is the empty spec (a probe's, tests'); the broker names every field.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct SandboxSpec {
    pub argv: Vec<String>,
    /// The complete environment of the command.
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    /// The sandbox's filesystem: everything in it beyond the fresh tmpfs root, its own
    /// `/proc`, a minimal `/dev` and a private `/tmp`. Nothing else of the host exists
    /// inside.
    pub view: Vec<ViewEntry>,
    /// TCP ports the sandbox may connect to (Landlock): the proxy's, and the ports of
    /// `egress_ports`, which only ever reach the proxy's listeners (every address is local
    /// in the sandbox's network namespace).
    pub tcp_connect: Vec<u16>,
    /// Make fd 0 the command's controlling terminal (the broker gave it a pty).
    pub controlling_tty: bool,
    /// Listen on 127.0.0.1:port in the sandbox's network namespace and hand the listener
    /// to the broker (for the zone's proxy) before the command starts.
    pub proxy_port: Option<u16>,
    /// With `proxy_port`: make every address local in the sandbox's network namespace,
    /// listen on every address at each of these ports and on UDP port 53, and hand those
    /// sockets over beside the proxy's listener (transparent egress and DNS). At most
    /// `wardcell_support::sandbox_env::MAX_EGRESS_PORTS`.
    pub egress_ports: Vec<u16>,
    /// The CA certificate files (PEM, canonical, each with what it was when the run
    /// started) whose certificates, with the run's CA when the proxy intercepts TLS, make
    /// the bundle the command's CA variables name: the system's, and those the host's CA
    /// variables named. Empty: no bundle (unless the proxy intercepts).
    pub ca_files: Vec<(PathBuf, Identity)>,
    /// Paths no rule may open, whether or not they exist: wardcell's own directories and
    /// the credential files. The Linux view masks those that exist (they are in `view`
    /// too); a Seatbelt profile, which matches paths instead of building a view, denies
    /// every one of them last (`seatbelt::profile`).
    pub denied: Vec<PathBuf>,
    /// The Mach name this sandbox's Seatbelt profile alone lets a process look up, for
    /// the supervisor's peer check on macOS (`seatbelt::identity_name`). Empty on Linux,
    /// where the sandbox's network namespace identifies its processes.
    pub seatbelt_identity: String,
    /// The soft open-file limit the command starts with (the caller's, see
    /// [`Plan::open_files`]); `None`: the shim's own.
    pub open_files: Option<u64>,
    /// `RLIMIT_NPROC` for the command (soft and hard), set after the sandbox's user
    /// namespace exists so that only its processes count: the profile's `processes` limit
    /// where no cgroup enforces it (`limits::Mechanism::Rlimit`).
    pub processes: Option<u64>,
    /// `kernel.pid_max` of the sandbox's PID namespace, set by the shim before the
    /// command starts: the profile's `processes` limit plus one, where that bounds it
    /// (`limits::Mechanism::PidMax`).
    pub pid_max: Option<u64>,
    /// Tracing, when the run traces (set by the broker as it sends the spec).
    pub trace: Option<TraceSpec>,
    /// What this view protects that the host could undo, each with its tree
    /// (`wardcell_support::view::held`): the broker's, watched for the whole run
    /// (wardcell_host::guard). Never sent.
    #[serde(skip)]
    pub held: Vec<(PathBuf, PathBuf)>,
}

/// One path of a sandbox's view.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ViewEntry {
    pub path: PathBuf,
    pub what: ViewKind,
    /// What the path was when the run started. The shim opens it without following
    /// links, compares, and refuses to build the sandbox on a difference. `None` only for
    /// links and for the supervisor's socket, which the broker made in a directory no
    /// sandbox can reach.
    pub id: Option<Identity>,
}

impl ViewEntry {
    pub fn new(path: PathBuf, what: ViewKind, id: Option<Identity>) -> ViewEntry {
        ViewEntry { path, what, id }
    }
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum ViewKind {
    /// A tree (or file) bound read-only (readable and executable).
    Read,
    /// A tree bound writable.
    Write,
    /// Hidden: not there (inside a read-only tree: `skeleton_masks`), else an empty
    /// read-only directory, or `/dev/null`'s place. Without an identity when it did not
    /// exist at the start.
    Mask,
    /// A Unix socket bound at its path (reachable even inside a mask).
    Socket,
    /// A symbolic link with this target, made where no bound tree has it already.
    Link(PathBuf),
}

/// What another zone's network allows ([`ProxySpec::elsewhere`]).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ZoneEgress {
    pub zone: String,
    pub allow: Vec<String>,
    pub internal: Vec<String>,
}

impl ZoneEgress {
    pub fn of(z: &ZonePlan) -> ZoneEgress {
        let (allow, internal) = (&z.profile.network.allow, &z.profile.network.internal);
        ZoneEgress {
            zone: z.name.clone(),
            allow: allow.clone(),
            internal: internal.clone(),
        }
    }
}

/// What one zone's proxy enforces. Sent by the broker with the listener attached.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ProxySpec {
    pub run_id: String,
    pub zone: String,
    /// `host:port` entries; `*.domain:port` matches subdomains only.
    pub allow: Vec<String>,
    /// `network.internal` entries: as `allow`, and their names may resolve to internal
    /// addresses.
    #[serde(default)]
    pub internal: Vec<String>,
    /// Credentials this zone's proxy attaches (empty unless the zone is authenticated).
    /// A `command` secret's program comes as a descriptor, one per such credential in
    /// this order, after the spec (PROTOCOL.md, section 6).
    pub credentials: Vec<CredentialPlan>,
    /// The certificates trusted upstream when intercepting (the plan's `upstream_roots`).
    pub roots: Vec<u8>,
    /// The zones this sandbox may enter, with what each allows: a refusal names the
    /// ones that allow what was refused, and the `zone enter` to use. Advice only: the
    /// broker decides every entry.
    #[serde(default)]
    pub elsewhere: Vec<ZoneEgress>,
    /// Tracing, when the run traces.
    pub trace: Option<TraceSpec>,
}

/// What decides for one zone (or one profile run outside zones).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct Rules {
    /// The zone, or None for `run --profile`.
    pub zone: Option<String>,
    pub profile: String,
    pub read: Vec<PathBuf>,
    pub write: Vec<PathBuf>,
    pub deny: Vec<PathBuf>,
    pub unix_sockets: Vec<PathBuf>,
    /// Masked in every sandbox, each with why.
    pub masked: Vec<(PathBuf, String)>,
    /// `network.allow`; None: no network at all.
    pub allow: Option<Vec<String>>,
    /// `network.internal`.
    pub internal: Vec<String>,
}

/// One profile's sandbox as the plan writer prepared it for the zones it serves (`None`:
/// `run --profile`'s profile): zones of one profile share one.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    pub zones: Vec<Option<String>>,
    /// What `zone why` answers for them (each zone named as it is asked about).
    pub rules: Rules,
    /// The sandbox, or why this profile cannot run here.
    pub made: Result<Sandbox, String>,
}

/// One profile's sandbox, prepared: everything of its spec but the request's.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct Sandbox {
    /// The view, without the supervisor's socket (each sandbox has its own).
    pub view: Vec<ViewEntry>,
    /// The spec's `denied`: wardcell's own directories and the credential files.
    pub denied: Vec<PathBuf>,
    /// The spec's `held`: what the view protects that the host could undo.
    pub held: Vec<(PathBuf, PathBuf)>,
    pub ca_files: Vec<(PathBuf, Identity)>,
    pub proxy_port: Option<u16>,
    pub egress_ports: Vec<u16>,
    pub tcp_connect: Vec<u16>,
    pub env: PreparedEnv,
    /// How each of the profile's limits is enforced on the plan's machine (the broker
    /// makes the cgroups: `limits::Enforced::prepare`).
    pub limits: Vec<(Kind, Bound, Mechanism)>,
}

/// What wardcell does to a sandbox's environment besides the profile's filter.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct PreparedEnv {
    /// Never the caller's: set below, or not at all (`SSH_AUTH_SOCK` but the host's).
    pub removed: Vec<String>,
    /// The host's `SSH_AUTH_SOCK`, where the view holds its socket.
    pub agent: Option<(String, String)>,
    /// The client and what it was: its directory goes on `PATH` unless it is found there.
    pub client: Option<(PathBuf, Identity)>,
    /// Set after wardcell's own: the placeholders, the proxy's and the CA bundle's.
    pub set: Vec<(String, String)>,
}
