//! Host-side helpers (the approval plugin, credential commands): where they run and with
//! what environment.
//!
//! A helper runs outside any sandbox, as the user, so it must never pick anything up from
//! where a sandbox can write: its working directory is `/` (never the project `wardcell
//! run` was started in, where a sandbox could plant a file a relative path would read),
//! its `PATH` is fixed (never the caller's, which may name a project directory), and the
//! rest of its environment is the short list below, taken from the environment `wardcell
//! run` started in. docs/PROTOCOL.md (section 7) documents the same list.

use std::fs::File;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

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

/// Where a program named `prog` in a helper's argv is: as named when absolute, else
/// looked up in [`HELPER_PATH`] when a bare name, else (a relative path) from
/// [`HELPER_CWD`]. `None`: not found.
pub fn program_path(prog: &str, is_file: &dyn Fn(&Path) -> bool) -> Option<PathBuf> {
    let found = crate::envrules::lookup(prog, HELPER_PATH, Path::new(HELPER_CWD), is_file);
    found.filter(|p| is_file(p))
}

/// Open `path` once, as a program the run will start from this descriptor (a link is
/// followed now, once): a regular file someone may execute that not everybody may write.
/// Whatever later happens to the path, the descriptor is what runs.
pub fn open_program(path: &Path) -> Result<File, String> {
    let (f, meta) = open_regular(path)?;
    let mode = meta.permissions().mode();
    if mode & 0o111 == 0 {
        return Err(format!("{} is not executable", path.display()));
    }
    if mode & 0o002 != 0 {
        return Err(format!(
            "{} may be written by every user (mode {:o}); run `chmod o-w {}`",
            path.display(),
            mode & 0o7777,
            path.display()
        ));
    }
    Ok(f)
}

/// `path` opened for reading, with its metadata, when it is a regular file: never a
/// device, pipe or socket, even through a link (opened without blocking, checked on the
/// open descriptor).
pub fn open_regular(path: &Path) -> Result<(File, std::fs::Metadata), String> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let meta = f
        .metadata()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("{} is not a regular file", path.display()));
    }
    Ok((f, meta))
}

/// What `execve` takes for a helper, made from its `Command` before it forks (so that the
/// child, which may only make async-signal-safe calls, allocates nothing): the program's
/// name and arguments, and the environment `cmd` was given (cleared first, so that what
/// it was given is the whole), as NULL-terminated tables of C strings it owns.
pub struct Exec {
    _strings: Vec<std::ffi::CString>,
    argv: Vec<usize>,
    envp: Vec<usize>,
}

impl Exec {
    pub fn of(cmd: &std::process::Command) -> std::io::Result<Exec> {
        use std::os::unix::ffi::OsStrExt;
        let c = |s: &[u8]| std::ffi::CString::new(s).map_err(std::io::Error::other);
        let args = [cmd.get_program()].into_iter().chain(cmd.get_args());
        let args = args
            .map(|a| c(a.as_bytes()))
            .collect::<std::io::Result<Vec<_>>>()?;
        let env = cmd
            .get_envs()
            .filter_map(|(k, v)| Some([k.as_bytes(), b"=", v?.as_bytes()].concat()));
        let env = env.map(|e| c(&e)).collect::<std::io::Result<Vec<_>>>()?;
        // A string's address does not change when the string moves into `_strings`.
        let table = |v: &[std::ffi::CString]| {
            Vec::from_iter(v.iter().map(|s| s.as_ptr() as usize).chain([0]))
        };
        let (argv, envp, mut strings) = (table(&args), table(&env), args);
        strings.extend(env);
        Ok(Exec {
            _strings: strings,
            argv,
            envp,
        })
    }

    /// The argument table, for execve's `argv`.
    pub fn argv(&self) -> *const *const libc::c_char {
        self.argv.as_ptr().cast()
    }

    /// The environment table, for execve's `envp`.
    pub fn envp(&self) -> *const *const libc::c_char {
        self.envp.as_ptr().cast()
    }
}

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
    fn exec_tables_hold_the_command_as_given() {
        let mut cmd = std::process::Command::new("/bin/prog");
        cmd.arg("a b").env_clear().env("K", "v");
        let exec = Exec::of(&cmd).unwrap();
        let read = |t: *const *const libc::c_char| -> Vec<String> {
            let t: &[usize] = if t == exec.argv() {
                &exec.argv
            } else {
                &exec.envp
            };
            let strings = t.iter().take_while(|&&p| p != 0);
            let s = strings.map(|&p| {
                exec._strings
                    .iter()
                    .find(|s| s.as_ptr() as usize == p)
                    .unwrap()
            });
            s.map(|s| s.to_str().unwrap().to_string()).collect()
        };
        assert_eq!(read(exec.argv()), ["/bin/prog", "a b"]);
        assert_eq!(read(exec.envp()), ["K=v"]);
        assert_eq!((exec.argv.last(), exec.envp.last()), (Some(&0), Some(&0)));
    }

    #[test]
    fn programs_are_found_as_a_helper_would_run_them() {
        let yes = |_: &Path| true;
        let no = |_: &Path| false;
        assert_eq!(
            program_path("/opt/x/approve", &yes),
            Some(PathBuf::from("/opt/x/approve"))
        );
        assert_eq!(
            program_path("bin/approve", &yes),
            Some(PathBuf::from("/bin/approve"))
        );
        assert_eq!(
            program_path("pass", &yes),
            Some(PathBuf::from("/usr/local/bin/pass"))
        );
        let only_bin = |p: &Path| p.starts_with("/bin");
        assert_eq!(
            program_path("pass", &only_bin),
            Some(PathBuf::from("/bin/pass"))
        );
        assert_eq!(program_path("pass", &no), None);
        assert_eq!(program_path("/opt/x/approve", &no), None);
    }

    #[test]
    fn a_program_is_a_regular_file_not_everybody_writes() {
        let dir = std::env::temp_dir().join(format!("wardcell-helper-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("tool");
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        let chmod = |m| std::fs::set_permissions(&p, std::fs::Permissions::from_mode(m)).unwrap();
        chmod(0o755);
        assert!(open_program(&p).is_ok());
        chmod(0o644);
        assert!(open_program(&p).unwrap_err().ends_with("is not executable"));
        chmod(0o777);
        let e = open_program(&p).unwrap_err();
        assert!(e.contains("may be written by every user (mode 777)"), "{e}");
        for not_regular in ["/dev/zero", "/dev/null"] {
            let e = open_program(Path::new(not_regular)).unwrap_err();
            assert_eq!(e, format!("{not_regular} is not a regular file"));
        }
        let e = open_program(&dir).unwrap_err();
        assert!(e.ends_with("is not a regular file"), "{e}");
        // A FIFO is refused without blocking the open.
        let fifo = dir.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(open_program(&fifo)
            .unwrap_err()
            .ends_with("is not a regular file"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

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
