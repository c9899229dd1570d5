//! Where wardcell keeps things for a user, and how profile paths expand: the client's,
//! the approval plugin's and the configuration's (the broker takes the directories from
//! the plan).
//!
//! Functions here take the environment as a lookup function so that tests can call them
//! with any environment and so that nothing here reads global state behind the caller.

use std::path::{Path, PathBuf};

use wardcell_common::plan::Dirs;

/// The system-wide configuration directory.
pub const SYSTEM_CONFIG_DIR: &str = "/etc/wardcell";

/// An XDG base directory: the variable when it holds an absolute path, else the default
/// under home (the XDG spec says relative values are to be ignored).
fn xdg(get: &dyn Fn(&str) -> Option<String>, var: &str, home: &Path, default: &str) -> PathBuf {
    match get(var) {
        Some(v) if v.starts_with('/') => PathBuf::from(v),
        _ => home.join(default),
    }
}

/// The user's configuration directory for wardcell.
pub fn user_config_dir(get: &dyn Fn(&str) -> Option<String>, home: &Path) -> PathBuf {
    xdg(get, "XDG_CONFIG_HOME", home, ".config").join("wardcell")
}

/// The operating systems whose conventions decide where wardcell's directories are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Os {
    Linux,
    MacOs,
}

/// The system this build runs on.
pub const THIS_OS: Os = if cfg!(target_os = "macos") {
    Os::MacOs
} else {
    Os::Linux
};

/// wardcell's directories for this user, on this system.
///
/// `uid` names the fallback runtime directory (`/tmp/wardcell-<uid>`) used when there is
/// no usable `XDG_RUNTIME_DIR`.
pub fn dirs(
    get: &dyn Fn(&str) -> Option<String>,
    home: &Path,
    uid: u32,
    explicit_config: Option<&Path>,
) -> Dirs {
    dirs_for(THIS_OS, get, home, uid, explicit_config)
}

/// [`dirs`] on a given system. The audit logs are the only difference: macOS keeps
/// logs under `~/Library/Logs` (Console.app shows them there), so runs go to
/// `~/Library/Logs/wardcell/runs/`; Linux follows XDG (`$XDG_STATE_HOME/wardcell`).
pub fn dirs_for(
    os: Os,
    get: &dyn Fn(&str) -> Option<String>,
    home: &Path,
    uid: u32,
    explicit_config: Option<&Path>,
) -> Dirs {
    let mut config = vec![user_config_dir(get, home), PathBuf::from(SYSTEM_CONFIG_DIR)];
    if let Some(file) = explicit_config {
        config.push(file.to_path_buf());
    }
    let state = match os {
        Os::Linux => xdg(get, "XDG_STATE_HOME", home, ".local/state").join("wardcell"),
        Os::MacOs => home.join("Library/Logs/wardcell"),
    };
    let runtime = match get("XDG_RUNTIME_DIR") {
        Some(v) if v.starts_with('/') => PathBuf::from(v).join("wardcell"),
        _ => PathBuf::from(format!("/tmp/wardcell-{uid}")),
    };
    Dirs {
        config,
        state,
        runtime,
    }
}

/// Whether `s` is an environment variable name as `unix_sockets` takes it: a letter or
/// `_`, then letters, digits and `_`.
pub fn is_var_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Expand a profile path: `~` and `~/x` under home, `.` and `./x` under the directory
/// `run` started in, absolute paths as they are. Anything else is an error message.
pub fn expand(raw: &str, home: &Path, cwd: &Path) -> Result<PathBuf, String> {
    let out = if raw == "~" {
        home.to_path_buf()
    } else if let Some(rest) = raw.strip_prefix("~/") {
        // `~//x` is `~/x`, as a shell has it (joined as written, `/x` would replace it).
        home.join(rest.trim_start_matches('/'))
    } else if raw == "." {
        cwd.to_path_buf()
    } else if let Some(rest) = raw.strip_prefix("./") {
        cwd.join(rest.trim_start_matches('/'))
    } else if raw.starts_with('/') {
        PathBuf::from(raw)
    } else {
        return Err(format!(
            "path {raw:?} must be absolute or start with \"~\" or \".\""
        ));
    };
    // As `components()` finding a ParentDir, without building each component.
    use std::os::unix::ffi::OsStrExt;
    if out
        .as_os_str()
        .as_bytes()
        .split(|&b| b == b'/')
        .any(|c| c == b"..")
    {
        return Err(format!("path {raw:?} must not contain \"..\""));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wardcell_common::paths::runs_dir;

    #[test]
    fn a_doubled_slash_after_home_or_here_stays_below_it() {
        let (h, c) = (Path::new("/home/u"), Path::new("/home/u/proj"));
        assert_eq!(expand("~//pub2", h, c).unwrap(), Path::new("/home/u/pub2"));
        assert_eq!(
            expand(".//out", h, c).unwrap(),
            Path::new("/home/u/proj/out")
        );
        assert_eq!(expand("~/.ssh", h, c).unwrap(), Path::new("/home/u/.ssh"));
    }

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn xdg_variables_win_when_absolute() {
        let home = Path::new("/home/u");
        let e = env(&[
            ("XDG_CONFIG_HOME", "/cfg"),
            ("XDG_STATE_HOME", "/st"),
            ("XDG_RUNTIME_DIR", "/run/user/7"),
        ]);
        let d = dirs_for(Os::Linux, &e, home, 7, None);
        assert_eq!(d.config[0], PathBuf::from("/cfg/wardcell"));
        assert_eq!(d.state, PathBuf::from("/st/wardcell"));
        assert_eq!(d.runtime, PathBuf::from("/run/user/7/wardcell"));
    }

    #[test]
    fn relative_or_missing_xdg_falls_back() {
        let home = Path::new("/home/u");
        let e = env(&[("XDG_CONFIG_HOME", "rel"), ("XDG_RUNTIME_DIR", "also-rel")]);
        let d = dirs_for(Os::Linux, &e, home, 7, Some(Path::new("/x/zones.toml")));
        assert_eq!(d.config[0], PathBuf::from("/home/u/.config/wardcell"));
        assert_eq!(d.config[1], PathBuf::from("/etc/wardcell"));
        assert_eq!(d.config[2], PathBuf::from("/x/zones.toml"));
        assert_eq!(d.state, PathBuf::from("/home/u/.local/state/wardcell"));
        assert_eq!(d.runtime, PathBuf::from("/tmp/wardcell-7"));
    }

    #[test]
    fn macos_logs_live_in_library_logs() {
        let home = Path::new("/Users/u");
        let e = env(&[("XDG_STATE_HOME", "/st"), ("XDG_CONFIG_HOME", "/cfg")]);
        let d = dirs_for(Os::MacOs, &e, home, 501, None);
        assert_eq!(
            runs_dir(&d),
            PathBuf::from("/Users/u/Library/Logs/wardcell/runs")
        );
        assert_eq!(d.config[0], PathBuf::from("/cfg/wardcell"));
        assert_eq!(d.runtime, PathBuf::from("/tmp/wardcell-501"));
        let linux = dirs_for(Os::Linux, &e, home, 501, None);
        assert_eq!(runs_dir(&linux), PathBuf::from("/st/wardcell/runs"));
        assert_eq!(
            dirs(&e, home, 501, None),
            dirs_for(THIS_OS, &e, home, 501, None)
        );
    }

    #[test]
    fn expansion() {
        let h = Path::new("/home/u");
        let c = Path::new("/src/p");
        assert_eq!(expand("~", h, c).unwrap(), PathBuf::from("/home/u"));
        assert_eq!(
            expand("~/.ssh", h, c).unwrap(),
            PathBuf::from("/home/u/.ssh")
        );
        assert_eq!(expand(".", h, c).unwrap(), PathBuf::from("/src/p"));
        assert_eq!(expand("./t", h, c).unwrap(), PathBuf::from("/src/p/t"));
        assert_eq!(expand("/usr", h, c).unwrap(), PathBuf::from("/usr"));
        assert!(expand("usr", h, c).is_err());
        assert!(expand("~user/x", h, c).is_err());
        assert!(expand("/a/../b", h, c).is_err());
    }
}
