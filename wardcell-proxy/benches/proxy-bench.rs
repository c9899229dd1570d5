//! Throughput and memory of the proxy (issue 5, item 7):
//!
//! - 1 GiB through a CONNECT tunnel vs the same transfer straight to the server;
//! - 1 GiB through the intercepting path (TLS terminated, credential attached, TLS again)
//!   vs the same HTTPS download straight from the server;
//! - the proxy's VmRSS when idle.
//!
//! Run: `cargo bench -p wardcell-proxy --bench proxy-bench` (release profile).
//! `WARDCELL_BENCH_RUNS` (rounds, default 7) and `WARDCELL_BENCH_MIB` (default 1024)
//! adjust it. Each round runs the direct and the proxied transfer back to back, in
//! alternating order, and the ratio reported is the median of the rounds' ratios: on a
//! small shared machine the direct baselines alone vary by 2x from run to run, and
//! pairing them is what makes the ratio repeatable.

#[path = "../tests/support/mod.rs"]
mod support;

use std::io::Write;
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::Request;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use wardcell_common::plan::SecretPlan;

use support::*;

fn env_or(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// CPU time (user + system) a process has used, in seconds.
fn cpu_secs(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    ticks / 100.0
}

/// One measured path: its name, its transfer, and the process whose CPU it adds.
struct Path<'a> {
    name: &'static str,
    proxy: Option<u32>,
    transfer: Box<dyn FnMut() -> u64 + 'a>,
}

/// The rate of one transfer of `size` bytes, in MiB/s.
fn timed(path: &mut Path<'_>, size: u64) -> f64 {
    let t = Instant::now();
    let n = (path.transfer)();
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(n, size, "{}: short transfer", path.name);
    size as f64 / (1024.0 * 1024.0) / secs
}

/// Compare `through` with `direct`, interleaved: each round runs both, in alternating
/// order, so that whatever else the machine is doing falls on both alike; the figure is
/// the median of the per-round ratios. Also prints each path's median rate and the CPU
/// time per GiB of this process (client and server) and of the proxy. Returns the median
/// ratio.
fn compare(rounds: u64, size: u64, direct: &mut Path<'_>, through: &mut Path<'_>) -> f64 {
    timed(direct, size); // warm-up
    timed(through, size);
    let bench_cpu = cpu_secs("self");
    let proxy_cpu = through.proxy.map(|p| cpu_secs(&p.to_string()));
    let (mut d, mut t, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let mut through_secs = 0.0;
    for round in 0..rounds {
        let (rd, rt) = if round % 2 == 0 {
            let rd = timed(direct, size);
            (rd, timed(through, size))
        } else {
            let rt = timed(through, size);
            (timed(direct, size), rt)
        };
        through_secs += size as f64 / (1024.0 * 1024.0) / rt;
        d.push(rd);
        t.push(rt);
        ratios.push(rt / rd);
    }
    let gib = (2 * rounds * size) as f64 / (1u64 << 30) as f64;
    let bench_cpu = (cpu_secs("self") - bench_cpu) / gib;
    let proxy_cpu = match (through.proxy, proxy_cpu) {
        (Some(p), Some(before)) => {
            let gib = (rounds * size) as f64 / (1u64 << 30) as f64;
            format!("{:.2}", (cpu_secs(&p.to_string()) - before) / gib)
        }
        _ => "-".into(),
    };
    let fmt = |v: &[f64], digits: usize| {
        v.iter()
            .map(|r| format!("{r:.digits$}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!(
        "{:<24} median {:>6.0} MiB/s   runs: {}",
        direct.name,
        median(d.clone()),
        fmt(&d, 0)
    );
    println!(
        "{:<24} median {:>6.0} MiB/s   runs: {}   ({:.1} s in all)",
        through.name,
        median(t.clone()),
        fmt(&t, 0),
        through_secs
    );
    println!(
        "{:<24} per round: {}   CPU s/GiB: client+server {bench_cpu:.2}, proxy {proxy_cpu}",
        "",
        fmt(&ratios, 2)
    );
    median(ratios)
}

fn tls_client(root: CertificateDer<'static>) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(root).unwrap();
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
}

/// GET `path` over TLS on `tcp` (already at the server or through a CONNECT); body bytes.
async fn https_get(
    tcp: tokio::net::TcpStream,
    tls: &tokio_rustls::TlsConnector,
    authority: &str,
    path: &str,
) -> u64 {
    let stream = tls
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .expect("TLS handshake");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = Request::get(path)
        .header("host", authority)
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());
    let mut body = resp.into_body();
    let mut n = 0u64;
    while let Some(frame) = body.frame().await {
        if let Ok(d) = frame.unwrap().into_data() {
            n += d.len() as u64;
        }
    }
    n
}

async fn connect_through(proxy_port: u16, authority: &str) -> tokio::net::TcpStream {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", proxy_port))
        .await
        .unwrap();
    s.set_nodelay(true).unwrap();
    s.write_all(format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(
            s.read(&mut b).await.unwrap(),
            1,
            "proxy closed during CONNECT"
        );
        head.push(b[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    s
}

fn main() {
    let runs = env_or("WARDCELL_BENCH_RUNS", 7);
    let size = env_or("WARDCELL_BENCH_MIB", 1024) * 1024 * 1024;
    println!(
        "wardcell-proxy benchmark: {} MiB per transfer, {runs} rounds (+1 warm-up), loopback",
        size >> 20
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    // --- Tunnel vs direct -------------------------------------------------------------
    let blob = blob_server(size);
    let tunnel_proxy = Proxy::start(spec(&[format!("127.0.0.1:{blob}")], vec![]), &[]);
    tunnel_proxy.ca_pem();
    std::thread::sleep(Duration::from_millis(300));
    let idle_plain = tunnel_proxy.rss_kib();

    let tunnel = compare(
        runs,
        size,
        &mut Path {
            name: "direct TCP",
            proxy: None,
            transfer: Box::new(|| {
                let mut s = TcpStream::connect(("127.0.0.1", blob)).unwrap();
                drain(&mut s).unwrap()
            }),
        },
        &mut Path {
            name: "CONNECT tunnel",
            proxy: Some(tunnel_proxy.child.id()),
            transfer: Box::new(|| {
                let (mut s, head) = raw_connect(tunnel_proxy.port, &format!("127.0.0.1:{blob}"));
                assert!(head.starts_with("HTTP/1.1 200"), "{head}");
                drain(&mut s).unwrap()
            }),
        },
    );
    std::thread::sleep(Duration::from_secs(1));
    let idle_after_tunnel = tunnel_proxy.rss_kib();
    drop(tunnel_proxy);

    // --- Interception vs direct TLS ----------------------------------------------------
    let ca = TestCa::new();
    let tls_port = https_server(&ca);
    let dir = TempDir::new();
    let secret = dir.write("token", b"bench-token", 0o600);
    let cred = basic_credential("bench", "localhost", &[], SecretPlan::File(secret));
    let mut ic_proxy = Proxy::start(
        spec(&[format!("localhost:{tls_port}")], vec![cred]),
        &[("SSL_CERT_FILE", path_str(&ca.pem_path))],
    );
    let proxy_ca = CertificateDer::from_pem_slice(ic_proxy.ca_pem().unwrap().as_bytes()).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let idle_intercepting = ic_proxy.rss_kib();

    let upstream_ca =
        CertificateDer::from_pem_slice(&std::fs::read(&ca.pem_path).unwrap()).unwrap();
    let direct_tls_client = tls_client(upstream_ca);
    let proxy_tls_client = tls_client(proxy_ca);
    let authority = format!("localhost:{tls_port}");
    let path = format!("/bytes/{size}");
    let ic_pid = ic_proxy.child.id();
    let ic_port = ic_proxy.port;
    let intercepted = compare(
        runs,
        size,
        &mut Path {
            name: "direct TLS (HTTPS GET)",
            proxy: None,
            transfer: Box::new(|| {
                rt.block_on(async {
                    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", tls_port))
                        .await
                        .unwrap();
                    tcp.set_nodelay(true).unwrap();
                    https_get(tcp, &direct_tls_client, &authority, &path).await
                })
            }),
        },
        &mut Path {
            name: "intercepted TLS",
            proxy: Some(ic_pid),
            transfer: Box::new(|| {
                rt.block_on(async {
                    let tcp = connect_through(ic_port, &authority).await;
                    https_get(tcp, &proxy_tls_client, &authority, &path).await
                })
            }),
        },
    );
    // The credential was attached every time.
    let mut attached = 0;
    while let Some(ev) = ic_proxy.next_event(Duration::from_millis(500)) {
        if let wardcell_common::protocol::ProxyEvent::Connect {
            credential: Some(_),
            ..
        } = ev
        {
            attached += 1;
        }
    }
    std::thread::sleep(Duration::from_secs(1));
    let idle_after_intercept = ic_proxy.rss_kib();

    let _ = std::io::stdout().flush();
    println!();
    println!("median of per-round ratios, each round both paths, in alternating order:");
    println!("tunnel / direct TCP:        {tunnel:.2}x   (target >= 0.90x)");
    println!("intercepted / direct TLS:   {intercepted:.2}x   (target >= 0.50x; credential attached on {attached} of {} requests)", runs + 1);
    println!(
        "proxy VmRSS idle, no credentials, after start:     {:>6} KiB",
        idle_plain
    );
    println!(
        "proxy VmRSS idle, no credentials, after transfers: {:>6} KiB",
        idle_after_tunnel
    );
    println!(
        "proxy VmRSS idle, intercepting, after start:       {:>6} KiB",
        idle_intercepting
    );
    println!(
        "proxy VmRSS idle, intercepting, after transfers:   {:>6} KiB   (target <= 8192 KiB)",
        idle_after_intercept
    );
}
