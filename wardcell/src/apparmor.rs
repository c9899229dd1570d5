//! AppArmor's restriction of unprivileged user namespaces, for `wardcell doctor`.
//!
//! Where `kernel.apparmor_restrict_unprivileged_userns` is 1 (Ubuntu 24.04 and later), a
//! program may create a user namespace with capabilities in it only under a profile
//! that grants `userns`. wardcell ships one (packaging/apparmor/wardcell) for the client
//! and the broker, which creates every sandbox's namespaces. It needs AppArmor 4, so the
//! packages install it as [`SHIPPED_PATH`], outside the directory the distribution's
//! AppArmor service loads whole, and place it at [`PROFILE_PATH`] only where the
//! installed parser reads it. [`advice`] is a pure function of what doctor read, so
//! every case (the profile placed, only shipped, or a build from source) is tested here.

use std::path::Path;

/// The sysctl that turns the restriction on.
pub const RESTRICT_SYSCTL: &str = "/proc/sys/kernel/apparmor_restrict_unprivileged_userns";
/// Where the packages ship the profile (never loaded from there).
pub const SHIPPED_PATH: &str = "/usr/share/wardcell/apparmor/wardcell";
/// Where the packages place the profile where AppArmor 4 reads it.
pub const PROFILE_PATH: &str = "/etc/apparmor.d/wardcell";
/// The kernel's list of loaded profiles (readable by root only on most systems).
pub const LOADED_PROFILES: &str = "/sys/kernel/security/apparmor/profiles";
/// The profile that lets the broker create namespaces (its name in the file).
pub const BROKER_PROFILE: &str = "wardcell-broker";

/// What doctor read.
pub struct Seen<'a> {
    /// The sysctl's contents, if it exists.
    pub restrict: Option<&'a str>,
    /// The list of loaded profiles, if it could be read.
    pub loaded: Option<&'a str>,
    /// Whether [`PROFILE_PATH`] exists (the package placed it).
    pub profile_installed: bool,
    /// Whether [`SHIPPED_PATH`] exists (the package is installed).
    pub profile_shipped: bool,
    /// The client and the broker as doctor found them.
    pub client: &'a Path,
    pub broker: &'a Path,
}

/// How serious, and what to say.
#[derive(Debug, PartialEq, Eq)]
pub enum Advice {
    /// The restriction is on and wardcell's profile is loaded.
    Covered(String),
    /// The restriction is on and nothing says wardcell's profile is loaded: what to do.
    Act(String),
}

const RESTRICTED: &str = "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1)";

/// The doctor line for AppArmor's user namespace restriction; None where it is off
/// (or the kernel has no such setting).
pub fn advice(seen: &Seen<'_>) -> Option<Advice> {
    if seen.restrict.map(str::trim) != Some("1") {
        return None;
    }
    let loaded = seen.loaded.map(|list| {
        list.lines()
            .any(|l| l.split_whitespace().next() == Some(BROKER_PROFILE))
    });
    if loaded == Some(true) {
        return Some(Advice::Covered(format!(
            "{RESTRICTED}; wardcell's profile is loaded ({BROKER_PROFILE})"
        )));
    }
    let packaged = Path::new(wardcell_common::paths::LIBEXEC_DIR).join("wardcell-broker");
    let text = if seen.profile_installed && seen.broker == packaged {
        format!(
            "{RESTRICTED}: load the profile the package installed with `sudo apparmor_parser -r {PROFILE_PATH}`"
        )
    } else if seen.profile_shipped && seen.broker == packaged {
        format!(
            "{RESTRICTED}: place the profile the package ships and load it (it needs AppArmor 4) with `sudo cp {SHIPPED_PATH} {PROFILE_PATH} && sudo apparmor_parser -r {PROFILE_PATH}`"
        )
    } else {
        format!(
            "{RESTRICTED}: copy packaging/apparmor/wardcell from wardcell's source to {PROFILE_PATH}, replace /usr/bin/wardcell in it with {} and /usr/libexec/wardcell/wardcell-broker with {}, then run `sudo apparmor_parser -r {PROFILE_PATH}`",
            seen.client.display(),
            seen.broker.display()
        )
    };
    Some(Advice::Act(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen<'a>(
        restrict: Option<&'a str>,
        loaded: Option<&'a str>,
        installed: bool,
        broker: &'a Path,
    ) -> Seen<'a> {
        Seen {
            restrict,
            loaded,
            profile_installed: installed,
            profile_shipped: installed,
            client: Path::new("/usr/bin/wardcell"),
            broker,
        }
    }

    #[test]
    fn off_or_absent_says_nothing() {
        let b = Path::new("/usr/libexec/wardcell/wardcell-broker");
        assert_eq!(advice(&seen(None, None, true, b)), None);
        assert_eq!(advice(&seen(Some("0\n"), None, false, b)), None);
    }

    #[test]
    fn package_installed_says_load_it() {
        let b = Path::new("/usr/libexec/wardcell/wardcell-broker");
        let Some(Advice::Act(text)) = advice(&seen(Some("1\n"), None, true, b)) else {
            panic!()
        };
        assert_eq!(
            text,
            "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1): load the profile the package installed with `sudo apparmor_parser -r /etc/apparmor.d/wardcell`"
        );
        // The list readable and without wardcell's profile: the same advice.
        let other = "snap.lxd (enforce)\nbwrap (unconfined)\n";
        assert_eq!(
            advice(&seen(Some("1"), Some(other), true, b)),
            Some(Advice::Act(text))
        );
        // Loaded: nothing to do.
        let loaded = "wardcell (unconfined)\nwardcell-broker (unconfined)\n";
        assert!(matches!(
            advice(&seen(Some("1"), Some(loaded), true, b)),
            Some(Advice::Covered(_))
        ));
    }

    /// Installed where AppArmor 3 was (nothing placed), then the restriction turned on.
    #[test]
    fn package_shipped_not_placed_says_place_and_load() {
        let b = Path::new("/usr/libexec/wardcell/wardcell-broker");
        let s = Seen {
            profile_installed: false,
            ..seen(Some("1\n"), None, true, b)
        };
        assert_eq!(
            advice(&s),
            Some(Advice::Act("AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1): place the profile the package ships and load it (it needs AppArmor 4) with `sudo cp /usr/share/wardcell/apparmor/wardcell /etc/apparmor.d/wardcell && sudo apparmor_parser -r /etc/apparmor.d/wardcell`".into()))
        );
        // Nothing installed at all: the source's advice.
        let s = Seen {
            profile_installed: false,
            profile_shipped: false,
            ..seen(Some("1"), None, true, b)
        };
        assert!(matches!(advice(&s), Some(Advice::Act(t)) if t.contains("from wardcell's source")));
    }

    #[test]
    fn built_from_source_says_copy_and_adjust() {
        let client =
            Path::new("/home/u/wardcell/target/x86_64-unknown-linux-musl/release/wardcell");
        let broker = client.with_file_name("wardcell-broker");
        for installed in [false, true] {
            // A profile file of an old package proves nothing about a build elsewhere.
            let s = Seen {
                client,
                ..seen(Some("1"), None, installed, &broker)
            };
            let Some(Advice::Act(text)) = advice(&s) else {
                panic!()
            };
            assert_eq!(
                text,
                format!(
                    "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1): copy packaging/apparmor/wardcell from wardcell's source to /etc/apparmor.d/wardcell, replace /usr/bin/wardcell in it with {} and /usr/libexec/wardcell/wardcell-broker with {}, then run `sudo apparmor_parser -r /etc/apparmor.d/wardcell`",
                    client.display(),
                    broker.display()
                )
            );
        }
    }

    /// The shipped profile grants `userns` to exactly the paths the packages install
    /// the client and the broker at, in the shape AppArmor 4 reads.
    #[test]
    fn the_shipped_profile_names_the_installed_paths() {
        let text = include_str!("../../packaging/apparmor/wardcell");
        let rules: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect();
        assert_eq!(rules[0], "abi <abi/4.0>,");
        assert!(rules.contains(&"include <tunables/global>"));
        let broker = format!(
            "profile {BROKER_PROFILE} {}/wardcell-broker flags=(unconfined) {{",
            wardcell_common::paths::LIBEXEC_DIR
        );
        for header in [
            "profile wardcell /usr/bin/wardcell flags=(unconfined) {",
            &broker,
        ] {
            let at = rules
                .iter()
                .position(|l| *l == header)
                .unwrap_or_else(|| panic!("{header}"));
            assert_eq!(rules[at + 1], "userns,", "{header}");
        }
        assert_eq!(
            rules.iter().filter(|l| l.starts_with("profile ")).count(),
            2
        );
    }
}
