//! The smaller findings of the fourth attack round (issue 35, items 5 and 6), each tried
//! as it was seen. Real sandboxes, as the invoking user and as the unprivileged uid.

use wardcell_tests::{both, Out};

both!(a_missing_home_is_said_and_never_created, |fx| {
    let home = fx.dir.join("no-such-home");
    let out: Out = fx
        .cmd(&["run", "--", "/bin/true"])
        .env("HOME", &home)
        .output()
        .unwrap()
        .into();
    out.expect_code(1);
    assert_eq!(
        out.stderr,
        format!("error: your home directory {} does not exist, and wardcell does not create it: create it, or set HOME to one that exists\n", home.display()),
        "{out:#?}"
    );
    assert!(!home.exists(), "the home was made: {out:#?}");
    // What needs nothing of it still works (completions run with a HOME that is not there).
    let out: Out = fx
        .cmd(&["policy", "show"])
        .env("HOME", &home)
        .output()
        .unwrap()
        .into();
    out.ok();
    assert!(!home.exists(), "the home was made: {out:#?}");
});

both!(secret_shaped_variables_stay_outside, |fx| {
    let mut cmd = fx.cmd(&["run", "--", "/usr/bin/env"]);
    for (k, v) in [
        ("PRIVATE_KEY", "pk"),
        ("STRIPE_KEY", "sk"),
        ("SENTRY_DSN", "https://k@sentry"),
        ("SLACK_WEBHOOK_URL", "https://hooks"),
        ("DEPLOY_WEBHOOK", "https://hook"),
        ("KEYBOARD", "kept"),
    ] {
        cmd.env(k, v);
    }
    let out: Out = cmd.output().unwrap().into();
    out.ok();
    for gone in ["PRIVATE_KEY=", "STRIPE_KEY=", "SENTRY_DSN=", "WEBHOOK"] {
        assert!(!out.stdout.contains(gone), "{gone}: {out:#?}");
    }
    assert!(out.stdout.contains("KEYBOARD=kept\n"), "{out:#?}");
});

/// Zones `agent` (writes the project) and `appr` (asks a plugin outside the project that
/// keeps each request it gets in `outside/requests` and approves).
fn entry_config(fx: &wardcell_tests::Fixture) {
    let plugin = fx.outside.join("approve.sh");
    let requests = fx.outside.join("requests");
    fx.write(
        &plugin,
        &format!(
            "#!/bin/sh\nhead -n 1 >> {}\necho '{{\"approved\": true}}'\n",
            requests.display()
        ),
    );
    std::fs::set_permissions(&plugin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    fx.config(&format!(
        "[zones.agent]\nprofile = \"dev\"\ndefault = true\n\n[zones.appr]\nprofile = \"dev\"\nenter_from = [\"agent\"]\nrequires_approval = true\n\n[approval]\nplugin = [\"{}\"]\n\n[profiles.dev]\nextends = \"developer-readonly\"\nread = [\"{}\"]\n",
        plugin.display(),
        fx.bin.display()
    ));
}

// What the approver approves is what runs: the caller's PATH, loader and shell variables
// stay behind; the request and the audit show the executable found with the run's PATH,
// and what the caller's environment changed.
both!(an_entry_runs_what_was_approved_with_the_runs_path, |fx| {
    entry_config(&fx);
    let evil = fx.proj.join("evilbin");
    let marker = fx.outside.join("evil-ran");
    fx.write(
        &evil.join("env"),
        &format!("#!/bin/sh\ntouch {}\n", marker.display()),
    );
    std::fs::set_permissions(
        evil.join("env"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let script = format!(
        "PATH={}:$PATH LD_PRELOAD=/nonexistent.so BASH_ENV=/x GIT_SSH_COMMAND=evil wardcell zone enter appr -- env",
        evil.display()
    );
    let out = fx.sh(&script);
    out.ok();
    assert!(!marker.exists(), "the caller's own env ran: {out:#?}");
    for gone in ["LD_PRELOAD=", "BASH_ENV=", "GIT_SSH_COMMAND=", "evilbin"] {
        assert!(!out.stdout.contains(gone), "{gone}: {out:#?}");
    }
    let requests = std::fs::read_to_string(fx.outside.join("requests")).unwrap();
    let request: serde_json::Value =
        serde_json::from_str(requests.lines().next().unwrap()).unwrap();
    let exe = request["executable"].as_str().unwrap_or_default();
    assert!(
        exe.ends_with("/env") && !exe.contains("evilbin"),
        "{request}"
    );
    assert_eq!(
        request["executable_writable_by"],
        serde_json::json!([]),
        "{request}"
    );
    let changes = request["env_changes"].to_string();
    for name in ["PATH", "LD_PRELOAD", "BASH_ENV", "GIT_SSH_COMMAND"] {
        assert!(changes.contains(name), "{name}: {request}");
    }
});

// Only what a command may be given is its stdio: a namespace's descriptor is refused.
both!(a_namespace_descriptor_is_no_stdio, |fx| {
    entry_config(&fx);
    let out = fx.sh("wardcell zone enter appr -- /bin/true < /proc/self/ns/net; echo rc=$?");
    assert!(out.stdout.contains("rc=1\n"), "{out:#?}");
    assert!(
        out.stderr.contains("stdin is a kernel object, not a file: `wardcell zone enter` passes on only pipes, sockets, character devices and regular files"),
        "{out:#?}"
    );
    assert!(
        !fx.outside.join("requests").exists(),
        "the plugin was asked"
    );
});

// Git config read as git reads it (item 3): `[user][core] fsmonitor` and a section after
// a lone carriage return are found, and reported while the run goes on, not only at its
// end (the host runs git while the agent works): the audit has it within seconds, and
// zone entries are refused from then on.
both!(
    git_code_hidden_from_a_line_reader_is_reported_while_the_run_goes_on,
    |fx| {
        entry_config(&fx);
        let git = |args: &[&str]| {
            fx.host_git(&fx.proj, args).ok();
        };
        git(&["init", "-q"]);
        let script = "printf '[user][core] fsmonitor = touch one\\n[user]\\r[core] sshCommand = two\\n' > .git/config.worktree
touch written; while [ ! -e go ]; do sleep 0.05; done
wardcell zone enter appr -- /bin/true; echo enter=$?";
        let mut run = wardcell_tests::Watched::spawn(
            &fx,
            fx.cmd(&["run", "--", "/bin/sh", "-c", script]),
            "git",
        );
        wardcell_tests::wait_until(20, "the config to be written", || {
            fx.proj.join("written").exists()
        });
        let runs = fx.home.join(".local/state/wardcell/runs");
        let log = || {
            let entry = std::fs::read_dir(&runs).ok()?.next()?.ok()?;
            std::fs::read_to_string(entry.path()).ok()
        };
        wardcell_tests::wait_until(10, "sandbox.git_changed while the run goes on", || {
            log().is_some_and(|l| l.contains("sandbox.git_changed"))
        });
        assert!(run.child.try_wait().unwrap().is_none(), "the run ended");
        let text = log().unwrap();
        assert!(
            text.contains("core.fsmonitor") && text.contains("core.sshcommand"),
            "{text}"
        );
        fx.write(&fx.proj.join("go"), "");
        let (out, _) = run.finish(30);
        assert!(out.stdout.contains("enter=1\n"), "{out:#?}");
        assert!(out.stderr.contains("core.fsmonitor"), "{out:#?}");
    }
);

// `policy check` refuses what `run` refuses: a profile naming /proc, with the same words.
both!(policy_check_refuses_what_run_refuses, |fx| {
    fx.config(&format!(
        "[zones.agent]\nprofile = \"p\"\ndefault = true\n[profiles.p]\nextends = \"developer-readonly\"\nread = [\"{}\", \"/proc\"]\n",
        fx.bin.display()
    ));
    let check = fx.run(&["policy", "check"]);
    let run = fx.run(&["run", "--", "/bin/true"]);
    check.expect_code(1);
    run.expect_code(1);
    assert!(
        check
            .stderr
            .contains("names /proc, but every sandbox has a /proc of its own"),
        "{check:#?}"
    );
    assert_eq!(check.stderr, run.stderr, "{check:#?} {run:#?}");
});

// A best-effort limit this machine cannot enforce is not shown as applied. Unprivileged
// here, no cgroup takes a memory limit (cgroup v2 is not delegated; v1 is root's).
both!(
    a_best_effort_limit_not_enforced_is_not_shown_as_applied,
    |fx| {
        fx.config(&format!(
        "[zones.agent]\nprofile = \"p\"\ndefault = true\n[profiles.p]\nextends = \"developer-readonly\"\nread = [\"{}\"]\nlimits = {{ memory = \"1G\", best_effort = true }}\n",
        fx.bin.display()
    ));
        let out = fx.run(&["policy", "show"]);
        out.ok();
        let line = out
            .stdout
            .lines()
            .find(|l| l.contains("limits:"))
            .unwrap_or_default()
            .to_string();
        assert!(line.contains("memory 1G (best effort"), "{out:#?}");
        let doctor = fx.run(&["doctor"]);
        let enforced = doctor
            .stdout
            .lines()
            .any(|l| l.contains("limits.memory") && !l.contains("cannot be enforced"));
        assert_eq!(
            line.contains("not enforced on this machine"),
            !enforced,
            "{line}\n{}",
            doctor.stdout
        );
        // A run says so on stderr and in its log, once per limit; where it is enforced,
        // neither.
        let out = fx.run(&["run", "--", "/bin/true"]);
        out.ok();
        let warning = "warning: limits.memory = 1G of profile 'p' is best effort, and nothing on this machine enforces it: the sandbox runs without it (`wardcell doctor` says what would)\n";
        assert_eq!(out.stderr == warning, !enforced, "{out:#?}");
        let runs = fx.home.join(".local/state/wardcell/runs");
        // (Not `doctor`'s trial run's.)
        let log = std::fs::read_dir(&runs)
            .unwrap()
            .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
            .find(|l| l.contains("\"trial\":false"))
            .unwrap();
        let events: Vec<serde_json::Value> = log
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .filter(|e: &serde_json::Value| e["event"] == "sandbox.limit_unenforced")
            .collect();
        assert_eq!(events.len(), usize::from(!enforced), "{log}");
        if let Some(e) = events.first() {
            assert_eq!(
                (&e["limit"], &e["value"]),
                (&"memory".into(), &"1G".into()),
                "{e}"
            );
        }
    }
);

// When `wardcell run` returns, nothing of the run is left for its caller to reap: a
// caller that is a subreaper (CI runners, init systems) collected a shim a run before.
both!(nothing_of_a_run_is_left_for_a_subreaper, |fx| {
    fx.test_config("");
    let probe = fx.bin.join("wardcell-probe");
    let client = fx.bin.join("wardcell");
    for _ in 0..3 {
        let out = fx.run_binary(
            &probe,
            &[
                "subreaper",
                client.to_str().unwrap(),
                "run",
                "--",
                "/bin/true",
            ],
        );
        out.ok();
        assert_eq!(out.stdout, "status=0 orphans=0\n", "{out:#?}");
    }
});

// Item 4: eight processes connecting to the zone socket and closing, as fast as they can,
// cost the broker a bounded share of a CPU, and a real entry made meanwhile gets in.
both!(
    a_socket_flood_costs_the_broker_little_and_an_entry_still_gets_in,
    |fx| {
        entry_config(&fx);
        fx.config(&format!(
        "[zones.agent]\nprofile = \"dev\"\ndefault = true\n\n[zones.other]\nprofile = \"dev\"\nenter_from = [\"agent\"]\n\n[profiles.dev]\nextends = \"developer-readonly\"\nread = [\"{}\"]\n",
        fx.bin.display()
    ));
        let probe = fx.bin.join("wardcell-probe");
        let script = format!(
            "for i in 1 2 3 4 5 6 7 8; do {p} flood \"$WARDCELL_ZONE_SOCKET\" 4 > /dev/null & done
touch flooding; sleep 1; wardcell zone enter other -- /bin/echo got-in; echo enter=$?; wait",
            p = probe.display()
        );
        let run = wardcell_tests::Watched::spawn(
            &fx,
            fx.cmd(&["run", "--", "/bin/sh", "-c", &script]),
            "flood",
        );
        let broker = wardcell_tests::broker_of(run.child.id());
        wardcell_tests::wait_until(20, "the flood to start", || {
            fx.proj.join("flooding").exists()
        });
        let cpu = || {
            let stat = std::fs::read_to_string(format!("/proc/{broker}/stat")).unwrap_or_default();
            let fields: Vec<u64> = stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .skip(11)
                .take(2)
                .filter_map(|f| f.parse().ok())
                .collect();
            fields.iter().sum::<u64>()
        };
        let (before, t) = (cpu(), std::time::Instant::now());
        std::thread::sleep(std::time::Duration::from_secs(2));
        let used = (cpu() - before) as f64 / 100.0 / t.elapsed().as_secs_f64();
        let (out, _) = run.finish(60);
        assert!(out.stdout.contains("got-in\nenter=0\n"), "{out:#?}");
        assert!(
            used < 0.5,
            "the broker used {used:.2} of a CPU under the flood"
        );
    }
);

// Issue 35, item 3, and issue 37, item 3: the run's repository is watched where a bug
// cannot change what the broker does: `wardcell-shim --git-watch`, which confines itself
// (no new privileges, a seccomp allow list that opens files only to read, a bounded
// address space) before it looks at the repository, and answers each look with one
// typed frame.
both!(the_repository_is_watched_by_a_confined_process, |fx| {
    use std::io::Write;
    use wardcell_common::protocol::{read_frame, GitLook};
    fx.host_git(&fx.proj, &["init", "-q"]);
    let proj = fx.proj.to_str().unwrap();
    let mut child = fx
        .cmd_of(&fx.bin.join("wardcell-shim"), &["--git-watch", proj])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (mut ask, mut answers) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
    let first: GitLook = read_frame(&mut answers).unwrap();
    assert!(first.lines.is_empty(), "{first:?}");
    let text = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    assert!(
        text.contains("NoNewPrivs:\t1")
            && text.contains("Seccomp:\t2")
            && text.contains("CapEff:\t0000000000000000")
            && text.contains("CapPrm:\t0000000000000000"),
        "{text}"
    );
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", child.id())).unwrap();
    assert!(
        limits
            .lines()
            .any(|l| l.starts_with("Max address space") && l.contains("536870912")),
        "{limits}"
    );
    // 20,000 harmless keys and one that runs code, in a file git reads.
    let mut config = String::from("[core]\n\tfsmonitor = evil\n[user]\n");
    for i in 0..20_000 {
        config.push_str(&format!("\tname = v{i}\n"));
    }
    let file = fx.proj.join(".git/config.worktree");
    std::fs::write(&file, config).unwrap();
    fx.own(&file);
    ask.write_all(b"?").unwrap();
    let look: GitLook = read_frame(&mut answers).unwrap();
    assert_eq!(look.lines.len(), 1, "{look:?}");
    assert!(
        look.lines[0].contains("config.worktree") && look.lines[0].contains("core.fsmonitor"),
        "{look:?}"
    );
    // The file was read and still is: the watcher wrote nothing.
    assert!(std::fs::read_to_string(&file)
        .unwrap()
        .contains("fsmonitor = evil"));
    // Its input ended, it ends.
    drop(ask);
    assert!(child.wait().unwrap().success());
});

// A configuration the sandbox holds a lease on cannot be opened by the watcher meanwhile
// (an open that must not block fails): it is a file that could not be checked, which
// refuses the entry, never one without keys; and the run's last look comes once the
// sandbox is gone, so the key is reported at its end. Found by issue 37's review.
both!(
    a_leased_git_configuration_is_never_taken_for_a_harmless_one,
    |fx| {
        entry_config(&fx);
        fx.host_git(&fx.proj, &["init", "-q"]);
        let script = format!(
        "mkdir -p .git/modules/x && printf '[core]\\n\\tfsmonitor = evil\\n' > .git/modules/x/config
{} lease .git/modules/x/config 30 > lease.out &
while ! grep -q leased lease.out 2>/dev/null; do sleep 0.05; done
sleep 1.5; wardcell zone enter appr -- /bin/true; echo enter=$?",
        fx.bin.join("wardcell-probe").display()
    );
        let out: Out = fx
            .cmd(&["run", "--", "/bin/sh", "-c", &script])
            .output()
            .unwrap()
            .into();
        assert!(out.stdout.contains("enter=1\n"), "{out:#?}");
        assert!(
            out.stderr.contains("modules/x/config") && out.stderr.contains("core.fsmonitor"),
            "{out:#?}"
        );
    }
);

// A configuration built to make its parser's output explode (every entry repeats a long
// subsection: a megabyte in, hundreds of megabytes of entries) costs the broker nothing:
// its parser, alone, gives up, and the file is reported as one it could not check.
both!(
    a_git_configuration_that_explodes_its_parser_is_reported,
    |fx| {
        entry_config(&fx);
        fx.host_git(&fx.proj, &["init", "-q"]).ok();
        let script = "{ printf '[a \"%s\"]\\n' $(head -c 4000 /dev/zero | tr '\\0' b); yes k | head -n 400000; } > .git/config.worktree
wardcell zone enter appr -- /bin/true; echo enter=$?";
        let out: wardcell_tests::Out = fx
            .cmd(&["run", "--", "/bin/sh", "-c", script])
            .output()
            .unwrap()
            .into();
        assert!(out.stdout.contains("enter=1\n"), "{out:#?}");
        assert!(
            out.stderr.contains("config.worktree")
                && out.stderr.contains("too many entries to check"),
            "{out:#?}"
        );
    }
);

// The round's review: each connection that said nothing held one of the supervisor's
// four slots until its 5 s were up, so a hundred idle connections kept `zone list`
// waiting half a minute. Silent connections now wait without a slot (at most 64, the
// longest waiting closed to make room), and a caller that speaks is served at once.
both!(idle_connections_never_keep_a_caller_waiting, |fx| {
    entry_config(&fx);
    let probe = fx.bin.join("wardcell-probe");
    let script = format!(
        "{p} connect-hold \"$WARDCELL_ZONE_SOCKET\" 100 8000 | {{ read held; echo $held; \
         s=$(date +%s%N); wardcell zone list >/dev/null; echo list-rc=$?; \
         echo ms=$(( ($(date +%s%N) - s) / 1000000 )); cat >/dev/null; }}",
        p = probe.display()
    );
    let out: wardcell_tests::Out = fx
        .cmd(&["run", "--", "/bin/sh", "-c", &script])
        .output()
        .unwrap()
        .into();
    assert!(out.stdout.contains("held 100\nlist-rc=0\n"), "{out:#?}");
    let ms: u64 = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("ms=")?.parse().ok())
        .unwrap();
    // Before: 5 s for each four idle connections ahead of it (36 s measured).
    assert!(
        ms < 3000,
        "zone list took {ms} ms behind 100 idle connections"
    );
});
