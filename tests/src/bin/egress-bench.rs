//! Egress and pipe throughput (issue 25, items 1, 2, 5 and 6), in one run:
//!
//! - a large HTTPS download (1 GiB by default) by curl from a local server this bench
//!   starts, with a CA of its own: straight from the host, and from inside a sandbox
//!   through the proxy's CONNECT tunnel, its transparent egress, and interception (a
//!   credential names the host, so TLS is terminated, the credential attached and TLS
//!   made again). The time is curl's own `time_total`: the sandbox's start is not in it.
//!   Targets: tunnel and transparent at most 1.11x direct's time, interception 2.0x.
//! - 1 GiB through `wardcell zone enter target -- cat` against the same pipe through
//!   `cat` alone, both from inside a sandbox, timed from the first byte out to the last
//!   (so `zone enter`'s start is not in it either). Target: 1.00x.
//! - 1,000 requests of 1 KiB over HTTPS, a new connection each, by one curl (direct,
//!   and through each variant above), at most 3 rounds: the time each request adds to
//!   direct's. Every variant's curl checks certificates against a bundle of the
//!   distribution's roots (reading it costs curl about 20 ms a connection).
//! - the resident memory of a run's broker, shim and proxy (tunnelling, then
//!   intercepting) while its command waits, and of bwrap's processes.
//!
//! Run: `cargo build --release --workspace --locked && target/x86_64-unknown-linux-musl/release/egress-bench [ROUNDS]`
//! (default 5 rounds; `WARDCELL_BENCH_MIB` sets the size, default 1024;
//! `WARDCELL_BENCH_ONLY=tunnel,pipe` runs direct and the variants named (`requests`
//! names the requests and the memory); `WARDCELL_BENCH_REQUESTS` sets their number;
//! `WARDCELL_BENCH_WIRE=0,10,12` runs the downloads once for each rate, the server's sends
//! paced to that many Gbit/s as a link would (0: not paced, the default); `--serve`
//! instead of ROUNDS prints each variant's command and serves until stdin ends, for
//! profiling one by hand). It uses the
//! wardcell binaries next to it and curl from PATH, and writes a zones.toml in a scratch
//! home under /var/tmp, so it needs no setup.
//!
//! Each round runs every variant once, in an order that turns round by round, and the
//! ratios printed are medians of the per-round ratios: on a small shared machine the
//! baselines alone vary a lot from run to run, and pairing them is what makes the ratio
//! repeatable. The load average before and after is printed with them.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn env_or(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The bench's CA (PEM) and a server configuration for `localhost` signed by it.
fn tls_setup() -> (String, Arc<rustls::ServerConfig>) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::default();
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "wardcell egress-bench CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    let leaf = params.signed_by(&key, &ca, &ca_key).unwrap();
    let key_der = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der().clone()], key_der)
        .unwrap();
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    (ca.pem(), Arc::new(server))
}

/// An HTTPS server on 127.0.0.1: every request is answered with `size` bytes (with a
/// Content-Length), one thread a connection. Returns the port.
fn https_server(cfg: Arc<rustls::ServerConfig>, size: u64) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            let cfg = cfg.clone();
            std::thread::spawn(move || {
                let _ = serve(c, cfg, size);
            });
        }
    });
    port
}

fn serve(tcp: TcpStream, cfg: Arc<rustls::ServerConfig>, size: u64) -> std::io::Result<()> {
    let rate = PACING.load(Ordering::Relaxed);
    if rate > 0 {
        pace(&tcp, rate)?;
    }
    static BODY: [u8; 256 * 1024] = [b'x'; 256 * 1024];
    let conn = rustls::ServerConnection::new(cfg).map_err(std::io::Error::other)?;
    let mut s = rustls::StreamOwned::new(conn, tcp);
    let mut head = Vec::new();
    let mut b = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut b)?;
        if n == 0 || head.len() > 64 * 1024 {
            return Ok(());
        }
        head.extend_from_slice(&b[..n]);
    }
    write!(
        s,
        "HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: {size}\r\nconnection: close\r\n\r\n"
    )?;
    let mut left = size;
    while left > 0 {
        let n = left.min(BODY.len() as u64) as usize;
        s.write_all(&BODY[..n])?;
        left -= n as u64;
    }
    s.conn.send_close_notify();
    s.flush()
}

/// Pace what `tcp` sends to `rate` bytes a second (the kernel's TCP pacing, as a link of
/// that speed would spread the segments).
fn pace(tcp: &TcpStream, rate: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid socket, and a u64 option value with its own size.
    let r = unsafe {
        libc::setsockopt(
            tcp.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MAX_PACING_RATE,
            (&rate as *const u64).cast(),
            std::mem::size_of::<u64>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Run `cmd` (a curl printing `%{size_download} %{time_total}`, maybe in a sandbox) and
/// return curl's time in seconds, after checking that every byte came.
fn curl_time(mut cmd: Command, size: u64) -> f64 {
    let out = cmd.stdin(Stdio::null()).output().expect("spawn");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or("");
    let mut f = line.split_whitespace();
    let got: u64 = f.next().and_then(|v| v.parse().ok()).unwrap_or(0);
    assert!(
        out.status.success() && got == size,
        "{cmd:?}: {} of {size} bytes; {}{}",
        got,
        text,
        String::from_utf8_lossy(&out.stderr)
    );
    f.next().and_then(|v| v.parse().ok()).expect("a time")
}

/// `size` bytes written to `cmd`'s stdin and read back from its stdout; the seconds from
/// the first byte back to the last (so the command's start is not counted).
fn through(mut cmd: Command, size: u64) -> f64 {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn cat");
    let mut input = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        static CHUNK: [u8; 128 * 1024] = [b'y'; 128 * 1024];
        let mut left = size;
        while left > 0 {
            let n = left.min(CHUNK.len() as u64) as usize;
            input.write_all(&CHUNK[..n]).unwrap();
            left -= n as u64;
        }
    });
    let mut out = child.stdout.take().unwrap();
    let mut buf = vec![0u8; 128 * 1024];
    let mut got = out.read(&mut buf).unwrap() as u64;
    let start = Instant::now();
    loop {
        let n = out.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        got += n as u64;
    }
    let secs = start.elapsed().as_secs_f64();
    writer.join().unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(got, size, "short pipe");
    secs
}

/// Inside a sandbox: `size` bytes through `cat`, through `cat` in a session of its own
/// (as every sandbox's command is: a session is a scheduling group of its own where the
/// kernel has autogroups), and through `zone enter target -- cat`, in turns for `rounds`
/// rounds; prints each's median rate and the median ratios to plain `cat`.
fn pipe_inside(wardcell: &Path, rounds: usize, size: u64) {
    type Make<'a> = Box<dyn Fn() -> Command + 'a>;
    let cmds: [(&str, Make); 3] = [
        ("cat", Box::new(|| Command::new("cat"))),
        (
            "setsid -w cat",
            Box::new(|| {
                let mut c = Command::new("setsid");
                c.args(["-w", "cat"]);
                c
            }),
        ),
        (
            "zone enter target -- cat",
            Box::new(|| {
                let mut c = Command::new(wardcell);
                c.args(["zone", "enter", "target", "--", "cat"]);
                c
            }),
        ),
    ];
    for (_, cmd) in &cmds {
        through(cmd(), size);
    }
    let mut times = vec![Vec::new(); cmds.len()];
    let mut ratios = vec![Vec::new(); cmds.len()];
    for round in 0..rounds {
        let mut t = [0.0; 3];
        for k in 0..cmds.len() {
            let i = (round + k) % cmds.len();
            t[i] = through(cmds[i].1(), size);
        }
        for i in 0..cmds.len() {
            times[i].push(t[i]);
            ratios[i].push(t[i] / t[0]);
        }
    }
    for (i, (name, _)) in cmds.iter().enumerate() {
        let shown: Vec<String> = ratios[i].iter().map(|r| format!("{r:.2}")).collect();
        println!(
            "pipe through {name:<25} median {:>6.2} GB/s   time / cat: median {:.2}x   per round: {}{}",
            size as f64 / median(times[i].clone()) / 1e9,
            median(ratios[i].clone()),
            shown.join(" "),
            if i == 2 { "   (target 1.00x)" } else { "" }
        );
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let first = args.next();
    let here = std::env::current_exe().unwrap();
    let bin = here.parent().unwrap().to_path_buf();
    let wardcell = bin.join("wardcell");
    let size = env_or("WARDCELL_BENCH_MIB", 1024) << 20;
    if first.as_deref() == Some("--pipe-inside") {
        let rounds = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
        pipe_inside(&wardcell, rounds, size);
        return;
    }
    // --serve: set up, print each variant's command, and serve until stdin ends (for
    // profiling one path by hand).
    let serve_only = first.as_deref() == Some("--serve");
    let rounds: usize = first.and_then(|a| a.parse().ok()).unwrap_or(5);
    assert!(wardcell.is_file(), "build the workspace first");
    let load_before = loadavg();

    let home = PathBuf::from(format!(
        "/var/tmp/wardcell-egress-bench-{}",
        std::process::id()
    ));
    let cfg_dir = home.join(".config/wardcell");
    std::fs::create_dir_all(&cfg_dir).unwrap();
    let (ca_pem, server_cfg) = tls_setup();
    let ca = home.join("ca.pem");
    std::fs::write(&ca, ca_pem).unwrap();
    // curl checks a server's certificate against the bundle it is given, and reading a
    // distribution's bundle of some 150 roots takes it about 20 ms a connection. Inside a
    // sandbox with interception it reads the sandbox's bundle (the distribution's roots,
    // this CA and the proxy's); outside, and through a tunnel, a bundle of the
    // distribution's roots and this CA, so that every variant pays the same.
    let bundle = home.join("bundle.pem");
    let roots = [
        "/etc/ssl/certs/ca-certificates.crt",
        "/etc/pki/tls/certs/ca-bundle.crt",
    ]
    .iter()
    .find_map(|p| std::fs::read(p).ok())
    .unwrap_or_default();
    std::fs::write(&bundle, [roots, std::fs::read(&ca).unwrap()].concat()).unwrap();
    let token = home.join("token");
    std::fs::write(&token, "bench-token").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let port = https_server(server_cfg.clone(), size);
    let small = https_server(server_cfg, 1024);
    std::fs::write(
        cfg_dir.join("zones.toml"),
        format!(
            r#"[zones.agent]
profile = "p"
default = true

[zones.ic]
profile = "ic"
authenticated = true

[zones.target]
profile = "p"
enter_from = ["agent"]

[profiles.p]
extends = "readonly"
read = ["{bin}", "{ca}", "{bundle}"]
network = {{ allow = ["localhost:{port}", "localhost:{small}"] }}

[profiles.ic]
extends = "p"
credentials = ["bench"]

[credentials.bench]
hosts = ["localhost:{port}", "localhost:{small}"]
scheme = "bearer"
secret = {{ file = "{token}" }}
"#,
            bin = bin.display(),
            ca = ca.display(),
            bundle = bundle.display(),
            token = token.display()
        ),
    )
    .unwrap();

    let url = format!("https://localhost:{port}/blob");
    let ca_arg = bundle.to_str().unwrap().to_string();
    let base = |c: &mut Command| {
        c.env_clear()
            .env("HOME", &home)
            .env("PATH", "/usr/bin:/bin")
            .env("SSL_CERT_FILE", &ca)
            .current_dir(Path::new("/usr"));
    };
    // Through the proxy variables: `--noproxy` with a name that is not this one overrides
    // the sandbox's NO_PROXY, which names localhost.
    let variants: Vec<(&str, Vec<&str>)> = vec![
        ("direct", vec!["--noproxy", "*", "--cacert", &ca_arg]),
        (
            "tunnel",
            vec!["--noproxy", "example.invalid", "--cacert", &ca_arg],
        ),
        ("transparent", vec!["--noproxy", "*", "--cacert", &ca_arg]),
        ("interception", vec!["--noproxy", "example.invalid"]),
    ];
    // WARDCELL_BENCH_ONLY=tunnel,interception: direct and those (for profiling one).
    let only = std::env::var("WARDCELL_BENCH_ONLY").unwrap_or_default();
    let variants: Vec<_> = variants
        .into_iter()
        .filter(|(name, _)| only.is_empty() || *name == "direct" || only.contains(name))
        .collect();
    // curl as variant `i` runs it (straight, or in a sandbox of the zone it needs), with
    // the variant's options, then `args`.
    let curl = |i: usize, args: &[&str]| -> Command {
        let (name, extra) = &variants[i];
        let mut c = match *name {
            "direct" => Command::new("curl"),
            _ => {
                let mut c = Command::new(&wardcell);
                c.arg("run");
                if *name == "interception" {
                    c.args(["--zone", "ic"]);
                }
                c.args(["--", "curl"]);
                c
            }
        };
        c.args(["-4", "-sS", "--fail"]).args(extra).args(args);
        base(&mut c);
        c
    };
    let command = |i: usize| -> Command {
        let fmt = "%{size_download} %{time_total}\n";
        curl(i, &["-o", "/dev/null", "-w", fmt, &url])
    };
    if serve_only {
        for (i, (name, _)) in variants.iter().enumerate() {
            println!("{name}: {:?}", command(i));
        }
        println!("serving on port {port} until stdin ends");
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        let _ = std::fs::remove_dir_all(&home);
        return;
    }
    let run = |i: usize| curl_time(command(i), size);
    let names: Vec<&str> = variants.iter().map(|v| v.0).collect();
    // WARDCELL_BENCH_WIRE=0,10,12: the downloads once for each rate, the server's sends
    // paced to that many Gbit/s as a link of that speed would (0: not paced).
    let wire = std::env::var("WARDCELL_BENCH_WIRE").unwrap_or_else(|_| "0".into());
    for gbit in wire.split(',').map(|g| match g.trim().parse::<f64>() {
        Ok(v) if v >= 0.0 => v,
        _ => panic!("WARDCELL_BENCH_WIRE: {g:?} is not a rate in Gbit/s (0: not paced)"),
    }) {
        PACING.store((gbit * 1e9 / 8.0) as u64, Ordering::Relaxed);
        downloads(&names, &run, rounds, size, gbit);
    }
    PACING.store(0, Ordering::Relaxed);

    if only.is_empty() || only.contains("requests") {
        requests(&curl, &names, small, rounds);
        memory(&wardcell, &base, small);
    }
    if !only.is_empty() && !only.contains("pipe") {
        let _ = std::fs::remove_dir_all(&home);
        return;
    }
    let mut c = Command::new(&wardcell);
    c.args(["run", "--"])
        .arg(&here)
        .args(["--pipe-inside", &rounds.to_string()]);
    base(&mut c);
    c.env("WARDCELL_BENCH_MIB", (size >> 20).to_string());
    let out = c.stdin(Stdio::null()).output().expect("spawn");
    print!("{}", String::from_utf8_lossy(&out.stdout));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&home);
    println!("load average before: {load_before}; after: {}", loadavg());
}

/// The server's pacing of what it sends, in bytes a second (0: none).
static PACING: AtomicU64 = AtomicU64::new(0);

/// The machine's busy CPU time so far, in seconds (every CPU's user, system, interrupt
/// and steal time from /proc/stat; idle and I/O wait left out).
fn busy_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").expect("/proc/stat");
    let line = stat.lines().next().unwrap_or("");
    let v: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal
    let busy: f64 = v
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4 && *i < 8)
        .map(|(_, x)| x)
        .sum();
    // SAFETY: sysconf reads a constant of the system; it takes no pointer.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    busy / ticks.max(1) as f64
}

/// `rounds` rounds of every variant's download, in an order that turns round by round:
/// prints each's median time and rate, the median of its per-round ratios to direct's
/// time, and the machine's busy CPU time a GiB (the server's, curl's and the proxy's
/// together; a variant's minus direct's is what its path costs). That CPU time includes
/// curl's start and, for the sandboxed variants, the sandbox's: a few ms, next to nothing
/// against 1 GiB, but not against a small `WARDCELL_BENCH_MIB`.
fn downloads(names: &[&str], run: &dyn Fn(usize) -> f64, rounds: usize, size: u64, gbit: f64) {
    let n = names.len();
    for i in 0..n {
        run(i); // warm-up
    }
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); n];
    let gib = size as f64 / (1u64 << 30) as f64;
    for round in 0..rounds {
        let mut t = vec![0.0; n];
        for k in 0..n {
            let i = (round + k) % n;
            let before = busy_secs();
            t[i] = run(i);
            cpu[i].push((busy_secs() - before) / gib);
        }
        for i in 0..n {
            ratios[i].push(t[i] / t[0]);
            times[i].push(t[i]);
        }
    }
    let wire = if gbit > 0.0 {
        format!("sent at most {gbit} Gbit/s")
    } else {
        "not paced".to_string()
    };
    println!(
        "egress-bench: {} MiB per transfer, {rounds} rounds (+1 warm-up), curl -> local HTTPS server, {wire}",
        size >> 20,
    );
    for i in 0..n {
        let secs = median(times[i].clone());
        let per: Vec<String> = ratios[i].iter().map(|r| format!("{r:.2}")).collect();
        println!(
            "{:<13} median {:>6.3} s {:>6.2} GB/s {:>5.2} CPU-s/GiB   time / direct: median {:.2}x   per round: {}{}",
            names[i],
            secs,
            size as f64 / secs / 1e9,
            median(cpu[i].clone()),
            median(ratios[i].clone()),
            per.join(" "),
            match names[i] {
                "direct" => "",
                "interception" => "   (target at most 2.00x)",
                _ => "   (target at most 1.11x)",
            }
        );
    }
}

/// `WARDCELL_BENCH_REQUESTS` (default 1,000) requests of 1 KiB each over HTTPS, a new
/// connection each (curl and the server close every one), by one curl as each variant runs it,
/// in turns for `rounds` rounds: the median of the per-round time each request adds to
/// direct's.
fn requests(curl: &dyn Fn(usize, &[&str]) -> Command, names: &[&str], port: u16, rounds: usize) {
    let n = env_or("WARDCELL_BENCH_REQUESTS", 1000) as usize;
    let config = |n: usize| -> String {
        (0..n)
            .map(|k| format!("url = \"https://localhost:{port}/r{k}\"\noutput = \"/dev/null\"\n"))
            .collect()
    };
    let run = |i: usize, n: usize| -> f64 {
        // `Connection: close` from curl too: a proxy may keep its client's connection
        // open whatever the server said (the header is hop-by-hop).
        let mut cmd = curl(
            i,
            &[
                "-H",
                "Connection: close",
                "-K",
                "-",
                "-w",
                "%{size_download} %{time_total}\\n",
            ],
        );
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn curl");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(config(n).as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let times: Vec<f64> = text
            .lines()
            .filter_map(|l| l.split_once(' '))
            .filter(|(size, _)| *size == "1024")
            .filter_map(|(_, t)| t.parse().ok())
            .collect();
        assert!(
            out.status.success() && times.len() == n,
            "{}: {} of {n} requests; {}",
            names[i],
            times.len(),
            String::from_utf8_lossy(&out.stderr)
        );
        times.iter().sum()
    };
    for i in 0..names.len() {
        run(i, 20); // warm-up
    }
    // A round takes half a minute a variant with 1,000 requests: three at most.
    let rounds = rounds.min(3);
    let mut totals = vec![Vec::new(); names.len()];
    let mut added = vec![Vec::new(); names.len()];
    for round in 0..rounds {
        let mut t = vec![0.0; names.len()];
        for k in 0..names.len() {
            let i = (round + k) % names.len();
            t[i] = run(i, n);
        }
        for i in 0..names.len() {
            totals[i].push(t[i]);
            added[i].push((t[i] - t[0]) / n as f64 * 1e3);
        }
    }
    println!(
        "{n} requests of 1 KiB, a new connection each, {rounds} rounds (+20 each to warm up):"
    );
    for (i, name) in names.iter().enumerate() {
        let total = median(totals[i].clone());
        println!(
            "{name:<13} median {total:>6.3} s, {:.3} ms a request{}",
            total / n as f64 * 1e3,
            match i {
                0 => String::new(),
                _ => format!(
                    "   {:+.3} ms a request over direct",
                    median(added[i].clone())
                ),
            }
        );
    }
}

/// The resident memory (VmRSS, KiB) of `pid` now.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// `cmd` runs `sh -c SCRIPT` whose script says `ready` once it has done its work and
/// then waits on stdin: the resident memory of the process started and of every
/// descendant, by name, while the command waits. The shell's own is left out.
fn resident(mut cmd: Command) -> Vec<(String, u64)> {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut out = child.stdout.take().unwrap();
    let mut seen = Vec::new();
    let mut b = [0u8; 64];
    while !String::from_utf8_lossy(&seen).contains("ready") {
        let k = out.read(&mut b).unwrap();
        assert!(k > 0, "{cmd:?} ended before it was ready");
        seen.extend_from_slice(&b[..k]);
    }
    let top = child.id();
    let comm = std::fs::read_to_string(format!("/proc/{top}/comm")).unwrap_or_default();
    let mut found = vec![(comm.trim().to_string(), rss_kib(top))];
    for p in wardcell_tests::descendants(top) {
        if p.comm != "sh" {
            found.push((p.comm.clone(), rss_kib(p.pid)));
        }
    }
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success(), "{cmd:?} failed");
    found
}

/// What a run holds in memory, its broker, shim and proxy, while its command waits: a
/// zone whose proxy tunnels and one whose proxy intercepts, each after one request to the
/// small server; then bwrap's own processes with the same namespaces, for comparison.
fn memory(wardcell: &Path, base: &dyn Fn(&mut Command), port: u16) {
    let script = format!(
        "curl -4 -sS --fail -o /dev/null --noproxy example.invalid https://localhost:{port}/m && echo ready && {{ read x; exit 0; }}"
    );
    let shown = |what: &str, found: Vec<(String, u64)>| {
        let each: Vec<String> = found
            .iter()
            .map(|(name, kib)| format!("{name} {:.2}", *kib as f64 / 1024.0))
            .collect();
        println!("memory (VmRSS, MiB), {what}: {}", each.join(", "));
    };
    for (what, zone) in [("tunnel", "agent"), ("interception", "ic")] {
        let mut c = Command::new(wardcell);
        c.args(["run", "--zone", zone, "--", "sh", "-c", &script]);
        base(&mut c);
        shown(what, resident(c));
    }
    let mut c = Command::new("bwrap");
    c.args([
        "--unshare-user",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--die-with-parent",
        "sh",
        "-c",
        "echo ready && { read x; exit 0; }",
    ]);
    shown("bwrap", resident(c));
}
