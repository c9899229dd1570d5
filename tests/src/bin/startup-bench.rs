//! Start-up benchmark: `wardcell run -- /bin/true` against bwrap with the same
//! namespaces (user, net, pid, with /proc and /dev), alternately, and the medians.
//!
//! Run: `cargo build --release --workspace && target/x86_64-unknown-linux-musl/release/startup-bench [ROUNDS]`
//! (uses the wardcell binaries next to this one; bwrap from PATH). Target: wardcell's
//! median at or below bwrap's.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn time(cmd: &mut Command) -> Duration {
    let start = Instant::now();
    let status = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .expect("spawn");
    let took = start.elapsed();
    assert!(status.success(), "{cmd:?} failed: {status}");
    took
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(40);
    let here = std::env::current_exe().unwrap();
    let wardcell: PathBuf = here.parent().unwrap().join("wardcell");
    assert!(
        wardcell.is_file(),
        "build the workspace first: {} is missing",
        wardcell.display()
    );

    let mut wc = Vec::with_capacity(rounds);
    let mut bw = Vec::with_capacity(rounds);
    // Warm both up once (page cache, dynamic loader).
    let run_wc = || {
        let mut c = Command::new(&wardcell);
        c.args(["run", "--", "/bin/true"]).current_dir("/usr");
        c
    };
    let run_bw = || {
        let mut c = Command::new("bwrap");
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
    time(&mut run_wc());
    time(&mut run_bw());
    for _ in 0..rounds {
        wc.push(time(&mut run_wc()));
        bw.push(time(&mut run_bw()));
    }
    let (mw, mb) = (median(&mut wc), median(&mut bw));
    println!("rounds: {rounds} each, alternating");
    println!(
        "wardcell run -- /bin/true   median {:>8.2} ms",
        mw.as_secs_f64() * 1e3
    );
    println!(
        "bwrap (user,net,pid,/proc,/dev) median {:>8.2} ms",
        mb.as_secs_f64() * 1e3
    );
    println!(
        "ratio wardcell/bwrap: {:.2}",
        mw.as_secs_f64() / mb.as_secs_f64()
    );
}
