//! WebSocket through interception: a real RFC 6455 server (tungstenite, over rustls) on
//! the host behind a host a credential names, and a real client (tungstenite, in
//! wardcell-probe) inside the sandbox. The upgrade request carries the key the proxy
//! attached (the sandbox sent the placeholder), the server answers 101, and messages flow
//! both ways until the client closes; the exchange is audited with its credential and
//! its bytes. A handshake under a path the credential does not cover goes without it.

use std::fs;
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use serde_json::Value;
use tungstenite::handshake::server::{Request, Response};
use tungstenite::Message;
use wardcell_tests::{both, Fixture};

const PLACEHOLDER: &str = "wardcell-placeholder-not-a-secret";

/// The WebSocket server: TLS for `localhost` from a CA of its own; it records each
/// handshake's path and `Authorization`, greets, and echoes every text message.
struct WsServer {
    port: u16,
    ca_pem: PathBuf,
    seen: Arc<Mutex<Vec<String>>>,
}

impl WsServer {
    fn start(fx: &Fixture) -> WsServer {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::default();
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "wardcell websocket test CA");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .signed_by(&key, &ca, &ca_key)
            .unwrap();
        let base = fx.dir.file_name().unwrap().to_str().unwrap().to_string();
        let ca_pem = wardcell_tests::staged()
            .root
            .join(format!("{base}.ws-ca.pem"));
        fs::write(&ca_pem, ca.pem()).unwrap();
        fs::set_permissions(&ca_pem, fs::Permissions::from_mode(0o644)).unwrap();
        let cfg = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap();
        let cfg = Arc::new(cfg);
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let seen2 = seen.clone();
        std::thread::spawn(move || {
            for c in l.incoming().flatten() {
                let (cfg, seen) = (cfg.clone(), seen2.clone());
                std::thread::spawn(move || serve(c, cfg, &seen));
            }
        });
        WsServer { port, ca_pem, seen }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

// tungstenite's handshake callback answers a refusal with a whole HTTP response.
#[allow(clippy::result_large_err)]
fn serve(c: TcpStream, cfg: Arc<rustls::ServerConfig>, seen: &Mutex<Vec<String>>) {
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let tls = rustls::StreamOwned::new(rustls::ServerConnection::new(cfg).unwrap(), c);
    let record = |req: &Request, resp: Response| {
        let auth = req
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-");
        seen.lock()
            .unwrap()
            .push(format!("{} {auth}", req.uri().path()));
        Ok(resp)
    };
    let Ok(mut ws) = tungstenite::accept_hdr(tls, record) else {
        return;
    };
    let _ = ws.send(Message::text("hello from the server"));
    // Until the closing handshake is done (a Close read is answered by the next read).
    while let Ok(m) = ws.read() {
        if let Message::Text(t) = m {
            let _ = ws.send(Message::text(format!("echo: {t}")));
        }
    }
}

fn config(fx: &Fixture, port: u16) {
    fx.config(&format!(
        r#"
[zones.agent]
profile = "ws"
default = true
authenticated = true

[profiles.ws]
extends = "readonly"
read = ["{bin}"]
network = {{ allow = ["localhost:{port}"] }}
credentials = ["api"]

[credentials.api]
hosts = ["localhost:{port}"]
paths = ["/v1/*"]
methods = ["GET", "POST"]
scheme = "bearer"
placeholder = "OPENAI_API_KEY"
secret = {{ env = "OPENAI_API_KEY" }}
"#,
        bin = fx.bin.display()
    ));
}

/// Every audit record of every run of this fixture.
fn audit(fx: &Fixture) -> Vec<Value> {
    let dir = fx.home.join(".local/state/wardcell/runs");
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap() {
        let text = fs::read_to_string(e.unwrap().path()).unwrap_or_default();
        out.extend(text.lines().filter_map(|l| serde_json::from_str(l).ok()));
    }
    out
}

both!(
    websocket_upgrades_carry_the_credential_and_frames_both_ways,
    |fx| {
        let server = WsServer::start(&fx);
        config(&fx, server.port);
        let key = format!("sk-ws-{}", std::process::id());
        let port = server.port.to_string();
        let probe = fx.bin.join("wardcell-probe");
        let ws = |path: &str| {
            let args = [
                "run",
                "--",
                probe.to_str().unwrap(),
                "ws",
                "localhost",
                &port,
                path,
                "one",
                "two",
            ];
            let out: wardcell_tests::Out = fx
                .cmd(&args)
                .env("SSL_CERT_FILE", &server.ca_pem)
                .env("OPENAI_API_KEY", &key)
                .output()
                .unwrap()
                .into();
            out
        };
        let out = ws("/v1/responses");
        out.ok();
        for want in [
            "status 101",
            "got hello from the server",
            "got echo: one",
            "got echo: two",
            "closed",
        ] {
            assert!(out.stdout.contains(want), "{want}: {out:#?}");
        }
        // Outside the credential's paths the handshake goes as the sandbox sent it.
        let out = ws("/other");
        out.ok();
        assert!(out.stdout.contains("got echo: two"), "{out:#?}");
        assert_eq!(
            server.seen(),
            [
                format!("/v1/responses Bearer {key}"),
                format!("/other Bearer {PLACEHOLDER}"),
            ]
        );
        let log = audit(&fx);
        let upgraded: Vec<&Value> = log
            .iter()
            .filter(|e| e["event"] == "proxy.connect" && e["credential"] == "api")
            .collect();
        assert_eq!(upgraded.len(), 1, "{log:#?}");
        // Both directions counted: the handshake and the frames after it.
        assert!(
            upgraded[0]["bytes_up"].as_u64().unwrap() > 0,
            "{upgraded:?}"
        );
        assert!(
            upgraded[0]["bytes_down"].as_u64().unwrap() > 0,
            "{upgraded:?}"
        );
    }
);

// Joined WebSocket connections count towards the proxy's bound (256 connections at
// once) as tunnels do: held open together, 300 get at most 256 and the rest are refused
// as busy, never an upstream connection each beyond the bound.
both!(websocket_connections_count_towards_the_proxys_bound, |fx| {
    let server = WsServer::start(&fx);
    config(&fx, server.port);
    let port = server.port.to_string();
    let probe = fx.bin.join("wardcell-probe");
    let args = [
        "run",
        "--",
        probe.to_str().unwrap(),
        "ws-many",
        "localhost",
        &port,
        "/v1/responses",
        "300",
    ];
    let out: wardcell_tests::Out = fx
        .cmd(&args)
        .env("SSL_CERT_FILE", &server.ca_pem)
        .env("OPENAI_API_KEY", "sk-ws-many")
        .output()
        .unwrap()
        .into();
    out.ok();
    let opened: usize = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("opened "))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{out:#?}"));
    assert!((200..=256).contains(&opened), "{out:#?}");
    assert!(out.stdout.contains("refused "), "{out:#?}");
    // The server saw no more handshakes than were let through.
    assert!(server.seen().len() <= 256, "{}", server.seen().len());
});
