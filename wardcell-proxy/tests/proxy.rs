//! The proxy end to end: the real binary, started as the broker starts it, with real
//! servers and real clients (curl, raw sockets) on loopback.

mod support;

use std::io::{Read, Write};
use std::time::Duration;

use base64::Engine;
use wardcell_common::plan::SecretPlan;
use wardcell_common::protocol::ProxyEvent;

use support::*;

const SECRET: &str = "tok-5f1e9a-never-printed";

fn connect_event(host: &str, port: u16) -> impl Fn(&ProxyEvent) -> bool + '_ {
    move |e| matches!(e, ProxyEvent::Connect { host: h, port: p, .. } if h == host && *p == port)
}

fn assert_denied(ev: ProxyEvent, host: &str, port: u16, why: &str) {
    match ev {
        ProxyEvent::Denied {
            host: h,
            port: p,
            reason,
        } => {
            assert_eq!((h.as_str(), p), (host, port));
            assert!(reason.contains(why), "reason {reason:?} lacks {why:?}");
        }
        other => panic!("expected Denied for {host}:{port}, got {other:?}"),
    }
}

/// Nothing the proxy said or printed contains the secret, raw or base64-encoded.
fn assert_secret_absent(p: &Proxy) {
    let b64 = base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{SECRET}"));
    let all = format!("{:?}\n{}", p.seen, p.stderr());
    assert!(!all.contains(SECRET), "secret leaked: {all}");
    assert!(!all.contains(&b64), "encoded secret leaked: {all}");
}

#[test]
fn version_flag() {
    let out = std::process::Command::new(PROXY)
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("wardcell-proxy {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn without_credentials_ready_has_no_ca_and_the_proxy_is_confined() {
    let p = Proxy::start(spec(&["localhost:1".into()], vec![]), &[]);
    assert_eq!(p.ca_pem(), None);
    let status = p.status_text();
    assert_eq!(status_field(&status, "NoNewPrivs:"), 1, "{status}");
    assert_eq!(status_field(&status, "Seccomp:"), 2, "{status}");
}

#[test]
fn connect_tunnel_carries_bytes_and_reports_them() {
    let upstream = http_server();
    let mut p = Proxy::start(spec(&[format!("127.0.0.1:{upstream}")], vec![]), &[]);
    let (mut s, head) = raw_connect(p.port, &format!("127.0.0.1:{upstream}"));
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let request = "GET /bytes/300000 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    s.write_all(request.as_bytes()).unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.starts_with("HTTP/1.1 200"),
        "{}",
        &text[..text.len().min(200)]
    );
    assert!(got.ends_with(&[b'x'; 1000]));
    drop(s);
    match p.event() {
        ProxyEvent::Connect {
            host,
            port,
            credential,
            bytes_up,
            bytes_down,
            connections,
        } => {
            assert_eq!(
                (host.as_str(), port, credential, connections),
                ("127.0.0.1", upstream, None, 1)
            );
            assert_eq!(bytes_up, request.len() as u64);
            assert_eq!(bytes_down, got.len() as u64);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn off_list_connect_and_plain_http_get_403_and_denied() {
    let upstream = http_server();
    let other = http_server();
    let mut p = Proxy::start(spec(&[format!("127.0.0.1:{upstream}")], vec![]), &[]);

    // Plain HTTP to another port of an allowed host.
    let r = curl(&p, &format!("http://127.0.0.1:{other}/x"), &[]);
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("not allowed in zone push"), "{}", r.body);
    assert_denied(p.event(), "127.0.0.1", other, "not in the allow list");

    // CONNECT to a host that is not on the list (refused before any lookup).
    let (_s, head) = raw_connect(p.port, "example.com:443");
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    assert_denied(p.event(), "example.com", 443, "not in the allow list");

    // curl's own CONNECT for https.
    let r = curl(&p, &format!("https://127.0.0.1:{other}/"), &[]);
    assert_ne!(r.status, 200);
    assert_denied(p.event(), "127.0.0.1", other, "not in the allow list");

    // An https:// URL in absolute form is not something this proxy forwards.
    let mut s = std::net::TcpStream::connect(("127.0.0.1", p.port)).unwrap();
    write!(
        s,
        "GET https://127.0.0.1:{upstream}/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    )
    .unwrap();
    assert!(read_head(&mut s).starts_with("HTTP/1.1 403"));
    assert_denied(
        p.event(),
        "127.0.0.1",
        upstream,
        "only http:// URLs and CONNECT",
    );

    // An origin-form request is not a proxy request at all.
    let mut s = std::net::TcpStream::connect(("127.0.0.1", p.port)).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    assert!(read_head(&mut s).starts_with("HTTP/1.1 400"));
}

#[test]
fn a_name_resolving_to_loopback_needs_an_explicit_entry() {
    let upstream = http_server();
    // A name from the hosts file that maps to loopback, if this machine has one.
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    let hosts_name = hosts
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let ip: std::net::IpAddr = f.next()?.parse().ok()?;
            ip.is_loopback()
                .then_some(f.map(str::to_string).collect::<Vec<_>>())
        })
        .flatten()
        .find(|n| n != "localhost" && !n.starts_with("localhost.") && !n.contains(':'));
    let mut allow = vec![format!("127.1:{upstream}"), format!("localhost:{upstream}")];
    allow.extend(hosts_name.iter().map(|n| format!("{n}:{upstream}")));
    let mut p = Proxy::start(spec(&allow, vec![]), &[]);

    // "127.1" is a name to the proxy; getaddrinfo says 127.0.0.1.
    let (_s, head) = raw_connect(p.port, &format!("127.1:{upstream}"));
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    assert_denied(
        p.event(),
        "127.1",
        upstream,
        "a loopback address, which names under network.allow never reach: add \"127.1:",
    );
    // (curl would rewrite 127.1 to 127.0.0.1 itself, so plain HTTP is tried raw.)
    let mut s = std::net::TcpStream::connect(("127.0.0.1", p.port)).unwrap();
    write!(
        s,
        "GET http://127.1:{upstream}/ HTTP/1.1\r\nHost: 127.1\r\n\r\n"
    )
    .unwrap();
    assert!(read_head(&mut s).starts_with("HTTP/1.1 403"));
    assert_denied(
        p.event(),
        "127.1",
        upstream,
        &format!("add \"127.1:{upstream}\" under network.internal"),
    );

    // Resolved through the hosts file, under the proxy's Landlock and seccomp.
    if let Some(name) = &hosts_name {
        let r = curl(&p, &format!("http://{name}:{upstream}/"), &[]);
        assert_eq!(r.status, 403, "{}", r.body);
        assert_denied(p.event(), name, upstream, "loopback");
    }

    // `localhost` named explicitly admits loopback.
    let r = curl(&p, &format!("http://localhost:{upstream}/hello"), &[]);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.starts_with("GET /hello\n"), "{}", r.body);
    assert!(connect_event("localhost", upstream)(&p.event()));
}

// Issue 20, item 1: the same names under `network.internal` reach loopback, by CONNECT
// and by plain HTTP, under the proxy's confinement; the refusal above says how.
#[test]
fn a_name_under_internal_reaches_loopback() {
    let upstream = http_server();
    let mut internal = vec![format!("127.1:{upstream}")];
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    let hosts_name = hosts
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let ip: std::net::IpAddr = f.next()?.parse().ok()?;
            ip.is_loopback()
                .then_some(f.map(str::to_string).collect::<Vec<_>>())
        })
        .flatten()
        .find(|n| n != "localhost" && !n.starts_with("localhost.") && !n.contains(':'));
    internal.extend(hosts_name.iter().map(|n| format!("{n}:{upstream}")));
    let mut sp = spec(&[], vec![]);
    sp.internal = internal;
    let p = Proxy::start(sp, &[]);
    let (_s, head) = raw_connect(p.port, &format!("127.1:{upstream}"));
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut s = std::net::TcpStream::connect(("127.0.0.1", p.port)).unwrap();
    write!(
        s,
        "GET http://127.1:{upstream}/internal HTTP/1.1\r\nHost: 127.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    assert!(read_head(&mut s).starts_with("HTTP/1.1 200"));
    if let Some(name) = &hosts_name {
        let r = curl(&p, &format!("http://{name}:{upstream}/by-hosts"), &[]);
        assert_eq!(r.status, 200, "{}", r.body);
    }
}

#[test]
fn plain_http_is_forwarded_without_hop_by_hop_or_proxy_headers() {
    let upstream = http_server();
    let mut p = Proxy::start(spec(&[format!("127.0.0.1:{upstream}")], vec![]), &[]);
    let r = curl(
        &p,
        &format!("http://127.0.0.1:{upstream}/echo?q=1"),
        &[
            "-H",
            "Proxy-Authorization: Basic c2VjcmV0OnNlY3JldA==",
            "-H",
            "Proxy-Custom: 1",
            "-H",
            "Connection: X-Hop",
            "-H",
            "X-Hop: 1",
            "-H",
            "Keep-Alive: timeout=5",
            "-H",
            "X-Kept: yes",
            "-H",
            "Host: elsewhere.example",
        ],
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let body = r.body.to_ascii_lowercase();
    assert!(body.starts_with("get /echo?q=1\n"), "{body}");
    assert!(body.contains("x-kept: yes"), "{body}");
    assert!(
        body.contains(&format!("host: 127.0.0.1:{upstream}\n")),
        "{body}"
    );
    for gone in ["proxy-", "x-hop", "keep-alive", "elsewhere"] {
        assert!(!body.contains(gone), "{gone} reached upstream: {body}");
    }
    match p.event() {
        ProxyEvent::Connect {
            credential,
            bytes_down,
            ..
        } => {
            assert_eq!(credential, None);
            assert!(bytes_down > 0);
        }
        other => panic!("{other:?}"),
    }
}

/// A proxy for an authenticated zone: credential `company-git` (basic) for `localhost`
/// under `/company/*`, an HTTPS upstream trusted through SSL_CERT_FILE, and a plain one.
struct Authenticated {
    p: Proxy,
    tls: u16,
    plain: u16,
    ca_file: std::path::PathBuf,
    _dir: TempDir,
    _ca: TestCa,
}

fn authenticated() -> Authenticated {
    let ca = TestCa::new();
    let tls = https_server(&ca);
    let plain = http_server();
    let dir = TempDir::new();
    let secret = dir.write("token", format!("{SECRET}\n").as_bytes(), 0o600);
    let cred = basic_credential(
        "company-git",
        &format!("localhost:{tls}"),
        &["/company/*"],
        SecretPlan::File(secret),
    );
    let p = Proxy::start(
        spec(
            &[format!("localhost:{tls}"), format!("localhost:{plain}")],
            vec![cred],
        ),
        &[("SSL_CERT_FILE", path_str(&ca.pem_path))],
    );
    let pem = p.ca_pem().expect("an intercepting proxy announces its CA");
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
    let ca_file = dir.write("proxy-ca.pem", pem.as_bytes(), 0o644);
    Authenticated {
        p,
        tls,
        plain,
        ca_file,
        _dir: dir,
        _ca: ca,
    }
}

#[test]
fn credential_attached_through_interception_on_matching_paths_only() {
    let mut a = authenticated();
    let expected = format!(
        "authorization: Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{SECRET}"))
    );
    let cacert = path_str(&a.ca_file).to_string();

    // Matching path: attached, even over what the client sent itself.
    let r = curl(
        &a.p,
        &format!("https://localhost:{}/company/repo.git/info/refs", a.tls),
        &[
            "--cacert",
            &cacert,
            "-H",
            "Authorization: Bearer client-own",
            "-H",
            "Proxy-Secret: 1",
        ],
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains(&expected), "{}", r.body);
    assert!(
        !r.body.contains("client-own") && !r.body.to_ascii_lowercase().contains("proxy-"),
        "{}",
        r.body
    );
    assert!(
        r.body.contains(&format!("host: localhost:{}\n", a.tls)),
        "{}",
        r.body
    );
    match a.p.event() {
        ProxyEvent::Connect {
            host,
            port,
            credential,
            ..
        } => {
            assert_eq!((host.as_str(), port), ("localhost", a.tls));
            assert_eq!(credential.as_deref(), Some("company-git"));
        }
        other => panic!("{other:?}"),
    }

    // Other path, same host: intercepted, no credential; the client's own header stays.
    let r = curl(
        &a.p,
        &format!("https://localhost:{}/other/x", a.tls),
        &[
            "--cacert",
            &cacert,
            "-H",
            "Authorization: Bearer client-own",
        ],
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(!r.body.contains("Basic "), "{}", r.body);
    assert!(
        r.body.contains("authorization: Bearer client-own"),
        "{}",
        r.body
    );
    match a.p.event() {
        ProxyEvent::Connect { credential, .. } => assert_eq!(credential, None),
        other => panic!("{other:?}"),
    }

    // An ambiguous path on the credential's host: refused with one line, nothing sent
    // upstream (the server would have echoed the request), audited as denied.
    for path in [
        "/company/../admin",
        "/company/a%2fb",
        "/company//a",
        "/company/a;b",
    ] {
        let r = curl(
            &a.p,
            &format!("https://localhost:{}{path}", a.tls),
            &["--cacert", &cacert, "--path-as-is"],
        );
        assert_eq!(r.status, 400, "{path}: {}", r.body);
        assert!(
            r.body.starts_with("wardcell: ") && r.body.contains("ambiguous"),
            "{}",
            r.body
        );
        assert_eq!(r.body.lines().count(), 1, "{}", r.body);
        assert!(!r.body.contains("authorization"), "{}", r.body);
        assert_denied(a.p.event(), "localhost", a.tls, "ambiguous path");
    }
    // A method the credential does not name: sent, without it.
    let r = curl(
        &a.p,
        &format!("https://localhost:{}/company/repo.git/info/refs", a.tls),
        &["--cacert", &cacert, "-X", "OPTIONS"],
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(!r.body.contains("authorization"), "{}", r.body);
    match a.p.event() {
        ProxyEvent::Connect { credential, .. } => assert_eq!(credential, None),
        other => panic!("{other:?}"),
    }

    // Plain HTTP to the same host and a matching path: never a credential.
    let r = curl(
        &a.p,
        &format!("http://localhost:{}/company/repo", a.plain),
        &[],
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(!r.body.contains("authorization"), "{}", r.body);
    match a.p.event() {
        ProxyEvent::Connect {
            credential, port, ..
        } => {
            assert_eq!((credential, port), (None, a.plain));
        }
        other => panic!("{other:?}"),
    }
    assert_secret_absent(&a.p);
}

#[test]
fn chunked_upload_over_one_mib_arrives_intact_through_interception() {
    let mut a = authenticated();
    let dir = TempDir::new();
    // 3 MiB of deterministic, non-repeating bytes.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let data: Vec<u8> = (0..3 * 1024 * 1024)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let file = dir.write("upload.bin", &data, 0o600);
    let cacert = path_str(&a.ca_file).to_string();
    let r = curl(
        &a.p,
        &format!(
            "https://localhost:{}/company/repo.git/git-receive-pack",
            a.tls
        ),
        &[
            "--cacert",
            &cacert,
            "-H",
            "Transfer-Encoding: chunked",
            "-H",
            "Content-Type: application/x-git-receive-pack-request",
            "--data-binary",
            &format!("@{}", path_str(&file)),
        ],
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.body.contains(&format!("body-length: {}\n", data.len())),
        "{}",
        r.body
    );
    assert!(
        r.body
            .contains(&format!("body-sha256: {}\n", sha256_hex(&data))),
        "{}",
        r.body
    );
    assert!(r.body.contains("authorization: Basic "), "{}", r.body);
    match a.p.event() {
        ProxyEvent::Connect {
            bytes_up,
            credential,
            ..
        } => {
            assert_eq!(bytes_up, data.len() as u64);
            assert_eq!(credential.as_deref(), Some("company-git"));
        }
        other => panic!("{other:?}"),
    }
    assert_secret_absent(&a.p);
}

#[test]
fn an_untrusted_upstream_gets_no_request_and_is_audited() {
    let ca = TestCa::new();
    let tls = https_server(&ca);
    let other_ca = TestCa::new(); // the proxy trusts this one, not the server's
    let dir = TempDir::new();
    let secret = dir.write("token", SECRET.as_bytes(), 0o600);
    let cred = basic_credential(
        "company-git",
        &format!("localhost:{tls}"),
        &[],
        SecretPlan::File(secret),
    );
    let mut p = Proxy::start(
        spec(&[format!("localhost:{tls}")], vec![cred]),
        &[("SSL_CERT_FILE", path_str(&other_ca.pem_path))],
    );
    let ca_file = dir.write("proxy-ca.pem", p.ca_pem().unwrap().as_bytes(), 0o644);
    let r = curl(
        &p,
        &format!("https://localhost:{tls}/x"),
        &["--cacert", path_str(&ca_file)],
    );
    assert_eq!(r.status, 502, "{}", r.body);
    assert_denied(p.event(), "localhost", tls, "TLS to the upstream server");
    assert_secret_absent(&p);
}

#[test]
fn credential_file_others_can_read_fails_the_start() {
    let dir = TempDir::new();
    let secret = dir.write("token", SECRET.as_bytes(), 0o644);
    let cred = basic_credential(
        "company-git",
        "localhost",
        &[],
        SecretPlan::File(secret.clone()),
    );
    let mut p = Proxy::start(spec(&["localhost:443".into()], vec![cred]), &[]);
    match p.first() {
        ProxyEvent::Failed { message } => {
            assert!(message.contains(path_str(&secret)), "{message}");
            assert!(message.contains("chmod 600"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let st = p
        .wait_exit(Duration::from_secs(10))
        .expect("the proxy exits");
    assert_eq!(st.code(), Some(1));
    assert_secret_absent(&p);
}

#[test]
fn missing_secret_variable_fails_the_start() {
    let cred = basic_credential(
        "company-git",
        "localhost",
        &[],
        SecretPlan::Env("COMPANY_GIT_TOKEN".into()),
    );
    let p = Proxy::start(spec(&["localhost:443".into()], vec![cred.clone()]), &[]);
    match p.first() {
        ProxyEvent::Failed { message } => assert!(
            message.contains("COMPANY_GIT_TOKEN is not set"),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }
    // And with the variable set, from the proxy's own environment, it starts.
    let ca = TestCa::new();
    let p = Proxy::start(
        spec(&["localhost:443".into()], vec![cred]),
        &[
            ("COMPANY_GIT_TOKEN", SECRET),
            ("SSL_CERT_FILE", path_str(&ca.pem_path)),
        ],
    );
    assert!(p.ca_pem().is_some());
    assert_secret_absent(&p);
}

#[test]
fn the_proxy_exits_when_the_broker_goes_away() {
    let mut p = Proxy::start(spec(&["localhost:1".into()], vec![]), &[]);
    p.ca_pem();
    p.close_control();
    let st = p
        .wait_exit(Duration::from_secs(10))
        .expect("the proxy exits");
    assert!(st.success(), "{st:?}");
}

/// A tunnel whose upstream sends many tiny segments to a client that reads late, and keeps
/// its end open until the client has had everything: every byte arrives, in order, pushed
/// along by the proxy itself (no end of file wakes it), and is counted.
#[test]
fn a_tunnel_full_of_tiny_segments_still_delivers_everything() {
    use std::net::TcpListener;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let upstream = listener.local_addr().unwrap().port();
    const WRITES: usize = 20_000;
    // The upstream keeps its connection open until the client has had every byte: bytes
    // left behind in the proxy would not be pushed along by the upstream's end of file.
    let (written, all_written) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_nodelay(true).unwrap();
        for i in 0..WRITES {
            s.write_all(format!("{:06}\n", i % 1_000_000).as_bytes())
                .unwrap();
        }
        let _ = written.send(());
        let mut done = [0u8; 5];
        s.read_exact(&mut done).unwrap();
        assert_eq!(&done, b"done\n");
    });
    let mut p = Proxy::start(spec(&[format!("127.0.0.1:{upstream}")], vec![]), &[]);
    let (mut s, head) = raw_connect(p.port, &format!("127.0.0.1:{upstream}"));
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // Let the upstream's segments pile up in the proxy before reading any: until the
    // upstream has written them all (or, with the buffers on the way full, for 10 s).
    let _ = all_written.recv_timeout(Duration::from_secs(10));
    let want: Vec<u8> = (0..WRITES)
        .flat_map(|i| format!("{:06}\n", i).into_bytes())
        .collect();
    let mut got = vec![0u8; want.len()];
    s.read_exact(&mut got)
        .expect("every byte the upstream sent, without its end of file to push them along");
    assert!(got == want, "the bytes arrived out of order or changed");
    s.write_all(b"done\n").unwrap();
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
    server.join().unwrap();
    drop(s);
    match p.event() {
        ProxyEvent::Connect {
            bytes_up,
            bytes_down,
            ..
        } => assert_eq!((bytes_up, bytes_down), (5, want.len() as u64)),
        other => panic!("{other:?}"),
    }
}

/// curl through the proxy with `-N` (it writes what arrives at once): the first line of
/// the body as soon as it comes, then, once `go` is set, the rest and the status.
fn stream_through(
    p: &Proxy,
    url: &str,
    args: &[&str],
    go: &std::sync::atomic::AtomicBool,
) -> (String, String, String) {
    use std::io::BufRead;
    let mut child = std::process::Command::new("curl")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .args([
            "-sS",
            "-N",
            "--max-time",
            "30",
            "--proxy",
            &p.url(),
            "--noproxy",
            "",
        ])
        .args(["-w", "\nstatus=%{http_code}\n"])
        .args(args)
        .arg(url)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut first = String::new();
        let _ = out.read_line(&mut first);
        let _ = tx.send(first);
        let mut rest = String::new();
        let _ = out.read_to_string(&mut rest);
        rest
    });
    // The first event arrives while the server still holds the second.
    let first = rx.recv_timeout(Duration::from_secs(5)).unwrap_or_default();
    go.store(true, std::sync::atomic::Ordering::SeqCst);
    let rest = reader.join().unwrap();
    let mut err = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut err);
    let _ = child.wait();
    (first, rest, err)
}

// Issue 20, item 3: an event stream passes through interception whole, each event as
// it arrives: the first reaches the client while the server still holds the second, and
// a close-delimited body (no length, not chunked) is not cut off by the close, which
// comes without TLS's close_notify. Chunked too.
#[test]
fn an_event_stream_passes_through_interception_whole_and_at_once() {
    for chunked in [false, true] {
        let ca = TestCa::new();
        let (port, go) = event_stream_server(Some(&ca), chunked);
        let dir = TempDir::new();
        let secret = dir.write("token", format!("{SECRET}\n").as_bytes(), 0o600);
        let cred = basic_credential(
            "company-git",
            &format!("localhost:{port}"),
            &["/company/*"],
            SecretPlan::File(secret),
        );
        let mut p = Proxy::start(
            spec(&[format!("localhost:{port}")], vec![cred]),
            &[("SSL_CERT_FILE", path_str(&ca.pem_path))],
        );
        let ca_file = dir.write("proxy-ca.pem", p.ca_pem().unwrap().as_bytes(), 0o644);
        let (first, rest, err) = stream_through(
            &p,
            &format!("https://localhost:{port}/company/events"),
            &["--cacert", path_str(&ca_file)],
            &go,
        );
        assert_eq!(
            first, "data: one\n",
            "chunked {chunked}: before the second; {err}"
        );
        assert_whole(&rest, &err);
        assert!(matches!(
            p.event(),
            ProxyEvent::Connect {
                credential: Some(_),
                ..
            }
        ));
    }
}

// The same through plain HTTP forwarding.
#[test]
fn an_event_stream_passes_through_plain_forwarding_whole_and_at_once() {
    for chunked in [false, true] {
        let (port, go) = event_stream_server(None, chunked);
        let p = Proxy::start(spec(&[format!("localhost:{port}")], vec![]), &[]);
        let (first, rest, err) =
            stream_through(&p, &format!("http://localhost:{port}/events"), &[], &go);
        assert_eq!(first, "data: one\n", "chunked {chunked}: {err}");
        assert_whole(&rest, &err);
    }
}

/// After the first event: the empty line, 300,000 bytes, the second event, and the
/// status; curl saw a clean end.
fn assert_whole(rest: &str, err: &str) {
    let want = format!("\n{}data: two\n\n\nstatus=200\n", "y".repeat(300_000));
    assert!(
        rest == want,
        "{} bytes, ending {:?}; {err}",
        rest.len(),
        &rest[rest.len().saturating_sub(40)..]
    );
    assert_eq!(err, "", "the stream ended cleanly");
}

/// The proxy's seccomp policy, installed in a process of its own (this test binary run
/// again), refuses what the proxy never does: splice, tee and vmsplice answer EPERM where
/// an unconfined process gets EBADF for the same bad descriptors, and an ordinary call
/// still works.
#[test]
fn the_proxys_policy_refuses_splicing() {
    if std::env::var_os("WARDCELL_TEST_SECCOMP_CHILD").is_some() {
        wardcell_proxy::sys::set_no_new_privs().unwrap();
        wardcell_proxy::seccomp::install().unwrap();
        // Each call's errno, read right after it.
        let errno = |r: i64| (r < 0).then(|| std::io::Error::last_os_error().raw_os_error());
        // SAFETY: bad descriptors and null pointers: each call fails before touching memory.
        let got = unsafe {
            [
                errno(libc::syscall(libc::SYS_splice, -1, 0, -1, 0, 1, 0)),
                errno(libc::syscall(libc::SYS_tee, -1, -1, 1, 0)),
                errno(libc::syscall(libc::SYS_vmsplice, -1, 0, 0, 0)),
                errno(libc::syscall(libc::SYS_close, -1)),
            ]
        };
        let got = got.map(Option::flatten);
        println!("errnos {got:?}");
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "the_proxys_policy_refuses_splicing",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("WARDCELL_TEST_SECCOMP_CHILD", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let (eperm, ebadf) = (libc::EPERM, libc::EBADF);
    let want = format!("errnos [Some({eperm}), Some({eperm}), Some({eperm}), Some({ebadf})]");
    assert!(
        text.contains(&want),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A tunnel passes each side's half-close on and keeps the other direction open: the
/// client sends more than a tunnel's buffer holds and shuts down its write side; the
/// server reads to that end, then answers with as much again and closes. Then the other
/// way: the server sends and shuts down first, the client reads to the end and only then
/// sends, and the server still gets it. Every byte arrives in order, and the event counts
/// them all.
#[test]
fn a_tunnel_passes_half_closes_on_both_ways() {
    use std::net::{Shutdown, TcpListener};
    let size = 3 * 256 * 1024 + 12_345;
    let data: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = server.local_addr().unwrap().port();
    let expected = data.clone();
    let upstream = std::thread::spawn(move || {
        // 1. Read to the client's end, then answer with the bytes reversed, then close.
        let (mut s, _) = server.accept().unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        assert_eq!(got, expected, "the client's bytes, to its half-close");
        let answer: Vec<u8> = got.iter().rev().copied().collect();
        s.write_all(&answer).unwrap();
        drop(s);
        // 2. Send and shut down first, then read what the client sends after.
        let (mut s, _) = server.accept().unwrap();
        s.write_all(&expected).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        let mut after = Vec::new();
        s.read_to_end(&mut after).unwrap();
        after
    });
    let authority = format!("127.0.0.1:{port}");
    let mut p = Proxy::start(spec(std::slice::from_ref(&authority), vec![]), &[]);

    let (mut s, head) = raw_connect(p.port, &authority);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    s.write_all(&data).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).unwrap();
    assert!(
        answer.iter().eq(data.iter().rev()),
        "the answer, reversed, whole"
    );
    drop(s);
    let counts = |e: ProxyEvent| match e {
        ProxyEvent::Connect {
            bytes_up,
            bytes_down,
            ..
        } => (bytes_up, bytes_down),
        other => panic!("{other:?}"),
    };
    assert_eq!(counts(p.event()), (size as u64, size as u64));

    let (mut s, head) = raw_connect(p.port, &authority);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    assert!(got == data, "the server's bytes, to its half-close");
    s.write_all(b"after the server's end").unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    assert_eq!(upstream.join().unwrap(), b"after the server's end");
    drop(s);
    assert_eq!(counts(p.event()), (22, size as u64));
}

/// A sandbox that opens tunnels and never reads while their servers push cannot make
/// the proxy hold more than a tunnel's buffers each: 64 such tunnels, each server pushing
/// 16 MiB, grow the proxy by well under 1 MiB a tunnel (measured: 280 KiB, the buffer one
/// stalled read filled; the kernel's socket buffers hold the rest, and the servers stall).
#[test]
fn tunnels_never_read_hold_a_bounded_buffer_each() {
    use std::net::TcpListener;
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = server.local_addr().unwrap().port();
    let pushed = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = pushed.clone();
    std::thread::spawn(move || {
        for s in server.incoming() {
            let (mut s, pushed) = (s.unwrap(), counter.clone());
            std::thread::spawn(move || {
                let chunk = vec![7u8; 64 * 1024];
                for _ in 0..256 {
                    if s.write_all(&chunk).is_err() {
                        return;
                    }
                    pushed.fetch_add(chunk.len() as u64, std::sync::atomic::Ordering::Relaxed);
                }
            });
        }
    });
    let authority = format!("127.0.0.1:{port}");
    let p = Proxy::start(spec(std::slice::from_ref(&authority), vec![]), &[]);
    let before = p.rss_kib();
    let tunnels: Vec<_> = (0..64)
        .map(|_| {
            let (s, head) = raw_connect(p.port, &authority);
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            s
        })
        .collect();
    // Until the servers stall: nothing more pushed for half a second (at most 20 s).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut last = u64::MAX;
    while std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        let now = pushed.load(std::sync::atomic::Ordering::Relaxed);
        if now == last {
            break;
        }
        last = now;
    }
    // Enough that every tunnel's buffer could have filled (here, about 600 MB).
    assert!(
        last > 64 * 256 * 1024,
        "the servers pushed only {last} bytes"
    );
    let grown = p.rss_kib().saturating_sub(before);
    assert!(
        grown < 64 * 1024,
        "64 stalled tunnels grew the proxy by {grown} KiB"
    );
    drop(tunnels);
}
