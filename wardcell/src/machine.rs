//! What this machine offers for `limits`, looked at by `wardcell run` when the run starts
//! (the plan carries it to the broker, which reads no mount table), by `doctor` and by
//! `policy show`; and what runs whose brokers are gone left behind, swept away by the
//! plan writer before it hands its plan over.

use std::fs;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use wardcell_common::limits::{self, Kind, Limits, Machine, Mechanism};
use wardcell_common::plan::Plan;

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
        l.set_ones()
            .any(|(k, b)| k != Kind::Time && !free.contains(&quick.mechanism(k, b.value)))
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
}
