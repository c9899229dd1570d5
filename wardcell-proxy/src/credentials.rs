//! Credentials: resolving each secret once at start, and deciding which request gets one.
//!
//! A secret lives in exactly one place after start-up: the prepared header value of its
//! credential, in a buffer wiped on drop. It is never formatted: `Credential`'s `Debug`
//! prints the name only, and every error names the credential and the secret's source,
//! never its content or anything a secret command printed.

#![forbid(unsafe_code)]

use std::fmt;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};

use base64::Engine;
use hyper::header::{HeaderName, HeaderValue};
use zeroize::Zeroizing;

use wardcell_common::helper;
use wardcell_common::plan::{CredentialPlan, CredentialScheme, SecretPlan};

use crate::allow::Host;
use crate::error::Error;

/// Longest secret read from a file or a command.
const MAX_SECRET: u64 = 16 * 1024;

/// Header names a `header` credential may not set: they frame the message or are stripped.
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
    "expect",
];

pub struct Credential {
    pub name: String,
    hosts: Vec<Host>,
    paths: Vec<String>,
    header: HeaderName,
    /// The complete header value, e.g. `Basic dXNlcjpzZWNyZXQ=`.
    value: Zeroizing<Vec<u8>>,
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Credential({})", self.name)
    }
}

impl Credential {
    /// The header to set on a request this credential is attached to.
    pub fn header(&self) -> (HeaderName, HeaderValue) {
        let mut v = HeaderValue::from_bytes(&self.value)
            .expect("validated when the credential was resolved");
        v.set_sensitive(true);
        (self.header.clone(), v)
    }
}

/// The credentials of one zone's proxy.
#[derive(Debug, Default)]
pub struct Credentials(Vec<Credential>);

impl Credentials {
    /// Resolve every secret now: a missing variable, a file others can read, or a failing
    /// command stops the proxy before it serves anything.
    pub fn resolve(plans: &[CredentialPlan]) -> Result<Credentials, Error> {
        plans
            .iter()
            .map(resolve_one)
            .collect::<Result<_, _>>()
            .map(Credentials)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Some credential is attached for this host: its CONNECTs are intercepted.
    pub fn names_host(&self, host: &Host) -> bool {
        self.0.iter().any(|c| c.hosts.contains(host))
    }

    /// The credential for a request to `host` with this path, if any.
    pub fn for_request(&self, host: &Host, path: &str) -> Option<&Credential> {
        self.0
            .iter()
            .find(|c| c.hosts.contains(host) && path_admits(&c.paths, path))
    }
}

/// Whether a credential with path patterns `patterns` (none: every path) attaches to a
/// request for `path`: only a plain path, matched by some pattern. Pure: unit tests and
/// the fuzzer call it directly.
pub fn path_admits(patterns: &[String], path: &str) -> bool {
    plain_path(path)
        && (patterns.is_empty() || patterns.iter().any(|p| glob(p.as_bytes(), path.as_bytes())))
}

fn resolve_one(plan: &CredentialPlan) -> Result<Credential, Error> {
    let bad = |why: String| Error::Credential {
        name: plan.name.clone(),
        why,
    };
    let hosts = plan
        .hosts
        .iter()
        .map(|h| Host::parse(h).map_err(|e| bad(format!("hosts: {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    if hosts.is_empty() {
        return Err(bad("it names no hosts".into()));
    }
    for p in &plan.paths {
        if !p.starts_with('/') && !p.starts_with('*') {
            return Err(bad(format!("path pattern `{p}` must start with `/`")));
        }
    }
    let header = match plan.scheme {
        CredentialScheme::Basic | CredentialScheme::Bearer => hyper::header::AUTHORIZATION,
        CredentialScheme::Header => {
            let name = plan
                .header
                .as_deref()
                .ok_or_else(|| bad("scheme `header` needs `header = \"Header-Name\"`".into()))?;
            let h = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| bad(format!("`{name}` is not a valid header name")))?;
            if RESERVED_HEADERS.contains(&h.as_str()) || h.as_str().starts_with("proxy-") {
                return Err(bad(format!("header `{name}` cannot carry a credential")));
            }
            h
        }
    };
    let username = match plan.scheme {
        CredentialScheme::Basic => {
            let u = plan
                .username
                .as_deref()
                .ok_or_else(|| bad("scheme `basic` needs `username`".into()))?;
            if u.contains(':') || u.bytes().any(|b| b.is_ascii_control()) {
                return Err(bad(
                    "the username may not contain `:` or control characters".into(),
                ));
            }
            Some(u)
        }
        _ => None,
    };

    let secret = read_secret(&plan.name, &plan.secret)?;
    let secret = trim(&secret);
    if secret.is_empty() {
        return Err(bad(format!(
            "{} gave an empty secret",
            source(&plan.secret)
        )));
    }
    if secret
        .iter()
        .any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f)
    {
        return Err(bad(format!(
            "{} gave a secret with control characters, which cannot go into an HTTP header",
            source(&plan.secret)
        )));
    }
    let value = match (plan.scheme, username) {
        (CredentialScheme::Basic, Some(user)) => {
            let mut pair = Zeroizing::new(Vec::with_capacity(user.len() + 1 + secret.len()));
            pair.extend_from_slice(user.as_bytes());
            pair.push(b':');
            pair.extend_from_slice(secret);
            let mut b64 = Zeroizing::new(String::with_capacity(pair.len().div_ceil(3) * 4));
            base64::engine::general_purpose::STANDARD.encode_string(&*pair, &mut b64);
            prefixed(b"Basic ", b64.as_bytes())
        }
        (CredentialScheme::Bearer, _) => prefixed(b"Bearer ", secret),
        _ => prefixed(b"", secret),
    };
    Ok(Credential {
        name: plan.name.clone(),
        hosts,
        paths: plan.paths.clone(),
        header,
        value,
    })
}

fn prefixed(prefix: &[u8], rest: &[u8]) -> Zeroizing<Vec<u8>> {
    let mut v = Zeroizing::new(Vec::with_capacity(prefix.len() + rest.len()));
    v.extend_from_slice(prefix);
    v.extend_from_slice(rest);
    v
}

fn trim(s: &[u8]) -> &[u8] {
    let start = s
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &s[start..end]
}

/// Where a secret comes from, for messages (never the secret).
fn source(s: &SecretPlan) -> String {
    match s {
        SecretPlan::Env(v) => format!("environment variable {v}"),
        SecretPlan::File(p) => format!("file {}", p.display()),
        SecretPlan::Command(argv) => format!(
            "command `{}`",
            argv.first().map(String::as_str).unwrap_or_default()
        ),
    }
}

fn read_secret(name: &str, s: &SecretPlan) -> Result<Zeroizing<Vec<u8>>, Error> {
    let bad = |why: String| Error::Credential {
        name: name.to_string(),
        why,
    };
    match s {
        SecretPlan::Env(var) => match std::env::var_os(var) {
            Some(v) => Ok(Zeroizing::new(v.into_encoded_bytes())),
            None => Err(bad(format!(
                "environment variable {var} is not set in the environment wardcell was started in"
            ))),
        },
        SecretPlan::File(path) => read_secret_file(name, path),
        SecretPlan::Command(argv) => {
            let (prog, args) = argv
                .split_first()
                .ok_or_else(|| bad("the secret command is empty".into()))?;
            // Run before the proxy confines itself: it may need the user's agent or keyring.
            // From `/` with the helper environment, never the project's directory or the
            // caller's PATH (wardcell_common::helper). Its stderr goes where the proxy's
            // goes; its stdout is the secret.
            let out = Command::new(prog)
                .args(args)
                .current_dir(helper::HELPER_CWD)
                .env_clear()
                .envs(helper::helper_env(std::env::vars_os().filter_map(
                    |(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)),
                )))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .output()
                .map_err(|e| bad(format!("cannot run command `{prog}`: {e}")))?;
            let stdout = Zeroizing::new(out.stdout);
            if !out.status.success() {
                return Err(bad(format!("command `{prog}` failed ({})", out.status)));
            }
            if stdout.len() as u64 > MAX_SECRET {
                return Err(bad(format!(
                    "command `{prog}` printed more than {MAX_SECRET} bytes"
                )));
            }
            Ok(stdout)
        }
    }
}

/// Read a secret file that only its owner, the user, may read or write.
fn read_secret_file(name: &str, path: &Path) -> Result<Zeroizing<Vec<u8>>, Error> {
    let file_err = |why: String| Error::CredentialFile {
        name: name.to_string(),
        path: path.to_path_buf(),
        why,
    };
    let f = File::open(path).map_err(|e| Error::Credential {
        name: name.to_string(),
        why: format!("cannot open {}: {e}", path.display()),
    })?;
    // Checked on the open file, so the file checked is the file read.
    let meta = f
        .metadata()
        .map_err(|e| file_err(format!("cannot be inspected: {e}")))?;
    if !meta.is_file() {
        return Err(file_err("is not a regular file".into()));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(file_err(format!(
            "is owned by uid {}, not by you (uid {me})",
            meta.uid()
        )));
    }
    let mode = meta.mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(file_err(format!(
            "is readable or writable by others (mode {mode:o})"
        )));
    }
    if meta.len() > MAX_SECRET {
        return Err(file_err(format!("is larger than {MAX_SECRET} bytes")));
    }
    // Sized up front so the buffer never reallocates and leaves a copy behind.
    let mut buf = Zeroizing::new(Vec::with_capacity(MAX_SECRET as usize + 1));
    f.take(MAX_SECRET + 1)
        .read_to_end(&mut buf)
        .map_err(|e| file_err(format!("cannot be read: {e}")))?;
    if buf.len() as u64 > MAX_SECRET {
        return Err(file_err(format!("is larger than {MAX_SECRET} bytes")));
    }
    Ok(buf)
}

/// A path with no dot segments and no encoded `.`, `/` or `\`: what the upstream serves
/// is what the pattern saw.
fn plain_path(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    if ["%2e", "%2f", "%5c", "\\"]
        .iter()
        .any(|s| lower.contains(s))
    {
        return false;
    }
    !path.split('/').any(|seg| seg == "." || seg == "..")
}

/// `*` matches any run of bytes, `/` included; everything else matches itself.
fn glob(pat: &[u8], s: &[u8]) -> bool {
    let (mut p, mut i) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        if p < pat.len() && pat[p] == b'*' {
            star = Some((p, i));
            p += 1;
        } else if p < pat.len() && pat[p] == s[i] {
            p += 1;
            i += 1;
        } else if let Some((sp, si)) = star {
            p = sp + 1;
            i = si + 1;
            star = Some((sp, si + 1));
        } else {
            return false;
        }
    }
    pat[p..].iter().all(|&b| b == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn plan(scheme: CredentialScheme, secret: SecretPlan) -> CredentialPlan {
        CredentialPlan {
            name: "git".into(),
            hosts: vec!["git.example.com".into()],
            paths: vec!["/company/*".into()],
            scheme,
            username: Some("x-access-token".into()),
            header: Some("X-Api-Key".into()),
            secret,
        }
    }

    fn header_of(c: &Credentials) -> (String, String) {
        let host = Host::parse("git.example.com").unwrap();
        let cred = c.for_request(&host, "/company/repo.git/info/refs").unwrap();
        let (n, v) = cred.header();
        (n.to_string(), v.to_str().unwrap().to_string())
    }

    fn secret_file(mode: u32, content: &str) -> (tempdir::Dir, std::path::PathBuf) {
        let d = tempdir::Dir::new();
        let p = d.0.join("token");
        std::fs::write(&p, content).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        (d, p)
    }

    /// A directory removed on drop (no extra dev-dependency for this).
    mod tempdir {
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new() -> Dir {
                use std::sync::atomic::{AtomicU32, Ordering};
                static N: AtomicU32 = AtomicU32::new(0);
                let p = std::env::temp_dir().join(format!(
                    "wardcell-proxy-test-{}-{}",
                    std::process::id(),
                    N.fetch_add(1, Ordering::Relaxed)
                ));
                std::fs::create_dir_all(&p).unwrap();
                Dir(p)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn schemes_build_their_headers() {
        let (_d, p) = secret_file(0o600, "s3cret\n");
        let basic =
            Credentials::resolve(&[plan(CredentialScheme::Basic, SecretPlan::File(p.clone()))])
                .unwrap();
        // base64("x-access-token:s3cret")
        assert_eq!(
            header_of(&basic),
            (
                "authorization".into(),
                "Basic eC1hY2Nlc3MtdG9rZW46czNjcmV0".into()
            )
        );
        let bearer =
            Credentials::resolve(&[plan(CredentialScheme::Bearer, SecretPlan::File(p.clone()))])
                .unwrap();
        assert_eq!(
            header_of(&bearer),
            ("authorization".into(), "Bearer s3cret".into())
        );
        let header =
            Credentials::resolve(&[plan(CredentialScheme::Header, SecretPlan::File(p))]).unwrap();
        assert_eq!(header_of(&header), ("x-api-key".into(), "s3cret".into()));
        assert_eq!(format!("{header:?}"), "Credentials([Credential(git)])");
    }

    #[test]
    fn command_secrets_are_trimmed_and_failures_refused() {
        let ok = plan(
            CredentialScheme::Bearer,
            SecretPlan::Command(vec!["printf".into(), "  tok\n".into()]),
        );
        assert_eq!(
            header_of(&Credentials::resolve(&[ok]).unwrap()).1,
            "Bearer tok"
        );
        let failing = plan(
            CredentialScheme::Bearer,
            SecretPlan::Command(vec!["sh".into(), "-c".into(), "echo leaked; exit 3".into()]),
        );
        let e = Credentials::resolve(&[failing]).unwrap_err().to_string();
        assert!(
            e.contains("credential git") && e.contains("`sh` failed"),
            "{e}"
        );
        assert!(!e.contains("leaked"), "{e}");
    }

    #[test]
    fn file_others_can_read_is_refused_with_chmod_advice() {
        for mode in [0o644, 0o640, 0o602, 0o660] {
            let (_d, p) = secret_file(mode, "s3cret");
            let e = Credentials::resolve(&[plan(
                CredentialScheme::Bearer,
                SecretPlan::File(p.clone()),
            )])
            .unwrap_err()
            .to_string();
            assert!(
                e.contains(&p.display().to_string()) && e.contains("chmod 600"),
                "{e}"
            );
            assert!(!e.contains("s3cret"), "{e}");
        }
    }

    #[test]
    fn missing_env_and_bad_values_are_refused_without_the_value() {
        let e = Credentials::resolve(&[plan(
            CredentialScheme::Bearer,
            SecretPlan::Env("WARDCELL_TEST_SURELY_UNSET".into()),
        )])
        .unwrap_err()
        .to_string();
        assert!(e.contains("WARDCELL_TEST_SURELY_UNSET is not set"), "{e}");
        let (_d, p) = secret_file(0o600, "a\r\nInjected: yes");
        let e = Credentials::resolve(&[plan(CredentialScheme::Bearer, SecretPlan::File(p))])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("control characters") && !e.contains("Injected"),
            "{e}"
        );
        let mut p = plan(CredentialScheme::Header, SecretPlan::Env("PATH".into()));
        p.header = Some("Proxy-Authorization".into());
        assert!(Credentials::resolve(&[p]).is_err());
    }

    #[test]
    fn attached_only_for_matching_host_and_plain_matching_path() {
        let (_d, p) = secret_file(0o600, "s3cret");
        let c =
            Credentials::resolve(&[plan(CredentialScheme::Bearer, SecretPlan::File(p))]).unwrap();
        let host = Host::parse("git.example.com").unwrap();
        let other = Host::parse("example.com").unwrap();
        assert!(c.names_host(&host) && !c.names_host(&other));
        assert!(c.for_request(&host, "/company/a/b").is_some());
        assert!(c.for_request(&other, "/company/a").is_none());
        for path in [
            "/other/x",
            "/company",
            "/companyx/a",
            "/company/../admin",
            "/company/%2e%2e/admin",
            "/company/a%2Fb",
            "/company/.",
            "/company/a\\b",
        ] {
            assert!(c.for_request(&host, path).is_none(), "{path}");
        }
    }

    #[test]
    fn glob_semantics() {
        assert!(glob(b"/a/*", b"/a/b/c"));
        assert!(glob(b"/a/*", b"/a/"));
        assert!(!glob(b"/a/*", b"/a"));
        assert!(glob(b"*", b""));
        assert!(glob(b"/*/info/refs", b"/x/y/info/refs"));
        assert!(!glob(b"/*/info/refs", b"/x/y/info/refsx"));
        assert!(glob(b"/exact", b"/exact"));
        assert!(!glob(b"/exact", b"/exactly"));
        assert!(glob(b"/a*b*c", b"/aXbYbZc"));
    }
}
