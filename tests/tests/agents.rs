//! The built-in agent profiles with the real agents: Claude Code and Codex, installed
//! from the npm registry, each take one non-interactive turn inside its profile against
//! a stand-in for its model API on loopback (`tests/fixtures/model_api.py`). The key
//! exists only outside: the sandbox holds the placeholder, the server sees the key.
//! Where the registry cannot be reached, the tests that need the agents say so on
//! stderr and end there. The secrets `developer-readonly` masks are tried without any.

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use serde_json::Value;
use wardcell_tests::{both, Fixture, Out};

/// The versions these tests were written against (README, "Coding agents").
const CLAUDE_CODE: &str = "@anthropic-ai/claude-code@2.1.197";
const CODEX: &str = "@openai/codex@0.171.0";
/// What the stand-in answers every turn with.
const REPLY: &str = "wardcell-stand-in-reply";
/// wardcell_common::plan::PLACEHOLDER_VALUE, as documented.
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

/// The stand-in model API: HTTPS on 127.0.0.1 with a certificate for `localhost` from a
/// CA of its own, every request logged with the key it carried.
struct ModelApi {
    child: Child,
    _lifeline: Option<std::process::ChildStdin>,
    port: u16,
    log: PathBuf,
    /// The CA, readable by every uid: the proxy trusts it through SSL_CERT_FILE.
    ca_pem: PathBuf,
}

impl ModelApi {
    fn start(fx: &Fixture) -> ModelApi {
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
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
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
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(fs::File::create(dir.join("server.stderr")).unwrap())
            .spawn()
            .expect("start the stand-in model API");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .strip_prefix("PORT ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("the stand-in did not start: {line:?}"));
        ModelApi {
            _lifeline: child.stdin.take(),
            child,
            port,
            log,
            ca_pem,
        }
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

/// Zones `claude` and `codex`, each under a profile that extends the built-in one with
/// the stand-in's address and a credential for it, as README's recipe does for the
/// real API hosts.
fn agent_config(fx: &Fixture, agents: &Path, api: &ModelApi) {
    let port = api.port;
    let agents = agents.display();
    fx.config(&format!(
        r#"
[zones.agent]
profile = "developer-readonly"
default = true

[zones.claude]
profile = "my-claude"
authenticated = true

[zones.codex]
profile = "my-codex"
authenticated = true

[profiles.my-claude]
extends = "claude-code"
read = ["{agents}"]
network = {{ allow = ["localhost:{port}"] }}
credentials = ["anthropic"]

[profiles.my-codex]
extends = "codex"
read = ["{agents}"]
network = {{ allow = ["localhost:{port}"] }}
credentials = ["openai"]

[credentials.anthropic]
hosts = ["localhost:{port}", "api.anthropic.com"]
paths = ["/v1/*"]
methods = ["GET", "POST"]
scheme = "header"
header = "x-api-key"
placeholder = "ANTHROPIC_API_KEY"
secret = {{ env = "ANTHROPIC_API_KEY" }}

[credentials.openai]
hosts = ["localhost:{port}", "api.openai.com"]
paths = ["/v1/*"]
methods = ["GET", "POST"]
scheme = "bearer"
placeholder = "OPENAI_API_KEY"
secret = {{ env = "OPENAI_API_KEY" }}
"#
    ));
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
    fx.write(
        &fx.home.join(".codex/config.toml"),
        "notify = [\"planted\"]\n",
    );
}

fn run_in(fx: &Fixture, api: &ModelApi, zone: &str, script: &str, keys: &[(&str, &str)]) -> Out {
    fx.cmd(&["run", "--zone", zone, "--", "/bin/sh", "-c", script])
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
        vec![".credentials.json"]
    } else {
        vec!["auth.json", "config.toml"]
    };
    assert_eq!(host, planted, "the host's ~/{host_dir} changed");
}

// Claude Code in `claude-code`: `--version`, then one turn. The key reaches the server
// through the placeholder; inside, the host's ~/.claude.json (MCP servers' secrets) and
// ~/.claude are unreadable, and the session is kept under ~/.local/share/wardcell/claude.
both!(claude_code_takes_a_turn_with_its_key_outside, |fx| {
    let Some(agents) = agents() else { return };
    let api = ModelApi::start(&fx);
    agent_config(&fx, agents, &api);
    plant_host_secrets(&fx);
    let claude = agents.join("node_modules/.bin/claude");
    let key = format!("sk-ant-test-{}", std::process::id());
    let script = format!(
        "echo \"key=$ANTHROPIC_API_KEY\"\n\
         echo \"config=$CLAUDE_CONFIG_DIR\"\n\
         for f in ~/.claude.json ~/.claude/.credentials.json; do cat \"$f\" 2>/dev/null && echo \"read $f\"; done\n\
         {claude} --version\n\
         ANTHROPIC_BASE_URL=https://localhost:{port} {claude} -p 'Say hello.'\n",
        claude = claude.display(),
        port = api.port,
    );
    let out = run_in(&fx, &api, "claude", &script, &[("ANTHROPIC_API_KEY", &key)]);
    out.ok();
    assert!(
        out.stdout.contains(&format!("key={PLACEHOLDER}")),
        "{out:#?}"
    );
    assert!(out.stdout.contains("(Claude Code)"), "{out:#?}");
    assert!(out.stdout.contains(REPLY), "{out:#?}");
    assert!(!out.stdout.contains("planted"), "{out:#?}");
    assert!(!out.stdout.contains("\nread "), "{out:#?}");
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
    assert!(!turns.is_empty(), "no turn reached the stand-in");
    for t in &turns {
        assert_eq!(t["x_api_key"], Value::from(key.as_str()), "{turns:?}");
    }
    assert_state_kept_apart(&fx, "claude", ".claude");
    assert!(!fs::read_to_string(fx.home.join(".claude.json"))
        .unwrap()
        .contains("numStartups"));
});

// Codex in `codex`, the same way, over the Responses API with a bearer key.
both!(codex_takes_a_turn_with_its_key_outside, |fx| {
    let Some(agents) = agents() else { return };
    let api = ModelApi::start(&fx);
    agent_config(&fx, agents, &api);
    plant_host_secrets(&fx);
    let codex = agents.join("node_modules/.bin/codex");
    let key = format!("sk-oai-test-{}", std::process::id());
    let script = format!(
        "echo \"key=$OPENAI_API_KEY\"\n\
         echo \"home=$CODEX_HOME\"\n\
         for f in ~/.codex/auth.json ~/.codex/config.toml; do cat \"$f\" 2>/dev/null && echo \"read $f\"; done\n\
         {codex} --version\n\
         {codex} exec --skip-git-repo-check --sandbox danger-full-access \
           -c model_provider=standin -c model_providers.standin.name=standin \
           -c 'model_providers.standin.base_url=\"https://localhost:{port}/v1\"' \
           -c model_providers.standin.env_key=OPENAI_API_KEY 'Say hello.' </dev/null\n",
        codex = codex.display(),
        port = api.port,
    );
    let out = run_in(&fx, &api, "codex", &script, &[("OPENAI_API_KEY", &key)]);
    out.ok();
    assert!(
        out.stdout.contains(&format!("key={PLACEHOLDER}")),
        "{out:#?}"
    );
    assert!(out.stdout.contains("codex-cli "), "{out:#?}");
    assert!(out.stdout.contains(REPLY), "{out:#?}");
    assert!(!out.stdout.contains("planted"), "{out:#?}");
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
    assert!(!turns.is_empty(), "no turn reached the stand-in");
    for t in &turns {
        assert_eq!(
            t["authorization"],
            Value::from(format!("Bearer {key}")),
            "{turns:?}"
        );
    }
    assert_state_kept_apart(&fx, "codex", ".codex");
});

/// Secrets `developer-readonly` masks, by path under the home directory.
const MASKED: &[&str] = &[
    ".claude/.credentials.json",
    ".codex/auth.json",
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
        fx.write(&fx.home.join(".codex/config.toml"), "not-a-secret\n");
        let out = fx.sh("cat ~/.bashrc ~/.codex/config.toml; \
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
