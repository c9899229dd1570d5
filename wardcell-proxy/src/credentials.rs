//! Credentials: resolving each secret once at start, and deciding which request gets one.
//!
//! A secret lives in exactly one place after start-up: the prepared header value of its
//! credential, in a buffer wiped on drop. It is never formatted: `Credential`'s `Debug`
//! prints the name only, and every error names the credential and the secret's source,
//! never its content or anything a secret command printed.

#![forbid(unsafe_code)]

use std::fmt;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::process::{Command, Stdio};

use base64::Engine;
use hyper::header::{HeaderName, HeaderValue};
use hyper::Method;
use zeroize::Zeroizing;

use wardcell_common::helper;
use wardcell_common::plan::{CredentialPlan, CredentialScheme, SecretPlan};
use wardcell_support::sandbox_env::{DEFAULT_METHODS, NEVER_METHODS};

use crate::allow::{Host, Target};
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
    /// Host and port, both matched exactly.
    hosts: Vec<Target>,
    paths: Vec<String>,
    methods: Vec<Method>,
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
    /// command stops the proxy before it serves anything. `programs` are the commands'
    /// programs, held open since the run started, one per `command` secret in order.
    pub fn resolve(plans: &[CredentialPlan], programs: Vec<OwnedFd>) -> Result<Credentials, Error> {
        let mut programs = programs.into_iter();
        let mut program = |p: &CredentialPlan| match p.secret {
            SecretPlan::Command(_) => programs.next(),
            _ => None,
        };
        plans
            .iter()
            .map(|p| resolve_one(p, program(p)))
            .collect::<Result<_, _>>()
            .map(Credentials)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Some credential is attached for this host and port: its CONNECTs are intercepted.
    pub fn names(&self, target: &Target) -> bool {
        self.0.iter().any(|c| c.hosts.contains(target))
    }

    /// Every host a credential names, once (for the CA's leaves).
    pub fn hosts(&self) -> Vec<Host> {
        let mut out: Vec<Host> = Vec::new();
        for t in self.0.iter().flat_map(|c| &c.hosts) {
            if !out.contains(&t.host) {
                out.push(t.host.clone());
            }
        }
        out
    }

    /// The credential for a request to `target` with this method and path, if any.
    /// A request a credential would be considered for (its host, port and method) whose
    /// path is ambiguous is refused: `Err(why)`, and nothing is attached or sent.
    pub fn for_request(
        &self,
        target: &Target,
        method: &Method,
        path: &str,
    ) -> Result<Option<&Credential>, &'static str> {
        let mut candidates = self
            .0
            .iter()
            .filter(|c| c.hosts.contains(target) && c.methods.contains(method))
            .peekable();
        if candidates.peek().is_none() {
            return Ok(None);
        }
        let path = normalise_path(path)?;
        Ok(candidates.find(|c| patterns_admit(&c.paths, &path)))
    }
}

/// Whether a credential with path patterns `patterns` (none: every path) attaches to a
/// request for `path`: only a path that normalises, matched there by some pattern. Pure:
/// unit tests and the fuzzer call it directly.
pub fn path_admits(patterns: &[String], path: &str) -> bool {
    normalise_path(path).is_ok_and(|p| patterns_admit(patterns, &p))
}

fn patterns_admit(patterns: &[String], normal: &str) -> bool {
    patterns.is_empty()
        || patterns
            .iter()
            .any(|p| glob(p.as_bytes(), normal.as_bytes()))
}

/// A request path as a credential's patterns see it, or why it is ambiguous.
///
/// Normalised: `%XX` escapes of letters, digits, `-`, `_` and `~` are decoded (RFC 3986
/// 6.2.2.2: every server reads them as the characters), other escapes keep their byte
/// with the hex in capitals. Ambiguous (servers and frameworks disagree on what it
/// names, so a pattern cannot be trusted to have seen what the upstream serves): not
/// starting with `/`, a `.` or `..` segment, a `;` parameter, an escaped `/`, `.`, `%`,
/// `\` or `;` (a framework that decodes before it strips parameters would read one), a
/// backslash, repeated slashes, a `%` not followed by two hex digits, an encoded NUL,
/// and escapes that decode to bytes that are not UTF-8 (an overlong form such as
/// `%C0%AE` for `.`, which a lenient decoder reads as the character).
pub fn normalise_path(path: &str) -> Result<String, &'static str> {
    let b = path.as_bytes();
    if b.first() != Some(&b'/') {
        return Err("it does not start with `/`");
    }
    decodes_plainly(b)?;
    let mut out = String::with_capacity(path.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b'%' => {
                let hex = |j: usize| b.get(j).and_then(|d| (*d as char).to_digit(16));
                let (Some(hi), Some(lo)) = (hex(i + 1), hex(i + 2)) else {
                    return Err("it has a `%` that is not followed by two hex digits");
                };
                let byte = (hi * 16 + lo) as u8;
                match byte {
                    b'/' | b'.' | b'%' | b'\\' | b';' => {
                        return Err("it has an encoded `/`, `.`, `%`, `\\` or `;`");
                    }
                    _ if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'~') => {
                        out.push(byte as char)
                    }
                    _ => {
                        out.push('%');
                        out.push_str(&format!("{byte:02X}"));
                    }
                }
                i += 3;
                continue;
            }
            b'\\' => return Err("it has a backslash"),
            b';' => return Err("it has a `;` parameter"),
            b'/' if out.ends_with('/') => return Err("it has repeated slashes"),
            _ => {}
        }
        // Only ASCII bytes are matched above: multi-byte characters pass whole.
        let ch = path[i..]
            .chars()
            .next()
            .expect("i is on a character boundary");
        out.push(ch);
        i += ch.len_utf8();
    }
    if out.split('/').any(|seg| seg == "." || seg == "..") {
        return Err("it has a `.` or `..` segment");
    }
    Ok(out)
}

/// The path with every well-formed `%XX` decoded is UTF-8 (Rust's decoder refuses
/// overlong forms and surrogates) without a NUL. Malformed escapes are left to
/// [`normalise_path`].
fn decodes_plainly(b: &[u8]) -> Result<(), &'static str> {
    let hex = |j: usize| b.get(j).and_then(|d| (*d as char).to_digit(16));
    let mut decoded = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match (b[i], hex(i + 1), hex(i + 2)) {
            (b'%', Some(hi), Some(lo)) => {
                decoded.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (c, _, _) => {
                decoded.push(c);
                i += 1;
            }
        }
    }
    if decoded.contains(&0) {
        return Err("it has an encoded NUL (`%00`)");
    }
    let Ok(text) = std::str::from_utf8(&decoded) else {
        return Err(
            "its escapes decode to bytes that are not UTF-8 (an overlong or broken sequence)",
        );
    };
    if text.chars().any(folds_to_syntax) {
        return Err("it has a character a server may fold into `.`, `/`, `\\`, `;` or `%` (a fullwidth or compatibility form)");
    }
    Ok(())
}

/// A character Unicode compatibility normalisation (NFKC, which servers and frameworks
/// apply) or IDNA-style mapping turns into path syntax, or into ASCII at all: every
/// fullwidth ASCII form (U+FF01 to U+FF5E, `．` and `／` among them), the halfwidth
/// ideographic full stop, and the dot, slash, backslash, semicolon and percent look-alikes.
fn folds_to_syntax(c: char) -> bool {
    const LOOK_ALIKES: &[char] = &[
        '\u{2024}', '\u{2025}', '\u{2026}', '\u{FE52}', '\u{3002}', '\u{FF61}', '\u{2215}',
        '\u{2044}', '\u{29F8}', '\u{FE68}', '\u{FE54}', '\u{FE6A}', '\u{2216}', '\u{29F5}',
    ];
    ('\u{FF01}'..='\u{FF5E}').contains(&c) || LOOK_ALIKES.contains(&c)
}

/// `host` or `host:port` from a credential's `hosts`: without a port, 443.
pub fn parse_host_port(s: &str) -> Result<Target, String> {
    let (host, port) = match s.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((_, "")) => (s, None),
            Some((_, after)) => (
                &s[..s.len() - after.len()],
                Some(
                    after
                        .strip_prefix(':')
                        .ok_or_else(|| format!("`{s}`: a port goes after `:`"))?,
                ),
            ),
            None => return Err(format!("`{s}` has an unclosed `[`")),
        },
        None => match s.rsplit_once(':') {
            Some((h, _)) if h.contains(':') => {
                return Err(format!(
                    "`{s}`: an IPv6 address must be written in brackets"
                ))
            }
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        },
    };
    let port = match port {
        None => 443,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n != 0 && p.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => return Err(format!("`{s}`: the port must be a number from 1 to 65535")),
        },
    };
    Target::new(host, port)
}

fn resolve_one(plan: &CredentialPlan, program: Option<OwnedFd>) -> Result<Credential, Error> {
    let bad = |why: String| Error::Credential {
        name: plan.name.clone(),
        why,
    };
    let hosts = plan
        .hosts
        .iter()
        .map(|h| parse_host_port(h).map_err(|e| bad(format!("hosts: {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    if hosts.is_empty() {
        return Err(bad("it names no hosts".into()));
    }
    let named: Vec<&str> = if plan.methods.is_empty() {
        DEFAULT_METHODS.to_vec()
    } else {
        plan.methods.iter().map(String::as_str).collect()
    };
    let mut methods = Vec::new();
    for m in named {
        if NEVER_METHODS.contains(&m) {
            return Err(bad(format!("{m} is never attached a credential")));
        }
        let m = Method::from_bytes(m.as_bytes())
            .map_err(|_| bad(format!("`{m}` is not an HTTP method")))?;
        methods.push(m);
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

    let secret = read_secret(&plan.name, &plan.secret, program)?;
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
        methods,
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

fn read_secret(
    name: &str,
    s: &SecretPlan,
    program: Option<OwnedFd>,
) -> Result<Zeroizing<Vec<u8>>, Error> {
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
            // The program the broker opened when the run started, never looked up here;
            // from `/` with the helper environment, never the project's directory or the
            // caller's PATH (wardcell_common::helper). Its stderr goes where the proxy's
            // goes; its stdout is the secret.
            let program = program
                .ok_or_else(|| bad(format!("the broker did not hand over command `{prog}`")))?;
            let mut cmd = Command::new(prog);
            let out = cmd
                .args(args)
                .current_dir(helper::HELPER_CWD)
                .env_clear()
                .envs(helper::helper_env(std::env::vars_os().filter_map(
                    |(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)),
                )))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit());
            let out = crate::sys::exec_from(out, program.as_raw_fd())
                .and_then(|c| c.output())
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
    // Without blocking: a pipe at the path is refused below, not waited on.
    let mut f = std::fs::OpenOptions::new();
    let f = f.read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    let f = f.open(path).map_err(|e| Error::Credential {
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

    /// [`Credentials::resolve`] with each command's program opened as the broker opens it.
    fn resolve(plans: &[CredentialPlan]) -> Result<Credentials, Error> {
        let programs = plans.iter().filter_map(|p| match &p.secret {
            SecretPlan::Command(argv) => helper::program_path(&argv[0], &|p| p.is_file()),
            _ => None,
        });
        let programs = programs
            .map(|p| helper::open_program(&p).unwrap().into())
            .collect();
        Credentials::resolve(plans, programs)
    }

    fn plan(scheme: CredentialScheme, secret: SecretPlan) -> CredentialPlan {
        CredentialPlan {
            name: "git".into(),
            hosts: vec!["git.example.com".into()],
            paths: vec!["/company/*".into()],
            methods: vec![],
            placeholder: None,
            scheme,
            username: Some("x-access-token".into()),
            header: Some("X-Api-Key".into()),
            secret,
        }
    }

    fn header_of(c: &Credentials) -> (String, String) {
        let t = Target::new("git.example.com", 443).unwrap();
        let cred = c
            .for_request(&t, &Method::GET, "/company/repo.git/info/refs")
            .unwrap()
            .unwrap();
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
        let basic = resolve(&[plan(CredentialScheme::Basic, SecretPlan::File(p.clone()))]).unwrap();
        // base64("x-access-token:s3cret")
        assert_eq!(
            header_of(&basic),
            (
                "authorization".into(),
                "Basic eC1hY2Nlc3MtdG9rZW46czNjcmV0".into()
            )
        );
        let bearer =
            resolve(&[plan(CredentialScheme::Bearer, SecretPlan::File(p.clone()))]).unwrap();
        assert_eq!(
            header_of(&bearer),
            ("authorization".into(), "Bearer s3cret".into())
        );
        let header = resolve(&[plan(CredentialScheme::Header, SecretPlan::File(p))]).unwrap();
        assert_eq!(header_of(&header), ("x-api-key".into(), "s3cret".into()));
        assert_eq!(format!("{header:?}"), "Credentials([Credential(git)])");
    }

    #[test]
    fn command_secrets_are_trimmed_and_failures_refused() {
        let ok = plan(
            CredentialScheme::Bearer,
            SecretPlan::Command(vec!["printf".into(), "  tok\n".into()]),
        );
        assert_eq!(header_of(&resolve(&[ok]).unwrap()).1, "Bearer tok");
        let failing = plan(
            CredentialScheme::Bearer,
            SecretPlan::Command(vec!["sh".into(), "-c".into(), "echo leaked; exit 3".into()]),
        );
        let e = resolve(&[failing]).unwrap_err().to_string();
        assert!(
            e.contains("credential git") && e.contains("`sh` failed"),
            "{e}"
        );
        assert!(!e.contains("leaked"), "{e}");
        // What runs is the program handed over, whatever the command names.
        let named = plan(
            CredentialScheme::Bearer,
            SecretPlan::Command(vec![
                "/nonexistent/token".into(),
                "-c".into(),
                "printf fromfd".into(),
            ]),
        );
        let sh = helper::open_program(Path::new("/bin/sh")).unwrap().into();
        let got = Credentials::resolve(std::slice::from_ref(&named), vec![sh]).unwrap();
        assert_eq!(header_of(&got).1, "Bearer fromfd");
        let e = Credentials::resolve(&[named], vec![])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("the broker did not hand over command `/nonexistent/token`"),
            "{e}"
        );
    }

    #[test]
    fn a_pipe_at_a_secret_files_path_is_refused_without_waiting() {
        let (d, p) = secret_file(0o600, "x");
        std::fs::remove_file(&p).unwrap();
        nix::unistd::mkfifo(&p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let e = resolve(&[plan(CredentialScheme::Bearer, SecretPlan::File(p))]).unwrap_err();
        assert!(e.to_string().contains("is not a regular file"), "{e}");
        drop(d);
    }

    #[test]
    fn file_others_can_read_is_refused_with_chmod_advice() {
        for mode in [0o644, 0o640, 0o602, 0o660] {
            let (_d, p) = secret_file(mode, "s3cret");
            let e = resolve(&[plan(CredentialScheme::Bearer, SecretPlan::File(p.clone()))])
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
        let e = resolve(&[plan(
            CredentialScheme::Bearer,
            SecretPlan::Env("WARDCELL_TEST_SURELY_UNSET".into()),
        )])
        .unwrap_err()
        .to_string();
        assert!(e.contains("WARDCELL_TEST_SURELY_UNSET is not set"), "{e}");
        let (_d, p) = secret_file(0o600, "a\r\nInjected: yes");
        let e = resolve(&[plan(CredentialScheme::Bearer, SecretPlan::File(p))])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("control characters") && !e.contains("Injected"),
            "{e}"
        );
        let mut p = plan(CredentialScheme::Header, SecretPlan::Env("PATH".into()));
        p.header = Some("Proxy-Authorization".into());
        assert!(resolve(&[p]).is_err());
    }

    fn bearer(hosts: &[&str], paths: &[&str], methods: &[&str]) -> (tempdir::Dir, Credentials) {
        let (d, p) = secret_file(0o600, "s3cret");
        let mut pl = plan(CredentialScheme::Bearer, SecretPlan::File(p));
        pl.hosts = hosts.iter().map(|h| h.to_string()).collect();
        pl.paths = paths.iter().map(|h| h.to_string()).collect();
        pl.methods = methods.iter().map(|h| h.to_string()).collect();
        (d, resolve(&[pl]).unwrap())
    }

    fn t(host: &str, port: u16) -> Target {
        Target::new(host, port).unwrap()
    }

    fn attached(c: &Credentials, target: &Target, method: &str, path: &str) -> bool {
        let m = Method::from_bytes(method.as_bytes()).unwrap();
        c.for_request(target, &m, path).unwrap().is_some()
    }

    #[test]
    fn attached_only_for_matching_host_and_port() {
        let (_d, c) = bearer(
            &[
                "git.example.com",
                "api.example.com:8443",
                "[::1]:9000",
                "10.0.0.1",
            ],
            &[],
            &[],
        );
        for (host, port, yes) in [
            ("git.example.com", 443, true),
            ("GIT.example.com.", 443, true),
            ("git.example.com", 80, false),
            ("git.example.com", 8443, false),
            ("api.example.com", 8443, true),
            ("api.example.com", 443, false),
            ("[::1]", 9000, true),
            ("::1", 443, false),
            ("10.0.0.1", 443, true),
            ("example.com", 443, false),
            ("sub.git.example.com", 443, false),
        ] {
            let target = t(host, port);
            assert_eq!(c.names(&target), yes, "{host}:{port}");
            assert_eq!(attached(&c, &target, "GET", "/x"), yes, "{host}:{port}");
        }
        assert_eq!(
            c.hosts(),
            ["git.example.com", "api.example.com", "::1", "10.0.0.1"]
                .map(|h| Host::parse(h).unwrap())
        );
    }

    #[test]
    fn hosts_with_bad_ports_are_refused() {
        for bad in [
            "a.io:0",
            "a.io:",
            "a.io:x",
            "a.io:65536",
            "::1:443",
            "[::1",
            "[::1]x",
            "*.a.io",
        ] {
            assert!(parse_host_port(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_host_port("[::1]:8443").unwrap(), t("[::1]", 8443));
        assert_eq!(parse_host_port("A.io").unwrap(), t("a.io", 443));
    }

    #[test]
    fn attached_only_for_the_methods_it_names() {
        let (_d, c) = bearer(&["a.io"], &[], &[]);
        let a = t("a.io", 443);
        for m in ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"] {
            assert!(attached(&c, &a, m, "/"), "{m}");
        }
        for m in ["OPTIONS", "TRACE", "TRACK", "CONNECT", "PROPFIND", "get"] {
            assert!(!attached(&c, &a, m, "/"), "{m}");
        }
        // Not considered for the method: not refused for its path either.
        assert!(matches!(
            c.for_request(&a, &Method::OPTIONS, "/../x"),
            Ok(None)
        ));
        let (_d2, c) = bearer(&["a.io"], &[], &["GET", "OPTIONS"]);
        assert!(attached(&c, &a, "OPTIONS", "/"));
        assert!(!attached(&c, &a, "POST", "/"));
        for never in ["TRACE", "TRACK", "CONNECT"] {
            let (_d, p) = secret_file(0o600, "s3cret");
            let mut pl = plan(CredentialScheme::Bearer, SecretPlan::File(p));
            pl.methods = vec!["GET".into(), never.into()];
            let e = resolve(&[pl]).unwrap_err().to_string();
            assert!(e.contains(never), "{e}");
        }
    }

    #[test]
    fn attached_only_for_plain_matching_paths() {
        let (_d, c) = bearer(&["git.example.com"], &["/company/*"], &[]);
        let host = t("git.example.com", 443);
        let other = t("example.com", 443);
        assert!(attached(&c, &host, "GET", "/company/a/b"));
        assert!(attached(&c, &host, "GET", "/%63ompany/a"));
        assert!(!attached(&c, &other, "GET", "/company/a"));
        for path in ["/other/x", "/company", "/companyx/a", "/Company/a"] {
            assert!(!attached(&c, &host, "GET", path), "{path}");
        }
        for path in [
            "/company/../admin",
            "/company/%2e%2e/admin",
            "/company/%2E./admin",
            "/company/a%2Fb",
            "/company/a%2fb",
            "/company/a%252fb",
            "/company/.",
            "/company/./a",
            "/company/a\\b",
            "/company/a%5cb",
            "/company/a%5Cb",
            "/company/a;x=1",
            "/company;/a",
            "/company//a",
            "//company/a",
            "/company/a%",
            "/company/a%2",
            "/company/a%zz",
            "/company/a%00",
            "/company/%C0%AE%C0%AE/admin",
            "/company/a%c0%afb",
            "company/a",
            "*",
        ] {
            assert!(c.for_request(&host, &Method::GET, path).is_err(), "{path}");
            // A host no credential names is not affected.
            assert!(
                matches!(c.for_request(&other, &Method::GET, path), Ok(None)),
                "{path}"
            );
        }
    }

    #[test]
    fn normalisation() {
        for (raw, normal) in [
            ("/", "/"),
            ("/a/b/", "/a/b/"),
            ("/%61%62%2D%5f%7E", "/ab-_~"),
            ("/a%20b%3fc%3d", "/a%20b%3Fc%3D"),
            ("/caf\u{e9}/x", "/caf\u{e9}/x"),
            ("/caf%C3%A9/x", "/caf%C3%A9/x"),
            ("/a.b/..c/.d", "/a.b/..c/.d"),
        ] {
            assert_eq!(normalise_path(raw).as_deref(), Ok(normal), "{raw}");
        }
        for (raw, why) in [
            ("/a/..", "`.` or `..` segment"),
            ("/a/.", "`.` or `..` segment"),
            ("/a/%2e", "encoded"),
            ("/a/%25", "encoded"),
            ("/a/%2F", "encoded"),
            ("/a/%5C", "encoded"),
            ("/a/%3b", "encoded"),
            ("/a\\b", "backslash"),
            ("/a;b", "`;`"),
            ("/a//b", "repeated"),
            ("/a%4", "hex digits"),
            ("/a%G0", "hex digits"),
            ("", "start with"),
            ("/a%00b", "NUL"),
            ("/a/b%00", "NUL"),
            ("/a/%C0%AE%C0%AE/x", "not UTF-8"),
            ("/a/%c0%af", "not UTF-8"),
            ("/a/%E0%80%AE", "not UTF-8"),
            ("/a/%F0%80%80%AF", "not UTF-8"),
            ("/a/%ED%A0%80", "not UTF-8"),
            ("/a/%C3", "not UTF-8"),
            ("/a/%FF", "not UTF-8"),
            // Fullwidth dots and slash (U+FF0E, U+FF0F), escaped and raw, and look-alikes.
            ("/company/%EF%BC%8E%EF%BC%8E/secret", "fold"),
            ("/company/\u{FF0E}\u{FF0E}/secret", "fold"),
            ("/company\u{FF0F}..", "fold"),
            ("/a/\u{2024}\u{2024}/b", "fold"),
            ("/a/%E2%88%95b", "fold"),
            ("/a/%EF%BD%81", "fold"),
        ] {
            let e = normalise_path(raw).unwrap_err();
            assert!(e.contains(why), "{raw}: {e}");
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
