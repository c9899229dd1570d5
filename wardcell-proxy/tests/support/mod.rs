//! Test harness: the real proxy binary started the way the broker starts it, and real
//! servers on loopback (plain HTTP, HTTPS with a test CA, raw TCP). Shared by the
//! integration tests and the benchmark.
#![allow(dead_code)]

use std::convert::Infallible;
use std::io::{self, IoSlice, Read};
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Bytes, Frame, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags, UnixAddr};

use wardcell_common::plan::{CredentialPlan, CredentialScheme, ProxySpec, SecretPlan};
use wardcell_common::protocol::{self, ProxyEvent, ProxyRequest};

pub const PROXY: &str = env!("CARGO_BIN_EXE_wardcell-proxy");

// ---------------------------------------------------------------------------
// Temporary directories
// ---------------------------------------------------------------------------

pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "wardcell-proxy-it-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn write(&self, name: &str, content: &[u8], mode: u32) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = self.0.join(name);
        std::fs::write(&p, content).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

// ---------------------------------------------------------------------------
// The proxy, started as the broker starts it
// ---------------------------------------------------------------------------

pub struct Proxy {
    pub child: Child,
    pub port: u16,
    control: Option<UnixStream>,
    events: mpsc::Receiver<ProxyEvent>,
    stderr: Arc<Mutex<Vec<u8>>>,
    /// Every event received so far (the first is Ready or Failed).
    pub seen: Vec<ProxyEvent>,
}

pub fn spec(allow: &[String], credentials: Vec<CredentialPlan>) -> ProxySpec {
    ProxySpec {
        elsewhere: Vec::new(),
        run_id: "test-run".into(),
        zone: "push".into(),
        allow: allow.to_vec(),
        internal: Vec::new(),
        credentials,
        roots: Vec::new(),
        trace: None,
    }
}

pub fn basic_credential(
    name: &str,
    host: &str,
    paths: &[&str],
    secret: SecretPlan,
) -> CredentialPlan {
    CredentialPlan {
        name: name.into(),
        hosts: vec![host.into()],
        paths: paths.iter().map(|p| p.to_string()).collect(),
        methods: vec![],
        placeholder: None,
        scheme: CredentialScheme::Basic,
        username: Some("x-access-token".into()),
        header: None,
        secret,
    }
}

impl Proxy {
    /// Start the proxy with fd 3 = a socketpair end, only `env` (plus PATH) in its
    /// environment, hand it a listener on 127.0.0.1:0, and read its first event.
    pub fn start(mut spec: ProxySpec, env: &[(&str, &str)]) -> Proxy {
        // The roots it trusts upstream, read as `wardcell run` reads them: from the
        // environment the proxy is started in.
        if !spec.credentials.is_empty() {
            let get = |k: &str| {
                env.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            };
            spec.roots = wardcell_support::roots::read_roots(&get).unwrap();
        }
        let (mut ours, theirs) = UnixStream::pair().unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();

        let mut cmd = Command::new(PROXY);
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let fd = theirs.as_raw_fd();
        // SAFETY: between fork and exec the closure only calls dup2/fcntl, which are
        // async-signal-safe, and allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                if fd == 3 {
                    nix::fcntl::fcntl(
                        3,
                        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
                    )?;
                } else {
                    nix::unistd::dup2(fd, 3)?;
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().expect("spawn wardcell-proxy");
        drop(theirs);

        let stderr = Arc::new(Mutex::new(Vec::new()));
        {
            let mut pipe = child.stderr.take().unwrap();
            let sink = stderr.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = pipe.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    sink.lock().unwrap().extend_from_slice(&buf[..n]);
                }
            });
        }

        protocol::send_hello(&mut ours).unwrap();
        protocol::expect_hello(&mut ours).unwrap();
        // The explicit proxy's listener and the DNS socket; no transparent listeners.
        let dns = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let lfd = [listener.as_raw_fd(), dns.as_raw_fd()];
        sendmsg::<UnixAddr>(
            ours.as_raw_fd(),
            &[IoSlice::new(b"F")],
            &[ControlMessage::ScmRights(&lfd)],
            MsgFlags::empty(),
            None,
        )
        .unwrap();
        protocol::write_frame(&mut ours, &ProxyRequest::Start(Box::new(spec))).unwrap();
        drop(listener);
        drop(dns);

        let (tx, rx) = mpsc::channel();
        let mut reader = ours.try_clone().unwrap();
        std::thread::spawn(move || {
            while let Ok(ev) = protocol::read_frame::<ProxyEvent>(&mut reader) {
                if tx.send(ev).is_err() {
                    break;
                }
            }
        });
        let mut p = Proxy {
            child,
            port,
            control: Some(ours),
            events: rx,
            stderr,
            seen: Vec::new(),
        };
        p.next_event(Duration::from_secs(20))
            .expect("a first event from the proxy");
        p
    }

    pub fn first(&self) -> &ProxyEvent {
        &self.seen[0]
    }

    /// The CA certificate announced in Ready, if any; panics on Failed.
    pub fn ca_pem(&self) -> Option<String> {
        match self.first() {
            ProxyEvent::Ready { ca_pem } => ca_pem.clone(),
            other => panic!("proxy did not start: {other:?}"),
        }
    }

    pub fn next_event(&mut self, timeout: Duration) -> Option<ProxyEvent> {
        let ev = self.events.recv_timeout(timeout).ok()?;
        self.seen.push(ev.clone());
        Some(ev)
    }

    /// The next Connect or Denied event (within 10 s).
    pub fn event(&mut self) -> ProxyEvent {
        self.next_event(Duration::from_secs(10))
            .expect("an event from the proxy")
    }

    /// Close the control socket as a departing broker would.
    pub fn close_control(&mut self) {
        if let Some(c) = self.control.take() {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
    }

    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            if let Some(st) = self.child.try_wait().unwrap() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// VmRSS in KiB.
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status_field(&status, "VmRSS:")
    }

    pub fn status_text(&self) -> String {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap()
    }
}

pub fn status_field(status: &str, key: &str) -> u64 {
    status
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------
// A test CA and the servers
// ---------------------------------------------------------------------------

pub struct TestCa {
    pub pem_path: PathBuf,
    pub server: Arc<rustls::ServerConfig>,
    _dir: TempDir,
}

pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl TestCa {
    /// A CA and a server certificate for `localhost` and 127.0.0.1 signed by it.
    pub fn new() -> TestCa {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::default();
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "wardcell test upstream CA");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = ca_params.self_signed(&ca_key).unwrap();

        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        let leaf = params.signed_by(&key, &ca, &ca_key).unwrap();

        let dir = TempDir::new();
        let pem_path = dir.write("upstream-ca.pem", ca.pem().as_bytes(), 0o644);
        let key_der = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
        let mut server = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![leaf.der().clone()], key_der)
            .unwrap();
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        TestCa {
            pem_path,
            server: Arc::new(server),
            _dir: dir,
        }
    }
}

static CHUNK: [u8; 64 * 1024] = [b'x'; 64 * 1024];

/// A body of `left` bytes of `x`, produced in 64 KiB frames.
pub struct Filler {
    left: u64,
}

impl Body for Filler {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        let n = self.left.min(CHUNK.len() as u64) as usize;
        self.left -= n as u64;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(&CHUNK[..n])))))
    }
    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::SizeHint::with_exact(self.left)
    }
}

type EchoBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// `/bytes/N`: N bytes. Anything else: a text report of the request as received:
/// `METHOD PATH`, one `name: value` line per header, then `body-length` and `body-sha256`.
async fn echo(req: Request<Incoming>) -> Result<Response<EchoBody>, Infallible> {
    if let Some(n) = req.uri().path().strip_prefix("/bytes/") {
        let n: u64 = n.parse().unwrap_or(0);
        return Ok(Response::new(Filler { left: n }.boxed()));
    }
    let mut report = format!("{} {}\n", req.method(), req.uri());
    for (k, v) in req.headers() {
        report.push_str(&format!("{}: {}\n", k, v.to_str().unwrap_or("?")));
    }
    let mut body = req.into_body();
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    let mut len = 0u64;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else { break };
        if let Some(d) = frame.data_ref() {
            ctx.update(d);
            len += d.len() as u64;
        }
    }
    report.push_str(&format!(
        "body-length: {len}\nbody-sha256: {}\n",
        hex(ctx.finish().as_ref())
    ));
    Ok(Response::new(Full::new(Bytes::from(report)).boxed()))
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn sha256_hex(b: &[u8]) -> String {
    hex(ring::digest::digest(&ring::digest::SHA256, b).as_ref())
}

fn spawn_server<F, Fut>(serve_one: F) -> u16
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let std_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = std_listener.local_addr().unwrap().port();
    std_listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(std_listener).unwrap();
            loop {
                let Ok((s, _)) = listener.accept().await else {
                    continue;
                };
                let _ = s.set_nodelay(true);
                tokio::spawn(serve_one(s));
            }
        });
    });
    port
}

/// A plain HTTP/1.1 echo server on 127.0.0.1.
pub fn http_server() -> u16 {
    spawn_server(|s| async move {
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(s), service_fn(echo))
            .await;
    })
}

/// An HTTPS echo server on 127.0.0.1 presenting the test CA's `localhost` certificate.
pub fn https_server(ca: &TestCa) -> u16 {
    let acceptor = tokio_rustls::TlsAcceptor::from(ca.server.clone());
    spawn_server(move |s| {
        let acceptor = acceptor.clone();
        async move {
            let Ok(tls) = acceptor.accept(s).await else {
                return;
            };
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service_fn(echo))
                .await;
        }
    })
}

/// An event stream as a server sends one: for each connection (over TLS with `ca`'s
/// certificate when given), read the request head, answer 200, and send the head, then
/// (a moment later) `data: one`, wait until the returned flag is set (or 10 s), send
/// 300,000 bytes of `y` and `data: two`, and close the TCP connection without TLS's
/// close_notify, as many servers do. `chunked`: the body is chunked; otherwise it has
/// neither a length nor chunks and ends with the connection.
pub fn event_stream_server(
    ca: Option<&TestCa>,
    chunked: bool,
) -> (u16, Arc<std::sync::atomic::AtomicBool>) {
    let go = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let acceptor = ca.map(|ca| tokio_rustls::TlsAcceptor::from(ca.server.clone()));
    let go2 = go.clone();
    let port = spawn_server(move |s| {
        let (acceptor, go) = (acceptor.clone(), go2.clone());
        async move {
            match acceptor {
                Some(a) => {
                    if let Ok(tls) = a.accept(s).await {
                        send_events(tls, go, chunked).await;
                    }
                }
                None => send_events(s, go, chunked).await,
            }
        }
    });
    (port, go)
}

async fn send_events<S>(mut s: S, go: Arc<std::sync::atomic::AtomicBool>, chunked: bool)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let piece = |data: &[u8]| -> Vec<u8> {
        if chunked {
            let mut c = format!("{:x}\r\n", data.len()).into_bytes();
            c.extend_from_slice(data);
            c.extend_from_slice(b"\r\n");
            c
        } else {
            data.to_vec()
        }
    };
    let answer: &[u8] = if chunked {
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    } else {
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n"
    };
    if s.write_all(answer).await.is_err() || s.flush().await.is_err() {
        return;
    }
    // The event comes a moment after the head, in a write of its own: a stream that
    // trickles is what the tests need.
    tokio::time::sleep(Duration::from_millis(50)).await;
    if s.write_all(&piece(b"data: one\n\n")).await.is_err() || s.flush().await.is_err() {
        return;
    }
    for _ in 0..1000 {
        if go.load(Ordering::SeqCst) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = s.write_all(&piece(&vec![b'y'; 300_000])).await;
    let _ = s.write_all(&piece(b"data: two\n\n")).await;
    if chunked {
        let _ = s.write_all(b"0\r\n\r\n").await;
    }
    let _ = s.flush().await;
}

/// A raw TCP server that sends `n` bytes to every connection, then closes it.
pub fn blob_server(n: u64) -> u16 {
    spawn_server(move |mut s| async move {
        use tokio::io::AsyncWriteExt;
        let mut left = n;
        while left > 0 {
            let k = left.min(CHUNK.len() as u64) as usize;
            if s.write_all(&CHUNK[..k]).await.is_err() {
                return;
            }
            left -= k as u64;
        }
        let _ = s.shutdown().await;
    })
}

// ---------------------------------------------------------------------------
// Clients
// ---------------------------------------------------------------------------

/// What curl got: status and body.
pub struct Curl {
    pub status: u16,
    pub body: String,
}

/// Run curl through the proxy. `args` go before the URL.
pub fn curl(proxy: &Proxy, url: &str, args: &[&str]) -> Curl {
    let out = Command::new("curl")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .args([
            "-sS",
            "--max-time",
            "30",
            "--proxy",
            &proxy.url(),
            "--noproxy",
            "",
        ])
        .args(["-o", "-", "-w", "\n%{http_code}"])
        .args(args)
        .arg(url)
        .output()
        .expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    Curl {
        status: code.trim().parse().unwrap_or(0),
        body: format!("{body}{}", String::from_utf8_lossy(&out.stderr)),
    }
}

/// Send a CONNECT over a raw socket; returns the stream and the response head.
pub fn raw_connect(proxy_port: u16, authority: &str) -> (std::net::TcpStream, String) {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", proxy_port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n"
    )
    .unwrap();
    let head = read_head(&mut s);
    (s, head)
}

/// Read up to and including the blank line ending a response head, byte by byte.
pub fn read_head(s: &mut impl Read) -> String {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(0) | Err(_) => break,
            Ok(_) => head.push(b[0]),
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// Read a stream to its end, counting bytes.
pub fn drain(s: &mut impl Read) -> io::Result<u64> {
    let mut buf = vec![0u8; 256 * 1024];
    let mut n = 0u64;
    loop {
        match s.read(&mut buf)? {
            0 => return Ok(n),
            k => n += k as u64,
        }
    }
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}
