//! The built-in agent profiles' homes: what `run` puts there, on the host, before any
//! sandbox starts.
//!
//! Each agent keeps its state in a directory of wardcell's own (`CLAUDE_CONFIG_DIR`,
//! `CODEX_HOME`), writable by its sandboxes; the host's directory of the agent is masked.
//! The user's own instructions and settings still count inside:
//!
//! - a copy of each, taken now, is kept in `~/.local/share/wardcell/from-host/AGENT`,
//!   read-only inside (it lies in the home, a read-only tree), without what holds
//!   secrets or turns on a sandbox of the agent's own (`settings.json`'s `env`,
//!   `apiKeyHelper`, `sandbox`...; `config.toml`'s MCP servers' `env` and headers);
//! - the agent's home links to each copy, where the agent looks (made when missing; one
//!   the sandbox replaced with a file of its own is left alone);
//! - Codex's `config.toml`, which Codex itself writes, is the user's filtered with
//!   `sandbox_mode = "danger-full-access"` (wardcell is the sandbox), usage reports and
//!   the plugin catalog off unless the user's file turns them on (the profile allows
//!   neither host), made again only when the user's file changed.
//!
//! Links are never followed, on either side: a link in `~/.claude` is not copied (a
//! sandbox that could write there could point it at a secret), and what a sandbox put
//! in the agent's home is replaced by rename, never written through.

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use wardcell_config::config::Config;
use wardcell_config::resolve::StartRequest;

/// Where sandboxes keep state of their own (the built-in agent profiles' directories),
/// apart from the state the same programs keep on the host: a `write` path under it
/// that does not exist yet is made (0700) by `run`, instead of being left out.
pub const SANDBOX_STATE: &str = "~/.local/share/wardcell/";

/// Largest file copied (instructions, settings, one command or agent).
const MAX_FILE: u64 = 1 << 20;
/// Most files copied from one directory tree (`agents/`, `commands/`), and how deep.
const MAX_FILES: usize = 1000;
const MAX_DEPTH: usize = 4;

/// The first line of a `config.toml` wardcell made; the hash is the user's file's.
const MADE: &str = "# Made by wardcell from your ~/.codex/config.toml (sha256 ";

/// One agent: its state directory (under `~/.local/share/wardcell`), its directory on
/// the host (under `~`), what is copied, and which keys of a settings file are left out.
struct Agent {
    state: &'static str,
    host: &'static str,
    files: &'static [&'static str],
    dirs: &'static [&'static str],
}

const AGENTS: [Agent; 2] = [
    Agent {
        state: "claude",
        host: ".claude",
        files: &["CLAUDE.md", "settings.json"],
        dirs: &["agents", "commands"],
    },
    Agent {
        state: "codex",
        host: ".codex",
        files: &["AGENTS.md"],
        dirs: &[],
    },
];

/// Claude Code's settings that hold secrets (`env`), run a program that prints one
/// (`apiKeyHelper`, `awsAuthRefresh`, `awsCredentialExport`, `otelHeadersHelper`), or
/// turn on a sandbox of its own, which cannot start inside wardcell's (`sandbox`).
const CLAUDE_SETTINGS_LEFT_OUT: [&str; 6] = [
    "env",
    "apiKeyHelper",
    "awsAuthRefresh",
    "awsCredentialExport",
    "otelHeadersHelper",
    "sandbox",
];

/// Put the user's instructions and settings where the agents of the profiles this run
/// may use look for them. Best effort: what cannot be copied is left out, with a
/// warning; the run goes on.
pub fn prepare(config: &Config, start: &StartRequest, home: &Path) {
    let mut names: Vec<&str> = config.zones.iter().map(|z| z.profile.as_str()).collect();
    if let StartRequest::Profile(p) = start {
        names.push(p);
    }
    let writes: BTreeSet<String> = names
        .iter()
        .filter_map(|n| config.effective_profile(n))
        .flat_map(|p| p.write)
        .collect();
    for agent in &AGENTS {
        let state = format!("{}{}", SANDBOX_STATE, agent.state);
        if writes.contains(&state) {
            match prepare_one(agent, home) {
                Err(e) if e.raw_os_error() == Some(libc::ELOOP) => eprintln!(
                    "warning: your ~/{} instructions and settings were not copied for the sandbox: a symbolic link lies where wardcell keeps them, under ~/.local/share/wardcell (a sandbox that could write there may have made it); remove it",
                    agent.host
                ),
                Err(e) => eprintln!(
                    "warning: your ~/{} instructions and settings were not copied for the sandbox: {e}",
                    agent.host
                ),
                Ok(()) => {}
            }
        }
    }
}

fn prepare_one(agent: &Agent, home: &Path) -> std::io::Result<()> {
    // Every step goes through descriptors of directories opened without following a
    // link: a sandbox that writes ~/.local/share could otherwise plant a link where the
    // copies go and have this process, on the host, delete or fill what it points at.
    let share_path = home.join(".local/share/wardcell");
    let share = Dir::open(&share_path)?;
    let copies = share.sub("from-host", true)?;
    let host = match Dir::open(&home.join(agent.host)) {
        Ok(d) => Some(d),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            eprintln!("warning: ~/{} is a symbolic link, which wardcell does not follow: the agent in the sandbox runs without your instructions and settings", agent.host);
            None
        }
        Err(e) => return Err(e),
    };
    // The copy is made afresh beside the last one, then put in its place.
    let (fresh_name, old_name) = (
        format!("{}.new", agent.state),
        format!("{}.old", agent.state),
    );
    remove_any(&copies, &fresh_name)?;
    let fresh = copies.sub(&fresh_name, true)?;
    let mut have = Vec::new();
    if let Some(host) = &host {
        for name in agent.files {
            let Some(bytes) = read_plain(&host.at(name), agent.host)? else {
                continue;
            };
            let bytes = if *name == "settings.json" {
                match claude_settings(&bytes) {
                    Some(b) => b,
                    None => continue,
                }
            } else {
                bytes
            };
            write_new(&fresh.at(name), &bytes)?;
            have.push(*name);
        }
        for name in agent.dirs {
            let mut left = MAX_FILES;
            if copy_tree(host, name, &fresh, 0, &mut left)? {
                have.push(*name);
            }
        }
    }
    remove_any(&copies, &old_name)?;
    match copies.rename(agent.state, &old_name) {
        Err(e) if e != nix::errno::Errno::ENOENT => return Err(e.into()),
        _ => {}
    }
    copies.rename(&fresh_name, agent.state)?;
    remove_any(&copies, &old_name)?;
    // The agent's home, opened without following a link (run.rs refused one already;
    // this holds if one appeared since).
    let dir = share.sub(agent.state, false)?;
    let target = share_path.join("from-host").join(agent.state);
    for name in agent.files.iter().chain(agent.dirs) {
        let ours = target.join(name);
        if have.contains(name) {
            link_if_missing(&dir, name, &ours)?;
        } else if fs::read_link(dir.at(name)).is_ok_and(|l| l == ours) {
            // Our link to what is no longer copied: gone with it, not left dangling.
            let _ = fs::remove_file(dir.at(name));
        }
    }
    if agent.state == "codex" {
        let user = home.join(agent.host).join("config.toml");
        codex_config(&dir, host.as_ref().map(|_| user.as_path()))?;
    }
    Ok(())
}

/// Whatever is called `name` in `dir`, removed (a link itself, never what it names).
fn remove_any(dir: &Dir, name: &str) -> std::io::Result<()> {
    let path = dir.at(name);
    match fs::symlink_metadata(&path) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(&path),
        Ok(_) => fs::remove_file(&path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// A regular file's content, read without following a link; None if it is not there,
/// is not a regular file, or is larger than [`MAX_FILE`]. A link is said on stderr when
/// `shown` names where it lies (the user's own directory of the agent).
fn read_plain(path: &Path, shown: &str) -> std::io::Result<Option<Vec<u8>>> {
    let f = match fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            if !shown.is_empty() {
                let name = path.file_name().unwrap_or_default().to_string_lossy();
                eprintln!("warning: ~/{shown}/{name} is a symbolic link, which wardcell does not follow (a sandbox could have pointed it at a secret): the agent in the sandbox runs without it; put the file itself there to use it");
            }
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    let meta = f.metadata()?;
    if !meta.is_file() || meta.len() > MAX_FILE {
        return Ok(None);
    }
    let mut out = Vec::with_capacity(meta.len() as usize);
    f.take(MAX_FILE + 1).read_to_end(&mut out)?;
    Ok((out.len() as u64 <= MAX_FILE).then_some(out))
}

fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)
}

/// Copy the directory `name` of `from` into `to`, regular files only (links and
/// anything else left out), at most `left` files in all, each level through its own
/// descriptor. False if it is not a directory (or is a link).
fn copy_tree(
    from: &Dir,
    name: &str,
    to: &Dir,
    depth: usize,
    left: &mut usize,
) -> std::io::Result<bool> {
    let src = match from.sub(name, false) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => {
            return Ok(false)
        }
        Err(e) => return Err(e),
    };
    let dst = to.sub(name, true)?;
    for entry in fs::read_dir(src.at("."))? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let Some(child) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if kind.is_dir() && depth + 1 < MAX_DEPTH {
            copy_tree(&src, &child, &dst, depth + 1, left)?;
        } else if kind.is_file() && *left > 0 {
            if let Some(bytes) = read_plain(&src.at(&child), "")? {
                *left -= 1;
                write_new(&dst.at(&child), &bytes)?;
            }
        }
    }
    Ok(true)
}

/// Claude Code's settings without [`CLAUDE_SETTINGS_LEFT_OUT`]; None if they are not a
/// JSON object (Claude would not read them either).
fn claude_settings(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    let map = v.as_object_mut()?;
    for key in CLAUDE_SETTINGS_LEFT_OUT {
        map.remove(key);
    }
    serde_json::to_vec_pretty(&v).ok()
}

/// A link named `name` in `dir` to `target`, unless something is there already.
fn link_if_missing(dir: &Dir, name: &str, target: &Path) -> std::io::Result<()> {
    match nix::unistd::symlinkat(target, Some(dir.file.as_raw_fd()), name) {
        Ok(()) | Err(nix::errno::Errno::EEXIST) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The agent's home, held open (opened without following a link).
struct Dir {
    file: File,
    path: PathBuf,
}

impl Dir {
    fn open(path: &Path) -> std::io::Result<Dir> {
        let file = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(path)?;
        Ok(Dir {
            file,
            path: path.to_path_buf(),
        })
    }

    /// The directory `name` in it, opened without following a link; made (0700) first
    /// when `create` and missing.
    fn sub(&self, name: &str, create: bool) -> std::io::Result<Dir> {
        if create {
            match fs::DirBuilder::new().mode(0o700).create(self.at(name)) {
                Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
                _ => {}
            }
        }
        let file = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(self.at(name))?;
        Ok(Dir {
            file,
            path: self.path.join(name),
        })
    }

    /// `from` renamed `to`, both in it.
    fn rename(&self, from: &str, to: &str) -> nix::Result<()> {
        let fd = Some(self.file.as_raw_fd());
        nix::fcntl::renameat(fd, from, fd, to)
    }

    /// `name` in it, as a path that reaches it through the descriptor on Linux (whatever
    /// becomes of the directory's own path), and (opened with O_NOFOLLOW) never through
    /// a link named `name`. On macOS by its path: its parent, which no sandbox writes,
    /// keeps it in place.
    fn at(&self, name: &str) -> PathBuf {
        #[cfg(target_os = "linux")]
        return PathBuf::from(format!("/proc/self/fd/{}/{name}", self.file.as_raw_fd()));
        #[cfg(not(target_os = "linux"))]
        return self.path.join(name);
    }
}

/// Codex's `config.toml` in its home: the user's, filtered, with its sandbox off. Made
/// when missing, or when wardcell made the one there from a file that has changed since;
/// one without wardcell's first line (the user's or Codex's own edits) is kept.
fn codex_config(dir: &Dir, user: Option<&Path>) -> std::io::Result<()> {
    let read = match user {
        Some(u) => read_plain(u, ".codex")?,
        None => None,
    };
    let user_text = match read {
        Some(b) => String::from_utf8(b).unwrap_or_default(),
        None => String::new(),
    };
    let hash = wardcell_support::audit::hash_line(&user_text);
    let first = format!("{MADE}{hash})");
    if let Some(there) = read_at(dir, "config.toml")? {
        let line = there.lines().next().unwrap_or_default();
        if !line.starts_with(MADE) || line == first {
            return Ok(());
        }
    }
    let mut table: toml::Table = user_text.parse().unwrap_or_default();
    filter_codex(&mut table);
    table.insert(
        "sandbox_mode".into(),
        toml::Value::String("danger-full-access".into()),
    );
    // Usage reports (ab.chatgpt.com) and the plugin catalog (github.com, chatgpt.com)
    // are off unless the user's file turns them on: the profile allows neither host,
    // and each refusal would be reported at the end of every run.
    default_off(&mut table, "analytics", "enabled");
    default_off(&mut table, "features", "plugins");
    let body = toml::to_string(&table).map_err(std::io::Error::other)?;
    let text = format!(
        "{first}\n# wardcell is the sandbox: Codex's own cannot start inside it. Edit ~/.codex/config.toml\n# (this file is made again when it changes), or remove the first line to keep this one.\n{body}"
    );
    replace_at(dir, "config.toml", text.as_bytes())
}

/// `[table] key = false`, unless the table sets the key.
fn default_off(t: &mut toml::Table, table: &str, key: &str) {
    let entry = t
        .entry(table.to_string())
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    if let toml::Value::Table(inner) = entry {
        inner
            .entry(key.to_string())
            .or_insert(toml::Value::Boolean(false));
    }
}

/// What a Codex configuration keeps out of a sandbox: the MCP servers' and model
/// providers' secrets and headers, and every other way to turn its own sandbox on.
fn filter_codex(t: &mut toml::Table) {
    t.remove("sandbox_mode");
    t.remove("sandbox_workspace_write");
    // Telemetry exporters carry their own headers (tokens); the sandbox reaches none.
    t.remove("otel");
    if let Some(toml::Value::Table(policy)) = t.get_mut("shell_environment_policy") {
        policy.remove("set");
    }
    let strip = |t: &mut toml::Table, table: &str, keys: &[&str]| {
        if let Some(toml::Value::Table(all)) = t.get_mut(table) {
            for (_, one) in all.iter_mut() {
                if let toml::Value::Table(one) = one {
                    for k in keys {
                        one.remove(*k);
                    }
                }
            }
        }
    };
    strip(
        t,
        "mcp_servers",
        &[
            "env",
            "bearer_token",
            "http_headers",
            "bearer_token_env_var",
        ],
    );
    strip(
        t,
        "model_providers",
        &["experimental_bearer_token", "http_headers", "query_params"],
    );
    strip(t, "profiles", &["sandbox_mode", "sandbox_workspace_write"]);
}

/// A regular file in `dir`, read without following a link (None if missing or not one).
fn read_at(dir: &Dir, name: &str) -> std::io::Result<Option<String>> {
    Ok(read_plain(&dir.at(name), "")?.map(|b| String::from_utf8_lossy(&b).into_owned()))
}

/// `name` in `dir` replaced by `bytes`: written to a new file there, renamed over it
/// (a link the sandbox put there is replaced, never followed).
fn replace_at(dir: &Dir, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = format!(".{name}.wardcell-new");
    remove_any(dir, &tmp)?;
    write_new(&dir.at(&tmp), bytes)?;
    dir.rename(&tmp, name)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A home under the system's temporary directory, with the agent's state there.
    fn home(tag: &str) -> PathBuf {
        let home =
            std::env::temp_dir().join(format!("wardcell-agent-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&home);
        fs::create_dir_all(home.join(".local/share/wardcell/claude")).unwrap();
        fs::create_dir_all(home.join(".claude/commands")).unwrap();
        fs::write(home.join(".claude/CLAUDE.md"), "mine").unwrap();
        fs::write(home.join(".claude/commands/x.md"), "x").unwrap();
        home
    }

    // What a sandbox that writes ~/.local/share plants where the copies go is never
    // followed: not `from-host` as a link, not `claude.new` or `claude.old` as links.
    #[test]
    fn planted_links_where_the_copies_go_are_never_followed() {
        let agent = &AGENTS[0];
        let home = home("planted");
        let victim = home.join("src");
        fs::create_dir_all(victim.join("claude")).unwrap();
        fs::write(victim.join("claude/precious.rs"), "keep").unwrap();
        let from_host = home.join(".local/share/wardcell/from-host");
        std::os::unix::fs::symlink(&victim, &from_host).unwrap();
        assert!(prepare_one(agent, &home).is_err());
        assert_eq!(
            fs::read_to_string(victim.join("claude/precious.rs")).unwrap(),
            "keep"
        );
        fs::remove_file(&from_host).unwrap();
        fs::create_dir_all(&from_host).unwrap();
        for planted in ["claude.new", "claude.old"] {
            std::os::unix::fs::symlink(victim.join("claude"), from_host.join(planted)).unwrap();
            prepare_one(agent, &home).unwrap();
            assert_eq!(
                fs::read_to_string(victim.join("claude/precious.rs")).unwrap(),
                "keep"
            );
            assert!(!from_host.join(planted).exists());
        }
        // The copies and the links to them, where the agent looks.
        let own = home.join(".local/share/wardcell/claude");
        assert_eq!(fs::read_to_string(own.join("CLAUDE.md")).unwrap(), "mine");
        assert_eq!(fs::read_to_string(own.join("commands/x.md")).unwrap(), "x");
        // Gone from the host, gone from the copies, and our link with it.
        fs::remove_file(home.join(".claude/CLAUDE.md")).unwrap();
        prepare_one(agent, &home).unwrap();
        assert!(fs::symlink_metadata(own.join("CLAUDE.md")).is_err());
        fs::remove_dir_all(&home).unwrap();
    }

    #[test]
    fn claude_settings_lose_secrets_and_their_sandbox() {
        let user = br#"{"model":"m","env":{"K":"v"},"apiKeyHelper":"x","awsAuthRefresh":"y","sandbox":{"enabled":true},"hooks":{}}"#;
        let out: serde_json::Value =
            serde_json::from_slice(&claude_settings(user).unwrap()).unwrap();
        let keys: Vec<&String> = out.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["hooks", "model"]);
        assert!(claude_settings(b"[1]").is_none());
        assert!(claude_settings(b"not json").is_none());
    }

    #[test]
    fn codex_config_loses_secrets_and_keeps_the_rest() {
        let mut t: toml::Table = r#"
model = "o3"
sandbox_mode = "read-only"
[sandbox_workspace_write]
network_access = true
[mcp_servers.db]
command = "db"
env = { TOKEN = "s" }
http_headers = { A = "b" }
[model_providers.corp]
base_url = "https://corp"
experimental_bearer_token = "s"
query_params = { key = "s" }
[shell_environment_policy]
inherit = "core"
set = { GH = "s" }
[otel.exporter.otlp-http]
headers = { x = "s" }
[profiles.p]
sandbox_mode = "workspace-write"
model = "x"
[analytics]
enabled = true
"#
        .parse()
        .unwrap();
        filter_codex(&mut t);
        default_off(&mut t, "analytics", "enabled");
        default_off(&mut t, "features", "plugins");
        let text = toml::to_string(&t).unwrap();
        for gone in [
            "sandbox_mode",
            "network_access",
            "TOKEN",
            "http_headers",
            "bearer",
            "query_params",
            "GH",
            "otel",
        ] {
            assert!(!text.contains(gone), "{gone}: {text}");
        }
        for kept in [
            "model = \"o3\"",
            "command = \"db\"",
            "https://corp",
            "model = \"x\"",
            "inherit = \"core\"",
        ] {
            assert!(text.contains(kept), "{kept}: {text}");
        }
        // The user's choice stands; what the user did not set is off.
        assert_eq!(t["analytics"]["enabled"].as_bool(), Some(true));
        assert_eq!(t["features"]["plugins"].as_bool(), Some(false));
    }

    #[test]
    fn codex_config_is_made_again_only_from_a_changed_file_and_never_over_ones_own() {
        let dir = std::env::temp_dir().join(format!("wardcell-agent-home-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let user = dir.join("user.toml");
        let open = || Dir::open(&dir).unwrap();
        let made = || fs::read_to_string(dir.join("config.toml")).unwrap();
        fs::write(&user, "model = \"a\"\n").unwrap();
        codex_config(&open(), Some(&user)).unwrap();
        assert!(made().starts_with(MADE) && made().contains("model = \"a\""));
        assert!(made().contains("sandbox_mode = \"danger-full-access\""));
        // Codex's own edit below wardcell's line stays while the user's file is the same.
        fs::write(
            dir.join("config.toml"),
            format!(
                "{}\nmodel = \"codex-edit\"\n",
                made().lines().next().unwrap()
            ),
        )
        .unwrap();
        codex_config(&open(), Some(&user)).unwrap();
        assert!(made().contains("codex-edit"));
        fs::write(&user, "model = \"b\"\n").unwrap();
        codex_config(&open(), Some(&user)).unwrap();
        assert!(made().contains("model = \"b\"") && !made().contains("codex-edit"));
        // Without wardcell's first line the file is the user's: kept.
        fs::write(dir.join("config.toml"), "model = \"mine\"\n").unwrap();
        fs::write(&user, "model = \"c\"\n").unwrap();
        codex_config(&open(), Some(&user)).unwrap();
        assert_eq!(made(), "model = \"mine\"\n");
        // A link there is replaced, never written through.
        fs::remove_file(dir.join("config.toml")).unwrap();
        let victim = dir.join("victim");
        fs::write(&victim, "untouched").unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("config.toml")).unwrap();
        codex_config(&open(), Some(&user)).unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "untouched");
        assert!(made().starts_with(MADE));
        fs::remove_dir_all(&dir).unwrap();
    }
}
