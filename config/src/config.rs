//! zones.toml: schema, lookup order, loading and validation.
//!
//! The file is read in two layers. The serde structs below (`Raw*`) mirror the file
//! exactly, reject unknown keys, and keep the span of every value that validation may
//! complain about. [`parse`] checks them and produces a [`Config`] that holds no spans
//! and cannot be invalid: every zone names a profile that exists, `extends` has no
//! cycles, exactly one zone is the default, every name an `enter_from` or `credentials`
//! list holds exists, every path, duration, host and glob is well formed.
//!
//! Every error is one [`ConfigError`], displayed as one line:
//! `FILE:LINE:COL: KEY: what is wrong`.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use wardcell_support::paths;

/// What `Plan::source` and `policy check` call the configuration when no file was found.
pub const BUILTIN_LABEL: &str = "built-in default";

/// The configuration used when no file is found: one default zone.
pub const BUILTIN_CONFIG: &str = r#"[zones.agent]
profile = "developer-readonly"
default = true
"#;

/// The built-in profiles. A `[profiles.NAME]` table in the user's file with one of these
/// names replaces it whole. Written in the file's own syntax so that it is checked by the
/// same code as the user's file, and so that a user can copy one to start from.
pub const BUILTIN_PROFILES: &str = r#"
[profiles.base]
read = ["/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc", "/opt"]
# A fork loop stops here; a real build never comes near (sizes::DEFAULT_PROCESSES).
# Best effort: where this machine cannot bound processes, runs go on without it.
limits = { processes = 4096, best_effort = true }
env.deny = [
    "*_TOKEN", "*_TOKENS", "*_SECRET", "*_SECRETS", "*_SECRET_KEY", "*_PASSWORD",
    "*_PASSWD", "*_PASSPHRASE", "*_API_KEY", "*_APIKEY", "*_ACCESS_KEY",
    "*_ACCESS_KEY_ID", "*_PRIVATE_KEY", "*_CREDENTIALS", "*_AUTH_TOKEN",
    "AWS_*", "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_OAUTH_*", "AZURE_*", "GH_*",
    "GITHUB_*", "GITLAB_*", "NPM_CONFIG__AUTH*", "NPM_CONFIG_//*", "CARGO_REGISTRY_TOKEN",
    "CARGO_REGISTRIES_*", "TWINE_*", "DOCKER_AUTH_CONFIG", "VAULT_*", "PGPASSWORD",
    "MYSQL_PWD", "DATABASE_URL", "*_DATABASE_URL", "HISTFILE",
    "PRIVATE_KEY", "*_KEY", "*_DSN", "*_WEBHOOK_URL", "*_WEBHOOK",
]

[profiles.readonly]
extends = "base"
read = ["~", "."]
deny = [
    "~/.ssh", "~/.aws", "~/.gnupg", "~/.config/gh", "~/.netrc", "~/.git-credentials",
    "~/.docker", "~/.kube", "~/.npmrc", "~/.pypirc", "~/.cargo/credentials",
    "~/.cargo/credentials.toml", "~/.config/gcloud", "~/.azure", "~/.password-store",
    "~/.local/share/keyrings", "~/.mozilla", "~/.config/google-chrome", "~/.config/chromium",
    # Coding agents' own logins and keys, and their settings, which hold MCP servers'
    # tokens and environment values (the agent profiles copy what is safe of them).
    "~/.claude/.credentials.json", "~/.codex/auth.json", "~/.config/anthropic",
    "~/.claude.json", "~/.claude/settings.json", "~/.claude/settings.local.json",
    "~/.codex/config.toml",
    "~/.config/openai", "~/.gemini/oauth_creds.json", "~/.local/share/opencode/auth.json",
    # Other common secrets.
    "~/.vault-token", "~/.pgpass", "~/.my.cnf", "~/.terraform.d/credentials.tfrc.json",
    "~/.s3cfg", "~/.boto", "~/.config/rclone", "~/.config/hub",
    # Shell and REPL histories: what was typed, passwords included.
    "~/.bash_history", "~/.zsh_history", "~/.zhistory", "~/.histfile", "~/.sh_history",
    "~/.local/share/fish/fish_history", "~/.python_history", "~/.node_repl_history",
    "~/.psql_history", "~/.mysql_history", "~/.sqlite_history", "~/.rediscli_history",
    "~/.lesshst",
]

[profiles.developer-readonly]
extends = "readonly"
write = ["."]
# Hooks and the repository's configuration (core.hooksPath, core.fsmonitor, aliases...)
# run code on the host the next time you use git there: readable, never writable.
read = ["./.git/hooks", "./.git/config"]
"#;

/// Built-in profiles most runs never use, in a document of their own: parsed only when
/// the configuration or the command line names one of [`BUILTIN_AGENT_NAMES`], so that
/// a run that does not use them does not pay for reading them.
pub const BUILTIN_AGENT_PROFILES: &str = r#"
# Coding agents. Each keeps its state in a directory of its own under
# ~/.local/share/wardcell (made when missing), never in the one the agent uses on the
# host: what a sandbox writes there (hooks, MCP servers, settings) must not run outside.
# The user's own instructions and settings are read-only inside, copied by `run` to
# ~/.local/share/wardcell/from-host and linked from the agent's home (agent_home.rs).
# Each carries its API key as a credential: the sandbox sees a placeholder, the zone's
# proxy attaches the key (from the environment `wardcell run` starts in) to its API's
# requests only.
[profiles.claude-code]
extends = "developer-readonly"
write = ["~/.local/share/wardcell/claude"]
deny = ["~/.claude", "~/.claude.json"]
network = { allow = ["api.anthropic.com:443"] }
env.set = { CLAUDE_CONFIG_DIR = "~/.local/share/wardcell/claude", DISABLE_AUTOUPDATER = "1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC = "1" }
credentials = ["anthropic"]

[credentials.anthropic]
hosts = ["api.anthropic.com"]
# The API, and the settings Claude Code asks its API for (as it does run directly).
paths = ["/v1/*", "/api/claude_code/*"]
methods = ["GET", "POST"]
scheme = "header"
header = "x-api-key"
placeholder = "ANTHROPIC_API_KEY"
secret = { env = "ANTHROPIC_API_KEY" }

[profiles.codex]
extends = "developer-readonly"
write = ["~/.local/share/wardcell/codex"]
deny = ["~/.codex"]
network = { allow = ["api.openai.com:443"] }
env.set = { CODEX_HOME = "~/.local/share/wardcell/codex" }
credentials = ["openai"]

[credentials.openai]
hosts = ["api.openai.com"]
paths = ["/v1/*"]
methods = ["GET", "POST"]
scheme = "bearer"
placeholder = "OPENAI_API_KEY"
secret = { env = "OPENAI_API_KEY" }

# A fragment to extend: package managers with caches of their own (the host's caches
# are reused without checks by the next build there, so a sandbox must not write them)
# and their registries.
[profiles.package-managers]
extends = "developer-readonly"
write = ["~/.local/share/wardcell/pm"]
network = { allow = ["registry.npmjs.org:443", "pypi.org:443", "files.pythonhosted.org:443", "index.crates.io:443", "static.crates.io:443", "crates.io:443", "proxy.golang.org:443", "sum.golang.org:443"] }
env.set = { CARGO_HOME = "~/.local/share/wardcell/pm/cargo", GOMODCACHE = "~/.local/share/wardcell/pm/go/mod", GOCACHE = "~/.local/share/wardcell/pm/go/build", GOPATH = "~/.local/share/wardcell/pm/go", npm_config_cache = "~/.local/share/wardcell/pm/npm", PIP_CACHE_DIR = "~/.local/share/wardcell/pm/pip" }
"#;

/// The profiles in [`BUILTIN_AGENT_PROFILES`].
pub const BUILTIN_AGENT_NAMES: [&str; 3] = ["claude-code", "codex", "package-managers"];

/// Label used in error locations inside [`BUILTIN_PROFILES`] and
/// [`BUILTIN_AGENT_PROFILES`] (never expected to appear).
const BUILTIN_PROFILES_LABEL: &str = "built-in profiles";

/// Longest `extends` chain, built-ins included.
const MAX_EXTENDS_DEPTH: usize = 16;

// ---------------------------------------------------------------------------
// The validated configuration
// ---------------------------------------------------------------------------

/// A checked configuration. Built only by [`parse`] (and [`load`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The file it came from, or [`BUILTIN_LABEL`].
    pub source: String,
    /// Every zone, sorted by name.
    pub zones: Vec<Zone>,
    /// Every profile, the built-in ones included (those the file replaced, replaced).
    pub profiles: BTreeMap<String, Profile>,
    pub credentials: BTreeMap<String, Credential>,
    /// argv of the approval plugin.
    pub approval: Option<Vec<String>>,
    /// `[audit] syslog`.
    pub audit_syslog: bool,
    /// `[audit] max_log_kib`: how large one run's log may grow
    /// ([`wardcell_support::audit::DEFAULT_MAX_LOG_KIB`] when unset).
    pub audit_max_log_kib: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Zone {
    pub name: String,
    pub profile: String,
    pub default: bool,
    pub description: Option<String>,
    pub authenticated: bool,
    /// Zone names, or "*".
    pub enter_from: Vec<String>,
    pub requires_approval: bool,
    /// None: wait as long as the plugin takes (`"none"`, or no `approval_timeout`).
    pub approval_timeout_secs: Option<u64>,
}

/// A profile as written, `extends` not yet applied (see [`Config::effective_profile`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Profile {
    pub name: String,
    /// `extends`: one name, or a list merged in order.
    pub extends: Vec<String>,
    pub read: Vec<String>,
    pub write: Vec<String>,
    pub deny: Vec<String>,
    pub env_deny: Vec<String>,
    pub env_set: Vec<(String, String)>,
    pub network_allow: Vec<String>,
    /// `network.internal`: entries whose names may resolve to internal addresses.
    pub network_internal: Vec<String>,
    pub credentials: Vec<String>,
    /// Host Unix sockets to bind into the view: paths, or `$NAME` (from the environment
    /// `run` started in).
    pub unix_sockets: Vec<String>,
    /// `limits`: each one this profile sets, `None` for `"none"` (no limit, whatever the
    /// profile it extends says).
    pub limits: Vec<(
        wardcell_common::limits::Kind,
        Option<wardcell_common::limits::Bound>,
    )>,
    /// One of wardcell's built-in profiles (not replaced by the file).
    pub builtin: bool,
}

/// A `[credentials.NAME]` entry. The proxy resolves the secret; nothing here reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    pub name: String,
    /// `host` or `host:port`; without a port, 443.
    pub hosts: Vec<String>,
    pub paths: Vec<String>,
    /// Empty: `sandbox_env::DEFAULT_METHODS`.
    pub methods: Vec<String>,
    /// A variable the sandbox gets set to `sandbox_env::PLACEHOLDER_VALUE`.
    pub placeholder: Option<String>,
    pub scheme: Scheme,
    pub username: Option<String>,
    pub header: Option<String>,
    pub secret: SecretSource,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Basic,
    Bearer,
    Header,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    Env(String),
    File(String),
    Command(Vec<String>),
}

impl Config {
    /// The configuration used when no file is found.
    pub fn builtin() -> Config {
        parse(BUILTIN_CONFIG, BUILTIN_LABEL).expect("the built-in configuration is valid")
    }

    pub fn zone(&self, name: &str) -> Option<&Zone> {
        self.zones.iter().find(|z| z.name == name)
    }

    /// The one zone with `default = true` (validation guarantees there is one).
    pub fn default_zone(&self) -> &Zone {
        self.zones
            .iter()
            .find(|z| z.default)
            .expect("a validated configuration has a default zone")
    }

    /// A profile with `extends` applied: the profiles it extends first, each with its own
    /// `extends` applied, in the order the list names them, then the profile's own; lists
    /// appended with duplicates dropped, `env.set` and each limit overridden by the later
    /// one. A profile reached twice (both parents extend `developer-readonly`) counts once,
    /// where it is first reached. None if there is no such profile. Validation guarantees
    /// the graph has no cycle and is at most [`MAX_EXTENDS_DEPTH`] deep.
    pub fn effective_profile(&self, name: &str) -> Option<Profile> {
        let own = self.profiles.get(name)?;
        let mut chain: Vec<&Profile> = Vec::new();
        self.linearize(own, 0, &mut chain)?;
        let mut out = Profile {
            name: name.to_string(),
            builtin: own.builtin,
            ..Profile::default()
        };
        for p in &chain {
            append_unique(&mut out.read, &p.read);
            append_unique(&mut out.write, &p.write);
            append_unique(&mut out.deny, &p.deny);
            append_unique(&mut out.env_deny, &p.env_deny);
            append_unique(&mut out.network_allow, &p.network_allow);
            append_unique(&mut out.network_internal, &p.network_internal);
            append_unique(&mut out.credentials, &p.credentials);
            append_unique(&mut out.unix_sockets, &p.unix_sockets);
            for (k, v) in &p.env_set {
                match out.env_set.iter_mut().find(|(ok, _)| ok == k) {
                    Some(slot) => slot.1 = v.clone(),
                    None => out.env_set.push((k.clone(), v.clone())),
                }
            }
        }
        // Limits: a profile's own value (or "none") replaces the one it extends, field by
        // field.
        let mut limits = wardcell_common::limits::Limits::default();
        for p in &chain {
            for (kind, bound) in &p.limits {
                crate::sizes::set(&mut limits, *kind, *bound);
            }
        }
        out.limits = crate::sizes::set_ones(&limits)
            .map(|(k, b)| (k, Some(b)))
            .collect();
        out.extends = own.extends.clone();
        Some(out)
    }

    /// `p`'s ancestors, then `p`, each once, in merge order (parents before children,
    /// listed parents left to right). None past [`MAX_EXTENDS_DEPTH`] or for a name that
    /// is not there (neither passes validation).
    fn linearize<'c>(
        &'c self,
        p: &'c Profile,
        depth: usize,
        out: &mut Vec<&'c Profile>,
    ) -> Option<()> {
        if depth > MAX_EXTENDS_DEPTH {
            return None;
        }
        for parent in &p.extends {
            let parent = self.profiles.get(parent)?;
            if !out.iter().any(|q| q.name == parent.name) {
                self.linearize(parent, depth + 1, out)?;
            }
        }
        out.push(p);
        Some(())
    }
}

/// `from`'s items that `into` lacks, appended in order. Linear: a set remembers what
/// `into` holds (a list of 200,000 paths must not cost 200,000² comparisons).
fn append_unique(into: &mut Vec<String>, from: &[String]) {
    let mut seen: HashSet<String> = into.iter().cloned().collect();
    for s in from {
        if seen.insert(s.clone()) {
            into.push(s.clone());
        }
    }
}

/// `items` without repeats, first occurrence kept, in linear time.
fn unique<'a>(items: impl IntoIterator<Item = &'a String>) -> Vec<String> {
    let mut out = Vec::new();
    append_unique(&mut out, &items.into_iter().cloned().collect::<Vec<_>>());
    out
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// Why a configuration cannot be used. Displays as one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// The file could not be read.
    Read { file: String, reason: String },
    /// Something in the file is wrong, at this place. `key` is the dotted path of the
    /// offending key (`zones.push.enter_from`), empty for a TOML syntax error.
    At {
        file: String,
        line: usize,
        col: usize,
        key: String,
        message: String,
    },
}

impl ConfigError {
    /// The dotted key the error is about (empty when not about a key).
    pub fn key(&self) -> &str {
        match self {
            ConfigError::Read { .. } => "",
            ConfigError::At { key, .. } => key,
        }
    }

    /// `(line, col)`, 1-based, when the error has a place in the file.
    pub fn position(&self) -> Option<(usize, usize)> {
        match self {
            ConfigError::Read { .. } => None,
            ConfigError::At { line, col, .. } => Some((*line, *col)),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Read { file, reason } => {
                write!(f, "{file}: cannot read the configuration: {reason}")
            }
            ConfigError::At {
                file,
                line,
                col,
                key,
                message,
            } if key.is_empty() => write!(f, "{file}:{line}:{col}: {message}"),
            ConfigError::At {
                file,
                line,
                col,
                key,
                message,
            } => write!(f, "{file}:{line}:{col}: {key}: {message}"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// One text being checked: where errors in it are located.
#[derive(Clone, Copy)]
struct Doc<'a> {
    label: &'a str,
    text: &'a str,
}

impl<'a> Doc<'a> {
    /// An error at `span`. Its line and column are worked out only when it is reported
    /// (`Located::into_error`): a file with many errors costs no more than one pass each.
    fn err(
        &self,
        span: &Range<usize>,
        key: impl Into<String>,
        message: impl Into<String>,
    ) -> Located<'a> {
        Located {
            doc: *self,
            offset: span.start,
            key: key.into(),
            message: message.into(),
        }
    }
}

/// An error at a byte offset of a [`Doc`], not yet turned into line and column.
struct Located<'a> {
    doc: Doc<'a>,
    offset: usize,
    key: String,
    message: String,
}

impl Located<'_> {
    fn into_error(self) -> ConfigError {
        let (line, col) = line_col(self.doc.text, self.offset);
        ConfigError::At {
            file: self.doc.label.to_string(),
            line,
            col,
            key: self.key,
            message: self.message,
        }
    }
}

/// 1-based line and column (in characters) of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

// ---------------------------------------------------------------------------
// Lookup and loading
// ---------------------------------------------------------------------------

/// Where the configuration comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// This file (`--config`, or the first of the standard places that exists).
    File(PathBuf),
    /// No file: [`BUILTIN_CONFIG`].
    BuiltIn,
}

impl Source {
    /// How `Plan::source` and messages name it.
    pub fn label(&self) -> String {
        match self {
            Source::File(p) => p.display().to_string(),
            Source::BuiltIn => BUILTIN_LABEL.to_string(),
        }
    }
}

/// The user's configuration file.
pub fn user_file(get_env: &dyn Fn(&str) -> Option<String>, home: &Path) -> PathBuf {
    paths::user_config_dir(get_env, home).join("zones.toml")
}

/// The system-wide configuration file.
pub fn system_file() -> PathBuf {
    Path::new(paths::SYSTEM_CONFIG_DIR).join("zones.toml")
}

/// Apply the lookup order: `--config FILE` (it must then exist: [`load`] says so if it
/// does not), the user's file, the system's file, the built-in default.
pub fn locate(
    explicit: Option<&Path>,
    get_env: &dyn Fn(&str) -> Option<String>,
    home: &Path,
) -> Source {
    locate_in(explicit, &[user_file(get_env, home), system_file()])
}

/// [`locate`] with the standard places given (for tests). A file that holds no setting
/// (only blank lines and comments, like the example a package installs in
/// `/etc/wardcell`) is no configuration: the lookup goes on past it.
pub fn locate_in(explicit: Option<&Path>, places: &[PathBuf]) -> Source {
    if let Some(file) = explicit {
        return Source::File(file.to_path_buf());
    }
    for place in places {
        // A file that exists but cannot be examined is still "found": load reports why.
        if matches!(place.try_exists(), Ok(false)) {
            continue;
        }
        if read_config_file(place).is_ok_and(|text| holds_no_setting(&text)) {
            continue;
        }
        return Source::File(place.clone());
    }
    Source::BuiltIn
}

/// Whether a configuration file's bytes hold no setting at all: every line blank or a
/// TOML comment. Such a file is no configuration, not a configuration without zones.
/// Bytes that are not UTF-8 are not "nothing": [`load`] reports them.
pub fn holds_no_setting(text: &[u8]) -> bool {
    std::str::from_utf8(text).is_ok_and(|text| {
        text.lines().all(|line| {
            let line = line.trim_start_matches([' ', '\t']);
            line.is_empty() || line == "\r" || line.starts_with('#')
        })
    })
}

/// The largest configuration file read, in bytes. A real one takes a few KiB; a profile
/// listing 200,000 paths about 5 MiB. The bound keeps `--config /dev/zero`-like input
/// (or a file that keeps growing) from taking all memory, and a plan resolved from a file
/// within it fits in its frame (32 MiB, docs/PROTOCOL.md) unless many zones repeat it.
pub const MAX_CONFIG_LEN: u64 = 16 * 1024 * 1024;

/// The bytes of a configuration file: a regular file (opened without blocking, so that a
/// FIFO is refused rather than waited on) of at most [`MAX_CONFIG_LEN`] bytes.
fn read_config_file(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => "no such file".to_string(),
            std::io::ErrorKind::PermissionDenied => "permission denied".to_string(),
            _ => e.to_string(),
        })?;
    let meta = f.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err(
            "it is not a regular file (a directory, a FIFO or a device); give the path of a TOML file"
                .to_string(),
        );
    }
    let too_big = |n: u64| {
        format!(
            "it is {n} bytes, over the {MAX_CONFIG_LEN} bytes (16 MiB) a configuration may take"
        )
    };
    if meta.len() > MAX_CONFIG_LEN {
        return Err(too_big(meta.len()));
    }
    let mut text = Vec::with_capacity(meta.len() as usize);
    f.take(MAX_CONFIG_LEN + 1)
        .read_to_end(&mut text)
        .map_err(|e| e.to_string())?;
    if text.len() as u64 > MAX_CONFIG_LEN {
        return Err(too_big(text.len() as u64));
    }
    Ok(text)
}

/// Read and check the configuration from `source`.
pub fn load(source: &Source) -> Result<Config, ConfigError> {
    load_naming(source, None)
}

/// [`load`] for a command line that names the profile `named` (see [`parse_naming`]).
pub fn load_naming(source: &Source, named: Option<&str>) -> Result<Config, ConfigError> {
    let parse = |text: &str, label: &str| parse_naming(text, label, named);
    match source {
        Source::BuiltIn => parse(BUILTIN_CONFIG, BUILTIN_LABEL),
        Source::File(path) => {
            let label = path.display().to_string();
            let text = read_config_file(path).map_err(|reason| ConfigError::Read {
                file: label.clone(),
                reason,
            })?;
            let text = String::from_utf8(text).map_err(|_| ConfigError::Read {
                file: label.clone(),
                reason: "the file is not valid UTF-8".to_string(),
            })?;
            // `--config` naming a file of comments alone (or one that became so after
            // `locate`): no configuration, so the built-in default, saying whose place
            // it takes.
            if holds_no_setting(text.as_bytes()) {
                let mut config = parse(BUILTIN_CONFIG, BUILTIN_LABEL)?;
                config.source = format!("{BUILTIN_LABEL} ({label} holds no setting)");
                return Ok(config);
            }
            parse(&text, &label)
        }
    }
}

// ---------------------------------------------------------------------------
// The file as written
// ---------------------------------------------------------------------------

type Name = Spanned<String>;
type List = Vec<Spanned<String>>;

/// What [`Checker::walk_extends`] found wrong.
enum Walk<'n> {
    Cycle(Vec<&'n str>),
    Deep,
}

/// `extends`: one profile's name, or a list of them, as written.
#[derive(Clone, Debug)]
enum Extends {
    One(String),
    Many(List),
}

impl<'de> Deserialize<'de> for Extends {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Extends;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a profile's name, or a list of profiles' names")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Extends, E> {
                Ok(Extends::One(v.to_string()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Extends, A::Error> {
                let mut out = Vec::new();
                while let Some(item) = seq.next_element::<Spanned<String>>()? {
                    out.push(item);
                }
                Ok(Extends::Many(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// Each name `extends` lists, with its place in the file (a single name, the string's).
fn extends_names(e: &Option<Spanned<Extends>>) -> List {
    match e {
        None => Vec::new(),
        Some(whole) => match whole.get_ref() {
            Extends::One(name) => vec![Spanned::new(whole.span(), name.clone())],
            Extends::Many(names) => names.clone(),
        },
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    zones: BTreeMap<Name, RawZone>,
    #[serde(default)]
    profiles: BTreeMap<Name, RawProfile>,
    #[serde(default)]
    credentials: BTreeMap<Name, RawCredential>,
    approval: Option<RawApproval>,
    audit: Option<RawAudit>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawZone {
    // Optional here so that its absence is reported with the zone's own place.
    profile: Option<Spanned<String>>,
    default: Option<Spanned<bool>>,
    description: Option<Spanned<String>>,
    authenticated: Option<bool>,
    enter_from: Option<List>,
    requires_approval: Option<bool>,
    approval_timeout: Option<Spanned<String>>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct RawProfile {
    extends: Option<Spanned<Extends>>,
    #[serde(default)]
    read: List,
    #[serde(default)]
    write: List,
    #[serde(default)]
    deny: List,
    env: Option<RawEnv>,
    network: Option<RawNetwork>,
    #[serde(default)]
    credentials: List,
    #[serde(default)]
    unix_sockets: List,
    limits: Option<RawLimits>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    processes: Option<Spanned<NumberOrText>>,
    memory: Option<Spanned<String>>,
    cpu: Option<Spanned<String>>,
    time: Option<Spanned<String>>,
    best_effort: Option<bool>,
}

/// `processes = 512`, or `processes = "none"`.
#[derive(Deserialize, Clone)]
#[serde(untagged)]
enum NumberOrText {
    Number(i64),
    Text(String),
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct RawEnv {
    #[serde(default)]
    deny: List,
    #[serde(default)]
    set: BTreeMap<Name, Spanned<String>>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct RawNetwork {
    #[serde(default)]
    allow: List,
    #[serde(default)]
    internal: List,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCredential {
    hosts: Option<List>,
    #[serde(default)]
    paths: List,
    methods: Option<Spanned<List>>,
    placeholder: Option<Spanned<String>>,
    scheme: Option<Spanned<String>>,
    username: Option<Spanned<String>>,
    header: Option<Spanned<String>>,
    secret: Option<RawSecret>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSecret {
    env: Option<Spanned<String>>,
    file: Option<Spanned<String>>,
    command: Option<Spanned<List>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawApproval {
    plugin: Option<Spanned<List>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAudit {
    #[serde(default)]
    syslog: bool,
    max_log_kib: Option<Spanned<i64>>,
}

// ---------------------------------------------------------------------------
// Deserialising, and placing serde's errors at a key
// ---------------------------------------------------------------------------

fn deserialize(doc: Doc<'_>) -> Result<RawFile, ConfigError> {
    toml::from_str::<RawFile>(doc.text).map_err(|e| {
        let span = e.span().unwrap_or(0..0);
        let message = tidy_serde_message(e.message());
        let key = match toml::from_str::<KeyTree>(doc.text) {
            Ok(tree) => tree.key_for(doc.text, &span),
            // The text does not even parse: a syntax error, which is about no key.
            Err(_) => String::new(),
        };
        doc.err(&span, key, message).into_error()
    })
}

/// serde's messages, in this file's vocabulary, on one line.
fn tidy_serde_message(message: &str) -> String {
    let one_line = message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    if let Some(rest) = one_line.strip_prefix("unknown field `") {
        let expected = rest.split_once(", ").map(|(_, e)| e).unwrap_or("");
        let expected = expected
            .replace("expected one of ", "")
            .replace("expected ", "");
        if expected.is_empty() || expected.starts_with("there are no") {
            return "unknown key; this table takes no keys".to_string();
        }
        return format!("unknown key; the keys allowed here are {expected}");
    }
    match one_line.find("expected struct ") {
        Some(i) => format!("{}expected a table", &one_line[..i]),
        None => match one_line.find("expected a map") {
            Some(i) => format!("{}expected a table", &one_line[..i]),
            None => one_line,
        },
    }
}

/// Every key of the document with its span, to name the key a serde error is about.
struct KeyTree(Vec<(Range<usize>, String)>);

impl<'de> Deserialize<'de> for KeyTree {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let node = Node::deserialize(d)?;
        let mut out = Vec::new();
        node.collect("", &mut out);
        out.sort_by_key(|(span, _)| span.start);
        Ok(KeyTree(out))
    }
}

impl KeyTree {
    /// The key an error at `span` is about: the key itself when the span is a key (an
    /// unknown key); the last key of a table header when the span starts with one; else
    /// the last key written before the span (the key whose value is wrong).
    fn key_for(&self, text: &str, span: &Range<usize>) -> String {
        if let Some((_, path)) = self.0.iter().find(|(s, _)| s == span) {
            return path.clone();
        }
        let line_start = text[..span.start.min(text.len())]
            .rfind('\n')
            .map_or(0, |i| i + 1);
        let is_header = text.get(span.start..).is_some_and(|t| t.starts_with('['))
            && text[line_start..span.start].trim().is_empty();
        if is_header {
            let line_end = text[span.start..]
                .find('\n')
                .map_or(text.len(), |i| span.start + i);
            if let Some((_, path)) = self
                .0
                .iter()
                .rev()
                .find(|(s, _)| s.start >= span.start && s.end <= line_end)
            {
                return path.clone();
            }
        }
        self.0
            .iter()
            .rev()
            .find(|(s, _)| s.start < span.start)
            .map(|(_, p)| p.clone())
            .unwrap_or_default()
    }
}

/// The shape of a TOML document, keys with their spans, values without.
enum Node {
    Table(Vec<(Spanned<String>, Node)>),
    Array(Vec<Node>),
    Scalar,
}

impl Node {
    fn collect(&self, prefix: &str, out: &mut Vec<(Range<usize>, String)>) {
        match self {
            Node::Table(entries) => {
                for (k, v) in entries {
                    let path = if prefix.is_empty() {
                        k.get_ref().clone()
                    } else {
                        format!("{prefix}.{}", k.get_ref())
                    };
                    out.push((k.span(), path.clone()));
                    v.collect(&path, out);
                }
            }
            Node::Array(items) => items.iter().for_each(|i| i.collect(prefix, out)),
            Node::Scalar => {}
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Node;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any TOML value")
            }
            fn visit_bool<E>(self, _: bool) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_str<E>(self, _: &str) -> Result<Node, E> {
                Ok(Node::Scalar)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Node, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = a.next_element()? {
                    items.push(item);
                }
                Ok(Node::Array(items))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Node, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = a.next_entry()? {
                    entries.push(entry);
                }
                Ok(Node::Table(entries))
            }
        }
        d.deserialize_any(V)
    }
}

// ---------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------

/// Parse and check a configuration. `label` names it in errors and in
/// [`Config::source`]. Pure: reads nothing but `text`.
pub fn parse(text: &str, label: &str) -> Result<Config, ConfigError> {
    parse_naming(text, label, None)
}

/// [`parse`], for a command line that names the profile `named` (`--profile`): the
/// built-in agent profiles are read when it or the text names one of them.
pub fn parse_naming(text: &str, label: &str, named: Option<&str>) -> Result<Config, ConfigError> {
    let user = Doc { label, text };
    let raw = deserialize(user)?;
    let mut builtin_docs = vec![Doc {
        label: BUILTIN_PROFILES_LABEL,
        text: BUILTIN_PROFILES,
    }];
    if BUILTIN_AGENT_NAMES
        .iter()
        .any(|n| named == Some(*n) || text.contains(n))
    {
        builtin_docs.push(Doc {
            label: BUILTIN_PROFILES_LABEL,
            text: BUILTIN_AGENT_PROFILES,
        });
    }

    let mut v = Checker::default();

    // 1. Profiles: the built-in ones, then the file's (which replace them by name).
    let mut builtin = Vec::with_capacity(builtin_docs.len());
    for doc in builtin_docs {
        builtin.push((doc, deserialize(doc)?));
    }
    let mut profiles: BTreeMap<String, (Doc<'_>, Name, RawProfile)> = BTreeMap::new();
    for (doc, raw) in &mut builtin {
        for (name, p) in std::mem::take(&mut raw.profiles) {
            profiles.insert(name.get_ref().clone(), (*doc, name, p));
        }
    }
    for (name, p) in &raw.profiles {
        v.name(user, name, "profiles");
        profiles.insert(name.get_ref().clone(), (user, name.clone(), p.clone()));
    }

    // 2. Credentials: the built-in ones, then the file's (which replace them by name).
    let mut credentials = BTreeMap::new();
    for (doc, raw) in &builtin {
        for (name, c) in &raw.credentials {
            if let Some(c) = v.credential(*doc, name, c) {
                credentials.insert(c.name.clone(), c);
            }
        }
    }
    for (name, c) in &raw.credentials {
        v.name(user, name, "credentials");
        if let Some(c) = v.credential(user, name, c) {
            credentials.insert(c.name.clone(), c);
        }
    }

    // 3. Each profile on its own, then `extends` across them. A credential is named
    //    rightly if its table exists, even one with errors of its own (said above).
    let defined: BTreeSet<String> = raw
        .credentials
        .keys()
        .map(|k| k.get_ref().clone())
        .chain(credentials.keys().cloned())
        .collect();
    let mut checked = BTreeMap::new();
    for (name, (doc, key, p)) in &profiles {
        let builtin = doc.label == BUILTIN_PROFILES_LABEL;
        let profile = v.profile(*doc, key, p, &profiles, &defined, builtin);
        checked.insert(name.clone(), profile);
    }
    v.extends_cycles(&profiles);

    // 4. Zones.
    let zone_names: BTreeSet<&str> = raw.zones.keys().map(|k| k.get_ref().as_str()).collect();
    let mut zones = Vec::new();
    let mut default: Option<&Name> = None;
    for (name, z) in &raw.zones {
        v.name(user, name, "zones");
        let key = format!("zones.{}", name.get_ref());
        let profile = match &z.profile {
            None => {
                v.push(user.err(
                    &name.span(),
                    &key,
                    "missing key `profile`: every zone names the profile it runs under",
                ));
                String::new()
            }
            Some(p) => {
                if !profiles.contains_key(p.get_ref()) {
                    v.push(user.err(
                        &p.span(),
                        format!("{key}.profile"),
                        format!(
                            "there is no profile '{}': define [profiles.{}] or use one of {}",
                            p.get_ref(),
                            p.get_ref(),
                            quoted_list(profiles.keys())
                        ),
                    ));
                }
                p.get_ref().clone()
            }
        };
        let is_default = z.default.as_ref().is_some_and(|d| *d.get_ref());
        if let (true, Some(d)) = (is_default, &z.default) {
            match default {
                None => default = Some(name),
                Some(first) => v.push(user.err(
                    &d.span(),
                    format!("{key}.default"),
                    format!(
                        "zones '{}' and '{}' both set default = true; exactly one zone may be the default",
                        first.get_ref(),
                        name.get_ref()
                    ),
                )),
            }
        }
        let mut enter_from: Vec<String> = Vec::new();
        for e in z.enter_from.iter().flatten() {
            if e.get_ref() != "*" && !zone_names.contains(e.get_ref().as_str()) {
                v.push(user.err(
                    &e.span(),
                    format!("{key}.enter_from"),
                    format!(
                        "there is no zone '{}': enter_from lists zone names ({}), or \"*\" for any",
                        e.get_ref(),
                        zone_names.iter().copied().collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
            if !enter_from.contains(e.get_ref()) {
                enter_from.push(e.get_ref().clone());
            }
        }
        if let Some(d) = &z.description {
            if d.get_ref().chars().any(char::is_control) {
                v.push(user.err(
                    &d.span(),
                    format!("{key}.description"),
                    "must be one line without control characters: `zone list` shows it in a table",
                ));
            }
        }
        let requires_approval = z.requires_approval.unwrap_or(false);
        let approval_timeout_secs = match &z.approval_timeout {
            None => None,
            Some(t) => {
                if !requires_approval {
                    v.push(user.err(
                        &t.span(),
                        format!("{key}.approval_timeout"),
                        "has no effect without requires_approval = true: remove it or set requires_approval",
                    ));
                }
                match parse_duration(t.get_ref()) {
                    Ok(secs) => secs,
                    Err(why) => {
                        v.push(user.err(&t.span(), format!("{key}.approval_timeout"), why));
                        None
                    }
                }
            }
        };
        zones.push(Zone {
            name: name.get_ref().clone(),
            profile,
            default: is_default,
            description: z.description.as_ref().map(|d| d.get_ref().clone()),
            authenticated: z.authenticated.unwrap_or(false),
            enter_from,
            requires_approval,
            approval_timeout_secs,
        });
    }
    if default.is_none() {
        let span = raw.zones.keys().next().map_or(0..0, |k| k.span());
        v.push(user.err(
            &span,
            "zones",
            "no zone sets default = true; exactly one zone must be the default",
        ));
    }

    // 5. [approval] and [audit].
    let approval = raw
        .approval
        .as_ref()
        .and_then(|a| a.plugin.as_ref())
        .map(|plugin| {
            let argv: Vec<String> = plugin
                .get_ref()
                .iter()
                .map(|s| s.get_ref().clone())
                .collect();
            match plugin.get_ref().first() {
                None => v.push(user.err(
                    &plugin.span(),
                    "approval.plugin",
                    "is empty: give the plugin's argv, its absolute path first, or remove the key",
                )),
                Some(first) if !first.get_ref().starts_with('/') => v.push(user.err(
                    &first.span(),
                    "approval.plugin",
                    format!(
                        "{:?} is not an absolute path: the plugin is never looked up in PATH",
                        first.get_ref()
                    ),
                )),
                Some(_) => {}
            }
            for a in plugin.get_ref() {
                if a.get_ref().contains('\0') {
                    v.push(user.err(&a.span(), "approval.plugin", "contains a NUL byte"));
                }
            }
            argv
        });

    let audit_max_log_kib = match raw.audit.as_ref().and_then(|a| a.max_log_kib.as_ref()) {
        None => wardcell_support::audit::DEFAULT_MAX_LOG_KIB,
        Some(k) => {
            let min = wardcell_support::audit::MIN_MAX_LOG_KIB;
            match u64::try_from(*k.get_ref()) {
                Ok(n) if n >= min => n,
                _ => {
                    v.push(user.err(
                        &k.span(),
                        "audit.max_log_kib",
                        format!("is {}: a run's log needs at least {min} KiB", k.get_ref()),
                    ));
                    0
                }
            }
        }
    };

    v.finish()?;
    Ok(Config {
        source: label.to_string(),
        zones,
        profiles: checked,
        credentials,
        approval,
        audit_syslog: raw.audit.as_ref().is_some_and(|a| a.syslog),
        audit_max_log_kib,
    })
}

fn quoted_list<'a>(names: impl Iterator<Item = &'a String>) -> String {
    names
        .map(|n| format!("'{n}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Collects every error; the one reported is the first in the file.
#[derive(Default)]
struct Checker<'a> {
    /// The first error so far: in the user's file before the built-in profiles, then
    /// by place (byte offset, the same order as line and column).
    first: Option<Located<'a>>,
    /// How many errors there were.
    count: usize,
}

impl<'a> Checker<'a> {
    fn push(&mut self, e: Located<'a>) {
        self.count += 1;
        let rank = |e: &Located<'_>| (e.doc.label == BUILTIN_PROFILES_LABEL, e.offset);
        if self.first.as_ref().is_none_or(|f| rank(&e) < rank(f)) {
            self.first = Some(e);
        }
    }

    fn finish(self) -> Result<(), ConfigError> {
        match self.first {
            Some(e) => Err(e.into_error()),
            None => Ok(()),
        }
    }

    /// Zone, profile and credential names: `[a-z0-9][a-z0-9_-]{0,63}`.
    fn name(&mut self, doc: Doc<'a>, name: &Name, table: &str) {
        if !valid_name(name.get_ref()) {
            self.push(doc.err(
                &name.span(),
                format!("{table}.{}", name.get_ref()),
                "names are 1 to 64 characters of a-z, 0-9, '_' and '-', starting with a letter or digit",
            ));
        }
    }

    fn profile(
        &mut self,
        doc: Doc<'a>,
        name: &Name,
        p: &RawProfile,
        all: &BTreeMap<String, (Doc<'a>, Name, RawProfile)>,
        credentials: &BTreeSet<String>,
        builtin: bool,
    ) -> Profile {
        let key = format!("profiles.{}", name.get_ref());
        for parent in &extends_names(&p.extends) {
            if !all.contains_key(parent.get_ref()) {
                self.push(doc.err(
                    &parent.span(),
                    format!("{key}.extends"),
                    format!(
                        "there is no profile '{}' to extend: define [profiles.{}] or extend one of {}",
                        parent.get_ref(),
                        parent.get_ref(),
                        quoted_list(all.keys())
                    ),
                ));
            }
        }
        let mut paths_of = |rule: &str, list: &List| -> Vec<String> {
            for entry in list {
                let raw = entry.get_ref();
                let check = if raw.contains('\0') {
                    Err("contains a NUL byte".to_string())
                } else {
                    paths::expand(raw, Path::new("/home"), Path::new("/cwd")).map(|_| ())
                };
                if let Err(why) = check {
                    self.push(doc.err(&entry.span(), format!("{key}.{rule}"), why));
                }
            }
            unique(list.iter().map(Spanned::get_ref))
        };
        let read = paths_of("read", &p.read);
        let write = paths_of("write", &p.write);
        let deny = paths_of("deny", &p.deny);
        let mut unix_sockets: Vec<String> = Vec::new();
        for entry in &p.unix_sockets {
            let raw = entry.get_ref();
            let check = match raw.strip_prefix('$') {
                Some(var) if paths::is_var_name(var) => Ok(()),
                Some(_) => Err(format!(
                    "'{raw}' is not a variable: write $NAME alone (letters, digits, '_'), or a path"
                )),
                None if raw.contains('\0') => Err("contains a NUL byte".to_string()),
                None => paths::expand(raw, Path::new("/home"), Path::new("/cwd")).map(|_| ()),
            };
            if let Err(why) = check {
                self.push(doc.err(&entry.span(), format!("{key}.unix_sockets"), why));
            }
            if !unix_sockets.contains(raw) {
                unix_sockets.push(raw.clone());
            }
        }

        let mut env_deny = Vec::new();
        let mut env_set = Vec::new();
        if let Some(env) = &p.env {
            for g in &env.deny {
                let s = g.get_ref();
                let why = if s.is_empty() {
                    Some("an empty pattern matches no variable: remove it")
                } else if s.contains('=') || s.contains('\0') {
                    Some("a variable pattern cannot contain '=' or a NUL byte")
                } else {
                    None
                };
                if let Some(why) = why {
                    self.push(doc.err(&g.span(), format!("{key}.env.deny"), why));
                }
            }
            env_deny = unique(env.deny.iter().map(Spanned::get_ref));
            for (k, val) in &env.set {
                let name = k.get_ref();
                let why = if name.is_empty() || name.contains('=') || name.contains('\0') {
                    Some("a variable name must be non-empty, without '=' or a NUL byte".to_string())
                } else if name.starts_with("WARDCELL_") {
                    Some("WARDCELL_* variables are set by wardcell itself".to_string())
                } else if val.get_ref().contains('\0') {
                    Some("the value contains a NUL byte".to_string())
                } else {
                    None
                };
                if let Some(why) = why {
                    self.push(doc.err(&k.span(), format!("{key}.env.set.{name}"), why));
                }
                env_set.push((name.clone(), val.get_ref().clone()));
            }
        }

        let mut network_allow = Vec::new();
        let mut network_internal = Vec::new();
        for (list, out, field) in [
            (
                p.network.as_ref().map(|n| &n.allow),
                &mut network_allow,
                "allow",
            ),
            (
                p.network.as_ref().map(|n| &n.internal),
                &mut network_internal,
                "internal",
            ),
        ] {
            for entry in list.into_iter().flatten() {
                if let Err(why) = check_host_port(entry.get_ref()) {
                    self.push(doc.err(&entry.span(), format!("{key}.network.{field}"), why));
                }
                out.push(entry.get_ref().clone());
            }
        }
        let network_allow = unique(&network_allow);
        let network_internal = unique(&network_internal);

        let mut creds = Vec::new();
        for c in &p.credentials {
            if !credentials.contains(c.get_ref()) {
                self.push(doc.err(
                    &c.span(),
                    format!("{key}.credentials"),
                    format!(
                        "there is no credential '{}': define [credentials.{}]",
                        c.get_ref(),
                        c.get_ref()
                    ),
                ));
            }
            creds.push(c.get_ref().clone());
        }
        let creds = unique(&creds);
        let limits = p
            .limits
            .as_ref()
            .map(|l| self.limits(doc, &key, l))
            .unwrap_or_default();

        Profile {
            name: name.get_ref().clone(),
            extends: unique(extends_names(&p.extends).iter().map(Spanned::get_ref)),
            read,
            write,
            deny,
            env_deny,
            env_set,
            network_allow,
            network_internal,
            credentials: creds,
            unix_sockets,
            limits,
            builtin,
        }
    }

    /// A profile's `limits`: each value checked, `"none"` kept as no limit.
    fn limits(
        &mut self,
        doc: Doc<'a>,
        key: &str,
        l: &RawLimits,
    ) -> Vec<(
        wardcell_common::limits::Kind,
        Option<wardcell_common::limits::Bound>,
    )> {
        use wardcell_common::limits::{Bound, Kind};
        let best_effort = l.best_effort.unwrap_or(false);
        let processes = l.processes.as_ref().map(|v| {
            let value = match v.get_ref() {
                NumberOrText::Text(t) if t == "none" => Ok(None),
                NumberOrText::Number(n) if *n > 0 => Ok(Some(*n as u64)),
                NumberOrText::Number(n) => {
                    Err(format!("is {n}: give at least 1 process, or \"none\""))
                }
                NumberOrText::Text(t) => Err(format!(
                    "{t:?} is not a number of processes: write a number like 512, or \"none\""
                )),
            };
            (Kind::Processes, v.span(), value)
        });
        let text =
            |kind: Kind, v: &Option<Spanned<String>>, parse: fn(&str) -> Result<u64, String>| {
                v.as_ref().map(|v| {
                    let value = match v.get_ref().as_str() {
                        "none" => Ok(None),
                        t => parse(t).map(Some),
                    };
                    (kind, v.span(), value)
                })
            };
        let time = |t: &str| match parse_duration_as(
            t,
            "write a duration like \"30m\" or \"2h\", or \"none\"",
        ) {
            Ok(Some(secs)) => Ok(secs),
            Ok(None) => Err(format!("{t:?} is not a duration")),
            Err(e) => Err(e),
        };
        let mut out = Vec::new();
        for (kind, span, value) in [
            processes,
            text(Kind::Memory, &l.memory, crate::sizes::parse_size),
            text(Kind::Cpu, &l.cpu, crate::sizes::parse_percent),
            text(Kind::Time, &l.time, time),
        ]
        .into_iter()
        .flatten()
        {
            match value {
                Ok(v) => out.push((kind, v.map(|value| Bound { value, best_effort }))),
                Err(why) => self.push(doc.err(&span, format!("{key}.limits.{}", kind.name()), why)),
            }
        }
        out
    }

    /// Each profile's `extends` graph must have no cycle and be at most
    /// [`MAX_EXTENDS_DEPTH`] deep. A cycle is reported once, at the `extends` of the first
    /// profile in it (by name) that the user's file defines.
    fn extends_cycles(&mut self, all: &BTreeMap<String, (Doc<'a>, Name, RawProfile)>) {
        let mut reported: BTreeSet<String> = BTreeSet::new();
        let mut heights = BTreeMap::new();
        for start in all.keys() {
            let mut path: Vec<&str> = vec![start];
            if let Err(found) = Self::walk_extends(all, &mut path, &mut heights) {
                let (at, why) = match found {
                    Walk::Cycle(cycle) => {
                        let mut members = cycle.clone();
                        members.sort_unstable();
                        if !reported.insert(members.join(",")) {
                            continue;
                        }
                        let at = *members
                            .iter()
                            .find(|m| all[**m].0.label != BUILTIN_PROFILES_LABEL)
                            .unwrap_or(&members[0]);
                        let pos = cycle.iter().position(|n| *n == at).unwrap_or(0);
                        let mut shown: Vec<&str> = cycle[pos..].to_vec();
                        shown.extend_from_slice(&cycle[..pos]);
                        shown.push(at);
                        let why = format!(
                            "extends forms a cycle ({}): a profile cannot extend itself",
                            shown.join(" -> ")
                        );
                        (at, why)
                    }
                    Walk::Deep => (
                        start.as_str(),
                        format!("extends is more than {MAX_EXTENDS_DEPTH} profiles deep"),
                    ),
                };
                let (doc, _, p) = &all[at];
                let place = p.extends.as_ref().expect("extends something").span();
                self.push(doc.err(&place, format!("profiles.{at}.extends"), why));
            }
        }
    }

    /// Depth first from the last profile on `path`: how many profiles deep its graph is,
    /// or a cycle (the profiles on it, in order), or a path deeper than
    /// [`MAX_EXTENDS_DEPTH`]. `heights` remembers the profiles already walked, so a graph
    /// that reaches one profile many ways is walked once. A name that is not there is
    /// reported as a missing profile, not here.
    fn walk_extends<'n>(
        all: &'n BTreeMap<String, (Doc<'a>, Name, RawProfile)>,
        path: &mut Vec<&'n str>,
        heights: &mut BTreeMap<&'n str, usize>,
    ) -> Result<usize, Walk<'n>> {
        let cur = *path.last().expect("a start");
        if let Some(h) = heights.get(cur) {
            return Ok(*h);
        }
        let mut height = 1;
        for next in extends_names(&all[cur].2.extends) {
            let Some((key, _)) = all.get_key_value(next.get_ref()) else {
                continue;
            };
            if let Some(i) = path.iter().position(|n| *n == key.as_str()) {
                return Err(Walk::Cycle(path[i..].to_vec()));
            }
            path.push(key);
            let below = Self::walk_extends(all, path, heights)?;
            path.pop();
            if path.len() + below > MAX_EXTENDS_DEPTH {
                return Err(Walk::Deep);
            }
            height = height.max(below + 1);
        }
        heights.insert(cur, height);
        Ok(height)
    }

    fn credential(&mut self, doc: Doc<'a>, name: &Name, c: &RawCredential) -> Option<Credential> {
        let key = format!("credentials.{}", name.get_ref());
        let before = self.count;
        let hosts: Vec<String> = match &c.hosts {
            None => {
                self.push(doc.err(
                    &name.span(),
                    &key,
                    "missing key `hosts`: list the hosts this credential is attached for",
                ));
                Vec::new()
            }
            Some(hosts) => {
                if hosts.is_empty() {
                    self.push(doc.err(
                        &name.span(),
                        format!("{key}.hosts"),
                        "is empty: list at least one host",
                    ));
                }
                for h in hosts {
                    if let Err(why) = check_credential_host(h.get_ref()) {
                        self.push(doc.err(&h.span(), format!("{key}.hosts"), why));
                    }
                }
                hosts.iter().map(|h| h.get_ref().clone()).collect()
            }
        };
        for p in &c.paths {
            if !p.get_ref().starts_with('/') {
                self.push(doc.err(
                    &p.span(),
                    format!("{key}.paths"),
                    format!(
                        "{:?} must start with '/': it matches request paths",
                        p.get_ref()
                    ),
                ));
            }
        }
        let mut methods = Vec::new();
        if let Some(m) = &c.methods {
            if m.get_ref().is_empty() {
                self.push(doc.err(
                    &m.span(),
                    format!("{key}.methods"),
                    "is empty: list the methods it is attached for, or leave `methods` out for GET HEAD POST PUT PATCH DELETE",
                ));
            }
            for one in m.get_ref() {
                match check_method(one.get_ref()) {
                    Ok(()) if !methods.contains(one.get_ref()) => {
                        methods.push(one.get_ref().clone())
                    }
                    Ok(()) => {}
                    Err(why) => self.push(doc.err(&one.span(), format!("{key}.methods"), why)),
                }
            }
        }
        if let Some(p) = &c.placeholder {
            if let Err(why) = check_placeholder(p.get_ref()) {
                self.push(doc.err(&p.span(), format!("{key}.placeholder"), why));
            }
        }
        let scheme = match c.scheme.as_ref().map(|s| (s, s.get_ref().as_str())) {
            None => {
                self.push(doc.err(
                    &name.span(),
                    &key,
                    "missing key `scheme`: one of \"basic\", \"bearer\", \"header\"",
                ));
                Scheme::Bearer
            }
            Some((_, "basic")) => Scheme::Basic,
            Some((_, "bearer")) => Scheme::Bearer,
            Some((_, "header")) => Scheme::Header,
            Some((s, other)) => {
                self.push(doc.err(
                    &s.span(),
                    format!("{key}.scheme"),
                    format!("unknown scheme {other:?}: use \"basic\", \"bearer\" or \"header\""),
                ));
                Scheme::Bearer
            }
        };
        match (scheme, &c.username) {
            (Scheme::Basic, None) if c.scheme.is_some() => self.push(doc.err(
                &name.span(),
                &key,
                "missing key `username`: scheme \"basic\" needs one",
            )),
            (Scheme::Bearer | Scheme::Header, Some(u)) => self.push(doc.err(
                &u.span(),
                format!("{key}.username"),
                "only scheme \"basic\" uses a username: remove it",
            )),
            _ => {}
        }
        match (scheme, &c.header) {
            (Scheme::Header, None) if c.scheme.is_some() => self.push(doc.err(
                &name.span(),
                &key,
                "missing key `header`: scheme \"header\" needs the header's name",
            )),
            (Scheme::Header, Some(h)) if !valid_header_name(h.get_ref()) => self.push(doc.err(
                &h.span(),
                format!("{key}.header"),
                format!("{:?} is not an HTTP header name", h.get_ref()),
            )),
            (Scheme::Basic | Scheme::Bearer, Some(h)) => self.push(doc.err(
                &h.span(),
                format!("{key}.header"),
                "only scheme \"header\" uses a header name: remove it",
            )),
            _ => {}
        }
        let secret = match &c.secret {
            None => {
                self.push(doc.err(
                    &name.span(),
                    &key,
                    "missing key `secret`: { env = \"VAR\" }, { file = \"PATH\" } or { command = [...] }",
                ));
                None
            }
            Some(s) => self.secret(doc, name, &format!("{key}.secret"), s),
        };
        if self.count != before {
            return None;
        }
        Some(Credential {
            name: name.get_ref().clone(),
            hosts,
            paths: c.paths.iter().map(|p| p.get_ref().clone()).collect(),
            methods,
            placeholder: c.placeholder.as_ref().map(|p| p.get_ref().clone()),
            scheme,
            username: c.username.as_ref().map(|u| u.get_ref().clone()),
            header: c.header.as_ref().map(|h| h.get_ref().clone()),
            secret: secret?,
        })
    }

    fn secret(
        &mut self,
        doc: Doc<'a>,
        name: &Name,
        key: &str,
        s: &RawSecret,
    ) -> Option<SecretSource> {
        let mut given = Vec::new();
        if let Some(e) = &s.env {
            given.push((e.span(), "env"));
        }
        if let Some(f) = &s.file {
            given.push((f.span(), "file"));
        }
        if let Some(c) = &s.command {
            given.push((c.span(), "command"));
        }
        if given.len() != 1 {
            let span = given.get(1).map_or(name.span(), |g| g.0.clone());
            self.push(doc.err(&span, key, "give exactly one of env, file or command"));
            return None;
        }
        if let Some(e) = &s.env {
            let v = e.get_ref();
            if v.is_empty() || v.contains('=') || v.contains('\0') {
                self.push(doc.err(&e.span(), format!("{key}.env"), "is not a variable name"));
                return None;
            }
            return Some(SecretSource::Env(v.clone()));
        }
        if let Some(f) = &s.file {
            if let Err(why) = paths::expand(f.get_ref(), Path::new("/home"), Path::new("/cwd")) {
                self.push(doc.err(&f.span(), format!("{key}.file"), why));
                return None;
            }
            return Some(SecretSource::File(f.get_ref().clone()));
        }
        let c = s.command.as_ref().expect("one was given");
        if c.get_ref().is_empty() {
            self.push(doc.err(
                &c.span(),
                format!("{key}.command"),
                "is empty: give the command's argv",
            ));
            return None;
        }
        Some(SecretSource::Command(
            c.get_ref().iter().map(|a| a.get_ref().clone()).collect(),
        ))
    }
}

/// `[a-z0-9][a-z0-9_-]{0,63}`
pub fn valid_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_' || *c == b'-')
}

fn valid_header_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c))
}

/// A duration as zones.toml writes it: `"none"`, or hours, minutes and seconds in that
/// order, each at most once: `"10m"`, `"90s"`, `"1h30m"`. Some(seconds), None for "none".
pub fn parse_duration(s: &str) -> Result<Option<u64>, String> {
    parse_duration_as(
        s,
        "write a duration like \"30s\", \"10m\", \"1h30m\", or \"none\" to wait as long as the plugin takes",
    )
}

/// Seconds as zones.toml writes a duration (what [`parse_duration`] reads); kept in
/// common, where the broker's messages use it too.
pub use wardcell_common::text::show_duration;

/// [`parse_duration`], with `hint` in its errors (what to write instead).
fn parse_duration_as(s: &str, hint: &str) -> Result<Option<u64>, String> {
    if s == "none" {
        return Ok(None);
    }
    let mut total: u64 = 0;
    let mut num: Option<u64> = None;
    let mut last_unit = 0usize;
    for c in s.chars() {
        if let Some(d) = c.to_digit(10) {
            num = Some(
                num.unwrap_or(0)
                    .checked_mul(10)
                    .and_then(|n| n.checked_add(u64::from(d)))
                    .ok_or_else(|| format!("{s:?} is too long a duration"))?,
            );
            continue;
        }
        let (rank, mult) = match c {
            'h' => (1, 3600),
            'm' => (2, 60),
            's' => (3, 1),
            _ => return Err(format!("{s:?} is not a duration: {hint}")),
        };
        let n = num
            .take()
            .ok_or_else(|| format!("{s:?} is not a duration: {hint}"))?;
        if rank <= last_unit {
            return Err(format!("{s:?} is not a duration: {hint}"));
        }
        last_unit = rank;
        total = n
            .checked_mul(mult)
            .and_then(|x| total.checked_add(x))
            .ok_or_else(|| format!("{s:?} is too long a duration"))?;
    }
    if num.is_some() || last_unit == 0 {
        return Err(format!("{s:?} is not a duration: {hint}"));
    }
    if total == 0 {
        return Err(format!("{s:?} is zero; {hint}"));
    }
    Ok(Some(total))
}

/// A host as an allow-list or credential writes it: a DNS name, `*.` and a DNS name
/// (subdomains only), an IPv4 address, or an IPv6 address in brackets.
fn check_host(host: &str) -> Result<(), String> {
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return inner
            .parse::<std::net::Ipv6Addr>()
            .map(|_| ())
            .map_err(|_| format!("{host:?} is not an IPv6 address"));
    }
    let name = host.strip_prefix("*.").unwrap_or(host);
    let ok = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || c == b'-')
        });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{host:?} is not a host name: write a name like \"crates.io\", or \"*.crates.io\" for its subdomains"
        ))
    }
}

/// A credential's host: exact (no `*.`), with an optional port: `git.example.com`,
/// `git.example.com:8443`, `10.0.0.1:8443`, `[::1]:8443`.
fn check_credential_host(entry: &str) -> Result<(), String> {
    const HINT: &str =
        "write host or host:port, like \"git.example.com\" (port 443) or \"git.example.com:8443\"";
    let (host, port) = match entry.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((_, "")) => (entry, None),
            Some((_, after)) => (
                &entry[..entry.len() - after.len()],
                Some(after.strip_prefix(':').unwrap_or(after)),
            ),
            None => return Err(format!("{entry:?} has an unclosed `[`; {HINT}")),
        },
        None => match entry.rsplit_once(':') {
            Some((h, _)) if h.contains(':') => {
                return Err(format!(
                    "{entry:?}: write an IPv6 address in brackets, like \"[::1]:8443\""
                ))
            }
            Some((h, p)) => (h, Some(p)),
            None => (entry, None),
        },
    };
    if let Some(port) = port {
        let ok = !port.is_empty()
            && port.bytes().all(|c| c.is_ascii_digit())
            && matches!(port.parse::<u32>(), Ok(1..=65535));
        if !ok {
            return Err(format!(
                "{entry:?}: the port must be a number from 1 to 65535; {HINT}"
            ));
        }
    }
    if host.starts_with("*.") {
        return Err(format!(
            "{entry:?}: a credential names exact hosts, not \"*.\" patterns: list each host"
        ));
    }
    check_host(host).map_err(|why| format!("{why}; {HINT}"))
}

/// An HTTP method a credential may be attached for: a token in capitals, never one that
/// echoes the request back or opens a tunnel.
fn check_method(m: &str) -> Result<(), String> {
    if wardcell_support::sandbox_env::NEVER_METHODS.contains(&m) {
        return Err(format!(
            "{m} is never attached a credential (TRACE and TRACK echo the request back, CONNECT opens a tunnel): remove it"
        ));
    }
    let ok = !m.is_empty()
        && m.len() <= 32
        && m.bytes()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == b'-' || c == b'_');
    if !ok {
        return Err(format!(
            "{m:?} is not an HTTP method: write it in capitals, like \"GET\""
        ));
    }
    Ok(())
}

/// A placeholder's variable: a shell-style name, not one of wardcell's own.
fn check_placeholder(v: &str) -> Result<(), String> {
    let b = v.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 128
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_');
    if !ok {
        return Err(format!(
            "{v:?} is not a variable name: letters, digits and `_`, not starting with a digit"
        ));
    }
    // What every sandbox with network gets from wardcell (wardcell/src/prepare.rs).
    use wardcell_support::sandbox_env::{CA_VARS, NO_PROXY_VARS, PROXY_VARS};
    let set_by_wardcell = [PROXY_VARS, NO_PROXY_VARS, CA_VARS].concat();
    if v.starts_with("WARDCELL_") || set_by_wardcell.contains(&v) {
        return Err(format!(
            "{v:?} is one of the variables wardcell sets itself"
        ));
    }
    Ok(())
}

/// `host:port`, port 1-65535: a `network.allow` entry (and `run --allow`).
pub fn check_host_port(entry: &str) -> Result<(), String> {
    const HINT: &str = "write host:port, like \"crates.io:443\" or \"*.crates.io:443\"";
    let Some((host, port)) = entry.rsplit_once(':') else {
        return Err(format!("{entry:?} has no port: {HINT}"));
    };
    let port_ok = !port.is_empty()
        && port.bytes().all(|c| c.is_ascii_digit())
        && matches!(port.parse::<u32>(), Ok(1..=65535));
    if !port_ok {
        return Err(format!(
            "{entry:?}: the port must be a number from 1 to 65535; {HINT}"
        ));
    }
    check_host(host).map_err(|why| format!("{why}; {HINT}"))
}

// Every key above is in wardcell-zones.toml(5): a test walks these serde types.
#[cfg(test)]
#[path = "config_keys.rs"]
mod keys;

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "/cfg/zones.toml";

    fn err(text: &str) -> ConfigError {
        match parse(text, FILE) {
            Ok(_) => panic!("expected an error for:\n{text}"),
            Err(e) => e,
        }
    }

    /// The error is at `line:col`, about `key`, and its message contains `needle`.
    fn assert_err(text: &str, line: usize, col: usize, key: &str, needle: &str) {
        let e = err(text);
        let shown = e.to_string();
        assert_eq!(e.position(), Some((line, col)), "{shown}");
        assert_eq!(e.key(), key, "{shown}");
        assert!(shown.contains(needle), "{shown:?} lacks {needle:?}");
        assert!(
            shown.starts_with(&format!("{FILE}:{line}:{col}: ")),
            "{shown}"
        );
        assert!(!shown.contains('\n'), "{shown:?}");
    }

    const AGENT: &str = "[zones.agent]\nprofile = \"developer-readonly\"\ndefault = true\n";

    #[test]
    fn builtin_default_is_one_zone_agent() {
        let c = Config::builtin();
        assert_eq!(c.source, "built-in default");
        assert_eq!(c.zones.len(), 1);
        let z = &c.zones[0];
        assert_eq!(
            (z.name.as_str(), z.profile.as_str(), z.default),
            ("agent", "developer-readonly", true)
        );
        assert_eq!(z.description, None);
        assert_eq!(c.default_zone().name, "agent");
        assert_eq!(
            c.profiles.keys().collect::<Vec<_>>(),
            ["base", "developer-readonly", "readonly"]
        );
        assert!(c.profiles.values().all(|p| p.builtin));
    }

    // Issue 23, item 1: limits merge field by field through `extends`; "none" lifts one;
    // best_effort marks the limits of the table that says it; bad values are placed.
    #[test]
    fn limits_merge_through_extends_and_are_checked() {
        use crate::sizes::DEFAULT_PROCESSES;
        use wardcell_common::limits::{Bound, Kind};
        let b = |value, best_effort| Some(Bound { value, best_effort });
        let file = format!(
            "{AGENT}[profiles.a]\nextends = \"readonly\"\nlimits = {{ memory = \"2G\", time = \"1h\", best_effort = true }}\n\n[profiles.b]\nextends = \"a\"\nlimits = {{ time = \"90s\", cpu = \"150%\", processes = 64 }}\n\n[profiles.c]\nextends = \"b\"\nlimits = {{ processes = \"none\", memory = \"none\" }}\n"
        );
        let c = parse(&file, "z.toml").unwrap();
        let limits = |name: &str| {
            let mut l = wardcell_common::limits::Limits::default();
            for (k, v) in c.effective_profile(name).unwrap().limits {
                crate::sizes::set(&mut l, k, v);
            }
            l
        };
        // The built-in default, best effort, reaches every profile that extends base.
        assert_eq!(limits("readonly").processes, b(DEFAULT_PROCESSES, true));
        let a = limits("a");
        assert_eq!(
            (a.memory, a.time, a.cpu),
            (b(2 << 30, true), b(3600, true), None)
        );
        let bb = limits("b");
        assert_eq!(bb.processes, b(64, false));
        assert_eq!(bb.time, b(90, false));
        assert_eq!(bb.cpu, b(150, false));
        assert_eq!(bb.memory, b(2 << 30, true));
        let cc = limits("c");
        assert_eq!((cc.processes, cc.memory), (None, None));
        assert_eq!(cc.time, b(90, false));
        assert_eq!(Kind::Time.show(cc.time.unwrap().value), "1m30s");

        let bad = |limits: &str| format!("{AGENT}[profiles.p]\nlimits = {{ {limits} }}\n");
        assert_err(
            &bad("processes = 0"),
            5,
            24,
            "profiles.p.limits.processes",
            "at least 1",
        );
        assert_err(
            &bad("processes = \"many\""),
            5,
            24,
            "profiles.p.limits.processes",
            "not a number of processes",
        );
        assert_err(
            &bad("memory = \"2GB\""),
            5,
            21,
            "profiles.p.limits.memory",
            "not a size",
        );
        assert_err(
            &bad("cpu = \"2\""),
            5,
            18,
            "profiles.p.limits.cpu",
            "not a CPU share",
        );
        assert_err(
            &bad("time = \"0s\""),
            5,
            19,
            "profiles.p.limits.time",
            "is zero",
        );
        assert_err(
            &bad("swap = \"1G\""),
            5,
            12,
            "profiles.p.limits.swap",
            "`best_effort`",
        );
    }

    #[test]
    fn agent_profiles_are_read_only_when_named() {
        // Named on the command line, or by the file (here through `extends`): there,
        // valid and built-in; otherwise not read at all.
        let named = parse_naming(BUILTIN_CONFIG, BUILTIN_LABEL, Some("codex")).unwrap();
        for name in BUILTIN_AGENT_NAMES {
            let p = named.profiles.get(name).unwrap();
            assert!(p.builtin && p.extends == ["developer-readonly"]);
        }
        let file = format!("{AGENT}[profiles.mine]\nextends = \"claude-code\"\n");
        let c = parse(&file, "z.toml").unwrap();
        let mine = c.effective_profile("mine").unwrap();
        assert!(mine
            .write
            .contains(&"~/.local/share/wardcell/claude".to_string()));
        assert!(mine.deny.contains(&"~/.claude.json".to_string()));
        let plain = parse_naming(BUILTIN_CONFIG, BUILTIN_LABEL, Some("agent")).unwrap();
        assert!(BUILTIN_AGENT_NAMES
            .iter()
            .all(|n| !plain.profiles.contains_key(*n)));
        // A file's profile of the same name replaces the built-in one whole.
        let own = format!("{AGENT}[profiles.codex]\nread = [\"/opt\"]\n");
        let c = parse(&own, "z.toml").unwrap();
        assert!(!c.profiles["codex"].builtin && c.profiles["codex"].write.is_empty());
    }

    #[test]
    fn the_spec_example_parses() {
        let c = parse(
            r#"
[zones.agent]
profile    = "developer-readonly"
default    = true

[zones.push]
profile           = "git-push"
description       = "Can push to the company's git remote"
authenticated     = true
enter_from        = ["agent"]
requires_approval = true
approval_timeout  = "1h30m"

[approval]
plugin = ["/usr/libexec/wardcell/wardcell-approve", "--queue"]

[audit]
syslog = true
max_log_kib = 1024

[profiles.git-push]
extends = "developer-readonly"
network = { allow = ["git.example.com:443", "*.example.com:443"] }
credentials = ["company-git"]
env = { deny = ["X_*"], set = { EDITOR = "true" } }

[credentials.company-git]
hosts  = ["git.example.com"]
paths  = ["/company/*"]
scheme = "basic"
username = "x-access-token"
secret = { env = "COMPANY_GIT_TOKEN" }
"#,
            FILE,
        )
        .unwrap();
        assert_eq!(
            c.zones.iter().map(|z| &z.name).collect::<Vec<_>>(),
            ["agent", "push"]
        );
        let push = c.zone("push").unwrap();
        assert_eq!(push.approval_timeout_secs, Some(5400));
        assert!(push.authenticated && push.requires_approval);
        assert_eq!(push.enter_from, ["agent"]);
        assert_eq!(c.approval.as_deref().unwrap()[1], "--queue");
        assert!(c.audit_syslog);
        assert_eq!(c.audit_max_log_kib, 1024);
        let cred = &c.credentials["company-git"];
        assert_eq!(cred.scheme, Scheme::Basic);
        assert_eq!(cred.secret, SecretSource::Env("COMPANY_GIT_TOKEN".into()));
        let p = c.effective_profile("git-push").unwrap();
        assert!(p.read.contains(&"/usr".to_string()) && p.read.contains(&"~".to_string()));
        assert_eq!(p.write, ["."]);
        assert!(p.deny.contains(&"~/.ssh".to_string()));
        assert!(
            p.env_deny.contains(&"*_TOKEN".to_string()) && p.env_deny.contains(&"X_*".to_string())
        );
        assert_eq!(p.env_set, [("EDITOR".to_string(), "true".to_string())]);
        assert_eq!(p.credentials, ["company-git"]);
        assert_eq!(p.network_allow.len(), 2);
    }

    #[test]
    fn extends_appends_dedups_and_overrides_set() {
        let c = parse(
            &format!(
                r#"{AGENT}
[profiles.a]
read = ["/usr", "/a"]
env = {{ deny = ["A_*"], set = {{ K = "a", L = "a" }} }}
network = {{ allow = ["a.com:443"], internal = ["git.corp:443"] }}

[profiles.b]
extends = "a"
read = ["/a", "/b"]
env = {{ deny = ["A_*", "B_*"], set = {{ K = "b" }} }}
network = {{ allow = ["a.com:443", "b.com:443"], internal = ["*.mirror.corp:443", "git.corp:443"] }}
"#
            ),
            FILE,
        )
        .unwrap();
        let b = c.effective_profile("b").unwrap();
        assert_eq!(b.read, ["/usr", "/a", "/b"]);
        assert_eq!(b.env_deny, ["A_*", "B_*"]);
        assert_eq!(
            b.env_set,
            [
                ("K".to_string(), "b".to_string()),
                ("L".to_string(), "a".to_string())
            ]
        );
        assert_eq!(b.network_allow, ["a.com:443", "b.com:443"]);
        assert_eq!(b.network_internal, ["git.corp:443", "*.mirror.corp:443"]);
        assert_eq!(b.extends, ["a"]);
    }

    // `extends` as a list: each parent with its own `extends` applied, in the list's
    // order, then the profile's own; a profile both parents reach counts once; a later
    // `env.set` and limit win.
    #[test]
    fn extends_lists_merge_in_order() {
        let c = parse(
            &format!(
                r#"{AGENT}
[profiles.a]
extends = "readonly"
read = ["/a"]
env = {{ set = {{ K = "a", A = "1" }} }}
limits = {{ memory = "1G", time = "1h" }}

[profiles.b]
extends = ["readonly"]
read = ["/b", "/a"]
env = {{ set = {{ K = "b" }} }}
limits = {{ memory = "2G" }}

[profiles.ab]
extends = ["a", "b"]
read = ["/own"]
"#
            ),
            FILE,
        )
        .unwrap();
        let ab = c.effective_profile("ab").unwrap();
        assert_eq!(ab.extends, ["a", "b"]);
        let ro = c.effective_profile("readonly").unwrap();
        let mut want = ro.read.clone();
        want.extend(["/a", "/b", "/own"].map(String::from));
        assert_eq!(ab.read, want);
        assert_eq!(ab.deny, ro.deny);
        assert_eq!(
            ab.env_set,
            [
                ("A".to_string(), "1".to_string()),
                ("K".to_string(), "b".to_string())
            ]
        );
        use wardcell_common::limits::Kind;
        let limit = |k| {
            let found = ab.limits.iter().find(|(kind, _)| *kind == k);
            found.and_then(|(_, b)| b.map(|b| b.value))
        };
        assert_eq!(limit(Kind::Memory), Some(2 << 30));
        assert_eq!(limit(Kind::Time), Some(3600));
        // The built-in agent profiles, read because the list names one.
        let both =
            format!("{AGENT}[profiles.mine]\nextends = [\"claude-code\", \"package-managers\"]\n");
        let c = parse(&both, FILE).unwrap();
        let mine = c.effective_profile("mine").unwrap();
        for host in ["api.anthropic.com:443", "registry.npmjs.org:443"] {
            assert!(mine.network_allow.contains(&host.to_string()), "{host}");
        }
        assert!(mine.env_set.iter().any(|(k, _)| k == "CLAUDE_CONFIG_DIR"));
        assert!(mine.env_set.iter().any(|(k, _)| k == "CARGO_HOME"));
    }

    #[test]
    fn a_file_profile_replaces_the_builtin() {
        let c = parse(
            "[zones.agent]\nprofile = \"developer-readonly\"\ndefault = true\n\
             [profiles.base]\nread = [\"/nix\"]\n",
            FILE,
        )
        .unwrap();
        assert!(!c.profiles["base"].builtin);
        let p = c.effective_profile("developer-readonly").unwrap();
        assert_eq!(p.read, ["/nix", "~", ".", "./.git/hooks", "./.git/config"]);
        assert!(
            p.env_deny.is_empty(),
            "the built-in base's env rules went with it"
        );
    }

    #[test]
    fn unknown_keys_are_placed_at_the_key() {
        assert_err(
            &format!("{AGENT}colour = \"red\"\n"),
            4,
            1,
            "zones.agent.colour",
            "unknown key; the keys allowed here are `profile`",
        );
        assert_err(
            &format!("{AGENT}[colours]\n"),
            4,
            2,
            "colours",
            "unknown key",
        );
        assert_err(
            &format!("{AGENT}[profiles.p]\nenv = {{ deny = [], allow = [] }}\n"),
            5,
            20,
            "profiles.p.env.allow",
            "unknown key",
        );
        assert_err(
            &format!("{AGENT}[credentials.c]\nhosts = [\"a\"]\nscheme = \"bearer\"\nsecret = {{ vault = \"x\" }}\n"),
            7,
            12,
            "credentials.c.secret.vault",
            "unknown key",
        );
    }

    #[test]
    fn wrong_types_are_placed_at_the_value() {
        assert_err(
            "[zones.agent]\nprofile = \"readonly\"\ndefault = \"yes\"\n",
            3,
            11,
            "zones.agent.default",
            "invalid type: string \"yes\", expected a boolean",
        );
        assert_err(
            &format!("{AGENT}[profiles.p]\nenv = \"x\"\n"),
            5,
            7,
            "profiles.p.env",
            "expected a table",
        );
        assert_err(
            "[zones.agent]\nprofile = \"readonly\"\ndefault = true\nenter_from = [\"agent\", 3]\n",
            4,
            24,
            "zones.agent.enter_from",
            "expected a string",
        );
        assert_err(
            "[zones.agent]\nprofile = \"readonly\"\ndefault = true\n[zones.agent.enter_from]\n",
            4,
            1,
            "zones.agent.enter_from",
            "invalid type",
        );
    }

    #[test]
    fn syntax_errors_have_a_place_and_one_line() {
        let e = err("[zones.agent\nprofile = 1\n");
        let s = e.to_string();
        assert!(s.starts_with(&format!("{FILE}:1:")), "{s}");
        assert!(!s.contains('\n'), "{s}");
    }

    #[test]
    fn zone_profile_must_exist() {
        assert_err(
            "[zones.agent]\nprofile = \"nope\"\ndefault = true\n",
            2,
            11,
            "zones.agent.profile",
            "there is no profile 'nope'",
        );
        assert_err(
            "[zones.agent]\ndefault = true\n",
            1,
            8,
            "zones.agent",
            "missing key `profile`",
        );
    }

    #[test]
    fn exactly_one_default() {
        assert_err(
            "[zones.a]\nprofile = \"readonly\"\n[zones.b]\nprofile = \"readonly\"\n",
            1,
            8,
            "zones",
            "no zone sets default = true",
        );
        assert_err(
            "[zones.a]\nprofile = \"readonly\"\ndefault = true\n[zones.b]\nprofile = \"readonly\"\ndefault = true\n",
            6,
            11,
            "zones.b.default",
            "zones 'a' and 'b' both set default = true",
        );
        assert_err(
            "[profiles.p]\n",
            1,
            1,
            "zones",
            "no zone sets default = true",
        );
        // default = false is not a default.
        assert_err(
            "[zones.a]\nprofile = \"readonly\"\ndefault = false\n",
            1,
            8,
            "zones",
            "no zone sets default",
        );
    }

    #[test]
    fn enter_from_names_zones() {
        assert_err(
            &format!(
                "{AGENT}[zones.push]\nprofile = \"readonly\"\nenter_from = [\"agent\", \"gent\"]\n"
            ),
            6,
            24,
            "zones.push.enter_from",
            "there is no zone 'gent'",
        );
        let c = parse(
            &format!(
                "{AGENT}[zones.push]\nprofile = \"readonly\"\nenter_from = [\"*\", \"push\"]\n"
            ),
            FILE,
        )
        .unwrap();
        assert_eq!(c.zone("push").unwrap().enter_from, ["*", "push"]);
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10m"), Ok(Some(600)));
        assert_eq!(parse_duration("30s"), Ok(Some(30)));
        assert_eq!(parse_duration("1h"), Ok(Some(3600)));
        assert_eq!(parse_duration("90s"), Ok(Some(90)));
        assert_eq!(parse_duration("1h30m"), Ok(Some(5400)));
        assert_eq!(parse_duration("1h0m5s"), Ok(Some(3605)));
        assert_eq!(parse_duration("none"), Ok(None));
        for bad in [
            "",
            "10",
            "m",
            "10x",
            "1m1h",
            "1m1m",
            "0s",
            "-1s",
            "1.5h",
            " 1m",
            "99999999999999999999s",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
        assert_err(
            &format!("{AGENT}[zones.push]\nprofile = \"readonly\"\nrequires_approval = true\napproval_timeout = \"10 minutes\"\n"),
            7,
            20,
            "zones.push.approval_timeout",
            "is not a duration",
        );
        assert_err(
            &format!("{AGENT}[zones.push]\nprofile = \"readonly\"\napproval_timeout = \"10m\"\n"),
            6,
            20,
            "zones.push.approval_timeout",
            "requires_approval",
        );
        let c = parse(
            &format!("{AGENT}[zones.push]\nprofile = \"readonly\"\nrequires_approval = true\napproval_timeout = \"none\"\n"),
            FILE,
        )
        .unwrap();
        assert_eq!(c.zone("push").unwrap().approval_timeout_secs, None);
    }

    #[test]
    fn network_entries() {
        for good in [
            "crates.io:443",
            "*.crates.io:443",
            "127.0.0.1:8080",
            "[::1]:443",
            "a-b.c:1",
            "x:65535",
        ] {
            assert!(check_host_port(good).is_ok(), "{good}");
        }
        for bad in [
            "crates.io",
            "crates.io:",
            "crates.io:0",
            "crates.io:65536",
            "crates.io:+1",
            ":443",
            "*:443",
            "a.*.b:443",
            "http://x:443",
            "a..b:443",
            "-a.b:443",
            "[zz]:443",
            "a b:1",
        ] {
            assert!(check_host_port(bad).is_err(), "{bad}");
        }
        assert_err(
            &format!(
                "{AGENT}[profiles.p]\nnetwork = {{ allow = [\"ok.com:443\", \"crates.io\"] }}\n"
            ),
            5,
            36,
            "profiles.p.network.allow",
            "has no port",
        );
        assert_err(
            &format!("{AGENT}[profiles.p]\nnetwork = {{ internal = [\"git.corp\"] }}\n"),
            5,
            25,
            "profiles.p.network.internal",
            "has no port",
        );
    }

    #[test]
    fn env_rules() {
        assert_err(
            &format!("{AGENT}[profiles.p]\nenv = {{ deny = [\"A\", \"\"] }}\n"),
            5,
            22,
            "profiles.p.env.deny",
            "empty pattern",
        );
        assert_err(
            &format!("{AGENT}[profiles.p]\nenv.set.WARDCELL_ZONE = \"x\"\n"),
            5,
            9,
            "profiles.p.env.set.WARDCELL_ZONE",
            "set by wardcell",
        );
    }

    #[test]
    fn extends_must_exist_and_not_cycle() {
        assert_err(
            &format!("{AGENT}[profiles.p]\nextends = \"nope\"\n"),
            5,
            11,
            "profiles.p.extends",
            "there is no profile 'nope' to extend",
        );
        assert_err(
            &format!("{AGENT}[profiles.a]\nextends = \"b\"\n[profiles.b]\nextends = \"a\"\n"),
            5,
            11,
            "profiles.a.extends",
            "extends forms a cycle (a -> b -> a)",
        );
        assert_err(
            &format!("{AGENT}[profiles.s]\nextends = \"s\"\n"),
            5,
            11,
            "profiles.s.extends",
            "cycle (s -> s)",
        );
        // In a list: the missing name at its own place, a cycle through the second.
        assert_err(
            &format!("{AGENT}[profiles.p]\nextends = [\"base\", \"nope\"]\n"),
            5,
            20,
            "profiles.p.extends",
            "there is no profile 'nope' to extend",
        );
        assert_err(
            &format!("{AGENT}[profiles.a]\nextends = [\"base\", \"b\"]\n[profiles.b]\nextends = [\"a\"]\n"),
            5,
            11,
            "profiles.a.extends",
            "extends forms a cycle (a -> b -> a)",
        );
        assert_err(
            &format!("{AGENT}[profiles.p]\nextends = 3\n"),
            5,
            11,
            "profiles.p.extends",
            "a profile's name, or a list of profiles' names",
        );
        // Too deep, though every profile is reached many ways (walked once each).
        let mut deep = AGENT.to_string();
        for i in 0..17 {
            let parents = if i == 0 {
                "[]".to_string()
            } else {
                format!("[\"p{}\", \"q{}\"]", i - 1, i - 1)
            };
            deep.push_str(&format!(
                "[profiles.p{i}]\nextends = {parents}\n[profiles.q{i}]\nextends = {parents}\n"
            ));
        }
        assert!(err(&deep)
            .to_string()
            .contains("extends is more than 16 profiles deep"));
        // Through a built-in: base replaced by one extending developer-readonly.
        assert_err(
            &format!("{AGENT}[profiles.base]\nextends = \"developer-readonly\"\n"),
            5,
            11,
            "profiles.base.extends",
            "cycle (base -> developer-readonly -> readonly -> base)",
        );
    }

    #[test]
    fn credential_references_and_shape() {
        assert_err(
            &format!("{AGENT}[profiles.p]\ncredentials = [\"nope\"]\n"),
            5,
            16,
            "profiles.p.credentials",
            "there is no credential 'nope'",
        );
        // A profile naming a credential whose table has an error of its own: that error
        // is the one said, not "there is no credential".
        assert_err(
            &format!("{AGENT}[profiles.p]\ncredentials = [\"c\"]\n[credentials.c]\nhosts = [\"git.example.com\"]\nsecret = {{ env = \"T\" }}\n"),
            6,
            14,
            "credentials.c",
            "missing key `scheme`",
        );
        let base = "[credentials.c]\nhosts = [\"git.example.com\"]\n";
        assert_err(
            &format!("{AGENT}{base}scheme = \"digest\"\nsecret = {{ env = \"T\" }}\n"),
            6,
            10,
            "credentials.c.scheme",
            "unknown scheme",
        );
        assert_err(
            &format!("{AGENT}{base}scheme = \"basic\"\nsecret = {{ env = \"T\" }}\n"),
            4,
            14,
            "credentials.c",
            "missing key `username`",
        );
        assert_err(
            &format!(
                "{AGENT}{base}scheme = \"bearer\"\nsecret = {{ env = \"T\", file = \"/x\" }}\n"
            ),
            7,
            30,
            "credentials.c.secret",
            "exactly one of env, file or command",
        );
        assert_err(
            &format!("{AGENT}{base}scheme = \"bearer\"\nsecret = {{ command = [] }}\n"),
            7,
            22,
            "credentials.c.secret.command",
            "is empty",
        );
        assert_err(
            &format!("{AGENT}{base}scheme = \"header\"\nsecret = {{ file = \"~/t\" }}\n"),
            4,
            14,
            "credentials.c",
            "missing key `header`",
        );
        let c = parse(
            &format!("{AGENT}{base}scheme = \"header\"\nheader = \"X-Token\"\nsecret = {{ command = [\"pass\", \"git\"] }}\n"),
            FILE,
        )
        .unwrap();
        assert_eq!(
            c.credentials["c"].secret,
            SecretSource::Command(vec!["pass".into(), "git".into()])
        );
    }

    #[test]
    fn credential_hosts_ports_methods_and_placeholders() {
        let tail = "scheme = \"bearer\"\nsecret = { env = \"T\" }\n";
        let ok = |lines: &str| {
            parse(&format!("{AGENT}[credentials.c]\n{lines}{tail}"), FILE)
                .unwrap_or_else(|e| panic!("{lines}: {e}"))
                .credentials["c"]
                .clone()
        };
        let c = ok("hosts = [\"a.example\", \"a.example:8443\", \"10.0.0.1:80\", \"[::1]\", \"[::1]:8443\"]\n");
        assert_eq!(c.hosts.len(), 5);
        assert!(c.methods.is_empty() && c.placeholder.is_none());
        let c = ok("hosts = [\"a.example\"]\nmethods = [\"GET\", \"OPTIONS\", \"GET\"]\nplaceholder = \"ANTHROPIC_API_KEY\"\n");
        assert_eq!(c.methods, ["GET", "OPTIONS"]);
        assert_eq!(c.placeholder.as_deref(), Some("ANTHROPIC_API_KEY"));
        for (line, key, needle) in [
            (
                "hosts = [\"a.example:0\"]",
                "hosts",
                "port must be a number",
            ),
            ("hosts = [\"a.example:\"]", "hosts", "port must be a number"),
            (
                "hosts = [\"a.example:99999\"]",
                "hosts",
                "port must be a number",
            ),
            ("hosts = [\"*.example.com\"]", "hosts", "exact hosts"),
            ("hosts = [\"::1:443\"]", "hosts", "in brackets"),
            ("hosts = [\"[::1\"]", "hosts", "unclosed"),
            ("hosts = [\"[::1]x\"]", "hosts", "port must be a number"),
            ("hosts = [\"a b:443\"]", "hosts", "not a host name"),
            (
                "hosts = [\"a\"]\nmethods = [\"TRACE\"]",
                "methods",
                "TRACE is never",
            ),
            (
                "hosts = [\"a\"]\nmethods = [\"GET\", \"TRACK\"]",
                "methods",
                "TRACK is never",
            ),
            (
                "hosts = [\"a\"]\nmethods = [\"CONNECT\"]",
                "methods",
                "CONNECT is never",
            ),
            (
                "hosts = [\"a\"]\nmethods = [\"get\"]",
                "methods",
                "not an HTTP method",
            ),
            ("hosts = [\"a\"]\nmethods = []", "methods", "is empty"),
            (
                "hosts = [\"a\"]\nplaceholder = \"1KEY\"",
                "placeholder",
                "not a variable name",
            ),
            (
                "hosts = [\"a\"]\nplaceholder = \"A=B\"",
                "placeholder",
                "not a variable name",
            ),
            (
                "hosts = [\"a\"]\nplaceholder = \"WARDCELL_KEY\"",
                "placeholder",
                "wardcell sets",
            ),
            (
                "hosts = [\"a\"]\nplaceholder = \"HTTPS_PROXY\"",
                "placeholder",
                "wardcell sets",
            ),
            // Every CA variable a sandbox's bundle is named by, not only the first few.
            (
                "hosts = [\"a\"]\nplaceholder = \"PIP_CERT\"",
                "placeholder",
                "wardcell sets",
            ),
            (
                "hosts = [\"a\"]\nplaceholder = \"npm_config_cafile\"",
                "placeholder",
                "wardcell sets",
            ),
        ] {
            let e = err(&format!("{AGENT}[credentials.c]\n{line}\n{tail}"));
            let shown = e.to_string();
            assert_eq!(e.key(), format!("credentials.c.{key}"), "{line}: {shown}");
            assert!(shown.contains(needle), "{line}: {shown}");
            assert!(!shown.contains('\n'), "{shown:?}");
        }
    }

    #[test]
    fn descriptions_are_one_line() {
        assert_err(
            &format!("{AGENT}description = \"a\\nb\"\n"),
            4,
            15,
            "zones.agent.description",
            "one line",
        );
    }

    #[test]
    fn names_are_checked() {
        assert_err(
            "[zones.Agent]\nprofile = \"readonly\"\ndefault = true\n",
            1,
            8,
            "zones.Agent",
            "names are 1 to 64 characters",
        );
        assert_err(
            &format!("{AGENT}[profiles._p]\n"),
            4,
            11,
            "profiles._p",
            "names are",
        );
        assert!(valid_name("a"));
        assert!(valid_name("0-a_b"));
        assert!(valid_name(&"a".repeat(64)));
        assert!(!valid_name(&"a".repeat(65)));
        assert!(!valid_name("-a"));
        assert!(!valid_name(""));
    }

    #[test]
    fn paths_are_checked_for_syntax() {
        assert_err(
            &format!("{AGENT}[profiles.p]\nread = [\"/ok\", \"relative\"]\n"),
            5,
            16,
            "profiles.p.read",
            "must be absolute",
        );
        assert_err(
            &format!("{AGENT}[profiles.p]\nwrite = [\"/a/../b\"]\n"),
            5,
            10,
            "profiles.p.write",
            "must not contain",
        );
    }

    #[test]
    fn approval_plugin() {
        assert_err(
            &format!("{AGENT}[approval]\nplugin = [\"approve\"]\n"),
            5,
            11,
            "approval.plugin",
            "not an absolute path",
        );
        assert_err(
            &format!("{AGENT}[approval]\nplugin = []\n"),
            5,
            10,
            "approval.plugin",
            "is empty",
        );
        assert_err(
            &format!("{AGENT}[audit]\nmax_log_kib = 64\n"),
            5,
            15,
            "audit.max_log_kib",
            "at least 128 KiB",
        );
        assert_err(
            &format!("{AGENT}[audit]\nsyslog = 1\n"),
            5,
            10,
            "audit.syslog",
            "expected a boolean",
        );
    }

    #[test]
    fn the_first_error_in_the_file_is_reported() {
        assert_err(
            "[zones.b]\nprofile = \"nope\"\ndefault = true\n[zones.a]\nprofile = \"readonly\"\nenter_from = [\"x\"]\n",
            2,
            11,
            "zones.b.profile",
            "no profile",
        );
    }

    #[test]
    fn columns_count_characters() {
        assert_eq!(line_col("é = 1\nab", 7), (2, 1));
        assert_eq!(line_col("é = 1\nab", 8), (2, 2));
        assert_eq!(line_col("éx", 2), (1, 2));
    }

    #[test]
    fn a_file_of_comments_is_no_configuration() {
        for text in ["", "\n", "# only\n\n  # comments\r\n\t#[zones.a]\n", "#"] {
            assert!(holds_no_setting(text.as_bytes()), "{text:?}");
        }
        for text in ["[zones]\n", "# c\nx = 1", "\u{feff}# bom"] {
            assert!(!holds_no_setting(text.as_bytes()), "{text:?}");
        }
        assert!(!holds_no_setting(b"# \xff not UTF-8"));

        let dir = std::env::temp_dir().join(format!("wardcell-blank-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let user = dir.join("user.toml");
        let system = dir.join("system.toml");
        let places = [user.clone(), system.clone()];
        // The system's example, all comments: the built-in default stays in force.
        std::fs::write(&system, "# [zones.agent]\n# profile = \"readonly\"\n").unwrap();
        assert_eq!(locate_in(None, &places), Source::BuiltIn);
        // A user's file of comments is passed over too, down to a real system file.
        std::fs::write(&user, "\n# nothing yet\n").unwrap();
        std::fs::write(&system, AGENT).unwrap();
        assert_eq!(locate_in(None, &places), Source::File(system.clone()));
        // `--config` naming such a file: the built-in default, saying so.
        let c = load(&Source::File(user.clone())).unwrap();
        assert_eq!(c.zones, Config::builtin().zones);
        assert_eq!(
            c.source,
            format!("built-in default ({} holds no setting)", user.display())
        );
        // One setting makes it a configuration, and checked as one.
        std::fs::write(&user, "# a comment\n[zones]\n").unwrap();
        assert_eq!(locate_in(None, &places), Source::File(user.clone()));
        assert!(load(&Source::File(user.clone())).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn lookup_order() {
        let dir = std::env::temp_dir().join(format!("wardcell-locate-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let user = dir.join("user.toml");
        let system = dir.join("system.toml");
        let places = [user.clone(), system.clone()];
        assert_eq!(locate_in(None, &places), Source::BuiltIn);
        std::fs::write(&system, AGENT).unwrap();
        assert_eq!(locate_in(None, &places), Source::File(system.clone()));
        std::fs::write(&user, AGENT).unwrap();
        assert_eq!(locate_in(None, &places), Source::File(user.clone()));
        let explicit = dir.join("missing.toml");
        assert_eq!(
            locate_in(Some(&explicit), &places),
            Source::File(explicit.clone())
        );
        match load(&Source::File(explicit.clone())) {
            Err(ConfigError::Read { file, reason }) => {
                assert_eq!(file, explicit.display().to_string());
                assert_eq!(reason, "no such file");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            load(&Source::File(user.clone())).unwrap().source,
            user.display().to_string()
        );
        assert_eq!(load(&Source::BuiltIn).unwrap(), Config::builtin());

        let env = |k: &str| (k == "XDG_CONFIG_HOME").then(|| "/xdg".to_string());
        assert_eq!(
            user_file(&env, Path::new("/h")),
            PathBuf::from("/xdg/wardcell/zones.toml")
        );
        assert_eq!(
            user_file(&|_| None, Path::new("/h")),
            PathBuf::from("/h/.config/wardcell/zones.toml")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
