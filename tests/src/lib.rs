//! Harness for wardcell's integration tests: real sandboxes on this kernel, run both as
//! the invoking user (root in CI) and as an unprivileged uid.
//!
//! The binaries are staged under /var/tmp (not /tmp, which sandboxes make private, and
//! not the checkout, which may sit under a 0700 directory such as /root) so that the
//! unprivileged uid can execute them. Each test gets its own fixture directory there,
//! owned by the uid it runs as, with a home, a project and an "outside" directory.

use std::fs;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::{lchown, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The unprivileged uid (and gid) tests drop to; `WARDCELL_TEST_UID` overrides it.
pub fn test_uid() -> u32 {
    std::env::var("WARDCELL_TEST_UID")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(61234)
}

pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() == 0 }
}

/// The binaries every test needs.
pub const BINARIES: &[&str] = &[
    "wardcell",
    "wardcell-broker",
    "wardcell-shim",
    "wardcell-proxy",
    "wardcell-probe",
    "wardcell-approve",
];

pub struct Staged {
    pub root: PathBuf,
    pub bin: PathBuf,
}

fn target_dir() -> PathBuf {
    // target/<profile>/deps/<test-binary>
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("deps dir");
    let profile = if deps.ends_with("deps") {
        deps.parent().expect("profile dir")
    } else {
        deps
    };
    profile.to_path_buf()
}

/// Where each test process stages its binaries and fixtures (followed by its pid).
const STAGING_PREFIX: &str = "/var/tmp/wardcell-tests-";

/// Remove the staging directories of test processes that are gone.
fn sweep_stale_staging() {
    let Ok(entries) = fs::read_dir("/var/tmp") else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let Some(pid) = path
            .to_str()
            .and_then(|p| p.strip_prefix(STAGING_PREFIX))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = fs::remove_dir_all(&path);
        }
    }
}

/// Stage the binaries once per test process where every uid can execute them.
pub fn staged() -> &'static Staged {
    static STAGED: OnceLock<Staged> = OnceLock::new();
    STAGED.get_or_init(|| {
        let from = target_dir();
        sweep_stale_staging();
        let root = PathBuf::from(format!("{STAGING_PREFIX}{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let bin = root.join("bin");
        fs::create_dir_all(&bin).expect("create staging dir");
        for dir in [&root, &bin] {
            fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).unwrap();
        }
        for name in BINARIES {
            let src = from.join(name);
            assert!(
                src.is_file(),
                "{} is missing: build the workspace first (`cargo build --workspace`)",
                src.display()
            );
            let dst = bin.join(name);
            // A copy: a hard link would give each a second name on the filesystem of
            // the fixtures' written trees, which `run` refuses (trusted.rs).
            fs::copy(&src, &dst).unwrap();
            fs::set_permissions(&dst, fs::Permissions::from_mode(0o755)).unwrap();
        }
        // The sandbox tools' links, beside the client as a build's would be
        // (`envrules::SANDBOX_TOOL_DIRS`; a package has them in its libexec directory).
        let nested = bin.join("wardcell-nested");
        fs::create_dir_all(&nested).unwrap();
        fs::set_permissions(&nested, fs::Permissions::from_mode(0o755)).unwrap();
        for tool in ["bwrap", "firejail", "nsjail"] {
            std::os::unix::fs::symlink("../wardcell", nested.join(tool)).unwrap();
        }
        Staged { root, bin }
    })
}

/// Who a test runs as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum As {
    /// The invoking user (root in CI).
    Invoker,
    /// The unprivileged test uid (the invoker again when tests do not run as root).
    User,
}

impl As {
    pub fn ids(self) -> Option<(u32, u32)> {
        match self {
            As::User if is_root() => Some((test_uid(), test_uid())),
            _ => None,
        }
    }
}

/// The result of one command.
#[derive(Debug)]
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Out {
    fn from(o: Output) -> Self {
        use std::os::unix::process::ExitStatusExt;
        let code = o
            .status
            .code()
            .unwrap_or_else(|| 128 + o.status.signal().unwrap_or(0));
        Out {
            code,
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

impl Out {
    /// Panic with everything printed unless the exit code is `code`.
    #[track_caller]
    pub fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(self.code, code, "unexpected exit code; {self:#?}");
        self
    }
    #[track_caller]
    pub fn ok(&self) -> &Self {
        self.expect_code(0)
    }
}

/// One test's directories and how to run wardcell there.
pub struct Fixture {
    pub who: As,
    pub dir: PathBuf,
    pub home: PathBuf,
    pub proj: PathBuf,
    pub outside: PathBuf,
    pub bin: PathBuf,
}

impl Fixture {
    pub fn new(name: &str, who: As) -> Fixture {
        let st = staged();
        let dir = st.root.join(format!("{name}-{who:?}").to_lowercase());
        let _ = fs::remove_dir_all(&dir);
        let home = dir.join("home");
        let proj = home.join("proj");
        let outside = dir.join("outside");
        for d in [&dir, &home, &proj, &outside] {
            fs::create_dir_all(d).unwrap();
        }
        let fx = Fixture {
            who,
            dir,
            home,
            proj,
            outside,
            bin: st.bin.clone(),
        };
        fx.own(&fx.dir);
        fs::set_permissions(&fx.dir, fs::Permissions::from_mode(0o755)).unwrap();
        fx
    }

    /// The uid this fixture runs as.
    pub fn uid(&self) -> u32 {
        self.who.ids().map(|(u, _)| u).unwrap_or_else(|| {
            // SAFETY: getuid cannot fail.
            unsafe { libc::getuid() }
        })
    }

    /// Give `path` (recursively) to the fixture's uid.
    pub fn own(&self, path: &Path) {
        if let Some((uid, gid)) = self.who.ids() {
            let mut stack = vec![path.to_path_buf()];
            while let Some(p) = stack.pop() {
                // A link itself (it may lead nowhere yet), never what it names.
                lchown(&p, Some(uid), Some(gid)).unwrap();
                if p.is_dir() && !p.is_symlink() {
                    for e in fs::read_dir(&p).unwrap() {
                        stack.push(e.unwrap().path());
                    }
                }
            }
        }
    }

    /// Write a file (creating parents), owned by the fixture's uid.
    pub fn write(&self, path: &Path, content: &str) {
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).unwrap();
        }
        fs::write(path, content).unwrap();
        let top = if path.starts_with(&self.dir) {
            &self.dir
        } else {
            path
        };
        self.own(top);
    }

    /// The user's zones.toml.
    pub fn config(&self, toml: &str) {
        self.write(&self.home.join(".config/wardcell/zones.toml"), toml);
    }

    /// A config whose default zone `agent` uses the built-in developer profile plus the
    /// staged binaries, so that the probe can run inside. `extra` is appended.
    pub fn test_config(&self, extra: &str) {
        self.config(&format!(
            "[zones.agent]\nprofile = \"test\"\ndefault = true\n\n[profiles.test]\nextends = \"developer-readonly\"\nread = [\"{}\"]\n{extra}",
            self.bin.display()
        ));
    }

    /// A command for the staged wardcell binary, in the project, with a minimal
    /// environment, as the fixture's uid.
    pub fn cmd(&self, args: &[&str]) -> Command {
        self.cmd_of(&self.bin.join("wardcell"), args)
    }

    /// Run another copy of the client, set up as [`Fixture::cmd`] does.
    pub fn run_binary(&self, client: &Path, args: &[&str]) -> Out {
        self.cmd_of(client, args).output().expect("spawn").into()
    }

    /// Where every wardcell command of a test runs: in the project, with a minimal
    /// environment and no stdin.
    fn surroundings(&self, c: &mut Command) {
        c.current_dir(&self.proj)
            .env_clear()
            .env("PATH", format!("{}:/usr/bin:/bin", self.bin.display()))
            .env("HOME", &self.home)
            .stdin(Stdio::null());
    }

    /// A command for another copy of the client, set up as [`Fixture::cmd`] does.
    pub fn cmd_of(&self, client: &Path, args: &[&str]) -> Command {
        let mut c = Command::new(client);
        c.args(args);
        self.surroundings(&mut c);
        if let Some((uid, gid)) = self.who.ids() {
            // std drops supplementary groups when root sets a uid.
            c.uid(uid).gid(gid);
        }
        c
    }

    /// [`Fixture::cmd`] in a mount namespace of its own whose `/etc/hosts` is `hosts`,
    /// so that names a test makes up resolve (to loopback) for wardcell and its proxy as
    /// internal names do on a network with its own DNS, and this machine's hosts file is
    /// left alone. As root the namespace is made first and the uid dropped after, so the
    /// unprivileged run is an ordinary process; run by another user, the namespace needs
    /// a user namespace of its own that maps only that user.
    pub fn cmd_with_hosts(&self, hosts: &Path, args: &[&str]) -> Command {
        let mut c = Command::new("/usr/bin/unshare");
        if !is_root() {
            c.args(["--user", "--map-current-user"]);
        }
        c.args(["--mount", "--propagation", "private", "--", "/bin/sh", "-c"])
            .arg(r#"mount --bind "$0" /etc/hosts && exec "$@""#)
            .arg(hosts);
        if let Some((uid, gid)) = self.who.ids() {
            c.args([
                "/usr/bin/setpriv".to_string(),
                format!("--reuid={uid}"),
                format!("--regid={gid}"),
                "--clear-groups".to_string(),
                "--".to_string(),
            ]);
        }
        c.arg(self.bin.join("wardcell")).args(args);
        self.surroundings(&mut c);
        c
    }

    pub fn run(&self, args: &[&str]) -> Out {
        self.cmd(args).output().expect("spawn wardcell").into()
    }

    /// The real git on the host, in `dir`, as the fixture's uid would run it there (its
    /// home, no system configuration, a name and address for commits).
    pub fn host_git(&self, dir: &Path, args: &[&str]) -> Out {
        let mut c = Command::new("git");
        c.args(["-c", "user.name=t", "-c", "user.email=t@example.org"])
            .args(args)
            .current_dir(dir)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", &self.home)
            .env("GIT_CONFIG_NOSYSTEM", "1");
        if let Some((uid, gid)) = self.who.ids() {
            c.uid(uid).gid(gid);
        }
        c.output().expect("git").into()
    }

    /// `wardcell run -- /bin/sh -c SCRIPT`
    pub fn sh(&self, script: &str) -> Out {
        self.run(&["run", "--", "/bin/sh", "-c", script])
    }

    /// `wardcell run -- wardcell-probe ARGS...`
    pub fn probe(&self, args: &[&str]) -> Out {
        let probe = self.bin.join("wardcell-probe");
        let mut all = vec!["run", "--", probe.to_str().unwrap()];
        all.extend_from_slice(args);
        self.run(&all)
    }
}

/// Wait until `cond` holds, looking every 10 ms; panic naming `what` if it does not
/// within `secs` seconds. Tests wait on what they need to have happened, never for a
/// fixed time: generous deadlines cost nothing when all is well.
#[track_caller]
pub fn wait_until(secs: u64, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(Instant::now() < deadline, "waited {secs} s for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The live processes that hold `file` open (a descriptor of theirs is it), found
/// through /proc/PID/fd (readable to root for every process).
pub fn holders(file: &Path) -> Vec<Proc> {
    use std::os::unix::fs::MetadataExt;
    let Ok(want) = fs::metadata(file) else {
        return Vec::new();
    };
    let is_it = |m: fs::Metadata| m.dev() == want.dev() && m.ino() == want.ino();
    let mut found = Vec::new();
    for e in fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let Ok(fds) = fs::read_dir(e.path().join("fd")) else {
            continue;
        };
        if fds
            .flatten()
            .any(|fd| fs::metadata(fd.path()).is_ok_and(is_it))
        {
            found.extend(proc_now(pid).map(|(p, _)| p));
        }
    }
    found
}

/// Assert that the `wardcell-probe heartbeat` writing `beat` has ended: within 10 s no
/// live process holds the file open (the probe holds it from its first beat to its
/// end). Then its counter must not move over five beats: a backstop in case the writer
/// could not be seen (its /proc unreadable to a test run as another user than root);
/// an absence cannot be waited for.
#[track_caller]
pub fn assert_heartbeat_stopped(beat: &Path, why: &str) {
    let mut left = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        left = holders(beat);
        if left.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        left,
        Vec::<Proc>::new(),
        "{why}: its writer is alive after 10 s"
    );
    let a = fs::read_to_string(beat).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(a, fs::read_to_string(beat).unwrap(), "{why}");
}

/// Say on the test process's own stderr, past the harness's capture (which takes
/// `eprintln!` from a test that passes), that a test or a part of it was skipped, so that
/// a skip is seen in `cargo test`'s output and never mistaken for a pass. Run as root
/// (as CI runs, after installing what the tests need) nothing may be skipped: there it
/// fails the test instead.
#[track_caller]
pub fn skipped(why: &str) {
    assert!(
        !is_root(),
        "run as root, every test must run, and this one could not: {why}"
    );
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED: {why}");
}

/// Define a test twice: as the invoking user and as the unprivileged uid. Run by a user
/// who is not root, the second cannot drop to that uid: it says SKIPPED and does
/// nothing, rather than run again as the invoking user and pass as if it had.
#[macro_export]
macro_rules! both {
    ($name:ident, |$fx:ident| $body:block) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            #[test]
            fn as_invoker() {
                let $fx = $crate::Fixture::new(stringify!($name), $crate::As::Invoker);
                $body
            }
            #[test]
            fn as_user() {
                if !$crate::is_root() {
                    $crate::skipped(&format!(
                        "{}::as_user: only root can drop to the unprivileged uid {}",
                        stringify!($name),
                        $crate::test_uid()
                    ));
                    return;
                }
                let $fx = $crate::Fixture::new(stringify!($name), $crate::As::User);
                $body
            }
        }
    };
}

/// A process as the host's /proc shows it: its pid and start time (together they name it
/// even after the pid is reused) and its name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Proc {
    pub pid: u32,
    pub start: u64,
    pub comm: String,
}

/// The process `pid` now: `None` once it is gone or a zombie (it has ended; only a wait
/// is missing), or when `pid` names another process.
fn proc_now(pid: u32) -> Option<(Proc, u32)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // pid (comm) state ppid ...: comm may hold spaces and parentheses.
    let (head, rest) = stat.rsplit_once(')')?;
    let comm = head.split_once('(')?.1.to_string();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    if fields.first() == Some(&"Z") {
        return None;
    }
    // Field 22 of stat, the start time, is the 20th after the ')'.
    let start = fields.get(19)?.parse().ok()?;
    let ppid = fields.get(1)?.parse().ok()?;
    Some((Proc { pid, start, comm }, ppid))
}

/// `p` is still alive (not a zombie), and still the same process.
pub fn alive(p: &Proc) -> bool {
    proc_now(p.pid).is_some_and(|(now, _)| now.start == p.start)
}

/// Every live descendant of `pid`, found through `/proc/PID/task/*/children`.
pub fn descendants(pid: u32) -> Vec<Proc> {
    let mut found = Vec::new();
    let mut stack = vec![pid];
    while let Some(p) = stack.pop() {
        let Ok(tasks) = fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let children = fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for child in children.split_whitespace().filter_map(|c| c.parse().ok()) {
                if let Some((proc, _)) = proc_now(child) {
                    found.push(proc);
                }
                stack.push(child);
            }
        }
    }
    found
}

/// Everything a run started: the client's descendants (the broker among them),
/// collected each time
/// [`Tree::look`] is called, so that a process seen once is checked at the end even if
/// it was reparented (a plugin's child) or its parent died first.
pub struct Tree {
    /// `wardcell run` as spawned: the terminal keeper, whose child the broker is.
    pub client: Proc,
    pub seen: Vec<Proc>,
}

impl Tree {
    /// Start tracking the run (the pid `wardcell run` was spawned with: the keeper).
    pub fn of(client: u32) -> Tree {
        // It may have ended already (a zombie until waited for).
        let stat = fs::read_to_string(format!("/proc/{client}/stat")).unwrap_or_default();
        let start = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(19)?.parse().ok())
            .unwrap_or(0);
        let client = Proc {
            pid: client,
            start,
            comm: "wardcell".into(),
        };
        Tree {
            client,
            seen: Vec::new(),
        }
    }

    /// The broker (waiting up to 10 s for it to be there).
    #[track_caller]
    pub fn broker(&mut self) -> Proc {
        self.wait_for("wardcell-broker", 1).remove(0)
    }

    /// Add the client's descendants now alive; return them.
    pub fn look(&mut self) -> Vec<Proc> {
        let now = if alive(&self.client) {
            descendants(self.client.pid)
        } else {
            Vec::new()
        };
        for p in &now {
            if !self.seen.contains(p) {
                self.seen.push(p.clone());
            }
        }
        now
    }

    /// The live descendants named `comm`, waiting up to 10 s for `want` of them.
    #[track_caller]
    pub fn wait_for(&mut self, comm: &str, want: usize) -> Vec<Proc> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let named: Vec<Proc> = self.look().into_iter().filter(|p| p.comm == comm).collect();
            if named.len() >= want {
                return named;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no {want} processes named {comm} under the run: {:?}",
                self.seen
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// Nothing the run started is left: every process seen (the client included) is gone
    /// within 3 s (SIGKILL is delivered and the PID namespace torn down asynchronously).
    #[track_caller]
    pub fn assert_all_gone(&self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
        let left = || -> Vec<&Proc> {
            std::iter::once(&self.client)
                .chain(&self.seen)
                .filter(|p| alive(p))
                .collect()
        };
        while !left().is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(left(), Vec::<&Proc>::new(), "processes of the run are left");
    }
}

/// The host's mounts (mount point and source, from /proc/self/mountinfo) outside every
/// test process's staging directory: what any run of any test may not change.
pub fn host_mounts() -> Vec<String> {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mut mounts: Vec<String> = info
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let point = *f.get(4)?;
            let sep = f.iter().position(|x| *x == "-")?;
            let source = f.get(sep + 2).copied().unwrap_or_default();
            (!point.starts_with(STAGING_PREFIX)).then(|| format!("{point} {source}"))
        })
        .collect();
    mounts.sort();
    mounts
}

/// A small tmpfs owned by the fixture's uid, unmounted when dropped. Mounting needs
/// root: as another user the tests that need one are skipped (said on stderr).
pub struct SmallFs(pub PathBuf);

impl SmallFs {
    /// A 64 KiB tmpfs at `fx.dir/state`, with `opts` added to its mount options.
    pub fn mount(fx: &Fixture, opts: &str) -> Option<SmallFs> {
        if !is_root() {
            eprintln!("skipped: mounting a tmpfs needs root");
            return None;
        }
        let dir = fx.dir.join("state");
        fs::create_dir_all(&dir).unwrap();
        let uid = fx.uid();
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size=64k,mode=0700,uid={uid},gid={uid}{opts}"))
            .arg("wardcell-test")
            .arg(&dir)
            .status()
            .unwrap();
        assert!(st.success(), "mount failed");
        Some(SmallFs(dir))
    }

    /// Fill it, leaving at most `room` bytes free.
    pub fn fill(&self, room: usize) {
        let big = vec![b'x'; 4096];
        let mut f = fs::File::create(self.0.join("filler")).unwrap();
        use std::io::Write;
        while f.write_all(&big).is_ok() {}
        let _ = f.flush();
        let len = f.metadata().unwrap().len();
        f.set_len(len.saturating_sub(room as u64)).unwrap();
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A `wardcell run` started in the background, its output going to files, its
/// descendants tracked.
pub struct Watched {
    pub child: std::process::Child,
    pub tree: Tree,
    out: PathBuf,
    err: PathBuf,
}

impl Watched {
    /// Spawn `cmd`; its stdout and stderr go to `fx.dir/TAG.out` and `TAG.err`.
    pub fn spawn(fx: &Fixture, mut cmd: Command, tag: &str) -> Watched {
        let out = fx.dir.join(format!("{tag}.out"));
        let err = fx.dir.join(format!("{tag}.err"));
        let child = cmd
            .stdout(fs::File::create(&out).unwrap())
            .stderr(fs::File::create(&err).unwrap())
            .spawn()
            .expect("spawn wardcell");
        let tree = Tree::of(child.id());
        Watched {
            child,
            tree,
            out,
            err,
        }
    }

    /// Wait (looking at its descendants meanwhile) for it to end within `secs`; what it
    /// printed and how it ended.
    #[track_caller]
    pub fn finish(mut self, secs: u64) -> (Out, Tree) {
        use std::os::unix::process::ExitStatusExt;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        let status = loop {
            self.tree.look();
            if let Some(st) = self.child.try_wait().unwrap() {
                break st;
            }
            if std::time::Instant::now() > deadline {
                // What each process is doing, for the report.
                let states: Vec<String> = std::iter::once(self.tree.client.clone())
                    .chain(descendants(self.tree.client.pid))
                    .map(|p| {
                        let status = fs::read_to_string(format!("/proc/{}/status", p.pid))
                            .unwrap_or_default();
                        let keep: Vec<&str> = status
                            .lines()
                            .filter(|l| {
                                [
                                    "State", "SigQ", "SigPnd", "ShdPnd", "SigBlk", "SigIgn",
                                    "SigCgt",
                                ]
                                .iter()
                                .any(|k| l.starts_with(k))
                            })
                            .collect();
                        format!("{} {}: {}", p.pid, p.comm, keep.join(", "))
                    })
                    .collect();
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "the run did not end within {secs} s: {}\n{}",
                    fs::read_to_string(&self.err).unwrap_or_default(),
                    states.join("\n")
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        let code = status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
        let out = Out {
            code,
            stdout: fs::read_to_string(&self.out).unwrap(),
            stderr: fs::read_to_string(&self.err).unwrap(),
        };
        (out, self.tree)
    }
}

/// The run directories in the runtime directory `rt` (`$XDG_RUNTIME_DIR/wardcell`).
pub fn run_dirs(rt: &Path) -> Vec<String> {
    match fs::read_dir(rt.join("wardcell")) {
        Ok(entries) => entries
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// The broker of the run whose client (`wardcell run`, its terminal keeper) is `client`,
/// waiting up to 10 s for it.
#[track_caller]
pub fn broker_of(client: u32) -> u32 {
    Tree::of(client).broker().pid
}

/// Run `cmd` (stdout and stderr discarded) and return its exit code and the most memory
/// it held (VmHWM, in KiB), read from /proc every few milliseconds while it runs. (Not
/// `wait4`'s maxrss: a child started with vfork counts its parent's high water too.)
/// VmHWM only grows, so a peak is seen unless it comes in the last milliseconds.
pub fn max_rss_kib(mut cmd: Command) -> (i32, u64) {
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let status = format!("/proc/{}/status", child.id());
    let mut most = 0;
    let code = loop {
        if let Ok(text) = fs::read_to_string(&status) {
            let hwm = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
            most = most.max(hwm.unwrap_or(0));
        }
        if let Some(st) = child.try_wait().expect("wait") {
            break st.code().unwrap_or(-1);
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    };
    (code, most)
}

/// The user's interactive bash on a real pty (the test is its terminal emulator).
pub struct Shell {
    pid: i32,
    child: std::process::Child,
    master: fs::File,
    seen: Arc<Mutex<String>>,
}

impl Shell {
    pub fn start(fx: &Fixture) -> Shell {
        let mut master: libc::c_int = -1;
        let mut slave: libc::c_int = -1;
        // SAFETY: openpty writes two descriptors; name, termios and size pointers are null.
        let r = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        assert_eq!(r, 0);
        // Close-on-exec at once: a run another test starts meanwhile must not hold the
        // master (its terminal would never hang up).
        for fd in [master, slave] {
            // SAFETY: F_SETFD on descriptors we own.
            unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        }
        // SAFETY: openpty returned two new descriptors that we now own.
        let (master, slave) = unsafe {
            (
                fs::File::from_raw_fd(master),
                std::os::fd::OwnedFd::from_raw_fd(slave),
            )
        };
        let mut cmd = std::process::Command::new("/bin/bash");
        cmd.args(["--norc", "--noprofile", "-i"])
            .current_dir(&fx.proj)
            .env_clear()
            .env("PATH", format!("{}:/usr/bin:/bin", fx.bin.display()))
            .env("HOME", &fx.home)
            .env("PS1", "$ ")
            .stdin(slave.try_clone().unwrap())
            .stdout(slave.try_clone().unwrap())
            .stderr(slave.try_clone().unwrap());
        if fx.who == As::User && is_root() {
            // SAFETY: fchown on a descriptor we own.
            unsafe { libc::fchown(slave.as_raw_fd(), fx.uid(), fx.uid()) };
            std::os::unix::process::CommandExt::uid(&mut cmd, fx.uid());
            std::os::unix::process::CommandExt::gid(&mut cmd, fx.uid());
        }
        // SAFETY: setsid and TIOCSCTTY in the child before exec, as a terminal emulator
        // does.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().unwrap();
        drop(cmd);
        drop(slave);
        let seen = Arc::new(Mutex::new(String::new()));
        let mut r = master.try_clone().unwrap();
        let into = seen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = r.read(&mut buf) {
                if n == 0 {
                    break;
                }
                into.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Shell {
            pid: child.id() as i32,
            child,
            master,
            seen,
        }
    }

    pub fn seen(&self) -> String {
        self.seen.lock().unwrap().clone()
    }

    /// Wait (20 s at most) for `what` on the terminal.
    #[track_caller]
    pub fn wait_for(&self, what: &str) {
        let until = Instant::now() + Duration::from_secs(20);
        while !self.seen().contains(what) {
            assert!(Instant::now() < until, "no {what:?} in: {}", self.seen());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Wait (20 s at most) for the shell's prompt after the last `marker`.
    #[track_caller]
    pub fn wait_for_prompt_after(&self, marker: &str) {
        self.wait_for_prompt_after_echo(marker, "");
    }

    /// The same, where the prompt may also follow `echoed` on its line: keys the terminal
    /// echoed while a job had it in the shell's mode, with no newline after them.
    #[track_caller]
    pub fn wait_for_prompt_after_echo(&self, marker: &str, echoed: &str) {
        let until = Instant::now() + Duration::from_secs(20);
        let after_echo = format!("\n{echoed}$ ");
        let prompted = || {
            let seen = self.seen();
            seen.rsplit_once(marker).is_some_and(|(_, after)| {
                after.contains("\n$ ") || after.contains(after_echo.as_str())
            })
        };
        while !prompted() {
            assert!(Instant::now() < until, "no prompt: {}", self.seen());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Ask `jobs` until the background job is reported stopped (10 s at most): the shell
    /// learns of the stop asynchronously.
    #[track_caller]
    pub fn wait_for_stopped(&mut self) {
        let until = Instant::now() + Duration::from_secs(10);
        while !self.seen().contains("Stopped") {
            assert!(Instant::now() < until, "not stopped: {}", self.seen());
            self.type_in("jobs\n");
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// Wait (20 s at most) until a job of the shell's, not the shell, is the terminal's
    /// foreground (after `fg`: the job may read it now).
    #[track_caller]
    pub fn wait_for_job_in_foreground(&self) {
        wait_until(20, "a job in the terminal's foreground", || {
            // SAFETY: tcgetpgrp on a descriptor we own (the master's is its slave's).
            let pgrp = unsafe { libc::tcgetpgrp(self.master.as_raw_fd()) };
            pgrp > 0 && pgrp != self.pid
        });
    }

    /// Another handle on the terminal's master, to type from another thread.
    pub fn master_clone(&self) -> fs::File {
        self.master.try_clone().unwrap()
    }

    /// The shell's pid (its descendants are what it runs).
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    pub fn type_in(&mut self, text: &str) {
        self.master.write_all(text.as_bytes()).unwrap();
    }

    /// Exit the shell; its last command's status was `rc`.
    #[track_caller]
    pub fn finish(mut self, rc: i32) {
        self.type_in("echo rc=$?; exit\n");
        self.wait_for(&format!("rc={rc}"));
        let status = self.child.wait().unwrap();
        self.pid = 0;
        assert_eq!(status.code(), Some(0), "{}", self.seen());
    }
}

impl Drop for Shell {
    // A failed assertion must not leave the shell and its stopped jobs behind: killing
    // the shell orphans their process groups, and the kernel hangs them up.
    fn drop(&mut self) {
        if self.pid > 0 {
            // SAFETY: kill with a pid we spawned and have not reaped.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
            let _ = self.child.wait();
        }
    }
}
