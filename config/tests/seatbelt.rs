//! The profile text, read back.
//!
//! Golden files pin the text of the built-in profiles and of a configuration that uses
//! every feature (`config/tests/golden/*.sb`; `WARDCELL_BLESS=1 cargo test -p
//! wardcell-config --test seatbelt` rewrites them, and the diff is then reviewed). The property
//! tests parse generated profiles back into rules with a small SBPL reader, evaluate
//! them the way Seatbelt does (default deny, the last matching rule decides), and compare
//! every answer with what the spec says.

use std::path::{Path, PathBuf};

use wardcell_common::identity::{Identity, Kind};
use wardcell_common::plan::{SandboxSpec, ViewEntry, ViewKind};
use wardcell_config::config::{self, Config};
use wardcell_seatbelt::*;
use wardcell_support::paths;

// ---------------------------------------------------------------- an SBPL reader

#[derive(Debug, Clone, PartialEq)]
enum Sexp {
    List(Vec<Sexp>),
    Str(String),
    Regex(String),
    Atom(String),
}

/// Reads SBPL as far as wardcell writes it: lists, atoms, `"..."` strings with `\"`
/// and `\\`, `#"..."` regex literals and `;` comments. Anything else is an error.
fn read_sbpl(text: &str) -> Result<Vec<Sexp>, String> {
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    let mut stack: Vec<Vec<Sexp>> = vec![Vec::new()];
    let string = |i: &mut usize| -> Result<String, String> {
        // At the opening quote.
        *i += 1;
        let mut s = String::new();
        loop {
            match chars.get(*i) {
                None => return Err("unterminated string".into()),
                Some('"') => {
                    *i += 1;
                    return Ok(s);
                }
                Some('\\') => match chars.get(*i + 1) {
                    Some(c @ ('"' | '\\')) => {
                        s.push(*c);
                        *i += 2;
                    }
                    other => return Err(format!("unknown escape {other:?}")),
                },
                Some(c) if c.is_control() => return Err(format!("raw control {c:?}")),
                Some(c) => {
                    s.push(*c);
                    *i += 1;
                }
            }
        }
    };
    while i < chars.len() {
        match chars[i] {
            ';' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            c if c.is_whitespace() => i += 1,
            '(' => {
                stack.push(Vec::new());
                i += 1;
            }
            ')' => {
                let list = stack.pop().ok_or("unbalanced )")?;
                stack
                    .last_mut()
                    .ok_or("unbalanced )")?
                    .push(Sexp::List(list));
                i += 1;
            }
            '"' => {
                let s = string(&mut i)?;
                stack.last_mut().unwrap().push(Sexp::Str(s));
            }
            '#' if chars.get(i + 1) == Some(&'"') => {
                i += 1;
                let s = string(&mut i)?;
                stack.last_mut().unwrap().push(Sexp::Regex(s));
            }
            _ => {
                let start = i;
                while i < chars.len()
                    && !chars[i].is_whitespace()
                    && !matches!(chars[i], '(' | ')' | '"' | ';')
                {
                    i += 1;
                }
                let atom: String = chars[start..i].iter().collect();
                stack.last_mut().unwrap().push(Sexp::Atom(atom));
            }
        }
        if stack.is_empty() {
            return Err("unbalanced".into());
        }
    }
    if stack.len() != 1 {
        return Err("unclosed (".into());
    }
    Ok(stack.pop().unwrap())
}

#[derive(Debug, Clone, PartialEq)]
enum Filter {
    Subpath(String),
    Literal(String),
    UnixSocket(String),
    Tcp(String),
    /// Anything that never matches a path or a port (names, targets, regexes).
    Other(Sexp),
}

#[derive(Debug, Clone)]
struct Rule {
    allow: bool,
    ops: Vec<String>,
    filters: Vec<Filter>,
}

fn str_of(s: &Sexp) -> Option<&str> {
    match s {
        Sexp::Str(s) => Some(s),
        _ => None,
    }
}

fn filter_of(s: &Sexp) -> Filter {
    if let Sexp::List(l) = s {
        match (l.first(), l.get(1)) {
            (Some(Sexp::Atom(a)), Some(x)) if a == "subpath" => {
                return Filter::Subpath(str_of(x).unwrap().to_string())
            }
            (Some(Sexp::Atom(a)), Some(x)) if a == "literal" => {
                return Filter::Literal(str_of(x).unwrap().to_string())
            }
            (Some(Sexp::Atom(a)), Some(Sexp::Atom(k))) if a == "remote" && k == "unix-socket" => {
                if let Some(Sexp::List(p)) = l.get(2) {
                    assert_eq!(p[0], Sexp::Atom("path-literal".into()));
                    return Filter::UnixSocket(str_of(&p[1]).unwrap().to_string());
                }
            }
            (Some(Sexp::Atom(a)), Some(Sexp::Atom(k))) if a == "remote" && k == "ip" => {
                return Filter::Tcp(str_of(&l[2]).unwrap().to_string())
            }
            _ => {}
        }
    }
    Filter::Other(s.clone())
}

/// The profile's rules; panics on anything but `(version 1)`, one `(deny default)`
/// first, then allow and deny rules.
fn rules(text: &str) -> Vec<Rule> {
    let top = read_sbpl(text).unwrap();
    assert_eq!(
        top[0],
        Sexp::List(vec![Sexp::Atom("version".into()), Sexp::Atom("1".into())])
    );
    assert_eq!(
        top[1],
        Sexp::List(vec![
            Sexp::Atom("deny".into()),
            Sexp::Atom("default".into())
        ])
    );
    let mut out = Vec::new();
    for form in &top[2..] {
        let Sexp::List(l) = form else {
            panic!("not a rule: {form:?}")
        };
        let allow = match &l[0] {
            Sexp::Atom(a) if a == "allow" => true,
            Sexp::Atom(a) if a == "deny" => false,
            other => panic!("not allow or deny: {other:?}"),
        };
        let mut ops = Vec::new();
        let mut filters = Vec::new();
        for x in &l[1..] {
            match x {
                Sexp::Atom(a) => {
                    assert!(filters.is_empty(), "an operation after a filter");
                    ops.push(a.clone());
                }
                other => filters.push(filter_of(other)),
            }
        }
        assert!(!ops.is_empty());
        out.push(Rule {
            allow,
            ops,
            filters,
        });
    }
    out
}

fn op_matches(rule_op: &str, op: &str) -> bool {
    match rule_op.strip_suffix('*') {
        Some(prefix) => op.starts_with(prefix),
        None => rule_op == op,
    }
}

enum Query<'a> {
    Path(&'a str),
    UnixSocket(&'a str),
    Tcp(u16),
}

fn filter_matches(f: &Filter, q: &Query<'_>) -> bool {
    match (f, q) {
        (Filter::Subpath(s), Query::Path(p)) => {
            p == s
                || s == "/"
                || p.strip_prefix(s.as_str())
                    .is_some_and(|r| r.starts_with('/'))
        }
        (Filter::Literal(s), Query::Path(p)) => p == s,
        (Filter::UnixSocket(s), Query::UnixSocket(p)) => p == s,
        (Filter::Tcp(s), Query::Tcp(port)) => *s == format!("localhost:{port}"),
        _ => false,
    }
}

/// Seatbelt's answer: default deny, the last matching rule decides.
fn allowed(rules: &[Rule], op: &str, q: &Query<'_>) -> bool {
    let mut decision = false;
    for r in rules {
        if r.ops.iter().any(|o| op_matches(o, op)) && r.filters.iter().any(|f| filter_matches(f, q))
        {
            decision = r.allow;
        }
    }
    decision
}

// ---------------------------------------------------------------- the spec's meaning

fn under(p: &Path, tree: &Path) -> bool {
    p.starts_with(tree)
}

/// What the spec says a path may be used for.
struct Model<'a> {
    spec: &'a SandboxSpec,
}

/// Whether an entry covers `p`: a file only itself, a directory its tree.
fn covers(e: &ViewEntry, p: &Path) -> bool {
    match e.id.map(|i| i.kind) {
        Some(Kind::File) | Some(Kind::Socket) | Some(Kind::Other) => e.path == p,
        _ => under(p, &e.path),
    }
}

impl Model<'_> {
    fn entries(&self, kind: ViewKind) -> impl Iterator<Item = &ViewEntry> {
        self.spec.view.iter().filter(move |e| e.what == kind)
    }
    /// Under a mask or a denied path, by either spelling (checked on its own in
    /// `denials_cover_both_spellings_of_private_links`).
    fn hidden(&self, p: &Path) -> bool {
        let masks = self.entries(ViewKind::Mask).map(|m| &m.path);
        masks
            .chain(&self.spec.denied)
            .flat_map(|m| spellings(m))
            .any(|m| under(p, &m))
    }
    fn readable(&self, p: &Path) -> bool {
        let tree = self
            .entries(ViewKind::Read)
            .chain(self.entries(ViewKind::Write))
            .any(|e| covers(e, p));
        let system = SYSTEM_READ.iter().any(|t| under(p, Path::new(t)));
        (tree || system) && !self.hidden(p)
    }
    /// Read-only paths inside a write tree, and their ancestors there.
    fn pinned(&self, p: &Path) -> bool {
        self.entries(ViewKind::Read).any(|r| {
            self.entries(ViewKind::Write).any(|w| {
                r.path.starts_with(&w.path)
                    && r.path != w.path
                    && (covers(r, p) || (r.path.starts_with(p) && p.starts_with(&w.path)))
            })
        })
    }
    fn writable(&self, p: &Path) -> bool {
        self.entries(ViewKind::Write).any(|w| covers(w, p)) && !self.pinned(p) && !self.hidden(p)
    }
    fn connectable(&self, p: &Path) -> bool {
        self.entries(ViewKind::Socket).any(|s| s.path == p)
    }
    /// Metadata may be read of what may be read, and beyond that only of the directories
    /// above a path of the view or of the system's trees, of a link, or of a socket.
    fn metadata_may(&self, p: &Path) -> bool {
        self.readable(p)
            || self
                .spec
                .view
                .iter()
                .any(|e| e.path != p && e.path.starts_with(p))
            || SYSTEM_READ
                .iter()
                .any(|t| Path::new(t) != p && Path::new(t).starts_with(p))
            || self
                .spec
                .view
                .iter()
                .any(|e| e.path == p && matches!(e.what, ViewKind::Link(_) | ViewKind::Socket))
    }
}

fn check(spec: &SandboxSpec, probes: &[PathBuf]) {
    let text = profile(spec).unwrap();
    let rules = rules(&text);
    let model = Model { spec };
    // Every path rule of the spec is in the text, as the rule it should be.
    let has = |allow: bool, op: &str, p: &Path| {
        let s = p.to_str().unwrap();
        rules.iter().any(|r| {
            r.allow == allow
                && r.ops.iter().any(|o| op_matches(o, op))
                && r.filters.iter().any(|f| match f {
                    Filter::Subpath(x) | Filter::Literal(x) | Filter::UnixSocket(x) => x == s,
                    _ => false,
                })
        })
    };
    for e in &spec.view {
        match &e.what {
            ViewKind::Read => assert!(has(true, "file-read-data", &e.path), "{e:?}"),
            ViewKind::Write => assert!(has(true, "file-write-data", &e.path), "{e:?}"),
            ViewKind::Mask => assert!(has(false, "file-read-data", &e.path), "{e:?}"),
            ViewKind::Socket => assert!(has(true, "network-outbound", &e.path), "{e:?}"),
            ViewKind::Link(_) => assert!(has(true, "file-read-metadata", &e.path), "{e:?}"),
        }
    }
    for d in &spec.denied {
        assert!(has(false, "file-read-data", d), "{d:?}");
        assert!(has(false, "file-write-data", d), "{d:?}");
    }
    // And nothing else: every probe is answered as the spec says.
    for p in probes {
        let s = p.to_str().unwrap();
        let q = Query::Path(s);
        let r = model.readable(p);
        assert_eq!(
            allowed(&rules, "file-read-data", &q),
            r,
            "read {p:?}\n{text}"
        );
        assert_eq!(allowed(&rules, "process-exec", &q), r, "exec {p:?}\n{text}");
        assert_eq!(
            allowed(&rules, "file-map-executable", &q),
            r,
            "map {p:?}\n{text}"
        );
        let w = model.writable(p);
        assert_eq!(
            allowed(&rules, "file-write-data", &q),
            w,
            "write {p:?}\n{text}"
        );
        assert_eq!(
            allowed(&rules, "file-write-unlink", &q),
            w,
            "unlink {p:?}\n{text}"
        );
        if allowed(&rules, "file-read-metadata", &q) {
            assert!(model.metadata_may(p), "metadata {p:?}\n{text}");
        }
        assert_eq!(
            allowed(&rules, "network-outbound", &Query::UnixSocket(s)),
            model.connectable(p),
            "connect {p:?}\n{text}"
        );
    }
    for port in [1u16, 80, 443, 3128, 8080, 65535] {
        assert_eq!(
            allowed(&rules, "network-outbound", &Query::Tcp(port)),
            spec.tcp_connect.contains(&port),
            "tcp {port}"
        );
    }
}

// ---------------------------------------------------------------- specs from profiles

fn id(kind: Kind) -> Option<Identity> {
    Some(Identity {
        dev: 1,
        ino: 1,
        kind,
    })
}

fn empty_spec() -> SandboxSpec {
    SandboxSpec {
        argv: vec!["sh".into()],
        cwd: PathBuf::from("/"),
        ..SandboxSpec::default()
    }
}

const HOME: &str = "/Users/dev";
const CWD: &str = "/Users/dev/src/project";

/// The spec the broker would make from a configuration's profile on a macOS layout,
/// without a filesystem: every path taken as written (expanded), files named in `files`.
fn spec_of(cfg: &Config, name: &str, files: &[&str], tty: bool) -> SandboxSpec {
    let p = cfg.effective_profile(name).unwrap();
    let (home, cwd) = (Path::new(HOME), Path::new(CWD));
    let kind = |path: &Path| {
        if files.iter().any(|f| Path::new(f) == path) {
            id(Kind::File)
        } else {
            id(Kind::Dir)
        }
    };
    let mut spec = empty_spec();
    spec.cwd = cwd.to_path_buf();
    spec.controlling_tty = tty;
    let add = |raw: &Vec<String>, what: ViewKind, spec: &mut SandboxSpec| {
        for r in raw {
            let path = paths::expand(r, home, cwd).unwrap();
            let id = kind(&path);
            spec.view.push(ViewEntry {
                path,
                what: what.clone(),
                id,
            });
        }
    };
    add(&p.read, ViewKind::Read, &mut spec);
    add(&p.write, ViewKind::Write, &mut spec);
    add(&p.deny, ViewKind::Mask, &mut spec);
    for s in &p.unix_sockets {
        let path = match s.strip_prefix('$') {
            Some(_) => PathBuf::from("/private/tmp/com.apple.launchd.abc/Listeners"),
            None => paths::expand(s, home, cwd).unwrap(),
        };
        spec.view.push(ViewEntry {
            path,
            what: ViewKind::Socket,
            id: id(Kind::Socket),
        });
    }
    // The supervisor's socket and the client, as the broker adds them.
    spec.view.push(ViewEntry {
        path: PathBuf::from("/private/tmp/wardcell-501/run-1/1.sock"),
        what: ViewKind::Socket,
        id: None,
    });
    spec.view.push(ViewEntry {
        path: PathBuf::from("/opt/homebrew/bin/wardcell"),
        what: ViewKind::Read,
        id: id(Kind::File),
    });
    spec.view.push(ViewEntry {
        path: PathBuf::from("/opt/homebrew/bin/wardcell-link"),
        what: ViewKind::Link(PathBuf::from("wardcell")),
        id: None,
    });
    let dirs = paths::dirs_for(paths::Os::MacOs, &|_| None, home, 501, None);
    spec.denied = dirs.config.clone();
    spec.denied.push(dirs.state.clone());
    spec.denied.push(dirs.runtime.clone());
    for c in &cfg.credentials {
        if let config::SecretSource::File(f) = &c.1.secret {
            spec.denied.push(paths::expand(f, home, cwd).unwrap());
        }
    }
    if !p.network_allow.is_empty() {
        spec.tcp_connect = vec![3128];
    }
    spec
}

fn golden(name: &str, text: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(format!("{name}.sb"));
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    // WARDCELL_BLESS=1 rewrites a golden file that differs, and the test still fails:
    // no test passes because a variable is set; run it again once the diff is reviewed.
    if want != text && std::env::var_os("WARDCELL_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        panic!(
            "{} rewritten (WARDCELL_BLESS): review its diff, then run the test again without it",
            path.display()
        );
    }
    assert!(
        want == text,
        "{} differs from the generated profile; review, then WARDCELL_BLESS=1 rewrites it:\n{text}",
        path.display()
    );
}

/// Every path of a spec, its ancestors, a child of each, and a sibling with a shared
/// prefix (`/a/bc` beside `/a/b`): the places a wrong filter would show.
fn probes_of(spec: &SandboxSpec) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let paths = spec
        .view
        .iter()
        .map(|e| e.path.clone())
        .chain(spec.denied.iter().cloned())
        .chain(SYSTEM_READ.iter().map(PathBuf::from))
        .chain([
            PathBuf::from("/etc/passwd"),
            PathBuf::from("/Users/other/x"),
        ]);
    for p in paths {
        out.extend(p.ancestors().map(Path::to_path_buf));
        out.push(p.join("child"));
        let mut sibling = p.clone().into_os_string();
        sibling.push("x");
        out.push(PathBuf::from(sibling));
        out.push(p);
    }
    out.sort();
    out.dedup();
    out
}

const EVERY_FEATURE: &str = r#"
[zones.agent]
profile = "everything"
default = true

[profiles.everything]
extends = "developer-readonly"
read = ["~/notes.txt", "/Volumes/Data/shared \"quoted\" dir", "~/back\\slash", "~/café/日本語"]
write = ["/private/tmp", "./target"]
deny = ["./secrets", "~/.config/other"]
network = { allow = ["crates.io:443", "github.com:22"] }
credentials = ["git"]
unix_sockets = ["$SSH_AUTH_SOCK", "~/.colima/docker.sock"]

[credentials.git]
hosts = ["github.com"]
scheme = "bearer"
secret = { file = "~/.secrets/git-token" }
"#;

#[test]
fn golden_builtin_profiles() {
    let cfg = Config::builtin();
    for name in ["base", "readonly", "developer-readonly"] {
        let spec = spec_of(&cfg, name, &["/Users/dev/src/project/.git/config"], false);
        let text = profile(&spec).unwrap();
        golden(name, &text);
        check(&spec, &probes_of(&spec));
    }
}

#[test]
fn golden_every_feature() {
    let cfg = config::parse(EVERY_FEATURE, "every-feature.toml").unwrap();
    let spec = spec_of(
        &cfg,
        "everything",
        &["/Users/dev/notes.txt", "/Users/dev/src/project/.git/config"],
        true,
    );
    let text = profile(&spec).unwrap();
    golden("every-feature", &text);
    check(&spec, &probes_of(&spec));
    // The escapes, as written.
    assert!(text.contains(r#"(literal "/Users/dev/notes.txt")"#));
    assert!(text.contains(r#"(subpath "/Volumes/Data/shared \"quoted\" dir")"#));
    assert!(text.contains(r#"(subpath "/Users/dev/back\\slash")"#));
    assert!(text.contains("(subpath \"/Users/dev/café/日本語\")"));
    assert!(text.contains(r#"(remote ip "localhost:3128")"#));
    assert!(text.contains(r#"(allow file-ioctl (regex #"^/dev/ttys[0-9]+$"))"#));
    assert!(!text.contains("pseudo-tty"), "no new ptys");
}

#[test]
fn no_network_no_tcp_no_tty() {
    let cfg = Config::builtin();
    let spec = spec_of(&cfg, "developer-readonly", &[], false);
    let text = profile(&spec).unwrap();
    assert!(!text.contains("(remote ip"));
    assert!(!text.contains("pseudo-tty"));
    assert!(!text.contains("/dev/tty"));
}

#[test]
fn quoting_round_trips_and_control_characters_are_refused() {
    for s in [
        "/plain",
        "/a \"b\" c",
        "/back\\slash\\",
        "/\\\"",
        "/café/日本語/🦀",
        "/x)(deny default)(allow file-read* (subpath \"/\"))",
        "/semi;colon",
    ] {
        let q = quote(s).unwrap();
        let back = read_sbpl(&q).unwrap();
        assert_eq!(back, vec![Sexp::Str(s.to_string())], "{q}");
    }
    for s in [
        "/a\nb",
        "/a\tb",
        "/a\rb",
        "/a\u{7f}b",
        "/a\u{1b}[31mb",
        "/a\u{85}b",
    ] {
        let e = quote(s).unwrap_err();
        assert!(e.contains("control character"), "{e}");
    }
}

#[test]
fn a_path_that_cannot_be_written_refuses_the_whole_profile() {
    // A mask that could not be written must never be dropped silently.
    for what in [ViewKind::Mask, ViewKind::Read, ViewKind::Socket] {
        let mut spec = empty_spec();
        spec.view.push(ViewEntry {
            path: PathBuf::from("/r"),
            what: ViewKind::Read,
            id: None,
        });
        spec.view.push(ViewEntry {
            path: PathBuf::from("/r/se\ncret"),
            what,
            id: None,
        });
        assert!(profile(&spec).unwrap_err().contains("control character"));
    }
    let mut spec = empty_spec();
    spec.denied.push(PathBuf::from("/state\n"));
    assert!(profile(&spec).is_err());
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let mut spec = empty_spec();
        spec.denied
            .push(PathBuf::from(std::ffi::OsStr::from_bytes(b"/st\xffate")));
        assert!(profile(&spec).unwrap_err().contains("not UTF-8"));
    }
}

#[test]
fn own_directories_stay_denied_inside_write_trees_and_under_sockets() {
    let mut spec = empty_spec();
    spec.view.push(ViewEntry {
        path: PathBuf::from("/Users/dev"),
        what: ViewKind::Write,
        id: id(Kind::Dir),
    });
    spec.view.push(ViewEntry {
        path: PathBuf::from("/Users/dev/Library/Logs/wardcell/x.sock"),
        what: ViewKind::Socket,
        id: None,
    });
    spec.denied
        .push(PathBuf::from("/Users/dev/Library/Logs/wardcell"));
    let rules = rules(&profile(&spec).unwrap());
    let log = Query::Path("/Users/dev/Library/Logs/wardcell/runs/r.jsonl");
    assert!(!allowed(&rules, "file-read-data", &log));
    assert!(!allowed(&rules, "file-write-create", &log));
    assert!(allowed(
        &rules,
        "file-write-create",
        &Query::Path("/Users/dev/x")
    ));
    assert!(allowed(
        &rules,
        "network-outbound",
        &Query::UnixSocket("/Users/dev/Library/Logs/wardcell/x.sock")
    ));
    assert!(!allowed(
        &rules,
        "network-outbound",
        &Query::UnixSocket("/Users/dev/other.sock")
    ));
}

#[test]
fn denials_cover_both_spellings_of_private_links() {
    let mut spec = empty_spec();
    spec.view.push(ViewEntry {
        path: PathBuf::from("/"),
        what: ViewKind::Read,
        id: id(Kind::Dir),
    });
    spec.view.push(ViewEntry {
        path: PathBuf::from("/private/var/secret"),
        what: ViewKind::Mask,
        id: id(Kind::Dir),
    });
    spec.denied.push(PathBuf::from("/etc/wardcell"));
    spec.denied.push(PathBuf::from("/private/tmp/wardcell-501"));
    let rules = rules(&profile(&spec).unwrap());
    for p in [
        "/etc/wardcell/zones.toml",
        "/private/etc/wardcell/zones.toml",
        "/tmp/wardcell-501/x",
        "/private/tmp/wardcell-501/x",
        "/var/secret/k",
        "/private/var/secret/k",
    ] {
        assert!(!allowed(&rules, "file-read-data", &Query::Path(p)), "{p}");
    }
    assert!(allowed(
        &rules,
        "file-read-data",
        &Query::Path("/private/etc/hosts")
    ));
    assert!(allowed(
        &rules,
        "file-read-data",
        &Query::Path("/etc/wardcellx")
    ));
}

#[test]
fn peer_verdicts() {
    assert!(peer_verdict(true, false).is_ok());
    // Unsandboxed: everything is allowed.
    assert_eq!(
        peer_verdict(true, true).unwrap_err(),
        "is not in a wardcell sandbox"
    );
    // Another sandbox (another run's, or another of this run).
    assert_eq!(
        peer_verdict(false, false).unwrap_err(),
        "is not in this sandbox"
    );
    assert!(peer_verdict(false, true).is_err());
    // The answers hold for real profiles: every one allows its identity and not the
    // never-allowed name.
    let text = profile(&empty_spec()).unwrap();
    let rules = rules(&text);
    let names: Vec<&Filter> = rules
        .iter()
        .filter(|r| r.allow && r.ops.iter().any(|o| o == "mach-lookup"))
        .flat_map(|r| &r.filters)
        .collect();
    assert!(names
        .iter()
        .all(|f| !format!("{f:?}").contains(NEVER_ALLOWED)));
}

#[test]
fn identity_names() {
    let n = identity_name("20261203T051000-ab12", 3, &[0xab; 16]);
    assert_eq!(
        n,
        "dev.wardcell.sandbox.20261203T051000-ab12.3.abababababababababababababababab"
    );
    assert!(is_identity(&n));
    assert!(!is_identity(NEVER_ALLOWED));
    assert!(!is_identity(IDENTITY_PREFIX));
    assert!(!is_identity("dev.wardcell.sandbox.a\"b"));
    assert!(!is_identity("com.apple.logd"));
    let long = format!(
        "{IDENTITY_PREFIX}{}",
        "a".repeat(128 - IDENTITY_PREFIX.len())
    );
    assert!(!is_identity(&long));
    assert!(is_identity(&long[..127]));
    // The profile refers to the parameter; the name itself is never in the text.
    let text = profile(&empty_spec()).unwrap();
    assert!(text.contains(r#"(allow mach-lookup (global-name (param "WARDCELL_IDENTITY")))"#));
    assert!(!text.contains(NEVER_ALLOWED));
}

// ---------------------------------------------------------------- generated specs

/// xorshift64*: a fixed sequence, so a failure names a seed that reproduces it.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Components that share prefixes (`a`, `ab`), and ones that need escaping.
const PARTS: &[&str] = &[
    "a", "ab", "b", "q\"t", "b\\s", "é", "日本", "sp ace", "x;y", "(p)",
];

fn random_path(rng: &mut Rng) -> PathBuf {
    let mut p = PathBuf::from("/r");
    for _ in 0..1 + rng.below(4) {
        p.push(PARTS[rng.below(PARTS.len())]);
    }
    p
}

fn random_spec(rng: &mut Rng) -> SandboxSpec {
    let mut spec = empty_spec();
    for _ in 0..rng.below(12) {
        let what = match rng.below(5) {
            0 | 1 => ViewKind::Read,
            2 => ViewKind::Write,
            3 => ViewKind::Mask,
            _ => ViewKind::Socket,
        };
        let kind = match what {
            ViewKind::Socket => Kind::Socket,
            _ if rng.below(4) == 0 => Kind::File,
            _ => Kind::Dir,
        };
        spec.view.push(ViewEntry {
            path: random_path(rng),
            what,
            id: id(kind),
        });
    }
    for _ in 0..rng.below(3) {
        spec.denied.push(random_path(rng));
    }
    if rng.below(2) == 0 {
        spec.tcp_connect.push(3128);
    }
    spec.controlling_tty = rng.below(2) == 0;
    spec
}

#[test]
fn generated_specs_allow_exactly_what_they_say() {
    for seed in 1..=400u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let spec = random_spec(&mut rng);
        let mut probes = probes_of(&spec);
        for _ in 0..40 {
            probes.push(random_path(&mut rng));
        }
        let result = std::panic::catch_unwind(|| check(&spec, &probes));
        assert!(result.is_ok(), "seed {seed}: {spec:#?}");
    }
}
