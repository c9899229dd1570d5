//! Where this wardcell runs, and which commands work there.
//!
//! The sandbox environment says where we are: `WARDCELL_SANDBOX=1` in every sandbox,
//! plus `WARDCELL_ZONE` and `WARDCELL_ZONE_SOCKET` in a zone. These variables only choose
//! what to offer; they are not a boundary (a sandbox cannot create namespaces, and the
//! broker decides every zone entry), so forging them gains nothing.

use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// Outside any sandbox.
    Host,
    /// Inside a sandbox that `wardcell run` (or `zone enter`) started in a zone.
    Zone { zone: String, socket: PathBuf },
    /// Inside a sandbox started with `wardcell run --profile`: no zones.
    NoZones,
}

impl Location {
    pub fn detect(get: &dyn Fn(&str) -> Option<String>) -> Location {
        if get("WARDCELL_SANDBOX").as_deref() != Some("1") {
            return Location::Host;
        }
        let nonempty = |k: &str| get(k).filter(|v| !v.is_empty());
        match (nonempty("WARDCELL_ZONE"), nonempty("WARDCELL_ZONE_SOCKET")) {
            (Some(zone), Some(socket)) => Location::Zone {
                zone,
                socket: PathBuf::from(socket),
            },
            _ => Location::NoZones,
        }
    }
}

/// The spec's refusal for `run` inside a sandbox (with "a wardcell sandbox").
pub const RUN_IN_ZONE: &str = "`wardcell run` is not available inside a wardcell sandbox: a sandbox cannot start another sandbox. To run a command with different permissions, see `wardcell zone list` and `wardcell zone enter`.";

pub const RUN_WITHOUT_ZONES: &str = "`wardcell run` is not available inside a wardcell sandbox: a sandbox cannot start another sandbox. This run has no zones (it was started with `wardcell run --profile`); to run a command with different permissions, start it from the host with `wardcell run --zone <ZONE> -- <COMMAND>`.";

pub const POLICY_IN_ZONE: &str = "`wardcell policy` is not available inside a wardcell sandbox: the configuration is read on the host, outside any sandbox. To see the zones this sandbox may enter, use `wardcell zone list`.";

pub const POLICY_WITHOUT_ZONES: &str = "`wardcell policy` is not available inside a wardcell sandbox: the configuration is read on the host, outside any sandbox. Run `wardcell policy` from the host.";

/// The spec's refusal for `zone enter` on the host.
pub const ENTER_ON_HOST: &str = "`wardcell zone enter` only works inside a sandbox that `wardcell run` started in a zone; to run a command in a zone from here, use `wardcell run --zone <ZONE> -- <COMMAND>`";

pub const CURRENT_ON_HOST: &str = "`wardcell zone current` only works inside a sandbox that `wardcell run` started in a zone; on the host no zone is current, and `wardcell zone list` shows every zone";

pub const WHY_ON_HOST: &str = "`wardcell zone why` only works inside a sandbox that `wardcell run` started in a zone; on the host, `wardcell policy why [--zone ZONE] TARGET` answers for any zone";

pub const DENIALS_ON_HOST: &str = "`wardcell zone denials` only works inside a sandbox that `wardcell run` started in a zone; on the host, `wardcell logs show RUN --category proxy` lists a run's refusals";

pub const DOCTOR_IN_SANDBOX: &str = "`wardcell doctor` is not available inside a wardcell sandbox: it checks the machine, and from in here it would only see the sandbox. Run it on the host.";

pub const LOGS_IN_SANDBOX: &str = "`wardcell logs` is not available inside a wardcell sandbox: audit logs are kept outside every sandbox, where nothing sandboxed can read or change them. Read them on the host.";

pub const APPROVALS_IN_SANDBOX: &str = "`wardcell approvals` is not available inside a wardcell sandbox: approvals are answered by a person on the host, where nothing sandboxed can read or answer them. Run it on the host.";

pub const COMPLETIONS_WITHOUT_ZONES: &str = "`wardcell completions` is not available in this sandbox: it was started with `wardcell run --profile`, where no wardcell command works, so there is nothing to complete. Print completions on the host, or in a sandbox started in a zone.";

fn zone_without_zones(what: &str) -> String {
    format!(
        "`wardcell {what}` is not available in this sandbox: it was started with `wardcell run --profile`, outside any zone, so there is no zone to list or enter. To use zones, start the run from the host with `wardcell run --zone <ZONE> -- <COMMAND>`."
    )
}

/// Why the command at `path` (its subcommand names, e.g. `["zone", "enter"]`) does not
/// work here, or None if it does (or is not a command at all: clap reports that).
pub fn refusal(location: &Location, path: &[String]) -> Option<String> {
    let path: Vec<&str> = path.iter().map(String::as_str).collect();
    match (location, path.as_slice()) {
        (Location::Host, ["zone", "enter", ..]) => Some(ENTER_ON_HOST.to_string()),
        (Location::Host, ["zone", "current", ..]) => Some(CURRENT_ON_HOST.to_string()),
        (Location::Host, ["zone", "why", ..]) => Some(WHY_ON_HOST.to_string()),
        (Location::Host, ["zone", "denials", ..]) => Some(DENIALS_ON_HOST.to_string()),
        (Location::Host, _) => None,

        (Location::Zone { .. }, ["run", ..]) => Some(RUN_IN_ZONE.to_string()),
        (Location::Zone { .. }, ["policy", ..]) => Some(POLICY_IN_ZONE.to_string()),
        (Location::Zone { .. } | Location::NoZones, ["doctor", ..]) => {
            Some(DOCTOR_IN_SANDBOX.to_string())
        }
        (Location::Zone { .. } | Location::NoZones, ["logs", ..]) => {
            Some(LOGS_IN_SANDBOX.to_string())
        }
        (Location::Zone { .. } | Location::NoZones, ["approvals", ..]) => {
            Some(APPROVALS_IN_SANDBOX.to_string())
        }
        (Location::Zone { .. }, _) => None,

        (Location::NoZones, ["run", ..]) => Some(RUN_WITHOUT_ZONES.to_string()),
        (Location::NoZones, ["policy", ..]) => Some(POLICY_WITHOUT_ZONES.to_string()),
        (
            Location::NoZones,
            ["zone", sub @ ("list" | "current" | "enter" | "why" | "denials"), ..],
        ) => Some(zone_without_zones(&format!("zone {sub}"))),
        (Location::NoZones, ["zone", ..]) => Some(zone_without_zones("zone")),
        (Location::NoZones, ["completions", ..]) => Some(COMPLETIONS_WITHOUT_ZONES.to_string()),
        (Location::NoZones, _) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(pairs: &[(&str, &str)]) -> Location {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Location::detect(&move |k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
    }

    #[test]
    fn detection() {
        assert_eq!(at(&[]), Location::Host);
        assert_eq!(
            at(&[("WARDCELL_ZONE", "a"), ("WARDCELL_ZONE_SOCKET", "/s")]),
            Location::Host
        );
        assert_eq!(at(&[("WARDCELL_SANDBOX", "0")]), Location::Host);
        assert_eq!(at(&[("WARDCELL_SANDBOX", "1")]), Location::NoZones);
        assert_eq!(
            at(&[("WARDCELL_SANDBOX", "1"), ("WARDCELL_ZONE", "a")]),
            Location::NoZones
        );
        assert_eq!(
            at(&[
                ("WARDCELL_SANDBOX", "1"),
                ("WARDCELL_ZONE", "a"),
                ("WARDCELL_ZONE_SOCKET", "/s")
            ]),
            Location::Zone {
                zone: "a".into(),
                socket: "/s".into()
            }
        );
    }

    #[test]
    fn table() {
        let zone = Location::Zone {
            zone: "a".into(),
            socket: "/s".into(),
        };
        let p = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        for cmd in [
            "run",
            "policy check",
            "policy show",
            "zone list",
            "approvals list",
        ] {
            assert_eq!(refusal(&Location::Host, &p(cmd)), None, "{cmd}");
        }
        for cmd in ["zone current", "zone enter"] {
            assert!(refusal(&Location::Host, &p(cmd)).is_some(), "{cmd}");
        }
        for cmd in ["zone list", "zone current", "zone enter"] {
            assert_eq!(refusal(&zone, &p(cmd)), None, "{cmd}");
        }
        for cmd in [
            "run",
            "policy",
            "policy check",
            "approvals",
            "approvals approve",
        ] {
            assert!(refusal(&zone, &p(cmd)).is_some(), "{cmd}");
        }
        for cmd in [
            "run",
            "policy show",
            "zone",
            "zone list",
            "zone current",
            "zone enter",
            "approvals list",
            "completions bash",
        ] {
            assert!(refusal(&Location::NoZones, &p(cmd)).is_some(), "{cmd}");
        }
        for loc in [Location::Host, zone.clone()] {
            assert_eq!(refusal(&loc, &p("completions zsh")), None);
        }
    }
}
