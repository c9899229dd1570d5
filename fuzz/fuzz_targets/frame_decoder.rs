//! Frames as any peer could send them (common/src/protocol.rs): every message type of
//! every channel, through the reader (length, limit, payload) and the payload decoder;
//! whatever decodes must encode again to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wardcell_common::protocol::{
    decode_payload, encode_frame, expect_hello, read_frame, AuditAnswer, AuditRequest, GitLook, GuardReport, GuardRequest, Hello, Launch, Message, ProxyEvent,
    ProxyRequest, ShimReport, ShimRequest, ZoneRequest, ZoneResponse,
};

fn check<T>(data: &[u8])
where
    T: Message + PartialEq + std::fmt::Debug,
{
    let _ = read_frame::<T>(&mut &data[..]);
    if let Ok(v) = decode_payload::<T>(data) {
        let frame = encode_frame(&v).expect("a decoded message encodes");
        let back: T = decode_payload(&frame[4..]).expect("an encoded message decodes");
        assert_eq!(back, v);
    }
}

fuzz_target!(|data: &[u8]| {
    let _ = expect_hello(&mut &data[..]);
    check::<Hello>(data);
    check::<Launch>(data);
    check::<ShimRequest>(data);
    check::<ShimReport>(data);
    check::<ProxyRequest>(data);
    check::<ProxyEvent>(data);
    check::<ZoneRequest>(data);
    check::<ZoneResponse>(data);
    check::<GitLook>(data);
    check::<AuditRequest>(data);
    check::<AuditAnswer>(data);
    check::<GuardRequest>(data);
    check::<GuardReport>(data);
});
