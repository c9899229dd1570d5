//! Host-side helpers (the approval plugin, credential commands): where they run and with
//! what environment.
//!
//! A helper runs outside any sandbox, as the user, so it must never pick anything up from
//! where a sandbox can write: its working directory is `/` (never the project `wardcell
//! run` was started in, where a sandbox could plant a file a relative path would read),
//! its `PATH` is fixed (never the caller's, which may name a project directory), and the
//! rest of its environment is the short list below, taken from the environment `wardcell
//! run` started in. docs/PROTOCOL.md (section 7) documents the same list.

/// Every helper's working directory.
pub const HELPER_CWD: &str = "/";

/// Every helper's `PATH`: a helper named without a `/` is looked up here only.
pub const HELPER_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Variables passed on from the environment `wardcell run` started in, when set. Those
/// that name a directory are passed only when they hold an absolute path.
pub const HELPER_VARS: &[(&str, Kind)] = &[
    ("HOME", Kind::Dir),
    ("USER", Kind::Text),
    ("LOGNAME", Kind::Text),
    ("LANG", Kind::Text),
    ("XDG_RUNTIME_DIR", Kind::Dir),
    ("XDG_CONFIG_HOME", Kind::Dir),
    ("XDG_STATE_HOME", Kind::Dir),
    ("XDG_DATA_HOME", Kind::Dir),
    ("DBUS_SESSION_BUS_ADDRESS", Kind::Text),
];

/// What a passed-on variable holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A directory: passed only when absolute.
    Dir,
    /// Anything else without control characters.
    Text,
}

/// A helper's whole environment, from the environment `wardcell run` started in. Pure:
/// unit tests call it directly.
pub fn helper_env<K: AsRef<str>, V: AsRef<str>>(
    host: impl IntoIterator<Item = (K, V)>,
) -> Vec<(String, String)> {
    let mut env = vec![("PATH".to_string(), HELPER_PATH.to_string())];
    for (k, v) in host {
        let (k, v) = (k.as_ref(), v.as_ref());
        let Some((_, kind)) = HELPER_VARS.iter().find(|(name, _)| *name == k) else {
            continue;
        };
        let fits = match kind {
            Kind::Dir => v.starts_with('/'),
            Kind::Text => true,
        };
        if fits && !v.chars().any(char::is_control) && !env.iter().any(|(e, _)| e == k) {
            env.push((k.to_string(), v.to_string()));
        }
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_listed_variables_and_a_fixed_path() {
        let host = [
            ("PATH", "./node_modules/.bin:/home/u/proj/bin:/usr/bin"),
            ("HOME", "/home/u"),
            ("USER", "u"),
            ("XDG_CONFIG_HOME", "relative/config"),
            ("XDG_RUNTIME_DIR", "/run/user/1000"),
            ("LD_PRELOAD", "/home/u/proj/evil.so"),
            ("GIT_TOKEN", "secret"),
            ("LANG", "C.UTF-8\nX=1"),
            ("HOME", "/second"),
        ];
        assert_eq!(
            helper_env(host),
            vec![
                ("PATH".to_string(), HELPER_PATH.to_string()),
                ("HOME".to_string(), "/home/u".to_string()),
                ("USER".to_string(), "u".to_string()),
                ("XDG_RUNTIME_DIR".to_string(), "/run/user/1000".to_string()),
            ]
        );
        assert_eq!(
            helper_env(Vec::<(String, String)>::new()),
            vec![("PATH".to_string(), HELPER_PATH.to_string())]
        );
    }
}
