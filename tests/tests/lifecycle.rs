//! Host-side helpers live and die with what they serve: the approval plugin (its process
//! group ends with the caller, the timeout and the run; its answer counts when it exits),
//! where the plugin and credential commands run (from `/`, with a minimal environment),
//! and a zone's proxy that dies mid-run (noticed at once, audited, said on stderr).
//! Real sandboxes, run as the invoking user and as an unprivileged uid.

use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use wardcell_tests::{both, Fixture};

/// The variables the documented helper environment may hold (docs/PROTOCOL.md, 7).
const HELPER_VARS: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "XDG_RUNTIME_DIR",
    "XDG_CONFIG_HOME",
    "XDG_STATE_HOME",
    "XDG_DATA_HOME",
    "DBUS_SESSION_BUS_ADDRESS",
];

/// Zones `agent` (default) and `push` (entered from agent, approval required with
/// `timeout`, if any), and `plugin` (a shell script body) as the approval plugin. The
/// plugin keeps its notes in `~/plugin`, which sandboxes can read.
fn approval_config(fx: &Fixture, timeout: Option<&str>, plugin: &str) -> PathBuf {
    let notes = fx.home.join("plugin");
    fs::create_dir_all(&notes).unwrap();
    let script = fx.dir.join("approve.sh");
    fx.write(
        &script,
        &format!("#!/bin/sh\nnotes={}\n{plugin}", notes.display()),
    );
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    fx.own(&notes);
    let timeout = timeout
        .map(|t| format!("approval_timeout = \"{t}\"\n"))
        .unwrap_or_default();
    fx.config(&format!(
        r#"
[zones.agent]
profile = "dev"
default = true

[zones.push]
profile = "dev"
enter_from = ["agent"]
requires_approval = true
{timeout}
[profiles.dev]
extends = "readonly"
read = ["{bin}"]

[approval]
plugin = ["{script}"]
"#,
        bin = fx.bin.display(),
        script = script.display(),
    ));
    notes
}

/// The run's audit log (the only one in the fixture).
fn only_log(fx: &Fixture) -> String {
    let runs = fx.home.join(".local/state/wardcell/runs");
    let mut logs: Vec<PathBuf> = fs::read_dir(&runs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(logs.len(), 1, "{logs:?}");
    fs::read_to_string(logs.pop().unwrap()).unwrap()
}

fn events(log: &str, event: &str) -> Vec<serde_json::Value> {
    log.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["event"] == event)
        .collect()
}

/// The process group the plugin wrote to `file` (its `$$`: it leads its group).
fn group_in(file: &Path) -> i32 {
    fs::read_to_string(file)
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
        .trim()
        .parse()
        .unwrap()
}

/// Live processes in process group `pgid`, as /proc lists them.
fn members(pgid: i32) -> Vec<String> {
    let mut found = Vec::new();
    for e in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp ...: comm may hold spaces, so split after ')'.
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // A zombie has ended; only its parent's wait is missing.
        if fields.get(2) == Some(&pgid.to_string().as_str()) && fields.first() != Some(&"Z") {
            found.push(format!("{head}) {}", fields[0]));
        }
    }
    found
}

/// Group `pgid` empties within a second or two (SIGKILL is delivered asynchronously).
#[track_caller]
fn assert_group_gone(pgid: i32) {
    let until = Instant::now() + Duration::from_secs(3);
    while !members(pgid).is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        members(pgid),
        Vec::<String>::new(),
        "the plugin's group lives on"
    );
}

both!(
    a_hung_plugin_ends_with_its_caller_and_the_next_entry_works,
    |fx| {
        // First call: hangs for ever, with a child of its own. Later calls: approve.
        let notes = approval_config(
        &fx,
        None,
        "if mkdir $notes/first 2>/dev/null; then\n  echo $$ > $notes/first.tmp; mv $notes/first.tmp $notes/first-pid\n  sleep 1000 &\n  exec sleep 1000\nfi\ncat >/dev/null\necho '{\"approved\": true, \"approver\": \"second\"}'\n",
    );
        let start = Instant::now();
        // The next entry may come before the supervisor has seen the caller go (a refusal
        // as busy, which is another matter): it is retried for up to 5 s.
        let out = fx.sh(&format!(
        "wardcell zone enter push -- true & p=$!\nwhile [ ! -e {n}/first-pid ]; do sleep 0.05; done\nkill -9 $p; wait $p\n\
         for i in $(seq 50); do wardcell zone enter push -- true 2>/dev/null && break; sleep 0.1; done; echo second-rc=$?",
        n = notes.display()
    ));
        out.ok();
        assert!(out.stdout.contains("second-rc=0"), "{out:?}");
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{:?}",
            start.elapsed()
        );
        assert_group_gone(group_in(&notes.join("first-pid")));
        let log = only_log(&fx);
        let decisions = events(&log, "audit.decision");
        // Busy refusals of the retries may come before it: they are other attempts.
        let gone = decisions.iter().filter(|d| {
            d["reason"]
                .as_str()
                .unwrap()
                .contains("the caller went away before the approval plugin answered")
        });
        assert_eq!(gone.count(), 1, "{log}");
        let last = decisions.last().unwrap();
        assert_eq!(last["decision"], "allowed", "{log}");
        assert_eq!(last["approval"]["approver"], "second", "{log}");
    }
);

both!(
    a_plugin_past_its_timeout_is_refused_audited_and_ended,
    |fx| {
        let notes = approval_config(
        &fx,
        Some("1s"),
        "echo $$ > $notes/pid.tmp; mv $notes/pid.tmp $notes/pid\nsleep 1000 &\necho $! > $notes/child\nexec sleep 1000\n",
    );
        let out = fx.sh("wardcell zone enter push -- true; echo rc=$?");
        out.ok();
        assert!(out.stdout.contains("rc=1"), "{out:?}");
        assert!(
        out.stderr.contains("error: entering zone 'push' was not approved: the approval plugin did not answer within the zone's approval_timeout\n"),
        "{out:?}"
    );
        assert_group_gone(group_in(&notes.join("pid")));
        // Its child too, by pid (before the fix the plugin had no group of its own).
        let child = group_in(&notes.join("child"));
        let stat = fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
        assert!(
            stat.is_empty()
                || stat
                    .rsplit_once(')')
                    .unwrap()
                    .1
                    .trim_start()
                    .starts_with('Z'),
            "the plugin's child lives on: {stat}"
        );
        let log = only_log(&fx);
        let decisions = events(&log, "audit.decision");
        assert_eq!(decisions.len(), 1, "{log}");
        assert_eq!(decisions[0]["decision"], "denied", "{log}");
        assert!(
            decisions[0]["reason"]
                .as_str()
                .unwrap()
                .contains("approval_timeout"),
            "{log}"
        );
    }
);

both!(the_runs_end_leaves_no_plugin_behind, |fx| {
    let notes = approval_config(
        &fx,
        None,
        "echo $$ > $notes/pid.tmp; mv $notes/pid.tmp $notes/pid\nsleep 1000 &\nexec sleep 1000\n",
    );
    let out = fx.sh(&format!(
        "wardcell zone enter push -- true &\nwhile [ ! -e {}/pid ]; do sleep 0.05; done; exit 0",
        notes.display()
    ));
    out.ok();
    // The run has ended: nothing of the plugin may be left (gone within a moment:
    // SIGKILL is delivered asynchronously).
    let pgid = group_in(&notes.join("pid"));
    assert_group_gone(pgid);
    let log = only_log(&fx);
    // The attempt is audited before the run's end.
    let decisions = events(&log, "audit.decision");
    assert_eq!(decisions.len(), 1, "{log}");
    assert_eq!(decisions[0]["decision"], "denied", "{log}");
    let finished = log.find("run.finished").unwrap();
    assert!(log.find("audit.decision").unwrap() < finished, "{log}");
});

both!(
    an_answer_counts_when_the_plugin_exits_whatever_its_children_hold,
    |fx| {
        let notes = approval_config(
        &fx,
        Some("30s"),
        "echo $$ > $notes/pid\ncat >/dev/null\nsleep 1000 &\necho '{\"approved\": true, \"approver\": \"quick\"}'\n",
    );
        let start = Instant::now();
        let out = fx.sh("wardcell zone enter push -- true; echo rc=$?");
        out.ok();
        assert!(out.stdout.contains("rc=0"), "{out:?}");
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the answer waited for the plugin's child: {:?}",
            start.elapsed()
        );
        assert_group_gone(group_in(&notes.join("pid")));
        assert!(only_log(&fx).contains(r#""approver":"quick""#));
    }
);

/// Assert that `notes/cwd` and `notes/env` show a helper that ran from `/` with the
/// documented minimal environment.
#[track_caller]
fn assert_minimal(notes: &Path) {
    let cwd = fs::read_to_string(notes.join("cwd")).unwrap();
    assert_eq!(cwd.trim(), "/");
    let env = fs::read_to_string(notes.join("env")).unwrap();
    for line in env.lines() {
        let (k, v) = line.split_once('=').unwrap_or((line, ""));
        assert!(
            HELPER_VARS.contains(&k),
            "{k} is not in the helper environment: {env}"
        );
        if k == "PATH" {
            assert_eq!(v, "/usr/local/bin:/usr/bin:/bin", "{env}");
        }
    }
    assert!(!env.contains("leaked"), "{env}");
}

both!(the_plugin_runs_from_root_with_a_minimal_environment, |fx| {
    let notes = approval_config(
        &fx,
        Some("30s"),
        "cat >/dev/null\npwd > $notes/cwd\ntr '\\0' '\\n' < /proc/$$/environ > $notes/env\necho '{\"approved\": true}'\n",
    );
    let out: wardcell_tests::Out = fx
        .cmd(&[
            "run",
            "--",
            "/bin/sh",
            "-c",
            "wardcell zone enter push -- true",
        ])
        .env("WARDCELL_TEST_EXTRA", "leaked")
        .env("LD_LIBRARY_PATH", "leaked")
        .output()
        .unwrap()
        .into();
    out.ok();
    assert_minimal(&notes);
    let env = fs::read_to_string(notes.join("env")).unwrap();
    assert!(
        env.contains(&format!("HOME={}\n", fx.home.display())),
        "{env}"
    );
});

// What the caller of `wardcell run` left open (a shell's `7>file`, or `5>file` without a
// terminal) reaches neither the
// broker nor a helper it starts: the approval plugin lists its descriptors, and the broker's
// are read from /proc while the run waits.
both!(descriptors_the_caller_leaked_reach_no_helper, |fx| {
    let notes = approval_config(
        &fx,
        Some("30s"),
        "cat >/dev/null\nls -l /proc/$$/fd/ > $notes/fds\necho '{\"approved\": true}'\n",
    );
    let leaked = fx.outside.join("leaked-file");
    fs::write(&leaked, "").unwrap();
    let file = fs::File::open(&leaked).unwrap();
    let raw = std::os::fd::AsRawFd::as_raw_fd(&file);
    let mut cmd = fx.cmd(&[
        "run",
        "--",
        "/bin/sh",
        "-c",
        "wardcell zone enter push -- true; while [ ! -e go ]; do sleep 0.02; done",
    ]);
    // At 7, and at 5, where the broker takes a pty when there is a terminal (none here).
    // SAFETY: only dup2, async-signal-safe, between fork and exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
            match (libc::dup2(raw, 7), libc::dup2(raw, 5)) {
                (7, 5) => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
    let mut run = wardcell_tests::Watched::spawn(&fx, cmd, "leak");
    let listed = notes.join("fds");
    wardcell_tests::wait_until(30, "the plugin to run", || listed.exists());
    let broker = run.tree.broker().pid;
    let held: Vec<String> = fs::read_dir(format!("/proc/{broker}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|e| fs::read_link(e.path()).ok())
        .map(|p| p.display().to_string())
        .collect();
    fx.write(&fx.proj.join("go"), "");
    let (out, _) = run.finish(30);
    out.ok();
    let name = leaked.display().to_string();
    assert!(!held.contains(&name), "the broker holds {name}: {held:?}");
    let fds = fs::read_to_string(notes.join("fds")).unwrap();
    assert!(fds.contains("/dev/null") || fds.contains("pipe"), "{fds}");
    assert!(!fds.contains(&name), "the plugin holds {name}: {fds}");
    drop(file);
});

both!(
    a_credential_command_runs_from_root_with_a_minimal_environment,
    |fx| {
        let notes = fx.home.join("notes");
        let script = fx.dir.join("secret.sh");
        fx.write(
            &script,
            &format!(
            "#!/bin/sh\npwd > {n}/cwd\ntr '\\0' '\\n' < /proc/$$/environ > {n}/env\necho tok-1\n",
            n = notes.display()
        ),
        );
        fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
        fs::create_dir_all(&notes).unwrap();
        fx.own(&notes);
        fx.config(&format!(
            r#"
[zones.agent]
profile = "p"
default = true
authenticated = true

[profiles.p]
extends = "readonly"
read = ["{bin}"]
network = {{ allow = ["git.example.com:443"] }}
credentials = ["git"]

[credentials.git]
hosts = ["git.example.com"]
scheme = "bearer"
secret = {{ command = ["{script}"] }}
"#,
            bin = fx.bin.display(),
            script = script.display(),
        ));
        let out: wardcell_tests::Out = fx
            .cmd(&["run", "--", "/bin/true"])
            .env("WARDCELL_TEST_EXTRA", "leaked")
            .output()
            .unwrap()
            .into();
        out.ok();
        assert_minimal(&notes);
    }
);

/// The broker's children named `wardcell-proxy`.
fn proxies_of(broker: u32) -> Vec<i32> {
    let mut found = Vec::new();
    for task in fs::read_dir(format!("/proc/{broker}/task"))
        .unwrap()
        .flatten()
    {
        let children = fs::read_to_string(task.path().join("children")).unwrap_or_default();
        for pid in children.split_whitespace() {
            let comm = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if comm.trim() == "wardcell-proxy" {
                found.push(pid.parse().unwrap());
            }
        }
    }
    found
}

both!(
    a_proxy_that_dies_mid_run_is_noticed_audited_and_refuses_at_once,
    |fx| {
        fx.config(&format!(
            r#"
[zones.agent]
profile = "p"
default = true

[profiles.p]
extends = "readonly"
read = ["{bin}"]
network = {{ allow = ["example.com:80"] }}
"#,
            bin = fx.bin.display(),
        ));
        // Connect to the proxy once it is up, wait for `go`, then try again, timed.
        let script = format!(
            "hp=${{HTTP_PROXY#http://}}; hp=${{hp%/}}; host=${{hp%:*}}; port=${{hp##*:}}\n\
         wardcell-probe tcp $host $port\necho ready\n\
         while [ ! -e {go} ]; do sleep 0.05; done\n\
         s=$(date +%s%N); wardcell-probe tcp $host $port; e=$(date +%s%N)\n\
         echo ms=$(( (e - s) / 1000000 ))\nexit 0",
            go = fx.proj.join("go").display()
        );
        let mut run = fx
            .cmd(&["run", "--", "/bin/sh", "-c", &script])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(run.stdout.take().unwrap());
        let mut first = String::new();
        for _ in 0..2 {
            stdout.read_line(&mut first).unwrap();
        }
        assert_eq!(first, "ok\nready\n", "the proxy did not serve at first");
        // The broker: the child of `wardcell run`'s terminal keeper.
        let proxies = proxies_of(wardcell_tests::broker_of(run.id()));
        assert_eq!(proxies.len(), 1, "{proxies:?}");
        let killed = std::process::Command::new("kill")
            .args(["-KILL", &proxies[0].to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        // Noticed at once: reaped (no zombie) within a second, before the sandbox acts.
        let until = Instant::now() + Duration::from_secs(2);
        while Path::new(&format!("/proc/{}", proxies[0])).exists() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            !Path::new(&format!("/proc/{}", proxies[0])).exists(),
            "the dead proxy was not reaped"
        );
        fx.write(&fx.proj.join("go"), "");
        let mut rest = String::new();
        stdout.read_to_string(&mut rest).unwrap();
        let mut err = String::new();
        run.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        let status = run.wait().unwrap();
        assert!(status.success(), "{rest} {err}");
        assert!(rest.starts_with("err ECONNREFUSED"), "{rest}");
        let ms: u64 = rest
            .split("ms=")
            .nth(1)
            .and_then(|m| m.trim().parse().ok())
            .unwrap_or_else(|| panic!("{rest}"));
        assert!(ms < 1000, "a connection took {ms} ms to fail");
        assert_eq!(
        err,
        "error: the proxy of zone 'agent' died (killed by signal 9); connections from its sandbox now fail; start the run again to get its network back\n"
    );
        let log = only_log(&fx);
        let died = events(&log, "proxy.died");
        assert_eq!(died.len(), 1, "{log}");
        assert_eq!(died[0]["zone"], "agent", "{log}");
        assert_eq!(died[0]["signal"], 9, "{log}");
        assert!(died[0]["exit_status"].is_null(), "{log}");
    }
);

both!(
    a_run_ended_by_sigterm_during_an_approval_leaves_no_plugin,
    |fx| {
        let notes = approval_config(
        &fx,
        None,
        "echo $$ > $notes/pid.tmp; mv $notes/pid.tmp $notes/pid\nsleep 1000 &\nexec sleep 1000\n",
    );
        let run = wardcell_tests::Watched::spawn(
            &fx,
            fx.cmd(&[
                "run",
                "--",
                "/bin/sh",
                "-c",
                "wardcell zone enter push -- true; echo entered=$?",
            ]),
            "run",
        );
        let pid = notes.join("pid");
        wardcell_tests::wait_until(20, "the plugin to start", || pid.exists());
        let term = std::process::Command::new("kill")
            .args(["-TERM", &run.child.id().to_string()])
            .status()
            .unwrap();
        assert!(term.success());
        let (out, _) = run.finish(30);
        assert_eq!(out.code, 143, "{out:?}");
        assert!(!out.stdout.contains("entered="), "{out:?}");
        // Nothing of the plugin is left, and the attempt is audited before the run's end.
        assert_group_gone(group_in(&pid));
        let log = only_log(&fx);
        let decisions = events(&log, "audit.decision");
        assert_eq!(decisions.len(), 1, "{log}");
        assert_eq!(decisions[0]["decision"], "denied", "{log}");
        // SIGTERM reaches the caller too: whichever ended the wait first is the reason.
        let reason = decisions[0]["reason"].as_str().unwrap();
        assert!(
            reason.contains("the run ended before the approval plugin answered")
                || reason.contains("the caller went away before the approval plugin answered"),
            "{log}"
        );
        let finished = log.find("run.finished").unwrap();
        assert!(log.find("audit.decision").unwrap() < finished, "{log}");
    }
);

/// The broker's children (of any of its threads) whose name is `comm`.
fn children_named(broker: u32, comm: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for task in fs::read_dir(format!("/proc/{broker}/task"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let children = fs::read_to_string(task.path().join("children")).unwrap_or_default();
        for pid in children.split_whitespace() {
            let name = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if name.trim() == comm {
                found.push(pid.parse().unwrap());
            }
        }
    }
    found
}

both!(
    an_entry_with_network_leaves_no_proxy_or_shim_when_its_caller_dies_or_time_ends,
    |fx| {
        fx.config(&format!(
            r#"
[zones.agent]
profile = "dev"
default = true

[zones.net]
profile = "net"
enter_from = ["agent"]

[zones.short]
profile = "short"
enter_from = ["agent"]

[profiles.dev]
extends = "readonly"
read = ["{bin}"]

[profiles.net]
extends = "dev"
network = {{ allow = ["example.com:80"] }}

[profiles.short]
extends = "net"
limits = {{ time = "1s" }}
"#,
            bin = fx.bin.display(),
        ));
        // An entry killed with its caller, then one ended by its time limit; the run goes
        // on until `go`, so that only the entries' own ends can have ended their proxies.
        let go = fx.proj.join("go");
        let script = format!(
            "wardcell zone enter net -- sleep 60 & p=$!\n\
             while [ ! -e {h}/killed ]; do sleep 0.05; done\n\
             wardcell zone enter short -- sleep 60; echo short=$?\n\
             while [ ! -e {go} ]; do sleep 0.05; done; exit 0",
            h = fx.proj.display(),
            go = go.display()
        );
        let mut run = wardcell_tests::Watched::spawn(
            &fx,
            fx.cmd(&["run", "--", "/bin/sh", "-c", &script]),
            "run",
        );
        let broker = wardcell_tests::broker_of(run.child.id());
        wardcell_tests::wait_until(20, "the entry's proxy", || {
            children_named(broker, "wardcell-proxy").len() == 1
        });
        let caller = run.tree.wait_for("wardcell", 1).into_iter().next().unwrap();
        let killed = std::process::Command::new("kill")
            .args(["-KILL", &caller.pid.to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        wardcell_tests::wait_until(10, "the killed caller's entry and proxy to end", || {
            children_named(broker, "wardcell-proxy").is_empty()
                && children_named(broker, "wardcell-shim").len() == 1
        });
        fx.write(&fx.proj.join("killed"), "");
        // The timed entry: up, then ended by its limit, with its proxy.
        let out = fx.dir.join("run.out");
        wardcell_tests::wait_until(20, "the timed entry to end", || {
            fs::read_to_string(&out)
                .unwrap_or_default()
                .contains("short=")
        });
        wardcell_tests::wait_until(10, "the timed entry's proxy to end", || {
            children_named(broker, "wardcell-proxy").is_empty()
                && children_named(broker, "wardcell-shim").len() == 1
        });
        fx.write(&go, "");
        let (out, _) = run.finish(30);
        out.ok();
        assert!(out.stdout.contains("short=124"), "{out:?}");
    }
);

both!(
    a_caller_that_speaks_while_the_plugin_decides_is_refused,
    |fx| {
        let notes = approval_config(
        &fx,
        None,
        "echo $$ > $notes/pid.tmp; mv $notes/pid.tmp $notes/pid\nsleep 1000 &\nexec sleep 1000\n",
    );
        // PROTOCOL 6.3, deciding: a frame sent (the caller staying connected) while the plugin
        // decides ends the decision as if the caller had gone: refused, the plugin's group
        // killed, the denial audited; nothing starts.
        let probe = fx.bin.join("wardcell-probe");
        let out = fx.sh(&format!(
            "{p} enter-then-speak \"$WARDCELL_ZONE_SOCKET\" early; echo rc=$?",
            p = probe.display()
        ));
        out.ok();
        assert!(
            out.stdout
                .contains("the caller went away before the approval plugin answered"),
            "{out:?}"
        );
        // It may be ended before it wrote its pid.
        if notes.join("pid").exists() {
            assert_group_gone(group_in(&notes.join("pid")));
        }
        let log = only_log(&fx);
        let decisions = events(&log, "audit.decision");
        assert_eq!(decisions.len(), 1, "{log}");
        assert_eq!(decisions[0]["decision"], "denied", "{log}");
        assert!(events(&log, "audit.completed").is_empty(), "{log}");
    }
);

both!(
    the_audit_writer_outlives_a_signal_to_the_brokers_group_and_ends_with_the_run,
    |fx| {
        fx.test_config("");
        let run = wardcell_tests::Watched::spawn(
            &fx,
            fx.cmd(&["run", "--", "/bin/sh", "-c", "echo ready; exec sleep 30"]),
            "run",
        );
        let out = fx.dir.join("run.out");
        wardcell_tests::wait_until(20, "the command to start", || {
            fs::read_to_string(&out)
                .unwrap_or_default()
                .contains("ready")
        });
        // The run's log is written by a process of its own (the run's helper), in the
        // broker's group (the broker leads its session; the sandboxes have their own).
        let broker = wardcell_tests::broker_of(run.child.id());
        let writers = children_named(broker, "wardcell-helper");
        assert_eq!(writers.len(), 1, "{writers:?}");
        let group = std::process::Command::new("kill")
            .args(["-TERM", "--", &format!("-{broker}")])
            .status()
            .unwrap();
        assert!(group.success());
        let (out, tree) = run.finish(30);
        assert_eq!(out.code, 143, "{out:?}");
        // The writer took the run's end, then ended with it.
        tree.assert_all_gone();
        let log = only_log(&fx);
        let finished = events(&log, "run.finished");
        assert_eq!(finished.len(), 1, "{log}");
        assert_eq!(finished[0]["exit_status"], 143, "{log}");
        fx.run(&["logs", "verify", "latest"]).ok();
    }
);
