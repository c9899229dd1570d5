//! Frames and messages: the one place that knows the wire format.
//!
//! A frame is a u32 little-endian payload length followed by one bincode 2 message
//! (standard configuration, decode limit = [`MAX_FRAME_LEN`]). The length is checked
//! before anything is allocated; a payload must be consumed exactly. The first frame
//! each way on every connection is a [`Hello`] carrying [`PROTOCOL_VERSION`].
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
pub const PROTOCOL_VERSION: u32 = 2;

/// Largest payload a frame may carry (the length prefix not included).
pub const MAX_FRAME_LEN: usize = 64 * 1024;

fn bincode_config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<MAX_FRAME_LEN>()
}

/// Why a frame could not be read or written. Every variant is one line of text.
#[derive(Debug)]
pub enum FrameError {
    /// The peer closed the connection between frames.
    Closed,
    /// The peer closed the connection inside a frame.
    Truncated,
    /// The length prefix announces more than [`MAX_FRAME_LEN`].
    TooLong(u64),
    /// The payload is not one well-formed message of the expected type.
    Malformed(String),
    /// The peer's Hello names a different protocol version.
    Version {
        ours: u32,
        theirs: u32,
    },
    /// A message to send encodes to more than [`MAX_FRAME_LEN`].
    TooLargeToSend(usize),
    Io(io::Error),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Closed => write!(f, "the peer closed the connection"),
            FrameError::Truncated => write!(f, "the peer closed the connection inside a frame"),
            FrameError::TooLong(n) => {
                write!(f, "frame of {n} bytes refused: the limit is {MAX_FRAME_LEN}")
            }
            FrameError::Malformed(why) => write!(f, "malformed frame: {why}"),
            FrameError::Version { ours, theirs } => write!(
                f,
                "protocol version mismatch: this side speaks version {ours}, the peer speaks version {theirs}; install matching wardcell binaries"
            ),
            FrameError::TooLargeToSend(n) => {
                write!(f, "message of {n} bytes is over the {MAX_FRAME_LEN}-byte frame limit")
            }
            FrameError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for FrameError {}

impl From<io::Error> for FrameError {
    fn from(e: io::Error) -> Self {
        FrameError::Io(e)
    }
}

/// Encode `msg` as a complete frame (length prefix included).
pub fn encode_frame<T: Serialize>(msg: &T) -> Result<Vec<u8>, FrameError> {
    let mut out = vec![0u8; 4];
    // The limit only bounds decoding; encoding is checked against it just below.
    bincode::serde::encode_into_std_write(msg, &mut out, bincode::config::standard())
        .map_err(|e| FrameError::Malformed(e.to_string()))?;
    let len = out.len() - 4;
    if len > MAX_FRAME_LEN {
        return Err(FrameError::TooLargeToSend(len));
    }
    out[..4].copy_from_slice(&(len as u32).to_le_bytes());
    Ok(out)
}

/// Decode one payload (without its length prefix). Trailing bytes are an error.
pub fn decode_payload<T: DeserializeOwned>(payload: &[u8]) -> Result<T, FrameError> {
    if payload.len() > MAX_FRAME_LEN {
        return Err(FrameError::TooLong(payload.len() as u64));
    }
    let (msg, used) = bincode::serde::decode_from_slice(payload, bincode_config())
        .map_err(|e| FrameError::Malformed(e.to_string()))?;
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

/// Read one frame and decode it as `T`. The length is checked before allocating.
pub fn read_frame<T: DeserializeOwned>(r: &mut impl Read) -> Result<T, FrameError> {
    let mut len = [0u8; 4];
    if !read_full(r, &mut len)? {
        return Err(FrameError::Closed);
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME_LEN {
        return Err(FrameError::TooLong(len as u64));
    }
    let mut payload = vec![0u8; len];
    if !read_full(r, &mut payload)? && len > 0 {
        return Err(FrameError::Truncated);
    }
    decode_payload(&payload)
}

/// Encode and write one frame.
pub fn write_frame<T: Serialize>(w: &mut impl Write, msg: &T) -> Result<(), FrameError> {
    let frame = encode_frame(msg)?;
    w.write_all(&frame)?;
    w.flush()?;
    Ok(())
}

/// The first frame each way on every connection.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    pub version: u32,
}

impl Hello {
    pub const CURRENT: Hello = Hello {
        version: PROTOCOL_VERSION,
    };
}

/// Send our Hello.
pub fn send_hello(w: &mut impl Write) -> Result<(), FrameError> {
    write_frame(w, &Hello::CURRENT)
}

/// Read the peer's Hello and refuse any other version.
pub fn expect_hello(r: &mut impl Read) -> Result<(), FrameError> {
    let hello: Hello = read_frame(r)?;
    if hello.version != PROTOCOL_VERSION {
        return Err(FrameError::Version {
            ours: PROTOCOL_VERSION,
            theirs: hello.version,
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
    /// The proxy listener, created in the sandbox's network namespace, travels beside
    /// this frame (SCM_RIGHTS).
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

/// Broker -> proxy: exactly one message after the Hello. Just before it, the TCP listener
/// (already listening, in the sandbox's network namespace) travels as a 1-byte message
/// ('F') with SCM_RIGHTS.
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
    /// Run `argv` in `zone` with `env` (filtered by the zone's rules). Right after this
    /// frame, stdin, stdout and stderr follow as one 1-byte message ('F') with SCM_RIGHTS.
    Enter {
        zone: String,
        argv: Vec<String>,
        env: Vec<(String, String)>,
    },
}

/// One zone the caller may enter, as `zone list` shows it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ZoneEntry {
    pub name: String,
    pub description: Option<String>,
}

/// Supervisor -> sandbox.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum ZoneResponse {
    Zones {
        current: String,
        zones: Vec<ZoneEntry>,
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn frame_of<T: Serialize>(msg: &T) -> Vec<u8> {
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
            },
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

        let other = frame_of(&Hello { version: 99 });
        match expect_hello(&mut Cursor::new(other)) {
            Err(FrameError::Version { ours, theirs }) => {
                assert_eq!(ours, PROTOCOL_VERSION);
                assert_eq!(theirs, 99);
            }
            other => panic!("expected a version error, got {other:?}"),
        }
        let msg = FrameError::Version {
            ours: 1,
            theirs: 99,
        }
        .to_string();
        assert!(
            msg.contains("version 1") && msg.contains("version 99"),
            "{msg}"
        );
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
            assert!(buf.len() <= MAX_FRAME_LEN, "asked for {} bytes", buf.len());
            self.data.read(buf)
        }
    }

    #[test]
    fn oversized_length_is_refused_before_allocation() {
        for len in [MAX_FRAME_LEN as u32 + 1, u32::MAX] {
            let mut data = len.to_le_bytes().to_vec();
            data.extend_from_slice(&[0u8; 16]);
            let r = read_frame::<ZoneRequest>(&mut Stingy {
                data: Cursor::new(data),
            });
            assert!(
                matches!(r, Err(FrameError::TooLong(n)) if n == len as u64),
                "{r:?}"
            );
        }
    }

    #[test]
    fn oversized_message_is_not_sent() {
        let big = ZoneRequest::Enter {
            zone: "z".into(),
            argv: vec!["x".repeat(MAX_FRAME_LEN)],
            env: vec![],
        };
        assert!(matches!(
            encode_frame(&big),
            Err(FrameError::TooLargeToSend(_))
        ));
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
