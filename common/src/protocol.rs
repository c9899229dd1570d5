//! Frames and messages: the one place that knows the wire format.
//!
//! A frame is a u32 little-endian payload length followed by one bincode 2 message
//! (standard configuration). Each message type carries its channel's limit in bytes on
//! the wire ([`Message::MAX_LEN`]); the writer and the reader check the same number, so
//! whatever one side may send, the other accepts. The length is checked before anything
//! is allocated; a payload must be consumed exactly. The first frame each way on every
//! connection is a [`Hello`] carrying [`PROTOCOL_VERSION`].
//!
//! Messages are typed by direction: each channel has one enum for what may travel
//! one way and one for the other, so a peer cannot even express a message that is
//! out of place on that channel.

use std::fmt;
use std::io::{self, Read, Write};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::plan::{Plan, ProxySpec, SandboxSpec};

/// Bumped whenever any message below changes shape.
pub const PROTOCOL_VERSION: u32 = 6;

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

/// The limit of what the user's own configuration produces (a plan, a sandbox spec, a
/// proxy spec): a plan with 1,000 zones of the built-in read-only profile takes about
/// 4.4 MB (zones of one profile share one prepared sandbox), and a command line is at
/// most the kernel's ARG_MAX (2 MiB by default).
pub const CONFIGURED_MAX: usize = 32 * MIB;
/// The limit of a zone request: the caller's argv and environment, which the kernel
/// already bounds by ARG_MAX (2 MiB by default, a quarter of the stack limit), with room
/// for a larger stack limit.
pub const ZONE_REQUEST_MAX: usize = 4 * MIB;
/// The limit of an answer to a zone request (a zone list with its descriptions).
pub const ZONE_RESPONSE_MAX: usize = 4 * MIB;
/// The limit of a report from a shim or an event from a proxy: short messages.
pub const REPORT_MAX: usize = 64 * KIB;

/// A message that travels in frames: its channel's limit on the payload, in bytes on the
/// wire, checked identically by [`encode_frame`] and [`read_frame`].
pub trait Message: Serialize + DeserializeOwned {
    /// The largest payload (the length prefix not included).
    const MAX_LEN: usize;
    /// What it is, for an error line ("the plan").
    const WHAT: &'static str;
}

/// bincode's decode limit counts what decoding *claims* (every string's bytes, and each
/// integer at its width in memory: up to 8 bytes for one varint byte on the wire), not
/// bytes read. Our messages hold no integer wider than 8 bytes, so a payload of n bytes
/// claims at most `CLAIM_PER_BYTE * n`: the decode limit never refuses a frame the
/// length check let through, and it caps what a forged length inside the payload can
/// make bincode allocate before it finds the bytes missing.
const CLAIM_PER_BYTE: usize = 8;

/// Decode with a limit of `CLAIM_PER_BYTE` times the smallest tier (a power of 4, at least
/// 4 KiB) that holds the payload: at most 32 times `max(payload, 4 KiB)`. bincode's limit
/// is a constant, hence the tiers.
fn decode_bounded<T: DeserializeOwned>(
    payload: &[u8],
) -> Result<(T, usize), bincode::error::DecodeError> {
    use bincode::serde::decode_from_slice as decode;
    let standard = bincode::config::standard();
    const C: usize = CLAIM_PER_BYTE;
    match payload.len() {
        n if n <= 4 * KIB => decode(payload, standard.with_limit::<{ C * 4 * KIB }>()),
        n if n <= 16 * KIB => decode(payload, standard.with_limit::<{ C * 16 * KIB }>()),
        n if n <= 64 * KIB => decode(payload, standard.with_limit::<{ C * 64 * KIB }>()),
        n if n <= 256 * KIB => decode(payload, standard.with_limit::<{ C * 256 * KIB }>()),
        n if n <= MIB => decode(payload, standard.with_limit::<{ C * MIB }>()),
        n if n <= 4 * MIB => decode(payload, standard.with_limit::<{ C * 4 * MIB }>()),
        n if n <= 16 * MIB => decode(payload, standard.with_limit::<{ C * 16 * MIB }>()),
        _ => decode(payload, standard.with_limit::<{ C * 64 * MIB }>()),
    }
}

/// Why a frame could not be read or written. Every variant is one line of text.
#[derive(Debug)]
pub enum FrameError {
    /// The peer closed the connection between frames.
    Closed,
    /// The peer closed the connection inside a frame.
    Truncated,
    /// The length prefix announces more than the message's limit.
    TooLong {
        len: u64,
        max: usize,
    },
    /// The payload is not one well-formed message of the expected type.
    Malformed(String),
    /// The peer's Hello names a different protocol version or release: it is another
    /// build of wardcell. Each side as `Hello::describe` words it.
    Version {
        ours: String,
        theirs: String,
    },
    /// A message to send cannot be encoded (a path that is not UTF-8); nothing was written.
    Unencodable {
        what: &'static str,
        why: String,
    },
    /// A message to send encodes to more than its limit; nothing was written.
    TooLargeToSend {
        what: &'static str,
        len: usize,
        max: usize,
    },
    Io(io::Error),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Closed => write!(f, "the peer closed the connection"),
            FrameError::Truncated => write!(f, "the peer closed the connection inside a frame"),
            FrameError::TooLong { len, max } => {
                write!(f, "frame of {len} bytes refused: the limit is {max}")
            }
            FrameError::Malformed(why) => write!(f, "malformed frame: {why}"),
            FrameError::Version { ours, theirs } => write!(
                f,
                "the peer is another build of wardcell: this side is {ours}, the peer is {theirs}; install matching wardcell binaries"
            ),
            FrameError::TooLargeToSend { what, len, max } => write!(
                f,
                "{what} takes {len} bytes, over its limit of {max} bytes ({})",
                human(*max)
            ),
            FrameError::Unencodable { what, why } => write!(f, "{what} cannot be sent: {why}"),
            FrameError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for FrameError {}

/// `32 MiB`, `64 KiB`, `16 bytes`.
fn human(n: usize) -> String {
    if n >= MIB && n % MIB == 0 {
        format!("{} MiB", n / MIB)
    } else if n >= KIB && n % KIB == 0 {
        format!("{} KiB", n / KIB)
    } else {
        format!("{n} bytes")
    }
}

impl From<io::Error> for FrameError {
    fn from(e: io::Error) -> Self {
        FrameError::Io(e)
    }
}

/// Counts the bytes an encoding would take, keeping none of them.
struct Measure(usize);

impl bincode::enc::write::Writer for Measure {
    fn write(&mut self, bytes: &[u8]) -> Result<(), bincode::error::EncodeError> {
        self.0 += bytes.len();
        Ok(())
    }
}

/// Encode `msg` as a complete frame (length prefix included). The size is measured first,
/// so an over-limit message is refused before its frame is allocated.
pub fn encode_frame<T: Message>(msg: &T) -> Result<Vec<u8>, FrameError> {
    let standard = bincode::config::standard();
    let mut measure = Measure(0);
    bincode::serde::encode_into_writer(msg, &mut measure, standard).map_err(|e| {
        FrameError::Unencodable {
            what: T::WHAT,
            why: match e {
                bincode::error::EncodeError::OtherString(why) => why,
                e => e.to_string(),
            },
        }
    })?;
    let len = measure.0;
    if len > T::MAX_LEN {
        return Err(FrameError::TooLargeToSend {
            what: T::WHAT,
            len,
            max: T::MAX_LEN,
        });
    }
    let mut out = Vec::with_capacity(4 + len);
    out.extend_from_slice(&(len as u32).to_le_bytes());
    bincode::serde::encode_into_std_write(msg, &mut out, standard)
        .map_err(|e| FrameError::Malformed(e.to_string()))?;
    debug_assert_eq!(out.len(), 4 + len);
    Ok(out)
}

/// Decode one payload (without its length prefix). Trailing bytes are an error.
pub fn decode_payload<T: Message>(payload: &[u8]) -> Result<T, FrameError> {
    if payload.len() > T::MAX_LEN {
        return Err(FrameError::TooLong {
            len: payload.len() as u64,
            max: T::MAX_LEN,
        });
    }
    let (msg, used) = decode_bounded(payload).map_err(|e| FrameError::Malformed(e.to_string()))?;
    if used != payload.len() {
        return Err(FrameError::Malformed(format!(
            "{} trailing bytes after the message",
            payload.len() - used
        )));
    }
    Ok(msg)
}

/// Read exactly `buf.len()` bytes; `Ok(false)` when the stream ended before the first byte.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> Result<bool, FrameError> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(FrameError::Truncated),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(FrameError::Io(e)),
        }
    }
    Ok(true)
}

/// Read one frame and decode it as `T`. The length is checked against `T`'s limit before
/// anything is allocated, and the payload buffer grows with the bytes that arrive, not
/// with the length announced.
pub fn read_frame<T: Message>(r: &mut impl Read) -> Result<T, FrameError> {
    let mut len = [0u8; 4];
    if !read_full(r, &mut len)? {
        return Err(FrameError::Closed);
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > T::MAX_LEN {
        return Err(FrameError::TooLong {
            len: len as u64,
            max: T::MAX_LEN,
        });
    }
    let mut payload = Vec::with_capacity(len.min(64 * KIB));
    r.take(len as u64).read_to_end(&mut payload)?;
    if payload.len() != len {
        return Err(FrameError::Truncated);
    }
    decode_payload(&payload)
}

/// Encode and write one frame.
pub fn write_frame<T: Message>(w: &mut impl Write, msg: &T) -> Result<(), FrameError> {
    let frame = encode_frame(msg)?;
    w.write_all(&frame)?;
    w.flush()?;
    Ok(())
}

/// The first frame each way on every connection: the protocol version and the release
/// (the package version) of the build that sends it. Either differing refuses the
/// connection, so a helper of another installation is never spoken to.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    pub version: u32,
    /// The package version, NUL-padded.
    pub release: [u8; 16],
}

/// This build's release, as every binary of it reports it (`--version`).
pub const RELEASE: &str = env!("CARGO_PKG_VERSION");

impl Hello {
    pub const CURRENT: Hello = Hello {
        version: PROTOCOL_VERSION,
        release: padded(RELEASE),
    };

    /// "wardcell RELEASE (protocol N)", the release's bytes shown as text.
    pub fn describe(&self) -> String {
        let end = self.release.iter().position(|&b| b == 0).unwrap_or(16);
        let release = String::from_utf8_lossy(&self.release[..end]);
        let release = crate::text::shown(&release);
        format!("wardcell {release} (protocol {})", self.version)
    }
}

/// `s` NUL-padded to 16 bytes (a release never is longer: checked at compile time).
const fn padded(s: &str) -> [u8; 16] {
    let (b, mut out, mut i) = (s.as_bytes(), [0u8; 16], 0);
    assert!(b.len() <= 16, "a release of more than 16 bytes");
    while i < b.len() {
        out[i] = b[i];
        i += 1;
    }
    out
}

impl Message for Hello {
    const MAX_LEN: usize = 32;
    const WHAT: &'static str = "a hello";
}

/// Send our Hello.
pub fn send_hello(w: &mut impl Write) -> Result<(), FrameError> {
    write_frame(w, &Hello::CURRENT)
}

/// Read the peer's Hello and refuse any other version or release.
pub fn expect_hello(r: &mut impl Read) -> Result<(), FrameError> {
    let hello: Hello = read_frame(r)?;
    if hello != Hello::CURRENT {
        return Err(FrameError::Version {
            ours: Hello::CURRENT.describe(),
            theirs: hello.describe(),
        });
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Channel: client -> broker (the launch fd; one direction only)
// ---------------------------------------------------------------------------

/// What the client hands the broker it execs: exactly one message after the Hello.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum Launch {
    Run(Box<Plan>),
}

// ---------------------------------------------------------------------------
// Channel: broker <-> shim (a socketpair per sandbox)
// ---------------------------------------------------------------------------

/// Broker -> shim: `Start` after the Hello; `Proceed` after the shim sent its proxy
/// listener (only when the spec asks for one).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum ShimRequest {
    Start(Box<SandboxSpec>),
    /// The proxy is serving: start the command. `ca_pem` is the per-run CA certificate
    /// when the proxy intercepts TLS; the shim appends it to the spec's system roots in
    /// the bundle that SSL_CERT_FILE and friends name.
    Proceed {
        ca_pem: Option<String>,
    },
}

/// Shim -> broker.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum ShimReport {
    /// The proxy's sockets, created in the sandbox's network namespace, travel beside
    /// this frame (SCM_RIGHTS, one message): its listener on 127.0.0.1, the DNS socket,
    /// and one listener per `SandboxSpec::egress_ports` port, in that order.
    Listener,
    /// A step before exec failed; nothing ran. `step` names it, `message` says why.
    SetupFailed { step: String, message: String },
    /// Landlock is enforced at this ABI; `partial` lists what this kernel could not add.
    Confined {
        landlock_abi: i32,
        partial: Vec<String>,
    },
    /// execve of the command failed with this errno; nothing ran.
    ExecFailed { errno: i32 },
    /// The command ended with this exit code.
    Exited { code: i32 },
    /// The command was ended by this signal.
    Signaled { signal: i32 },
    /// The command was stopped by this signal (Ctrl-Z at its terminal); it goes on when
    /// init is sent SIGCONT.
    Stopped { signal: i32 },
}

// ---------------------------------------------------------------------------
// Channel: broker <-> proxy (a socketpair per proxy)
// ---------------------------------------------------------------------------

/// Broker -> proxy: exactly one message after the Hello. Just before it, the sockets the
/// shim made in the sandbox's network namespace (its `Listener` report says which, and in
/// what order) travel as a 1-byte message ('F') with SCM_RIGHTS.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum ProxyRequest {
    Start(Box<ProxySpec>),
}

/// Proxy -> broker. Never carries a secret.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum ProxyEvent {
    /// Serving. `ca_pem` is the per-run CA certificate when this proxy intercepts TLS.
    Ready { ca_pem: Option<String> },
    /// The proxy cannot serve (for example, a credential file others can read).
    Failed { message: String },
    /// A connection or request was allowed and has ended.
    Connect {
        host: String,
        port: u16,
        credential: Option<String>,
        bytes_up: u64,
        bytes_down: u64,
        /// How many connections or requests this event sums up: 1, or, past the rate
        /// the proxy reports one by one, all of them to this host, port and credential
        /// since the last summary (their bytes added up).
        connections: u64,
    },
    /// A connection or request was refused (403).
    Denied {
        host: String,
        port: u16,
        reason: String,
    },
}

// ---------------------------------------------------------------------------
// Channel: `wardcell zone ...` inside a sandbox <-> its supervisor in the broker
// ---------------------------------------------------------------------------

/// Sandbox -> supervisor: one request per connection after the Hello.
/// It never says which zone it calls from, nor where it runs: the supervisor knows the
/// zone, and reads the caller's working directory from the kernel.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum ZoneRequest {
    List,
    /// Run `argv` in `zone` with `env` (filtered by the zone's rules). `closed` says
    /// which of the caller's stdin, stdout and stderr are closed (bit N for fd N; no
    /// other bit may be set): they stay closed in the command. Right after this frame,
    /// the others follow, in order, as one 1-byte message ('F') with SCM_RIGHTS.
    Enter {
        zone: String,
        argv: Vec<String>,
        env: Vec<(String, String)>,
        closed: u8,
    },
    /// `zone why`: the rules of this sandbox's zone and of the zones it may enter.
    Why,
}

/// One zone the caller may enter, as `zone list` shows it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ZoneEntry {
    pub name: String,
    pub description: Option<String>,
}

impl From<&crate::plan::ZonePlan> for ZoneEntry {
    fn from(z: &crate::plan::ZonePlan) -> ZoneEntry {
        let (name, description) = (z.name.clone(), z.description.clone());
        ZoneEntry { name, description }
    }
}

/// Supervisor -> sandbox.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum ZoneResponse {
    Zones {
        current: String,
        zones: Vec<ZoneEntry>,
    },
    /// The answer to `Why`: this zone's rules, then those of each zone it may enter.
    Rules {
        current: Box<crate::why::Rules>,
        enterable: Vec<crate::why::Rules>,
    },
    /// The request is refused; `message` is the user's one-line error without `error: `.
    Refused { message: String },
    /// The command started in its new sandbox.
    Started,
    /// The command ended with this exit code (128+N for signal N).
    Exited { code: i32 },
    /// The command could not be started in its sandbox (not found: 127, not executable:
    /// 126, the sandbox could not be built: 1).
    Failed { message: String, code: i32 },
    /// The entry waits for the approval plugin, for at most `timeout_secs` (None: until
    /// it answers); `plugin` is the file name of its program (where the person answers
    /// depends on it). Sent once, before the entry's answer; last, so
    /// that the variants before it keep their numbers.
    Waiting {
        timeout_secs: Option<u64>,
        plugin: String,
    },
}

impl ZoneResponse {
    /// [`ZoneResponse::Waiting`] for a plugin run as `argv` (its program's file name
    /// only: its arguments are not the sandbox's to see).
    pub fn waiting(argv: Option<&[String]>, timeout_secs: Option<u64>) -> ZoneResponse {
        let program = argv.and_then(|a| a.first()).map(std::path::Path::new);
        let name = program.and_then(std::path::Path::file_name);
        let plugin = name.map_or(String::new(), |n| n.to_string_lossy().into_owned());
        ZoneResponse::Waiting {
            timeout_secs,
            plugin,
        }
    }
}

/// What `wardcell-shim --git-watch` saw in the run's repository: everything there that
/// can make git run code and was not there when the run started, one line each, naming
/// the path and why. Its first frame, once it has taken the snapshot, has none; then one
/// for every byte the broker writes to its stdin. Bounded: at most [`GitLook::MOST`]
/// lines of at most [`GitLook::MOST_BYTES`] bytes each; a look that breaks a bound is
/// one that could not be made.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct GitLook {
    pub lines: Vec<String>,
}

impl GitLook {
    pub const MOST: usize = 64;
    pub const MOST_BYTES: usize = 4 * KIB;

    /// Whether it keeps its bounds.
    pub fn is_bounded(&self) -> bool {
        self.lines.len() <= Self::MOST && self.lines.iter().all(|l| l.len() <= Self::MOST_BYTES)
    }
}

/// Channel G (PROTOCOL 7.3): what the broker asks of the run's audit writer
/// (`wardcell-shim --helper`), one frame a request on its stdin, each answered with one
/// [`AuditAnswer`] on its stdout. The writer keeps the log's chain, its size limit and
/// the rates below; the broker decides what each answer allows.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum AuditRequest {
    /// The first, and only the first: create the run's log at `path` (it must not exist),
    /// which may grow to `max_log_kib` KiB (0: the default), each event copied to syslog
    /// when `syslog`.
    Open {
        path: std::path::PathBuf,
        run: String,
        syslog: bool,
        max_log_kib: u64,
    },
    /// One event, its fields as one JSON object's text. `counted`: an event a sandbox can
    /// cause at will, written at that rate and counted past it.
    Event {
        category: String,
        event: String,
        fields: String,
        counted: Option<Rate>,
    },
}

/// Which rate a counted event is held to: a burst of [`COUNTED_BURST`], then
/// [`COUNTED_PER_SECOND`] a second, each rate its own.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rate {
    /// Connections closed or refused, entries refused.
    Refusals,
    /// Entries allowed: each starts a sandbox, and is refused when it is not written.
    Entries,
}

pub const COUNTED_BURST: u32 = 100;
pub const COUNTED_PER_SECOND: u32 = 20;

/// The audit writer's answer to one request.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum AuditAnswer {
    Written,
    /// A counted event past its rate: not written, counted in the next `audit.suppressed`.
    Counted,
    /// The log cannot take it, and (but for `run.finished` at the size limit) no later
    /// event either: why, in one line.
    Failed(String),
}

impl Message for AuditRequest {
    // An event holds at most a zone request's argv and environment, or the plan's words.
    const MAX_LEN: usize = 2 * CONFIGURED_MAX;
    const WHAT: &'static str = "an audit event";
}

impl Message for AuditAnswer {
    const MAX_LEN: usize = REPORT_MAX;
    const WHAT: &'static str = "the audit writer's answer";
}

/// Channel H (PROTOCOL 7.4): what the broker asks of the run's guard
/// (a thread of `wardcell-shim --helper`, on its fd 3), which watches on the host what
/// the views hold.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum GuardRequest {
    /// Watch each `(path, tree)` before a sandbox's view is built; answered `Held` once
    /// every watch is added, or `Unheld`.
    Hold(Vec<(std::path::PathBuf, std::path::PathBuf)>),
    /// The run has ended: every watch removed, nothing reported after; answered `Ended`.
    End,
}

/// What the guard says: an answer, a held path the host undid, or that it still watches
/// (at least once a second).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum GuardReport {
    Held,
    Unheld(String),
    Ended,
    Lost(std::path::PathBuf),
    Tick,
}

impl Message for GuardRequest {
    const MAX_LEN: usize = CONFIGURED_MAX;
    const WHAT: &'static str = "the paths to hold";
}

impl Message for GuardReport {
    const MAX_LEN: usize = REPORT_MAX;
    const WHAT: &'static str = "the guard's report";
}

impl Message for GitLook {
    const MAX_LEN: usize = 2 * GitLook::MOST * GitLook::MOST_BYTES;
    const WHAT: &'static str = "a look at the run's repository";
}

impl Message for Launch {
    const MAX_LEN: usize = CONFIGURED_MAX;
    const WHAT: &'static str = "the plan";
}

impl Message for ShimRequest {
    const MAX_LEN: usize = CONFIGURED_MAX;
    const WHAT: &'static str = "the sandbox spec";
}

impl Message for ShimReport {
    const MAX_LEN: usize = REPORT_MAX;
    const WHAT: &'static str = "a shim report";
}

impl Message for ProxyRequest {
    const MAX_LEN: usize = CONFIGURED_MAX;
    const WHAT: &'static str = "the proxy spec";
}

impl Message for ProxyEvent {
    const MAX_LEN: usize = REPORT_MAX;
    const WHAT: &'static str = "a proxy event";
}

impl Message for ZoneRequest {
    const MAX_LEN: usize = ZONE_REQUEST_MAX;
    const WHAT: &'static str = "the zone request (command and environment)";
}

impl Message for ZoneResponse {
    const MAX_LEN: usize = ZONE_RESPONSE_MAX;
    const WHAT: &'static str = "the supervisor's answer";
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn frame_of<T: Message>(msg: &T) -> Vec<u8> {
        encode_frame(msg).expect("encodes")
    }

    #[test]
    fn round_trips_every_zone_message() {
        let msgs = vec![
            ZoneRequest::List,
            ZoneRequest::Enter {
                zone: "push".into(),
                argv: vec!["git".into(), "push".into()],
                env: vec![("A".into(), "b".into())],
                closed: 2,
            },
            ZoneRequest::Why,
        ];
        for m in msgs {
            let f = frame_of(&m);
            let back: ZoneRequest = read_frame(&mut Cursor::new(f)).unwrap();
            assert_eq!(back, m);
        }
        let r = ZoneResponse::Zones {
            current: "agent".into(),
            zones: vec![ZoneEntry {
                name: "push".into(),
                description: None,
            }],
        };
        let back: ZoneResponse = read_frame(&mut Cursor::new(frame_of(&r))).unwrap();
        assert_eq!(back, r);
        let rules = crate::why::Rules {
            zone: Some("agent".into()),
            allow: Some(vec!["a.example:443".into()]),
            masked: vec![("/run".into(), "sockets".into())],
            ..Default::default()
        };
        let r = ZoneResponse::Rules {
            current: Box::new(rules.clone()),
            enterable: vec![rules],
        };
        let back: ZoneResponse = read_frame(&mut Cursor::new(frame_of(&r))).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn round_trips_shim_reports() {
        for m in [
            ShimReport::ExecFailed { errno: 2 },
            ShimReport::Exited { code: 3 },
            ShimReport::Signaled { signal: 9 },
            ShimReport::SetupFailed {
                step: "landlock".into(),
                message: "x".into(),
            },
        ] {
            let back: ShimReport = read_frame(&mut Cursor::new(frame_of(&m))).unwrap();
            assert_eq!(back, m);
        }
    }

    #[test]
    fn hello_matches_and_mismatches() {
        let mut buf = Vec::new();
        send_hello(&mut buf).unwrap();
        expect_hello(&mut Cursor::new(buf)).unwrap();

        let ours = format!("wardcell {RELEASE} (protocol {PROTOCOL_VERSION})");
        let other = frame_of(&Hello {
            version: 99,
            ..Hello::CURRENT
        });
        match expect_hello(&mut Cursor::new(other)) {
            Err(FrameError::Version { ours: o, theirs }) => {
                assert_eq!(o, ours);
                assert_eq!(theirs, format!("wardcell {RELEASE} (protocol 99)"));
            }
            other => panic!("expected a version error, got {other:?}"),
        }
        // Another release of the same protocol is refused too, its bytes shown safely.
        let mut release = padded("0.0.9\x1b[2J");
        release[15] = 0xff;
        let other = frame_of(&Hello {
            release,
            ..Hello::CURRENT
        });
        let msg = expect_hello(&mut Cursor::new(other))
            .unwrap_err()
            .to_string();
        assert!(
            msg.starts_with(&format!("the peer is another build of wardcell: this side is {ours}, the peer is wardcell 0.0.9")),
            "{msg}"
        );
        assert!(!msg.contains('\x1b'), "{msg}");
    }

    #[test]
    fn empty_stream_is_closed() {
        assert!(matches!(
            read_frame::<Hello>(&mut Cursor::new(Vec::new())),
            Err(FrameError::Closed)
        ));
    }

    #[test]
    fn truncated_prefix_and_payload_are_errors() {
        let f = frame_of(&ZoneRequest::Enter {
            zone: "push".into(),
            argv: vec!["true".into()],
            env: vec![],
            closed: 0,
        });
        for cut in [1, 2, 3, 5, f.len() - 1] {
            let r = read_frame::<ZoneRequest>(&mut Cursor::new(f[..cut].to_vec()));
            assert!(matches!(r, Err(FrameError::Truncated)), "cut {cut}: {r:?}");
        }
    }

    /// A reader that fails the test if more than `limit` bytes are ever requested,
    /// proving the length check comes before the allocation.
    struct Stingy {
        data: Cursor<Vec<u8>>,
    }
    impl Read for Stingy {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            assert!(buf.len() <= 64 * KIB, "asked for {} bytes", buf.len());
            self.data.read(buf)
        }
    }

    #[test]
    fn oversized_length_is_refused_before_allocation() {
        for len in [ZONE_REQUEST_MAX as u32 + 1, u32::MAX] {
            let mut data = len.to_le_bytes().to_vec();
            data.extend_from_slice(&[0u8; 16]);
            let r = read_frame::<ZoneRequest>(&mut Stingy {
                data: Cursor::new(data),
            });
            assert!(
                matches!(r, Err(FrameError::TooLong { len: n, max }) if n == len as u64 && max == ZONE_REQUEST_MAX),
                "{r:?}"
            );
        }
    }

    #[test]
    fn oversized_message_is_not_sent() {
        let big = ZoneRequest::Enter {
            zone: "z".into(),
            argv: vec!["x".repeat(ZONE_REQUEST_MAX)],
            env: vec![],
            closed: 0,
        };
        assert!(matches!(
            encode_frame(&big),
            Err(FrameError::TooLargeToSend { len, max: ZONE_REQUEST_MAX, .. }) if len > ZONE_REQUEST_MAX
        ));
    }

    /// The worst case for bincode's claim accounting: empty strings (one byte on the wire,
    /// eight claimed for the length). A payload filling each decode tier to the top still
    /// decodes, so the decode limit never refuses what the length check let through.
    #[test]
    fn the_decode_limit_never_refuses_a_frame_within_the_wire_limit() {
        for tier in [4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB, MIB] {
            // Enter: variant 1 byte, zone "z" 2 bytes, argv length up to 5 bytes, env 1,
            // closed 1.
            let count = tier - 1 - 2 - 5 - 1 - 1;
            let msg = ZoneRequest::Enter {
                zone: "z".into(),
                argv: vec![String::new(); count],
                env: vec![],
                closed: 0,
            };
            let f = frame_of(&msg);
            assert!(f.len() - 4 <= tier, "{} > {tier}", f.len() - 4);
            let back: ZoneRequest = read_frame(&mut Cursor::new(f)).expect("decodes");
            assert_eq!(back, msg);
        }
    }

    /// A length inside the payload that claims more than the tier's limit is refused by
    /// bincode before it allocates: a 9-byte payload may not make it allocate 40 KiB.
    #[test]
    fn a_forged_inner_length_is_refused_before_allocating() {
        for claimed in [40 * KIB as u64, u32::MAX as u64, u64::MAX >> 1] {
            // Enter { zone: <string of `claimed` bytes>, .. }
            let mut payload = vec![1u8, 0xfd];
            payload.extend_from_slice(&claimed.to_le_bytes());
            let r = decode_payload::<ZoneRequest>(&payload);
            match r {
                Err(FrameError::Malformed(why)) => {
                    assert!(why.contains("LimitExceeded"), "{why}")
                }
                other => panic!("{other:?}"),
            }
        }
        // A vector of 2^60 strings: refused when its first missing element is read.
        let mut payload = vec![1u8, 1, b'z', 0xfd];
        payload.extend_from_slice(&(1u64 << 60).to_le_bytes());
        assert!(matches!(
            decode_payload::<ZoneRequest>(&payload),
            Err(FrameError::Malformed(_))
        ));
    }

    /// A frame that announces 4 MiB and sends 10 bytes never gets a 4 MiB buffer: the
    /// buffer grows with what arrives.
    #[test]
    fn an_announced_length_is_not_allocated_before_the_bytes_arrive() {
        let mut data = (ZONE_REQUEST_MAX as u32).to_le_bytes().to_vec();
        data.extend_from_slice(&[1u8; 10]);
        let r = read_frame::<ZoneRequest>(&mut Stingy {
            data: Cursor::new(data),
        });
        assert!(matches!(r, Err(FrameError::Truncated)), "{r:?}");
    }

    #[test]
    fn every_channel_has_its_limit_on_both_sides() {
        // The plan of a large configuration passes; one byte over the limit does not,
        // whichever side checks.
        let over = vec![0u8; REPORT_MAX + 1];
        assert!(matches!(
            decode_payload::<ShimReport>(&over),
            Err(FrameError::TooLong {
                max: REPORT_MAX,
                ..
            })
        ));
        let report = ShimReport::SetupFailed {
            step: "x".into(),
            message: "m".repeat(REPORT_MAX),
        };
        let e = encode_frame(&report).unwrap_err();
        assert!(matches!(
            e,
            FrameError::TooLargeToSend {
                max: REPORT_MAX,
                ..
            }
        ));
        assert!(
            e.to_string().starts_with(
                "a shim report takes 65544 bytes, over its limit of 65536 bytes (64 KiB)"
            ),
            "{e}"
        );
    }

    #[test]
    fn garbage_is_malformed_never_a_panic() {
        // Unknown enum discriminants, lengths beyond the payload, invalid UTF-8,
        // and a deterministic spread of pseudo-random payloads.
        let cases: Vec<Vec<u8>> = vec![
            vec![],
            vec![0xff],
            vec![7],                         // discriminant out of range
            vec![1, 0xfb, 0xff, 0xff, 0xff], // string length far beyond the payload
            vec![1, 2, 0xc3, 0x28, 0, 0, 0], // invalid UTF-8 in a string
            vec![1, 0xfd, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f], // huge u64 length
        ];
        for payload in cases {
            let mut frame = (payload.len() as u32).to_le_bytes().to_vec();
            frame.extend_from_slice(&payload);
            let r = read_frame::<ZoneRequest>(&mut Cursor::new(frame));
            assert!(
                matches!(r, Err(FrameError::Malformed(_))),
                "{payload:?}: {r:?}"
            );
        }
        let mut x: u64 = 0x9e3779b97f4a7c15;
        for round in 0..5000 {
            let n = (round % 97) as usize;
            let mut payload = Vec::with_capacity(n);
            for _ in 0..n {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                payload.push(x as u8);
            }
            // Must return (Ok or Err), never panic or allocate past the limit.
            let _ = decode_payload::<ZoneRequest>(&payload);
            let _ = decode_payload::<ShimReport>(&payload);
            let _ = decode_payload::<Launch>(&payload);
        }
    }

    #[test]
    fn trailing_bytes_are_malformed() {
        let mut f = frame_of(&ZoneRequest::List);
        f.push(0);
        let len = (f.len() - 4) as u32;
        f[..4].copy_from_slice(&len.to_le_bytes());
        let r = read_frame::<ZoneRequest>(&mut Cursor::new(f));
        assert!(matches!(r, Err(FrameError::Malformed(_))), "{r:?}");
    }

    #[test]
    fn a_message_of_one_direction_does_not_decode_as_the_other() {
        // Shim reports are not zone requests: discriminant 2+ is out of range there.
        let f = frame_of(&ShimReport::Exited { code: 0 });
        assert!(read_frame::<ZoneRequest>(&mut Cursor::new(f)).is_err());
    }
}
