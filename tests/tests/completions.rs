//! `wardcell completions` inside real sandboxes: printed in a zone, the same script as on
//! the host; refused in a run without zones, like every command there. Real bash
//! completion through the printed script: the zones and profiles of the user's
//! configuration, the run ids of real runs' logs, nothing (and quickly) on a broken
//! configuration, the zones a sandbox may enter from inside it. `logs show` and `logs
//! verify` take `latest` and a unique start of a run id; an ambiguous start is refused.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wardcell_tests::{both, Fixture, Out};

both!(completions_work_in_a_zone_and_match_the_host, |fx| {
    fx.test_config("");
    let host = fx.run(&["completions", "bash"]);
    host.ok();
    assert!(host.stdout.contains("complete -F _wardcell"), "{host:?}");
    let inside = fx.sh("wardcell completions bash");
    inside.ok();
    assert_eq!(inside.stdout, host.stdout);
    for shell in ["zsh", "fish"] {
        let host = fx.run(&["completions", shell]);
        let inside = fx.sh(&format!("wardcell completions {shell}"));
        inside.ok();
        assert_eq!(inside.stdout, host.stdout, "{shell}");
    }
});

both!(completions_are_refused_without_zones, |fx| {
    fx.test_config("");
    let out = fx.run(&[
        "run",
        "--profile",
        "test",
        "--",
        "/bin/sh",
        "-c",
        "wardcell completions bash",
    ]);
    out.expect_code(1);
    assert_eq!(out.stdout, "");
    assert!(
        out.stderr
            .starts_with("error: `wardcell completions` is not available in this sandbox"),
        "{out:?}"
    );
});

/// What bash offers for `line` (the word under the cursor is the last, maybe empty),
/// through the script `wardcell completions bash` prints, as the fixture's user.
fn bash_offers(fx: &Fixture, line: &[&str]) -> Vec<String> {
    let script = fx.dir.join("wardcell.bash");
    let printed = fx.run(&["completions", "bash"]);
    printed.ok();
    fx.write(&script, &printed.stdout);
    let words: Vec<String> = line.iter().map(|w| format!("'{w}'")).collect();
    let probe = format!(
        ". {}; COMP_WORDS=({}); COMP_CWORD={}; COMP_LINE='{}'; _wardcell; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script.display(),
        words.join(" "),
        line.len() - 1,
        line.join(" ")
    );
    let mut bash = Command::new("bash");
    bash.arg("-c")
        .arg(probe)
        .current_dir(&fx.proj)
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", fx.bin.display()))
        .env("HOME", &fx.home)
        .stdin(Stdio::null());
    if let Some((uid, gid)) = fx.who.ids() {
        bash.uid(uid).gid(gid);
    }
    let started = Instant::now();
    let out: Out = bash.output().unwrap().into();
    assert!(started.elapsed() < Duration::from_secs(3), "slow: {line:?}");
    out.ok();
    assert_eq!(out.stderr, "", "{line:?}");
    out.stdout
        .lines()
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

/// Run `program -c script` as the fixture's user, in its project, with the script
/// `wardcell completions SHELL` prints saved as `script_path`; its output lines. None
/// when the shell is not installed.
fn in_shell(fx: &Fixture, shell: &str, script: &str) -> Option<Vec<String>> {
    if Command::new(shell).arg("-c").arg("true").output().is_err() {
        wardcell_tests::skipped(&format!("{shell} is not installed"));
        return None;
    }
    let printed = fx.run(&["completions", shell]);
    printed.ok();
    fx.write(&fx.dir.join(format!("wardcell.{shell}")), &printed.stdout);
    let mut cmd = Command::new(shell);
    if shell == "zsh" {
        cmd.arg("-f");
    }
    cmd.arg("-c")
        .arg(
            script.replace(
                "SCRIPT",
                &fx.dir
                    .join(format!("wardcell.{shell}"))
                    .display()
                    .to_string(),
            ),
        )
        .current_dir(&fx.proj)
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", fx.bin.display()))
        .env("HOME", &fx.home)
        .stdin(Stdio::null());
    if let Some((uid, gid)) = fx.who.ids() {
        cmd.uid(uid).gid(gid);
    }
    let out: Out = cmd.output().unwrap().into();
    out.ok();
    Some(out.stdout.lines().map(String::from).collect())
}

/// The run ids `logs list` shows, newest first.
fn listed(fx: &Fixture) -> Vec<String> {
    listed_with(fx, &[])
}

/// Every run id with a log, doctor's trial runs' too.
fn listed_all(fx: &Fixture) -> Vec<String> {
    listed_with(fx, &["--all"])
}

fn listed_with(fx: &Fixture, more: &[&str]) -> Vec<String> {
    let mut args = vec!["logs", "list", "--output", "json"];
    args.extend_from_slice(more);
    let out = fx.run(&args);
    out.ok();
    let doc: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    doc["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run"].as_str().unwrap().to_string())
        .collect()
}

both!(
    bash_completes_zones_profiles_and_run_ids_from_the_config_and_logs,
    |fx| {
        fx.test_config(
        "[zones.deploy-prod]\nprofile = \"ops\"\nenter_from = [\"agent\"]\n\n[profiles.ops]\nextends = \"base\"\n",
    );
        assert_eq!(
            bash_offers(&fx, &["wardcell", "run", "--zone", ""]),
            ["agent", "deploy-prod"]
        );
        assert_eq!(
            bash_offers(&fx, &["wardcell", "run", "--zone", "=", "d"]),
            ["deploy-prod"]
        );
        assert_eq!(
            bash_offers(&fx, &["wardcell", "policy", "show", "de"]),
            ["deploy-prod"]
        );
        let profiles = bash_offers(&fx, &["wardcell", "run", "--profile", ""]);
        for p in [
            "ops",
            "test",
            "base",
            "readonly",
            "developer-readonly",
            "codex",
            "claude-code",
        ] {
            assert!(profiles.iter().any(|x| x == p), "{p} not in {profiles:?}");
        }
        assert_eq!(
            bash_offers(&fx, &["wardcell", "run", "--profile", "o"]),
            ["ops"]
        );
        assert_eq!(
            bash_offers(&fx, &["wardcell", "logs", "show", "x", "--category", ""]),
            ["run", "audit", "proxy", "sandbox"]
        );
        assert_eq!(bash_offers(&fx, &["wardcell", "lo"]), ["logs"]);

        // Run ids from real runs' logs, newest first, after `latest`.
        fx.sh("true").ok();
        fx.sh("exit 3").expect_code(3);
        let ids = listed(&fx);
        assert_eq!(ids.len(), 2, "{ids:?}");
        let offered = bash_offers(&fx, &["wardcell", "logs", "show", ""]);
        assert_eq!(offered, ["latest", ids[0].as_str(), ids[1].as_str()]);
        let offered = bash_offers(&fx, &["wardcell", "logs", "verify", &ids[1][..20]]);
        assert!(offered.contains(&ids[1]), "{offered:?}");
    }
);

both!(completion_offers_nothing_quietly_on_a_broken_config, |fx| {
    fx.config("[zones.agent\nprofile = ");
    assert!(bash_offers(&fx, &["wardcell", "run", "--zone", ""]).is_empty());
    assert!(bash_offers(&fx, &["wardcell", "run", "--profile", "x"]).is_empty());
    // The commands themselves need no configuration.
    assert_eq!(bash_offers(&fx, &["wardcell", "pol"]), ["policy"]);
    // Not even a run directory: no ids, `latest` alone.
    assert_eq!(
        bash_offers(&fx, &["wardcell", "logs", "show", ""]),
        ["latest"]
    );
    // What the script hides (2>/dev/null) is empty anyway: no message, exit 0.
    let direct = fx.run(&["__complete", "bash", "3", "wardcell", "run", "--zone", ""]);
    direct.ok();
    assert_eq!(
        (direct.stdout.as_str(), direct.stderr.as_str()),
        ("words\n", "")
    );
});

both!(completion_in_a_zone_offers_the_zones_it_may_enter, |fx| {
    fx.test_config("[zones.push]\nprofile = \"test\"\nenter_from = [\"agent\"]\n");
    let printed = fx.run(&["completions", "bash"]);
    fx.write(&fx.proj.join("c.bash"), &printed.stdout);
    let out = fx.run(&[
        "run",
        "--",
        "/bin/bash",
        "-c",
        ". ./c.bash; COMP_WORDS=(wardcell zone enter ''); COMP_CWORD=3; _wardcell; echo \"${COMPREPLY[*]}\"; COMP_WORDS=(wardcell ''); COMP_CWORD=1; _wardcell; echo \"${COMPREPLY[*]}\"",
    ]);
    out.ok();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines, ["push", "completions zone"], "{out:?}");
});

both!(logs_show_and_verify_take_latest_and_a_unique_prefix, |fx| {
    fx.test_config("");
    let none = fx.run(&["logs", "show", "latest"]);
    none.expect_code(1);
    assert!(
        none.stderr
            .starts_with("error: there is no run to show yet"),
        "{none:?}"
    );
    fx.sh("echo first").ok();
    let _ = fx.run(&["doctor"]);
    fx.sh("exit 4").expect_code(4);
    let ids = listed(&fx);
    assert_eq!(ids.len(), 2, "{ids:?}");
    let (newest, older) = (&ids[0], &ids[1]);

    // `latest`: the first run `logs list` shows (doctor's trial runs are not).
    let out = fx.run(&["logs", "show", "latest", "--output", "json"]);
    out.ok();
    let doc: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(doc["run"], newest.as_str(), "{doc:#}");
    let out = fx.run(&["logs", "verify", "latest"]);
    out.ok();
    assert!(
        out.stdout.starts_with(&format!("ok: run {newest}:")),
        "{out:?}"
    );

    // A unique start: the shortest that tells the older run from every other log,
    // doctor's trial runs' included.
    let all = listed_all(&fx);
    let unique = (1..25)
        .map(|n| &older[..n])
        .find(|p| all.iter().filter(|i| i.starts_with(p)).count() == 1)
        .unwrap_or(older.as_str());
    let common = newest
        .bytes()
        .zip(older.bytes())
        .take_while(|(a, b)| a == b)
        .count();
    let out = fx.run(&["logs", "show", unique, "--output", "json"]);
    out.ok();
    let doc: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(doc["run"], older.as_str(), "{doc:#}");
    assert!(out.stdout.contains("echo first"), "{out:?}");
    fx.run(&["logs", "verify", unique]).ok();

    // Ambiguous: one line naming both (and doctor's trial runs, which have logs too).
    let shared = &newest[..common.max(1)];
    let out = fx.run(&["logs", "show", shared]);
    out.expect_code(1);
    assert_eq!(out.stdout, "");
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    assert!(
        out.stderr
            .starts_with(&format!("error: '{shared}' is the start of ")),
        "{out:?}"
    );
    assert!(
        out.stderr.contains(newest.as_str()) && out.stderr.contains(older.as_str()),
        "{out:?}"
    );
    let out = fx.run(&["logs", "verify", shared]);
    out.expect_code(1);
    assert!(out.stderr.contains("give more of the id"), "{out:?}");

    // No such start, and not an id at all.
    let out = fx.run(&["logs", "show", "1999"]);
    out.expect_code(1);
    assert!(
        out.stderr
            .starts_with("error: no run id starts with '1999'"),
        "{out:?}"
    );
    let out = fx.run(&["logs", "show", "../x"]);
    out.expect_code(1);
    assert!(out.stderr.contains("is not a run id"), "{out:?}");
});

both!(zsh_and_fish_complete_zone_names_and_files, |fx| {
    fx.test_config("[zones.deploy]\nprofile = \"test\"\n");
    // zsh: the completion function called as the completion system would, with its
    // builtins (compadd, _files) standing in to print what they are given.
    let zsh = in_shell(
        &fx,
        "zsh",
        "compadd() { shift 3; print -rl -- \"$@\" }; _files() { echo FILES }; compdef() { }; \
         source SCRIPT; \
         words=(wardcell run --zone ''); CURRENT=4; _wardcell; echo .; \
         words=(wardcell run --zone=d); CURRENT=3; _wardcell; echo .; \
         words=(wardcell run --read ''); CURRENT=4; _wardcell",
    );
    if let Some(lines) = zsh {
        assert_eq!(
            lines,
            ["agent", "deploy", ".", "--zone=deploy", ".", "FILES"]
        );
    }
    // fish: its own completion engine.
    let fish = in_shell(
        &fx,
        "fish",
        "source SCRIPT; complete -C 'wardcell run --zone '; echo .; \
         complete -C 'wardcell run --zone=d'; echo .; complete -C 'wardcell lo'",
    );
    if let Some(lines) = fish {
        assert_eq!(
            lines,
            ["agent", "deploy", ".", "--zone=deploy", ".", "logs"]
        );
    }
});
