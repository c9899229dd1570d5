//! Seatbelt (macOS) profiles, made from the same [`SandboxSpec`] the Linux shim builds
//! its view from.
//!
//! On macOS there are no namespaces to build a view from nothing: the sandbox sees the
//! host's filesystem, and the kernel's Seatbelt policy decides every open, exec, connect
//! and signal by path or name. This module writes that policy (SBPL text) from a spec.
//! It is plain text generation, compiled and tested on every platform; the macOS shim
//! only hands the text to `sandbox_init_with_parameters` before exec.
//!
//! The profile denies by default; in SBPL the *last* matching rule decides, so the text
//! is written in this order, each section narrowing the ones before it:
//!
//! 1. the run's identity: a Mach name no service holds, given as the parameter
//!    [`IDENTITY_PARAM`]; the supervisor asks Seatbelt whether a peer may look it up;
//! 2. processes: fork, exec (only of files a later rule lets it read), signals and
//!    process information within the same sandbox;
//! 3. what every process needs to start: [`SYSTEM_READ`], a few device nodes, the
//!    sysctls and Mach services of [`SYSCTLS`] and [`MACH_SERVICES`];
//! 4. the spec's trees: read (with exec and library mapping), write, the links met on
//!    the way, and metadata of every ancestor so `getcwd` and `realpath` work;
//! 5. read-only paths inside write trees, and their ancestors there, made unwritable;
//! 6. masks (the profile's `deny`): nothing under them read, written, mapped or run;
//! 7. the Unix sockets the spec names (connect only), and TCP to the proxy's loopback
//!    port(s);
//! 8. wardcell's own directories and credential files ([`SandboxSpec::denied`]): denied
//!    last, so no rule above can open them.
//!
//! Masks and denied paths under `/etc`, `/tmp` and `/var` are denied under both
//! spellings (`/private/etc/...` is where they really are on macOS).
//!
//! Every string is written as an SBPL string literal: `"` and `\` escaped. A path with a
//! control character (newline, tab, ...) or one that is not UTF-8 cannot be written
//! without relying on escapes the SBPL reader may not share with us, so it is refused
//! with the path named; a refusal never drops a rule. Non-ASCII UTF-8 is written as it
//! is (SBPL strings are bytes; plan paths are the names the filesystem returned).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use wardcell_common::identity::Kind;
use wardcell_common::plan::{SandboxSpec, ViewEntry, ViewKind};

/// The parameter that carries the sandbox's identity (a Mach global name) into the
/// profile. Passed to `sandbox_init_with_parameters`, never written into the text, so
/// that every sandbox of a profile gets the same text and the name is not in a file.
pub const IDENTITY_PARAM: &str = "WARDCELL_IDENTITY";

/// The prefix of every identity name. No process looks a name with it up; a profile
/// allowing one grants nothing but the answer to the supervisor's question.
pub const IDENTITY_PREFIX: &str = "dev.wardcell.sandbox.";

/// A name every wardcell profile denies: a peer whose profile allows it is not in a
/// wardcell sandbox (an unsandboxed process is allowed everything).
pub const NEVER_ALLOWED: &str = "dev.wardcell.never";

/// Trees every process reads to start at all: dyld's shared cache and the system's
/// libraries and frameworks (on macOS 13 and later the cache lives in the cryptex), the
/// time zone database, and the resolver and user databases libSystem reads.
pub const SYSTEM_READ: &[&str] = &[
    "/System/Library",
    "/System/Volumes/Preboot/Cryptexes",
    "/usr/lib",
    "/usr/share/zoneinfo",
    "/private/var/db/timezone",
    "/private/etc/localtime",
    "/private/etc/hosts",
    "/private/etc/resolv.conf",
    "/private/etc/passwd",
    "/private/etc/group",
];

/// Device nodes every process may read and write: the data-less ones. `/dev/tty` is
/// added only for a sandbox with a terminal.
pub const DEVICES_RW: &[&str] = &["/dev/null", "/dev/zero"];

/// Device nodes every process may read.
pub const DEVICES_R: &[&str] = &["/dev/random", "/dev/urandom"];

/// sysctls libSystem, language runtimes and build tools read: the machine's shape
/// (CPU, memory, page size), the OS release, and a process's own entries. Names that
/// end in `.` are prefixes.
pub const SYSCTLS: &[&str] = &[
    "hw.activecpu",
    "hw.byteorder",
    "hw.cachelinesize",
    "hw.cpufamily",
    "hw.cputype",
    "hw.l1dcachesize",
    "hw.l2cachesize",
    "hw.logicalcpu",
    "hw.logicalcpu_max",
    "hw.machine",
    "hw.memsize",
    "hw.model",
    "hw.ncpu",
    "hw.nperflevels",
    "hw.optional.",
    "hw.pagesize",
    "hw.perflevel",
    "hw.physicalcpu",
    "hw.physicalcpu_max",
    "kern.argmax",
    "kern.hostname",
    "kern.maxfilesperproc",
    "kern.osproductversion",
    "kern.osrelease",
    "kern.ostype",
    "kern.osversion",
    "kern.proc.pid.",
    "kern.usrstack64",
    "kern.version",
    "machdep.cpu.",
    "sysctl.proc_cputype",
    "vm.loadavg",
];

/// Mach services libSystem needs: user and group lookups (`getpwuid`, which `git` and
/// every shell call) and logging. Nothing that holds the user's data or acts for them.
pub const MACH_SERVICES: &[&str] = &[
    "com.apple.system.opendirectoryd.libinfo",
    "com.apple.system.logger",
    "com.apple.logd",
];

/// The identity name of one sandbox: the run, the sandbox's number in it, and a random
/// nonce from the broker (hex), so that no other run's profile, and no process that
/// guessed the run id, carries it.
pub fn identity_name(run_id: &str, sandbox: u32, nonce: &[u8; 16]) -> String {
    let mut s = format!("{IDENTITY_PREFIX}{run_id}.{sandbox}.");
    for b in nonce {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Whether `name` can be an identity: the prefix, then letters, digits, `.`, `-`, `_`,
/// shorter than a Mach name's 128 bytes (it becomes a Mach name and a parameter value).
pub fn is_identity(name: &str) -> bool {
    name.len() < 128
        && name.strip_prefix(IDENTITY_PREFIX).is_some_and(|rest| {
            !rest.is_empty()
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
        })
}

/// What the supervisor concludes from Seatbelt's answers for a peer's audit token:
/// whether it may look up this sandbox's identity name (`own`), and whether it may look
/// up [`NEVER_ALLOWED`], which no wardcell profile allows (`never`). A process outside
/// any sandbox is allowed everything, so `never` tells it apart; a process of another
/// sandbox, of this run or another, is denied `own`.
pub fn peer_verdict(own: bool, never: bool) -> Result<(), String> {
    if never {
        return Err("is not in a wardcell sandbox".into());
    }
    if !own {
        return Err("is not in this sandbox".into());
    }
    Ok(())
}

/// An SBPL string literal for `s`, or why it cannot be one.
pub fn quote(s: &str) -> Result<String, String> {
    if let Some(c) = s.chars().find(|c| c.is_control()) {
        return Err(format!(
            "{s:?} holds the control character {c:?}, which a Seatbelt profile cannot name safely; rename it"
        ));
    }
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    Ok(out)
}

fn quote_path(p: &Path) -> Result<String, String> {
    let s = p.to_str().ok_or_else(|| {
        format!(
            "{} is not UTF-8, which a Seatbelt profile cannot name; rename it",
            p.display()
        )
    })?;
    if !s.starts_with('/') {
        return Err(format!("{s:?} is not an absolute path"));
    }
    quote(s)
}

/// Top-level links of macOS into `/private`. Seatbelt matches the path a file really
/// has, so a rule on `/etc/x` would never match: plan paths are canonical already, and a
/// deny rule is also written for the other spelling, so that a path that reached the
/// spec uncanonicalised still hides what it names.
const PRIVATE_LINKS: &[&str] = &["/etc", "/tmp", "/var"];

/// `p`, and its other spelling across [`PRIVATE_LINKS`] if it has one.
pub fn spellings(p: &Path) -> Vec<PathBuf> {
    let mut out = vec![p.to_path_buf()];
    for l in PRIVATE_LINKS {
        if let Ok(rest) = p.strip_prefix(l) {
            out.push(
                Path::new("/private")
                    .join(l.trim_start_matches('/'))
                    .join(rest),
            );
        } else if let Ok(rest) =
            p.strip_prefix(Path::new("/private").join(l.trim_start_matches('/')))
        {
            out.push(Path::new(l).join(rest));
        }
    }
    out
}

/// A filter for one path: `literal` for a file, `subpath` for a directory (or a path
/// whose type is not known: it matches the path itself too).
fn filter(p: &Path, kind: Option<Kind>) -> Result<String, String> {
    let q = quote_path(p)?;
    Ok(match kind {
        Some(Kind::File) | Some(Kind::Socket) | Some(Kind::Other) => format!("(literal {q})"),
        Some(Kind::Dir) | None => format!("(subpath {q})"),
    })
}

/// One rule: `(allow ops filters...)`, a filter per line. Nothing when there are no
/// filters (an empty filter list would match everything).
fn rule(out: &mut String, action: &str, ops: &str, filters: &[String]) {
    if filters.is_empty() {
        return;
    }
    let _ = write!(out, "({action} {ops}");
    for f in filters {
        let _ = write!(out, "\n    {f}");
    }
    out.push_str(")\n");
}

fn dedup(v: &mut Vec<String>) {
    let mut seen = std::collections::HashSet::new();
    v.retain(|x| seen.insert(x.clone()));
}

/// The proper ancestors of `p`, from `/` down.
fn ancestors(p: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = p.ancestors().skip(1).map(Path::to_path_buf).collect();
    v.reverse();
    v
}

/// The Seatbelt profile for one sandbox.
pub fn profile(spec: &SandboxSpec) -> Result<String, String> {
    let mut out = String::new();
    out.push_str("(version 1)\n(deny default)\n");
    out.push_str("; wardcell: generated from the sandbox spec. The last matching rule decides.\n");

    out.push_str("\n; 1. The run's identity, for the supervisor's peer check.\n");
    let _ = writeln!(
        out,
        "(allow mach-lookup (global-name (param {})))",
        quote(IDENTITY_PARAM)?
    );

    out.push_str("\n; 2. Processes: exec only of what may be read (below); signals and process\n; information within this sandbox.\n");
    out.push_str("(allow process-fork)\n");
    out.push_str("(allow signal (target same-sandbox))\n");
    out.push_str("(allow process-info* (target same-sandbox))\n");

    out.push_str("\n; 3. What every process needs to start.\n");
    let mut sys = Vec::new();
    for s in SYSCTLS {
        match s.strip_suffix('.') {
            Some(_) => sys.push(format!("(sysctl-name-prefix {})", quote(s)?)),
            None => sys.push(format!("(sysctl-name {})", quote(s)?)),
        }
    }
    rule(&mut out, "allow", "sysctl-read", &sys);
    let mach = MACH_SERVICES
        .iter()
        .map(|m| Ok(format!("(global-name {})", quote(m)?)))
        .collect::<Result<Vec<_>, String>>()?;
    rule(&mut out, "allow", "mach-lookup", &mach);
    let system = SYSTEM_READ
        .iter()
        .map(|p| filter(Path::new(p), None))
        .collect::<Result<Vec<_>, String>>()?;
    rule(
        &mut out,
        "allow",
        "file-read* file-map-executable process-exec",
        &system,
    );
    let mut rw: Vec<&str> = DEVICES_RW.to_vec();
    if spec.controlling_tty {
        rw.push("/dev/tty");
    }
    let rw = rw
        .iter()
        .map(|p| filter(Path::new(p), Some(Kind::Other)))
        .collect::<Result<Vec<_>, String>>()?;
    rule(
        &mut out,
        "allow",
        "file-read* file-write-data file-ioctl",
        &rw,
    );
    let r = DEVICES_R
        .iter()
        .map(|p| filter(Path::new(p), Some(Kind::Other)))
        .collect::<Result<Vec<_>, String>>()?;
    rule(&mut out, "allow", "file-read*", &r);
    if spec.controlling_tty {
        // The pty's descriptors are inherited, not opened: terminal ioctls on them
        // (tcsetattr, the window size) are all the command needs. Opening a terminal
        // by name, another of the user's among them, stays denied; /dev/tty above
        // names the controlling one.
        out.push_str("; The terminal the broker gave the command (a pty: /dev/ttysNNN), by its\n; inherited descriptors only.\n");
        out.push_str("(allow file-ioctl (regex #\"^/dev/ttys[0-9]+$\"))\n");
    }

    // 4. Trees.
    let mut read = Vec::new();
    let mut write = Vec::new();
    let mut links = Vec::new();
    let mut meta = Vec::new();
    let mut seen_meta = std::collections::HashSet::new();
    let mut visible = |p: &Path, meta: &mut Vec<String>| -> Result<(), String> {
        for a in ancestors(p) {
            if seen_meta.insert(a.clone()) {
                meta.push(format!("(literal {})", quote_path(&a)?));
            }
        }
        Ok(())
    };
    for p in SYSTEM_READ {
        visible(Path::new(p), &mut meta)?;
    }
    for e in &spec.view {
        let kind = e.id.map(|i| i.kind);
        match &e.what {
            ViewKind::Read => {
                visible(&e.path, &mut meta)?;
                read.push(filter(&e.path, kind)?);
            }
            ViewKind::Write => {
                visible(&e.path, &mut meta)?;
                write.push(filter(&e.path, kind)?);
            }
            ViewKind::Link(_) => {
                visible(&e.path, &mut meta)?;
                links.push(format!("(literal {})", quote_path(&e.path)?));
            }
            ViewKind::Mask | ViewKind::Socket => {}
        }
    }
    dedup(&mut read);
    dedup(&mut write);
    dedup(&mut links);
    out.push_str("\n; 4. The profile's trees, and the metadata of the directories above them.\n");
    rule(&mut out, "allow", "file-read-metadata", &meta);
    rule(&mut out, "allow", "file-read-metadata", &links);
    rule(
        &mut out,
        "allow",
        "file-read* file-map-executable process-exec",
        &read,
    );
    rule(
        &mut out,
        "allow",
        "file-read* file-write* file-map-executable process-exec",
        &write,
    );

    // 5. Read-only paths inside write trees: not written, and neither renamed nor
    //    replaced through a directory above them in the write tree.
    let writes: Vec<&PathBuf> = view_paths(spec, ViewKind::Write).collect();
    let mut ro = Vec::new();
    let mut ro_anc = Vec::new();
    for e in spec.view.iter().filter(|e| e.what == ViewKind::Read) {
        for w in writes.iter().filter(|w| e.path.starts_with(w)) {
            if e.path == **w {
                continue;
            }
            ro.push(filter(&e.path, e.id.map(|i| i.kind))?);
            for a in ancestors(&e.path) {
                if a.starts_with(w) {
                    ro_anc.push(format!("(literal {})", quote_path(&a)?));
                }
            }
        }
    }
    dedup(&mut ro);
    dedup(&mut ro_anc);
    if !ro.is_empty() {
        out.push_str(
            "\n; 5. Read-only inside a write tree, and the directories above them there.\n",
        );
        rule(&mut out, "deny", "file-write*", &ro);
        rule(&mut out, "deny", "file-write*", &ro_anc);
    }

    // 6. Masks.
    let mut masks = Vec::new();
    for e in spec.view.iter().filter(|e| e.what == ViewKind::Mask) {
        for p in spellings(&e.path) {
            masks.push(filter(&p, None)?);
        }
    }
    dedup(&mut masks);
    if !masks.is_empty() {
        out.push_str("\n; 6. Masked: the profile's deny paths and host socket directories.\n");
        rule(
            &mut out,
            "deny",
            "file-read* file-write* file-map-executable process-exec",
            &masks,
        );
    }

    // 7. Sockets and network.
    let mut socks = Vec::new();
    let mut sock_meta = Vec::new();
    for p in view_paths(spec, ViewKind::Socket) {
        let q = quote_path(p)?;
        socks.push(format!("(remote unix-socket (path-literal {q}))"));
        sock_meta.push(format!("(literal {q})"));
    }
    dedup(&mut socks);
    dedup(&mut sock_meta);
    let mut ports: Vec<u16> = spec.tcp_connect.clone();
    ports.sort_unstable();
    ports.dedup();
    let tcp: Vec<String> = ports
        .iter()
        .map(|p| format!("(remote ip \"localhost:{p}\")"))
        .collect();
    if !socks.is_empty() || !tcp.is_empty() {
        out.push_str("\n; 7. Unix sockets the spec names (connect only); TCP to the proxy only.\n");
        rule(&mut out, "allow", "network-outbound", &socks);
        rule(&mut out, "allow", "file-read-metadata", &sock_meta);
        rule(&mut out, "allow", "network-outbound", &tcp);
    }

    // 8. wardcell's own directories and credential files, whatever came before.
    let mut denied = Vec::new();
    for d in &spec.denied {
        for p in spellings(d) {
            denied.push(filter(&p, None)?);
        }
    }
    dedup(&mut denied);
    if !denied.is_empty() {
        out.push_str("\n; 8. wardcell's own directories and credential files: never opened.\n");
        rule(
            &mut out,
            "deny",
            "file-read* file-write* file-map-executable process-exec",
            &denied,
        );
    }
    Ok(out)
}

/// The paths of `spec`'s view of one kind, in the order given.
pub fn view_paths(spec: &SandboxSpec, kind: ViewKind) -> impl Iterator<Item = &PathBuf> + '_ {
    let of_kind = move |e: &&ViewEntry| e.what == kind;
    spec.view.iter().filter(of_kind).map(|e| &e.path)
}

// Its tests build specs from configurations, so they live with the configuration's
// crate: config/tests/seatbelt.rs.
