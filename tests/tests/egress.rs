//! Transparent egress and the sandbox's DNS, in real sandboxes, as the invoking user and
//! as an unprivileged uid: clients that ignore the proxy variables (`curl --noproxy '*'`,
//! python sockets, raw DNS queries) reach what the allow list names, through the proxy,
//! and nothing else.
//!
//! The servers are on the host's 127.0.0.1, as in proxy_e2e.rs. A name reaches loopback
//! only as `localhost` (the proxy's classifier refuses loopback for other names), so the
//! tests name `localhost:PORT` and, for address entries, `127.0.0.1:PORT`. Inside, the
//! sandbox's own hosts file maps `localhost` without asking DNS; the raw queries below ask
//! the proxy's DNS directly, which is how a name gets attached to an address.

use std::collections::BTreeSet;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use wardcell_tests::{both, Fixture, Out};

/// What a host-side server does with each connection.
#[derive(Clone, Copy)]
enum Kind {
    /// Reads a request head, records `Host path` (or `TLS` for a ClientHello), answers 200.
    Http,
    /// Reads what comes and sends it back after `echo:`.
    Echo,
    /// Speaks first (`SSH-2.0-test`), then echoes one line.
    ServerFirst,
}

/// A server on the host's 127.0.0.1, stopped when dropped.
struct Server {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    fn start(kind: Kind, port: u16) -> Server {
        Server::start_on("127.0.0.1", kind, port)
    }

    fn start_on(addr: &str, kind: Kind, port: u16) -> Server {
        let l = TcpListener::bind((addr, port)).expect("bind a test server");
        l.set_nonblocking(true).unwrap();
        let port = l.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s2, stop2) = (seen.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !stop2.load(Ordering::SeqCst) {
                match l.accept() {
                    Ok((c, _)) => {
                        let s3 = s2.clone();
                        std::thread::spawn(move || serve_one(kind, c, &s3));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Server {
            port,
            seen,
            stop,
            thread: Some(thread),
        }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve_one(kind: Kind, mut c: TcpStream, seen: &Mutex<Vec<String>>) {
    c.set_nonblocking(false).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    match kind {
        Kind::Http => {
            let mut first = [0u8; 1];
            if c.peek(&mut first).unwrap_or(0) == 1 && first[0] == 0x16 {
                seen.lock().unwrap().push("TLS".into());
                return;
            }
            let mut r = BufReader::new(c.try_clone().unwrap());
            let mut line = String::new();
            let _ = r.read_line(&mut line);
            let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
            let mut host = String::new();
            loop {
                let mut h = String::new();
                if r.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
                    break;
                }
                if let Some(v) = h.strip_prefix("Host:").or_else(|| h.strip_prefix("host:")) {
                    host = v.trim().to_string();
                }
            }
            seen.lock().unwrap().push(format!("{host} {path}"));
            let _ =
                c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
        }
        Kind::Echo => {
            let mut buf = [0u8; 256];
            let n = c.read(&mut buf).unwrap_or(0);
            seen.lock()
                .unwrap()
                .push(String::from_utf8_lossy(&buf[..n]).into());
            let mut out = b"echo:".to_vec();
            out.extend_from_slice(&buf[..n]);
            let _ = c.write_all(&out);
        }
        Kind::ServerFirst => {
            let _ = c.write_all(b"SSH-2.0-test\r\n");
            let mut line = String::new();
            let _ = BufReader::new(c.try_clone().unwrap()).read_line(&mut line);
            seen.lock().unwrap().push(line.trim().into());
            let _ = c.write_all(format!("echo:{line}").as_bytes());
        }
    }
}

/// Port 22 on the host's loopback, held by one test at a time (the two variants run in
/// parallel); a free port when something else holds 22.
static PORT_22: Mutex<()> = Mutex::new(());

fn python() -> PathBuf {
    PathBuf::from("/usr/bin/python3")
}

/// The checks, run inside. Each prints `TAG RESULT`.
const CLIENT: &str = r#"
import socket, ssl, struct, subprocess, sys
H, E, E2, S, U = (int(a) for a in sys.argv[1:6])

def say(tag, what):
    print(tag, what, flush=True)

def nameserver():
    try:
        for l in open('/etc/resolv.conf'):
            f = l.split()
            if f[:1] == ['nameserver']:
                return f[1]
    except OSError:
        pass
    return '127.0.0.1'

def dns(name, qtype=1):
    q = struct.pack('>HHHHHH', 0x4242, 0x0100, 1, 0, 0, 0)
    q += b''.join(bytes([len(p)]) + p.encode() for p in name.split('.')) + b'\0'
    q += struct.pack('>HH', qtype, 1)
    ns = nameserver()
    s = socket.socket(socket.AF_INET6 if ':' in ns else socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(10)
    s.sendto(q, (ns, 53))
    r = s.recv(512)
    assert r[:2] == q[:2]
    an = struct.unpack('>H', r[6:8])[0]
    i, ips = len(q), []
    for _ in range(an):
        t, c, ttl, n = struct.unpack('>HHIH', r[i + 2:i + 12])
        i += 12
        ips.append(socket.inet_ntop(socket.AF_INET if t == 1 else socket.AF_INET6, r[i:i + n]))
        i += n
    return 'rcode=%d %s' % (r[3] & 15, ','.join(ips) or '-')

def raw(host, port, send=b'ping', first=False):
    try:
        s = socket.create_connection((host, port), timeout=10)
        got = b''
        if first:
            got = s.recv(100).strip() + b'|'
        s.sendall(send)
        got += s.recv(100)
        return 'got=' + (got.decode(errors='replace').strip() or '-')
    except OSError as e:
        return 'error=' + type(e).__name__

def tls(host, port, sni):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=10) as s:
            ctx.wrap_socket(s, server_hostname=sni).do_handshake()
        return 'handshake'
    except (OSError, ssl.SSLError) as e:
        return 'error=' + type(e).__name__

def curl(*args):
    r = subprocess.run(['curl', '-sS', '--max-time', '20', '-o', '/dev/null', '-w', '%{http_code}'] + list(args),
                       capture_output=True, text=True)
    return 'code=%s' % r.stdout

# Before any DNS: an address with no name; `localhost:E2` means 127.0.0.1:E2 too.
say('raw-unnamed', raw('127.0.0.1', E2))
say('server-first-unnamed', raw('127.0.0.1', S, b'hi\n', first=True))
try:
    socket.getaddrinfo('denied.example', 80)
    say('gai-denied', 'resolved')
except socket.gaierror as e:
    say('gai-denied', 'errno=%d' % e.errno)
say('dns-denied', dns('denied.example'))
say('dns-localhost', dns('localhost'))
try:
    socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).connect(('2001:db8::1', 53))
    say('v6-routed', 'yes')
except OSError:
    say('v6-routed', 'no')
say('dns-localhost-aaaa', dns('localhost', 28))
# Now 127.0.0.1 was answered for localhost.
say('raw-named', raw('127.0.0.1', E2))
say('raw-ip-entry', raw('127.0.0.1', E))
say('raw-other-ip', raw('192.0.2.1', E))
say('raw-unlisted', raw('127.0.0.1', U))
say('server-first', raw('127.0.0.1', S, b'hi\n', first=True))
say('curl-name', curl('--noproxy', '*', 'http://localhost:%d/by-name' % H))
say('curl-host-mismatch', curl('--noproxy', '*', '-H', 'Host: example.invalid:%d' % H, 'http://localhost:%d/mismatch' % H))
say('curl-ip', curl('--noproxy', '*', 'http://127.0.0.1:%d/by-ip' % H))
say('curl-explicit', curl('http://localhost:%d/explicit' % H))
say('tls-sni-mismatch', tls('127.0.0.1', H, 'example.invalid'))
say('tls-sni-ok', tls('127.0.0.1', H, 'localhost'))
"#;

fn runs_dir(fx: &Fixture) -> PathBuf {
    fx.home.join(".local/state/wardcell/runs")
}

fn log_names(fx: &Fixture) -> BTreeSet<String> {
    fs::read_dir(runs_dir(fx))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Run `argv` in the default zone; return its output and its run's audit log.
fn run(fx: &Fixture, argv: &[&str]) -> (Out, Vec<Value>) {
    let before = log_names(fx);
    let mut args = vec!["run", "--"];
    args.extend_from_slice(argv);
    let out: Out = fx
        .cmd(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("spawn wardcell")
        .into();
    let after = log_names(fx);
    let new: Vec<_> = after.difference(&before).collect();
    assert_eq!(new.len(), 1, "{new:?}; {out:#?}");
    let text = fs::read_to_string(runs_dir(fx).join(new[0])).unwrap();
    let log = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (out, log)
}

#[track_caller]
fn result(out: &Out, tag: &str) -> String {
    out.stdout
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{tag} ")))
        .unwrap_or_else(|| panic!("no `{tag}` line; {out:#?}"))
        .to_string()
}

fn denied(log: &[Value]) -> Vec<&Value> {
    log.iter()
        .filter(|l| l["event"] == "proxy.denied")
        .collect()
}

both!(transparent_egress_reaches_only_the_allow_list, |fx| {
    let _held = PORT_22.lock().unwrap_or_else(|p| p.into_inner());
    let http = Server::start(Kind::Http, 0);
    let echo = Server::start(Kind::Echo, 0);
    let named = Server::start(Kind::Echo, 0);
    let ssh = TcpListener::bind("127.0.0.1:22").map(drop).map_or_else(
        |_| Server::start(Kind::ServerFirst, 0),
        |()| Server::start(Kind::ServerFirst, 22),
    );
    // A real server on a port the list does not name.
    let unlisted = Server::start(Kind::Echo, 0);
    let (h, e, e2, s, u) = (http.port, echo.port, named.port, ssh.port, unlisted.port);
    let client = fx.home.join("e2e/client.py");
    fx.write(&client, CLIENT);
    fx.test_config(&format!(
        "network = {{ allow = [\"localhost:{h}\", \"localhost:{e2}\", \"localhost:{s}\", \"127.0.0.1:{e}\", \"example.invalid:{h}\"] }}\n"
    ));
    let py = python();
    let ports = [h, e, e2, s, u].map(|p| p.to_string());
    let mut argv = vec![py.to_str().unwrap(), client.to_str().unwrap()];
    argv.extend(ports.iter().map(String::as_str));
    let (out, log) = run(&fx, &argv);
    out.ok();

    // DNS: an unlisted name does not exist; an allowed one is the proxy's answer.
    assert_eq!(
        result(&out, "gai-denied"),
        format!("errno={}", -2),
        "EAI_NONAME"
    );
    assert_eq!(result(&out, "dns-denied"), "rcode=3 -");
    assert_eq!(result(&out, "dns-localhost"), "rcode=0 127.0.0.1");
    // AAAA only where the namespace routes IPv6 (this machine's kernel may not have it).
    let aaaa = match result(&out, "v6-routed").as_str() {
        "yes" => "rcode=0 ::1",
        _ => "rcode=0 -",
    };
    assert_eq!(result(&out, "dns-localhost-aaaa"), aaaa);
    // Raw TCP: by the name the address was answered for, or by an address entry; a
    // `localhost:P` entry admits 127.0.0.1:P without a name (issue 20, item 2).
    assert_eq!(result(&out, "raw-unnamed"), "got=echo:ping", "{out:#?}");
    assert_eq!(
        result(&out, "server-first-unnamed"),
        "got=SSH-2.0-test|echo:hi",
        "{out:#?}"
    );
    assert_eq!(result(&out, "raw-named"), "got=echo:ping", "{out:#?}");
    assert_eq!(result(&out, "raw-ip-entry"), "got=echo:ping", "{out:#?}");
    assert_eq!(result(&out, "raw-other-ip"), "got=-", "{out:#?}");
    assert!(
        result(&out, "raw-unlisted").starts_with("error="),
        "{out:#?}"
    );
    // A protocol whose server speaks first (ssh), on port 22 where the host has it free.
    assert_eq!(
        result(&out, "server-first"),
        "got=SSH-2.0-test|echo:hi",
        "{out:#?}"
    );
    // HTTP without the proxy variables, by Host; a Host that is not the address's name
    // gets 403; 127.0.0.1 is localhost's.
    assert_eq!(result(&out, "curl-name"), "code=200", "{out:#?}");
    assert_eq!(result(&out, "curl-host-mismatch"), "code=403", "{out:#?}");
    assert_eq!(result(&out, "curl-ip"), "code=200", "{out:#?}");
    // The explicit proxy still works as before.
    assert_eq!(result(&out, "curl-explicit"), "code=200", "{out:#?}");
    // TLS by SNI: a name other than the one the address was answered for is cut off
    // before anything reaches the server; the right one is tunnelled (the test server
    // only notes the ClientHello, so the handshake itself fails).
    assert!(result(&out, "tls-sni-mismatch").starts_with("error="));

    // What reached the servers: exactly the allowed requests.
    assert_eq!(
        http.seen(),
        [
            format!("localhost:{h} /by-name"),
            format!("127.0.0.1:{h} /by-ip"),
            format!("localhost:{h} /explicit"),
            "TLS".to_string()
        ],
        "{out:#?}"
    );
    assert_eq!(named.seen(), ["ping", "ping"]);
    assert_eq!(echo.seen(), ["ping"]);
    assert_eq!(ssh.seen(), ["hi", "hi"]);
    assert!(unlisted.seen().is_empty());

    // Every refusal is audited, with why.
    let d = denied(&log);
    let has = |host: &str, port: u16, why: &str| {
        d.iter().any(|e| {
            e["host"] == host
                && e["port"] == port
                && e["reason"].as_str().unwrap_or("").contains(why)
        })
    };
    let all = format!("{d:#?}");
    assert!(has("denied.example", 53, "not in the allow list"), "{all}");
    assert!(has("192.0.2.1", e, "not in the allow list"), "{all}");
    assert!(
        has(
            "127.0.0.1",
            h,
            "HTTP Host names example.invalid but 127.0.0.1 was answered for localhost"
        ),
        "{all}"
    );
    assert!(
        has(
            "127.0.0.1",
            h,
            "TLS server name names example.invalid but 127.0.0.1 was answered for localhost"
        ),
        "{all}"
    );
    let connects: Vec<_> = log
        .iter()
        .filter(|l| l["event"] == "proxy.connect")
        .map(|l| {
            (
                l["host"].as_str().unwrap_or("").to_string(),
                l["port"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    for want in [
        ("localhost", e2),
        ("127.0.0.1", e),
        ("localhost", s),
        ("localhost", h),
    ] {
        assert!(
            connects
                .iter()
                .any(|(ho, p)| ho == want.0 && *p == u64::from(want.1)),
            "{want:?} in {connects:?}"
        );
    }
});

// Without an entry for a port, nothing listens there inside: a connection to any address
// on it is refused, and DNS answers nothing for a name the list does not name.
both!(a_port_without_an_entry_is_refused, |fx| {
    let srv = Server::start(Kind::Echo, 0);
    fx.test_config("network = { allow = [\"localhost:1\"] }\n");
    let script = format!(
        "import socket\nfor a in ['127.0.0.1', '192.0.2.1']:\n    try:\n        socket.create_connection((a, {}), timeout=5)\n        print('connected')\n    except OSError as e:\n        print('refused', type(e).__name__)\n",
        srv.port
    );
    let py = python();
    let (out, _) = run(&fx, &[py.to_str().unwrap(), "-c", &script]);
    out.ok();
    assert_eq!(out.stdout.matches("refused").count(), 2, "{out:#?}");
    assert!(srv.seen().is_empty());
});

/// Queries for a name the list does not name, as fast as one process sends them, for
/// `secs` seconds; prints how many were sent.
const DNS_FLOOD: &str = r#"
import socket, struct, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setblocking(False)
n, end = 0, time.time() + float(sys.argv[1])
while time.time() < end:
    q = struct.pack('>HHHHHH', n & 0xffff, 0x0100, 1, 0, 0, 0)
    q += b'\x05flood\x06denied\x07example\x00' + struct.pack('>HH', 1, 1)
    try:
        s.sendto(q, ('127.0.0.1', 53))
        n += 1
    except BlockingIOError:
        pass
    try:
        while True:
            s.recv(512)
    except BlockingIOError:
        pass
print('sent', n, flush=True)
# The quiet after the flood in which its count must be written (the run's end would write
# it anyway): the time is what is tested.
time.sleep(float(sys.argv[2]))
"#;

/// Milliseconds into the day of an audit line's `ts` (`2026-12-03T06:09:54.018Z`).
fn ms_of_day(line: &Value) -> u64 {
    let ts = line["ts"].as_str().unwrap_or_default();
    let t = &ts[ts.find('T').map_or(0, |i| i + 1)..ts.len().saturating_sub(1)];
    let f: Vec<f64> = t.split(':').filter_map(|x| x.parse().ok()).collect();
    assert_eq!(f.len(), 3, "{ts}");
    ((f[0] * 3600.0 + f[1] * 60.0 + f[2]) * 1000.0) as u64
}

// A sandbox refused as fast as it can ask (a DNS packet per refusal) cannot turn each
// refusal into an audit line: past a burst, refusals are recorded at a fixed rate and
// the rest counted in one event, so the log grows by a bounded amount and loses no count.
both!(
    a_flood_of_refusals_is_counted_not_logged_line_by_line,
    |fx| {
        fx.test_config("network = { allow = [\"localhost:1\"] }\n");
        let script = fx.home.join("flood.py");
        fx.write(&script, DNS_FLOOD);
        let py = python();
        let started = std::time::Instant::now();
        let (out, log) = run(
            &fx,
            &[py.to_str().unwrap(), script.to_str().unwrap(), "2", "3"],
        );
        out.ok();
        let secs = started.elapsed().as_secs() + 1;
        let sent: u64 = result(&out, "sent").parse().unwrap();
        let d = denied(&log);
        let one_by_one: Vec<_> = d
            .iter()
            .filter(|e| e["host"] == "flood.denied.example")
            .collect();
        let held: u64 = d
            .iter()
            .filter(|e| e["host"] == "-" && e["port"] == 0)
            .map(|e| {
                let why = e["reason"].as_str().unwrap_or("");
                assert!(why.contains("more refusals, over the 20 a second"), "{why}");
                why.split(' ').next().unwrap().parse::<u64>().unwrap()
            })
            .sum();
        // The count is written once the flood has been over for a second, not only when the
        // run ends (the sandbox sleeps 3 s after it).
        let last_count = d.iter().rev().find(|e| e["host"] == "-").expect("a count");
        let finished = log.iter().find(|l| l["event"] == "run.finished").unwrap();
        let day = 86_400_000;
        let gap = (ms_of_day(finished) + day - ms_of_day(last_count)) % day;
        assert!(gap > 1000, "{last_count} {finished}");
        let bound = 100 + 20 * secs as usize;
        assert!(
            !one_by_one.is_empty() && one_by_one.len() <= bound,
            "{} refusals recorded one by one in {secs} s (at most {bound}); {sent} sent",
            one_by_one.len()
        );
        assert_eq!(
            d.len() - one_by_one.len(),
            d.iter().filter(|e| e["host"] == "-").count()
        );
        // Every refusal answered is in the log, one by one or in a count (UDP the proxy never
        // read is not: the flood outruns it).
        assert!(
            one_by_one.len() as u64 + held >= 500,
            "{} + {held} of {sent}",
            one_by_one.len()
        );
    }
);

/// A request head sent a byte a second; prints when the proxy closed it, or `open`.
const DRIBBLE: &str = r#"
import socket, sys, time
s = socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=5)
s.sendall(b'GET /slow HTTP/1.1\r\n')
t0 = time.time()
s.settimeout(1)
def closed():
    print('closed', int(time.time() - t0), flush=True)
    sys.exit(0)
while time.time() - t0 < 16:
    try:
        if s.recv(100) == b'':
            closed()
    except socket.timeout:
        pass
    except OSError:
        closed()
    try:
        s.sendall(b'X')
    except OSError:
        closed()
print('open', flush=True)
"#;

// The proxy gives a transparent connection 10 s in all to say where it goes: a client that
// sends its head a byte at a time cannot hold the connection (and its slot) open by
// sending a byte before each read's wait runs out.
both!(a_head_sent_a_byte_at_a_time_is_cut_off, |fx| {
    let srv = Server::start(Kind::Http, 0);
    fx.test_config(&format!(
        "network = {{ allow = [\"localhost:{}\"] }}\n",
        srv.port
    ));
    let script = fx.home.join("dribble.py");
    fx.write(&script, DRIBBLE);
    let py = python();
    let port = srv.port.to_string();
    let (out, log) = run(
        &fx,
        &[py.to_str().unwrap(), script.to_str().unwrap(), &port],
    );
    out.ok();
    let closed = result(&out, "closed");
    let secs: u64 = closed.parse().unwrap_or_else(|_| panic!("{out:#?}"));
    assert!((9..=12).contains(&secs), "closed after {secs} s");
    assert!(srv.seen().is_empty());
    assert!(
        denied(&log)
            .iter()
            .any(|e| e["reason"] == "the connection ended before it said where it goes"),
        "{log:#?}"
    );
});

/// Tricks a hostile command tries on transparent egress. Each prints `TAG RESULT`.
const TRICKS: &str = r#"
import socket, struct, sys
H, E, E2 = (int(a) for a in sys.argv[1:4])
def say(t, w): print(t, w, flush=True)
def dns(pkt, fam=socket.AF_INET, addr='127.0.0.1'):
    s = socket.socket(fam, socket.SOCK_DGRAM)
    s.settimeout(3)
    s.sendto(pkt, (addr, 53))
    try:
        r = s.recv(600)
        return 'rcode=%d an=%d' % (r[3] & 15, struct.unpack('>H', r[6:8])[0])
    except socket.timeout:
        return 'noreply'
def q(name, qt=1, qd=1):
    p = struct.pack('>HHHHHH', 0x4242, 0x0100, qd, 0, 0, 0)
    p += b''.join(bytes([len(x)]) + x.encode() for x in name.split('.')) + b'\0'
    return p + struct.pack('>HH', qt, 1)
def tcp(fam, addr, send):
    try:
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.settimeout(5)
        s.connect(addr)
        s.sendall(send)
        out = b''
        while True:
            d = s.recv(1000)
            if not d:
                break
            out += d
        return (out.split(b'\r\n')[0].decode(errors='replace') or '-')
    except OSError as e:
        return 'error=' + type(e).__name__
def opened(*a):
    try:
        socket.socket(*a)
        return 'opened'
    except OSError as e:
        return 'errno=%d' % e.errno
def get(host):
    return b'GET /t HTTP/1.1\r\nHost: ' + host.encode() + b'\r\n\r\n'
V4 = socket.AF_INET
say('dns-localhost', dns(q('localhost')))
try:
    socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).connect(('2001:db8::1', 53))
    v6 = True
except OSError:
    v6 = False
say('v6', v6)
if v6:
    say('v4-mapped', tcp(socket.AF_INET6, ('::ffff:127.0.0.1', E2, 0, 0), b'ping'))
    say('v6-loopback-for-v4-entry', tcp(socket.AF_INET6, ('::1', E, 0, 0), b'ping'))
    say('link-local', tcp(socket.AF_INET6, ('fe80::1', E2, 0, 1), b'ping'))
say('other-loopback', tcp(V4, ('127.0.0.2', E2), b'ping'))
say('other-loopback-host', tcp(V4, ('127.0.0.2', H), get('localhost:%d' % H)))
say('metadata-host', tcp(V4, ('169.254.169.254', H), get('localhost:%d' % H)))
say('host-case-dot', tcp(V4, ('127.0.0.1', H), get('LOCALHOST.:%d' % H)))
say('host-userinfo', tcp(V4, ('127.0.0.1', H), get('localhost:%d@evil.example' % H)))
say('absolute-form', tcp(V4, ('127.0.0.1', H), b'GET http://evil.example/x HTTP/1.1\r\nHost: localhost:%d\r\n\r\n' % H))
say('host-space', tcp(V4, ('127.0.0.1', H), b'GET / HTTP/1.1\r\nHost : evil.example\r\nHost: localhost\r\n\r\n'))
for tag, pkt in [('loop', struct.pack('>HHHHHH', 1, 0x100, 1, 0, 0, 0) + b'\xc0\x0c\0\1\0\1'),
                 ('no-question', struct.pack('>HHHHHH', 1, 0x100, 0, 0, 0, 0)),
                 ('many-questions', struct.pack('>HHHHHH', 1, 0x100, 65535, 0, 0, 0) + q('localhost')[12:]),
                 ('cut', q('localhost')[:-2])]:
    say('dns-' + tag, dns(pkt))
say('dns-after', dns(q('localhost')))
say('raw', opened(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
say('ping', opened(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP))
say('packet', opened(socket.AF_PACKET, socket.SOCK_RAW, 0))
u = socket.socket(V4, socket.SOCK_DGRAM)
u.settimeout(1)
u.sendto(b'x', ('127.0.0.1', E2))
try:
    say('udp', u.recv(10))
except OSError as e:
    say('udp', type(e).__name__)
"#;

// What held in an adversarial review of transparent egress: another loopback or the
// metadata address under an allowed Host, IPv4-mapped and IPv6 forms of an address, the
// Host header's odd spellings, malformed DNS queries, and sockets that would go around
// the proxy (raw, ICMP, packet, UDP). Only the allowed name's own address is reached.
both!(address_and_parser_tricks_reach_nothing_else, |fx| {
    let http = Server::start(Kind::Http, 0);
    let echo = Server::start(Kind::Echo, 0);
    let named = Server::start(Kind::Echo, 0);
    let (h, e, e2) = (http.port, echo.port, named.port);
    fx.test_config(&format!(
        "network = {{ allow = [\"localhost:{h}\", \"localhost:{e2}\", \"127.0.0.1:{e}\"] }}\n"
    ));
    let script = fx.home.join("tricks.py");
    fx.write(&script, TRICKS);
    let py = python();
    let ports = [h, e, e2].map(|p| p.to_string());
    let mut argv = vec![py.to_str().unwrap(), script.to_str().unwrap()];
    argv.extend(ports.iter().map(String::as_str));
    let (out, log) = run(&fx, &argv);
    out.ok();
    let r = |tag: &str| result(&out, tag);
    assert_eq!(r("dns-localhost"), "rcode=0 an=1");
    let mut named_seen = 0;
    if r("v6") == "True" {
        // The same IPv4 address, written as IPv6: reached as itself.
        assert_eq!(r("v4-mapped"), "echo:ping", "{out:#?}");
        named_seen += 1;
        // ::1 is not 127.0.0.1: the address entry does not admit it.
        assert_eq!(r("v6-loopback-for-v4-entry"), "-", "{out:#?}");
        assert_eq!(r("link-local"), "-", "{out:#?}");
    }
    assert_eq!(r("other-loopback"), "-", "{out:#?}");
    assert!(r("other-loopback-host").contains(" 403 "), "{out:#?}");
    assert!(r("metadata-host").contains(" 403 "), "{out:#?}");
    assert!(r("host-case-dot").contains(" 200 "), "{out:#?}");
    assert_eq!(r("host-userinfo"), "-", "{out:#?}");
    assert_eq!(r("host-space"), "-", "{out:#?}");
    // A server takes an absolute-form target over Host: the two must agree.
    assert_eq!(r("absolute-form"), "-", "{out:#?}");
    for tag in ["loop", "no-question", "many-questions", "cut"] {
        assert_eq!(r(&format!("dns-{tag}")), "rcode=1 an=0", "{tag}");
    }
    assert_eq!(r("dns-after"), "rcode=0 an=1");
    for tag in ["raw", "ping", "packet"] {
        assert!(r(tag).starts_with("errno="), "{tag}: {out:#?}");
    }
    assert_ne!(r("udp"), "b'x'");
    assert_eq!(echo.seen().len(), 0, "{out:#?}");
    assert_eq!(named.seen().len(), named_seen, "{out:#?}");
    assert_eq!(http.seen(), [format!("LOCALHOST.:{h} /t")]);
    let d = denied(&log);
    let all = format!("{d:#?}");
    for why in [
        "127.0.0.2 is not an address of localhost",
        "169.254.169.254 is not an address of localhost",
        "an HTTP Host header that is not host[:port]",
        "an HTTP request whose target names another host than its Host",
    ] {
        assert!(d.iter().any(|e| e["reason"] == why), "{why}: {all}");
    }
});

/// This machine's own IPv4 address on the interface its default route leaves by (no
/// packet is sent: a UDP connect only picks the source), if it has one that is not
/// loopback.
fn own_ipv4() -> Option<std::net::Ipv4Addr> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("203.0.113.1:9").ok()?;
    match s.local_addr().ok()?.ip() {
        std::net::IpAddr::V4(v4) if !v4.is_loopback() && !v4.is_unspecified() => Some(v4),
        _ => None,
    }
}

/// A name the resolver (the proxy's, musl's) reads as `ip` without asking anyone:
/// `a.b.N`, the old three-part numeric form. The proxy takes it as a name.
fn numeric_name(ip: std::net::Ipv4Addr) -> String {
    let [a, b, c, d] = ip.octets();
    format!("{a}.{b}.{}", u32::from(c) * 256 + u32::from(d))
}

/// The checks for a service on this machine's own address, run inside: the proxy's DNS
/// answer for the name, the explicit proxy, and the transparent path (by HTTP Host).
const OWN_CLIENT: &str = r#"
import socket, struct, sys
NAME, ADDR, PORT = sys.argv[1], sys.argv[2], int(sys.argv[3])

def dns(name):
    q = struct.pack('>HHHHHH', 0x4242, 0x0100, 1, 0, 0, 0)
    q += b''.join(bytes([len(p)]) + p.encode() for p in name.split('.')) + b'\0'
    q += struct.pack('>HH', 1, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(10)
    s.sendto(q, ('127.0.0.1', 53))
    r = s.recv(512)
    return 'rcode=%d answers=%d' % (r[3] & 15, struct.unpack('>H', r[6:8])[0])

def http(addr, port, target, host):
    # Raw: curl would rewrite the numeric name to the address itself.
    s = socket.create_connection((addr, port), timeout=20)
    s.sendall(('GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' % (target, host)).encode())
    got = b''
    while True:
        b = s.recv(4096)
        if not b:
            break
        got += b
    head, _, body = got.partition(b'\r\n\r\n')
    return '%s code=%s' % (' '.join(body.decode(errors='replace').split()), head.split(b' ')[1].decode())

name = '%s:%d' % (NAME, PORT)
addr = '%s:%d' % (ADDR, PORT)
print('dns', dns(NAME), flush=True)
print('explicit', http('127.0.0.1', 3128, 'http://%s/own-explicit' % name, name), flush=True)
print('transparent', http(ADDR, PORT, '/own-transparent', name), flush=True)
print('literal-explicit', http('127.0.0.1', 3128, 'http://%s/lit-explicit' % addr, addr), flush=True)
print('literal-transparent', http(ADDR, PORT, '/lit-transparent', addr), flush=True)
"#;

// Issue 19, item 3: a name that resolves to one of this machine's own (non-loopback)
// addresses does not reach a service listening on all interfaces, explicitly or
// transparently; only an entry naming the address literally does.
both!(the_hosts_own_address_is_reached_only_literally, |fx| {
    let Some(own) = own_ipv4() else {
        eprintln!("this machine has no non-loopback IPv4 address; nothing to try");
        return;
    };
    let srv = Server::start_on("0.0.0.0", Kind::Http, 0);
    let port = srv.port;
    let name = numeric_name(own);
    let client = fx.home.join("e2e/own.py");
    fx.write(&client, OWN_CLIENT);
    let py = python();
    let port_s = port.to_string();
    let own_s = own.to_string();
    let argv = [
        py.to_str().unwrap(),
        client.to_str().unwrap(),
        name.as_str(),
        own_s.as_str(),
        port_s.as_str(),
    ];

    // By name only, even under network.internal (this machine's address may be of a
    // class internal names reach): refused everywhere, and nothing reaches the server.
    fx.test_config(&format!("network = {{ internal = [\"{name}:{port}\"] }}\n"));
    let (out, log) = run(&fx, &argv);
    out.ok();
    assert_eq!(result(&out, "dns"), "rcode=0 answers=0", "{out:#?}");
    let explicit = result(&out, "explicit");
    assert!(explicit.ends_with("code=403"), "{out:#?}");
    assert!(explicit.contains("an address of this machine"), "{out:#?}");
    let transparent = result(&out, "transparent");
    assert!(transparent.ends_with("code=403"), "{out:#?}");
    assert!(
        transparent.contains("an address of this machine"),
        "{out:#?}"
    );
    assert!(srv.seen().is_empty(), "{:?}", srv.seen());
    let d = denied(&log);
    assert!(
        d.iter().any(|e| e["host"] == name.as_str()
            && e["reason"]
                .as_str()
                .unwrap_or("")
                .contains(&format!("naming {own} literally"))),
        "{d:#?}"
    );

    // Named literally: reached both ways.
    fx.test_config(&format!("network = {{ allow = [\"{own}:{port}\"] }}\n"));
    let (out, _) = run(&fx, &argv);
    out.ok();
    assert!(
        result(&out, "literal-explicit").ends_with("code=200"),
        "{out:#?}"
    );
    assert!(
        result(&out, "literal-transparent").ends_with("code=200"),
        "{out:#?}"
    );
    let seen = srv.seen();
    assert!(
        seen.contains(&format!("{own}:{port} /lit-explicit")),
        "{seen:?}"
    );
    assert!(
        seen.contains(&format!("{own}:{port} /lit-transparent")),
        "{seen:?}"
    );
    assert!(!seen.iter().any(|s| s.contains("/own-")), "{seen:?}");
});

/// Holds every connection the proxy serves at once, then tries one more of each kind.
const CAP_CLIENT: &str = r#"
import socket, sys, time
E = int(sys.argv[1])

def echo():
    s = socket.create_connection(('127.0.0.1', E), timeout=10)
    s.sendall(b'ping')
    t = time.time()
    try:
        got = s.recv(100)
    except OSError as e:
        got = type(e).__name__.encode()
    return '%s in=%.1fs' % (got.decode(errors='replace') or 'closed', time.time() - t)

print('before', echo(), flush=True)
held = []
for _ in range(256):
    held.append(socket.create_connection(('127.0.0.1', 3128), timeout=10))

def explicit():
    s = socket.create_connection(('127.0.0.1', 3128), timeout=10)
    s.sendall(b'GET http://127.0.0.1:%d/ HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n' % (E, E))
    t = time.time()
    answer = b''
    while True:
        try:
            b = s.recv(4096)
        except OSError:
            break
        if not b:
            break
        answer += b
    return answer, t

# Until the proxy has accepted the 256 (it counts them as it accepts): asked again
# until refused, 20 s at most.
deadline = time.time() + 20
answer, t = explicit()
while not answer.startswith(b'HTTP/1.1 503') and time.time() < deadline:
    time.sleep(0.05)
    answer, t = explicit()
print('explicit', answer.split(b'\r\n')[0].decode(), 'in=%.1fs' % (time.time() - t), flush=True)
print('explicit-body', answer.split(b'\r\n\r\n', 1)[-1].decode().strip(), flush=True)
print('transparent', echo(), flush=True)
for h in held:
    h.close()
# Until the proxy has seen them close: tried again until served, 20 s at most.
deadline = time.time() + 20
after = echo()
while not after.startswith('echo:ping') and time.time() < deadline:
    time.sleep(0.05)
    after = echo()
print('after', after, flush=True)
"#;

// Issue 19, item 10: over the proxy's 256 connections at once, a new one is answered at
// once (503 on the explicit proxy, a clean close on the transparent path), and the
// refusals are in the audit log.
both!(over_the_connection_cap_is_answered_at_once, |fx| {
    let echo = Server::start(Kind::Echo, 0);
    let e = echo.port;
    let client = fx.home.join("e2e/cap.py");
    fx.write(&client, CAP_CLIENT);
    fx.test_config(&format!("network = {{ allow = [\"127.0.0.1:{e}\"] }}\n"));
    let py = python();
    let port = e.to_string();
    let (out, log) = run(
        &fx,
        &[py.to_str().unwrap(), client.to_str().unwrap(), &port],
    );
    out.ok();
    assert!(result(&out, "before").starts_with("echo:ping"), "{out:#?}");
    let explicit = result(&out, "explicit");
    assert!(
        explicit.starts_with("HTTP/1.1 503 Service Unavailable in="),
        "{out:#?}"
    );
    assert!(
        result(&out, "explicit-body").contains("256 connections"),
        "{out:#?}"
    );
    let secs = |s: &str| -> f64 {
        s.rsplit("in=")
            .next()
            .unwrap()
            .trim_end_matches('s')
            .parse()
            .unwrap()
    };
    assert!(secs(&explicit) < 5.0, "{out:#?}");
    let transparent = result(&out, "transparent");
    assert!(transparent.starts_with("closed in="), "{out:#?}");
    assert!(secs(&transparent) < 5.0, "{out:#?}");
    assert!(result(&out, "after").starts_with("echo:ping"), "{out:#?}");
    let busy: Vec<_> = denied(&log)
        .into_iter()
        .filter(|d| {
            d["reason"]
                .as_str()
                .unwrap_or("")
                .contains("256 connections")
        })
        .collect();
    assert!(busy.len() >= 2, "{:#?}", denied(&log));
    assert!(busy.iter().any(|d| d["port"] == 3128), "{busy:#?}");
    assert!(busy.iter().any(|d| d["port"] == u64::from(e)), "{busy:#?}");
});

/// A name from this machine's hosts file that maps to 127.0.0.1 and is not `localhost`
/// (`vm` on the CI machine), if there is one: the proxy resolves it from the hosts file.
fn hosts_file_loopback_name() -> Option<String> {
    let hosts = fs::read_to_string("/etc/hosts").ok()?;
    hosts
        .lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            (f.next()? == "127.0.0.1").then(|| f.map(str::to_string).collect::<Vec<_>>())
        })
        .flatten()
        .find(|n| {
            let n = n.to_ascii_lowercase();
            n != "localhost"
                && !n.contains("localhost")
                && n.bytes()
                    .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'.')
        })
}

// Issue 20, item 1: a name under network.internal reaches the internal address it
// resolves to (here loopback: `127.1`, which the resolver reads as 127.0.0.1, and a
// hosts-file name when this machine has one), explicitly, transparently and through the
// proxy's DNS; the same name under network.allow reaches nothing, and the refusal says
// to add it under network.internal.
both!(internal_names_reach_internal_addresses, |fx| {
    let srv = Server::start(Kind::Http, 0);
    let port = srv.port;
    let client = fx.home.join("e2e/internal.py");
    fx.write(&client, OWN_CLIENT);
    let py = python();
    let port_s = port.to_string();
    let mut names = vec!["127.1".to_string()];
    names.extend(hosts_file_loopback_name());
    for name in &names {
        let argv = [
            py.to_str().unwrap(),
            client.to_str().unwrap(),
            name.as_str(),
            "127.0.0.1",
            port_s.as_str(),
        ];
        // Under allow: public only.
        fx.test_config(&format!("network = {{ allow = [\"{name}:{port}\"] }}\n"));
        let (out, log) = run(&fx, &argv);
        out.ok();
        assert_eq!(result(&out, "dns"), "rcode=0 answers=0", "{name}: {out:#?}");
        let hint = format!("add \"{name}:{port}\" under network.internal");
        for tag in ["explicit", "transparent"] {
            let r = result(&out, tag);
            assert!(
                r.ends_with("code=403") && r.contains(&hint),
                "{name} {tag}: {out:#?}"
            );
        }
        assert!(
            denied(&log)
                .iter()
                .any(|d| d["reason"].as_str().unwrap_or("").contains(&hint)),
            "{name}: {log:#?}"
        );
        assert!(srv.seen().is_empty(), "{name}: {:?}", srv.seen());

        // Under internal: reached, by the proxy's DNS too.
        fx.test_config(&format!(
            "network = {{ allow = [\"example.invalid:1\"], internal = [\"{name}:{port}\"] }}\n"
        ));
        let shown = fx.run(&["policy", "show"]);
        assert!(
            shown.stdout.contains("network internal:")
                && shown
                    .stdout
                    .contains(&format!("{name}:{port} (may resolve to private")),
            "{shown:#?}"
        );
        let (out, _) = run(&fx, &argv);
        out.ok();
        assert_eq!(result(&out, "dns"), "rcode=0 answers=1", "{name}: {out:#?}");
        for tag in ["explicit", "transparent"] {
            assert!(
                result(&out, tag).ends_with("code=200"),
                "{name} {tag}: {out:#?}"
            );
        }
        let seen = srv.seen();
        for path in ["/own-explicit", "/own-transparent"] {
            assert!(
                seen.contains(&format!("{name}:{port} {path}")),
                "{name} {path}: {seen:?}"
            );
        }
        srv.seen.lock().unwrap().clear();

        // The same for one run, by `run --internal` beside a configuration without it.
        fx.test_config("network = { allow = [\"example.invalid:1\"] }\n");
        let entry = format!("{name}:{port}");
        let mut args = vec!["run", "--internal", entry.as_str(), "--"];
        args.extend_from_slice(&argv);
        let out: Out = fx.cmd(&args).output().unwrap().into();
        out.ok();
        assert_eq!(result(&out, "dns"), "rcode=0 answers=1", "{name}: {out:#?}");
        assert!(result(&out, "explicit").ends_with("code=200"), "{out:#?}");
        srv.seen.lock().unwrap().clear();
    }
});

// Issue 35, item 6: allowed connections are summarised in the log, so a long, busy,
// legitimate run (here 2,000 connections under the smallest `max_log_kib`, which one
// line each would pass four times over) is never ended for its log's size, and every
// connection is counted.
both!(a_busy_run_is_summarised_not_ended_for_its_log, |fx| {
    let echo = Server::start(Kind::Echo, 0);
    let e = echo.port;
    let client = fx.home.join("e2e/busy.py");
    fx.write(
        &client,
        "import socket, sys\np = int(sys.argv[1])\nfor i in range(2000):\n    s = socket.create_connection(('127.0.0.1', p), timeout=10)\n    s.sendall(b'x')\n    s.recv(100)\n    s.close()\nprint('done', flush=True)\n",
    );
    fx.test_config(&format!(
        "network = {{ allow = [\"127.0.0.1:{e}\"] }}\n\n[audit]\nmax_log_kib = 128\n"
    ));
    let py = python();
    let (out, log) = run(
        &fx,
        &[
            py.to_str().unwrap(),
            client.to_str().unwrap(),
            &e.to_string(),
        ],
    );
    out.ok();
    assert_eq!(out.stdout, "done\n", "{out:#?}");
    let connects: Vec<&Value> = log
        .iter()
        .filter(|l| l["event"] == "proxy.connect")
        .collect();
    let counted: u64 = connects
        .iter()
        .map(|c| c["connections"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(counted, 2000, "{} events", connects.len());
    assert!(connects.len() < 400, "{} events", connects.len());
});
