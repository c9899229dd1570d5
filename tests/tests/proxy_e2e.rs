//! Each zone's proxy end to end, in real sandboxes: real `git`, real `curl`, and a real
//! HTTPS server on 127.0.0.1 (tests/fixtures/git_https_server.py, serving a bare
//! repository through `git http-backend` behind HTTP basic auth). Run as the invoking
//! user and as an unprivileged uid.
//!
//! The server and its certificates belong to the invoking user and live outside
//! everything a sandbox may read; `wardcell run` is started with SSL_CERT_FILE naming the
//! test CA (so that the proxy trusts the server) and with the token in the variable the
//! credential reads.
//!
//! The server is `localhost` on the host. Inside, loopback is the sandbox's own, so
//! NO_PROXY names `localhost,127.0.0.1,::1` except what the zone's allow list names: the
//! zones here allow `localhost:PORT`, so their clients send it to the proxy as they are.

use std::collections::BTreeSet;
use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::Value;
use sha2::{Digest, Sha256};
use wardcell_tests::{both, Fixture, Out};

/// The credential's name in the test config.
const CRED: &str = "git";
/// Where the server keeps its repository, relative to GIT_PROJECT_ROOT.
const REPO_PATH: &str = "/repo.git";

// ---------------------------------------------------------------------------
// Host tools
// ---------------------------------------------------------------------------

/// `name` on the test process's PATH, then in the usual places.
fn which(name: &str) -> PathBuf {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .filter(|d| !d.is_empty())
        .chain(["/usr/local/bin", "/usr/bin", "/bin"])
        .map(|d| Path::new(d).join(name))
        .find(|p| {
            p.metadata()
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
        .unwrap_or_else(|| panic!("`{name}` is needed for these tests and is not installed"));
    found
}

/// The git every part of a test uses: on the host, for the server, and inside (it must
/// be somewhere a sandbox reads, which /usr is).
fn git() -> &'static Path {
    static GIT: OnceLock<PathBuf> = OnceLock::new();
    GIT.get_or_init(|| {
        let g = which("git");
        let g = fs::canonicalize(&g).unwrap_or(g);
        assert!(
            g.starts_with("/usr") || g.starts_with("/bin"),
            "git at {} is outside what a sandbox may read",
            g.display()
        );
        g
    })
}

/// A system python3 (the server runs on the host, as the invoking user).
fn python() -> PathBuf {
    let system = Path::new("/usr/bin/python3");
    if system.is_file() {
        system.to_path_buf()
    } else {
        which("python3")
    }
}

fn fixture_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/git_https_server.py")
}

/// PATH for `wardcell run` and everything inside: the staged binaries, then git's
/// directory, then the system's.
fn run_path(fx: &Fixture) -> String {
    format!(
        "{}:{}:/usr/bin:/bin",
        fx.bin.display(),
        git().parent().unwrap().display()
    )
}

/// Run a command on the host and return its stdout; panic with everything on failure.
#[track_caller]
fn host(cmd: &mut Command) -> String {
    let out = cmd.stdin(Stdio::null()).output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// git on the host, as the invoking user, without anybody's config.
fn host_git(dir: &Path) -> Command {
    let mut c = Command::new(git());
    c.current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .args([
            "-c",
            "user.name=wardcell e2e",
            "-c",
            "user.email=e2e@wardcell.invalid",
        ])
        // The project may already belong to the fixture's uid.
        .args(["-c", "safe.directory=*"]);
    c
}

/// A token no test shares with another.
fn fresh_token() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    format!(
        "e2eTok{:012x}q{:06x}z{}",
        nanos & 0xffff_ffff_ffff,
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Bytes that do not compress (so a push of them is large on the wire).
fn noise(len: usize, mut seed: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        v.extend_from_slice(&seed.to_le_bytes());
    }
    v.truncate(len);
    v
}

fn sha256_hex(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

/// A port nothing listens on right now (a listener bound and dropped).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A name from this machine's hosts file that maps to a loopback address and is not
/// `localhost` (for example `vm` or `runsc` on the CI machine), if there is one.
fn hosts_file_loopback_name() -> Option<String> {
    let hosts = fs::read_to_string("/etc/hosts").ok()?;
    hosts
        .lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let ip: std::net::IpAddr = f.next()?.parse().ok()?;
            ip.is_loopback()
                .then(|| f.map(str::to_string).collect::<Vec<_>>())
        })
        .flatten()
        .find(|n| {
            let lower = n.to_ascii_lowercase();
            lower != "localhost"
                && !lower.starts_with("localhost.")
                && !lower.ends_with(".localhost")
                && n.split('.').all(|label| {
                    !label.is_empty()
                        && label
                            .bytes()
                            .all(|c| c.is_ascii_alphanumeric() || c == b'-')
                        && !label.starts_with('-')
                        && !label.ends_with('-')
                })
        })
}

// ---------------------------------------------------------------------------
// The upstream: a TLS server with a bare repository, run as the invoking user
// ---------------------------------------------------------------------------

struct Upstream {
    child: Child,
    /// Held open for the server's lifetime (see `--exit-on-stdin-eof`).
    _lifeline: Option<std::process::ChildStdin>,
    port: u16,
    /// The server's own directory (0700, the invoking user's): key, log, repository.
    dir: PathBuf,
    /// The test CA, readable by the fixture's uid; outside what a sandbox reads.
    ca_pem: PathBuf,
    ca_text: String,
    token: String,
    stderr: PathBuf,
}

impl Upstream {
    fn start(fx: &Fixture) -> Upstream {
        Upstream::start_for(fx, &["localhost"])
    }

    /// A server whose certificate names `names` (and 127.0.0.1), serving the directory
    /// `files()` under /files/.
    fn start_for(fx: &Fixture, names: &[&str]) -> Upstream {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
        // Beside the fixture, not in it: the harness gives everything in a fixture to
        // its uid, and this belongs to the invoking user.
        let base = fx.dir.file_name().unwrap().to_str().unwrap().to_string();
        let root = &wardcell_tests::staged().root;
        let dir = root.join(format!("{base}.upstream"));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("srv")).unwrap();
        fs::create_dir_all(dir.join("uploads")).unwrap();
        fs::create_dir_all(dir.join("files")).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();

        // A CA and a certificate for `names` signed by it.
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::default();
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "wardcell e2e upstream CA");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let key = KeyPair::generate().unwrap();
        let mut sans: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        sans.push("127.0.0.1".to_string());
        let mut params = CertificateParams::new(sans).unwrap();
        params.distinguished_name.push(DnType::CommonName, names[0]);
        let leaf = params.signed_by(&key, &ca, &ca_key).unwrap();
        fs::write(dir.join("cert.pem"), leaf.pem()).unwrap();
        fs::write(dir.join("key.pem"), key.serialize_pem()).unwrap();
        let ca_text = ca.pem();
        let ca_pem = root.join(format!("{base}.upstream-ca.pem"));
        fs::write(&ca_pem, &ca_text).unwrap();
        fs::set_permissions(&ca_pem, fs::Permissions::from_mode(0o644)).unwrap();

        host(host_git(&dir.join("srv")).args(["init", "-q", "--bare", "repo.git"]));

        let exec_path = host(host_git(&dir).arg("--exec-path"));
        let backend = Path::new(exec_path.trim()).join("git-http-backend");
        assert!(backend.is_file(), "{} is missing", backend.display());

        let token = fresh_token();
        let stderr = dir.join("server.stderr");
        let mut child = Command::new(python())
            .arg(fixture_script())
            .args(["--cert", dir.join("cert.pem").to_str().unwrap()])
            .args(["--key", dir.join("key.pem").to_str().unwrap()])
            .args(["--root", dir.join("srv").to_str().unwrap()])
            .args(["--backend", backend.to_str().unwrap()])
            .args(["--log", dir.join("requests.jsonl").to_str().unwrap()])
            .args(["--uploads", dir.join("uploads").to_str().unwrap()])
            .args(["--files", dir.join("files").to_str().unwrap()])
            .env_clear()
            .env(
                "PATH",
                format!("{}:/usr/bin:/bin", git().parent().unwrap().display()),
            )
            .env("WARDCELL_TEST_GIT_TOKEN", &token)
            // If this test process dies without dropping the Upstream, the pipe closes
            // and the server exits.
            .arg("--exit-on-stdin-eof")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("start the test server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .strip_prefix("PORT ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "the test server did not start: {line:?}\n{}",
                    fs::read_to_string(&stderr).unwrap_or_default()
                )
            });
        Upstream {
            _lifeline: child.stdin.take(),
            child,
            port,
            dir,
            ca_pem,
            ca_text,
            token,
            stderr,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.port)
    }

    fn bare(&self) -> PathBuf {
        self.dir.join("srv/repo.git")
    }

    /// What the server's `main` points at, if it exists.
    fn main_ref(&self) -> Option<String> {
        let out = host_git(&self.bare())
            .args(["rev-parse", "--verify", "-q", "refs/heads/main"])
            .output()
            .unwrap();
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// The Authorization header the credential should produce.
    fn basic(&self) -> String {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD
                .encode(format!("x-access-token:{}", self.token))
        )
    }

    /// The token and its encoded form: what must appear nowhere.
    fn secrets(&self) -> [String; 2] {
        [
            self.token.clone(),
            base64::engine::general_purpose::STANDARD
                .encode(format!("x-access-token:{}", self.token)),
        ]
    }

    /// Every request the server has seen, in order.
    fn requests(&self) -> Vec<Value> {
        fs::read_to_string(self.dir.join("requests.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line from the server"))
            .collect()
    }

    fn requests_to(&self, prefix: &str) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|r| r["path"].as_str().unwrap_or("").starts_with(prefix))
            .collect()
    }

    fn server_stderr(&self) -> String {
        fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------
// The project, the config, and running wardcell
// ---------------------------------------------------------------------------

/// A git repository in the project with one commit (a README and 3 MiB of noise, so
/// that git sends the pack chunked) and `origin` at the test server. Returns the commit.
fn project(fx: &Fixture, up: &Upstream) -> String {
    fs::write(fx.proj.join("README"), "wardcell e2e\n").unwrap();
    fs::write(
        fx.proj.join("big.bin"),
        noise(3 << 20, 0x9e37_79b9_7f4a_7c15),
    )
    .unwrap();
    host(host_git(&fx.proj).args(["init", "-q", "-b", "main"]));
    host(host_git(&fx.proj).args(["add", "README", "big.bin"]));
    host(host_git(&fx.proj).args(["commit", "-q", "-m", "first"]));
    host(host_git(&fx.proj).args(["remote", "add", "origin", &up.url("/repo.git")]));
    let head = host(host_git(&fx.proj).args(["rev-parse", "HEAD"]))
        .trim()
        .to_string();
    fx.own(&fx.proj);
    head
}

/// Zones: `agent` (default; network to the server, the refused names and nothing else;
/// no credentials), `push` (authenticated, credential `git` for localhost under
/// /repo.git/*, secret from `secret_env`), `offline` (no network), `elsewhere` (network
/// to a host that is not loopback only). A copy of the test CA
/// is put in ~/e2e/ for the commands that check the server's own certificate.
fn config(fx: &Fixture, up: &Upstream, secret_env: &str, loopback_name: Option<&str>) {
    let bin = fx.bin.display();
    let port = up.port;
    let mut agent_allow = vec![format!("localhost:{port}"), format!("127.1:{port}")];
    agent_allow.extend(loopback_name.map(|n| format!("{n}:{port}")));
    let agent_allow = agent_allow
        .iter()
        .map(|a| format!("{a:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    fx.write(&fx.home.join("e2e/upstream-ca.pem"), &up.ca_text);
    fx.config(&format!(
        r#"
[zones.agent]
profile = "dev"
default = true

[zones.push]
profile = "pusher"
description = "Can push to the test git server"
authenticated = true
enter_from = ["agent"]

[zones.offline]
profile = "offline"
enter_from = ["agent"]

[zones.elsewhere]
profile = "elsewhere"
enter_from = ["agent"]

[profiles.dev]
extends = "developer-readonly"
read = ["{bin}"]
network = {{ allow = [{agent_allow}] }}

[profiles.pusher]
extends = "developer-readonly"
read = ["{bin}"]
network = {{ allow = ["localhost:{port}"] }}
credentials = ["{CRED}"]

[profiles.offline]
extends = "developer-readonly"
read = ["{bin}"]

[profiles.elsewhere]
extends = "developer-readonly"
read = ["{bin}"]
network = {{ allow = ["example.invalid:443"] }}

[credentials.{CRED}]
hosts = ["localhost:{port}"]
paths = ["{REPO_PATH}/*"]
scheme = "basic"
username = "x-access-token"
secret = {{ env = "{secret_env}" }}
"#
    ));
}

/// Write a script under ~/e2e/ (readable inside) and return its path.
fn script(fx: &Fixture, name: &str, body: &str) -> String {
    let path = fx.home.join("e2e").join(name);
    fx.write(&path, &format!("#!/bin/sh\n{body}"));
    path.display().to_string()
}

fn runs_dir(fx: &Fixture) -> PathBuf {
    fx.home.join(".local/state/wardcell/runs")
}

fn log_names(fx: &Fixture) -> BTreeSet<String> {
    fs::read_dir(runs_dir(fx))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.ends_with(".jsonl"))
                .collect()
        })
        .unwrap_or_default()
}

/// One `wardcell run -- /bin/sh -c SCRIPT` as the fixture's uid, with SSL_CERT_FILE at
/// the test CA and the token in `secret_env`, killed after 180 s. Returns what it printed
/// and the run's audit log (its lines parsed, and its text).
fn run(fx: &Fixture, up: &Upstream, secret_env: &str, sh: &str) -> (Out, Vec<Value>, String) {
    run_env(fx, up, &[(secret_env, &up.token)], sh)
}

/// [`run`] with more variables in wardcell's environment.
fn run_with(
    fx: &Fixture,
    up: &Upstream,
    secret_env: &str,
    sh: &str,
    vars: &[(&str, &str)],
) -> (Out, Vec<Value>, String) {
    let mut env = vec![(secret_env, up.token.as_str())];
    env.extend_from_slice(vars);
    run_env(fx, up, &env, sh)
}

/// As [`run`], with the variables `env` (secrets among them) instead of the one token.
fn run_env(
    fx: &Fixture,
    up: &Upstream,
    env: &[(&str, &str)],
    sh: &str,
) -> (Out, Vec<Value>, String) {
    let mut cmd = fx.cmd(&["run", "--", "/bin/sh", "-c", sh]);
    cmd.env("PATH", run_path(fx))
        .env("SSL_CERT_FILE", &up.ca_pem)
        .envs(env.iter().copied())
        .env("GIT_TERMINAL_PROMPT", "0");
    run_logged(fx, cmd)
}

/// Run `cmd` (a `wardcell run`), killed after 180 s; return what it printed and the
/// run's audit log (its lines parsed, and its text).
fn run_logged(fx: &Fixture, mut cmd: Command) -> (Out, Vec<Value>, String) {
    let before = log_names(fx);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let out = output_within(cmd, Duration::from_secs(180));
    let after = log_names(fx);
    let new: Vec<_> = after.difference(&before).collect();
    assert_eq!(
        new.len(),
        1,
        "expected one new run log, got {new:?}; {out:#?}"
    );
    let text = fs::read_to_string(runs_dir(fx).join(new[0])).unwrap();
    let lines = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line in the audit log"))
        .collect();
    (out, lines, text)
}

fn output_within(mut cmd: Command, limit: Duration) -> Out {
    let mut child = cmd.spawn().expect("spawn wardcell");
    // At most 128 MiB of each stream is kept (the rest is read and dropped), so that a
    // runaway command cannot take the test's memory.
    const KEEP: usize = 128 << 20;
    let pipe = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut r) = r {
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    match r.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            let room = KEEP.saturating_sub(v.len());
                            v.extend_from_slice(&buf[..n.min(room)]);
                        }
                    }
                }
            }
            v
        })
    };
    let so = pipe(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let se = pipe(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = String::from_utf8_lossy(&so.join().unwrap()).into_owned();
    let stderr = String::from_utf8_lossy(&se.join().unwrap()).into_owned();
    let Some(status) = status else {
        panic!("wardcell run took longer than {limit:?}\nstdout: {stdout}\nstderr: {stderr}");
    };
    use std::os::unix::process::ExitStatusExt;
    Out {
        code: status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
        stdout,
        stderr,
    }
}

/// The value after `key=` on the line starting with `tag `, e.g. `tag code=403 rc=56`.
#[track_caller]
fn field(out: &Out, tag: &str, key: &str) -> String {
    let prefix = format!("{tag} ");
    out.stdout
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .flat_map(|rest| rest.split_whitespace())
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")).map(str::to_string))
        .unwrap_or_else(|| panic!("no `{tag} ... {key}=` line; {out:#?}"))
}

/// The lines of a `== name` section of a script's output, up to the next `== `.
fn section<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    let head = format!("== {name}");
    text.lines()
        .skip_while(|l| *l != head)
        .skip(1)
        .take_while(|l| !l.starts_with("== "))
        .collect()
}

fn events<'a>(log: &'a [Value], event: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    log.iter().filter(move |l| l["event"] == event)
}

#[track_caller]
fn assert_no_secret(what: &str, text: &str, up: &Upstream) {
    for s in up.secrets() {
        assert!(!text.contains(&s), "the secret ({s}) is in {what}:\n{text}");
    }
}

/// A curl inside, through the proxy, printing `TAG code=.. connect=.. rc=..`.
fn curl_line(tag: &str, args: &str) -> String {
    format!(
        "curl -sS --max-time 30 -o /dev/null -w '{tag} code=%{{http_code}} connect=%{{http_connect}} ' {args}; echo \"rc=$?\"\n"
    )
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

// The sandbox environment: proxy variables where the profile has network (the proxy on
// the sandbox's own loopback), NO_PROXY for the sandbox's loopback names the allow list
// does not claim, a CA bundle only where the proxy intercepts, nothing in a zone
// without network.
both!(proxy_variables_are_set_per_zone, |fx| {
    let up = Upstream::start(&fx);
    config(&fx, &up, "COMPANY_GIT_TOKEN", None);
    let dump = script(
        &fx,
        "dump-env.sh",
        "for v in HTTP_PROXY HTTPS_PROXY http_proxy https_proxy NO_PROXY no_proxy \
           SSL_CERT_FILE CURL_CA_BUNDLE GIT_SSL_CAINFO REQUESTS_CA_BUNDLE NODE_EXTRA_CA_CERTS \
           PIP_CERT NIX_SSL_CERT_FILE CARGO_HTTP_CAINFO npm_config_cafile NPM_CONFIG_CAFILE; do\n\
           eval \"set=\\${$v+yes}\"; eval \"val=\\${$v-}\"\n\
           echo \"$WARDCELL_ZONE $v set=${set:-no} value=$val\"\n\
         done\n\
         if [ -n \"${SSL_CERT_FILE-}\" ]; then\n\
           echo \"$WARDCELL_ZONE bundle certs=$(grep -c 'BEGIN CERTIFICATE' \"$SSL_CERT_FILE\")\"\n\
         fi\n\
         if [ \"$WARDCELL_ZONE\" = agent ]; then\n\
           curl -sS --max-time 30 -o /dev/null -w 'agent tls code=%{http_code} ' \
             https://localhost:$UPSTREAM_PORT/tunnelled-no-cacert; echo \"rc=$?\"\n\
         fi\n",
    );
    let (out, _, _) = run(
        &fx,
        &up,
        "COMPANY_GIT_TOKEN",
        &format!(
            "export UPSTREAM_PORT={port}; sh {dump}; wardcell zone enter push -- sh {dump}; \
             wardcell zone enter offline -- sh {dump}; wardcell zone enter elsewhere -- sh {dump}",
            port = up.port
        ),
    );
    out.ok();

    let proxy_vars = ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"];
    let ca_vars = [
        "SSL_CERT_FILE",
        "CURL_CA_BUNDLE",
        "GIT_SSL_CAINFO",
        "REQUESTS_CA_BUNDLE",
        "NODE_EXTRA_CA_CERTS",
        "PIP_CERT",
        "NIX_SSL_CERT_FILE",
        "CARGO_HTTP_CAINFO",
        "npm_config_cafile",
        "NPM_CONFIG_CAFILE",
    ];
    for zone in ["agent", "push", "elsewhere"] {
        let proxy = field(&out, &format!("{zone} HTTP_PROXY"), "value");
        let port: u16 = proxy
            .strip_prefix("http://127.0.0.1:")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("{zone}: HTTP_PROXY={proxy:?}; {out:#?}"));
        assert_ne!(port, 0);
        for v in proxy_vars {
            assert_eq!(
                field(&out, &format!("{zone} {v}"), "value"),
                proxy,
                "{zone} {v}"
            );
        }
        // Loopback inside is the sandbox's own, except where the allow list names it
        // (`localhost:PORT` here means the host's 127.0.0.1 and ::1, through the proxy).
        let direct = if zone == "elsewhere" {
            "localhost,127.0.0.1,::1"
        } else {
            ""
        };
        for v in ["NO_PROXY", "no_proxy"] {
            assert_eq!(
                field(&out, &format!("{zone} {v}"), "value"),
                direct,
                "{zone} {v}"
            );
        }
    }
    // `wardcell run` was given SSL_CERT_FILE (the test server's CA, as a corporate CA
    // would be): every zone with network gets a bundle of the system's roots and that
    // CA's certificate, named by every CA variable; in `agent` and `elsewhere` nothing
    // is intercepted, so that is all, and a tunnelled TLS connection verifies with it.
    // The push zone's proxy intercepts for its credential's host: the run's CA too.
    for zone in ["agent", "elsewhere", "push"] {
        let bundle = field(&out, &format!("{zone} SSL_CERT_FILE"), "value");
        assert!(bundle.starts_with('/'), "{zone}: {out:#?}");
        for v in ca_vars {
            assert_eq!(
                field(&out, &format!("{zone} {v}"), "value"),
                bundle,
                "{zone} {v}"
            );
        }
        let certs: u32 = field(&out, &format!("{zone} bundle"), "certs")
            .parse()
            .unwrap();
        assert!(certs >= 2, "{zone}: {out:#?}");
    }
    // The test server's CA is in it: curl verified the server through a tunnel.
    assert_eq!(field(&out, "agent tls", "code"), "200", "{out:#?}");
    // No network: no bundle (the variable `wardcell run` was given, if any, as it was).
    let no_bundle = |zone: &str| {
        for v in ca_vars {
            if field(&out, &format!("{zone} {v}"), "set") == "no" {
                continue;
            }
            assert_eq!(v, "SSL_CERT_FILE", "{zone} has {v}: {out:#?}");
            assert_eq!(
                field(&out, &format!("{zone} {v}"), "value"),
                up.ca_pem.display().to_string(),
                "{zone} {v}"
            );
        }
    };
    // No network, no proxy variables and no bundle.
    for v in proxy_vars.iter().chain(&["NO_PROXY", "no_proxy"]) {
        assert_eq!(
            field(&out, &format!("offline {v}"), "set"),
            "no",
            "offline {v}"
        );
    }
    no_bundle("offline");
});

// The headline: `git push` through `zone enter push` reaches git-http-backend with the
// credential the proxy attached; the same push from the agent zone is refused by the
// server (it arrives without credentials) and changes nothing.
both!(git_push_works_through_the_push_zone_only, |fx| {
    let up = Upstream::start(&fx);
    let head = project(&fx, &up);
    config(&fx, &up, "COMPANY_GIT_TOKEN", None);
    let git = git().display();

    // From the agent zone: its proxy tunnels to the server untouched (the agent trusts
    // the server's CA for this), and the server answers 401.
    let (out, log, _) = run(
        &fx,
        &up,
        "COMPANY_GIT_TOKEN",
        &format!(
            "GIT_SSL_CAINFO=$HOME/e2e/upstream-ca.pem {git} push origin HEAD:main; echo \"agent-push rc=$?\""
        ),
    );
    out.ok();
    assert_ne!(field(&out, "agent-push", "rc"), "0", "{out:#?}");
    assert!(
        out.stderr.contains("Authentication failed")
            || out.stderr.contains("could not read Username")
            || out.stderr.contains("401"),
        "the agent's push failed for another reason than missing credentials: {out:#?}\n{}",
        up.server_stderr()
    );
    assert_eq!(up.main_ref(), None, "the agent zone pushed");
    let seen = up.requests_to(REPO_PATH);
    assert!(
        !seen.is_empty(),
        "the agent's push never reached the server: {out:#?}"
    );
    assert!(
        seen.iter().all(|r| r["authorization"].is_null()),
        "a credential reached the server from the agent zone: {seen:#?}"
    );
    assert!(
        events(&log, "proxy.connect").all(|e| e["credential"].is_null()),
        "{log:#?}"
    );

    // Through the push zone: the proxy attaches the credential.
    let before = up.requests().len();
    let (out, _, _) = run(
        &fx,
        &up,
        "COMPANY_GIT_TOKEN",
        &format!("wardcell zone enter push -- {git} push origin HEAD:main; echo \"push rc=$?\""),
    );
    out.ok();
    assert_eq!(
        field(&out, "push", "rc"),
        "0",
        "{out:#?}\nserver: {}",
        up.server_stderr()
    );
    assert_eq!(up.main_ref().as_deref(), Some(head.as_str()), "{out:#?}");
    host(host_git(&up.bare()).args(["fsck", "--strict", "--no-progress"]));
    host(host_git(&up.bare()).args(["cat-file", "-e", &format!("{head}:big.bin")]));
    // Every request of the push carried exactly the credential, and the pack (over
    // 3 MiB of noise) arrived whole.
    let pushed: Vec<_> = up.requests()[before..]
        .iter()
        .filter(|r| r["path"].as_str().unwrap_or("").starts_with(REPO_PATH))
        .cloned()
        .collect();
    assert!(!pushed.is_empty());
    for r in &pushed {
        assert_eq!(
            r["authorization"].as_str(),
            Some(up.basic().as_str()),
            "{r}"
        );
    }
    assert!(
        pushed
            .iter()
            .any(|r| r["path"] == "/repo.git/git-receive-pack"
                && r["body_len"].as_u64().unwrap_or(0) > 3 << 20),
        "{pushed:#?}"
    );
});

// The secret is nowhere a sandboxed process can read: environment, /proc, files under
// home, project and /tmp, in either zone; nor in the run's audit log. The credential
// reads a variable (E2E_GIT_CRED) that no built-in deny pattern covers, so it is the
// credential rule that keeps it out.
both!(the_token_is_nowhere_a_sandbox_can_read, |fx| {
    const VAR: &str = "E2E_GIT_CRED";
    let up = Upstream::start(&fx);
    config(&fx, &up, VAR, None);
    fs::write(fx.proj.join("notes.txt"), "nothing secret here\n").unwrap();
    fx.own(&fx.proj);
    // Everything readable, printed for the host to search (a search inside would put
    // the secret into the searching process's own argv).
    let dump = script(
        &fx,
        "dump.sh",
        "echo \"== env $WARDCELL_ZONE\"; env\n\
         echo \"== proc $WARDCELL_ZONE\"\n\
         n=0\n\
         for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline /proc/self/environ; do\n\
           if { tr '\\0' '\\n' < \"$f\"; } 2>/dev/null; then n=$((n+1)); fi\n\
         done\n\
         echo \"proc-files-read $n\"\n\
         echo \"== files $WARDCELL_ZONE\"\n\
         {\n\
           for d in \"$HOME\" \"$PWD\" /tmp; do\n\
             find \"$d\" -xdev -type f -readable -size -16M 2>/dev/null\n\
           done\n\
           if [ -n \"${SSL_CERT_FILE-}\" ]; then echo \"$SSL_CERT_FILE\"; fi\n\
         } | while IFS= read -r f; do\n\
           echo \"-- $f\"; cat \"$f\" 2>/dev/null; echo\n\
         done | head -c 67108864\n\
         echo\n\
         echo \"== end $WARDCELL_ZONE\"\n",
    );
    let (out, log, log_text) = run(
        &fx,
        &up,
        VAR,
        &format!(
            "echo scratch > /tmp/scratch; \
             wardcell zone enter push -- \
               curl -sS --max-time 30 -o /dev/null -w 'authed code=%{{http_code}}\\n' '{url}'; \
             sh {dump}; wardcell zone enter push -- sh {dump}",
            url = up.url("/repo.git/info/refs?service=git-upload-pack"),
        ),
    );
    out.ok();
    // The credential really was in play: the proxy attached it.
    assert_eq!(field(&out, "authed", "code"), "200", "{out:#?}");
    let got = up.requests_to(REPO_PATH);
    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(got[0]["authorization"].as_str(), Some(up.basic().as_str()));

    for zone in ["agent", "push"] {
        let env = section(&out.stdout, &format!("env {zone}"));
        assert!(
            env.contains(&format!("WARDCELL_ZONE={zone}").as_str()),
            "{out:#?}"
        );
        assert!(
            !env.iter().any(|l| l.starts_with(&format!("{VAR}="))),
            "{VAR} is in zone {zone}'s environment"
        );
        let proc = section(&out.stdout, &format!("proc {zone}"));
        let read: u32 = proc
            .iter()
            .find_map(|l| l.strip_prefix("proc-files-read "))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert!(read >= 3, "the /proc search read {read} files in {zone}");
        let files = section(&out.stdout, &format!("files {zone}"));
        assert!(
            files.iter().any(|l| l.ends_with("/notes.txt")),
            "the file search missed the project in {zone}: {out:#?}"
        );
    }
    assert!(out.stdout.contains("== end push"), "{out:#?}");
    assert_no_secret("what sandboxes could read", &out.stdout, &up);
    assert_no_secret("wardcell's stderr", &out.stderr, &up);
    assert_no_secret("the run's audit log", &log_text, &up);
    assert!(
        events(&log, "proxy.connect").any(|e| e["credential"] == CRED),
        "{log_text}"
    );
});

// WARDCELL_LOG=debug through an authenticated zone: every process traces (the client,
// the broker, each sandbox's shim and each zone's proxy), every line carries the run id
// of the audit log, the variable stays out of the commands' environments, and the
// secret is nowhere in stderr.
both!(
    a_traced_authenticated_run_carries_the_run_id_and_never_the_secret,
    |fx| {
        const VAR: &str = "E2E_GIT_CRED";
        let up = Upstream::start(&fx);
        config(&fx, &up, VAR, None);
        let push = script(
            &fx,
            "push.sh",
            &format!(
                "curl -sS --max-time 30 -o /dev/null -w 'authed code=%{{http_code}}\\n' '{url}'\n\
             echo \"push-log=${{WARDCELL_LOG-unset}}\"\n",
                url = up.url("/repo.git/info/refs?service=git-upload-pack"),
            ),
        );
        let (out, log, log_text) = run_with(
            &fx,
            &up,
            VAR,
            &format!(
                "echo \"agent-log=${{WARDCELL_LOG-unset}}\"; wardcell zone enter push -- sh {push}"
            ),
            &[("WARDCELL_LOG", "debug")],
        );
        out.ok();
        assert_eq!(field(&out, "authed", "code"), "200", "{out:#?}");
        assert!(out.stdout.contains("agent-log=unset"), "{out:#?}");
        assert!(out.stdout.contains("push-log=unset"), "{out:#?}");
        let id = log[0]["run"].as_str().expect("a run id").to_string();
        let traced: Vec<&str> = out
            .stderr
            .lines()
            .filter(|l| l.starts_with("wardcell"))
            .collect();
        for l in &traced {
            assert!(
                l.contains(&format!("] run={id} ")),
                "a trace line without run {id}: {l}\n{}",
                out.stderr
            );
        }
        for process in [
            "wardcell[",
            "wardcell-broker[",
            "wardcell-shim[",
            "wardcell-proxy[",
        ] {
            assert!(
                traced.iter().any(|l| l.starts_with(process)),
                "nothing from {process} in stderr:\n{}",
                out.stderr
            );
        }
        // Both sandboxes' shims and the push zone's credential, by name.
        assert!(
            traced
                .iter()
                .filter(|l| l.starts_with("wardcell-shim[") && l.contains("spec received"))
                .count()
                >= 2,
            "{}",
            out.stderr
        );
        assert!(
            traced.iter().any(|l| l.starts_with("wardcell-proxy[")
                && l.contains(&format!("credentials=[\"{CRED}\"]"))),
            "{}",
            out.stderr
        );
        // The proxy traces while it serves too (confined by then): the request it
        // attached the credential to, by name.
        assert!(
            traced.iter().any(|l| l.starts_with("wardcell-proxy[")
                && l.contains("connection")
                && l.contains(&format!("credential: Some(\"{CRED}\")"))),
            "{}",
            out.stderr
        );
        assert_no_secret("wardcell's traced stderr", &out.stderr, &up);
        assert_no_secret("the run's audit log", &log_text, &up);
    }
);

// A request outside the credential's paths gets no credential, and the push zone's
// proxy really is in the middle for the credential's host (the server's own certificate
// is not what the client sees), while the agent zone's proxy tunnels untouched.
both!(paths_outside_the_credential_get_none, |fx| {
    let up = Upstream::start(&fx);
    config(&fx, &up, "COMPANY_GIT_TOKEN", None);
    let mut inner = String::new();
    for (tag, path) in [
        ("other", "/other"),
        ("prefix", "/repo.gitx/info/refs"),
        ("bare", "/repo.git"),
        ("inside", "/repo.git/info/refs?service=git-upload-pack"),
    ] {
        inner.push_str(&curl_line(tag, &format!("'{}'", up.url(path))));
    }
    inner.push_str(&format!(
        "curl -sS --max-time 30 '{}'\n",
        up.url("/other/body")
    ));
    // With only the server's own CA, the push zone's client rejects what it is shown.
    inner.push_str(&curl_line(
        "own-ca",
        &format!(
            "--cacert \"$HOME/e2e/upstream-ca.pem\" '{}'",
            up.url("/own-ca")
        ),
    ));
    let in_push = script(&fx, "paths.sh", &inner);
    let in_agent = script(
        &fx,
        "agent-tunnel.sh",
        &format!(
            "{}{}",
            curl_line(
                "agent-own-ca",
                &format!(
                    "--cacert \"$HOME/e2e/upstream-ca.pem\" '{}'",
                    up.url("/tunnel")
                )
            ),
            curl_line("agent-system", &format!("'{}'", up.url("/tunnel-system")))
        ),
    );
    let (out, log, _) = run(
        &fx,
        &up,
        "COMPANY_GIT_TOKEN",
        &format!("wardcell zone enter push -- sh {in_push}; sh {in_agent}"),
    );
    out.ok();
    for tag in ["other", "prefix", "inside"] {
        assert_eq!(field(&out, tag, "code"), "200", "{tag}: {out:#?}");
        assert_eq!(field(&out, tag, "rc"), "0", "{tag}: {out:#?}");
    }
    // /repo.git itself is not under /repo.git/*: no credential, so the server says 401.
    assert_eq!(field(&out, "bare", "code"), "401", "{out:#?}");
    assert!(
        out.stdout
            .contains("path /other/body\nauthorization absent\n"),
        "{out:#?}"
    );
    let auth = |p: &str| -> Vec<Value> {
        up.requests()
            .into_iter()
            .filter(|r| r["path"] == p)
            .map(|r| r["authorization"].clone())
            .collect()
    };
    for p in ["/other", "/repo.gitx/info/refs", "/repo.git", "/other/body"] {
        assert_eq!(auth(p), vec![Value::Null], "{p}");
    }
    assert_eq!(auth("/repo.git/info/refs"), vec![Value::from(up.basic())]);
    // Intercepted: the push zone is shown the proxy's certificate, not the server's.
    assert_ne!(field(&out, "own-ca", "rc"), "0", "{out:#?}");
    assert!(auth("/own-ca").is_empty());
    // Tunnelled: the agent zone sees the server's certificate, and without --cacert it
    // verifies it with the bundle the run's own SSL_CERT_FILE (the server's CA, as a
    // corporate CA would be) went into.
    assert_eq!(field(&out, "agent-own-ca", "code"), "200", "{out:#?}");
    assert_eq!(field(&out, "agent-system", "code"), "200", "{out:#?}");
    assert_eq!(auth("/tunnel"), vec![Value::Null]);
    // The audit log names the credential only for the request it was attached to.
    let with_cred: Vec<_> = events(&log, "proxy.connect")
        .filter(|e| e["credential"] == CRED)
        .collect();
    assert!(!with_cred.is_empty(), "{log:#?}");
    assert!(with_cred.iter().all(|e| e["zone"] == "push"), "{log:#?}");
});

// What the proxy refuses: hosts and ports off the list, and names that resolve to
// loopback without the list naming loopback explicitly. There is no way around it: a
// client that ignores the proxy variables reaches the proxy all the same (transparent
// egress), which lets `localhost:PORT` through by its TLS server name and
// `127.0.0.1:PORT` as localhost's address; a port the list does not name has no
// listener at all.
//
// The loopback names: `127.1` (always; the proxy takes it as a name and the resolver
// says 127.0.0.1; curl would rewrite it, so it is sent raw through bash's /dev/tcp),
// and a name from /etc/hosts mapping to loopback when this machine has one (`vm` and
// `runsc` on the CI machine). Names under `.localhost` are not used: this machine's
// resolver (files, dns) does not map them.
both!(off_list_and_around_the_proxy_are_refused, |fx| {
    let up = Upstream::start(&fx);
    let name = hosts_file_loopback_name();
    config(&fx, &up, "COMPANY_GIT_TOKEN", name.as_deref());
    // A real listener on another port, so that its refusal is the list's doing.
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    let other_port = other.local_addr().unwrap().port();
    let port = up.port;
    let mut s = String::new();
    s.push_str(&curl_line(
        "noproxy-localhost",
        &format!("--noproxy '*' -k 'https://localhost:{port}/around'"),
    ));
    s.push_str(&curl_line(
        "noproxy-ip",
        &format!("--noproxy '*' -k 'https://127.0.0.1:{port}/around-ip'"),
    ));
    s.push_str(&curl_line(
        "noproxy-outside",
        "--noproxy '*' --connect-timeout 10 http://192.0.2.1/",
    ));
    s.push_str(&curl_line("plain-offlist", "http://example.invalid/"));
    s.push_str(&curl_line(
        "connect-offport",
        &format!("-k 'https://localhost:{other_port}/'"),
    ));
    s.push_str(&curl_line(
        "allowed",
        &format!(
            "--cacert \"$HOME/e2e/upstream-ca.pem\" '{}'",
            up.url("/allowed")
        ),
    ));
    if let Some(n) = &name {
        s.push_str(&curl_line(
            "connect-name",
            &format!("-k 'https://{n}:{port}/'"),
        ));
        s.push_str(&curl_line("plain-name", &format!("'http://{n}:{port}/'")));
    }
    let raw = |tag: &str, request: &str| {
        format!(
            "bash -c 'exec 3<>/dev/tcp/127.0.0.1/${{http_proxy##*:}} && printf \"{request}\" >&3 && IFS= read -r line <&3 && echo \"{tag} status=$line\"'\n"
        )
    };
    s.push_str(&raw(
        "raw-connect-127.1",
        &format!("CONNECT 127.1:{port} HTTP/1.1\\r\\nHost: 127.1:{port}\\r\\n\\r\\n"),
    ));
    s.push_str(&raw(
        "raw-plain-127.1",
        &format!(
            "GET http://127.1:{port}/ HTTP/1.1\\r\\nHost: 127.1:{port}\\r\\nConnection: close\\r\\n\\r\\n"
        ),
    ));
    let refusals = script(&fx, "refusals.sh", &s);
    let (out, log, log_text) = run(&fx, &up, "COMPANY_GIT_TOKEN", &format!("sh {refusals}"));
    drop(other);
    out.ok();

    // Around the proxy is the proxy: the allowed name gets through it, and so does
    // 127.0.0.1 (`localhost:P` means it too, issue 20, item 2); an unlisted port refuses.
    assert_eq!(field(&out, "noproxy-localhost", "code"), "200", "{out:#?}");
    assert_eq!(field(&out, "noproxy-ip", "code"), "200", "{out:#?}");
    assert_eq!(field(&out, "noproxy-outside", "rc"), "7", "{out:#?}");
    // Off the list: 403 for plain HTTP, 403 to the CONNECT.
    assert_eq!(field(&out, "plain-offlist", "code"), "403", "{out:#?}");
    assert_eq!(field(&out, "connect-offport", "connect"), "403", "{out:#?}");
    assert_ne!(field(&out, "connect-offport", "rc"), "0", "{out:#?}");
    // The control: what the list names gets through.
    assert_eq!(field(&out, "allowed", "code"), "200", "{out:#?}");
    // Names resolving to loopback without an explicit entry.
    if let Some(n) = &name {
        assert_eq!(
            field(&out, "connect-name", "connect"),
            "403",
            "{n}: {out:#?}"
        );
        assert_eq!(field(&out, "plain-name", "code"), "403", "{n}: {out:#?}");
    }
    for tag in ["raw-connect-127.1", "raw-plain-127.1"] {
        let line = out
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{tag} status=")))
            .unwrap_or_else(|| panic!("{tag}: {out:#?}"));
        assert!(line.starts_with("HTTP/1.1 403"), "{tag}: {line:?}");
    }
    // Only the allowed request reached the server.
    let paths: Vec<_> = up
        .requests()
        .iter()
        .map(|r| r["path"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(paths, ["/around", "/around-ip", "/allowed"], "{out:#?}");

    // Every refusal is a proxy.denied event in the run's log.
    let denied: Vec<_> = events(&log, "proxy.denied").collect();
    let has = |host: &str, port: u16, why: &str| {
        denied.iter().any(|e| {
            e["zone"] == "agent"
                && e["host"] == host
                && e["port"] == port
                && e["decision"] == "denied"
                && e["reason"].as_str().unwrap_or("").contains(why)
        })
    };
    assert!(
        has("example.invalid", 80, "not in the allow list"),
        "{log_text}"
    );
    assert!(
        has("localhost", other_port, "not in the allow list"),
        "{log_text}"
    );
    assert!(has("127.1", port, "loopback"), "{log_text}");
    if let Some(n) = &name {
        assert!(has(n, port, "loopback"), "{log_text}");
    }
    let expected = 4 + if name.is_some() { 2 } else { 0 };
    assert_eq!(denied.len(), expected, "{log_text}");
    assert!(
        events(&log, "proxy.connect").any(|e| e["zone"] == "agent"
            && e["host"] == "localhost"
            && e["port"] == port
            && e["credential"].is_null()),
        "{log_text}"
    );
});

// A chunked upload over 1 MiB through the intercepting path arrives byte for byte.
both!(a_chunked_upload_through_interception_arrives_intact, |fx| {
    let up = Upstream::start(&fx);
    config(&fx, &up, "COMPANY_GIT_TOKEN", None);
    let data = noise((1 << 20) + 300 * 1024 + 7, 0x2545_f491_4f6c_dd1d);
    let digest = sha256_hex(&data);
    fs::write(fx.proj.join("upload.bin"), &data).unwrap();
    fx.own(&fx.proj);
    let (out, log, _) = run(
        &fx,
        &up,
        "COMPANY_GIT_TOKEN",
        &format!(
            "wardcell zone enter push -- curl -sS --max-time 60 --fail \
               -T upload.bin -H 'Transfer-Encoding: chunked' '{}'; echo \"upload rc=$?\"",
            up.url("/upload/blob.bin")
        ),
    );
    out.ok();
    assert_eq!(
        field(&out, "upload", "rc"),
        "0",
        "{out:#?}\n{}",
        up.server_stderr()
    );
    assert!(
        out.stdout
            .contains(&format!("stored {} {digest}\n", data.len())),
        "{out:#?}"
    );
    let stored = fs::read(up.dir.join("uploads/blob.bin")).unwrap();
    assert_eq!(stored.len(), data.len());
    assert_eq!(sha256_hex(&stored), digest);
    let r = up.requests_to("/upload/");
    assert_eq!(r.len(), 1, "{r:#?}");
    assert_eq!(r[0]["body_len"].as_u64(), Some(data.len() as u64));
    assert!(r[0]["authorization"].is_null(), "{r:#?}");
    let up_bytes: u64 = events(&log, "proxy.connect")
        .filter(|e| e["zone"] == "push")
        .map(|e| e["bytes_up"].as_u64().unwrap_or(0))
        .sum();
    assert!(up_bytes >= data.len() as u64, "{log:#?}");
});

// The run's log has `proxy.connect` with the credential's name for the push (zone, host,
// port, bytes), `proxy.denied` for the push zone's 403s, and never the secret.
both!(the_audit_log_records_the_push_and_the_refusals, |fx| {
    let up = Upstream::start(&fx);
    let head = project(&fx, &up);
    config(&fx, &up, "COMPANY_GIT_TOKEN", None);
    let git = git().display();
    let denied_port = free_port();
    let inner = script(
        &fx,
        "push-and-refusals.sh",
        &format!(
            "{git} push -q origin HEAD:main; echo \"push rc=$?\"\n{}{}",
            curl_line("plain-offlist", "http://example.invalid/x"),
            curl_line(
                "connect-offport",
                &format!("-k 'https://localhost:{denied_port}/'")
            ),
        ),
    );
    let (out, log, log_text) = run(
        &fx,
        &up,
        "COMPANY_GIT_TOKEN",
        &format!("wardcell zone enter push -- sh {inner}"),
    );
    out.ok();
    assert_eq!(field(&out, "push", "rc"), "0", "{out:#?}");
    assert_eq!(up.main_ref().as_deref(), Some(head.as_str()));
    assert_eq!(field(&out, "plain-offlist", "code"), "403", "{out:#?}");
    assert_eq!(field(&out, "connect-offport", "connect"), "403", "{out:#?}");

    // Every line is a JSON object with the common fields.
    for l in &log {
        for k in ["ts", "run", "category", "event"] {
            assert!(l.get(k).is_some(), "{k} missing: {l}");
        }
    }
    // The entry itself was decided and audited.
    assert!(
        log.iter().any(|l| l["event"] == "audit.decision"
            && l["decision"] == "allowed"
            && l["target"] == "push"),
        "{log_text}"
    );
    let connects: Vec<_> = events(&log, "proxy.connect")
        .filter(|e| e["credential"] == CRED)
        .collect();
    assert!(!connects.is_empty(), "{log_text}");
    for e in &connects {
        assert_eq!(e["category"], "proxy", "{e}");
        assert_eq!(e["zone"], "push", "{e}");
        assert_eq!(e["host"], "localhost", "{e}");
        assert_eq!(e["port"], up.port, "{e}");
        assert!(e["bytes_up"].is_u64() && e["bytes_down"].is_u64(), "{e}");
    }
    let pushed: u64 = connects
        .iter()
        .map(|e| e["bytes_up"].as_u64().unwrap())
        .sum();
    assert!(
        pushed > 3 << 20,
        "the push's bytes are not counted: {log_text}"
    );
    let denied: Vec<_> = events(&log, "proxy.denied").collect();
    assert_eq!(denied.len(), 2, "{log_text}");
    for (host, port) in [("example.invalid", 80), ("localhost", denied_port)] {
        assert!(
            denied.iter().any(|e| e["category"] == "proxy"
                && e["zone"] == "push"
                && e["host"] == host
                && e["port"] == port
                && e["decision"] == "denied"
                && e["reason"].as_str().is_some_and(|r| !r.is_empty())),
            "no proxy.denied for {host}:{port}: {log_text}"
        );
    }
    assert_no_secret("the run's audit log", &log_text, &up);
});

// CA files' identities are recorded when some profile of the run has network, not only
// the one it starts in (issue 19, review of the start-up order, item 4): a run started in
// a zone without network that enters one with network gives the new sandbox a bundle
// with the caller's CA (SSL_CERT_FILE), and a TLS connection through a tunnel verifies
// with it.
both!(an_entered_zone_with_network_gets_the_callers_ca, |fx| {
    let up = Upstream::start(&fx);
    let bin = fx.bin.display();
    let port = up.port;
    fx.config(&format!(
        "[zones.quiet]\nprofile = \"quiet\"\ndefault = true\n\
         [zones.net]\nprofile = \"net\"\nenter_from = [\"quiet\"]\n\
         [profiles.quiet]\nextends = \"developer-readonly\"\nread = [\"{bin}\"]\n\
         [profiles.net]\nextends = \"developer-readonly\"\nread = [\"{bin}\"]\n\
         network = {{ allow = [\"localhost:{port}\"] }}\n"
    ));
    let check = script(
        &fx,
        "ca-check.sh",
        "echo \"$WARDCELL_ZONE ssl_cert_file=${SSL_CERT_FILE:-none}\"\n\
         if [ -n \"${SSL_CERT_FILE-}\" ]; then\n\
           curl -sS --max-time 30 -o /dev/null -w \"$WARDCELL_ZONE tls code=%{http_code} \" \
             https://localhost:$UPSTREAM_PORT/tunnelled; echo \"rc=$?\"\n\
         fi\n",
    );
    // An entered zone's environment is the run's, not the caller's (issue 35, item 5):
    // the port is given to the run.
    let port = port.to_string();
    let (out, _, _) = run_env(
        &fx,
        &up,
        &[("UPSTREAM_PORT", &port)],
        &format!("sh {check}; wardcell zone enter net -- sh {check}"),
    );
    out.ok();
    // No network, no bundle.
    assert_eq!(field(&out, "quiet", "ssl_cert_file"), "none", "{out:#?}");
    let bundle = field(&out, "net", "ssl_cert_file");
    assert!(bundle.starts_with('/'), "{out:#?}");
    // The test server's CA is in it: curl verified the server through a tunnel.
    assert_eq!(field(&out, "net tls", "code"), "200", "{out:#?}");
});

// The CA bundle's "system roots" are the machine's (or what `wardcell run` was started
// with), never a file a sandboxed caller names: an SSL_CERT_FILE set inside the agent
// zone for `zone enter` must not make the new sandbox's bundle carry a file that neither
// zone may read.
both!(a_callers_ssl_cert_file_does_not_reach_the_bundle, |fx| {
    let up = Upstream::start(&fx);
    config(&fx, &up, "COMPANY_GIT_TOKEN", None);
    // Outside every profile (not under home, the project, the system trees or the
    // binaries), but readable by the fixture's uid.
    let marker = format!("not-for-any-sandbox-{}", fresh_token());
    let outside = fx.outside.join("private.txt");
    fx.write(&outside, &format!("{marker}\n"));
    let (out, _, _) = run(
        &fx,
        &up,
        "COMPANY_GIT_TOKEN",
        &format!(
            "cat {f} >/dev/null 2>&1; echo \"agent-read rc=$?\"; \
             SSL_CERT_FILE={f} wardcell zone enter push -- \
               sh -c 'cat \"$SSL_CERT_FILE\"; cat {f} >/dev/null 2>&1; echo \"push-read rc=$?\"'; \
             echo \"enter rc=$?\"",
            f = outside.display()
        ),
    );
    out.ok();
    assert_ne!(
        field(&out, "agent-read", "rc"),
        "0",
        "the file is not outside: {out:#?}"
    );
    assert!(
        !out.stdout.contains(&marker),
        "a file outside both profiles reached the push zone through the caller's SSL_CERT_FILE: {out:#?}"
    );
    assert_ne!(
        field(&out, "push-read", "rc"),
        "0",
        "the file is not outside: {out:#?}"
    );
    assert_eq!(field(&out, "enter", "rc"), "0", "{out:#?}");
});

// Transparent egress keeps credentials where they apply: TLS to a host a credential
// names, sent by a client that ignores the proxy variables, is intercepted as after a
// CONNECT (the ClientHello the proxy read to learn the name is replayed), so the push
// zone's request carries the credential; the agent zone's is tunnelled untouched.
both!(
    transparent_tls_to_a_credential_host_gets_the_credential,
    |fx| {
        let up = Upstream::start(&fx);
        config(&fx, &up, "COMPANY_GIT_TOKEN", None);
        let in_push = script(
            &fx,
            "transparent-push.sh",
            &curl_line(
                "push",
                &format!(
                    "--noproxy '*' '{}'",
                    up.url("/repo.git/info/refs?service=git-upload-pack")
                ),
            ),
        );
        let in_agent = script(
            &fx,
            "transparent-agent.sh",
            &curl_line(
                "agent",
                &format!(
                    "--noproxy '*' --cacert \"$HOME/e2e/upstream-ca.pem\" '{}'",
                    up.url("/transparent-tunnel")
                ),
            ),
        );
        let (out, log, _) = run(
            &fx,
            &up,
            "COMPANY_GIT_TOKEN",
            &format!("wardcell zone enter push -- sh {in_push}; sh {in_agent}"),
        );
        out.ok();
        assert_eq!(field(&out, "push", "code"), "200", "{out:#?}");
        assert_eq!(field(&out, "agent", "code"), "200", "{out:#?}");
        let auth = |p: &str| -> Vec<Value> {
            up.requests()
                .into_iter()
                .filter(|r| r["path"] == p)
                .map(|r| r["authorization"].clone())
                .collect()
        };
        assert_eq!(auth("/repo.git/info/refs"), vec![Value::from(up.basic())]);
        assert_eq!(auth("/transparent-tunnel"), vec![Value::Null]);
        assert!(
            events(&log, "proxy.connect").any(|e| e["zone"] == "push" && e["credential"] == CRED),
            "{log:#?}"
        );
        assert_no_secret("the output", &out.stdout, &up);
    }
);

// ---------------------------------------------------------------------------
// Credential rules: host and port, methods, ambiguous paths, placeholders, NO_PROXY
// ---------------------------------------------------------------------------

/// The API key's credential: header `X-Api-Key` under /v1/*, GET and POST only, its
/// secret read from API_SECRET_VAR and a placeholder in PLACEHOLDER_VAR.
const API_CRED: &str = "api";
const API_SECRET_VAR: &str = "E2E_API_SECRET";
/// Not matched by any built-in deny pattern: only the placeholder rule keeps the
/// caller's value of it out of a sandbox.
const PLACEHOLDER_VAR: &str = "AGENT_KEY";
/// wardcell_support::sandbox_env::PLACEHOLDER_VALUE, as documented.
const PLACEHOLDER: &str = "wardcell-placeholder-not-a-secret";

/// Zones: `agent` (default; the server under other spellings of loopback, no
/// credentials), `api` (authenticated: credentials `git` and `api` for localhost:PORT,
/// and 127.0.0.1:PORT allowed but named by no credential), `portless` (authenticated: a
/// credential for `localhost` with no port, which means 443).
fn rules_config(fx: &Fixture, up: &Upstream) {
    let bin = fx.bin.display();
    let port = up.port;
    fx.write(&fx.home.join("e2e/upstream-ca.pem"), &up.ca_text);
    fx.config(&format!(
        r#"
[zones.agent]
profile = "dev"
default = true

[zones.api]
profile = "api"
authenticated = true
enter_from = ["agent"]

[zones.portless]
profile = "portless"
authenticated = true
enter_from = ["agent"]

[profiles.dev]
extends = "developer-readonly"
read = ["{bin}"]
network = {{ allow = ["LocalHost:{port}", "[0:0:0:0:0:0:0:1]:{port}"] }}

[profiles.api]
extends = "developer-readonly"
read = ["{bin}"]
network = {{ allow = ["localhost:{port}", "127.0.0.1:{port}"] }}
credentials = ["{CRED}", "{API_CRED}"]

[profiles.portless]
extends = "developer-readonly"
read = ["{bin}"]
network = {{ allow = ["localhost:{port}"] }}
credentials = ["portless"]

[credentials.{CRED}]
hosts = ["localhost:{port}"]
paths = ["{REPO_PATH}/*"]
scheme = "basic"
username = "x-access-token"
secret = {{ env = "COMPANY_GIT_TOKEN" }}

[credentials.{API_CRED}]
hosts = ["localhost:{port}"]
paths = ["/v1/*"]
methods = ["GET", "POST"]
scheme = "header"
header = "X-Api-Key"
placeholder = "{PLACEHOLDER_VAR}"
secret = {{ env = "{API_SECRET_VAR}" }}

[credentials.portless]
hosts = ["localhost"]
scheme = "basic"
username = "x-access-token"
secret = {{ env = "COMPANY_GIT_TOKEN" }}
"#
    ));
}

/// The requests the server saw whose raw path contains `mark`.
fn seen(up: &Upstream, mark: &str) -> Vec<Value> {
    up.requests()
        .into_iter()
        .filter(|r| r["raw_path"].as_str().unwrap_or("").contains(mark))
        .collect()
}

// A credential is attached for its host and port only (a portless entry means 443, so
// the server's own port is tunnelled untouched), for its methods only (never TRACE), and
// never to an ambiguous path: that gets 400 with one line, a `proxy.denied` event, and
// nothing reaches the server; a host no credential names is not affected.
both!(credentials_match_port_method_and_unambiguous_paths, |fx| {
    let up = Upstream::start(&fx);
    rules_config(&fx, &up);
    let u = |p: &str| up.url(p);
    let ambiguous = [
        ("dotdot", "/repo.git/../repo.git/m-dotdot"),
        ("dot", "/repo.git/./m-dot"),
        ("enc-slash", "/repo.git/a%2Fm-encslash"),
        ("enc-dot", "/repo.git/%2e%2E/m-encdot"),
        ("enc-pct", "/repo.git/a%252fm-encpct"),
        ("enc-bslash", "/repo.git/a%5cm-encbslash"),
        ("enc-semicolon", "/repo.git/a%3Bm-encsemicolon"),
        ("semicolon", "/repo.git/m-semicolon;a=b"),
        ("slashes", "/repo.git//m-slashes"),
        ("nul", "/repo.git/a%00/m-nul"),
        ("overlong-dots", "/repo.git/%C0%AE%C0%AE/m-overlong"),
        ("overlong-slash", "/repo.git/a%c0%afb/m-overlongslash"),
        ("not-utf8", "/repo.git/%E0%80%AE/m-notutf8"),
    ];
    let mut inner = String::new();
    for (tag, args) in [
        ("get", format!("'{}'", u("/repo.git/m-get"))),
        ("delete", format!("-X DELETE '{}'", u("/repo.git/m-delete"))),
        ("options", format!("-X OPTIONS '{}'", u("/repo.git/m-options"))),
        ("trace", format!("-X TRACE '{}'", u("/repo.git/m-trace"))),
        ("encoded", format!("'{}'", u("/%72epo.git/m-unreserved"))),
        (
            "tunnel-dotdot",
            format!(
                "--path-as-is --cacert \"$HOME/e2e/upstream-ca.pem\" 'https://127.0.0.1:{}/repo.git/../m-tunnel'",
                up.port
            ),
        ),
    ] {
        inner.push_str(&curl_line(tag, &args));
    }
    for (tag, path) in ambiguous {
        inner.push_str(&curl_line(tag, &format!("--path-as-is '{}'", u(path))));
    }
    inner.push_str(&format!(
        "echo \"== body\"; curl -sS --max-time 30 --path-as-is '{}'; echo \"== end\"\n",
        u("/repo.git/../m-body")
    ));
    let in_api = script(&fx, "rules.sh", &inner);
    let in_portless = script(
        &fx,
        "portless.sh",
        &curl_line(
            "portless",
            &format!(
                "--cacert \"$HOME/e2e/upstream-ca.pem\" '{}'",
                u("/repo.git/m-portless")
            ),
        ),
    );
    let (out, log, log_text) = run_env(
        &fx,
        &up,
        &[("COMPANY_GIT_TOKEN", &up.token), (API_SECRET_VAR, "e2e-api-key")],
        &format!(
            "wardcell zone enter api -- sh {in_api}; wardcell zone enter portless -- sh {in_portless}"
        ),
    );
    out.ok();
    let auth = |mark: &str| -> Vec<Value> {
        seen(&up, mark)
            .into_iter()
            .map(|r| r["authorization"].clone())
            .collect()
    };
    let with = Value::from(up.basic());
    // Default methods: GET and DELETE get it; OPTIONS and TRACE do not.
    // (Past the server's auth: git http-backend has no such file.)
    assert_eq!(field(&out, "get", "code"), "404", "{out:#?}");
    assert_eq!(auth("m-get"), vec![with.clone()]);
    assert_eq!(auth("m-delete"), vec![with.clone()]);
    assert_eq!(field(&out, "options", "code"), "401", "{out:#?}");
    assert_eq!(auth("m-options"), vec![Value::Null]);
    assert_eq!(auth("m-trace"), vec![Value::Null], "{out:#?}");
    // An escaped unreserved character is the character: matched, and attached.
    assert_eq!(auth("m-unreserved"), vec![with]);
    // 127.0.0.1 is named by no credential: tunnelled as it is, the server decides.
    assert_eq!(field(&out, "tunnel-dotdot", "code"), "401", "{out:#?}");
    assert_eq!(auth("m-tunnel"), vec![Value::Null]);
    // A credential for `localhost` (443) is not one for localhost:PORT: tunnelled (the
    // server's own certificate is accepted), nothing attached.
    assert_eq!(field(&out, "portless", "code"), "401", "{out:#?}");
    assert_eq!(auth("m-portless"), vec![Value::Null]);
    // Ambiguous paths: 400 from the proxy, nothing sent.
    for (tag, path) in ambiguous {
        assert_eq!(field(&out, tag, "code"), "400", "{tag}: {out:#?}");
        let mark = path.rsplit('/').next().unwrap().split(';').next().unwrap();
        assert!(seen(&up, mark).is_empty(), "{tag} reached the server");
    }
    assert!(seen(&up, "m-body").is_empty());
    let body = section(&out.stdout, "body");
    assert_eq!(body.len(), 1, "one line: {body:?}");
    assert!(
        body[0].starts_with(&format!("wardcell: localhost:{}: ", up.port))
            && body[0].contains("ambiguous (it has a `.` or `..` segment)"),
        "{body:?}"
    );
    let denied: Vec<_> = events(&log, "proxy.denied")
        .filter(|e| {
            e["reason"]
                .as_str()
                .unwrap_or("")
                .contains("ambiguous path")
        })
        .collect();
    assert_eq!(denied.len(), ambiguous.len() + 1, "{log_text}");
    assert!(
        denied
            .iter()
            .all(|e| e["host"] == "localhost" && e["port"] == up.port && e["zone"] == "api"),
        "{log_text}"
    );
    assert_no_secret("what the sandbox printed", &out.stdout, &up);
    assert_no_secret("the run's audit log", &log_text, &up);
});

// The recipe: the agent's key is attached outside through a placeholder. Inside, the
// variable holds the placeholder (the caller's real key in it is gone, in every zone);
// curl and Python's urllib send the placeholder and the server receives the key, for
// the credential's paths and methods only; elsewhere the placeholder goes as sent. The
// key is nowhere a sandboxed process can read, nor in the audit log.
both!(the_agents_key_arrives_through_its_placeholder_only, |fx| {
    let up = Upstream::start(&fx);
    rules_config(&fx, &up);
    let key = format!("sk-e2e-{}", fresh_token());
    let u = |p: &str| up.url(p);
    let send = |tag: &str, method: &str, path: &str| {
        curl_line(
            tag,
            &format!(
                "-X {method} -H \"X-Api-Key: ${PLACEHOLDER_VAR}\" -H 'Content-Type: application/json' {data} '{}'",
                u(path),
                data = if method == "POST" { "-d '{}'" } else { "" },
            ),
        )
    };
    let dump = "echo \"== env $WARDCELL_ZONE\"; env\n\
         echo \"== proc $WARDCELL_ZONE\"\n\
         for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline /proc/self/environ; do\n\
           { tr '\\0' '\\n' < \"$f\"; } 2>/dev/null\n\
         done\n\
         echo \"== files $WARDCELL_ZONE\"\n\
         for d in \"$HOME\" \"$PWD\" /tmp; do\n\
           find \"$d\" -xdev -type f -readable -size -16M 2>/dev/null\n\
         done | while IFS= read -r f; do echo \"-- $f\"; cat \"$f\" 2>/dev/null; echo; done | head -c 67108864\n\
         echo \"== end $WARDCELL_ZONE\"\n";
    let mut inner = format!("echo \"placeholder value=${PLACEHOLDER_VAR}\"\n");
    inner.push_str(&send("messages", "POST", "/v1/messages"));
    inner.push_str(&send("models", "GET", "/v1/models"));
    inner.push_str(&send("put", "PUT", "/v1/k-put"));
    inner.push_str(&send("elsewhere", "GET", "/k-elsewhere"));
    inner.push_str(&format!(
        "python3 -c 'import os, urllib.request as u; r = u.Request(\"{}\", headers={{\"X-Api-Key\": os.environ[\"{PLACEHOLDER_VAR}\"]}}); print(\"python code=%d\" % u.urlopen(r, timeout=30).status)'\n",
        u("/v1/k-python")
    ));
    inner.push_str(dump);
    let in_api = script(&fx, "key.sh", &inner);
    let in_agent = script(
        &fx,
        "agent-key.sh",
        &format!(
            "echo \"agent-key set=${{{PLACEHOLDER_VAR}+yes}}${{{PLACEHOLDER_VAR}-no}}\"\n{dump}"
        ),
    );
    let (out, log, log_text) = run_env(
        &fx,
        &up,
        &[
            ("COMPANY_GIT_TOKEN", &up.token),
            (API_SECRET_VAR, &key),
            // Where the agent looks for its key, as a user would have it.
            (PLACEHOLDER_VAR, &key),
        ],
        &format!("sh {in_agent}; wardcell zone enter api -- sh {in_api}"),
    );
    out.ok();
    assert_eq!(field(&out, "placeholder", "value"), PLACEHOLDER);
    assert_eq!(field(&out, "agent-key", "set"), "no", "{out:#?}");
    let keys = |mark: &str| -> Vec<(String, Value)> {
        seen(&up, mark)
            .into_iter()
            .map(|r| {
                (
                    r["method"].as_str().unwrap().to_string(),
                    r["x_api_key"].clone(),
                )
            })
            .collect()
    };
    for tag in ["messages", "models", "put", "elsewhere", "python"] {
        assert_eq!(field(&out, tag, "code"), "200", "{tag}: {out:#?}");
    }
    let k = Value::from(key.as_str());
    let p = Value::from(PLACEHOLDER);
    assert_eq!(keys("/v1/messages"), vec![("POST".into(), k.clone())]);
    assert_eq!(keys("/v1/models"), vec![("GET".into(), k.clone())]);
    assert_eq!(keys("/v1/k-python"), vec![("GET".into(), k.clone())]);
    // Not its method, not its path: the placeholder, as sent.
    assert_eq!(keys("k-put"), vec![("PUT".into(), p.clone())]);
    assert_eq!(keys("k-elsewhere"), vec![("GET".into(), p)]);
    // The key went with exactly those three requests.
    assert_eq!(
        up.requests()
            .iter()
            .filter(|r| r["x_api_key"] == k
                || r["authorization"]
                    .as_str()
                    .is_some_and(|a| a.contains(&key)))
            .count(),
        3
    );
    for zone in ["agent", "api"] {
        assert!(out.stdout.contains(&format!("== end {zone}")), "{out:#?}");
        let env = section(&out.stdout, &format!("env {zone}"));
        assert!(
            env.iter().any(|l| l.starts_with("PATH=")),
            "{zone}: {env:?}"
        );
    }
    for (what, text) in [
        ("what sandboxes could read", &out.stdout),
        ("wardcell's stderr", &out.stderr),
        ("the run's audit log", &log_text),
    ] {
        assert!(!text.contains(&key), "the key is in {what}:\n{text}");
    }
    assert_eq!(
        events(&log, "proxy.connect")
            .filter(|e| e["credential"] == API_CRED)
            .count(),
        3,
        "{log_text}"
    );
});

// NO_PROXY and the allow list agree on loopback, however the list spells it: `LocalHost`
// names localhost, and with it 127.0.0.1 and ::1 (issue 20, item 2), so NO_PROXY is
// empty and clients send all three to the proxy, which admits them.
both!(no_proxy_and_the_allow_list_agree_on_loopback, |fx| {
    let up = Upstream::start(&fx);
    rules_config(&fx, &up);
    let ca = "--cacert \"$HOME/e2e/upstream-ca.pem\"";
    let mut sh = "echo \"no-proxy value=$NO_PROXY lower=$no_proxy\"\n".to_string();
    sh.push_str(&curl_line(
        "name",
        &format!("{ca} '{}'", up.url("/np-name")),
    ));
    sh.push_str(&curl_line(
        "ip-direct",
        &format!("{ca} 'https://127.0.0.1:{}/np-direct'", up.port),
    ));
    sh.push_str(&curl_line(
        "ip-proxy",
        &format!("{ca} --noproxy '' 'https://127.0.0.1:{}/np-proxy'", up.port),
    ));
    sh.push_str(&curl_line(
        "v6",
        &format!("{ca} 'https://[::1]:{}/np-v6'", up.port),
    ));
    let (out, log, log_text) = run(&fx, &up, "COMPANY_GIT_TOKEN", &sh);
    out.ok();
    assert_eq!(field(&out, "no-proxy", "value"), "", "{out:#?}");
    assert_eq!(field(&out, "no-proxy", "lower"), "", "{out:#?}");
    // Named by the list: through the proxy to the host's loopback.
    assert_eq!(field(&out, "name", "code"), "200", "{out:#?}");
    assert_eq!(seen(&up, "np-name").len(), 1);
    // 127.0.0.1 is localhost's: through the proxy too, with NO_PROXY or without.
    for tag in ["ip-direct", "ip-proxy"] {
        assert_eq!(field(&out, tag, "connect"), "200", "{tag}: {out:#?}");
        assert_eq!(field(&out, tag, "code"), "200", "{tag}: {out:#?}");
    }
    assert_eq!(seen(&up, "np-direct").len(), 1);
    assert_eq!(seen(&up, "np-proxy").len(), 1);
    // ::1 too: the proxy answers for it (the server listens on 127.0.0.1 only, so it
    // cannot connect: 502, not the sandbox's refusal).
    assert_eq!(field(&out, "v6", "connect"), "502", "{out:#?}");
    assert!(
        !events(&log, "proxy.denied").any(|e| e["host"] == "127.0.0.1"),
        "{log_text}"
    );
});

/// Reads an event stream through the proxy (HTTPS_PROXY): how long the first event took,
/// then, after letting the server go on, the rest until the connection ends.
const STREAM_CLIENT: &str = r#"
import os, sys, time, urllib.request
base, name = sys.argv[1], 'ev%d' % os.getpid()
t = time.time()
r = urllib.request.urlopen(base + '/stream/' + name, timeout=30)
first = r.readline().decode().strip()
print('first', first, 'waited=%.1f' % (time.time() - t), flush=True)
urllib.request.urlopen(base + '/stream-go/' + name, timeout=30).read()
try:
    rest = r.read()
    print('rest', len(rest), rest.endswith(b'data: two\n\n'), flush=True)
except Exception as e:
    print('rest error', type(e).__name__, e, flush=True)
"#;

// Issue 20, item 3: an event stream whose body has neither a length nor chunks (it ends
// with the connection, closed without TLS's close_notify) passes through interception
// whole and as it comes: the first event reaches a real client in the sandbox while the
// server still holds the rest, and the rest is not cut off.
both!(an_event_stream_passes_through_interception_whole, |fx| {
    let up = Upstream::start(&fx);
    config(&fx, &up, "COMPANY_GIT_TOKEN", None);
    let client = fx.home.join("e2e/stream.py");
    fx.write(&client, STREAM_CLIENT);
    let py = python();
    let (out, log, log_text) = run(
        &fx,
        &up,
        "COMPANY_GIT_TOKEN",
        &format!(
            "wardcell zone enter push -- {} {} 'https://localhost:{}'",
            py.display(),
            client.display(),
            up.port
        ),
    );
    out.ok();
    let first = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("first "))
        .unwrap_or_else(|| panic!("{out:#?}"));
    let (event, waited) = first.split_once(" waited=").unwrap();
    assert_eq!(event, "data: one", "{out:#?}");
    // The server holds the rest for 10 s unless asked to go on: the first event came
    // alone.
    assert!(waited.parse::<f64>().unwrap() < 5.0, "{out:#?}");
    assert!(
        out.stdout
            .contains(&format!("rest {} True", 1 + 300_000 + 11)),
        "{out:#?}"
    );
    // Intercepted (the push zone's credential names the host), so counted request by
    // request: the stream's bytes all came down.
    assert!(
        events(&log, "proxy.connect")
            .any(|e| e["zone"] == "push" && e["bytes_down"].as_u64() == Some(11 + 300_000 + 11)),
        "{log_text}"
    );
});

// ---------------------------------------------------------------------------
// Registries and a git server under internal names (issue 20, item 8)
// ---------------------------------------------------------------------------

/// The stand-in registries' names and the git server's. A hosts file the test sets up
/// maps them to 127.0.0.1 for wardcell and its proxy (`Fixture::cmd_with_hosts`), as a
/// corporate DNS maps its mirrors to internal addresses; the zones name them under
/// `network.internal`, the registries by a wildcard.
const PYPI: &str = "pypi.mirror.corp";
const NPM: &str = "npm.mirror.corp";
const CRATES: &str = "crates.mirror.corp";
const GIT_HOST: &str = "git.corp.example";

/// Writes three registries under FILES (argv[1]) for a server on PORT (argv[2]), each
/// with one package `wardcell-demo`: a PEP 503 simple index with a wheel, an npm
/// registry's package document with its tarball, and a Cargo sparse index with its
/// crate. Prints the digests a client checks: `wheel SHA256`, `crate SHA256`.
const REGISTRIES_PY: &str = r#"
import base64, hashlib, io, json, os, sys, tarfile, zipfile
files, port = sys.argv[1], sys.argv[2]

def put(rel, data):
    path = os.path.join(files, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'wb') as f:
        f.write(data.encode() if isinstance(data, str) else data)

def tgz(members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode='w:gz') as t:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()

w = io.BytesIO()
with zipfile.ZipFile(w, 'w') as z:
    z.writestr('wardcell_demo/__init__.py', 'VALUE = 42\n')
    info = 'wardcell_demo-1.0.dist-info/'
    z.writestr(info + 'METADATA', 'Metadata-Version: 2.1\nName: wardcell-demo\nVersion: 1.0\n')
    z.writestr(info + 'WHEEL', 'Wheel-Version: 1.0\nGenerator: wardcell-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n')
    z.writestr(info + 'RECORD', '')
wheel = w.getvalue()
name = 'wardcell_demo-1.0-py3-none-any.whl'
put('pypi/packages/' + name, wheel)
digest = hashlib.sha256(wheel).hexdigest()
put('pypi/simple/wardcell-demo/index.html',
    f'<html><body><a href="../../packages/{name}#sha256={digest}">{name}</a></body></html>\n')
print('wheel', digest)

pkg = tgz([('package/package.json', b'{"name": "wardcell-demo", "version": "1.0.0", "main": "index.js"}\n'),
           ('package/index.js', b'module.exports = 42;\n')])
put('npm/wardcell-demo/-/wardcell-demo-1.0.0.tgz', pkg)
put('npm/wardcell-demo/index.json', json.dumps({
    'name': 'wardcell-demo',
    'dist-tags': {'latest': '1.0.0'},
    'versions': {'1.0.0': {
        'name': 'wardcell-demo', 'version': '1.0.0', 'main': 'index.js',
        'dist': {
            'tarball': f'https://npm.mirror.corp:{port}/files/npm/wardcell-demo/-/wardcell-demo-1.0.0.tgz',
            'integrity': 'sha512-' + base64.b64encode(hashlib.sha512(pkg).digest()).decode(),
            'shasum': hashlib.sha1(pkg).hexdigest(),
        },
    }},
}))

krate = tgz([('wardcell-demo-1.0.0/Cargo.toml',
              b'[package]\nname = "wardcell-demo"\nversion = "1.0.0"\nedition = "2021"\n'),
             ('wardcell-demo-1.0.0/src/lib.rs', b'pub const VALUE: u32 = 42;\n')])
put('crates/dl/wardcell-demo-1.0.0.crate', krate)
digest = hashlib.sha256(krate).hexdigest()
put('crates/index/config.json', json.dumps(
    {'dl': f'https://crates.mirror.corp:{port}/files/crates/dl/{{crate}}-{{version}}.crate'}))
put('crates/index/wa/rd/wardcell-demo', json.dumps({
    'name': 'wardcell-demo', 'vers': '1.0.0', 'deps': [], 'cksum': digest,
    'features': {}, 'yanked': False}) + '\n')
print('crate', digest)
"#;

/// cargo and rustc (cargo asks rustc for the host's target), and the shared libraries
/// rustc needs, linked (or copied) from the toolchain the tests were built with into
/// the staging directory, where the unprivileged uid and the sandbox can read them.
/// Returns the directory holding `bin/`.
fn staged_toolchain() -> PathBuf {
    static TOOLCHAIN: OnceLock<PathBuf> = OnceLock::new();
    TOOLCHAIN
        .get_or_init(|| {
            let sysroot = PathBuf::from(
                host(Command::new(which("rustc")).args(["--print", "sysroot"]))
                    .trim()
                    .to_string(),
            );
            let to = wardcell_tests::staged().root.join("toolchain");
            for dir in ["bin", "lib"] {
                fs::create_dir_all(to.join(dir)).unwrap();
                fs::set_permissions(to.join(dir), fs::Permissions::from_mode(0o755)).unwrap();
            }
            let mut files: Vec<PathBuf> = vec!["bin/cargo".into(), "bin/rustc".into()];
            for e in fs::read_dir(sysroot.join("lib")).unwrap() {
                let name = e.unwrap().file_name().into_string().unwrap();
                if name.ends_with(".so") || name.contains(".so.") {
                    files.push(Path::new("lib").join(name));
                }
            }
            for f in files {
                let (src, dst) = (sysroot.join(&f), to.join(&f));
                if fs::hard_link(&src, &dst).is_err() {
                    fs::copy(&src, &dst).unwrap();
                }
            }
            to
        })
        .clone()
}

/// Zones: `agent` (default; the package-managers profile, the mirrors under
/// network.internal by a wildcard, and the git server too, without its credential),
/// `push` (the git server under network.internal, with the credential), and `public`
/// (the same names under network.allow, which admits public addresses only).
fn internal_config(fx: &Fixture, up: &Upstream, toolchain: &Path) {
    let bin = fx.bin.display();
    let tc = toolchain.display();
    let port = up.port;
    fx.config(&format!(
        r#"
[zones.agent]
profile = "dev"
default = true

[zones.push]
profile = "pusher"
authenticated = true
enter_from = ["agent"]

[zones.public]
profile = "public"
enter_from = ["agent"]

[profiles.dev]
extends = "package-managers"
read = ["{bin}", "{tc}"]
network = {{ internal = ["*.mirror.corp:{port}", "{GIT_HOST}:{port}"] }}

[profiles.pusher]
extends = "developer-readonly"
read = ["{bin}"]
network = {{ internal = ["{GIT_HOST}:{port}"] }}
credentials = ["{CRED}"]

[profiles.public]
extends = "package-managers"
read = ["{bin}", "{tc}"]
network = {{ allow = ["{PYPI}:{port}"] }}

[credentials.{CRED}]
hosts = ["{GIT_HOST}:{port}"]
paths = ["{REPO_PATH}/*"]
scheme = "basic"
username = "x-access-token"
secret = {{ env = "E2E_GIT_TOKEN" }}
"#
    ));
}

// The registries' own clients and git, through wardcell, to servers that only internal
// names reach: `pip download`, `npm install` and `cargo fetch` in the agent zone (the
// tunnel, each client checking the server with the user's own CA variable), and
// `git push` through `zone enter push` (interception, the credential attached). Every
// request reached the server under its internal name; the same name under
// network.allow reaches nothing.
both!(package_managers_and_git_reach_internal_names, |fx| {
    // The clients, where a sandbox reads them (.ci/run installs them).
    let npm = fs::canonicalize(which("npm")).unwrap();
    assert!(
        npm.starts_with("/usr"),
        "npm at {} is outside the view",
        npm.display()
    );
    host(Command::new(python()).args(["-m", "pip", "--version"]));
    let up = Upstream::start_for(&fx, &[PYPI, NPM, CRATES, GIT_HOST]);
    let port = up.port;
    let digests = host(
        Command::new(python())
            .args(["-c", REGISTRIES_PY])
            .arg(up.dir.join("files"))
            .arg(port.to_string()),
    );
    let digest = |what: &str| {
        digests
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{what} ")))
            .unwrap()
            .to_string()
    };
    let hosts = fx.dir.join("hosts");
    fx.write(
        &hosts,
        &format!(
            "127.0.0.1 localhost\n::1 localhost\n127.0.0.1 {PYPI} {NPM} {CRATES} {GIT_HOST}\n"
        ),
    );
    let toolchain = staged_toolchain();
    internal_config(&fx, &up, &toolchain);

    // The project: for npm, cargo (its registry replaced by the mirror) and git.
    fx.write(
        &fx.proj.join("package.json"),
        "{\"name\": \"proj\", \"version\": \"1.0.0\", \"private\": true}\n",
    );
    fx.write(
        &fx.proj.join("Cargo.toml"),
        "[package]\nname = \"proj\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
         [dependencies]\nwardcell-demo = \"1\"\n",
    );
    fx.write(&fx.proj.join("src/lib.rs"), "");
    fx.write(
        &fx.proj.join(".cargo/config.toml"),
        &format!(
            "[source.crates-io]\nreplace-with = \"mirror\"\n\n[source.mirror]\n\
             registry = \"sparse+https://{CRATES}:{port}/files/crates/index/\"\n"
        ),
    );
    host(host_git(&fx.proj).args(["init", "-q", "-b", "main"]));
    host(host_git(&fx.proj).args(["add", "package.json", "Cargo.toml", "src"]));
    host(host_git(&fx.proj).args(["commit", "-q", "-m", "first"]));
    let remote = format!("https://{GIT_HOST}:{port}{REPO_PATH}");
    host(host_git(&fx.proj).args(["remote", "add", "origin", &remote]));
    let head = host(host_git(&fx.proj).args(["rev-parse", "HEAD"]))
        .trim()
        .to_string();
    fx.own(&fx.proj);

    let py = python();
    let py = py.display();
    let git_bin = git().display();
    let sh = format!(
        "cd {proj}\n\
         {py} -m pip download --disable-pip-version-check --no-deps -d dl \
           --index-url https://{PYPI}:{port}/files/pypi/simple/ wardcell-demo >pip.out 2>&1\n\
         echo \"pip rc=$?\"\n\
         npm install --no-audit --no-fund --no-update-notifier \
           --registry https://{NPM}:{port}/files/npm/ wardcell-demo >npm.out 2>&1\n\
         echo \"npm rc=$?\"\n\
         cargo fetch >cargo.out 2>&1\n\
         echo \"cargo rc=$?\"\n\
         wardcell zone enter push -- {git_bin} push origin HEAD:main >push.out 2>&1\n\
         echo \"push rc=$?\"\n\
         wardcell zone enter public -- {py} -m pip download --disable-pip-version-check \
           --no-deps -d public --index-url https://{PYPI}:{port}/files/public/simple/ \
           wardcell-demo >public.out 2>&1\n\
         echo \"public rc=$?\"\n",
        proj = fx.proj.display(),
    );
    let ca = up.ca_pem.to_str().unwrap();
    let mut cmd = fx.cmd_with_hosts(&hosts, &["run", "--", "/bin/sh", "-c", &sh]);
    cmd.env(
        "PATH",
        format!(
            "{}:{}:{}:/usr/bin:/bin",
            fx.bin.display(),
            toolchain.join("bin").display(),
            git().parent().unwrap().display()
        ),
    )
    .env("SSL_CERT_FILE", ca)
    .env("PIP_CERT", ca)
    .env("NODE_EXTRA_CA_CERTS", ca)
    .env("CARGO_HTTP_CAINFO", ca)
    .env("E2E_GIT_TOKEN", &up.token)
    .env("GIT_TERMINAL_PROMPT", "0");
    let (out, _, text) = run_logged(&fx, cmd);
    let said =
        |tool: &str| fs::read_to_string(fx.proj.join(format!("{tool}.out"))).unwrap_or_default();
    let why = format!(
        "{out:#?}\n{}\n{}",
        ["pip", "npm", "cargo", "push", "public"]
            .map(|t| format!("== {t}\n{}", said(t)))
            .join("\n"),
        up.server_stderr()
    );
    for tool in ["pip", "npm", "cargo", "push"] {
        assert_eq!(field(&out, tool, "rc"), "0", "{tool}: {why}");
    }

    // What each client fetched is whole.
    let wheel = fs::read(fx.proj.join("dl/wardcell_demo-1.0-py3-none-any.whl")).unwrap();
    assert_eq!(format!("{:x}", Sha256::digest(&wheel)), digest("wheel"));
    assert_eq!(
        fs::read_to_string(fx.proj.join("node_modules/wardcell-demo/index.js")).unwrap(),
        "module.exports = 42;\n"
    );
    let lock = fs::read_to_string(fx.proj.join("Cargo.lock")).unwrap();
    assert!(lock.contains(&digest("crate")), "{lock}");
    let cache = fx
        .home
        .join(".local/share/wardcell/pm/cargo/registry/cache");
    let crates: Vec<_> = fs::read_dir(&cache)
        .unwrap()
        .flat_map(|d| fs::read_dir(d.unwrap().path()).unwrap())
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(crates.len(), 1, "{crates:?}");
    assert_eq!(
        format!("{:x}", Sha256::digest(fs::read(&crates[0]).unwrap())),
        digest("crate")
    );
    assert_eq!(up.main_ref().as_deref(), Some(head.as_str()), "{why}");

    // Each request came under the name of its registry; the push's with the credential,
    // the others without one.
    let seen = up.requests();
    for (prefix, name) in [
        ("/files/pypi/", PYPI),
        ("/files/npm/", NPM),
        ("/files/crates/", CRATES),
        (REPO_PATH, GIT_HOST),
    ] {
        let these: Vec<_> = seen
            .iter()
            .filter(|r| r["path"].as_str().unwrap_or("").starts_with(prefix))
            .collect();
        assert!(!these.is_empty(), "nothing reached {prefix}: {seen:#?}");
        for r in these {
            let host = r["host"].as_str().unwrap_or("");
            assert!(
                host == name || host == format!("{name}:{port}"),
                "{prefix} came as {host:?}: {r}"
            );
            let auth = r["authorization"].as_str();
            if prefix == REPO_PATH {
                assert!(auth.is_none() || auth == Some(up.basic().as_str()), "{r}");
            } else {
                assert_eq!(auth, None, "{r}");
            }
        }
    }
    assert!(
        seen.iter().any(|r| r["path"]
            .as_str()
            .unwrap_or("")
            .ends_with("/git-receive-pack")
            && r["authorization"].as_str() == Some(up.basic().as_str())),
        "{seen:#?}"
    );

    // Under network.allow the same name is public-only: refused, with the way to allow
    // it, and nothing reached the server.
    assert_ne!(field(&out, "public", "rc"), "0", "{why}");
    assert!(
        !seen.iter().any(|r| r["path"]
            .as_str()
            .unwrap_or("")
            .starts_with("/files/public/")),
        "{seen:#?}"
    );
    assert!(
        text.contains(&format!("add \\\"{PYPI}:{port}\\\" under network.internal")),
        "{text}"
    );
    assert_no_secret("the run's log", &text, &up);
});

// A large body comes down whole through each way out (issue 25: the relays were made
// faster; they must not lose or reorder a byte): the CONNECT tunnel and transparent egress
// (copied through the tunnel's buffers) and interception (TLS terminated and made again).
both!(a_large_download_arrives_whole_by_every_path, |fx| {
    let up = Upstream::start(&fx);
    config(&fx, &up, "COMPANY_GIT_TOKEN", None);
    let data = noise((40 << 20) + 12_345, 0x9e37_79b9_7f4a_7c15);
    let digest = sha256_hex(&data);
    fs::write(up.dir.join("uploads/big.bin"), &data).unwrap();
    let ca = fx.home.join("e2e/upstream-ca.pem");
    let url = up.url("/download/big.bin");
    // `--noproxy example.invalid` replaces the sandbox's NO_PROXY (which names
    // localhost), so curl uses the proxy variables: a CONNECT.
    let get = |how: &str| format!("curl -sS --fail --max-time 120 {how} '{url}' | sha256sum");
    let (out, log, log_text) = run(
        &fx,
        &up,
        "COMPANY_GIT_TOKEN",
        &format!(
            "echo \"tunnel $({})\"\necho \"transparent $({})\"\n\
             echo \"intercepted $(wardcell zone enter push -- {})\"",
            get(&format!(
                "--noproxy example.invalid --cacert {}",
                ca.display()
            )),
            get(&format!("--noproxy '*' --cacert {}", ca.display())),
            get("--noproxy example.invalid"),
        ),
    );
    out.ok();
    for path in ["tunnel", "transparent", "intercepted"] {
        let line = out
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{path} ")))
            .unwrap_or_else(|| panic!("no {path} line; {out:#?}"));
        assert_eq!(line, format!("{digest}  -"), "{path}: {out:#?}");
    }
    // Two tunnels in the agent zone, each carrying the body and TLS around it; the push
    // zone's connection intercepted, so counted by its body alone.
    let down = |zone: &str| -> Vec<u64> {
        events(&log, "proxy.connect")
            .filter(|e| e["zone"] == zone)
            .map(|e| e["bytes_down"].as_u64().unwrap_or(0))
            .collect()
    };
    let tunnels = down("agent");
    assert_eq!(tunnels.len(), 2, "{log_text}");
    assert!(tunnels.iter().all(|&n| n > data.len() as u64), "{log_text}");
    assert_eq!(down("push"), [data.len() as u64], "{log_text}");
});
