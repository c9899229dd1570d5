//! The approval plugin's request and answer (channel E in docs/PROTOCOL.md). The request
//! is built here ([`request`]), with what the entry would add over the calling zone
//! ([`adds`]); the answer is one JSON object, `{"approved": bool, "reason": "...",
//! "approver": "...", "reference": "..."}`. The broker runs the plugin
//! (wardcell-broker/src/approval.rs); both ends are pure functions that unit tests and the
//! fuzzer call directly.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::paths;
use crate::plan::{Plan, ZonePlan};

/// What entering a zone would give over the calling zone: computed from the two resolved
/// profiles, so that a person (or any plugin) sees what approving means.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct Adds {
    /// Write trees of the target that no write tree of the calling zone holds.
    pub write: Vec<PathBuf>,
    /// `network.allow` entries of the target that the calling zone lacks, then its
    /// `network.internal` entries the calling zone lacks there, each followed by
    /// ` (internal)`.
    pub hosts: Vec<String>,
    /// Credentials the target's proxy attaches (an `authenticated` zone's) that the
    /// calling zone's does not: names and hosts, never where a secret comes from.
    pub credentials: Vec<CredentialAdd>,
    /// Host Unix sockets bound into the target that the calling zone lacks.
    pub unix_sockets: Vec<PathBuf>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct CredentialAdd {
    pub name: String,
    pub hosts: Vec<String>,
}

/// What entering `to` from `from` adds. `from` is None when the calling zone is not in the
/// plan (it always is for a real run): then everything `to` has counts as added.
pub fn adds(plan: &Plan, from: Option<&ZonePlan>, to: &ZonePlan) -> Adds {
    let (fp, tp) = (from.map(|z| &z.profile), &to.profile);
    let attached = |z: &ZonePlan| -> Vec<String> {
        if z.authenticated {
            z.profile.credentials.clone()
        } else {
            Vec::new()
        }
    };
    let had = from.map(attached).unwrap_or_default();
    Adds {
        write: tp
            .write
            .iter()
            .filter(|p| !fp.is_some_and(|f| f.write.iter().any(|w| p.starts_with(w))))
            .cloned()
            .collect(),
        hosts: tp
            .network
            .allow
            .iter()
            .filter(|h| !fp.is_some_and(|f| f.network.entries().contains(h)))
            .cloned()
            .chain(
                tp.network
                    .internal
                    .iter()
                    .filter(|h| !fp.is_some_and(|f| f.network.internal.contains(h)))
                    .map(|h| format!("{h} (internal)")),
            )
            .collect(),
        credentials: attached(to)
            .into_iter()
            .filter(|c| !had.contains(c))
            .map(|name| CredentialAdd {
                hosts: plan
                    .credentials
                    .iter()
                    .find(|c| c.name == name)
                    .map(|c| c.hosts.clone())
                    .unwrap_or_default(),
                name,
            })
            .collect(),
        unix_sockets: tp
            .unix_sockets
            .iter()
            .filter(|s| !fp.is_some_and(|f| f.unix_sockets.contains(s)))
            .cloned()
            .collect(),
    }
}

/// One entry the plugin is asked about: its inputs, as the supervisor knows them.
pub struct Entry<'a> {
    pub run: &'a str,
    pub user: u32,
    pub calling_zone: &'a str,
    pub chain: &'a [String],
    pub target: &'a ZonePlan,
    pub command: &'a [String],
    pub cwd: &'a str,
    /// The command's executable as the target's view shows it, and the zones that may
    /// write it (`why::command`); the names of the variables the caller set otherwise
    /// than the run's environment (`envrules::entered`).
    pub executable: &'a (Option<std::path::PathBuf>, Vec<String>),
    pub env_changes: &'a [String],
}

/// The JSON object the plugin reads on its stdin (docs/PROTOCOL.md, section 7).
pub fn request(plan: &Plan, e: &Entry<'_>) -> Value {
    let from = plan.zones.iter().find(|z| z.name == e.calling_zone);
    serde_json::json!({
        "run": e.run,
        "user": e.user,
        "calling_zone": e.calling_zone,
        "chain": e.chain,
        "target": e.target.name,
        "command": e.command,
        "executable": e.executable.0,
        "executable_writable_by": e.executable.1,
        "env_changes": e.env_changes,
        "cwd": e.cwd,
        "log": paths::run_log(&plan.dirs, e.run),
        "timeout_secs": e.target.approval_timeout_secs,
        "adds": adds(plan, from, e.target),
    })
}

/// The most of the plugin's stdout that is read.
pub const MAX_ANSWER: usize = 64 * 1024;

/// Longest `reason`, `approver` or `reference` kept, in characters.
pub const MAX_TEXT: usize = 500;

/// What the plugin said, or why there is no usable answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub approved: bool,
    pub reason: String,
    pub approver: Option<String>,
    pub reference: Option<String>,
}

impl Answer {
    /// A refusal that did not come from the plugin's answer.
    pub fn refusal(reason: impl Into<String>) -> Answer {
        Answer {
            approved: false,
            reason: reason.into(),
            approver: None,
            reference: None,
        }
    }

    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "approved": self.approved,
            "reason": self.reason,
            "approver": self.approver,
            "reference": self.reference,
        })
    }
}

/// Parse the plugin's whole stdout. Text fields lose their control characters and are
/// cut at [`MAX_TEXT`] characters, so that they cannot forge lines in a message or a log.
pub fn parse_answer(out: &[u8]) -> Answer {
    let v: Value = match serde_json::from_slice(out) {
        Ok(v) => v,
        Err(_) => return Answer::refusal("the approval plugin's answer is not one JSON object"),
    };
    // Parsers differ on which of two equal keys wins: an answer that says two things is
    // refused, whatever either says.
    if let Err(e) = serde_json::from_slice::<Unique>(out) {
        return Answer::refusal(format!(
            "the approval plugin's answer is refused: {}",
            crate::text::shown(&e.to_string())
        ));
    }
    let Some(approved) = v.get("approved").and_then(Value::as_bool) else {
        return Answer::refusal("the approval plugin's answer has no boolean \"approved\"");
    };
    let text = |k: &str| {
        v.get(k).and_then(Value::as_str).map(|s| {
            s.chars()
                .filter(|c| !c.is_control())
                .take(MAX_TEXT)
                .collect::<String>()
        })
    };
    Answer {
        approved,
        reason: text("reason").unwrap_or_else(|| {
            if approved {
                "approved"
            } else {
                "no reason given"
            }
            .to_string()
        }),
        approver: text("approver"),
        reference: text("reference"),
    }
}

/// A JSON value whose objects, at any depth, name each key once (checked, not kept).
struct Unique;

impl<'de> serde::Deserialize<'de> for Unique {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Unique, D::Error> {
        d.deserialize_any(UniqueVisitor)
    }
}

struct UniqueVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueVisitor {
    type Value = Unique;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("JSON")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_str<E>(self, _: &str) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_unit<E>(self) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Unique, A::Error> {
        while a.next_element::<Unique>()?.is_some() {}
        Ok(Unique)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Unique, A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(k) = a.next_key::<String>()? {
            if !seen.insert(k.clone()) {
                return Err(serde::de::Error::custom(format!(
                    "it names \"{k}\" more than once"
                )));
            }
            a.next_value::<Unique>()?;
        }
        Ok(Unique)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::plan::{CredentialPlan, CredentialScheme, Dirs, NetworkPlan, SecretPlan, Start};

    fn zone(
        name: &str,
        write: &[&str],
        allow: &[&str],
        creds: &[&str],
        socks: &[&str],
    ) -> ZonePlan {
        let mut z = ZonePlan {
            name: name.into(),
            description: None,
            default: false,
            enter_from: Vec::new(),
            requires_approval: true,
            approval_timeout_secs: Some(600),
            authenticated: !creds.is_empty(),
            profile: Default::default(),
        };
        z.profile.write = write.iter().map(PathBuf::from).collect();
        z.profile.network = NetworkPlan {
            allow: allow.iter().map(|s| s.to_string()).collect(),
            internal: Vec::new(),
        };
        z.profile.credentials = creds.iter().map(|s| s.to_string()).collect();
        z.profile.unix_sockets = socks.iter().map(PathBuf::from).collect();
        z
    }

    pub(crate) fn plan(zones: Vec<ZonePlan>) -> Plan {
        let cred = |name: &str, host: &str| CredentialPlan {
            name: name.into(),
            hosts: vec![host.into()],
            paths: Vec::new(),
            methods: Vec::new(),
            placeholder: None,
            scheme: CredentialScheme::Bearer,
            username: None,
            header: None,
            secret: SecretPlan::Env("SECRET_NEVER_SHOWN".into()),
        };
        Plan {
            source: "t".into(),
            cwd: "/p".into(),
            home: "/h".into(),
            command: Vec::new(),
            start: Start::Zone("agent".into()),
            zones,
            approval: None,
            audit: Default::default(),
            dirs: Dirs {
                config: Vec::new(),
                state: "/h/.local/state/wardcell".into(),
                runtime: "/run/user/1/wardcell".into(),
            },
            credentials: vec![
                cred("git", "git.example.com"),
                cred("npm", "registry.npmjs.org"),
            ],
            client: None,
            prepared: Vec::new(),
            pinned: Vec::new(),
            upstream_roots: Vec::new(),
            open_files: None,
            overrides: Default::default(),
            trace: None,
            machine: Default::default(),
        }
    }

    /// What `zone enter` shows of a command: its executable in the target's view, with
    /// the entry's PATH, and which zones may write it.
    #[test]
    fn an_entered_commands_executable_and_who_may_write_it() {
        // Not under /tmp: every sandbox has a /tmp of its own, never the host's.
        let dir =
            std::path::Path::new("/var/tmp").join(format!("wardcell-exe-{}", std::process::id()));
        let bin = dir.join("proj/evilbin");
        std::fs::create_dir_all(&bin).unwrap();
        let git = bin.join("git");
        std::fs::write(&git, "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&git, std::fs::Permissions::from_mode(0o755)).unwrap();
        let proj = dir.join("proj");
        let mut agent = zone("agent", &[proj.to_str().unwrap()], &[], &[], &[]);
        let mut appr = zone("appr", &[], &[], &[], &[]);
        for z in [&mut agent, &mut appr] {
            z.profile.read = vec!["/usr".into(), "/bin".into(), dir.clone()];
        }
        let mut p = plan(vec![agent, appr]);
        // Each zone's rules, as the plan writer prepares them (no directory of ours lies
        // in these trees).
        for z in p.zones.clone() {
            let rules = crate::why::Rules {
                profile: z.profile.name.clone(),
                read: z.profile.read.clone(),
                write: z.profile.write.clone(),
                ..Default::default()
            };
            let zones = vec![Some(z.name.clone())];
            let made = Err("not built here".into());
            p.prepared
                .push(crate::prepared::Prepared { zones, rules, made });
        }
        let argv = ["git".to_string(), "status".to_string()];
        let evil = format!("{}:/usr/bin:/bin", bin.display());
        let env = [("PATH".to_string(), evil)];
        let (exe, writers) = crate::why::command(&p, "appr", (&argv, &env, "/"));
        assert_eq!(exe.as_deref(), Some(git.as_path()));
        assert_eq!(writers, ["agent"]);
        // With the run's PATH, the system's git (where this machine has one), written by none.
        let env = [("PATH".to_string(), "/usr/bin:/bin".to_string())];
        let (exe, writers) = crate::why::command(&p, "appr", (&argv, &env, "/"));
        if let Some(exe) = exe {
            assert!(
                exe.starts_with("/usr/bin") || exe.starts_with("/bin"),
                "{exe:?}"
            );
            assert!(writers.is_empty(), "{writers:?}");
        }
        // A zone not in the plan shows nothing.
        assert_eq!(
            crate::why::command(&p, "nope", (&argv, &env, "/")),
            (None, vec![])
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn what_an_entry_adds() {
        let agent = zone("agent", &["/p", "/tmp"], &["crates.io:443"], &[], &[]);
        let push = zone(
            "push",
            &["/p/sub", "/h", "/tmp"],
            &["crates.io:443", "git.example.com:443"],
            &["git"],
            &["/run/ssh.sock"],
        );
        let p = plan(vec![agent.clone(), push.clone()]);
        let a = adds(&p, Some(&agent), &push);
        assert_eq!(a.write, vec![PathBuf::from("/h")]);
        assert_eq!(a.hosts, vec!["git.example.com:443".to_string()]);
        assert_eq!(
            a.credentials,
            vec![CredentialAdd {
                name: "git".into(),
                hosts: vec!["git.example.com".into()]
            }]
        );
        assert_eq!(a.unix_sockets, vec![PathBuf::from("/run/ssh.sock")]);
        // Going the other way only the tree push lacks is added (it writes /p/sub only);
        // entering the same profile adds nothing.
        assert_eq!(
            adds(&p, Some(&push), &agent),
            Adds {
                write: vec![PathBuf::from("/p")],
                ..Adds::default()
            }
        );
        assert_eq!(adds(&p, Some(&push), &push), Adds::default());
        // A zone that is not authenticated attaches no credential, whatever it names.
        let mut plain = push.clone();
        plain.authenticated = false;
        assert!(adds(&p, Some(&agent), &plain).credentials.is_empty());
        // A credential the calling zone already attaches is not added; another one is.
        let mut both = push.clone();
        both.profile.credentials.push("npm".into());
        let a = adds(&p, Some(&push), &both);
        assert_eq!(a.credentials.len(), 1);
        assert_eq!(a.credentials[0].name, "npm");
        // A "/p" tree is not inside "/p2".
        let p2 = zone("p2", &["/p2"], &[], &[], &[]);
        assert_eq!(
            adds(&p, Some(&agent), &p2).write,
            vec![PathBuf::from("/p2")]
        );
        // Unknown calling zone: everything counts.
        assert_eq!(adds(&p, None, &push).write.len(), 3);
    }

    #[test]
    fn the_request_carries_the_log_the_timeout_and_what_it_adds_never_a_secret() {
        let agent = zone("agent", &["/p"], &[], &[], &[]);
        let push = zone("push", &["/p"], &["git.example.com:443"], &["git"], &[]);
        let p = plan(vec![agent, push.clone()]);
        let chain = vec!["agent".to_string()];
        let command = vec!["git".to_string(), "push".to_string()];
        let r = request(
            &p,
            &Entry {
                run: "r1",
                user: 1000,
                calling_zone: "agent",
                chain: &chain,
                target: &push,
                command: &command,
                cwd: "/p",
                executable: &(Some("/usr/bin/git".into()), vec!["agent".into()]),
                env_changes: &["GIT_SSH_COMMAND".to_string()],
            },
        );
        assert_eq!(r["executable"], "/usr/bin/git");
        assert_eq!(r["executable_writable_by"][0], "agent");
        assert_eq!(r["env_changes"][0], "GIT_SSH_COMMAND");
        assert_eq!(r["log"], "/h/.local/state/wardcell/runs/r1.jsonl");
        assert_eq!(r["timeout_secs"], 600);
        assert_eq!(r["target"], "push");
        assert_eq!(r["adds"]["hosts"][0], "git.example.com:443");
        assert_eq!(r["adds"]["credentials"][0]["hosts"][0], "git.example.com");
        assert!(!r.to_string().contains("SECRET_NEVER_SHOWN"), "{r}");
    }

    #[test]
    fn answers() {
        let a = parse_answer(br#"{"approved": true, "approver": "ana", "reference": "T-1"}"#);
        assert!(a.approved);
        assert_eq!(a.approver.as_deref(), Some("ana"));
        let a = parse_answer(br#"{"approved": false, "reason": "not during the release freeze"}"#);
        assert!(!a.approved);
        assert_eq!(a.reason, "not during the release freeze");
        for bad in [
            &b"nope"[..],
            b"{}",
            br#"{"approved": "yes"}"#,
            b"",
            b"[true]",
        ] {
            assert!(!parse_answer(bad).approved, "{bad:?}");
        }
        // Duplicate keys fail closed, at any depth and however a key is spelled.
        for dup in [
            &br#"{"approved": false, "approved": true}"#[..],
            br#"{"approved": true, "appr\u006fved": true}"#,
            br#"{"approved": true, "x": [{"a": 1, "a": 2}]}"#,
        ] {
            let a = parse_answer(dup);
            assert!(!a.approved, "{dup:?}");
            assert!(a.reason.contains("more than once"), "{}", a.reason);
        }
        // Two objects are not one answer.
        assert!(!parse_answer(br#"{"approved": true} {"approved": true}"#).approved);
        // Control characters cannot forge extra lines in messages or logs.
        let a = parse_answer(br#"{"approved": false, "reason": "a\nerror: b\u001b[2J"}"#);
        assert_eq!(a.reason, "aerror: b[2J");
        let long = format!(r#"{{"approved": false, "reason": "{}"}}"#, "é".repeat(900));
        assert_eq!(
            parse_answer(long.as_bytes()).reason.chars().count(),
            MAX_TEXT
        );
    }
}
