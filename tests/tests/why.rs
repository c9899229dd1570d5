//! `wardcell policy why` on the host and `wardcell zone why` inside a zone: the answer
//! agrees with what the sandbox can really do, names the rule, and for a denial the
//! zones that would allow it (inside: only zones this run may enter).

use wardcell_tests::{both, Fixture};

fn config(fx: &Fixture) {
    let bin = fx.bin.display();
    let home = fx.home.display();
    fx.config(&format!(
        r#"
[zones.agent]
profile = "test"
default = true

[zones.push]
profile = "push"
enter_from = ["agent"]

[zones.sealed]
profile = "push"

[profiles.test]
extends = "developer-readonly"
read = ["{bin}"]

[profiles.push]
extends = "developer-readonly"
read = ["{bin}"]
write = ["{home}/out"]
network = {{ allow = ["git.example.com:443", "*.mirror.example:8443"] }}
"#
    ));
    std::fs::create_dir_all(fx.home.join("out")).unwrap();
    std::fs::create_dir_all(fx.home.join(".ssh")).unwrap();
    fx.write(&fx.home.join(".ssh/id_ed25519"), "planted\n");
    fx.write(&fx.home.join("notes"), "notes\n");
    fx.own(&fx.home);
}

// Inside `agent`: for each path, `zone why` (exit 0 allowed, 1 denied) agrees with a
// real read or write; hosts are denied with the zone that allows them named.
both!(zone_why_agrees_with_the_sandbox, |fx| {
    config(&fx);
    let script = r#"
check() { # --read|--write path
  if [ "$1" = --write ]; then
    wardcell zone why --write "$2" >/dev/null; why=$?
    ( : >> "$2" ) 2>/dev/null; real=$?
  else
    wardcell zone why "$2" >/dev/null; why=$?
    cat "$2" >/dev/null 2>&1; real=$?
  fi
  [ $real -ne 0 ] && real=1
  echo "check $1 $2 why=$why real=$real"
}
check --read ~/notes
check --write ~/notes
check --write ./made-here
wardcell zone why --write ./made-here
check --read ~/.ssh/id_ed25519
check --write ~/out/f
check --read /etc/hostname
check --write /usr/lib/os-release
check --write /tmp/scratch
check --read /nowhere-in-the-view/x
check --read /proc/keys
wardcell zone why ~/.ssh/id_ed25519
wardcell zone why --write ~/out/f
wardcell zone why git.example.com:443; echo "rc=$?"
wardcell zone why a.mirror.example:8443 --output json
wardcell zone why mirror.example:8443
wardcell zone why nohost; echo "usage=$?"
"#;
    let out = fx.run(&["run", "--", "/bin/sh", "-c", script]);
    out.ok();
    let checks: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("check "))
        .collect();
    assert_eq!(checks.len(), 10, "{out:#?}");
    for line in &checks {
        let why = line
            .split("why=")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap();
        let real = line.split("real=").nth(1).unwrap();
        assert_eq!(
            why, real,
            "zone why and the sandbox disagree: {line}; {out:#?}"
        );
    }
    // Both answers occur: the comparison above is not of one kind only.
    assert!(
        checks.iter().any(|l| l.contains("why=0")) && checks.iter().any(|l| l.contains("why=1"))
    );
    let o = &out.stdout;
    assert!(
        o.contains("denied: ")
            && o.contains("id_ed25519 in zone 'agent'\n  because: ")
            && o.contains("is masked by `deny`"),
        "{out:#?}"
    );
    // Writing ~/out: push may, and agent may enter push; `sealed` may too, but agent
    // cannot enter it, so it is not named.
    assert!(
        o.contains("allowed in: push (`wardcell zone enter ZONE -- COMMAND`)"),
        "{out:#?}"
    );
    assert!(!o.contains("sealed"), "{out:#?}");
    assert!(o.contains("denied: git.example.com:443 in zone 'agent'\n  because: zone 'agent' has no network at all"), "{out:#?}");
    assert!(o.contains("rc=1"), "{out:#?}");
    let json: serde_json::Value =
        serde_json::from_str(o.lines().find(|l| l.starts_with('{')).unwrap()).unwrap();
    assert_eq!(json["allowed"], false);
    assert_eq!(json["zone"], "agent");
    assert_eq!(json["allowed_in"], serde_json::json!(["push"]));
    assert!(
        o.contains("denied: mirror.example:8443 in zone 'agent'"),
        "{out:#?}"
    );
    assert!(out.stderr.contains("neither a path"), "{out:#?}");
    assert!(o.contains("usage=2"), "{out:#?}");
});

// On the host: any zone or profile, every zone that allows it named; `zone why` is
// refused there with the command that answers instead.
both!(policy_why_answers_for_any_zone_on_the_host, |fx| {
    config(&fx);
    let out = fx.run(&["policy", "why", "git.example.com:443"]);
    out.expect_code(1);
    assert!(
        out.stdout
            .contains("allowed in: push, sealed (`wardcell run --zone ZONE -- COMMAND`)"),
        "{out:#?}"
    );
    let out = fx.run(&["policy", "why", "--zone", "push", "x.mirror.example:8443"]);
    out.ok();
    assert!(out.stdout.starts_with("allowed: x.mirror.example:8443 in zone 'push'\n  because: `network.allow` has \"*.mirror.example:8443\""), "{out:#?}");
    // A protected git file: read-only inside the project's write tree (the view makes
    // its hooks directory a read-only mount; a write fails with EROFS or EBUSY).
    fx.write(&fx.proj.join(".git/hooks/pre-commit.sample"), "#!/bin/sh\n");
    fx.write(&fx.proj.join(".git/config"), "[core]\n");
    let out = fx.run(&[
        "policy",
        "why",
        "--profile",
        "developer-readonly",
        "--write",
        ".git/hooks/pre-commit",
    ]);
    out.expect_code(1);
    assert!(out.stdout.contains("stays read-only"), "{out:#?}");
    assert!(out.stdout.contains("EBUSY"), "{out:#?}");
    let out = fx.run(&["zone", "why", "git.example.com:443"]);
    out.expect_code(1);
    assert!(out.stderr.contains("`wardcell policy why"), "{out:#?}");
});

// A variable of the caller's environment that is not UTF-8 is left out of the host
// socket directories `policy why` considers; it does not end it with a panic (the
// broker read the environment the same way: tests/faults.rs,
// a_variable_that_is_not_utf8_does_not_stop_the_run).
both!(
    policy_why_answers_beside_a_variable_that_is_not_utf8,
    |fx| {
        use std::os::unix::ffi::OsStrExt;
        config(&fx);
        let mut cmd = fx.cmd(&["policy", "why", "--zone", "push", "x.mirror.example:8443"]);
        cmd.env(
            std::ffi::OsStr::from_bytes(b"XDG_RUNTIME_DIR"),
            std::ffi::OsStr::from_bytes(b"/run/caf\xe9"),
        );
        let out: wardcell_tests::Out = cmd.output().unwrap().into();
        out.ok();
        assert!(
            out.stdout
                .starts_with("allowed: x.mirror.example:8443 in zone 'push'\n"),
            "{out:#?}"
        );
    }
);

// A refusal by the proxy says where to ask; `zone denials` lists the sandbox's recent
// refusals with why; the run ends with one stderr line counting them. A zone without
// network has no proxy, and says so.
both!(refusals_are_listed_inside_and_counted_at_the_end, |fx| {
    let bin = fx.bin.display();
    fx.config(&format!(
        r#"
[zones.agent]
profile = "net"
default = true

[zones.offline]
profile = "off"
enter_from = ["agent"]

[profiles.net]
extends = "developer-readonly"
read = ["{bin}"]
network = {{ allow = ["allowed.example.invalid:443"] }}

[profiles.off]
extends = "developer-readonly"
read = ["{bin}"]
"#
    ));
    let script = r#"
wardcell zone denials
curl -sS --max-time 20 http://refused.example:80/x; echo "curl=$?"
curl -sS --max-time 20 https://other.example:443/; echo "tls=$?"
wardcell zone denials
wardcell zone denials --output json
wardcell zone enter offline -- wardcell zone denials; echo "offline=$?"
"#;
    let out = fx.run(&["run", "--", "/bin/sh", "-c", script]);
    out.ok();
    let o = &out.stdout;
    assert!(
        o.starts_with("nothing refused by zone 'agent''s proxy in this sandbox\n"),
        "{out:#?}"
    );
    assert!(
        o.contains("wardcell: refused.example:80 is not allowed in zone agent")
            && o.contains("`wardcell zone why refused.example:80` says which rule refused it"),
        "{out:#?}"
    );
    assert!(
        o.contains("2 connections refused by zone 'agent''s proxy in this sandbox:\n"),
        "{out:#?}"
    );
    assert!(
        o.contains("  refused.example:80  not in the allow list\n"),
        "{out:#?}"
    );
    assert!(
        o.contains("  other.example:443  not in the allow list\n"),
        "{out:#?}"
    );
    let json: serde_json::Value =
        serde_json::from_str(o.lines().find(|l| l.starts_with('{')).unwrap()).unwrap();
    assert_eq!(json["zone"], "agent");
    assert_eq!(json["total"], 2);
    assert_eq!(json["recent"][0]["host"], "refused.example");
    assert_eq!(json["recent"][1]["port"], 443);
    assert!(o.contains("offline=1"), "{out:#?}");
    assert!(
        out.stderr.contains("zone 'offline' has no network"),
        "{out:#?}"
    );
    let last = out.stderr.trim_end().lines().last().unwrap_or("");
    assert!(
        last.starts_with("wardcell: 2 connections were refused in this run; `wardcell logs show ")
            && last.ends_with(" --category proxy` shows which and why"),
        "{out:#?}"
    );
    // A run that refused nothing says nothing of it.
    let quiet = fx.sh("true");
    quiet.ok();
    assert!(!quiet.stderr.contains("refused"), "{quiet:#?}");
});
