//! `wardcell zone enter Z -- /bin/true` from inside a sandbox, against
//! `wardcell run -- /bin/true` from the host: medians and their ratio. Target: 1.5x.
//!
//! Run: `cargo build --release --workspace && target/x86_64-unknown-linux-musl/release/zone-bench [ROUNDS]`
//! It writes a zones.toml in a scratch home under /var/tmp, so it needs no setup.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time_runs(rounds: usize, mut cmd: impl FnMut() -> Command) -> Vec<Duration> {
    (0..rounds)
        .map(|_| {
            let start = Instant::now();
            let status = cmd()
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .status()
                .expect("spawn");
            assert!(status.success(), "failed: {status}");
            start.elapsed()
        })
        .collect()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let first = args.next();
    let here = std::env::current_exe().unwrap();
    let bin = here.parent().unwrap().to_path_buf();
    let wardcell = bin.join("wardcell");

    // Inside the sandbox: time `zone enter`, print the median in microseconds.
    if first.as_deref() == Some("--inside") {
        let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(30);
        let times = time_runs(rounds, || {
            let mut c = Command::new(&wardcell);
            c.args(["zone", "enter", "target", "--", "/bin/true"]);
            c
        });
        println!("{}", median(times).as_micros());
        return;
    }

    let rounds: usize = first.and_then(|a| a.parse().ok()).unwrap_or(30);
    let home = PathBuf::from(format!(
        "/var/tmp/wardcell-zone-bench-{}",
        std::process::id()
    ));
    let cfg_dir = home.join(".config/wardcell");
    std::fs::create_dir_all(&cfg_dir).unwrap();
    std::fs::write(
        cfg_dir.join("zones.toml"),
        format!(
            "[zones.agent]\nprofile = \"p\"\ndefault = true\n\n[zones.target]\nprofile = \"p\"\nenter_from = [\"agent\"]\n\n[profiles.p]\nextends = \"readonly\"\nread = [\"{}\"]\n",
            bin.display()
        ),
    )
    .unwrap();
    let base = |c: &mut Command| {
        c.env_clear()
            .env("HOME", &home)
            .env("PATH", "/usr/bin:/bin")
            .current_dir(Path::new("/usr"));
    };
    // Warm up both paths once.
    let run = || {
        let mut c = Command::new(&wardcell);
        c.args(["run", "--", "/bin/true"]);
        base(&mut c);
        c
    };
    time_runs(2, run);
    let run_median = median(time_runs(rounds, run));
    let out = {
        let mut c = Command::new(&wardcell);
        c.args(["run", "--"])
            .arg(&here)
            .args(["--inside", &rounds.to_string()]);
        base(&mut c);
        c.stdin(Stdio::null()).output().expect("spawn")
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let enter_us: u64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("a median");
    let enter_median = Duration::from_micros(enter_us);
    let _ = std::fs::remove_dir_all(&home);
    println!("rounds: {rounds} each");
    println!(
        "wardcell run -- /bin/true (host)          median {:>8.2} ms",
        run_median.as_secs_f64() * 1e3
    );
    println!(
        "wardcell zone enter target -- /bin/true   median {:>8.2} ms",
        enter_median.as_secs_f64() * 1e3
    );
    println!(
        "ratio enter/run: {:.2} (target: at most 1.50)",
        enter_median.as_secs_f64() / run_median.as_secs_f64()
    );
}
