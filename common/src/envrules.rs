//! The environment a sandboxed command receives.

use crate::plan::EnvPlan;
use std::path::{Path, PathBuf};

/// Variables no sandbox inherits from its caller, whatever a profile says: wardcell's
/// own (set afresh for each sandbox) and pointers to host agents whose sockets are
/// masked anyway.
pub const ALWAYS_REMOVED: &[&str] = &[
    "WARDCELL_*",
    "SSH_AUTH_SOCK",
    "SSH_AGENT_PID",
    "GPG_AGENT_INFO",
    "DBUS_SESSION_BUS_ADDRESS",
    "DOCKER_HOST",
    "XDG_RUNTIME_DIR",
];

/// `wardcell` by name in every sandbox, however it was installed: unless the first
/// `wardcell` on the sandbox's `PATH` is the client that started the run, the client's
/// directory goes first on `PATH` (which is that directory alone when unset or empty).
/// A build tree's client, or one in a directory the caller's `PATH` lacks, is then found
/// by name, and never an older install that may not speak the broker's protocol.
/// `look(candidate)` says what a candidate path is: `None` nothing there, `Some(true)`
/// the client itself (same file), `Some(false)` another file.
pub fn client_on_path(
    env: &mut Vec<(String, String)>,
    client: &std::path::Path,
    look: impl Fn(&std::path::Path) -> Option<bool>,
) {
    let Some(dir) = client.parent().and_then(|d| d.to_str()) else {
        return;
    };
    let path = env.iter().position(|(k, _)| k == "PATH");
    let first = path.and_then(|i| {
        env[i]
            .1
            .split(':')
            .filter(|d| d.starts_with('/'))
            .find_map(|d| look(&std::path::Path::new(d).join("wardcell")))
    });
    if first == Some(true) {
        return;
    }
    prepend_path(env, dir);
}

/// Put `dir` first on `PATH` (which is `dir` alone when unset or empty).
fn prepend_path(env: &mut Vec<(String, String)>, dir: &str) {
    match env.iter_mut().find(|(k, _)| k == "PATH") {
        Some((_, v)) if v.is_empty() => *v = dir.to_string(),
        Some((_, v)) => *v = format!("{dir}:{v}"),
        None => env.push(("PATH".into(), dir.to_string())),
    }
}

/// Where those links are: a directory beside the client (a build or a copy), or the
/// package's, in that order.
pub const SANDBOX_TOOL_DIRS: [&str; 2] = ["wardcell-nested", "/usr/libexec/wardcell/nested"];

/// Put the first of [`SANDBOX_TOOL_DIRS`] that `is_dir` says exists first on `PATH`
/// (relative to `client`'s directory for the first).
pub fn sandbox_tools_first(
    env: &mut Vec<(String, String)>,
    client: &Path,
    is_dir: impl Fn(&Path) -> bool,
) {
    let Some(dir) = client.parent().and_then(|d| {
        SANDBOX_TOOL_DIRS
            .iter()
            .map(|t| d.join(t))
            .find(|t| is_dir(t))
    }) else {
        return;
    };
    if let Some(dir) = dir.to_str() {
        prepend_path(env, dir);
    }
}

/// Glob match with `*` matching any run of characters (including none).
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let p = pattern.as_bytes();
    let n = name.as_bytes();
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ni));
            pi += 1;
        } else if pi < p.len() && p[pi] == n[ni] {
            pi += 1;
            ni += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// The caller's environment filtered by `rules`, minus `extra_removed` (for example the
/// variables a credential reads), then the profile's `set`.
pub fn filter(
    caller: impl IntoIterator<Item = (String, String)>,
    rules: &EnvPlan,
    extra_removed: &[String],
) -> Vec<(String, String)> {
    let removed = |name: &str| {
        ALWAYS_REMOVED.iter().any(|p| glob_match(p, name))
            || rules.deny.iter().any(|p| glob_match(p, name))
            || extra_removed.iter().any(|p| glob_match(p, name))
    };
    let mut out: Vec<(String, String)> = caller
        .into_iter()
        .filter(|(k, _)| !k.is_empty() && !k.contains('=') && !removed(k))
        .collect();
    for (k, v) in &rules.set {
        out.retain(|(ok, _)| ok != k);
        out.push((k.clone(), v.clone()));
    }
    out
}

/// The only variables a `zone enter` caller's own values of reach the entered command:
/// what says how to show things (terminal, colours, language, time zone, size). Every
/// other variable is the value it had where `wardcell run` started (the user's own, as
/// the first sandbox got it), whatever the caller set: a list of what is dangerous is
/// never complete (`LD_PRELOAD`, `BASH_ENV`, `GIT_SSH_COMMAND`, `MAKEFILES`, `VIMINIT`
/// with `SHELL`, `RUSTC_WRAPPER`, `OPENSSL_CONF`, ...). A profile that wants a value sets
/// it (`env.set`), which comes after.
pub const ENTRY_PASSED: &[&str] = &[
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "CLICOLOR",
    "CLICOLOR_FORCE",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "COLUMNS",
    "LINES",
];

/// Names the caller's environment always holds otherwise than the run's, by how a
/// sandbox is made or a shell works: not worth an approver's look.
const UNREMARKABLE: &[&str] = &["WARDCELL_*", "OLDPWD", "PWD", "SHLVL", "_"];

/// Whether a `zone enter` caller's `value` of `name` (one of [`ENTRY_PASSED`]) is a name
/// as those variables hold, never a path: glibc reads a locale (`LANG=/proj/x`, its
/// message catalogs' format strings included), a time zone file (`TZ=:/proj/x`,
/// `TZ=../../proj/x`) and ncurses a terminfo entry from a path a sandbox may have
/// written. At most 256 bytes of printable ASCII, no `..`; a `/` only inside a time zone
/// name (`Europe/Paris`), never first.
fn a_name_not_a_path(name: &str, value: &str) -> bool {
    let tz = name == "TZ" && !value.starts_with([':', '/']);
    value.len() <= 256
        && !value.contains("..")
        && value.bytes().all(|b| (0x20..0x7f).contains(&b))
        && (tz || !value.contains('/'))
}

/// A `zone enter` caller's environment as the entered command gets it, before its
/// profile's rules: the environment `wardcell run` started in (`host`), with the caller's
/// values of [`ENTRY_PASSED`] only, each where it is a name, not a path (else the run's
/// value stays). Returns it and the names the caller set otherwise than `host`, sorted:
/// what the approval request shows the caller's environment changes.
pub fn entered(
    caller: Vec<(String, String)>,
    host: &[(String, String)],
) -> (Vec<(String, String)>, Vec<String>) {
    let own = |k: &str| host.iter().find(|(h, _)| h == k).map(|(_, v)| v);
    let plain = |k: &str| UNREMARKABLE.iter().any(|p| glob_match(p, k));
    let mut changed: Vec<String> = caller
        .iter()
        .filter(|(k, v)| own(k) != Some(v) && !plain(k))
        .map(|(k, _)| k.clone())
        .collect();
    changed.sort();
    changed.dedup();
    let passed = |k: &str| ENTRY_PASSED.iter().any(|p| glob_match(p, k));
    // A name the caller holds a path in keeps the run's value.
    let kept: Vec<&String> = caller
        .iter()
        .filter(|(k, v)| passed(k) && !a_name_not_a_path(k, v))
        .map(|(k, _)| k)
        .collect();
    let mut out: Vec<(String, String)> = host
        .iter()
        .filter(|(k, _)| !passed(k) || kept.contains(&k))
        .cloned()
        .collect();
    out.extend(
        caller
            .into_iter()
            .filter(|(k, v)| passed(k) && a_name_not_a_path(k, v)),
    );
    (out, changed)
}

/// Where `execvp` finds `prog`: as named (relative to `cwd`) when it names a path, else
/// the first of `path`'s absolute directories where `found` says it is. `None`: not found.
pub fn lookup(
    prog: &str,
    path: &str,
    cwd: &Path,
    found: &dyn Fn(&Path) -> bool,
) -> Option<PathBuf> {
    if prog.contains('/') {
        return Some(cwd.join(prog));
    }
    let dirs = path.split(':').filter(|d| d.starts_with('/'));
    dirs.map(|d| Path::new(d).join(prog)).find(|p| found(p))
}

/// Where `command` (an entered command's `argv[0]`) is, looked up as `execvp` would in the
/// entered sandbox: itself when it names a path (relative to `cwd`), else the first
/// regular, executable file of that name in `path`'s directories that `in_view` says the
/// entered zone's view shows. `None`: not found there.
pub fn resolve(
    command: &str,
    path: Option<&str>,
    cwd: &Path,
    in_view: &dyn Fn(&Path) -> bool,
) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &Path| {
        in_view(p)
            && std::fs::metadata(p)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    lookup(command, path.unwrap_or("/usr/bin:/bin"), cwd, &runnable)
}

/// This process's environment as text. A variable whose name or value is not UTF-8 (a
/// file name in a locale's bytes, say) is left out: no sandbox's environment carries it
/// (it is text), and it names nothing wardcell reads. (`std::env::vars` panics on one.)
pub fn text_vars() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_variables_holding_a_path_keep_the_runs_value() {
        let v = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let host = v(&[("TZ", "UTC"), ("LANG", "C.UTF-8"), ("LC_ALL", "C")]);
        for (name, value) in [
            ("TZ", ":/home/u/proj/tz"),
            ("TZ", "/home/u/proj/tz"),
            ("TZ", "../../../home/u/proj/tz"),
            ("TZ", "Europe/../../x"),
            ("LANG", "/home/u/proj/locale"),
            ("LC_ALL", "/home/u/proj/locale"),
            ("LC_MESSAGES", "/home/u/proj/locale"),
            ("LANGUAGE", "../../proj"),
            ("TERM", "../../home/u/proj/terminfo"),
            ("TERM", "xterm\x1b]0;x\x07"),
            ("COLUMNS", "80\n"),
        ] {
            let value = value.to_string();
            let (env, changed) = entered(v(&[(name, &value)]), &host);
            assert!(
                !env.iter().any(|(_, v)| *v == value),
                "{name}={value}: {env:?}"
            );
            assert!(changed.contains(&name.to_string()), "{name}={value}");
            // The run's own value, where it had one.
            let own = host.iter().find(|(k, _)| k == name);
            assert_eq!(env.iter().find(|(k, _)| k == name), own, "{name}={value}");
        }
        // Names pass: a time zone with its region, POSIX rules, locales with modifiers.
        for (name, value) in [
            ("TZ", "Europe/Paris"),
            ("TZ", "EST5EDT,M3.2.0/2:00:00,M11.1.0"),
            ("LANG", "sr_RS.UTF-8@latin"),
            ("TERM", "xterm-256color"),
        ] {
            let (env, _) = entered(v(&[(name, value)]), &host);
            assert!(
                env.contains(&(name.to_string(), value.to_string())),
                "{name}={value}"
            );
        }
    }

    #[test]
    fn an_entry_gets_the_callers_display_variables_and_the_runs_others() {
        let v = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let host = v(&[
            ("PATH", "/usr/bin:/bin"),
            ("HOME", "/home/u"),
            ("CARGO_HOME", "/opt/cargo"),
            ("LANG", "C"),
        ]);
        let caller = v(&[
            ("PATH", "/home/u/proj/evilbin:/usr/bin:/bin"),
            ("LD_PRELOAD", "/home/u/proj/evil.so"),
            ("BASH_ENV", "/home/u/proj/rc"),
            ("GIT_SSH_COMMAND", "sh -c evil"),
            ("GIT_CONFIG_GLOBAL", "/home/u/proj/gitconfig"),
            ("NODE_OPTIONS", "--require /home/u/proj/x.js"),
            ("CARGO_HOME", "/home/u/proj/cargo"),
            ("LANG", "C"),
            ("MY_FLAG", "1"),
            ("MAKEFILES", "/home/u/proj/evil.mk"),
            ("TERM", "dumb"),
            ("WARDCELL_ZONE", "agent"),
            ("OLDPWD", "/x"),
        ]);
        let (env, changed) = entered(caller, &host);
        let mut env = env;
        env.sort();
        assert_eq!(
            env,
            v(&[
                ("CARGO_HOME", "/opt/cargo"),
                ("HOME", "/home/u"),
                ("LANG", "C"),
                ("PATH", "/usr/bin:/bin"),
                ("TERM", "dumb")
            ])
        );
        assert_eq!(
            changed,
            [
                "BASH_ENV",
                "CARGO_HOME",
                "GIT_CONFIG_GLOBAL",
                "GIT_SSH_COMMAND",
                "LD_PRELOAD",
                "MAKEFILES",
                "MY_FLAG",
                "NODE_OPTIONS",
                "PATH",
                "TERM"
            ]
        );
    }

    #[test]
    fn an_entered_command_is_looked_up_where_its_view_shows_it() {
        let cwd = Path::new("/home/u/proj");
        let all = |_: &Path| true;
        assert_eq!(
            resolve("sh", Some("/nonexistent:/bin"), cwd, &all),
            Some(PathBuf::from("/bin/sh"))
        );
        // A directory the view does not show is passed over.
        let no_bin = |p: &Path| !p.starts_with("/bin");
        assert_eq!(
            resolve("sh", Some("/bin:/usr/bin"), cwd, &no_bin),
            Some(PathBuf::from("/usr/bin/sh"))
        );
        assert_eq!(
            resolve("./x", None, cwd, &all),
            Some(PathBuf::from("/home/u/proj/./x"))
        );
        assert_eq!(
            resolve("no-such-command-here", Some("/bin"), cwd, &all),
            None
        );
        // Relative entries of PATH are never looked in.
        assert_eq!(resolve("sh", Some("bin:."), Path::new("/"), &all), None);
    }

    #[test]
    fn sandbox_tools_go_first_from_beside_the_client_then_the_package() {
        let path = |env: &[(String, String)]| {
            env.iter()
                .find(|(k, _)| k == "PATH")
                .map(|(_, v)| v.clone())
        };
        let client = Path::new("/opt/w/bin/wardcell");
        let mut env = vec![("PATH".to_string(), "/usr/bin:/bin".to_string())];
        sandbox_tools_first(&mut env, client, |d| {
            d == Path::new("/opt/w/bin/wardcell-nested")
        });
        assert_eq!(
            path(&env).unwrap(),
            "/opt/w/bin/wardcell-nested:/usr/bin:/bin"
        );
        let mut env = vec![("PATH".to_string(), String::new())];
        sandbox_tools_first(&mut env, client, |d| {
            d == Path::new("/usr/libexec/wardcell/nested")
        });
        assert_eq!(path(&env).unwrap(), "/usr/libexec/wardcell/nested");
        let mut env = vec![];
        sandbox_tools_first(&mut env, client, |_| true);
        assert_eq!(path(&env).unwrap(), "/opt/w/bin/wardcell-nested");
        // Neither there: PATH as it was.
        let mut env = vec![("PATH".to_string(), "/usr/bin".to_string())];
        sandbox_tools_first(&mut env, client, |_| false);
        assert_eq!(path(&env).unwrap(), "/usr/bin");
    }

    #[test]
    fn globs() {
        assert!(glob_match("*_TOKEN", "GITHUB_TOKEN"));
        assert!(glob_match("*_TOKEN", "_TOKEN"));
        assert!(!glob_match("*_TOKEN", "GITHUB_TOKENS"));
        assert!(glob_match("AWS_*", "AWS_SECRET_ACCESS_KEY"));
        assert!(glob_match("*", ""));
        assert!(glob_match("A*B*C", "AxxBxxC"));
        assert!(!glob_match("A*B*C", "AxxBxx"));
        assert!(glob_match("PATH", "PATH"));
        assert!(!glob_match("PATH", "PATHX"));
    }

    #[test]
    fn filter_removes_denied_and_wardcell_and_sets() {
        let caller = vec![
            ("PATH".to_string(), "/usr/bin".to_string()),
            ("GITHUB_TOKEN".to_string(), "s3cret".to_string()),
            ("WARDCELL_ZONE".to_string(), "forged".to_string()),
            ("SSH_AUTH_SOCK".to_string(), "/run/x".to_string()),
            ("EDITOR".to_string(), "vim".to_string()),
            ("COMPANY_GIT_TOKEN2".to_string(), "t".to_string()),
        ];
        let rules = EnvPlan {
            deny: vec!["*_TOKEN".into()],
            set: vec![("EDITOR".into(), "true".into())],
        };
        let out = filter(caller, &rules, &["COMPANY_GIT_TOKEN2".to_string()]);
        assert_eq!(
            out,
            vec![
                ("PATH".to_string(), "/usr/bin".to_string()),
                ("EDITOR".to_string(), "true".to_string()),
            ]
        );
    }

    #[test]
    fn the_client_is_found_by_name_first() {
        let client = std::path::Path::new("/src/wardcell/target/debug/wardcell");
        let path = |env: &[(String, String)]| {
            env.iter()
                .find(|(k, _)| k == "PATH")
                .map(|(_, v)| v.clone())
        };
        let with = |p: &str| vec![("PATH".to_string(), p.to_string())];
        // Installed and first on PATH: nothing changes.
        let mut env = with("/usr/local/bin:/usr/bin");
        client_on_path(&mut env, client, |c| {
            (c == std::path::Path::new("/usr/bin/wardcell")).then_some(true)
        });
        assert_eq!(path(&env).unwrap(), "/usr/local/bin:/usr/bin");
        // Not on PATH at all (a build tree): its directory goes first.
        let mut env = with("/usr/bin:/bin");
        client_on_path(&mut env, client, |_| None);
        assert_eq!(
            path(&env).unwrap(),
            "/src/wardcell/target/debug:/usr/bin:/bin"
        );
        // Another wardcell first (an older install): the client's directory before it.
        let mut env = with("/usr/bin");
        client_on_path(&mut env, client, |_| Some(false));
        assert_eq!(path(&env).unwrap(), "/src/wardcell/target/debug:/usr/bin");
        // Relative entries are never looked at; no PATH, or an empty one: the directory.
        let mut env = with("");
        client_on_path(&mut env, client, |_| panic!("nothing to look at"));
        assert_eq!(path(&env).unwrap(), "/src/wardcell/target/debug");
        let mut env = Vec::new();
        client_on_path(&mut env, client, |_| None);
        assert_eq!(path(&env).unwrap(), "/src/wardcell/target/debug");
    }
}
