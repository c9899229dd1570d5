//! Harness for wardcell's integration tests: real sandboxes on this kernel, run both as
//! the invoking user (root in CI) and as an unprivileged uid.
//!
//! The binaries are staged under /var/tmp (not /tmp, which sandboxes make private, and
//! not the checkout, which may sit under a 0700 directory such as /root) so that the
//! unprivileged uid can execute them. Each test gets its own fixture directory there,
//! owned by the uid it runs as, with a home, a project and an "outside" directory.

use std::fs;
use std::os::unix::fs::{chown, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

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
            // A hard link where the checkout shares the filesystem, else a copy.
            if fs::hard_link(&src, &dst).is_err() {
                fs::copy(&src, &dst).unwrap();
            }
            fs::set_permissions(&dst, fs::Permissions::from_mode(0o755)).unwrap();
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
    fn ids(self) -> Option<(u32, u32)> {
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
                chown(&p, Some(uid), Some(gid)).unwrap();
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

    fn cmd_of(&self, client: &Path, args: &[&str]) -> Command {
        let mut c = Command::new(client);
        c.args(args)
            .current_dir(&self.proj)
            .env_clear()
            .env("PATH", format!("{}:/usr/bin:/bin", self.bin.display()))
            .env("HOME", &self.home)
            .stdin(Stdio::null());
        if let Some((uid, gid)) = self.who.ids() {
            // std drops supplementary groups when root sets a uid.
            c.uid(uid).gid(gid);
        }
        c
    }

    pub fn run(&self, args: &[&str]) -> Out {
        self.cmd(args).output().expect("spawn wardcell").into()
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

/// Assert that the `wardcell-probe heartbeat` writing `beat` has stopped: its counter
/// does not move in 300 ms.
#[track_caller]
pub fn assert_heartbeat_stopped(beat: &Path, why: &str) {
    let a = fs::read_to_string(beat).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(a, fs::read_to_string(beat).unwrap(), "{why}");
}

/// Define a test twice: as the invoking user and as the unprivileged uid.
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
                let $fx = $crate::Fixture::new(stringify!($name), $crate::As::User);
                $body
            }
        }
    };
}
