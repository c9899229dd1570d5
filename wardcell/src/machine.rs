//! What this machine offers for `limits`, looked at by `wardcell run` when the run starts
//! (the plan carries it to the broker, which reads no mount table), by `doctor` and by
//! `policy show`; and what runs whose brokers are gone left behind, swept away by the
//! plan writer before it hands its plan over.

use std::fs;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use wardcell_common::limits::{self, Bound, Kind, Limits, Machine, Mechanism};
use wardcell_common::plan::Plan;
use wardcell_config::sizes::set_ones;

/// Look at this machine. Reads the kernel's version always; the cgroup hierarchies only
/// when `cgroups` (a limit that may need one is set).
pub fn probe(cgroups: bool) -> Machine {
    let uid = nix::unistd::geteuid().as_raw();
    // One system call (every run with the built-in bound asks).
    let release = nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut m = Machine {
        uid,
        nproc_per_userns: at_least(&release, (5, 14)),
        pid_max_per_pidns: at_least(&release, (6, 14)),
        ..Machine::default()
    };
    if cgroups {
        let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let own = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        m.v2 = v2_parent(&mountinfo, &own, uid);
        if uid == 0 {
            m.v1 = v1_dirs(&mountinfo, &own);
        }
    }
    m
}

/// The machine as the plan's sandboxes need it: the cgroup hierarchies are read only
/// when a limit of the start profile or of a zone may need a cgroup (`RLIMIT_NPROC` and
/// `pid_max` cost nothing), as most runs' built-in bound does not.
pub fn for_plan(plan: &Plan) -> Machine {
    let quick = probe(false);
    let free = [Ok(Mechanism::Rlimit), Ok(Mechanism::PidMax)];
    let needs = |l: &Limits| {
        set_ones(l).any(|(k, b)| k != Kind::Time && !free.contains(&mechanism(&quick, k, b.value)))
    };
    let start = plan.start_profile().map(|(_, p)| &p.limits);
    let zones = plan.zones.iter().map(|z| &z.profile.limits);
    match start.into_iter().chain(zones).any(needs) {
        true => probe(true),
        false => quick,
    }
}

/// Remove the directories of runs whose brokers are gone, and then their cgroups. A live
/// broker holds its run directory's lock from before the directory has its name
/// (`wardcell_host::rundir::make_run_dir`), so no live run's is ever taken. Only in a
/// runtime directory that is the caller's own and private, opened without following a
/// link at its name and worked in through that descriptor: the broker refuses any other
/// after this, and one that someone else made, or a link to someone's files, must never
/// be swept in (a review found both before this check).
pub fn sweep_stale_runs(runtime: &Path) {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let flags = libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    let Ok(dir) = fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(runtime)
    else {
        return;
    };
    let ours = dir
        .metadata()
        .is_ok_and(|m| m.uid() == nix::unistd::getuid().as_raw() && m.mode() & 0o077 == 0);
    if !ours {
        return;
    }
    // Linux: the directory opened, whatever its name leads to now.
    let base = match cfg!(target_os = "linux") {
        true => PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd())),
        false => runtime.to_path_buf(),
    };
    let Ok(entries) = fs::read_dir(&base) else {
        return;
    };
    let mut machine = None;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let is_run = name.len() == 25 && name.as_bytes()[16] == b'-';
        if !is_run || !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let path = base.join(&name);
        let Ok(f) = fs::File::open(&path) else {
            continue;
        };
        let Ok(lock) = Flock::lock(f, FlockArg::LockExclusiveNonblock) else {
            continue;
        };
        // Its cgroups only once its directory is gone: a run whose directory stays is
        // not known to be over.
        if fs::remove_dir_all(&path).is_ok() {
            sweep_cgroups(machine.get_or_insert_with(|| probe(true)), &name);
        }
        drop(lock);
    }
}

/// Remove what a run whose broker is gone (killed with SIGKILL: it could not clean up)
/// left of its cgroups: each `wardcell-<run>-s<N>`, empty since its sandbox died with the
/// broker.
fn sweep_cgroups(machine: &Machine, run_id: &str) {
    let prefix = format!("wardcell-{run_id}-");
    let v2 = machine.v2.iter().map(|(d, _)| (Mechanism::CgroupV2, d));
    let v1 = machine.v1.iter().map(|(_, d)| (Mechanism::CgroupV1, d));
    for (mechanism, parent) in v2.chain(v1) {
        for e in fs::read_dir(parent).into_iter().flatten().flatten() {
            if e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(&prefix))
            {
                limits::remove(mechanism, &e.path());
            }
        }
    }
}

/// `release` (`6.8.0-45-generic`) is at least `want`.
fn at_least(release: &str, want: (u32, u32)) -> bool {
    let mut parts = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let major = parts.next().unwrap_or(0);
    let minor = parts.next().unwrap_or(0);
    (major, minor) >= want
}

/// Mount points of `fstype` in mountinfo, each with its super options.
fn mounts<'a>(
    mountinfo: &'a str,
    fstype: &'a str,
) -> impl Iterator<Item = (PathBuf, &'a str, bool)> + 'a {
    mountinfo.lines().filter_map(move |line| {
        let (left, right) = line.split_once(" - ")?;
        let mut r = right.split(' ');
        if r.next()? != fstype {
            return None;
        }
        let superopts = r.nth(1).unwrap_or("");
        let mut l = left.split(' ');
        let root = l.nth(3)?;
        let point = l.next()?;
        let rw = l.next()?.split(',').any(|o| o == "rw");
        // Only a mount of the hierarchy's root maps paths from /proc/self/cgroup.
        (root == "/").then(|| (PathBuf::from(unescape(point)), superopts, rw))
    })
}

/// mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let code = rest
            .get(i + 1..i + 4)
            .and_then(|o| u8::from_str_radix(o, 8).ok());
        match code {
            Some(c) => {
                out.push(char::from(c));
                rest = &rest[i + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[i + 1..];
            }
        }
    }
    out + rest
}

/// The caller's cgroup in the hierarchy whose /proc/self/cgroup line `matches`.
fn own_path(own: &str, matches: impl Fn(&str, &str) -> bool) -> Option<&str> {
    own.lines().find_map(|line| {
        let mut f = line.splitn(3, ':');
        let (id, ctrls, path) = (f.next()?, f.next()?, f.next()?);
        matches(id, ctrls).then_some(path)
    })
}

/// Where a sandbox's cgroup v2 goes: beside the caller's own cgroup (a cgroup with
/// processes cannot give its children controllers), or in it at the hierarchy's root.
/// Only where the caller may write there; with the controllers offered there.
fn v2_parent(mountinfo: &str, own: &str, uid: u32) -> Option<(PathBuf, Vec<String>)> {
    let (mount, _, rw) = mounts(mountinfo, "cgroup2").next()?;
    let path = own_path(own, |id, _| id == "0")?;
    let rel = Path::new(path.trim_start_matches('/'));
    let dir = match rel.parent() {
        Some(parent) => mount.join(parent),
        None => mount,
    };
    let meta = fs::metadata(&dir).ok()?;
    if !rw || !(uid == 0 || std::os::unix::fs::MetadataExt::uid(&meta) == uid) {
        return None;
    }
    let controllers = fs::read_to_string(dir.join("cgroup.controllers")).ok()?;
    Some((
        dir,
        controllers.split_whitespace().map(str::to_string).collect(),
    ))
}

/// cgroup v1: for each of the controllers limits use, the caller's own cgroup in the
/// hierarchy that has it, where it is mounted read-write.
fn v1_dirs(mountinfo: &str, own: &str) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for ctrl in ["pids", "memory", "cpu"] {
        let has = |opts: &str| opts.split(',').any(|o| o == ctrl);
        let Some((mount, _, _)) = mounts(mountinfo, "cgroup").find(|(_, o, rw)| *rw && has(o))
        else {
            continue;
        };
        if let Some(path) = own_path(own, |id, ctrls| id != "0" && has(ctrls)) {
            out.push((ctrl.to_string(), mount.join(path.trim_start_matches('/'))));
        }
    }
    out
}

/// The least `processes` a PID namespace's `pid_max` holds: the kernel's least `pid_max`
/// is 301 (once PIDs wrap it reuses them from 300 up, so a fork may then fail up to 299
/// processes below the bound; never above it).
pub const MIN_PID_MAX_BOUND: u64 = 300;

/// How `kind` bounded at `value` is enforced here, or why it cannot be. Processes:
/// `RLIMIT_NPROC` when it binds (not root; Linux 5.14 and later), else the PID
/// namespace's `pid_max` for a bound it can hold (`MIN_PID_MAX_BOUND` and up), else
/// a cgroup. Both cost nothing at start-up; a cgroup costs moving the shim into it (a
/// few ms: the kernel waits for an RCU grace period).
pub fn mechanism(machine: &Machine, kind: Kind, value: u64) -> Result<Mechanism, String> {
    let Some(ctrl) = limits::controller(kind) else {
        return Ok(Mechanism::Timer);
    };
    if kind == Kind::Processes && machine.uid != 0 && machine.nproc_per_userns {
        return Ok(Mechanism::Rlimit);
    }
    if kind == Kind::Processes && machine.pid_max_per_pidns && value >= MIN_PID_MAX_BOUND {
        return Ok(Mechanism::PidMax);
    }
    if machine
        .v2
        .as_ref()
        .is_some_and(|(_, c)| c.iter().any(|c| c == ctrl))
    {
        return Ok(Mechanism::CgroupV2);
    }
    if machine.v1.iter().any(|(c, _)| c == ctrl) {
        return Ok(Mechanism::CgroupV1);
    }
    let v2 = match &machine.v2 {
        Some((dir, _)) => format!(
            "the cgroup v2 directory {} does not offer the {ctrl} controller",
            dir.display()
        ),
        None if machine.uid == 0 => "there is no writable cgroup v2 hierarchy".to_string(),
        None => format!(
            "no cgroup v2 subtree is delegated to uid {}, and cgroup v1 is root's",
            machine.uid
        ),
    };
    let v1 = if machine.uid == 0 {
        format!(", nor is the cgroup v1 {ctrl} controller mounted")
    } else {
        String::new()
    };
    Err(match kind {
        Kind::Processes if machine.uid == 0 => {
            let pid_max = match machine.pid_max_per_pidns {
                true => ", a PID namespace's pid_max holds no bound below 300",
                false => "",
            };
            format!("root is exempt from RLIMIT_NPROC{pid_max}, and {v2}{v1}")
        }
        Kind::Processes => {
            format!("before Linux 5.14 RLIMIT_NPROC counts all of the user's processes, and {v2}")
        }
        _ => format!("{v2}{v1}"),
    })
}

/// How each limit of `limits` is enforced here; a limit that cannot be, and is not best
/// effort, refuses the run with one line naming it and what to do.
pub fn choose(
    limits: &Limits,
    machine: &Machine,
    profile: &str,
) -> Result<Vec<(Kind, Bound, Mechanism)>, String> {
    let mut out = Vec::new();
    for (kind, bound) in set_ones(limits) {
        let mechanism = match mechanism(machine, kind, bound.value) {
            Ok(m) => m,
            Err(_) if bound.best_effort => Mechanism::None,
            Err(why) => {
                let instead = match machine.uid {
                    0 => "",
                    _ => "run as root or in a delegated cgroup (`systemd-run --user --scope -p Delegate=yes wardcell run ...`), or ",
                };
                return Err(format!(
                    "profile '{profile}' sets limits.{} = {}, which this machine cannot enforce: {why}; {instead}set best_effort = true in the profile's limits to run without it",
                    kind.name(),
                    kind.show(bound.value)
                ));
            }
        };
        out.push((kind, bound, mechanism));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_and_proc_cgroup_are_read_as_the_kernel_writes_them() {
        let mi = "\
30 25 0:26 / /sys/fs/cgroup/pids rw,nosuid - cgroup cgroup rw,pids
31 25 0:27 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
32 25 0:28 / /sys/fs/cgroup/cpu,cpuacct ro,nosuid - cgroup cgroup rw,cpu,cpuacct
33 25 0:29 / /sys/fs/cgroup/unified\\040x rw - cgroup2 cgroup2 rw
";
        let own = "8:pids:/a\n4:memory:/b/c\n1:cpu,cpuacct:/\n0::/\n";
        let dirs = v1_dirs(mi, own);
        // cpu's hierarchy is read-only: left out.
        assert_eq!(
            dirs,
            [
                ("pids".to_string(), PathBuf::from("/sys/fs/cgroup/pids/a")),
                (
                    "memory".to_string(),
                    PathBuf::from("/sys/fs/cgroup/memory/b/c")
                )
            ]
        );
        let (point, _, rw) = mounts(mi, "cgroup2").next().unwrap();
        assert_eq!(point, PathBuf::from("/sys/fs/cgroup/unified x"));
        assert!(rw);
        assert!(at_least("5.14.0-rc1", (5, 14)) && at_least("6.1.0", (5, 14)));
        assert!(!at_least("5.13.19", (5, 14)) && !at_least("", (5, 14)));
    }

    fn machine(uid: u32, v2: &[&str], v1: &[&str]) -> Machine {
        Machine {
            uid,
            nproc_per_userns: true,
            pid_max_per_pidns: false,
            v2: (!v2.is_empty()).then(|| {
                (
                    PathBuf::from("/sys/fs/cgroup/user.slice"),
                    v2.iter().map(|s| s.to_string()).collect(),
                )
            }),
            v1: v1
                .iter()
                .map(|c| (c.to_string(), PathBuf::from(format!("/sys/fs/cgroup/{c}"))))
                .collect(),
        }
    }

    fn bound(value: u64, best_effort: bool) -> Option<Bound> {
        Some(Bound { value, best_effort })
    }

    #[test]
    fn each_limit_gets_the_mechanism_that_really_bounds_it() {
        let all = Limits {
            processes: bound(100, false),
            memory: bound(1 << 30, false),
            cpu: bound(50, false),
            time: bound(60, false),
        };
        let mechs = |m: &Machine| -> Vec<Mechanism> {
            choose(&all, m, "p").unwrap().iter().map(|c| c.2).collect()
        };
        use Mechanism::*;
        // A user with a delegated v2 subtree: RLIMIT_NPROC for processes (no cgroup
        // needed for the default), the cgroup for the rest.
        let m = machine(1000, &["cpu", "memory", "pids"], &[]);
        assert_eq!(mechs(&m), [Rlimit, CgroupV2, CgroupV2, Timer]);
        // Root is exempt from RLIMIT_NPROC: a cgroup, v2 first, else v1.
        assert_eq!(
            mechs(&machine(0, &["cpu", "memory", "pids"], &["pids"])),
            [CgroupV2; 3]
                .iter()
                .copied()
                .chain([Timer])
                .collect::<Vec<_>>()
        );
        assert_eq!(
            mechs(&machine(0, &[], &["pids", "memory", "cpu"])),
            [CgroupV1, CgroupV1, CgroupV1, Timer]
        );
        // Before 5.14 RLIMIT_NPROC counts the user's processes everywhere.
        let mut old = machine(1000, &["pids"], &[]);
        old.nproc_per_userns = false;
        assert_eq!(mechanism(&old, Kind::Processes, 100), Ok(CgroupV2));
        // Linux 6.14 and later: root's bound of 300 or more is its PID namespace's
        // pid_max, free at start-up; a smaller one still needs the cgroup.
        let mut new = machine(0, &[], &["pids"]);
        new.pid_max_per_pidns = true;
        assert_eq!(mechanism(&new, Kind::Processes, 4096), Ok(PidMax));
        assert_eq!(mechanism(&new, Kind::Processes, 299), Ok(CgroupV1));
        old.pid_max_per_pidns = true;
        assert_eq!(mechanism(&old, Kind::Processes, 300), Ok(PidMax));
    }

    #[test]
    fn a_limit_that_cannot_be_enforced_refuses_unless_best_effort() {
        let m = machine(61234, &[], &[]);
        let mut l = Limits {
            memory: bound(2 << 30, false),
            ..Limits::default()
        };
        let e = choose(&l, &m, "dev").unwrap_err();
        assert!(
            e.starts_with("profile 'dev' sets limits.memory = 2G, which this machine cannot enforce: no cgroup v2 subtree is delegated to uid 61234"),
            "{e}"
        );
        assert!(e.contains("best_effort = true"), "{e}");
        l.memory = bound(2 << 30, true);
        assert_eq!(
            choose(&l, &m, "dev").unwrap(),
            [(Kind::Memory, l.memory.unwrap(), Mechanism::None)]
        );
        // The sandbox runs without it, and says so (`sandbox.limit_unenforced`).
        let enforced =
            limits::Enforced::prepare(&choose(&l, &m, "dev").unwrap(), "dev", "wardcell-test", &m)
                .unwrap();
        let unenforced = enforced.unenforced();
        assert_eq!(unenforced.len(), 1);
        assert_eq!(
            (unenforced[0].0, unenforced[0].1.as_str()),
            ("memory", "2G")
        );
        assert_eq!(
            unenforced[0].2,
            "warning: limits.memory = 2G of profile 'dev' is best effort, and nothing on this machine enforces it: the sandbox runs without it (`wardcell doctor` says what would)"
        );
        // One that is enforced is not listed.
        l.time = bound(60, true);
        let enforced =
            limits::Enforced::prepare(&choose(&l, &m, "dev").unwrap(), "dev", "wardcell-test", &m)
                .unwrap();
        assert_eq!(enforced.unenforced().len(), 1);
        // Root without a pids controller anywhere: RLIMIT_NPROC would not bind it.
        let l = Limits {
            processes: bound(10, false),
            ..Limits::default()
        };
        let e = choose(&l, &machine(0, &["memory"], &["memory"]), "p").unwrap_err();
        assert!(e.contains("root is exempt from RLIMIT_NPROC"), "{e}");
        assert!(e.contains("does not offer the pids controller"), "{e}");
    }
}
