//! The chain check: may a sandbox whose chain of zones is `chain` enter `target`?
//!
//! Every zone on the chain (the zone the run started in, and each zone entered since)
//! must be in the target's `enter_from`, or `enter_from` holds "*"; a chain is at most
//! [`MAX_CHAIN`] zones. `zone list` answers from [`may_enter`] too, so a zone it lists is
//! one the supervisor would let this sandbox into. Pure: unit tests call it directly.

use wardcell_common::plan::ZonePlan;
use wardcell_host::messages;

/// The deepest chain: a sandbox whose chain is this long cannot enter another zone.
pub const MAX_CHAIN: usize = 8;

/// Why an entry is refused, worded for the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// Not every zone on the chain is in the target's `enter_from`, or there is no such
    /// zone: the same answer, so that probing names reveals nothing. (Each holds the
    /// target's name as asked.)
    NotAllowed(String),
    /// The chain is already [`MAX_CHAIN`] deep.
    TooDeep(String),
}

impl Denied {
    /// The one-line message after `error: `, as the spec words it (wardcell_host::messages).
    pub fn message(&self) -> String {
        match self {
            Denied::NotAllowed(target) => messages::zone_not_allowed(target),
            Denied::TooDeep(target) => messages::chain_too_deep(target, MAX_CHAIN),
        }
    }

    pub fn reason(&self) -> &'static str {
        match self {
            Denied::NotAllowed(_) => "not in enter_from for every zone on the chain",
            Denied::TooDeep(_) => "chain depth limit",
        }
    }
}

/// Decide whether a sandbox with `chain` may enter `target`.
pub fn may_enter<'a>(
    zones: &'a [ZonePlan],
    chain: &[String],
    target: &str,
) -> Result<&'a ZonePlan, Denied> {
    let not_allowed = || Denied::NotAllowed(target.to_string());
    let zone = zones.iter().find(|z| z.name == target);
    let zone = zone.ok_or_else(not_allowed)?;
    let admits = |from: &String| zone.enter_from.iter().any(|e| e == "*" || e == from);
    if chain.is_empty() || !chain.iter().all(admits) {
        return Err(not_allowed());
    }
    if chain.len() >= MAX_CHAIN {
        return Err(Denied::TooDeep(target.to_string()));
    }
    Ok(zone)
}

/// The zones a sandbox with `chain` may enter, in configuration order.
pub fn enterable<'a>(zones: &'a [ZonePlan], chain: &[String]) -> Vec<&'a ZonePlan> {
    zones
        .iter()
        .filter(|z| may_enter(zones, chain, &z.name).is_ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use wardcell_common::plan::ProfilePlan;

    fn zone(name: &str, enter_from: &[&str]) -> ZonePlan {
        ZonePlan {
            name: name.into(),
            description: None,
            default: name == "agent",
            enter_from: enter_from.iter().map(|s| s.to_string()).collect(),
            requires_approval: false,
            approval_timeout_secs: None,
            authenticated: false,
            profile: ProfilePlan::default(),
        }
    }

    fn chain(c: &[&str]) -> Vec<String> {
        c.iter().map(|s| s.to_string()).collect()
    }

    /// The spec's table: agent, build (from agent), release (from build).
    fn spec_zones() -> Vec<ZonePlan> {
        vec![
            zone("agent", &[]),
            zone("build", &["agent"]),
            zone("release", &["build"]),
        ]
    }

    #[test]
    fn the_specs_table() {
        let z = spec_zones();
        // build (started with wardcell run --zone build): yes
        assert!(may_enter(&z, &chain(&["build"]), "release").is_ok());
        // agent -> build: no, agent could not enter release itself
        assert_eq!(
            may_enter(&z, &chain(&["agent", "build"]), "release"),
            Err(Denied::NotAllowed("release".into()))
        );
        assert!(may_enter(&z, &chain(&["agent"]), "build").is_ok());
        assert!(may_enter(&z, &chain(&["agent"]), "release").is_err());
    }

    #[test]
    fn listing_both_zones_lets_agent_through_build() {
        let mut z = spec_zones();
        z[2].enter_from = chain(&["agent", "build"]);
        assert!(may_enter(&z, &chain(&["agent", "build"]), "release").is_ok());
    }

    #[test]
    fn unknown_zone_gets_the_forbidden_answer() {
        let z = spec_zones();
        let unknown = may_enter(&z, &chain(&["agent"]), "nope").unwrap_err();
        let forbidden = may_enter(&z, &chain(&["agent"]), "release").unwrap_err();
        assert_eq!(
            unknown.message().replace("nope", "X"),
            forbidden.message().replace("release", "X")
        );
    }

    #[test]
    fn a_hostile_zone_name_cannot_forge_lines() {
        let z = spec_zones();
        let d = may_enter(&z, &chain(&["agent"]), "x\nerror: approved\r").unwrap_err();
        assert!(
            !d.message().contains('\n') && !d.message().contains('\r'),
            "{}",
            d.message()
        );
        let d = may_enter(&z, &chain(&["agent"]), &"a".repeat(10_000)).unwrap_err();
        assert!(d.message().len() < 200);
    }

    #[test]
    fn star_admits_any_and_depth_is_limited() {
        let z = vec![zone("agent", &["*"]), zone("any", &["*"])];
        let mut c = chain(&["agent"]);
        while c.len() < MAX_CHAIN {
            assert!(may_enter(&z, &c, "any").is_ok(), "depth {}", c.len());
            c.push("any".into());
        }
        assert_eq!(may_enter(&z, &c, "any"), Err(Denied::TooDeep("any".into())));
    }

    #[test]
    fn a_zone_admitting_itself_is_enterable_from_itself() {
        let z = vec![zone("agent", &["agent"]), zone("other", &[])];
        let names: Vec<_> = enterable(&z, &chain(&["agent"]))
            .iter()
            .map(|z| z.name.clone())
            .collect();
        assert_eq!(names, vec!["agent"]);
    }

    #[test]
    fn empty_enter_from_admits_nobody() {
        let z = spec_zones();
        assert!(may_enter(&z, &chain(&["agent"]), "agent").is_err());
        assert!(enterable(&z, &chain(&["release"])).is_empty());
    }
}
