//! `wardcell-shim --git-watch DIR [--empty]`: the run's repository watched where a bug cannot
//! change what the broker does. The broker starts this mode from the shim it holds open,
//! before any sandbox of the run runs code, when a sandbox may write `DIR`. It confines
//! itself before it reads a byte there; then `wardcell_git::watch` takes the snapshot
//! (its first frame says so) and answers every byte the broker writes with one typed
//! frame (`protocol::GitLook`), until its stdin ends.
//!
//! Confined on Linux: no new privileges, no capability, at most [`MEMORY`] of address
//! space, and a seccomp allow list of what reading files and directories, answering on
//! stdout, memory and exiting need; `fcntl` only for close-on-exec; a file is opened only
//! to read (any flag that writes, creates or truncates kills it, as any other call does:
//! no network, no program, no signal, x32 and other architectures included). On macOS,
//! a Seatbelt profile that allows reading files only. The broker reads each answer with
//! a deadline and treats anything else (a crash, a kill, garbage, a broken bound) as a
//! repository that could not be checked.

/// The address space the watcher may use: the snapshot (at most 20,000 hooks, and the
/// keys of each configuration), one file's entries at a time.
#[cfg(target_os = "linux")]
const MEMORY: u64 = 512 << 20;

pub fn main() -> ! {
    // Not `args()`: a directory's name need not be UTF-8.
    let (dir, empty) = (std::env::args_os().nth(2), std::env::args_os().nth(3));
    let empty = empty.is_some_and(|e| e == "--empty");
    // Told from the sandboxes' shims where processes are listed (`ps`, the tests).
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_name(c"wardcell-git");
    let Some(dir) = dir else {
        wardcell_common::eprintln_line!("usage: wardcell-shim --git-watch DIR [--empty]");
        std::process::exit(2)
    };
    if let Err(e) = confine() {
        wardcell_common::eprintln_line!("error: wardcell-shim --git-watch: {e}");
        std::process::exit(3);
    }
    let served = wardcell_git::watch::serve(
        std::path::Path::new(&dir),
        empty,
        std::io::stdin().lock(),
        std::io::stdout().lock(),
    );
    std::process::exit(if served.is_ok() { 0 } else { 2 })
}

/// What the watcher may still do, each call with why.
#[cfg(target_os = "linux")]
const ALLOWED: &[(i64, &str)] = &[
    (libc::SYS_read, "stdin, and the files it reads"),
    (
        libc::SYS_write,
        "its answers on stdout, a panic's line on stderr",
    ),
    (libc::SYS_close, "the files it read"),
    (libc::SYS_lseek, "reading"),
    (libc::SYS_fstat, "what a file it opened is"),
    (libc::SYS_newfstatat, "what a path is (lstat)"),
    (libc::SYS_statx, "what a path is (lstat)"),
    (libc::SYS_readlinkat, "where a link leads"),
    (libc::SYS_getdents64, "a directory's entries"),
    (libc::SYS_getcwd, "realpath"),
    (libc::SYS_brk, "memory"),
    (libc::SYS_mmap, "memory"),
    (libc::SYS_munmap, "memory"),
    (libc::SYS_mremap, "memory"),
    (libc::SYS_mprotect, "memory"),
    (libc::SYS_madvise, "memory"),
    (libc::SYS_rt_sigreturn, "returning from a signal"),
    (libc::SYS_rt_sigprocmask, "a panic's abort"),
    (libc::SYS_sigaltstack, "the runtime's stack overflow guard"),
    (libc::SYS_futex, "the standard library's locks"),
    (libc::SYS_exit, "exiting"),
    (libc::SYS_exit_group, "exiting"),
];

/// The older calls the C library may use for the same, where the architecture has them.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
const ALLOWED_OLD: &[(i64, &str)] = &[
    (libc::SYS_stat, "what a path is"),
    (libc::SYS_lstat, "what a path is"),
    (libc::SYS_readlink, "where a link leads"),
];
#[cfg(all(target_os = "linux", not(target_arch = "x86_64")))]
const ALLOWED_OLD: &[(i64, &str)] = &[];

/// The calls that open a file, and which of their arguments holds the flags: allowed
/// only without [`WRITING`] (musl's `open` is the old call where the architecture has it).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
const OPENS: &[(i64, u8)] = &[(libc::SYS_openat, 2), (libc::SYS_open, 1)];
#[cfg(all(target_os = "linux", not(target_arch = "x86_64")))]
const OPENS: &[(i64, u8)] = &[(libc::SYS_openat, 2)];

/// The open flags that write, create or truncate: with any of them, an open kills.
/// (`O_TMPFILE` is its own bit with `O_DIRECTORY`'s, which reading a directory uses.)
#[cfg(target_os = "linux")]
const WRITING: u64 = (libc::O_WRONLY
    | libc::O_RDWR
    | libc::O_CREAT
    | libc::O_TRUNC
    | libc::O_APPEND
    | (libc::O_TMPFILE & !libc::O_DIRECTORY)) as u64;

#[cfg(target_os = "linux")]
fn confine() -> Result<(), String> {
    use seccompiler::{
        SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };
    let limit = nix::sys::resource::Resource::RLIMIT_AS;
    nix::sys::resource::setrlimit(limit, MEMORY, MEMORY).map_err(|e| format!("RLIMIT_AS: {e}"))?;
    nix::sys::prctl::set_no_new_privs().map_err(|e| format!("no_new_privs: {e}"))?;
    // Root's watcher reads as its files' modes let it, no more (no CAP_DAC_READ_SEARCH).
    crate::caps::drop_held()?;
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| e.to_string())?;
    let mut rules: std::collections::BTreeMap<i64, Vec<SeccompRule>> = ALLOWED
        .iter()
        .chain(ALLOWED_OLD)
        .map(|&(nr, _)| (nr, Vec::new()))
        .collect();
    // fcntl only to set or read close-on-exec (musl's opendir sets it again): never a
    // lease, an owner for signals or a lock.
    let fd_flags = [libc::F_GETFD, libc::F_SETFD].map(|cmd| {
        let is = SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, cmd as u64);
        is.and_then(|c| SeccompRule::new(vec![c]))
    });
    let fd_flags = fd_flags.into_iter().collect::<Result<Vec<_>, _>>();
    rules.insert(libc::SYS_fcntl, fd_flags.map_err(|e| e.to_string())?);
    for &(nr, arg) in OPENS {
        let (len, op) = (SeccompCmpArgLen::Dword, SeccompCmpOp::MaskedEq(WRITING));
        let reads = SeccompCondition::new(arg, len, op, 0).map_err(|e| e.to_string())?;
        rules.insert(
            nr,
            vec![SeccompRule::new(vec![reads]).map_err(|e| e.to_string())?],
        );
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::KillProcess,
        SeccompAction::Allow,
        arch,
    )
    .map_err(|e| e.to_string())?;
    let program: seccompiler::BpfProgram = filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())?;
    seccompiler::apply_filter(&program).map_err(|e| format!("seccomp: {e}"))
}

#[cfg(target_os = "macos")]
fn confine() -> Result<(), String> {
    crate::macos::read_only()
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #[test]
    fn the_allow_list_names_each_call_once_and_open_is_not_on_it() {
        let mut nrs: Vec<i64> = super::ALLOWED
            .iter()
            .chain(super::ALLOWED_OLD)
            .map(|&(nr, _)| nr)
            .collect();
        let all = nrs.len();
        nrs.sort();
        nrs.dedup();
        assert_eq!(nrs.len(), all);
        // The opens and fcntl are allowed with an argument checked, never on the list.
        assert!(super::OPENS.iter().all(|(nr, _)| !nrs.contains(nr)));
        assert!(!nrs.contains(&libc::SYS_fcntl));
    }

    /// Run again in a process of its own (this test, alone): confined, it reads a
    /// directory and a file, then opens a file to write it, which kills it.
    #[test]
    fn confined_it_reads_and_an_open_to_write_kills_it() {
        use std::os::unix::process::ExitStatusExt;
        const CHILD: &str = "WARDCELL_TEST_GIT_WATCH_CONFINED";
        if let Some(target) = std::env::var_os(CHILD) {
            super::confine().unwrap();
            assert!(std::fs::read_dir("/").is_ok_and(|mut d| d.next().is_some()));
            assert!(std::fs::read("/proc/self/status").is_ok());
            let _ = std::fs::write(target, "written");
            std::process::exit(0);
        }
        let target = std::env::temp_dir().join(format!("wc-git-watch-{}", std::process::id()));
        let name = "gitcheck::tests::confined_it_reads_and_an_open_to_write_kills_it";
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", name, "--test-threads=1", "--nocapture"])
            .env(CHILD, &target)
            .status()
            .unwrap();
        assert_eq!(status.signal(), Some(libc::SIGSYS), "{status:?}");
        assert!(!target.exists());
    }
}
