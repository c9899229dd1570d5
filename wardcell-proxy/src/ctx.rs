//! What every connection of the proxy shares, read-only: the zone, its allow-list and
//! credentials, the interception it may do, the event channel, and the connection
//! slots; and the one path from an allowed target to a dialed connection (`Ctx::admit`),
//! with the refusals it answers.

#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::{Response, StatusCode};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

use wardcell_common::protocol::ProxyEvent;

use crate::allow::{AllowList, Target};
use crate::answer::{bad_gateway, text, Body};
use crate::ca::Interceptor;
use crate::control::Events;
use crate::credentials::Credentials;
use crate::dns::{self, Unreachable};

/// What kind of refusal a refusal is, for the advice it gives.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Refusal {
    /// The target is on no list of this zone.
    NotListed,
    /// Listed, but the name leads to an address its entry may not reach.
    Address,
    /// Anything else (a scheme, an address the name does not have): no zone helps.
    Other,
}

/// Connections served at once (client connections and tunnels each hold one slot).
const MAX_CONNECTIONS: usize = 256;
/// Why a connection over [`MAX_CONNECTIONS`] is refused.
pub const BUSY: &str =
    "the proxy already serves 256 connections, the most it serves at once; try again when some have ended";
/// A client has this long to send a request head.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// Everything a connection needs, shared read-only.
pub struct Ctx {
    pub zone: String,
    pub allow: AllowList,
    /// The zones this sandbox may enter and what each allows: all its entries, and its
    /// `network.internal` alone (advice for refusals).
    elsewhere: Vec<(String, (AllowList, AllowList))>,
    pub creds: Credentials,
    /// Present exactly when some credential is configured.
    pub intercept: Option<Interceptor>,
    pub events: Events,
    slots: Arc<Semaphore>,
}

impl Ctx {
    pub fn new(
        zone: String,
        allow: AllowList,
        creds: Credentials,
        intercept: Option<Interceptor>,
        events: Events,
    ) -> Ctx {
        Ctx {
            zone,
            allow,
            elsewhere: Vec::new(),
            creds,
            intercept,
            events,
            slots: Arc::new(Semaphore::new(MAX_CONNECTIONS)),
        }
    }

    /// The zones this sandbox may enter, with what each allows.
    pub fn with_elsewhere(mut self, elsewhere: Vec<(String, (AllowList, AllowList))>) -> Ctx {
        self.elsewhere = elsewhere;
        self
    }

    /// One of the connection slots, or `None` when all [`MAX_CONNECTIONS`] are taken.
    pub fn slot(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.slots.clone().try_acquire_owned().ok()
    }

    /// A connection refused because every slot is taken: a `proxy.denied` event (host
    /// `-` when the destination is not known yet), throttled and counted as every
    /// refusal is.
    pub fn refuse_busy(&self, host: &str, port: u16) {
        self.events.send(ProxyEvent::Denied {
            host: host.to_string(),
            port,
            reason: BUSY.into(),
        });
    }

    /// The allow-list, the address policy and the dial, in that order. The stream
    /// returned is connected to the address that was checked.
    pub async fn admit(&self, t: &Target) -> Result<(TcpStream, SocketAddr), Response<Body>> {
        let Some(rule) = self.allow.find(t) else {
            return Err(self.deny(t, Refusal::NotListed, "not in the allow list".into()));
        };
        let addrs = match dns::resolve(t, rule).await {
            Ok(a) => a,
            Err(u @ Unreachable::Refused(_)) => {
                return Err(self.deny(t, Refusal::Address, u.to_string()))
            }
            Err(u) => return Err(self.unreachable(t, u)),
        };
        dns::dial(&addrs).await.map_err(|u| self.unreachable(t, u))
    }

    /// What [`Ctx::admit`] would decide, without dialing and without an event: the
    /// allow-list and the address policy (a name is looked up). `Err` is why not.
    pub async fn check(&self, t: &Target) -> Result<(), String> {
        let Some(rule) = self.allow.find(t) else {
            return Err("not in the allow list".into());
        };
        match dns::resolve(t, rule).await {
            Ok(_) => Ok(()),
            Err(u @ Unreachable::Refused(_)) => Err(u.to_string()),
            // Allowed, and not reachable now: a connection would get 502, not 403.
            Err(_) => Ok(()),
        }
    }

    /// 403 and a `proxy.denied` event. The why and the next step are in the status
    /// line's reason phrase, which is all many tools print (`Tunnel connection failed:
    /// 403 ...`), and in the body.
    pub fn deny(&self, t: &Target, kind: Refusal, reason: String) -> Response<Body> {
        let (phrase, body) = self.refusal(t, kind, &reason);
        self.events.send(ProxyEvent::Denied {
            host: t.host.to_string(),
            port: t.port,
            reason,
        });
        let mut resp = text(StatusCode::FORBIDDEN, body);
        if let Ok(p) = hyper::ext::ReasonPhrase::try_from(phrase) {
            resp.extensions_mut().insert(p);
        }
        resp
    }

    /// A refusal in words, as a reason phrase (one line) and a body: what was refused,
    /// where and why, and what to do: the `zone enter` of each zone this sandbox may
    /// enter that would allow it (by its list for a name off this zone's list; by its
    /// `network.internal` for an address a name under `allow` may not reach), or else
    /// ask for it to be allowed. A refusal of another kind names no zone.
    pub fn refusal(&self, t: &Target, kind: Refusal, reason: &str) -> (String, String) {
        let target = t.host.authority(t.port, 0);
        let here = if self.zone == "-" {
            "in this sandbox".to_string()
        } else {
            format!("in zone {}", self.zone)
        };
        let ok = |(all, internal): &(AllowList, AllowList)| match kind {
            Refusal::NotListed => all.find(t).is_some(),
            Refusal::Address => internal.find(t).is_some(),
            Refusal::Other => false,
        };
        let zones: Vec<&str> = self
            .elsewhere
            .iter()
            .filter(|(_, lists)| ok(lists))
            .map(|(z, _)| z.as_str())
            .collect();
        let next = match zones.first() {
            Some(z) => {
                let others = if zones.len() > 1 {
                    format!(" (also {})", zones[1..].join(", "))
                } else {
                    String::new()
                };
                format!("zone {z} allows it{others}: run the command that needs it with `wardcell zone enter {z} -- COMMAND`")
            }
            None if kind == Refusal::Other => String::new(),
            None if kind == Refusal::Address => format!("no zone this sandbox may enter lists it under network.internal: ask the person running wardcell to allow it (`wardcell run --internal {target}`, or network.internal in zones.toml)"),
            None => format!("no zone this sandbox may enter allows it: ask the person running wardcell to allow it (`wardcell run --allow {target}`, or network.allow in zones.toml)"),
        };
        if next.is_empty() {
            let phrase =
                format!("Forbidden by wardcell: {target} is not allowed {here} ({reason})");
            let body = format!(
                "wardcell: {target} is not allowed {here}: {reason}\n{}",
                where_to_ask(&target)
            );
            return (phrase, body);
        }
        let phrase =
            format!("Forbidden by wardcell: {target} is not allowed {here} ({reason}); {next}");
        let body = format!(
            "wardcell: {target} is not allowed {here}: {reason}\nwardcell: {next}\n{}",
            where_to_ask(&target)
        );
        (phrase, body)
    }

    /// 502 for an allowed target that cannot be reached; audited as denied, with why.
    fn unreachable(&self, t: &Target, u: Unreachable) -> Response<Body> {
        let reason = u.to_string();
        let resp = bad_gateway(t, &reason);
        self.events.send(ProxyEvent::Denied {
            host: t.host.to_string(),
            port: t.port,
            reason,
        });
        resp
    }
}

/// The second line of a refusal's body: where the sandbox finds out more.
pub fn where_to_ask(target: &str) -> String {
    format!(
        "wardcell: `wardcell zone why {target}` says which rule refused it and which zones this run may enter allow it; `wardcell zone denials` lists this sandbox's recent refusals\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_busy_answer_names_the_limit() {
        assert!(
            BUSY.contains(&format!("{MAX_CONNECTIONS} connections")),
            "{BUSY}"
        );
    }
}
