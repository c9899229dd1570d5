//! What the packages install, checked against the real client: the example
//! `/etc/wardcell/zones.toml` (packaging/zones.toml) is no configuration while it holds
//! only comments, and a valid one once its settings are uncommented; `wardcell
//! completions` works where it should.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod support;

const BIN: &str = env!("CARGO_BIN_EXE_wardcell");

fn example() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/zones.toml");
    std::fs::read_to_string(path).unwrap()
}

/// A scratch home whose `$XDG_CONFIG_HOME/wardcell/zones.toml` holds `text`.
struct Home(PathBuf);

impl Home {
    fn new(tag: &str, text: Option<&str>) -> Home {
        let root = std::env::temp_dir().join(format!("wardcell-pkg-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("xdg/wardcell")).unwrap();
        std::fs::create_dir_all(root.join("work")).unwrap();
        if let Some(text) = text {
            std::fs::write(root.join("xdg/wardcell/zones.toml"), text).unwrap();
        }
        Home(std::fs::canonicalize(root).unwrap())
    }

    fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        support::hermetic(BIN)
            .args(args)
            .env_clear()
            .env("HOME", &self.0)
            .env("XDG_CONFIG_HOME", self.0.join("xdg"))
            .env("XDG_STATE_HOME", self.0.join("state"))
            .envs(env.iter().copied())
            .current_dir(self.0.join("work"))
            .output()
            .unwrap()
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn the_example_config_keeps_the_builtin_default_until_edited() {
    let text = example();
    // This machine's own configuration is out of sight (`hermetic`).
    // As installed, in the user's place (the system's place is the same lookup, one step
    // later, and may hold a real file on this machine): the built-in default is in force.
    let h = Home::new("example", Some(&text));
    let o = h.run(&["policy", "check"], &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(stdout(&o), "ok: built-in default: 1 zone, 3 profiles\n");
    // Named with --config, it is the built-in default too, and says so.
    let file = h.0.join("xdg/wardcell/zones.toml");
    let o = h.run(
        &["policy", "check", "--config", file.to_str().unwrap()],
        &[],
    );
    assert_eq!(
        stdout(&o),
        format!(
            "ok: built-in default ({} holds no setting): 1 zone, 3 profiles\n",
            file.display()
        )
    );

    // doctor says the same (whatever else it finds on this machine).
    let o = h.run(&["doctor"], &[]);
    let out = stdout(&o);
    assert!(
        out.contains("\nOK    config           built-in default (valid)\n"),
        "{out}"
    );
    assert!(
        out.contains("OK    default config   no zones.toml with settings found (one of comments alone counts as none): the built-in default is in use\n"),
        "{out}"
    );

    // Its settings are lines starting "#" and no space: uncommented, a valid
    // configuration with both zones.
    let uncommented: String = text
        .lines()
        .map(|l| match l.strip_prefix('#') {
            Some(rest) if !rest.is_empty() && !rest.starts_with(' ') => rest,
            _ => l,
        })
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(uncommented, text);
    let h = Home::new("uncommented", Some(&uncommented));
    let o = h.run(&["policy", "check"], &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout(&o).contains(": 2 zones,"), "{}", stdout(&o));
    let o = h.run(&["zone", "list"], &[]);
    assert!(stdout(&o).contains("push "), "{}", stdout(&o));
}

#[test]
fn completions_on_the_host_and_in_a_zone_not_without_zones() {
    let h = Home::new("completions", None);
    let in_zone = [
        ("WARDCELL_SANDBOX", "1"),
        ("WARDCELL_ZONE", "agent"),
        ("WARDCELL_ZONE_SOCKET", "/nonexistent.sock"),
    ];
    for env in [&[][..], &in_zone[..]] {
        for (shell, marker) in [
            ("bash", "complete -F _wardcell"),
            ("zsh", "#compdef wardcell"),
            ("fish", "complete -c wardcell"),
        ] {
            let o = h.run(&["completions", shell], env);
            assert!(o.status.success(), "{shell} {env:?}");
            assert!(stdout(&o).contains(marker), "{shell} {env:?}");
        }
    }
    // bash reads the script and knows the function.
    let o = h.run(&["completions", "bash"], &[]);
    let script = h.0.join("c.bash");
    std::fs::write(&script, &o.stdout).unwrap();
    let b = Command::new("bash")
        .arg("-c")
        .arg(format!(". {} && complete -p wardcell", script.display()))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&b.stdout).trim(),
        "complete -o nosort -F _wardcell wardcell"
    );

    let o = h.run(&["completions", "powershell"], &[]);
    assert_eq!(o.status.code(), Some(2));
    let o = h.run(&["completions", "bash"], &[("WARDCELL_SANDBOX", "1")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr)
        .starts_with("error: `wardcell completions` is not available in this sandbox"));
}
