//! A sandbox's resource limits (`limits` in a profile): their values, how each is
//! enforced on this machine, and the cgroup the broker makes for a sandbox that needs one.
//!
//! Each limit bounds one sandbox (the first one, or one entered with `zone enter`), its
//! whole process tree:
//!
//! | limit | enforced by |
//! | --- | --- |
//! | `processes` | `RLIMIT_NPROC`, set by the shim after the sandbox's user namespace exists (Linux 5.14 and later count it per user namespace: the sandbox's processes only), for a caller other than root (real root is exempt from it); otherwise, for a bound of 300 or more on Linux 6.14 and later, `kernel.pid_max` of the sandbox's own PID namespace; otherwise a cgroup's `pids.max` |
//! | `memory` | a cgroup's `memory.max` (v2, with `memory.swap.max` 0) or `memory.limit_in_bytes` (v1) |
//! | `cpu` | a cgroup's `cpu.max` (v2) or `cpu.cfs_quota_us` (v1), over a 100 ms period |
//! | `time` | the broker's timer: SIGTERM, SIGCONT, SIGKILL after the grace, status 124 |
//!
//! A cgroup is made only for a sandbox with a limit that needs one: in cgroup v2 beside
//! the broker's own cgroup (in it at the hierarchy's root), where the caller may write (as
//! root, or in a subtree delegated to the user), else in cgroup v1 under the broker's own
//! cgroup of each controller (root only). A limit none of these can enforce refuses the
//! run, unless the profile marks it best effort.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One limit's value (count, bytes, percent of one CPU, or seconds) and whether the run
/// goes on without it where this machine cannot enforce it.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    pub value: u64,
    pub best_effort: bool,
}

/// A profile's limits, `extends` applied. `None`: not limited.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Limits {
    /// Processes and threads at once in the sandbox, its init included.
    pub processes: Option<Bound>,
    /// Bytes of memory for the whole sandbox (not one process's address space).
    pub memory: Option<Bound>,
    /// Percent of one CPU (`200` is two CPUs' worth).
    pub cpu: Option<Bound>,
    /// Seconds of wall time for the command.
    pub time: Option<Bound>,
}

/// Which limit.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Processes,
    Memory,
    Cpu,
    Time,
}

impl Kind {
    /// Its key in `limits`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Processes => "processes",
            Kind::Memory => "memory",
            Kind::Cpu => "cpu",
            Kind::Time => "time",
        }
    }

    /// A value as zones.toml writes it: `4096`, `"2G"`, `"200%"`, `"1h30m"`.
    pub fn show(self, value: u64) -> String {
        match self {
            Kind::Processes => value.to_string(),
            Kind::Memory => show_size(value),
            Kind::Cpu => format!("{value}%"),
            Kind::Time => crate::text::show_duration(value),
        }
    }
}

/// The kernel's greatest `pid_max` (`PID_MAX_LIMIT` on 64-bit).
pub const PID_MAX_LIMIT: u64 = 4 * 1024 * 1024;

/// The units of a size (powers of 1024), largest first.
pub const UNITS: [(char, u64); 4] = [
    ('T', 1 << 40),
    ('G', 1 << 30),
    ('M', 1 << 20),
    ('K', 1 << 10),
];

/// Bytes as zones.toml writes them (wardcell-config reads them): the largest unit that
/// divides them.
pub fn show_size(n: u64) -> String {
    UNITS
        .iter()
        .find(|(_, m)| n >= *m && n % m == 0)
        .map_or_else(|| n.to_string(), |(u, m)| format!("{}{u}", n / m))
}

// ---------------------------------------------------------------------------
// How each limit is enforced here
// ---------------------------------------------------------------------------

/// What enforces one limit on this machine.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Mechanism {
    CgroupV2,
    CgroupV1,
    /// `RLIMIT_NPROC`, counted in the sandbox's own user namespace.
    Rlimit,
    /// `kernel.pid_max` of the sandbox's own PID namespace (Linux 6.14 and later).
    PidMax,
    /// The broker's timer.
    Timer,
    /// Nothing here can: a best-effort limit is left out.
    None,
}

/// What this machine offers for limits, as seen by the caller (the broker runs as the
/// caller, in the caller's cgroups). `wardcell run` looks (`wardcell/src/machine.rs`) and
/// the plan carries it: the broker reads no mount table.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct Machine {
    /// The effective uid.
    pub uid: u32,
    /// Linux 5.14 or later: `RLIMIT_NPROC` counts per user namespace.
    pub nproc_per_userns: bool,
    /// Linux 6.14 or later: each PID namespace has a `pid_max` of its own.
    pub pid_max_per_pidns: bool,
    /// cgroup v2: the directory a sandbox's cgroup is made in, and the controllers its
    /// children may have there. `None`: no cgroup v2 the caller may write.
    pub v2: Option<(PathBuf, Vec<String>)>,
    /// cgroup v1, for root: each controller's hierarchy, at the broker's own cgroup.
    pub v1: Vec<(String, PathBuf)>,
}

/// The cgroup controller a limit needs.
pub fn controller(kind: Kind) -> Option<&'static str> {
    match kind {
        Kind::Processes => Some("pids"),
        Kind::Memory => Some("memory"),
        Kind::Cpu => Some("cpu"),
        Kind::Time => None,
    }
}

/// The line `run` (or `zone enter`) ends with when the time limit ended the command.
pub fn time_message(profile: &str, secs: u64) -> String {
    format!(
        "the command ran past the time limit of {} (limits.time of profile '{profile}') and was ended; raise the limit in the profile if it needs longer",
        Kind::Time.show(secs)
    )
}

/// The exit status of a run the time limit ended (as `timeout(1)`).
pub const TIME_LIMIT_STATUS: i32 = 124;

// ---------------------------------------------------------------------------
// Enforcing them for one sandbox
// ---------------------------------------------------------------------------

/// One sandbox's limits, being enforced: its cgroups (removed when this is dropped), the
/// `RLIMIT_NPROC` its shim sets, its time.
#[derive(Debug, Default)]
pub struct Enforced {
    profile: String,
    pub chosen: Vec<(Kind, Bound, Mechanism)>,
    /// The cgroup of each limit that has one: one directory per v1 controller, one for
    /// every v2 limit.
    dirs: Vec<(Kind, Mechanism, PathBuf)>,
}

impl Enforced {
    /// Make the sandbox's cgroup on `machine` (the plan's) where a limit's mechanism,
    /// `chosen` as the run started (the plan writer's), needs one. `name` is unique on
    /// this machine (`wardcell-<run>-<sandbox>`).
    pub fn prepare(
        chosen: &[(Kind, Bound, Mechanism)],
        profile: &str,
        name: &str,
        machine: &Machine,
    ) -> Result<Enforced, String> {
        if chosen.is_empty() {
            return Ok(Enforced::default());
        }
        let chosen = chosen.to_vec();
        let mut out = Enforced {
            profile: profile.to_string(),
            chosen,
            dirs: Vec::new(),
        };
        for i in 0..out.chosen.len() {
            let (kind, bound, mechanism) = out.chosen[i];
            let made = match mechanism {
                Mechanism::CgroupV2 | Mechanism::CgroupV1 => {
                    out.limit_in_cgroup(kind, bound.value, mechanism, machine, name)
                }
                _ => Ok(()),
            };
            match made {
                Ok(()) => {}
                // Best effort: without it, and without what was made for it.
                Err(_) if bound.best_effort => {
                    out.chosen[i].2 = Mechanism::None;
                    out.forget(kind);
                }
                Err(e) => {
                    return Err(format!(
                        "profile '{profile}' sets limits.{} = {}, and making its cgroup failed: {e}; `wardcell doctor` says what enforces each limit here",
                        kind.name(),
                        kind.show(bound.value)
                    ))
                }
            }
        }
        Ok(out)
    }

    /// Put `kind` at `value` in the sandbox's cgroup of `mechanism`, making it if no
    /// other limit did (v2: the controller enabled in the parent first).
    fn limit_in_cgroup(
        &mut self,
        kind: Kind,
        value: u64,
        mechanism: Mechanism,
        machine: &Machine,
        name: &str,
    ) -> Result<(), String> {
        let ctrl = controller(kind).expect("a cgroup limit");
        let (dir, files) = match mechanism {
            Mechanism::CgroupV2 => {
                let (parent, _) = machine.v2.as_ref().expect("chosen from it");
                enable(parent, ctrl).map_err(|e| format!("{}: {e}", parent.display()))?;
                (parent.join(name), v2_files(kind, value))
            }
            _ => {
                let (_, at) = machine.v1.iter().find(|(c, _)| c == ctrl).expect("chosen");
                (at.join(name), v1_files(kind, value))
            }
        };
        if !self.dirs.iter().any(|(_, _, d)| *d == dir) {
            fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        self.dirs.push((kind, mechanism, dir.clone()));
        for (file, value) in files {
            let path = dir.join(file);
            match fs::write(&path, value) {
                Ok(()) => {}
                // Optional files: swap accounting may be off.
                Err(e) if e.kind() == io::ErrorKind::NotFound && file.contains("sw") => {}
                Err(e) => return Err(format!("{}: {e}", path.display())),
            }
        }
        Ok(())
    }

    /// Leave `kind` out of the sandbox's cgroups, removing one no other limit uses.
    fn forget(&mut self, kind: Kind) {
        let Some(i) = self.dirs.iter().position(|(k, _, _)| *k == kind) else {
            return;
        };
        let (_, mechanism, dir) = self.dirs.remove(i);
        if !self.dirs.iter().any(|(_, _, d)| *d == dir) {
            remove(mechanism, &dir);
        }
    }

    /// The `RLIMIT_NPROC` the sandbox's shim sets, if that is how processes are bounded.
    pub fn nproc(&self) -> Option<u64> {
        self.chosen
            .iter()
            .find(|(k, _, m)| *k == Kind::Processes && *m == Mechanism::Rlimit)
            .map(|(_, b, _)| b.value)
    }

    /// The `pid_max` the sandbox's shim sets in its PID namespace (the bound plus one:
    /// PIDs are below it), if that is how processes are bounded.
    pub fn pid_max(&self) -> Option<u64> {
        self.chosen
            .iter()
            .find(|(k, _, m)| *k == Kind::Processes && *m == Mechanism::PidMax)
            .map(|(_, b, _)| b.value.saturating_add(1).min(PID_MAX_LIMIT))
    }

    /// The limits marked best effort that nothing here enforces for this sandbox: each
    /// with its value as written and the warning that says so (`sandbox.limit_unenforced`).
    pub fn unenforced(&self) -> Vec<(&'static str, String, String)> {
        let none = self.chosen.iter().filter(|(_, _, m)| *m == Mechanism::None);
        none.map(|(kind, bound, _)| {
            let (name, value) = (kind.name(), kind.show(bound.value));
            let line = format!(
                "warning: limits.{name} = {value} of profile '{}' is best effort, and nothing on this machine enforces it: the sandbox runs without it (`wardcell doctor` says what would)",
                self.profile
            );
            (name, value, line)
        })
        .collect()
    }

    /// The command's time, if limited.
    pub fn time(&self) -> Option<Duration> {
        self.chosen
            .iter()
            .find(|(k, _, _)| *k == Kind::Time)
            .map(|(_, b, _)| Duration::from_secs(b.value))
    }

    /// The exit status and the line a sandbox the time limit ended ends with.
    pub fn ended_by_time(&self, timed_out: bool) -> Option<(i32, String)> {
        let secs = self.time().filter(|_| timed_out)?.as_secs();
        Some((TIME_LIMIT_STATUS, time_message(&self.profile, secs)))
    }

    /// Put the sandbox's shim (`pid`, before it starts the command) in its cgroups.
    pub fn join(&self, pid: i32) -> Result<(), String> {
        let mut done: Vec<&PathBuf> = Vec::new();
        for (_, _, dir) in &self.dirs {
            if done.contains(&dir) {
                continue;
            }
            done.push(dir);
            fs::write(dir.join("cgroup.procs"), pid.to_string()).map_err(|e| {
                format!("moving the sandbox into its cgroup {}: {e}", dir.display())
            })?;
        }
        Ok(())
    }

    /// The limits the sandbox reached (after it ended): each with how many times the
    /// kernel counted it (`pids.events` max, the memory controller's failures or OOM
    /// kills, periods throttled); `timed_out` adds the time limit. A limit under
    /// `RLIMIT_NPROC` is not counted by the kernel and never shows here.
    pub fn reached(&self, timed_out: bool) -> Vec<(Kind, Bound, Mechanism, u64)> {
        let mut out = Vec::new();
        for &(kind, bound, mechanism) in &self.chosen {
            let count = match mechanism {
                Mechanism::Timer => u64::from(timed_out),
                Mechanism::CgroupV1 | Mechanism::CgroupV2 => self
                    .dirs
                    .iter()
                    .find(|(k, _, _)| *k == kind)
                    .map_or(0, |(_, m, dir)| counted(dir, *m, kind)),
                _ => 0,
            };
            if count > 0 {
                out.push((kind, bound, mechanism, count));
            }
        }
        out
    }
}

impl Drop for Enforced {
    /// Remove the cgroups. The sandbox's processes are gone or going (its init has
    /// exited, which kills the rest): what is left is killed, then each directory is
    /// removed once empty, waiting at most a second.
    fn drop(&mut self) {
        let mut dirs: Vec<(Mechanism, PathBuf)> = Vec::new();
        for (_, m, d) in self.dirs.drain(..) {
            if !dirs.iter().any(|(_, e)| *e == d) {
                dirs.push((m, d));
            }
        }
        for (mechanism, dir) in dirs {
            remove(mechanism, &dir);
        }
    }
}

/// Remove the cgroup `dir`: kill what is left in it, then remove it once empty, waiting
/// at most a second.
pub fn remove(mechanism: Mechanism, dir: &Path) {
    if mechanism == Mechanism::CgroupV2 {
        let _ = fs::write(dir.join("cgroup.kill"), "1");
    } else if let Ok(procs) = fs::read_to_string(dir.join("cgroup.procs")) {
        for pid in procs.lines().filter_map(|p| p.parse::<i32>().ok()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
    for _ in 0..1000 {
        match fs::remove_dir(dir) {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                std::thread::sleep(Duration::from_millis(1))
            }
            _ => break,
        }
    }
}

/// The files that set `kind` to `value` in a cgroup v2.
fn v2_files(kind: Kind, value: u64) -> Vec<(&'static str, String)> {
    match kind {
        Kind::Processes => vec![("pids.max", value.to_string())],
        Kind::Memory => vec![
            ("memory.max", value.to_string()),
            ("memory.swap.max", "0".into()),
        ],
        Kind::Cpu => vec![("cpu.max", format!("{} 100000", value * 1000))],
        Kind::Time => vec![],
    }
}

/// The files that set `kind` to `value` in a cgroup v1 (in this order).
fn v1_files(kind: Kind, value: u64) -> Vec<(&'static str, String)> {
    match kind {
        Kind::Processes => vec![("pids.max", value.to_string())],
        Kind::Memory => vec![
            ("memory.limit_in_bytes", value.to_string()),
            ("memory.memsw.limit_in_bytes", value.to_string()),
        ],
        Kind::Cpu => vec![
            ("cpu.cfs_period_us", "100000".into()),
            ("cpu.cfs_quota_us", (value * 1000).to_string()),
        ],
        Kind::Time => vec![],
    }
}

/// cgroup v2: give the children of `parent` the controller `ctrl`, if they lack it.
fn enable(parent: &Path, ctrl: &str) -> io::Result<()> {
    let enabled = fs::read_to_string(parent.join("cgroup.subtree_control"))?;
    if enabled.split_whitespace().any(|c| c == ctrl) {
        return Ok(());
    }
    fs::write(parent.join("cgroup.subtree_control"), format!("+{ctrl}"))
}

/// How many times the kernel counted `kind` reaching its limit in the cgroup `dir`.
fn counted(dir: &Path, mechanism: Mechanism, kind: Kind) -> u64 {
    let field = |file: &str, key: &str| -> u64 {
        fs::read_to_string(dir.join(file))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_once(' '))
            .filter(|(k, _)| *k == key)
            .filter_map(|(_, v)| v.trim().parse::<u64>().ok())
            .sum()
    };
    match (kind, mechanism) {
        (Kind::Processes, _) => field("pids.events", "max"),
        (Kind::Memory, Mechanism::CgroupV2) => {
            field("memory.events", "max") + field("memory.events", "oom_kill")
        }
        (Kind::Memory, _) => {
            let count = |file: &str| -> u64 {
                fs::read_to_string(dir.join(file))
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                    .unwrap_or(0)
            };
            count("memory.failcnt")
                + count("memory.memsw.failcnt")
                + field("memory.oom_control", "oom_kill")
        }
        (Kind::Cpu, _) => field("cpu.stat", "nr_throttled"),
        (Kind::Time, _) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_shares_show_as_written() {
        assert_eq!(show_size(2 << 30), "2G");
        assert_eq!(show_size(1536 << 20), "1536M");
        assert_eq!(show_size(16 * 1024 * 1024 + 1), "16777217");
        assert_eq!(Kind::Time.show(5400), "1h30m");
        assert_eq!(Kind::Cpu.show(50), "50%");
    }

    /// This machine's cgroup v2 hierarchy at this process's own cgroup's parent, when
    /// root may make cgroups there (`wardcell/src/machine.rs` finds it for runs).
    fn v2_here() -> Option<PathBuf> {
        let mountinfo = fs::read_to_string("/proc/self/mountinfo").ok()?;
        let own = fs::read_to_string("/proc/self/cgroup").ok()?;
        let line = mountinfo.lines().find(|l| l.contains(" - cgroup2 "))?;
        let mount = PathBuf::from(line.split(' ').nth(4)?);
        let path = own.lines().find_map(|l| l.strip_prefix("0::"))?;
        // In its own cgroup when that is the hierarchy's root.
        let parent = Path::new(path.trim_start_matches('/')).parent();
        let dir = parent.map_or(mount.clone(), |p| mount.join(p));
        (nix::unistd::geteuid().is_root() && dir.is_dir()).then_some(dir)
    }

    // The cgroup v2 paths that work without controllers, on the hierarchy of this machine
    // (root; its controllers are all bound to v1 here, so a v2 limit cannot be set): a
    // sandbox's cgroup is made, the shim moved in, and at its end what is left is killed
    // (cgroup.kill) and the cgroup removed.
    #[test]
    fn a_v2_cgroup_is_joined_then_emptied_and_removed() {
        let Some(parent) = v2_here() else { return };
        let mut machine = Machine::default();
        // Pretend the time limit takes a cgroup: the directory is made, nothing written.
        let name = format!("wardcell-test-{}", std::process::id());
        let dir = parent.join(&name);
        let mut e = Enforced::prepare(&[], "p", &name, &machine).unwrap();
        assert!(e.dirs.is_empty() && !dir.exists());
        fs::create_dir(&dir).unwrap();
        e.dirs.push((Kind::Time, Mechanism::CgroupV2, dir.clone()));
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        e.join(child.id() as i32).unwrap();
        let procs = fs::read_to_string(dir.join("cgroup.procs")).unwrap();
        assert_eq!(procs.trim(), child.id().to_string());
        drop(e);
        assert!(!dir.exists(), "the cgroup was left");
        // Killed through cgroup.kill, not ended on its own.
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGKILL));

        // A controller the hierarchy does not have cannot be enabled: one line naming
        // the cgroup, and nothing left behind.
        machine.v2 = Some((parent.clone(), vec!["pids".into()]));
        machine.uid = 0;
        machine.pid_max_per_pidns = false;
        let strict = Bound {
            value: 10,
            best_effort: false,
        };
        let chosen = [(Kind::Processes, strict, Mechanism::CgroupV2)];
        let err = Enforced::prepare(&chosen, "p", &name, &machine).unwrap_err();
        assert!(
            err.starts_with(&format!(
                "profile 'p' sets limits.processes = 10, and making its cgroup failed: {}: ",
                parent.display()
            )),
            "{err}"
        );
        assert!(!dir.exists());
        // Best effort, the sandbox goes without it (and without a cgroup).
        let lenient = Bound {
            best_effort: true,
            ..strict
        };
        let chosen = [(Kind::Processes, lenient, Mechanism::CgroupV2)];
        let e = Enforced::prepare(&chosen, "p", &name, &machine).unwrap();
        assert_eq!(e.chosen[0].2, Mechanism::None);
        assert!(e.dirs.is_empty() && !dir.exists());
    }
}
