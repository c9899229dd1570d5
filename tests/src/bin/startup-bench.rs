//! Start-up benchmark: `wardcell run -- /bin/true` against bwrap with the same
//! namespaces (user, mount, network, PID and IPC, with /proc and /dev), alternately, and
//! the medians; bwrap without the IPC namespace too (how this benchmark measured until
//! December 2026: wardcell has always made one).
//!
//! Run: `cargo build --release --workspace && target/x86_64-unknown-linux-musl/release/startup-bench [ROUNDS [DIR...]]`
//! (uses the wardcell binaries next to this one; bwrap from PATH). Target: wardcell's
//! median at or below bwrap's. Each DIR given holds another build's `wardcell` (with its
//! broker and shim beside it): every build and bwrap then take turns, round by round, so
//! a change is measured against its base under the same load.
//!
//! An argument ending `.toml` names a configuration instead: this build again, run with
//! `--config FILE`, so that what a configuration costs is measured against the default
//! in the same rounds (as `limits`: `processes = "none"` against the built-in bound).
//!
//! `WARDCELL_BENCH_BLOCK=N` runs each of them N times in a row per round instead of
//! once: back-to-back starts, as an agent running one command after another makes them,
//! where what a run leaves the kernel to finish after it has returned falls on the next
//! start of the same program rather than on the other one's.
//!
//! Last, the CPU time of whole runs (every process's user and system time, counted from
//! outside as each is reaped: for these rounds this benchmark is the subreaper of what a
//! run leaves behind and waits for it, so a sandbox that outlives the process started,
//! and its teardown, are counted too) against bwrap's, idle, then again with a busy loop on every
//! CPU that this benchmark starts itself (`WARDCELL_BENCH_LOAD=0` skips that pass): with
//! no core spare, a run that needs more CPU than bwrap's is slower than it (a line for
//! each build given, in the same rounds). Then what a
//! program's start costs here: `/bin/true` (dynamic, glibc) against a static program (this
//! bench, exiting at once), and one `cpuid` instruction, which a virtual machine traps:
//! bwrap starts as `/bin/true` does and wardcell's programs are static, so where `cpuid`
//! is slow the CPU ratio flatters wardcell (`--exit` is that static program).
//!
//! `startup-bench --paths [ROUNDS [DIR...]]` measures what a profile's size costs
//! (issue 25, item 4): it makes 1,000 sibling directories in a directory of its own under
//! the temporary directory and two configurations, a profile extending
//! `developer-readonly` as it is and with those 1,000 `read` paths, runs both in turns
//! (each build given, too) and prints the medians, the cost of one path (the difference
//! over 1,000) and what the 1,000 paths add as a multiple of the run without them
//! (target: at most 1x). It removes what it made when done.
//!
//! Every build's binaries are first written back, dropped from the page cache and read
//! back whole, so that they are cached as an installed program's are (bwrap's, here).
//! A freshly linked binary's cached pages come from the linker's many small writes,
//! and on this kernel starting from them measured 0.3 to 0.6 ms slower per run, the
//! same binary copied elsewhere or read back from disk not (`WARDCELL_BENCH_AS_LINKED=1`
//! skips this step: relink, then compare).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One run: its wall time, and the CPU time of every process of it (user and system,
/// counted from outside: each process's time reaches us as its parent reaps it).
#[derive(Clone, Copy)]
struct Sample {
    wall: Duration,
    cpu: Duration,
}

fn children_cpu() -> Duration {
    // SAFETY: rusage is plain integers, for which all zeroes is a valid value.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the struct we pass and reads nothing else.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// With `on`, this process reaps what its children leave behind (a process whose parent
/// has ended is reparented here, not to the host's init), so that the CPU time of every
/// process of a run is counted: wardcell's first sandbox, and bwrap's process 1, outlive
/// the process that was started (which ends as soon as the command's status is known),
/// and the sandbox's teardown is theirs.
fn subreaper(on: bool) {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes an integer and touches no memory.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, on as libc::c_ulong, 0, 0, 0) };
    assert_eq!(
        rc,
        0,
        "PR_SET_CHILD_SUBREAPER: {}",
        std::io::Error::last_os_error()
    );
}

/// Wait for and reap every child of this process that is not one of its own busy loops
/// (`--spin`, named as this program is): a run's processes reparented here.
fn reap_orphans() {
    let own = std::fs::read_to_string("/proc/self/comm").unwrap_or_default();
    loop {
        let kids: Vec<i32> = std::fs::read_dir("/proc/self/task")
            .into_iter()
            .flatten()
            .flatten()
            .flat_map(|t| {
                let list = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
                list.split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect::<Vec<i32>>()
            })
            .filter(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c != own))
            .collect();
        if kids.is_empty() {
            return;
        }
        for pid in kids {
            let mut status = 0;
            // SAFETY: waitpid writes the status into the integer we pass.
            unsafe { libc::waitpid(pid, &mut status, 0) };
        }
    }
}

fn time(cmd: &mut Command) -> Sample {
    let cpu0 = children_cpu();
    let start = Instant::now();
    let status = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .expect("spawn");
    let wall = start.elapsed();
    assert!(status.success(), "{cmd:?} failed: {status}");
    // What the run left running (wardcell's sandbox, ending) is waited for outside the
    // wall time and counted in the CPU time.
    reap_orphans();
    Sample {
        wall,
        cpu: children_cpu() - cpu0,
    }
}

/// The medians of wall and CPU time.
fn medians(v: &[Sample]) -> (f64, f64) {
    let mut wall: Vec<Duration> = v.iter().map(|s| s.wall).collect();
    let mut cpu: Vec<Duration> = v.iter().map(|s| s.cpu).collect();
    (ms(median(&mut wall)), ms(median(&mut cpu)))
}

/// With `WARDCELL_BENCH_LOAD` unset or not 0: a busy loop on every CPU while the rounds
/// run again, so that no core is spare (the processes end with the guard).
struct Load(Vec<std::process::Child>);

impl Load {
    fn start() -> Load {
        let me = std::env::current_exe().unwrap();
        Load(
            (0..num_cpus())
                .map(|_| {
                    Command::new(&me)
                        .arg("--spin")
                        .spawn()
                        .expect("spawn a spinner")
                })
                .collect(),
        )
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Write `path` back to disk, drop it from the page cache and read it back whole, as
/// installing or copying a program leaves it cached (best effort).
fn recache(path: &std::path::Path) {
    use std::os::fd::AsRawFd;
    let Ok(f) = std::fs::File::open(path) else {
        return;
    };
    let _ = f.sync_all();
    // SAFETY: the descriptor is open for the whole call; the call reads no memory of ours.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    let _ = std::io::copy(&mut &f, &mut std::io::sink());
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("--spin") {
        let mut x = 0u64;
        loop {
            x = std::hint::black_box(x.wrapping_add(1));
        }
    }
    if std::env::args().nth(1).as_deref() == Some("--exit") {
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("--paths") {
        return paths::main(std::env::args().skip(2));
    }
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(40);
    let block: usize = std::env::var("WARDCELL_BENCH_BLOCK")
        .ok()
        .and_then(|b| b.parse().ok())
        .filter(|&b| b > 0)
        .unwrap_or(1);
    let here = this_build();
    // Each variant: a build's directory, and the configuration it runs with (a FILE.toml
    // argument: this build with `--config FILE`; none: the user's own, or the built-in).
    let mut builds: Vec<(PathBuf, Option<PathBuf>)> = vec![(here.clone(), None)];
    builds.extend(args.map(PathBuf::from).map(|a| {
        if a.extension().is_some_and(|e| e == "toml") {
            (here.clone(), Some(a))
        } else {
            (a, None)
        }
    }));
    for (dir, config) in &builds {
        assert!(
            dir.join("wardcell").is_file(),
            "build the workspace first: {} is missing",
            dir.join("wardcell").display()
        );
        assert!(
            config.as_ref().is_none_or(|c| c.is_file()),
            "{config:?} is missing"
        );
    }

    let run_wc = |(dir, config): &(PathBuf, Option<PathBuf>)| {
        let mut c = Command::new(dir.join("wardcell"));
        c.arg("run");
        if let Some(config) = config {
            c.arg("--config").arg(config);
        }
        c.args(["--", "/bin/true"]).current_dir("/usr");
        c
    };
    let run_bw = |ipc: bool| {
        let mut c = Command::new("bwrap");
        if ipc {
            c.arg("--unshare-ipc");
        }
        c.args([
            "--unshare-user",
            "--unshare-net",
            "--unshare-pid",
            "--ro-bind",
            "/",
            "/",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--die-with-parent",
            "/bin/true",
        ]);
        c
    };
    recache_builds(builds.iter().map(|(dir, _)| dir.as_path()));
    // Warm each up once (page cache, dynamic loader).
    for variant in &builds {
        time(&mut run_wc(variant));
    }
    time(&mut run_bw(true));
    time(&mut run_bw(false));
    let measure = |rounds: usize| {
        let mut wc: Vec<Vec<Sample>> = vec![Vec::with_capacity(rounds); builds.len()];
        let mut bw = Vec::with_capacity(rounds);
        let mut bw_no_ipc = Vec::with_capacity(rounds);
        for round in 0..rounds {
            // Every other round in reverse order, so no build always follows bwrap.
            let mut order: Vec<usize> = (0..builds.len()).collect();
            if round % 2 == 1 {
                order.reverse();
            }
            for i in order {
                for _ in 0..block {
                    wc[i].push(time(&mut run_wc(&builds[i])));
                }
            }
            for ipc in [round % 2 == 0, round % 2 == 1] {
                for _ in 0..block {
                    let took = time(&mut run_bw(ipc));
                    if ipc {
                        bw.push(took);
                    } else {
                        bw_no_ipc.push(took);
                    }
                }
            }
        }
        (wc, bw, bw_no_ipc)
    };
    let (samples, bw_samples, bw_no_ipc) = measure(rounds);
    let mut wc: Vec<Vec<Duration>> = samples
        .iter()
        .map(|v| v.iter().map(|s| s.wall).collect())
        .collect();
    let mut bw: Vec<Duration> = bw_samples.iter().map(|s| s.wall).collect();
    let mut bw_no_ipc: Vec<Duration> = bw_no_ipc.iter().map(|s| s.wall).collect();
    let mb = median(&mut bw);
    let mb_no_ipc = median(&mut bw_no_ipc);
    if block == 1 {
        println!("rounds: {rounds} each, alternating");
    } else {
        println!("rounds: {rounds}, each a block of {block} runs in a row");
    }
    let m0 = ms(median(&mut wc[0]));
    let mut before = m0;
    for (i, build) in builds.iter().enumerate() {
        let mw = median(&mut wc[i]);
        let label = match i {
            0 => "wardcell run -- /bin/true".to_string(),
            _ => format!("  {}", describe(build)),
        };
        println!("{label:<28} median {:>8.2} ms", ms(mw));
        if i > 0 {
            println!("  ratio to bwrap: {:.2}", ms(mw) / ms(mb));
            println!(
                "  ratio to the first: {:.3}, to the one before: {:.3}",
                ms(mw) / m0,
                ms(mw) / before
            );
        }
        before = ms(mw);
    }
    println!(
        "bwrap (user,mnt,net,pid,ipc,/proc,/dev) median {:>8.2} ms",
        ms(mb)
    );
    println!(
        "bwrap without the IPC namespace   median {:>8.2} ms",
        ms(mb_no_ipc)
    );
    println!("ratio wardcell/bwrap: {:.2}", m0 / ms(mb));
    println!(
        "ratio wardcell/bwrap without the IPC namespace: {:.2}",
        m0 / ms(mb_no_ipc)
    );

    // The CPU time of whole runs (every process, from outside), idle and with no core
    // spare: a run that costs more CPU than bwrap's is slower than it on a busy machine.
    // One line a build (the first is this one; each other is named), each against the
    // bwrap runs of the same rounds.
    let cpu_line = |label: &str, w: &[Vec<Sample>], b: &[Sample]| {
        let (bwall, bcpu) = medians(b);
        for (i, w) in w.iter().enumerate() {
            let (ww, wcpu) = medians(w);
            let which = match i {
                0 => String::new(),
                _ => format!(" [{}]", describe(&builds[i])),
            };
            println!(
                "{label}: wardcell{which} wall {ww:.2} ms, CPU {wcpu:.2} ms; bwrap wall {bwall:.2} ms, CPU {bcpu:.2} ms; ratio wall {:.2}, CPU {:.2}",
                ww / bwall,
                wcpu / bcpu
            );
        }
    };
    // Counted from here on with every process of a run reaped here, each run waited for
    // to its end (the rounds above do not wait for a sandbox's teardown, as a shell does
    // not, and so their CPU would miss it).
    subreaper(true);
    let cpu_rounds = (rounds / 2).max(20);
    let (samples, bw_samples, _) = measure(cpu_rounds);
    cpu_line(
        &format!("idle, every process counted ({cpu_rounds} rounds)"),
        &samples,
        &bw_samples,
    );
    if std::env::var("WARDCELL_BENCH_LOAD").as_deref() != Ok("0") {
        let load = Load::start();
        let (samples, bw_samples, _) = measure(cpu_rounds);
        drop(load);
        cpu_line(
            &format!("loaded ({} busy loops, {cpu_rounds} rounds)", num_cpus()),
            &samples,
            &bw_samples,
        );
    }
    subreaper(false);
    program_start();
}

/// What starting a program costs on this machine, which the CPU ratio above depends on:
/// bwrap and `/bin/true` are linked to glibc, whose start-up runs the `cpuid` instruction
/// dozens of times (the caches' sizes), and in a virtual machine each one exits to the
/// hypervisor; wardcell's programs are static and run none. So on bare metal bwrap's CPU
/// is smaller by the part of a dynamic start that is `cpuid`, and the ratio larger.
fn program_start() {
    #[cfg(target_arch = "x86_64")]
    let cpuid = {
        let n = 2000;
        let t = Instant::now();
        for i in 0..n {
            // Leaf 4: the caches' parameters, as glibc asks.
            std::hint::black_box(std::arch::x86_64::__cpuid_count(4, i & 3));
        }
        format!(
            "; one cpuid instruction {:.2} µs (bare metal: about 0.1)",
            t.elapsed().as_secs_f64() * 1e6 / n as f64
        )
    };
    #[cfg(not(target_arch = "x86_64"))]
    let cpuid = String::new();
    let per_start = |prog: &std::path::Path, arg: Option<&str>| {
        let n = 200;
        let before = children_cpu();
        for _ in 0..n {
            let mut c = Command::new(prog);
            c.args(arg).stdout(Stdio::null());
            assert!(c.status().unwrap().success(), "{}", prog.display());
        }
        ms(children_cpu() - before) / n as f64
    };
    let dynamic = per_start(std::path::Path::new("/bin/true"), None);
    let static_ = per_start(&std::env::current_exe().unwrap(), Some("--exit"));
    println!(
        "a program's start, CPU: /bin/true (glibc, dynamic) {dynamic:.2} ms, a static one (this bench, exiting at once) {static_:.2} ms{cpuid}. bwrap starts as /bin/true does, wardcell's programs as the static one: where cpuid is slow, the CPU ratio above flatters wardcell"
    );
}

/// A build given on the command line, as printed: its directory, or `--config FILE`.
fn describe((dir, config): &(PathBuf, Option<PathBuf>)) -> String {
    match config {
        Some(c) => format!("--config {}", c.display()),
        None => dir.display().to_string(),
    }
}

/// The directory of this benchmark, where this build's `wardcell` is.
fn this_build() -> PathBuf {
    let here = std::env::current_exe().unwrap();
    here.parent().unwrap().to_path_buf()
}

/// Each build's programs cached as an installed program's are (see the top);
/// WARDCELL_BENCH_AS_LINKED=1 leaves them as they are, to see the difference.
fn recache_builds<'a>(dirs: impl Iterator<Item = &'a std::path::Path>) {
    if std::env::var_os("WARDCELL_BENCH_AS_LINKED").is_none() {
        for dir in dirs {
            for name in ["wardcell", "wardcell-broker", "wardcell-shim"] {
                recache(&dir.join(name));
            }
        }
    }
}

/// `--paths`: what 1,000 `read` paths add to a run's start.
mod paths {
    use super::*;
    use std::fmt::Write as _;
    use std::path::Path;

    /// How many sibling directories the large profile reads.
    const PATHS: usize = 1000;

    /// The directories and the two configurations, removed when dropped.
    struct Fixture(PathBuf);

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn config(read: &[PathBuf]) -> String {
        let mut text = String::from(
            "[zones.agent]\nprofile = \"p\"\ndefault = true\n[profiles.p]\nextends = \"developer-readonly\"\n",
        );
        if !read.is_empty() {
            let list: Vec<String> = read
                .iter()
                .map(|p| format!("{:?}", p.display().to_string()))
                .collect();
            let _ = writeln!(text, "read = [{}]", list.join(", "));
        }
        text
    }

    fn fixture() -> (Fixture, [PathBuf; 2]) {
        let root =
            std::env::temp_dir().join(format!("wardcell-bench-paths-{}", std::process::id()));
        let fixture = Fixture(root.clone());
        let dirs: Vec<PathBuf> = (0..PATHS).map(|i| root.join(format!("d{i:04}"))).collect();
        for d in &dirs {
            std::fs::create_dir_all(d).expect("making the benchmark's directories");
        }
        let small = root.join("p0.toml");
        let large = root.join(format!("p{PATHS}.toml"));
        std::fs::write(&small, config(&[])).expect("writing a configuration");
        std::fs::write(&large, config(&dirs)).expect("writing a configuration");
        (fixture, [small, large])
    }

    fn run(dir: &Path, config: &Path) -> Command {
        let mut c = Command::new(dir.join("wardcell"));
        c.arg("run").arg("--config").arg(config);
        c.args(["--", "/bin/true"]).current_dir("/usr");
        c
    }

    pub fn main(mut args: impl Iterator<Item = String>) {
        let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(40);
        let mut builds = vec![this_build()];
        builds.extend(args.map(PathBuf::from));
        for dir in &builds {
            assert!(
                dir.join("wardcell").is_file(),
                "{} is missing",
                dir.join("wardcell").display()
            );
        }
        let (_fixture, configs) = fixture();
        recache_builds(builds.iter().map(PathBuf::as_path));
        // samples[build][0 or 1]: without and with the paths.
        let mut samples: Vec<[Vec<Sample>; 2]> = builds.iter().map(|_| [vec![], vec![]]).collect();
        for dir in &builds {
            for config in &configs {
                time(&mut run(dir, config)); // warm up
            }
        }
        for round in 0..rounds {
            let mut order: Vec<(usize, usize)> =
                (0..builds.len()).flat_map(|b| [(b, 0), (b, 1)]).collect();
            if round % 2 == 1 {
                order.reverse();
            }
            for (b, which) in order {
                samples[b][which].push(time(&mut run(&builds[b], &configs[which])));
            }
        }
        println!("rounds: {rounds}, alternating; a profile extending developer-readonly, without and with {PATHS} read paths (sibling directories)");
        // Wall time only: the CPU time counted from outside misses the shim, which the
        // broker does not reap (it is reaped after the broker has exited).
        for (dir, [small, large]) in builds.iter().zip(&samples) {
            let (w0, w1) = (medians(small).0, medians(large).0);
            println!("{}", dir.display());
            println!("  without the paths: {w0:.2} ms; with {PATHS}: {w1:.2} ms");
            println!(
                "  a path costs {:.1} us; {PATHS} paths add {:.2}x the run without them (target: at most 1x)",
                (w1 - w0) * 1e3 / PATHS as f64,
                (w1 - w0) / w0
            );
        }
    }
}

fn num_cpus() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}
