//! The built-in agent profiles with the real agents: Claude Code and Codex, installed
//! from the npm registry, each take one non-interactive tool-calling turn inside its
//! profile, with no zones.toml at all and only the API key in the caller's environment,
//! as a new user's first run: `wardcell run --profile claude-code -- claude -p ...`.
//! The model API is a stand-in (`tests/fixtures/model_api.py`) at the API's real name
//! and port: a hosts file of the test's own maps `api.anthropic.com` and
//! `api.openai.com` to a loopback address, which `--internal` admits, as on a network
//! whose names resolve to private addresses. The key exists only outside: the sandbox
//! holds the placeholder, the server sees the key. Codex talks to it over a WebSocket.
//! Where the registry cannot be reached, the tests that need the agents say so on
//! stderr and end there. The secrets `developer-readonly` masks are tried without any.

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

use serde_json::Value;
use wardcell_tests::{both, Fixture, Out};

/// The versions these tests were written against (docs/AGENTS.md).
const CLAUDE_CODE: &str = "@anthropic-ai/claude-code@2.1.197";
const CODEX: &str = "@openai/codex@0.171.0";
/// What the stand-in answers every turn with.
const REPLY: &str = "wardcell-stand-in-reply";
/// The prompt that makes the stand-in ask for one shell command first.
const TOOL_TURN: &str = "Run the tool. wardcell-tool-turn";
/// wardcell_support::sandbox_env::PLACEHOLDER_VALUE, as documented.
const PLACEHOLDER: &str = "wardcell-placeholder-not-a-secret";

/// The agents' npm packages, installed once per test process where every uid can read
/// them; None (said once on stderr) where npm or the registry is not there.
fn agents() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = wardcell_tests::staged().root.join("agents");
        fs::create_dir_all(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        let out = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund"])
            .args(["--prefix", dir.to_str().unwrap(), CLAUDE_CODE, CODEX])
            .stdin(Stdio::null())
            .output();
        let bins = ["claude", "codex"].map(|b| dir.join("node_modules/.bin").join(b));
        match out {
            Ok(o) if o.status.success() && bins.iter().all(|b| b.exists()) => Some(dir),
            Ok(o) => {
                wardcell_tests::skipped(&format!(
                    "the agents could not be installed from the npm registry ({}): {}",
                    o.status,
                    String::from_utf8_lossy(&o.stderr).trim()
                ));
                None
            }
            Err(e) => {
                wardcell_tests::skipped(&format!(
                    "npm is not installed ({e}); the agents were not tried"
                ));
                None
            }
        }
    })
    .as_deref()
}

/// The stand-in model API: HTTPS on port 443 of a loopback address of its own, with a
/// certificate for both APIs' names from a CA of its own, every request logged with the
/// key it carried.
struct ModelApi {
    child: Child,
    _lifeline: Option<std::process::ChildStdin>,
    log: PathBuf,
    /// The CA, readable by every uid: the proxy trusts it through SSL_CERT_FILE.
    ca_pem: PathBuf,
    /// A hosts file naming the APIs at the stand-in's address.
    hosts: PathBuf,
}

impl ModelApi {
    /// None (said on stderr) where port 443 cannot be bound: tests run as root here.
    fn start(fx: &Fixture) -> Option<ModelApi> {
        static NEXT: AtomicU8 = AtomicU8::new(10);
        let addr = format!("127.0.36.{}", NEXT.fetch_add(1, Ordering::SeqCst));
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
        let base = fx.dir.file_name().unwrap().to_str().unwrap().to_string();
        let root = &wardcell_tests::staged().root;
        let dir = root.join(format!("{base}.model-api"));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::default();
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "wardcell stand-in model API CA");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let key = KeyPair::generate().unwrap();
        let names = ["api.anthropic.com", "api.openai.com"].map(String::from);
        let mut params = CertificateParams::new(names.to_vec()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "api.anthropic.com");
        let leaf = params.signed_by(&key, &ca, &ca_key).unwrap();
        fs::write(dir.join("cert.pem"), leaf.pem()).unwrap();
        fs::write(dir.join("key.pem"), key.serialize_pem()).unwrap();
        let ca_pem = root.join(format!("{base}.model-api-ca.pem"));
        fs::write(&ca_pem, ca.pem()).unwrap();
        fs::set_permissions(&ca_pem, fs::Permissions::from_mode(0o644)).unwrap();
        let log = dir.join("requests.jsonl");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/model_api.py");
        let mut child = Command::new("python3")
            .arg(script)
            .args(["--cert", dir.join("cert.pem").to_str().unwrap()])
            .args(["--key", dir.join("key.pem").to_str().unwrap()])
            .args(["--log", log.to_str().unwrap()])
            .args(["--addr", &addr, "--port", "443"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(fs::File::create(dir.join("server.stderr")).unwrap())
            .spawn()
            .expect("start the stand-in model API");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        if line.trim() != "PORT 443" {
            let _ = child.kill();
            let _ = child.wait();
            let err = fs::read_to_string(dir.join("server.stderr")).unwrap_or_default();
            wardcell_tests::skipped(&format!(
                "the stand-in could not listen on {addr}:443 ({line:?}): {}",
                err.lines().last().unwrap_or_default()
            ));
            return None;
        }
        let hosts = root.join(format!("{base}.hosts"));
        fs::write(
            &hosts,
            format!("127.0.0.1 localhost\n{addr} api.anthropic.com api.openai.com\n"),
        )
        .unwrap();
        fs::set_permissions(&hosts, fs::Permissions::from_mode(0o644)).unwrap();
        Some(ModelApi {
            _lifeline: child.stdin.take(),
            child,
            log,
            ca_pem,
            hosts,
        })
    }

    /// The requests seen so far.
    fn requests(&self) -> Vec<Value> {
        fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for ModelApi {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The agents' own stores on the host, with secrets in them that must stay outside.
fn plant_host_secrets(fx: &Fixture) {
    fx.write(
        &fx.home.join(".claude.json"),
        r#"{"mcpServers":{"db":{"command":"db-mcp","env":{"DB_TOKEN":"planted-mcp-secret"}}}}"#,
    );
    fx.write(
        &fx.home.join(".claude/.credentials.json"),
        r#"{"claudeAiOauth":{"accessToken":"planted-oauth-secret"}}"#,
    );
    fx.write(
        &fx.home.join(".codex/auth.json"),
        r#"{"OPENAI_API_KEY":"planted-auth-secret"}"#,
    );
    // The user's own instructions and settings, which the agents read inside (copied
    // read-only, without what holds secrets or starts a sandbox of the agent's own).
    fx.write(
        &fx.home.join(".claude/CLAUDE.md"),
        "user-instructions-claude\n",
    );
    fx.write(
        &fx.home.join(".claude/settings.json"),
        r#"{"model":"claude-user-choice","env":{"DB_PASSWORD":"planted-settings-secret"},"apiKeyHelper":"planted-helper","sandbox":{"enabled":true}}"#,
    );
    fx.write(
        &fx.home.join(".codex/AGENTS.md"),
        "user-instructions-codex\n",
    );
    fx.write(
        &fx.home.join(".codex/config.toml"),
        "sandbox_mode = \"workspace-write\"\n\n[model_providers.corp]\nname = \"corp\"\nbase_url = \"https://corp.invalid/v1\"\nexperimental_bearer_token = \"planted-provider-token\"\n",
    );
}

/// `wardcell run --profile PROFILE --internal HOST:443 --read AGENTS -- sh -c SCRIPT`,
/// with nothing but `keys` (and the stand-in's CA, for the proxy) in the environment,
/// where the APIs' names lead to the stand-in.
fn run_agent(
    fx: &Fixture,
    api: &ModelApi,
    agents: &Path,
    profile: &str,
    host: &str,
    script: &str,
    keys: &[(&str, &str)],
) -> Out {
    let internal = format!("{host}:443");
    let args = [
        "run",
        "--profile",
        profile,
        "--internal",
        &internal,
        "--read",
        agents.to_str().unwrap(),
        "--",
        "/bin/sh",
        "-c",
        script,
    ];
    fx.cmd_with_hosts(&api.hosts, &args)
        .env("SSL_CERT_FILE", &api.ca_pem)
        .envs(keys.iter().copied())
        .output()
        .expect("spawn wardcell")
        .into()
}

/// What the agent's session left in the sandbox's own state directory: everything is
/// there, nothing in the host's directories of the agent.
fn assert_state_kept_apart(fx: &Fixture, agent: &str, host_dir: &str) {
    let own = fx.home.join(".local/share/wardcell").join(agent);
    assert!(
        fs::read_dir(&own).map(|d| d.count()).unwrap_or(0) > 0,
        "{agent} kept nothing in {}",
        own.display()
    );
    let mode = fs::metadata(&own).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "{}", own.display());
    let mut host: Vec<String> = fs::read_dir(fx.home.join(host_dir))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    host.sort();
    let planted = if host_dir == ".claude" {
        vec![".credentials.json", "CLAUDE.md", "settings.json"]
    } else {
        vec!["AGENTS.md", "auth.json", "config.toml"]
    };
    assert_eq!(host, planted, "the host's ~/{host_dir} changed");
}

/// What every agent run shows: the key stayed outside, the tool ran in the project,
/// the reply came after it, nothing planted leaked, and nothing was refused.
fn assert_tool_turn(fx: &Fixture, out: &Out) {
    out.ok();
    assert!(
        out.stdout.contains(&format!("key={PLACEHOLDER}")),
        "{out:#?}"
    );
    assert!(out.stdout.contains(REPLY), "{out:#?}");
    assert!(
        out.stdout.contains("(tool: "),
        "no reply after the tool ran: {out:#?}"
    );
    assert_eq!(
        fs::read_to_string(fx.proj.join("tool-output.txt")).unwrap_or_default(),
        "wardcell-tool-ran\n",
        "{out:#?}"
    );
    assert!(!out.stdout.contains("planted"), "{out:#?}");
    assert!(!out.stdout.contains("\nread "), "{out:#?}");
    assert!(!out.stderr.contains("refused"), "{out:#?}");
}

// Claude Code in `claude-code`, no zones.toml, the key in ANTHROPIC_API_KEY alone: one
// tool-calling turn against api.anthropic.com. The key reaches the server in place of
// the placeholder; inside, the host's ~/.claude.json (MCP servers' secrets) and
// ~/.claude are unreadable, the user's CLAUDE.md and settings are there read-only
// (settings without `env`, `apiKeyHelper` or `sandbox`), and the session is kept under
// ~/.local/share/wardcell/claude.
both!(claude_code_takes_a_turn_with_only_its_key, |fx| {
    let Some(agents) = agents() else { return };
    let Some(api) = ModelApi::start(&fx) else {
        return;
    };
    plant_host_secrets(&fx);
    let claude = agents.join("node_modules/.bin/claude");
    let key = format!("sk-ant-test-{}", std::process::id());
    let script = format!(
        "echo \"key=$ANTHROPIC_API_KEY\"\n\
         echo \"config=$CLAUDE_CONFIG_DIR\"\n\
         for f in ~/.claude.json ~/.claude/.credentials.json ~/.claude/CLAUDE.md; do cat \"$f\" 2>/dev/null && echo \"read $f\"; done\n\
         cat \"$CLAUDE_CONFIG_DIR/CLAUDE.md\" \"$CLAUDE_CONFIG_DIR/settings.json\"\n\
         echo x 2>/dev/null >> \"$CLAUDE_CONFIG_DIR/CLAUDE.md\" && echo wrote-instructions\n\
         {claude} --version\n\
         {claude} -p '{TOOL_TURN}' --allowedTools Bash\n",
        claude = claude.display(),
    );
    let keys = [("ANTHROPIC_API_KEY", key.as_str())];
    let out = run_agent(
        &fx,
        &api,
        agents,
        "claude-code",
        "api.anthropic.com",
        &script,
        &keys,
    );
    assert_tool_turn(&fx, &out);
    assert!(out.stdout.contains("(Claude Code)"), "{out:#?}");
    assert!(out.stdout.contains("user-instructions-claude"), "{out:#?}");
    assert!(out.stdout.contains("claude-user-choice"), "{out:#?}");
    assert!(!out.stdout.contains("wrote-instructions"), "{out:#?}");
    let own = fx.home.join(".local/share/wardcell/claude");
    assert!(
        out.stdout.contains(&format!("config={}", own.display())),
        "{out:#?}"
    );
    let turns: Vec<Value> = api
        .requests()
        .into_iter()
        .filter(|r| r["path"].as_str().unwrap().starts_with("/v1/messages"))
        .collect();
    assert!(
        turns.len() >= 2,
        "the tool's result did not come back: {turns:?}"
    );
    for t in &turns {
        assert_eq!(t["x_api_key"], Value::from(key.as_str()), "{turns:?}");
    }
    assert_state_kept_apart(&fx, "claude", ".claude");
    assert!(!fs::read_to_string(fx.home.join(".claude.json"))
        .unwrap()
        .contains("numStartups"));
});

// Codex in `codex`, the same way against api.openai.com, with a bearer key. It talks
// over the Responses WebSocket (the upgrade passes the proxy, key attached), never
// falls back to HTTPS, and never tries a sandbox of its own: wardcell's config.toml for
// it says danger-full-access, over the user's workspace-write, and keeps the user's
// settings without the provider's token.
both!(codex_takes_a_turn_with_only_its_key, |fx| {
    let Some(agents) = agents() else { return };
    let Some(api) = ModelApi::start(&fx) else {
        return;
    };
    plant_host_secrets(&fx);
    let codex = agents.join("node_modules/.bin/codex");
    let key = format!("sk-oai-test-{}", std::process::id());
    let script = format!(
        "echo \"key=$OPENAI_API_KEY\"\n\
         echo \"home=$CODEX_HOME\"\n\
         for f in ~/.codex/auth.json ~/.codex/config.toml ~/.codex/AGENTS.md; do cat \"$f\" 2>/dev/null && echo \"read $f\"; done\n\
         cat \"$CODEX_HOME/AGENTS.md\" \"$CODEX_HOME/config.toml\"\n\
         {codex} --version\n\
         {codex} exec --skip-git-repo-check '{TOOL_TURN}' </dev/null\n",
        codex = codex.display(),
    );
    let keys = [("OPENAI_API_KEY", key.as_str())];
    let out = run_agent(&fx, &api, agents, "codex", "api.openai.com", &script, &keys);
    assert_tool_turn(&fx, &out);
    assert!(out.stdout.contains("codex-cli "), "{out:#?}");
    assert!(out.stdout.contains("user-instructions-codex"), "{out:#?}");
    assert!(
        out.stdout.contains("sandbox_mode = \"danger-full-access\""),
        "{out:#?}"
    );
    assert!(out.stdout.contains("https://corp.invalid/v1"), "{out:#?}");
    assert!(!out.stdout.contains("workspace-write"), "{out:#?}");
    let all = format!("{}{}", out.stdout, out.stderr);
    assert!(!all.contains("Falling back from WebSockets"), "{out:#?}");
    assert!(!all.contains("sandbox: workspace-write"), "{out:#?}");
    let own = fx.home.join(".local/share/wardcell/codex");
    assert!(
        out.stdout.contains(&format!("home={}", own.display())),
        "{out:#?}"
    );
    let turns: Vec<Value> = api
        .requests()
        .into_iter()
        .filter(|r| r["path"] == "/v1/responses")
        .collect();
    assert!(
        turns
            .iter()
            .filter(|t| t["transport"] == "websocket")
            .count()
            >= 2,
        "the turn did not go over the WebSocket: {turns:?}"
    );
    for t in &turns {
        assert_eq!(
            t["authorization"],
            Value::from(format!("Bearer {key}")),
            "{turns:?}"
        );
    }
    assert_state_kept_apart(&fx, "codex", ".codex");
});

// Without the key, the run is refused before anything starts, in one line that names
// the variable it looked for (no agent needed).
both!(an_agent_profile_without_its_key_says_which_variable, |fx| {
    for (profile, var) in [
        ("claude-code", "ANTHROPIC_API_KEY"),
        ("codex", "OPENAI_API_KEY"),
    ] {
        let marker = fx.proj.join("ran");
        let script = format!("touch {}", marker.display());
        let out = fx.run(&["run", "--profile", profile, "--", "/bin/sh", "-c", &script]);
        out.expect_code(1);
        assert_eq!(out.stderr.lines().count(), 1, "{out:#?}");
        assert!(out.stderr.starts_with("error: "), "{out:#?}");
        assert!(
            out.stderr
                .contains(&format!("environment variable {var}, which is not set")),
            "{out:#?}"
        );
        assert!(!marker.exists());
    }
});

/// Secrets `developer-readonly` masks, by path under the home directory.
const MASKED: &[&str] = &[
    ".claude/.credentials.json",
    ".codex/auth.json",
    ".claude.json",
    ".claude/settings.json",
    ".claude/settings.local.json",
    ".codex/config.toml",
    ".config/anthropic/key",
    ".config/openai/key",
    ".gemini/oauth_creds.json",
    ".local/share/opencode/auth.json",
    ".vault-token",
    ".pgpass",
    ".my.cnf",
    ".terraform.d/credentials.tfrc.json",
    ".s3cfg",
    ".boto",
    ".config/rclone/rclone.conf",
    ".config/hub",
    ".bash_history",
    ".zsh_history",
    ".zhistory",
    ".histfile",
    ".sh_history",
    ".local/share/fish/fish_history",
    ".python_history",
    ".node_repl_history",
    ".psql_history",
    ".mysql_history",
    ".sqlite_history",
    ".rediscli_history",
    ".lesshst",
];

// In the default zone (the built-in `developer-readonly`), every secret above is
// unreadable, by path and by a search of the home directory; a file beside them is read.
both!(
    developer_readonly_masks_agent_logins_secrets_and_histories,
    |fx| {
        for rel in MASKED {
            fx.write(&fx.home.join(rel), &format!("planted-secret {rel}\n"));
        }
        fx.write(&fx.home.join(".bashrc"), "not-a-secret\n");
        fx.write(&fx.home.join(".codex/AGENTS.md"), "not-a-secret\n");
        let out = fx.sh("cat ~/.bashrc ~/.codex/AGENTS.md; \
         grep -r planted-secret ~ 2>/dev/null; \
         for f in ~/.vault-token ~/.bash_history ~/.claude/.credentials.json; do \
           cat \"$f\" 2>&1; done; true");
        out.ok();
        assert_eq!(out.stdout.matches("not-a-secret").count(), 2, "{out:#?}");
        assert!(!out.stdout.contains("planted-secret"), "{out:#?}");
        // Held by the view's own directories, a mask in the home is not there at all.
        assert_eq!(
            out.stdout.matches("No such file or directory").count(),
            3,
            "{out:#?}"
        );
    }
);

// Each agent profile is shown by `policy show --profile` with the built-in default
// configuration (no file): its own state directory writable, the host's masked, its
// API host, its environment; `package-managers` its caches and registries.
both!(agent_profiles_are_shown_without_a_configuration, |fx| {
    for (name, want) in [
        (
            "claude-code",
            &[
                ".local/share/wardcell/claude",
                "api.anthropic.com:443",
                "CLAUDE_CONFIG_DIR",
                ".claude.json",
            ][..],
        ),
        (
            "codex",
            &[
                ".local/share/wardcell/codex",
                "api.openai.com:443",
                "CODEX_HOME",
            ][..],
        ),
        (
            "package-managers",
            &[
                "registry.npmjs.org:443",
                "pypi.org:443",
                "index.crates.io:443",
            ][..],
        ),
    ] {
        let out = fx.run(&["policy", "show", "--profile", name, "--output", "json"]);
        out.ok();
        for w in want {
            assert!(out.stdout.contains(w), "{name}: {w} missing; {out:#?}");
        }
    }
    // Nothing is made by showing: only `run` makes the state directories.
    assert!(!fx.home.join(".local/share/wardcell").exists());
});

// A link where sandboxes keep their state (which a sandbox that writes ~/.local/share
// could plant) is refused, in words, before anything starts: followed, it would give
// the agent's sandbox the directory it points at (here git's configuration).
both!(a_linked_state_directory_is_refused, |fx| {
    fx.test_config("");
    let git = fx.home.join(".config/git");
    fx.write(&git.join("config"), "[core]\n");
    let share = fx.home.join(".local/share");
    std::fs::create_dir_all(&share).unwrap();
    std::os::unix::fs::symlink(&git, share.join("wardcell")).unwrap();
    fx.own(&fx.home);
    let out = fx.run(&["run", "--profile", "claude-code", "--", "/bin/true"]);
    out.expect_code(1);
    assert!(
        out.stderr
            .contains("is a symbolic link; sandboxes keep their state under"),
        "{out:#?}"
    );
    assert_eq!(
        std::fs::read_to_string(git.join("config")).unwrap(),
        "[core]\n"
    );
});
