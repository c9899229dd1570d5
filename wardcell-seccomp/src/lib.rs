//! The mechanism behind wardcell's seccomp filters, shared by the shim (for sandboxed
//! commands) and the proxy (for itself). What each refuses stays in its own crate, as a
//! reviewed table with a one-line reason per entry; this crate only turns tables into
//! BPF and installs it.
//!
//! A policy is a list of [`Part`]s, one per errno, and becomes one filter ([`compile`]).
//! Every filter starts with [`X32_GUARD`]: x32-ABI syscalls share AUDIT_ARCH_X86_64 with
//! numbers that have bit 30 set, and would otherwise slip past rules keyed on x86_64
//! numbers. Every filter also refuses, with ENOSYS, each syscall number above
//! [`NEWEST_REVIEWED`]: a syscall the tables were not reviewed against is not allowed.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
#[cfg(test)]
use std::collections::BTreeSet;

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};

/// A table of values, each with the reason it is listed.
pub type Reasoned<T> = [(T, &'static str)];

/// Rules keyed by syscall number: a syscall with no rules matches whatever its arguments.
pub type Rules = BTreeMap<i64, Vec<SeccompRule>>;

/// Syscalls no wardcell process but the broker ever needs (a sandboxed command, the
/// proxy): refused outright, each with why.
pub const ALWAYS_DENIED: &Reasoned<i64> = &[
    (libc::SYS_setns, "joining another namespace"),
    (
        libc::SYS_mount,
        "changing the mount table could unmask hidden paths",
    ),
    (
        libc::SYS_umount2,
        "unmounting a mask would reveal what it hides",
    ),
    (libc::SYS_pivot_root, "changing the root"),
    (libc::SYS_chroot, "changing the root"),
    (libc::SYS_open_tree, "new mount API: cloning mounts"),
    (libc::SYS_move_mount, "new mount API: attaching mounts"),
    (libc::SYS_fsopen, "new mount API: creating filesystems"),
    (libc::SYS_fsconfig, "new mount API"),
    (libc::SYS_fsmount, "new mount API"),
    (libc::SYS_fspick, "new mount API: reconfiguring mounts"),
    (
        libc::SYS_mount_setattr,
        "changing mount flags such as read-only",
    ),
    (libc::SYS_ptrace, "inspecting or steering other processes"),
    (
        libc::SYS_process_vm_readv,
        "reading another process's memory",
    ),
    (
        libc::SYS_process_vm_writev,
        "writing another process's memory",
    ),
    (
        libc::SYS_io_uring_setup,
        "io_uring bypasses syscall filtering",
    ),
    (
        libc::SYS_io_uring_enter,
        "io_uring bypasses syscall filtering",
    ),
    (
        libc::SYS_io_uring_register,
        "io_uring bypasses syscall filtering",
    ),
    (
        libc::SYS_bpf,
        "loading kernel programs; a large attack surface",
    ),
    (
        libc::SYS_perf_event_open,
        "kernel profiling; a large attack surface and side channels",
    ),
    (
        libc::SYS_keyctl,
        "the kernel keyring is shared beyond the sandbox",
    ),
    (
        libc::SYS_add_key,
        "the kernel keyring is shared beyond the sandbox",
    ),
    (
        libc::SYS_request_key,
        "the kernel keyring is shared beyond the sandbox",
    ),
    (
        libc::SYS_userfaultfd,
        "a tool for widening kernel race windows",
    ),
    (libc::SYS_kexec_load, "replacing the kernel"),
    (libc::SYS_kexec_file_load, "replacing the kernel"),
    (libc::SYS_init_module, "loading kernel modules"),
    (libc::SYS_finit_module, "loading kernel modules"),
    (libc::SYS_delete_module, "unloading kernel modules"),
    (
        libc::SYS_open_by_handle_at,
        "opening files by handle bypasses path checks",
    ),
    (
        libc::SYS_acct,
        "process accounting writes outside the sandbox",
    ),
    (libc::SYS_swapon, "system administration"),
    (libc::SYS_swapoff, "system administration"),
    (libc::SYS_reboot, "system administration"),
    (libc::SYS_syslog, "reading the kernel log"),
];

/// The newest syscall the tables were reviewed against: `removexattrat`, 466 (Linux
/// 6.13), the same number on x86_64, aarch64 and riscv64 (their tables agree from 424
/// on). Every number above it is refused with ENOSYS, what a kernel without it answers,
/// so programs fall back as they would there. Newer ones are not harmless by default:
/// `open_tree_attr` (467, Linux 6.15) clones mounts as `open_tree` does. Raise this only
/// after reviewing each new syscall against [`ALWAYS_DENIED`] and the shim's and the
/// proxy's own tables.
pub const NEWEST_REVIEWED: u32 = 466;

/// Namespace flags that neither clone(2) nor unshare(2) may carry.
pub const NAMESPACE_FLAGS: &Reasoned<u64> = &[
    (
        libc::CLONE_NEWUSER as u64,
        "new user namespace: regains capabilities",
    ),
    (libc::CLONE_NEWNS as u64, "new mount namespace"),
    (libc::CLONE_NEWPID as u64, "new PID namespace"),
    (libc::CLONE_NEWNET as u64, "new network namespace"),
    (libc::CLONE_NEWUTS as u64, "new UTS namespace"),
    (libc::CLONE_NEWIPC as u64, "new IPC namespace"),
    (libc::CLONE_NEWCGROUP as u64, "new cgroup namespace"),
    (0x80, "new time namespace (CLONE_NEWTIME)"),
];

const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// `if (nr & X32_SYSCALL_BIT) kill_process;`, the first instructions of every filter.
pub const X32_GUARD: [sock_filter; 3] = [
    // BPF_LD | BPF_W | BPF_ABS: seccomp_data.nr
    sock_filter {
        code: 0x20,
        jt: 0,
        jf: 0,
        k: 0,
    },
    // BPF_JMP | BPF_JSET | BPF_K
    sock_filter {
        code: 0x45,
        jt: 0,
        jf: 1,
        k: X32_SYSCALL_BIT,
    },
    // BPF_RET | BPF_K: SECCOMP_RET_KILL_PROCESS
    sock_filter {
        code: 0x06,
        jt: 0,
        jf: 0,
        k: 0x8000_0000,
    },
];

fn arch() -> TargetArch {
    #[cfg(target_arch = "x86_64")]
    {
        TargetArch::x86_64
    }
    #[cfg(target_arch = "aarch64")]
    {
        TargetArch::aarch64
    }
    #[cfg(target_arch = "riscv64")]
    {
        TargetArch::riscv64
    }
}

fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> SeccompCondition {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).expect("a valid condition")
}

fn rule(conditions: Vec<SeccompCondition>) -> SeccompRule {
    SeccompRule::new(conditions).expect("a rule with conditions")
}

/// Every syscall of `table`, whatever its arguments.
pub fn unconditional(table: &Reasoned<i64>) -> Rules {
    table.iter().map(|&(nr, _)| (nr, vec![])).collect()
}

/// Matches when argument `arg` has any of `flags` set (one rule per flag, compared on the
/// low 32 bits, where every namespace flag lives).
pub fn any_flag(arg: u8, flags: &Reasoned<u64>) -> Vec<SeccompRule> {
    flags
        .iter()
        .map(|&(f, _)| rule(vec![cond(arg, SeccompCmpOp::MaskedEq(f), f)]))
        .collect()
}

/// Matches when argument `arg` equals one of `values` (low 32 bits).
pub fn equals_any(arg: u8, values: &Reasoned<u64>) -> Vec<SeccompRule> {
    values
        .iter()
        .map(|&(v, _)| rule(vec![cond(arg, SeccompCmpOp::Eq, v)]))
        .collect()
}

/// Matches when argument `arg` equals none of `values`.
pub fn none_of(arg: u8, values: &Reasoned<u64>) -> Vec<SeccompRule> {
    vec![rule(
        values
            .iter()
            .map(|&(v, _)| cond(arg, SeccompCmpOp::Ne, v))
            .collect(),
    )]
}

/// One part of a policy: the syscalls `rules` name, refused with `errno` when a rule
/// matches (a syscall with no rules always matches).
pub struct Part {
    pub rules: Rules,
    pub errno: i32,
}

/// clone3 keeps its flags behind a pointer no filter can read: ENOSYS makes libc fall
/// back to clone(2), whose flags a filter does check.
pub fn clone3_enosys() -> Part {
    Part {
        rules: BTreeMap::from([(libc::SYS_clone3, vec![])]),
        errno: libc::ENOSYS,
    }
}

/// One filter for a whole policy; everything no part names is allowed.
///
/// seccompiler gives one action per filter, but every filter installed costs the kernel
/// a fixed price (about 55 µs each where we measure, mostly preparing and compiling it),
/// so the parts share one program:
/// 1. [`X32_GUARD`];
/// 2. another architecture: kill the process, as seccompiler's own programs do;
/// 3. a number above [`NEWEST_REVIEWED`]: ENOSYS;
/// 4. a binary search on the syscall number over every syscall a part names (two
///    instructions per syscall, a handful of comparisons per lookup);
/// 5. where the search ends: allowed (no part names it), refused with the part's errno
///    (the part names it without conditions), or on to the part's own program, which
///    seccompiler builds from the part's conditional rules alone.
///
/// A syscall may belong to one part only.
pub fn compile(parts: &[Part]) -> Result<BpfProgram, String> {
    // Where each named syscall goes.
    let mut routes: BTreeMap<u32, To> = BTreeMap::new();
    for (i, part) in parts.iter().enumerate() {
        for (&nr, rules) in &part.rules {
            let to = if rules.is_empty() {
                To::Errno(i)
            } else {
                To::Program(i)
            };
            if routes.insert(nr as u32, to).is_some() {
                return Err(format!("syscall {nr} is in two parts of the policy"));
            }
            if nr as u32 > NEWEST_REVIEWED {
                return Err(format!(
                    "syscall {nr} is newer than the reviewed table ({NEWEST_REVIEWED})"
                ));
            }
        }
    }
    let nrs: Vec<u32> = routes.keys().copied().collect();

    // Instruction indexes: guard, arch check, the newest number, search, then the
    // dispatch table.
    const ARCH_CHECK: usize = X32_GUARD.len();
    const NEWEST: usize = ARCH_CHECK + 3;
    const SEARCH: usize = NEWEST + 1;
    let allow = SEARCH + 2 * nrs.len();
    let kill = allow + 1;
    let unknown = kill + 1;
    let errno_at = |i: usize| unknown + 1 + i;
    let programs: Vec<Option<BpfProgram>> = parts
        .iter()
        .map(|p| {
            let conditional: Rules = p
                .rules
                .iter()
                .filter(|(_, r)| !r.is_empty())
                .map(|(nr, r)| (*nr, r.clone()))
                .collect();
            if conditional.is_empty() {
                Ok(None)
            } else {
                compile_linear(conditional, p.errno).map(Some)
            }
        })
        .collect::<Result<_, String>>()?;
    let jump_at = |i: usize| errno_at(parts.len()) + i;
    let resolve = |at: usize, to: To| -> Result<u8, String> {
        let target = match to {
            To::Allow => allow,
            To::Kill => kill,
            To::Unknown => unknown,
            To::Errno(i) => errno_at(i),
            To::Program(i) => jump_at(i),
            To::At(i) => i,
        };
        u8::try_from(target - (at + 1))
            .map_err(|_| format!("too many syscalls for one filter: {}", nrs.len()))
    };

    let mut out = X32_GUARD.to_vec();
    out.push(stmt(BPF_LD_W_ABS, DATA_ARCH));
    out.push(jump(
        BPF_JEQ_K,
        audit_arch(),
        0,
        resolve(ARCH_CHECK + 1, To::Kill)?,
    ));
    out.push(stmt(BPF_LD_W_ABS, DATA_NR));
    out.push(jump(
        BPF_JGT_K,
        NEWEST_REVIEWED,
        resolve(NEWEST, To::Unknown)?,
        0,
    ));
    let mut tree = Vec::with_capacity(2 * nrs.len());
    search(&nrs, &routes, SEARCH, &mut tree);
    for (i, &(code, k, jt, jf)) in tree.iter().enumerate() {
        out.push(jump(
            code,
            k,
            resolve(SEARCH + i, jt)?,
            resolve(SEARCH + i, jf)?,
        ));
    }
    out.push(stmt(BPF_RET_K, SECCOMP_RET_ALLOW));
    out.push(stmt(BPF_RET_K, SECCOMP_RET_KILL_PROCESS));
    out.push(stmt(BPF_RET_K, SECCOMP_RET_ERRNO | libc::ENOSYS as u32));
    for part in parts {
        out.push(stmt(
            BPF_RET_K,
            SECCOMP_RET_ERRNO | (part.errno as u32 & 0xffff),
        ));
    }
    // Each part's program follows the jumps; a jump goes to the first instruction of its
    // program. A part without conditional rules has no program, and the search never
    // sends anything to its slot: it holds a kill, so that it could not fall through.
    let mut start = jump_at(parts.len());
    for prog in &programs {
        match prog {
            Some(p) => {
                out.push(stmt(BPF_JA, (start - (out.len() + 1)) as u32));
                start += p.len();
            }
            None => out.push(stmt(BPF_RET_K, SECCOMP_RET_KILL_PROCESS)),
        }
    }
    for prog in programs.into_iter().flatten() {
        out.extend(prog);
    }
    if out.len() > BPF_MAXINSNS {
        return Err(format!("the filter has {} instructions", out.len()));
    }
    Ok(out)
}

/// seccompiler's program for one part: its architecture check, then one comparison per
/// syscall, `errno` on a match and allowed otherwise.
fn compile_linear(rules: Rules, errno: i32) -> Result<BpfProgram, String> {
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        arch(),
    )
    .map_err(|e| format!("building a seccomp filter: {e}"))?;
    filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| format!("building a seccomp filter: {e}"))
}

/// `seccomp_data.arch` for this architecture.
fn audit_arch() -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        62 | 0x8000_0000 | 0x4000_0000
    }
    #[cfg(target_arch = "aarch64")]
    {
        183 | 0x8000_0000 | 0x4000_0000
    }
    #[cfg(target_arch = "riscv64")]
    {
        243 | 0x8000_0000 | 0x4000_0000
    }
}

const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JA: u16 = 0x05;
const BPF_JEQ_K: u16 = 0x15;
const BPF_JGT_K: u16 = 0x25;
const BPF_RET_K: u16 = 0x06;
const BPF_MAXINSNS: usize = 4096;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
/// Offsets of `nr` and `arch` in `struct seccomp_data`.
const DATA_NR: u32 = 0;
const DATA_ARCH: u32 = 4;

/// Where a jump of the search goes.
#[derive(Clone, Copy)]
enum To {
    Allow,
    Kill,
    /// Newer than the reviewed table: ENOSYS.
    Unknown,
    /// Refused with part `i`'s errno.
    Errno(usize),
    /// On to part `i`'s program.
    Program(usize),
    At(usize),
}

/// The search over the sorted numbers `v`, starting at instruction `base`: at each node,
/// equal → the syscall's route, greater → the right half, less → the left half; an empty
/// half means no part names the syscall.
fn search(v: &[u32], routes: &BTreeMap<u32, To>, base: usize, out: &mut Vec<(u16, u32, To, To)>) {
    if v.is_empty() {
        return;
    }
    let m = v.len() / 2;
    let (left, right) = (&v[..m], &v[m + 1..]);
    let left_at = base + 2;
    let right_at = left_at + 2 * left.len();
    let half = |h: &[u32], at: usize| if h.is_empty() { To::Allow } else { To::At(at) };
    out.push((BPF_JEQ_K, v[m], routes[&v[m]], To::At(base + 1)));
    out.push((BPF_JGT_K, v[m], half(right, right_at), half(left, left_at)));
    search(left, routes, left_at, out);
    search(right, routes, right_at, out);
}

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// Install `filter` (a whole policy, from [`compile`]) on the calling thread; threads it
/// starts inherit it. no_new_privs must already be set.
pub fn install(filter: &BpfProgram) -> Result<(), String> {
    seccompiler::apply_filter(filter).map_err(|e| format!("installing the seccomp filter: {e}"))
}

/// Every entry has a reason and none is listed twice.
pub fn check_table<T: Ord + Copy + std::fmt::Debug>(table: &Reasoned<T>) -> Result<(), String> {
    let mut seen = std::collections::BTreeSet::new();
    for &(v, why) in table {
        if why.is_empty() {
            return Err(format!("{v:?} has no reason"));
        }
        if !seen.insert(v) {
            return Err(format!("{v:?} is listed twice"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox_like_policy() -> Vec<Part> {
        let mut deny = unconditional(ALWAYS_DENIED);
        deny.insert(libc::SYS_unshare, any_flag(0, NAMESPACE_FLAGS));
        deny.insert(libc::SYS_clone, any_flag(0, NAMESPACE_FLAGS));
        deny.insert(libc::SYS_ioctl, equals_any(1, IOCTLS));
        let socket = [(libc::SYS_socket, none_of(0, &[(1, "unix"), (2, "inet")]))].into();
        vec![
            Part {
                rules: deny,
                errno: libc::EPERM,
            },
            clone3_enosys(),
            Part {
                rules: socket,
                errno: libc::EAFNOSUPPORT,
            },
        ]
    }

    const IOCTLS: &Reasoned<u64> = &[(0x5412, "TIOCSTI"), (0x541C, "TIOCLINUX")];

    /// What the kernel's checker requires of a classic-BPF seccomp program that this crate
    /// could get wrong: every jump lands inside the program, and it ends with a return.
    fn check_jumps(prog: &[sock_filter]) {
        assert!(!prog.is_empty() && prog.len() <= BPF_MAXINSNS);
        assert_eq!(
            prog.last().unwrap().code,
            BPF_RET_K,
            "the program must end with ret"
        );
        for (at, i) in prog.iter().enumerate() {
            let targets: Vec<usize> = match i.code {
                0x05 => vec![at + 1 + i.k as usize],
                0x15 | 0x25 | 0x35 | 0x45 => {
                    vec![at + 1 + i.jt as usize, at + 1 + i.jf as usize]
                }
                _ => vec![],
            };
            for t in targets {
                assert!(
                    t < prog.len(),
                    "instruction {at} jumps to {t}, past the end"
                );
            }
        }
    }

    /// Policies shaped like the shim's (the last part has argument checks) and like the
    /// proxy's (the last part has none) both build into programs the kernel accepts.
    #[test]
    fn every_jump_lands_inside_the_program() {
        check_jumps(&compile(&sandbox_like_policy()).unwrap());
        let mut proxy_like = sandbox_like_policy();
        proxy_like.truncate(2);
        check_jumps(&compile(&proxy_like).unwrap());
        check_jumps(&compile(&[clone3_enosys()]).unwrap());
        check_jumps(&compile(&[]).unwrap());
    }

    #[test]
    fn building_blocks_compile() {
        let prog = compile(&sandbox_like_policy()).unwrap();
        assert_eq!(prog[..3], X32_GUARD);
        assert!(prog.len() < BPF_MAXINSNS);
        check_table(NAMESPACE_FLAGS).unwrap();
        check_table(ALWAYS_DENIED).unwrap();
        assert!(check_table(&[(1i64, "a"), (1, "b")]).is_err());
        assert!(check_table(&[(1i64, "")]).is_err());
        let twice = [
            clone3_enosys(),
            Part {
                rules: unconditional(&[(libc::SYS_clone3, "again")]),
                errno: libc::EPERM,
            },
        ];
        assert!(compile(&twice).is_err());
    }

    /// A classic-BPF interpreter for the instructions these filters use, over
    /// `struct seccomp_data` (nr, arch, instruction pointer, six arguments). Also counts
    /// the instructions it ran.
    fn run(prog: &[sock_filter], nr: u32, arch: u32, args: [u64; 6]) -> (u32, usize) {
        let mut data = [0u8; 64];
        data[0..4].copy_from_slice(&nr.to_le_bytes());
        data[4..8].copy_from_slice(&arch.to_le_bytes());
        for (i, a) in args.iter().enumerate() {
            data[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_le_bytes());
        }
        let (mut pc, mut acc, mut steps) = (0usize, 0u32, 0);
        loop {
            let i = &prog[pc];
            pc += 1;
            steps += 1;
            match i.code {
                0x20 => {
                    let k = i.k as usize;
                    acc = u32::from_le_bytes(data[k..k + 4].try_into().unwrap());
                }
                0x54 => acc &= i.k,
                0x06 => return (i.k, steps),
                0x05 => pc += i.k as usize,
                0x15 | 0x25 | 0x35 | 0x45 => {
                    let hit = match i.code {
                        0x15 => acc == i.k,
                        0x25 => acc > i.k,
                        0x35 => acc >= i.k,
                        _ => acc & i.k != 0,
                    };
                    pc += if hit { i.jt } else { i.jf } as usize;
                }
                other => panic!("instruction {other:#x} is not interpreted here"),
            }
        }
    }

    /// What the kernel returns for a stack of filters: the most severe action (the
    /// action bits compared as a signed number, so KILL_PROCESS is the most severe).
    fn stacked(progs: &[Vec<sock_filter>], nr: u32, arch: u32, args: [u64; 6]) -> u32 {
        let severity = |r: u32| (r & 0xffff_0000) as i32;
        progs
            .iter()
            .map(|p| run(p, nr, arch, args).0)
            .min_by_key(|&r| severity(r))
            .unwrap()
    }

    /// What the number check means, as its own filter: ENOSYS above the newest reviewed
    /// syscall, allowed otherwise.
    fn newest_model() -> Vec<sock_filter> {
        vec![
            stmt(BPF_LD_W_ABS, DATA_NR),
            jump(BPF_JGT_K, NEWEST_REVIEWED, 0, 1),
            stmt(BPF_RET_K, SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
            stmt(BPF_RET_K, SECCOMP_RET_ALLOW),
        ]
    }

    /// The one program decides exactly as the stack of seccompiler programs it replaces
    /// (one per part, the first behind the x32 guard) plus the number check, for every
    /// syscall number with and without the x32 bit, this and other architectures, and
    /// arguments that hit and miss each rule.
    #[test]
    fn one_program_decides_exactly_as_the_stack_it_replaces() {
        let parts = sandbox_like_policy();
        let mut stack: Vec<Vec<sock_filter>> = parts
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let mut prog = if i == 0 { X32_GUARD.to_vec() } else { vec![] };
                prog.extend(compile_linear(p.rules.clone(), p.errno).unwrap());
                prog
            })
            .collect();
        stack.push(newest_model());
        let one = compile(&parts).unwrap();

        let mut values: Vec<u64> = vec![0, 1, 2, 3, 10, u64::MAX, 0x1_0000_5412];
        values.extend(NAMESPACE_FLAGS.iter().map(|&(f, _)| f));
        values.extend(NAMESPACE_FLAGS.iter().map(|&(f, _)| f | 0x11));
        values.extend(IOCTLS.iter().map(|&(v, _)| v));
        let arches = [audit_arch(), 0x4000_0003 /* i386 */, 0];
        let mut seen = BTreeSet::new();
        for arch in arches {
            let far = [1000, 0xffff, 0x3fff_ffff, 0x8000_0000, u32::MAX];
            for nr in (0..600u32)
                .chain((0..600).map(|n| n | X32_SYSCALL_BIT))
                .chain(far)
            {
                for &v in &values {
                    let args = [v, v, v, 0, 0, 0];
                    let want = stacked(&stack, nr, arch, args);
                    let (got, _) = run(&one, nr, arch, args);
                    assert_eq!(got, want, "nr {nr} arch {arch:#x} arg {v:#x}");
                    seen.insert(got);
                }
            }
        }
        // Not vacuous: every outcome occurred.
        let errno = |e: i32| SECCOMP_RET_ERRNO | e as u32;
        let all = [
            SECCOMP_RET_ALLOW,
            SECCOMP_RET_KILL_PROCESS,
            errno(libc::EPERM),
            errno(libc::ENOSYS),
            errno(libc::EAFNOSUPPORT),
        ];
        assert_eq!(seen, BTreeSet::from(all));
    }

    /// An unnamed syscall is decided after a handful of comparisons, not one per listed
    /// syscall (the kernel runs every new filter once per syscall number).
    #[test]
    fn unlisted_syscalls_are_decided_in_a_few_steps() {
        let parts = sandbox_like_policy();
        let prog = compile(&parts).unwrap();
        let named = |nr: u32| parts.iter().any(|p| p.rules.contains_key(&(nr as i64)));
        let worst = (0..=NEWEST_REVIEWED)
            .filter(|&nr| !named(nr))
            .map(|nr| run(&prog, nr, audit_arch(), [7; 6]))
            .inspect(|&(ret, _)| assert_eq!(ret, SECCOMP_RET_ALLOW))
            .map(|(_, steps)| steps)
            .max()
            .unwrap();
        assert!(worst <= 20, "{worst} steps for an allowed syscall");
    }

    /// Every number above the newest reviewed syscall is refused with ENOSYS by the
    /// shim-like and the proxy-like policy alike, `open_tree_attr` (467) first; the newest
    /// reviewed one itself is decided by the tables; x32 numbers are still killed.
    #[test]
    fn numbers_newer_than_the_table_are_refused_with_enosys() {
        let enosys = SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
        let mut proxy_like = sandbox_like_policy();
        proxy_like.truncate(2);
        for parts in [sandbox_like_policy(), proxy_like, vec![]] {
            let prog = compile(&parts).unwrap();
            check_jumps(&prog);
            for nr in [467, 468, 469, 512, 1000, 0xffff, 0x3fff_ffff, 0x8000_0000] {
                assert_eq!(run(&prog, nr, audit_arch(), [0; 6]).0, enosys, "nr {nr}");
            }
            assert_eq!(
                run(&prog, NEWEST_REVIEWED, audit_arch(), [0; 6]).0,
                SECCOMP_RET_ALLOW
            );
            assert_eq!(
                run(&prog, 467 | X32_SYSCALL_BIT, audit_arch(), [0; 6]).0,
                SECCOMP_RET_KILL_PROCESS
            );
        }
        // A table naming a newer syscall is a mistake: it would never be reached.
        let newer = [Part {
            rules: unconditional(&[(467, "open_tree_attr")]),
            errno: libc::EPERM,
        }];
        assert!(compile(&newer).is_err());
    }
}
