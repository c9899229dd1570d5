//! The answers the proxy gives itself (a refusal, a bad gateway), and the body type
//! every response it relays or makes has.

#![forbid(unsafe_code)]

use std::convert::Infallible;

use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};

use crate::allow::Target;

/// Every response body the proxy sends.
pub type Body = UnsyncBoxBody<Bytes, hyper::Error>;

/// A short plain-text response from the proxy itself.
pub fn text(status: StatusCode, msg: String) -> Response<Body> {
    let mut r = Response::new(
        Full::new(Bytes::from(msg))
            .map_err(|n: Infallible| match n {})
            .boxed_unsync(),
    );
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// How long an upstream server may take to answer a request with its response's head:
/// a server that accepts and never answers would hold the connection, and the proxy's
/// slot, for ever. Generous: a model's API answers a long request only once it is done.
pub const RESPONSE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// 504: the upstream server did not answer within [`RESPONSE_TIMEOUT`].
pub fn gateway_timeout(target: &Target) -> Response<Body> {
    let secs = RESPONSE_TIMEOUT.as_secs();
    let why = format!(
        "wardcell: {}:{}: no answer within {secs} s\n",
        target.host, target.port
    );
    text(StatusCode::GATEWAY_TIMEOUT, why)
}

pub fn bad_gateway(target: &Target, e: &dyn std::fmt::Display) -> Response<Body> {
    text(
        StatusCode::BAD_GATEWAY,
        format!("wardcell: {}:{}: {e}\n", target.host, target.port),
    )
}
