//! `wardcell policy why` and `wardcell zone why`: whether a zone's sandbox may read or
//! write a path, or reach `HOST:PORT`, and which rule decides. Pure: the rules come from
//! the plan (on the host) or from the supervisor (inside, for the zones this run may
//! enter), and the answer is computed the same way in both places. Paths are decided by
//! `wardcell_common::why::decide_path`, which the broker shares.

use std::path::{Component, Path, PathBuf};

use serde::Serialize;

use wardcell_common::plan::{Plan, ProfilePlan};
pub use wardcell_common::why::Rules;
use wardcell_common::why::{decide_path, Verdict};

/// The rules of `profile` (in `zone`) under `plan`; `host_sockets` are the host's
/// socket directories (`/run`, the runtime directory, the ssh-agent's).
pub fn rules_of(
    plan: &Plan,
    profile: &ProfilePlan,
    zone: Option<&str>,
    host_sockets: &[PathBuf],
) -> Rules {
    let mut masked: Vec<(PathBuf, String)> = Vec::new();
    for p in plan
        .dirs
        .config
        .iter()
        .chain([&plan.dirs.state, &plan.dirs.runtime])
    {
        masked.push((
            p.clone(),
            "wardcell's own directory, masked in every sandbox".into(),
        ));
    }
    for p in wardcell_support::view::credential_files(plan) {
        masked.push((
            p,
            "a credential's secret file, masked in every sandbox".into(),
        ));
    }
    for p in host_sockets {
        masked.push((
            p.clone(),
            "where host services keep their sockets, masked unless `unix_sockets` names one".into(),
        ));
    }
    // Only what lies in the profile's own trees is told (the sandbox could see that
    // it is masked anyway); never the paths of other zones' credential files.
    masked.retain(|(m, _)| {
        profile
            .read
            .iter()
            .chain(&profile.write)
            .any(|t| m.starts_with(t))
    });
    Rules {
        zone: zone.map(str::to_string),
        profile: profile.name.clone(),
        read: profile.read.clone(),
        write: profile.write.clone(),
        deny: profile.deny.clone(),
        unix_sockets: profile.unix_sockets.clone(),
        masked,
        allow: profile
            .network
            .enabled()
            .then(|| profile.network.allow.clone()),
        internal: profile.network.internal.clone(),
    }
}

/// What is asked about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Path { path: PathBuf, write: bool },
    Net { host: String, port: u16 },
}

impl Target {
    /// `HOST:PORT` (`[v6]:PORT` for IPv6) or a path (relative to `cwd`). A path is told
    /// from a host by a `/` or a leading `.` or `~`; `~` is `home`.
    pub fn parse(text: &str, write: bool, cwd: &Path, home: &Path) -> Result<Target, String> {
        let is_path = text.contains('/') || text.starts_with('.') || text.starts_with('~');
        if is_path {
            let p = if text == "~" {
                home.to_path_buf()
            } else if let Some(rest) = text.strip_prefix("~/") {
                home.join(rest)
            } else {
                cwd.join(text)
            };
            return Ok(Target::Path {
                path: lexical(&p),
                write,
            });
        }
        if write {
            return Err(format!(
                "--write is about paths, and `{text}` is a HOST:PORT; drop --write"
            ));
        }
        let (host, port) = text.rsplit_once(':').ok_or_else(|| {
            format!("`{text}` is neither a path (give one with a `/`) nor HOST:PORT")
        })?;
        let port: u16 = port
            .parse()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("`{text}`: the port must be a number from 1 to 65535"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
        if host.is_empty() {
            return Err(format!("`{text}` has no host"));
        }
        Ok(Target::Net { host, port })
    }

    /// As the answer shows it.
    pub fn shown(&self) -> String {
        match self {
            Target::Path { path, .. } => path.display().to_string(),
            Target::Net { host, port } if host.contains(':') => format!("[{host}]:{port}"),
            Target::Net { host, port } => format!("{host}:{port}"),
        }
    }
}

/// `.` and `..` taken as written, without asking the filesystem.
fn lexical(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    out
}

/// Decide `target` under `rules`.
pub fn decide(rules: &Rules, target: &Target) -> Verdict {
    match target {
        Target::Path { path, write } => decide_path(rules, path, *write),
        Target::Net { host, port } => decide_net(rules, host, *port),
    }
}

/// `*.example.com` matches names under example.com, not example.com itself; hosts in
/// any case, without a trailing dot; IPv6 with or without brackets.
fn matches(entry: &str, host: &str, port: u16) -> bool {
    let Some((h, p)) = entry.rsplit_once(':') else {
        return false;
    };
    if p.parse::<u16>().ok() != Some(port) {
        return false;
    }
    let h = h.trim_start_matches('[').trim_end_matches(']');
    let h = h.strip_suffix('.').unwrap_or(h).to_ascii_lowercase();
    match h.strip_prefix("*.") {
        Some(suffix) => host.len() > suffix.len() + 1 && host.ends_with(&format!(".{suffix}")),
        None => h == host || (h == "localhost" && matches!(host, "127.0.0.1" | "::1")),
    }
}

fn decide_net(rules: &Rules, host: &str, port: u16) -> Verdict {
    let found = |list: &[String]| list.iter().find(|e| matches(e, host, port)).cloned();
    let (allowed, rule) = match (&rules.allow, found(&rules.internal)) {
        (None, _) => (false, format!(
            "{} has no network at all (its profile has no `network`)",
            rules.named()
        )),
        (Some(_), Some(e)) => (true, format!(
            "`network.internal` has \"{e}\" (its names may resolve to private, shared, unique-local, reserved and loopback addresses; link-local ones and this machine's own only when an entry names the address)"
        )),
        (Some(allow), None) => match found(allow) {
            Some(e) => (true, format!(
                "`network.allow` has \"{e}\" (its names reach public addresses only: one that resolves to an internal address is refused; list such a host under `network.internal`)"
            )),
            None => (false, format!(
                "no `network.allow` or `network.internal` entry of {} matches {host}:{port}",
                rules.named()
            )),
        },
    };
    Verdict { allowed, rule }
}

/// The whole answer: the verdict for `rules`, and for a denial the zones among `others`
/// that would allow it.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub target: String,
    pub zone: Option<String>,
    pub profile: String,
    pub allowed: bool,
    pub rule: String,
    /// Zones that allow it (for a denial; empty when allowed).
    pub allowed_in: Vec<String>,
}

pub fn answer(rules: &Rules, others: &[Rules], target: &Target) -> Answer {
    let v = decide(rules, target);
    let allowed_in = if v.allowed {
        Vec::new()
    } else {
        others
            .iter()
            .filter(|o| o.zone != rules.zone && decide(o, target).allowed)
            .filter_map(|o| o.zone.clone())
            .collect()
    };
    Answer {
        target: target.shown(),
        zone: rules.zone.clone(),
        profile: rules.profile.clone(),
        allowed: v.allowed,
        rule: v.rule,
        allowed_in,
    }
}

impl Answer {
    /// For people: the first word is `allowed` or `denied`.
    pub fn text(&self, inside: bool) -> String {
        let verb = if self.allowed { "allowed" } else { "denied" };
        let whose = match &self.zone {
            Some(z) => format!("zone '{z}'"),
            None => format!("profile '{}'", self.profile),
        };
        let mut out = format!(
            "{verb}: {} in {whose}\n  because: {}\n",
            self.target, self.rule
        );
        if !self.allowed {
            let line = match (self.allowed_in.is_empty(), inside) {
                (true, true) => "no zone this run may enter allows it".to_string(),
                (true, false) => "no zone allows it".to_string(),
                (false, true) => format!(
                    "allowed in: {} (`wardcell zone enter ZONE -- COMMAND`)",
                    self.allowed_in.join(", ")
                ),
                (false, false) => format!(
                    "allowed in: {} (`wardcell run --zone ZONE -- COMMAND`)",
                    self.allowed_in.join(", ")
                ),
            };
            out.push_str(&format!("  {line}\n"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(zone: &str) -> Rules {
        Rules {
            zone: Some(zone.into()),
            profile: "p".into(),
            read: vec!["/usr".into(), "/home/me".into(), "/home/me/proj/.git/hooks".into()],
            write: vec!["/home/me/proj".into()],
            deny: vec!["/home/me/.ssh".into()],
            unix_sockets: vec!["/run/user/1/ssh.sock".into()],
            masked: vec![
                ("/home/me/.config/wardcell".into(), "wardcell's own directory, masked in every sandbox".into()),
                ("/run".into(), "where host services keep their sockets, masked unless `unix_sockets` names one".into()),
            ],
            allow: Some(vec!["api.example.com:443".into(), "*.corp.example:8443".into(), "localhost:5432".into()]),
            internal: vec![],
        }
    }

    fn path(p: &str, write: bool) -> Target {
        Target::parse(p, write, Path::new("/home/me/proj"), Path::new("/home/me")).unwrap()
    }

    fn net(t: &str) -> Target {
        Target::parse(t, false, Path::new("/"), Path::new("/")).unwrap()
    }

    #[test]
    fn paths_are_decided_by_the_most_specific_rule() {
        let r = rules("agent");
        let ok = |t: Target| decide(&r, &t).allowed;
        assert!(ok(path("src/main.rs", true)));
        assert!(ok(path("/usr/bin/git", false)));
        assert!(!ok(path("/usr/bin/git", true)));
        assert!(!ok(path("~/.ssh/id_ed25519", false)));
        assert!(!ok(path("/etc/passwd", false)));
        assert!(ok(path(".git/hooks/pre-commit", false)));
        let hooks = decide(&r, &path(".git/hooks/pre-commit", true));
        assert!(!hooks.allowed && hooks.rule.contains("EBUSY"), "{hooks:?}");
        assert!(!ok(path("~/.config/wardcell/zones.toml", false)));
        assert!(!ok(path("/run/dbus/system_bus_socket", false)));
        assert!(ok(path("/run/user/1/ssh.sock", false)));
        assert!(ok(path("/tmp/x", true)));
        // A tree the profile names under /tmp is bound over the private one.
        let t = Rules {
            read: vec!["/tmp/shared".into()],
            ..rules("agent")
        };
        assert!(!decide(&t, &path("/tmp/shared/x", true)).allowed);
        assert!(decide(&t, &path("/tmp/other", true)).allowed);
        assert!(!ok(path("/proc/1/environ", true)));
        // `..` is taken as written: out of the project is read-only home.
        assert!(!ok(path("../other/file", true)));
        assert!(ok(path("../other/file", false)));
    }

    #[test]
    fn hosts_match_as_the_proxy_matches_them() {
        let r = rules("agent");
        let ok = |t: &str| decide(&r, &net(t)).allowed;
        assert!(ok("api.example.com:443"));
        assert!(ok("API.Example.COM.:443"));
        assert!(!ok("api.example.com:80"));
        assert!(ok("git.corp.example:8443"));
        assert!(!ok("corp.example:8443"));
        assert!(!ok("evilcorp.example:8443"));
        assert!(ok("localhost:5432") && ok("127.0.0.1:5432") && ok("[::1]:5432"));
        assert!(!ok("example.org:443"));
        let inner = Rules {
            internal: vec!["git.corp.example:443".into()],
            ..rules("agent")
        };
        let v = decide(&inner, &net("git.corp.example:443"));
        assert!(v.allowed && v.rule.contains("network.internal"), "{v:?}");
        let only_internal = Rules {
            allow: Some(vec![]),
            ..inner
        };
        assert!(decide(&only_internal, &net("git.corp.example:443")).allowed);
        assert!(!decide(&only_internal, &net("api.example.com:443")).allowed);
        let none = Rules {
            allow: None,
            ..rules("offline")
        };
        let v = decide(&none, &net("api.example.com:443"));
        assert!(!v.allowed && v.rule.contains("no network"), "{v:?}");
    }

    #[test]
    fn a_denial_names_the_zones_that_allow_it() {
        let agent = Rules {
            allow: None,
            ..rules("agent")
        };
        let push = rules("push");
        let a = answer(&agent, &[agent.clone(), push], &net("api.example.com:443"));
        assert_eq!(
            (a.allowed, a.allowed_in.clone()),
            (false, vec!["push".to_string()])
        );
        let text = a.text(true);
        assert!(
            text.starts_with("denied: api.example.com:443 in zone 'agent'\n"),
            "{text}"
        );
        assert!(text.contains("allowed in: push"), "{text}");
        let b = answer(&rules("push"), &[], &net("api.example.com:443"));
        assert!(b.text(false).starts_with("allowed: "));
    }

    #[test]
    fn targets_are_parsed_or_refused_in_words() {
        let bad =
            |t: &str, w: bool| Target::parse(t, w, Path::new("/"), Path::new("/")).unwrap_err();
        assert!(bad("example.com", false).contains("neither a path"));
        assert!(bad("example.com:0", false).contains("port"));
        assert!(bad("example.com:99999", false).contains("port"));
        assert!(bad("example.com:443", true).contains("--write"));
        assert_eq!(net("[::1]:80").shown(), "[::1]:80");
    }
}
