//! The client's command line, run as a real binary: where each command works, the exact
//! refusals, configuration errors with their place, and the host's `zone list`.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

use wardcell_common::plan::{Plan, Start};

mod support;

const BIN: &str = env!("CARGO_BIN_EXE_wardcell");

/// A fresh directory with `home/`, `xdg/` and `work/` inside, removed on drop.
struct Scratch {
    root: PathBuf,
}

impl Scratch {
    fn new(tag: &str) -> Scratch {
        static N: AtomicUsize = AtomicUsize::new(0);
        let root = std::env::temp_dir().join(format!(
            "wardcell-cli-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&root);
        for d in ["home", "xdg", "work"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        Scratch {
            root: std::fs::canonicalize(&root).unwrap(),
        }
    }

    fn home(&self) -> PathBuf {
        self.root.join("home")
    }

    fn work(&self) -> PathBuf {
        self.root.join("work")
    }

    /// Write a config file in the scratch directory and return its path.
    fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.root.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    /// Install `text` as the user's `$XDG_CONFIG_HOME/wardcell/zones.toml`.
    fn user_config(&self, text: &str) -> PathBuf {
        let dir = self.root.join("xdg/wardcell");
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("zones.toml");
        std::fs::write(&p, text).unwrap();
        p
    }

    /// Run wardcell on the host with a clean environment.
    fn host<S: AsRef<OsStr>>(&self, args: &[S]) -> Output {
        self.run(args, &[])
    }

    /// Run wardcell with these extra environment variables (e.g. the sandbox's).
    fn run<S: AsRef<OsStr>>(&self, args: &[S], env: &[(&str, &str)]) -> Output {
        let mut c = support::hermetic(BIN);
        c.args(args)
            .env_clear()
            .env("HOME", self.home())
            .env("XDG_CONFIG_HOME", self.root.join("xdg"))
            .env("XDG_STATE_HOME", self.root.join("state"))
            .current_dir(self.work());
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

const IN_ZONE: &[(&str, &str)] = &[
    ("WARDCELL_SANDBOX", "1"),
    ("WARDCELL_ZONE", "agent"),
    ("WARDCELL_ZONE_SOCKET", "/nonexistent/wardcell.sock"),
];
const NO_ZONES: &[(&str, &str)] = &[("WARDCELL_SANDBOX", "1")];

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

/// Exit code `code`, nothing on stdout, and exactly `error: ` + one line on stderr.
#[track_caller]
fn assert_error(o: &Output, code: i32) -> String {
    assert_eq!(o.status.code(), Some(code), "stderr: {}", stderr(o));
    assert_eq!(stdout(o), "", "stdout should be empty");
    let err = stderr(o);
    assert!(err.starts_with("error: "), "{err:?}");
    assert!(
        err.ends_with('\n') && err.matches('\n').count() == 1,
        "one line: {err:?}"
    );
    err.trim_end().to_string()
}

/// The spec's example configuration.
const SPEC: &str = r#"[zones.agent]
profile    = "developer-readonly"
default    = true

[zones.push]
profile           = "git-push"
description       = "Can push to the company's git remote"
authenticated     = true
enter_from        = ["agent"]

[profiles.git-push]
extends = "developer-readonly"
network = { allow = ["git.example.com:443"] }
"#;

#[test]
fn host_zone_list_matches_the_spec() {
    let s = Scratch::new("list");
    s.user_config(SPEC);
    let o = s.host(&["zone", "list"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "ZONE   DEFAULT  PROFILE             ENTER FROM  DESCRIPTION\n\
         agent  yes      developer-readonly  -           -\n\
         push            git-push            agent       Can push to the company's git remote\n"
    );
    let o = s.host(&["zone", "list", "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "{\"zones\":[\
         {\"name\":\"agent\",\"default\":true,\"profile\":\"developer-readonly\",\"enter_from\":[],\"description\":null},\
         {\"name\":\"push\",\"default\":false,\"profile\":\"git-push\",\"enter_from\":[\"agent\"],\"description\":\"Can push to the company's git remote\"}\
         ]}\n"
    );
}

#[test]
fn zone_list_reads_config_flag_before_the_user_file() {
    let s = Scratch::new("order");
    s.user_config(SPEC);
    let other = s.file(
        "other.toml",
        "[zones.solo]\nprofile = \"readonly\"\ndefault = true\ndescription = \"Only one\"\n",
    );
    let o = s.host(&[
        OsStr::new("zone"),
        OsStr::new("list"),
        OsStr::new("--config"),
        other.as_os_str(),
    ]);
    assert_eq!(
        stdout(&o),
        "ZONE  DEFAULT  PROFILE   ENTER FROM  DESCRIPTION\nsolo  yes      readonly  -           Only one\n"
    );
}

#[test]
fn policy_check_ok_names_the_source() {
    let s = Scratch::new("checkok");
    let user = s.user_config(SPEC);
    let o = s.host(&["policy", "check"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        format!("ok: {}: 2 zones, 4 profiles\n", user.display())
    );
    let missing = s.root.join("missing.toml");
    let o = s.host(&[
        OsStr::new("policy"),
        OsStr::new("check"),
        OsStr::new("--config"),
        missing.as_os_str(),
    ]);
    let err = assert_error(&o, 1);
    assert!(
        err.contains(&format!(
            "{}: cannot read the configuration",
            missing.display()
        )),
        "{err}"
    );
}

// Issue 20: `policy check` said ok to a credential that is never attached (its zone is
// not authenticated, or no profile using it allows its host), to a secret variable that
// is not set, and to a `unix_sockets` variable that is not set. Each is now a warning
// line naming zone, profile and credential; the check still passes.
#[test]
fn policy_check_warns_of_what_cannot_work() {
    let s = Scratch::new("checkwarn");
    s.user_config(
        r#"
[zones.agent]
profile = "readonly"
default = true
[zones.plain]
profile = "pusher"
enter_from = ["agent"]
[zones.push]
profile = "pusher"
authenticated = true
enter_from = ["agent"]
[profiles.pusher]
extends = "readonly"
network = { allow = ["git.example.com:443"], internal = ["*.npm.example:443", "git.corp.example:443"] }
credentials = ["git", "npm", "corp"]
unix_sockets = ["$WARDCELL_TEST_NO_SUCH_SOCK"]
[credentials.git]
hosts = ["git.example.com"]
scheme = "bearer"
secret = { env = "WARDCELL_TEST_NO_SUCH_TOKEN" }
[credentials.npm]
hosts = ["registry.npm.example", "git.example.com:8443"]
scheme = "bearer"
secret = { env = "HOME" }
[credentials.corp]
hosts = ["git.corp.example"]
scheme = "bearer"
secret = { env = "HOME" }
"#,
    );
    let o = s.host(&["policy", "check"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    let want = [
        "warning: zone 'plain' (profile 'pusher') lists credential 'git', but the zone does not set authenticated = true, so it is never attached there",
        "warning: zone 'plain' (profile 'pusher') lists credential 'npm', but the zone does not set authenticated = true",
        "warning: profile 'pusher' (zone 'plain') binds the socket named by $WARDCELL_TEST_NO_SUCH_SOCK, which is not set here",
        "warning: credential 'npm' is for git.example.com:8443, which profile 'pusher' (zone 'push') does not allow, so it is never attached there; add \"git.example.com:8443\" to its network.allow",
        "warning: credential 'git' reads environment variable WARDCELL_TEST_NO_SUCH_TOKEN, which is not set here",
    ];
    for w in want {
        assert!(
            err.lines().any(|l| l.starts_with(w)),
            "missing {w:?} in:\n{err}"
        );
    }
    // Allowed by `*.npm.example:443`, and git.example.com:443 by name: no warning.
    assert!(!err.contains("registry.npm.example"), "{err}");
    assert!(!err.contains("is for git.example.com:443"), "{err}");
    // Hosts allowed under network.internal count as allowed (issue 20, item 1).
    assert!(!err.contains("is for git.corp.example"), "{err}");
    assert!(!err.contains("is for registry.npm.example"), "{err}");
    assert!(
        err.contains("lists credential 'corp', but the zone does not set authenticated"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 7, "{err}");
}

#[test]
fn builtin_default_when_no_file() {
    let s = Scratch::new("builtin");
    let o = s.host(&["policy", "check"]);
    assert_eq!(stdout(&o), "ok: built-in default: 1 zone, 3 profiles\n");
    let o = s.host(&["zone", "list"]);
    assert_eq!(
        stdout(&o),
        "ZONE   DEFAULT  PROFILE             ENTER FROM  DESCRIPTION\nagent  yes      developer-readonly  -           -\n"
    );
}

#[test]
fn each_bad_config_names_file_line_column_and_key() {
    let agent = "[zones.agent]\nprofile = \"developer-readonly\"\ndefault = true\n";
    let cases: Vec<(String, &str)> = vec![
        (format!("{agent}colour = 1\n"), "4:1: zones.agent.colour: unknown key"),
        (
            "[zones.agent]\nprofile = \"nope\"\ndefault = true\n".into(),
            "2:11: zones.agent.profile: there is no profile 'nope'",
        ),
        (
            format!("{agent}[profiles.a]\nextends = \"b\"\n[profiles.b]\nextends = \"a\"\n"),
            "5:11: profiles.a.extends: extends forms a cycle (a -> b -> a)",
        ),
        (
            format!("{agent}[profiles.a]\nextends = \"gone\"\n"),
            "5:11: profiles.a.extends: there is no profile 'gone' to extend",
        ),
        (
            "[zones.agent]\nprofile = \"readonly\"\n".into(),
            "1:8: zones: no zone sets default = true",
        ),
        (
            format!("{agent}[zones.b]\nprofile = \"readonly\"\ndefault = true\n"),
            "6:11: zones.b.default: zones 'agent' and 'b' both set default = true",
        ),
        (
            format!("{agent}[zones.push]\nprofile = \"readonly\"\nenter_from = [\"agnet\"]\n"),
            "6:15: zones.push.enter_from: there is no zone 'agnet'",
        ),
        (
            format!("{agent}[zones.push]\nprofile = \"readonly\"\nrequires_approval = true\napproval_timeout = \"ten\"\n"),
            "7:20: zones.push.approval_timeout: \"ten\" is not a duration",
        ),
        (
            format!("{agent}[profiles.p]\nnetwork = {{ allow = [\"crates.io:70000\"] }}\n"),
            "5:22: profiles.p.network.allow: \"crates.io:70000\": the port must be a number from 1 to 65535",
        ),
        (
            format!("{agent}[profiles.p]\nenv = {{ deny = [\"\"] }}\n"),
            "5:17: profiles.p.env.deny: an empty pattern",
        ),
        (
            format!("{agent}[profiles.p]\ncredentials = [\"company-git\"]\n"),
            "5:16: profiles.p.credentials: there is no credential 'company-git'",
        ),
        (
            format!("{agent}[zones.Push]\nprofile = \"readonly\"\n"),
            "4:8: zones.Push: names are 1 to 64 characters",
        ),
        (
            format!("{agent}[approval]\nplugin = [\"approve\"]\n"),
            "5:11: approval.plugin: \"approve\" is not an absolute path",
        ),
    ];
    let s = Scratch::new("bad");
    for (i, (text, want)) in cases.iter().enumerate() {
        let f = s.file(&format!("bad{i}.toml"), text);
        let o = s.host(&[
            OsStr::new("policy"),
            OsStr::new("check"),
            OsStr::new("--config"),
            f.as_os_str(),
        ]);
        let err = assert_error(&o, 1);
        let prefix = format!("error: {}:{want}", f.display());
        assert!(
            err.starts_with(&prefix),
            "case {i}:\n got  {err}\n want {prefix}..."
        );
    }
}

#[test]
fn a_bad_user_file_stops_run_too() {
    let s = Scratch::new("badrun");
    let user = s.user_config("[zones.agent]\nprofile = \"readonly\"\ndefault = true\nbogus = 1\n");
    let mark = s.root.join("ran");
    let o = s.host(&[
        OsStr::new("run"),
        OsStr::new("--"),
        OsStr::new("touch"),
        mark.as_os_str(),
    ]);
    let err = assert_error(&o, 1);
    assert!(
        err.starts_with(&format!(
            "error: {}:4:1: zones.agent.bogus: unknown key",
            user.display()
        )),
        "{err}"
    );
    assert!(!mark.exists());
}

#[test]
fn hidden_commands_are_refused_with_the_spec_messages() {
    let s = Scratch::new("hidden");
    let mark = s.root.join("ran");
    let m = mark.to_str().unwrap();
    // A --config that does not exist: a refusal must come before the file is looked at.
    let missing = s.root.join("missing.toml");
    let cfg = missing.to_str().unwrap();

    let o = s.run(&["run", "--config", cfg, "--", "touch", m], IN_ZONE);
    assert_eq!(
        assert_error(&o, 1),
        "error: `wardcell run` is not available inside a wardcell sandbox: a sandbox cannot start another sandbox. To run a command with different permissions, see `wardcell zone list` and `wardcell zone enter`."
    );
    // Refused even with no command at all: before clap parses anything.
    let o = s.run(&["run"], IN_ZONE);
    assert!(assert_error(&o, 1)
        .starts_with("error: `wardcell run` is not available inside a wardcell sandbox"));

    let o = s.host(&["zone", "enter", "push", "--", "touch", m]);
    assert_eq!(
        assert_error(&o, 1),
        "error: `wardcell zone enter` only works inside a sandbox that `wardcell run` started in a zone; to run a command in a zone from here, use `wardcell run --zone <ZONE> -- <COMMAND>`"
    );
    let o = s.host(&["zone", "current"]);
    assert_eq!(
        assert_error(&o, 1),
        "error: `wardcell zone current` only works inside a sandbox that `wardcell run` started in a zone; on the host no zone is current, and `wardcell zone list` shows every zone"
    );
    for args in [
        vec!["policy", "check", "--config", cfg],
        vec!["policy", "show"],
        vec!["policy"],
    ] {
        let o = s.run(&args, IN_ZONE);
        assert_eq!(
            assert_error(&o, 1),
            "error: `wardcell policy` is not available inside a wardcell sandbox: the configuration is read on the host, outside any sandbox. To see the zones this sandbox may enter, use `wardcell zone list`."
        );
    }

    // A run without zones: nothing works.
    let o = s.run(&["run", "--", "touch", m], NO_ZONES);
    assert_eq!(
        assert_error(&o, 1),
        "error: `wardcell run` is not available inside a wardcell sandbox: a sandbox cannot start another sandbox. This run has no zones (it was started with `wardcell run --profile`); to run a command with different permissions, start it from the host with `wardcell run --zone <ZONE> -- <COMMAND>`."
    );
    let o = s.run(&["policy", "check", "--config", cfg], NO_ZONES);
    assert!(assert_error(&o, 1)
        .starts_with("error: `wardcell policy` is not available inside a wardcell sandbox"));
    for sub in ["list", "current", "enter"] {
        let o = s.run(&["zone", sub, "push", "--", "touch", m], NO_ZONES);
        assert_eq!(
            assert_error(&o, 1),
            format!("error: `wardcell zone {sub}` is not available in this sandbox: it was started with `wardcell run --profile`, outside any zone, so there is no zone to list or enter. To use zones, start the run from the host with `wardcell run --zone <ZONE> -- <COMMAND>`.")
        );
    }
    assert!(!mark.exists(), "a refused command ran");
}

#[test]
fn zone_current_prints_the_name_alone() {
    let s = Scratch::new("current");
    let o = s.run(&["zone", "current"], IN_ZONE);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "agent\n");
    assert_eq!(stderr(&o), "");
}

fn help(s: &Scratch, args: &[&str], env: &[(&str, &str)]) -> String {
    let o = s.run(args, env);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    stdout(&o)
}

/// The names listed under "Commands:" in a help text.
fn commands(help: &str) -> Vec<String> {
    let Some((_, rest)) = help.split_once("Commands:\n") else {
        return Vec::new();
    };
    rest.lines()
        .take_while(|l| l.starts_with("  "))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect()
}

#[test]
fn help_lists_only_what_works_here() {
    let s = Scratch::new("help");
    assert_eq!(
        commands(&help(&s, &["--help"], &[])),
        [
            "run",
            "policy",
            "zone",
            "logs",
            "approvals",
            "doctor",
            "completions"
        ]
    );
    assert_eq!(
        commands(&help(&s, &["approvals", "--help"], &[])),
        ["list", "show", "approve", "deny", "watch"]
    );
    assert_eq!(commands(&help(&s, &["zone", "--help"], &[])), ["list"]);
    assert_eq!(
        commands(&help(&s, &["policy", "--help"], &[])),
        ["check", "show", "why"]
    );

    assert_eq!(
        commands(&help(&s, &["--help"], IN_ZONE)),
        ["zone", "completions"]
    );
    assert_eq!(
        commands(&help(&s, &["zone", "--help"], IN_ZONE)),
        ["list", "current", "why", "denials", "enter"]
    );
    assert!(!help(&s, &["zone", "list", "--help"], IN_ZONE).contains("--config"));

    let h = help(&s, &["--help"], NO_ZONES);
    assert!(commands(&h).is_empty(), "{h}");
    assert!(h.contains("no wardcell command works here"), "{h}");
}

#[test]
fn usage_errors_exit_2_on_one_line() {
    let s = Scratch::new("usage");
    s.user_config(SPEC);
    for (args, want) in [
        (
            vec!["run", "--zone", "agent", "--profile", "readonly", "--", "true"],
            "error: the argument '--zone <ZONE>' cannot be used with '--profile <PROFILE>'; see `wardcell run --help`",
        ),
        (vec!["bogus"], "error: unrecognized subcommand 'bogus'; see `wardcell --help`"),
        (
            vec!["run"],
            "error: the following required arguments were not provided: <COMMAND>...; see `wardcell run --help`",
        ),
        (
            vec!["zone", "list", "--output", "yaml"],
            "error: invalid value 'yaml' for '--output <OUTPUT>'",
        ),
        (vec!["run", "--zonee", "a", "--", "true"], "error: unexpected argument '--zonee' found"),
    ] {
        let o = s.host(&args);
        let err = assert_error(&o, 2);
        assert!(err.starts_with(want), "{args:?}: {err}");
    }
    let o = s.run(&["zone", "list", "--config", "/x"], IN_ZONE);
    assert!(assert_error(&o, 2).contains("--config does not apply inside a sandbox"));

    // `wardcell run` starts its broker before it parses anything: help still ends with
    // the help alone, and status 0, from the broker that had nothing to run.
    let o = s.host(&["run", "--help"]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert!(stdout(&o).contains("Usage: wardcell run"), "{}", stdout(&o));
    assert_eq!(stderr(&o), "");
}

#[test]
fn run_checks_its_input_before_launching() {
    let s = Scratch::new("run");
    s.user_config(SPEC);
    let o = s.host(&["run", "--zone", "nope", "--", "true"]);
    assert_eq!(
        assert_error(&o, 1),
        format!(
            "error: there is no zone 'nope' in {}; its zones are: agent, push (see `wardcell zone list`)",
            s.root.join("xdg/wardcell/zones.toml").display()
        )
    );
    let o = s.host(&["run", "--profile", "nope", "--", "true"]);
    assert!(assert_error(&o, 1).starts_with("error: there is no profile 'nope'"));
    let bad = OsStr::from_bytes(b"\xffname");
    let o = s.host(&[OsStr::new("run"), OsStr::new("--"), OsStr::new("cat"), bad]);
    assert_eq!(
        assert_error(&o, 1),
        "error: argument 2 of the command is not valid UTF-8; wardcell passes commands as UTF-8 text, so rename or re-encode it"
    );
}

#[test]
fn policy_show_json_is_the_resolved_plan() {
    let s = Scratch::new("show");
    std::fs::create_dir_all(s.home().join(".ssh")).unwrap();
    s.user_config(SPEC);
    let o = s.host(&["policy", "show", "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let plan: Plan = serde_json::from_slice(&o.stdout).unwrap();
    // One document, no Rust enum names: where the run starts reads as zones.toml would.
    let raw: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(raw["start"], serde_json::json!({"zone": "agent"}));

    // The same value resolve() makes from the same inputs.
    let cfg = wardcell_config::config::parse(SPEC, &plan.source).unwrap();
    let ctx = wardcell_config::resolve::Context {
        home: s.home(),
        cwd: s.work(),
        dirs: plan.dirs.clone(),
        getenv: |k| std::env::var(k).ok(),
        client: plan.client.clone(),
    };
    let want = wardcell_config::resolve::resolve(
        &cfg,
        wardcell_config::resolve::StartRequest::Default,
        Vec::new(),
        &ctx,
    )
    .unwrap();
    assert_eq!(plan, want);
    assert_eq!(plan.start, Start::Zone("agent".into()));
    assert_eq!(plan.zones.len(), 2);
    let push = &plan.zones[1].profile;
    assert_eq!(push.network.allow, ["git.example.com:443"]);
    assert!(push.deny.contains(&s.home().join(".ssh")));
    assert!(push.write.contains(&s.work()));

    let o = s.host(&["policy", "show", "push"]);
    let text = stdout(&o);
    assert!(
        text.starts_with(&format!("config: {}\n", plan.source)),
        "{text}"
    );
    assert!(
        text.contains("zone push\n") && !text.contains("zone agent"),
        "{text}"
    );
    assert!(text.contains("      git.example.com:443\n"), "{text}");
    assert!(text.contains("deny ~/.aws: not there yet, held"), "{text}");

    let o = s.host(&[
        "policy",
        "show",
        "--profile",
        "readonly",
        "--output",
        "json",
    ]);
    let plan: Plan = serde_json::from_slice(&o.stdout).unwrap();
    assert!(plan.zones.is_empty());
    assert!(
        matches!(plan.start, Start::Profile(ref p) if p.name == "readonly" && p.write.is_empty())
    );
}

/// The broker is started by `wardcell run` alone: by hand, with or without arguments, it
/// refuses on one line and starts nothing.
#[test]
fn the_broker_refuses_to_start_by_hand() {
    let broker = Path::new(BIN).with_file_name("wardcell-broker");
    for args in [
        vec![],
        vec!["--plan-writer"],
        vec!["--plan-writer", "-4"],
        // Not a child of the broker: no plan writer of its.
        vec!["--plan-writer", "1"],
        vec!["--plan-writer", "1", "extra"],
        vec!["--bogus"],
    ] {
        let o = Command::new(&broker).args(&args).output().unwrap();
        let err = assert_error(&o, 1);
        assert!(
            err.starts_with("error: wardcell-broker is started by `wardcell run`, not by hand"),
            "{args:?}: {err}"
        );
    }
}

/// Every command path of the client, with whether it takes `--output`.
const PATHS: &[(&str, bool)] = &[
    ("run", false),
    ("policy", false),
    ("policy check", false),
    ("policy show", true),
    ("zone", false),
    ("zone list", true),
    ("zone current", false),
    ("zone enter", false),
    ("logs", false),
    ("logs list", true),
    ("logs show", true),
    ("logs verify", false),
    ("approvals", false),
    ("approvals list", true),
    ("approvals show", true),
    ("approvals approve", false),
    ("approvals deny", false),
    ("approvals watch", false),
    ("doctor", false),
];

#[test]
fn help_is_never_refused_anywhere() {
    let s = Scratch::new("help-everywhere");
    let mark = s.root.join("ran");
    for env in [&[][..], IN_ZONE, NO_ZONES] {
        for (path, output) in PATHS {
            let words: Vec<&str> = path.split(' ').collect();
            let mut help_cmd = vec!["help"];
            help_cmd.extend(&words);
            let mut flag = words.clone();
            flag.push("--help");
            for args in [help_cmd, flag] {
                let o = s.run(&args, env);
                assert_eq!(o.status.code(), Some(0), "{args:?} {env:?}: {}", stderr(&o));
                let out = stdout(&o);
                assert!(
                    out.contains(&format!("Usage: wardcell {path}")),
                    "{args:?} {env:?}: {out}"
                );
                assert_eq!(stderr(&o), "", "{args:?} {env:?}");
                if *output {
                    assert!(
                        out.contains("--output") && out.contains("one JSON document"),
                        "{args:?}: {out}"
                    );
                }
            }
        }
    }
    // The help of a command that does not work here says why; running it is refused.
    let o = s.host(&["zone", "enter", "--help"]);
    assert!(stdout(&o)
        .contains("Not available here: `wardcell zone enter` only works inside a sandbox"));
    let o = s.run(&["help", "logs"], IN_ZONE);
    assert!(stdout(&o).contains(
        "Not available here: `wardcell logs` is not available inside a wardcell sandbox"
    ));
    let o = s.host(&[
        "zone",
        "enter",
        "push",
        "--",
        "touch",
        mark.to_str().unwrap(),
    ]);
    assert_error(&o, 1);
    // `help` of a command that does not exist is a usage error; a command's own --help
    // after its arguments is the command's.
    let o = s.host(&["help", "bogus"]);
    assert_eq!(
        assert_error(&o, 2),
        "error: `wardcell help`: there is no command `bogus`; see `wardcell --help`"
    );
    let o = s.host(&["help"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).contains("wardcell help COMMAND"));
    assert!(!mark.exists());
}
