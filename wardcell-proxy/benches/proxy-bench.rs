//! Throughput and memory of the proxy (issue 5, item 7):
//!
//! - 1 GiB through a CONNECT tunnel vs the same transfer straight to the server;
//! - 1 GiB through the intercepting path (TLS terminated, credential attached, TLS again)
//!   vs the same HTTPS download straight from the server;
//! - the proxy's VmRSS when idle.
//!
//! Run: `cargo bench -p wardcell-proxy --bench proxy-bench` (release profile).
//! `WARDCELL_BENCH_RUNS` (default 5) and `WARDCELL_BENCH_MIB` (default 1024) adjust it.

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

/// Run `f` (which moves `size` bytes) `runs` times; the median rate in MiB/s. Also
/// prints the CPU time per GiB of this process (client and server) and of the proxy.
fn measure(
    name: &str,
    runs: u64,
    size: u64,
    proxy: Option<u32>,
    mut f: impl FnMut() -> u64,
) -> f64 {
    f(); // warm-up
    let bench_cpu = cpu_secs("self");
    let proxy_cpu = proxy.map(|p| cpu_secs(&p.to_string()));
    let rates: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            let n = f();
            let secs = t.elapsed().as_secs_f64();
            assert_eq!(n, size, "{name}: short transfer");
            size as f64 / (1024.0 * 1024.0) / secs
        })
        .collect();
    let gib = (runs * size) as f64 / (1u64 << 30) as f64;
    let bench_cpu = (cpu_secs("self") - bench_cpu) / gib;
    let proxy_cpu = match (proxy, proxy_cpu) {
        (Some(p), Some(before)) => format!("{:.2}", (cpu_secs(&p.to_string()) - before) / gib),
        _ => "-".into(),
    };
    let m = median(rates.clone());
    let all: Vec<String> = rates.iter().map(|r| format!("{r:.0}")).collect();
    println!(
        "{name:<24} median {m:>6.0} MiB/s  CPU s/GiB: client+server {bench_cpu:.2}, proxy {proxy_cpu}   runs: {}",
        all.join(" ")
    );
    m
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
    let runs = env_or("WARDCELL_BENCH_RUNS", 5);
    let size = env_or("WARDCELL_BENCH_MIB", 1024) * 1024 * 1024;
    println!(
        "wardcell-proxy benchmark: {} MiB per transfer, {runs} runs each (+1 warm-up), loopback",
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

    let direct = measure("direct TCP", runs, size, None, || {
        let mut s = TcpStream::connect(("127.0.0.1", blob)).unwrap();
        drain(&mut s).unwrap()
    });
    let tunnel = measure(
        "CONNECT tunnel",
        runs,
        size,
        Some(tunnel_proxy.child.id()),
        || {
            let (mut s, head) = raw_connect(tunnel_proxy.port, &format!("127.0.0.1:{blob}"));
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            drain(&mut s).unwrap()
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
    let direct_tls = measure("direct TLS (HTTPS GET)", runs, size, None, || {
        rt.block_on(async {
            let tcp = tokio::net::TcpStream::connect(("127.0.0.1", tls_port))
                .await
                .unwrap();
            tcp.set_nodelay(true).unwrap();
            https_get(tcp, &direct_tls_client, &authority, &path).await
        })
    });
    let intercepted = measure(
        "intercepted TLS",
        runs,
        size,
        Some(ic_proxy.child.id()),
        || {
            rt.block_on(async {
                let tcp = connect_through(ic_proxy.port, &authority).await;
                https_get(tcp, &proxy_tls_client, &authority, &path).await
            })
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
    println!(
        "tunnel / direct TCP:        {:.2}x   (target >= 0.90x)",
        tunnel / direct
    );
    println!("intercepted / direct TLS:   {:.2}x   (target >= 0.50x; credential attached on {attached} of {} requests)", intercepted / direct_tls, runs + 1);
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
