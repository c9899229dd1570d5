//! Zones at run time: the supervisor, `zone list/current/enter`, and the audit log.
//! Real sandboxes, run as the invoking user and as an unprivileged uid.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use wardcell_tests::{both, Fixture, Out, Watched};

/// The spec's zones (agent, push, build, release) with every profile able to run the
/// staged binaries; `push` may also write `pushed/` in the project.
fn zones_config(fx: &Fixture, extra: &str) {
    let bin = fx.bin.display();
    fs::create_dir_all(fx.proj.join("pushed")).unwrap();
    fx.own(&fx.proj);
    fx.config(&format!(
        r#"
[zones.agent]
profile = "dev"
default = true

[zones.push]
profile = "pusher"
description = "Can push to the company's git remote"
authenticated = true
enter_from = ["agent"]

[zones.build]
profile = "dev"
enter_from = ["agent"]

[zones.release]
profile = "dev"
enter_from = ["build"]

[profiles.dev]
extends = "readonly"
read = ["{bin}"]

[profiles.pusher]
extends = "readonly"
read = ["{bin}"]
write = ["./pushed"]
{extra}"#
    ));
}

/// Run a shell script in the default zone, with the staged binaries on PATH.
fn inside(fx: &Fixture, script: &str) -> Out {
    fx.sh(script)
}

fn state_runs(fx: &Fixture) -> PathBuf {
    fx.home.join(".local/state/wardcell/runs")
}

/// The log written last, as text (run ids from the same second sort by chance).
fn last_log(fx: &Fixture) -> (String, String) {
    let mut logs: Vec<(std::time::SystemTime, String)> = fs::read_dir(state_runs(fx))
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            Some((
                e.metadata().ok()?.modified().ok()?,
                e.file_name().into_string().ok()?,
            ))
        })
        .collect();
    logs.sort();
    let name = logs.pop().expect("a log").1;
    let text = fs::read_to_string(state_runs(fx).join(&name)).unwrap();
    (name.trim_end_matches(".jsonl").to_string(), text)
}

/// Start `wardcell run` that prints its supervisor socket and sleeps; return the child
/// and the socket path. `rt` sets XDG_RUNTIME_DIR.
fn run_printing_socket(
    fx: &Fixture,
    rt: Option<&std::path::Path>,
) -> (std::process::Child, PathBuf) {
    let mut cmd = fx.cmd(&[
        "run",
        "--",
        "/bin/sh",
        "-c",
        "echo \"$WARDCELL_ZONE_SOCKET\"; exec sleep 30",
    ]);
    if let Some(rt) = rt {
        cmd.env("XDG_RUNTIME_DIR", rt);
    }
    let mut child = cmd.stdout(std::process::Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    use std::io::BufRead;
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let socket = PathBuf::from(line.trim());
    assert!(socket.to_string_lossy().ends_with(".sock"), "{line:?}");
    (child, socket)
}

both!(list_and_current_match_the_spec, |fx| {
    zones_config(&fx, "");
    let out = inside(
        &fx,
        "wardcell zone current; wardcell zone list; wardcell zone list --output json",
    );
    out.ok();
    assert_eq!(
        out.stdout,
        "agent\ncurrent zone: agent\n\nZONE   DESCRIPTION\nbuild  -\npush   Can push to the company's git remote\n{\"current\":\"agent\",\"zones\":[{\"name\":\"build\",\"description\":null},{\"name\":\"push\",\"description\":\"Can push to the company's git remote\"}]}\n"
    );
    // Listing is not logged.
    let (_, log) = last_log(&fx);
    assert!(!log.contains("audit.decision"), "{log}");
});

// Issue 20: started from a directory not on PATH (a build tree), `wardcell` was not
// found by name inside; the broker now puts the client's directory first on PATH, and
// `doctor` checks that the client runs inside by name.
both!(
    wardcell_is_found_by_name_inside_however_it_was_started,
    |fx| {
        zones_config(&fx, "");
        let out: Out = fx
            .cmd(&[
                "run",
                "--",
                "/bin/sh",
                "-c",
                "command -v wardcell; wardcell zone current",
            ])
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap()
            .into();
        out.ok();
        assert_eq!(
            out.stdout,
            format!("{}\nagent\n", fx.bin.join("wardcell").display()),
            "{out:#?}"
        );
        let out: Out = fx
            .cmd(&["doctor"])
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap()
            .into();
        out.ok();
        assert!(
            out.stdout.contains(&format!(
                "OK    client inside    {} runs inside every sandbox, as `wardcell`",
                fx.bin.join("wardcell").display()
            )),
            "{out:#?}"
        );
    }
);

// Issue 21: `run --read/--write/--deny` change the start zone's profile for this run
// only: entering another zone with the same profile gets none of them, a later run none,
// and `run.started` records them as given.
both!(run_flags_widen_and_narrow_the_start_zone_only, |fx| {
    zones_config(&fx, "");
    let out_dir = fx.outside.display().to_string();
    fx.write(&fx.outside.join("r/file"), "read me\n");
    fs::create_dir_all(fx.outside.join("w")).unwrap();
    fx.own(&fx.outside);
    fx.write(&fx.proj.join("secret.txt"), "s3cret\n");
    let script = format!(
        "echo hi > {out_dir}/w/f && echo wrote; cat {out_dir}/r/file; cat secret.txt 2>/dev/null || echo denied; \
         wardcell zone enter build -- sh -c 'echo x > {out_dir}/w/g 2>/dev/null && echo build-wrote || echo build-refused; cat secret.txt'"
    );
    let (w, r) = (format!("{out_dir}/w"), format!("{out_dir}/r"));
    let flags = [
        "run",
        "--write",
        &w,
        "--read",
        &r,
        "--deny",
        "secret.txt",
        "--",
        "/bin/sh",
        "-c",
    ];
    let mut args: Vec<&str> = flags.to_vec();
    args.push(&script);
    let out = fx.run(&args);
    out.ok();
    assert_eq!(
        out.stdout, "wrote\nread me\ndenied\nbuild-refused\ns3cret\n",
        "{out:#?}"
    );
    let (_, log) = last_log(&fx);
    let started = log.lines().find(|l| l.contains("\"run.started\"")).unwrap();
    assert!(
        started.contains(&format!(
            "\"overrides\":{{\"allow\":[],\"deny\":[\"secret.txt\"],\"internal\":[],\"read\":[\"{r}\"],\"write\":[\"{w}\"]}}"
        )),
        "{started}"
    );
    // The next run, without the flags, has none of it.
    let out = fx.sh(&format!(
        "echo hi > {out_dir}/w/h || echo refused; cat secret.txt"
    ));
    assert_eq!(out.stdout, "refused\ns3cret\n", "{out:#?}");
    // A path that does not exist is an error, not left out; nothing runs.
    let out = fx.run(&["run", "--write", "no-such-dir", "--", "true"]);
    out.expect_code(1);
    assert_eq!(
        out.stderr, "error: --write ./no-such-dir: does not exist\n",
        "{out:#?}"
    );
});

both!(a_zone_admitting_itself_is_marked_current, |fx| {
    fx.config(&format!(
        "[zones.agent]\nprofile = \"p\"\ndefault = true\nenter_from = [\"agent\"]\n[profiles.p]\nextends = \"readonly\"\nread = [\"{}\"]\n",
        fx.bin.display()
    ));
    let out = inside(&fx, "wardcell zone list");
    assert!(out.stdout.contains("agent (current)  -"), "{out:?}");
});

both!(enter_runs_in_a_new_sandbox_under_the_target_profile, |fx| {
    zones_config(&fx, "");
    let out = inside(
        &fx,
        "echo direct > pushed/direct 2>/dev/null; echo direct-rc=$?; \
         wardcell zone enter push -- sh -c 'echo in $WARDCELL_ZONE; echo ok > pushed/via-push; exit 5'; echo enter-rc=$?",
    );
    assert!(
        out.stdout.contains("direct-rc=1") || out.stdout.contains("direct-rc=2"),
        "{out:?}"
    );
    assert!(out.stdout.contains("in push\n"), "{out:?}");
    assert!(out.stdout.contains("enter-rc=5"), "{out:?}");
    assert!(!fx.proj.join("pushed/direct").exists());
    assert_eq!(
        fs::read_to_string(fx.proj.join("pushed/via-push")).unwrap(),
        "ok\n"
    );
    // The decision and the completion are audited, with the chain.
    let (_, log) = last_log(&fx);
    assert!(log.contains(r#""decision":"allowed""#), "{log}");
    assert!(
        log.contains(r#""event":"audit.completed""#) && log.contains(r#""exit_status":5"#),
        "{log}"
    );
    assert!(log.contains(r#""chain":["agent","push"]"#), "{log}");
    // Both sandboxes' confinement is on record, the entered one with its zone.
    assert_eq!(
        log.matches(r#""event":"sandbox.confined""#).count(),
        2,
        "{log}"
    );
    assert!(log.contains(r#""zone":"push""#), "{log}");
});

both!(stdin_is_piped_through_and_exec_failures_relayed, |fx| {
    zones_config(&fx, "");
    let out = inside(&fx, "printf 'through the socket' | wardcell zone enter push -- cat; echo; wardcell zone enter push -- no-such-cmd; echo rc=$?");
    assert!(out.stdout.starts_with("through the socket\n"), "{out:?}");
    assert!(out.stdout.contains("rc=127"), "{out:?}");
    assert!(
        out.stderr
            .contains("error: `no-such-cmd`: command not found"),
        "{out:?}"
    );
});

both!(the_chain_is_checked_as_the_spec_says, |fx| {
    zones_config(&fx, "");
    // agent -> build may not enter release.
    let out = inside(
        &fx,
        "wardcell zone enter build -- wardcell zone enter release -- true; echo rc=$?",
    );
    assert!(out.stdout.contains("rc=1"), "{out:?}");
    assert!(
        out.stderr.contains("error: this zone may not enter zone 'release'; `wardcell zone list` shows the zones it may\n"),
        "{out:?}"
    );
    // A run started in build may.
    let out = fx.run(&[
        "run",
        "--zone",
        "build",
        "--",
        "/bin/sh",
        "-c",
        "wardcell zone enter release -- sh -c 'echo in $WARDCELL_ZONE'",
    ]);
    out.ok();
    assert_eq!(out.stdout, "in release\n");
    // An unknown zone gets the very same refusal.
    let out = inside(
        &fx,
        "wardcell zone enter nope -- true; wardcell zone enter release -- true",
    );
    assert!(
        out.stderr
            .contains("may not enter zone 'nope'; `wardcell zone list` shows the zones it may"),
        "{out:?}"
    );
    let (_, log) = last_log(&fx);
    assert_eq!(log.matches(r#""decision":"denied""#).count(), 2, "{log}");
});

both!(the_chain_is_at_most_8_deep, |fx| {
    fx.config(&format!(
        "[zones.agent]\nprofile = \"p\"\ndefault = true\n[zones.any]\nprofile = \"p\"\nenter_from = [\"*\"]\n[profiles.p]\nextends = \"readonly\"\nread = [\"{}\"]\n",
        fx.bin.display()
    ));
    // Each level enters `any` again and prints its depth.
    fx.write(
        &fx.proj.join("deeper.sh"),
        "#!/bin/sh\necho depth $1\nexec wardcell zone enter any -- /bin/sh ./deeper.sh $(($1 + 1))\n",
    );
    let out = inside(&fx, "/bin/sh ./deeper.sh 1");
    assert!(out.stdout.contains("depth 8\n"), "{out:?}");
    assert!(!out.stdout.contains("depth 9"), "{out:?}");
    assert!(
        out.stderr
            .contains("a chain of entered zones is at most 8 deep"),
        "{out:?}"
    );
});

both!(
    a_second_concurrent_enter_is_refused_while_list_still_works,
    |fx| {
        zones_config(&fx, "");
        // The first entry runs until it reads a line, which comes once the second has
        // been refused (fd 3 keeps the script's stdout; the pipe is the first's stdin).
        let out = inside(
            &fx,
            "exec 3>&1; { while [ ! -e pushed/started ]; do sleep 0.02; done; \
         wardcell zone enter push -- true >&3; echo second-rc=$? >&3; \
         wardcell zone list >/dev/null; echo list-rc=$? >&3; echo done; } \
         | wardcell zone enter push -- sh -c 'touch pushed/started; read x'",
        );
        assert!(out.stdout.contains("second-rc=1"), "{out:?}");
        assert!(out.stdout.contains("list-rc=0"), "{out:?}");
        assert!(
            out.stderr
                .contains("already running a `wardcell zone enter`"),
            "{out:?}"
        );
    }
);

both!(the_caller_going_away_ends_the_command, |fx| {
    zones_config(&fx, "");
    let probe = fx.bin.join("wardcell-probe");
    // The run goes on (until `go`) once the caller is killed: its end must not be what
    // ends the entered command.
    let run = Watched::spawn(
        &fx,
        fx.cmd(&[
            "run",
            "--",
            "/bin/sh",
            "-c",
            &format!(
                "wardcell zone enter push -- {} heartbeat pushed/beat & pid=$!; \
                 while [ ! -e pushed/beat ]; do sleep 0.02; done; kill -9 $pid; \
                 while [ ! -e go ]; do sleep 0.02; done; echo killed",
                probe.display()
            ),
        ]),
        "caller",
    );
    let beat = fx.proj.join("pushed/beat");
    wardcell_tests::wait_until(10, "the heartbeat to start", || beat.exists());
    wardcell_tests::assert_heartbeat_stopped(&beat, "the entered command outlived its caller");
    fx.write(&fx.proj.join("go"), "");
    let (out, _) = run.finish(30);
    assert!(out.stdout.contains("killed"), "{out:?}");
    let (_, log) = last_log(&fx);
    assert!(log.contains("the caller went away"), "{log}");
});

both!(
    a_silent_client_is_closed_at_5_seconds_and_a_fifth_is_refused,
    |fx| {
        zones_config(&fx, "");
        let probe = fx.bin.join("wardcell-probe");
        // A connection that says nothing is closed at 5 s; four that started a request
        // and stalled fill the supervisor, and a fifth that speaks is told why.
        let out = inside(
        &fx,
        &format!(
            "{p} connect-silent \"$WARDCELL_ZONE_SOCKET\" | {{ read connected; for i in 1 2 3 4; do {p} connect-stall \"$WARDCELL_ZONE_SOCKET\" & done | {{ for i in 1 2 3 4; do read connected; done; sleep 0.2; wardcell zone list; cat >/dev/null; }}; cat; }}",
            p = probe.display()
        ),
    );
        let ms: u64 = out
            .stdout
            .lines()
            .find_map(|l| {
                l.strip_prefix("closed after ")?
                    .strip_suffix(" ms")?
                    .parse()
                    .ok()
            })
            .unwrap_or_else(|| panic!("{out:?}"));
        assert!((4500..9000).contains(&ms), "closed after {ms} ms");
        // Its reason reads as one, not as errno text.
        let (_, log) = last_log(&fx);
        assert!(
            log.contains(r#""reason":"the connection sent no request within 5 s""#),
            "{log}"
        );
        // 4 stalled requests fill the supervisor: the fifth is told why.
        assert!(
            out.stderr.contains("already serves 4 connections"),
            "{out:?}"
        );
        // Oversized and malformed frames close only their own connection.
        let out = inside(&fx, "printf '\\377\\377\\377\\377garbage' | (exec 3<>\"$WARDCELL_ZONE_SOCKET\") 2>/dev/null; wardcell zone list >/dev/null; echo rc=$?");
        assert!(out.stdout.contains("rc=0"), "{out:?}");
    }
);

both!(a_host_process_with_forged_variables_is_refused, |fx| {
    zones_config(&fx, "");
    let (mut run, socket) = run_printing_socket(&fx, None);
    let socket = socket.to_string_lossy().into_owned();
    let marker = fx.proj.join("forged-ran");
    let out: Out = fx
        .cmd(&[
            "zone",
            "enter",
            "push",
            "--",
            "/bin/sh",
            "-c",
            &format!("touch {}", marker.display()),
        ])
        .env("WARDCELL_SANDBOX", "1")
        .env("WARDCELL_ZONE", "agent")
        .env("WARDCELL_ZONE_SOCKET", &socket)
        .output()
        .unwrap()
        .into();
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.starts_with("error: "), "{out:?}");
    assert!(!marker.exists(), "a host process entered a zone");
    // zone list is refused the same way.
    let out: Out = fx
        .cmd(&["zone", "list"])
        .env("WARDCELL_SANDBOX", "1")
        .env("WARDCELL_ZONE", "agent")
        .env("WARDCELL_ZONE_SOCKET", &socket)
        .output()
        .unwrap()
        .into();
    assert_eq!(out.code, 1, "{out:?}");
    assert!(!out.stdout.contains("push"), "{out:?}");
    run.kill().unwrap();
    run.wait().unwrap();
    let (_, log) = last_log(&fx);
    assert!(log.contains("audit.peer_refused"), "{log}");
    assert!(
        log.contains("not in this sandbox's network namespace"),
        "{log}"
    );
});

both!(another_runs_sandbox_is_refused, |fx| {
    zones_config(&fx, "");
    // Run A keeps its sockets where run B's profile can reach them (a short path: Unix
    // socket paths are at most 107 bytes).
    let rt_a = PathBuf::from(format!("/var/tmp/wcrt-{}-{}", std::process::id(), fx.uid()));
    let _ = fs::remove_dir_all(&rt_a);
    fs::create_dir_all(&rt_a).unwrap();
    fx.own(&rt_a);
    let cfg = fx.home.join(".config/wardcell/zones.toml");
    let text = fs::read_to_string(&cfg).unwrap().replacen(
        &format!("read = [\"{}\"]", fx.bin.display()),
        &format!("read = [\"{}\", \"{}\"]", fx.bin.display(), rt_a.display()),
        1,
    );
    fx.write(&cfg, &text);
    let (mut a, socket) = run_printing_socket(&fx, Some(&rt_a));
    let socket = socket.to_string_lossy().into_owned();
    assert!(socket.starts_with(rt_a.to_str().unwrap()), "{socket}");
    let marker = fx.proj.join("cross-run");
    let out = fx.sh(&format!(
        "WARDCELL_ZONE_SOCKET={socket} wardcell zone enter push -- touch {}; echo rc=$?",
        marker.display()
    ));
    assert!(out.stdout.contains("rc=1"), "{out:?}");
    assert!(!marker.exists());
    assert!(out.stderr.starts_with("error: "), "{out:?}");
    a.kill().unwrap();
    a.wait().unwrap();
    // Run A's log records the refusal: the caller is not in A's sandbox.
    let run_a = socket.rsplit('/').nth(1).unwrap().to_string();
    let log = fs::read_to_string(state_runs(&fx).join(format!("{run_a}.jsonl"))).unwrap();
    assert!(log.contains("audit.peer_refused"), "{log}");
    let _ = fs::remove_dir_all(&rt_a);
});

both!(
    a_socket_path_too_long_for_a_unix_socket_is_refused_in_one_line,
    |fx| {
        zones_config(&fx, "");
        // <this>/wardcell/<run id>/s1.sock: well over the 107 bytes sockaddr_un holds.
        let rt = PathBuf::from(format!(
            "/var/tmp/wcrt-long-{}-{}-{}",
            std::process::id(),
            fx.uid(),
            "x".repeat(80)
        ));
        let _ = fs::remove_dir_all(&rt);
        fs::create_dir_all(&rt).unwrap();
        fx.own(&rt);
        let out: Out = fx
            .cmd(&["run", "--", "/bin/true"])
            .env("XDG_RUNTIME_DIR", &rt)
            .output()
            .unwrap()
            .into();
        let _ = fs::remove_dir_all(&rt);
        assert_eq!(out.code, 1, "{out:?}");
        assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
        assert!(
        out.stderr.starts_with("error: ")
            && out
                .stderr
                .contains("is longer than the 107 bytes a Unix socket path may have; set XDG_RUNTIME_DIR to a shorter directory"),
        "{out:?}"
    );
    }
);

both!(approval_plugin_decides_and_is_audited, |fx| {
    let plugin = fx.dir.join("approve.sh");
    fx.write(
        &plugin,
        "#!/bin/sh\nread req\ncase \"$req\" in\n  *'\"target\":\"push\"'*) echo '{\"approved\": true, \"reason\": \"ok\", \"approver\": \"ana\", \"reference\": \"CHG-7\"}';;\n  *) echo '{\"approved\": false, \"reason\": \"not during the release freeze\"}';;\nesac\n",
    );
    fs::set_permissions(&plugin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    zones_config(
        &fx,
        &format!("\n[approval]\nplugin = [\"{}\"]\n", plugin.display()),
    );
    // Make push and build require approval.
    let cfg = fx.home.join(".config/wardcell/zones.toml");
    let text = fs::read_to_string(&cfg).unwrap().replace(
        "enter_from = [\"agent\"]\n",
        "enter_from = [\"agent\"]\nrequires_approval = true\napproval_timeout = \"10s\"\n",
    );
    fx.write(&cfg, &text);
    let out = inside(&fx, "wardcell zone enter push -- true; echo push-rc=$?; wardcell zone enter build -- true; echo build-rc=$?");
    assert!(out.stdout.contains("push-rc=0"), "{out:?}");
    assert!(out.stdout.contains("build-rc=1"), "{out:?}");
    assert!(
        out.stderr.contains(
            "error: entering zone 'build' was not approved: not during the release freeze\n"
        ),
        "{out:?}"
    );
    let (_, log) = last_log(&fx);
    assert!(
        log.contains(r#""approver":"ana""#) && log.contains(r#""reference":"CHG-7""#),
        "{log}"
    );
});

both!(
    an_unwritable_audit_log_refuses_the_entry_and_ends_the_run,
    |fx| {
        zones_config(&fx, "");
        let mut run = fx
        .cmd(&[
            "run",
            "--",
            "/bin/sh",
            "-c",
            // (`sleep 10`: the time the run would go on unaudited; it must end first.)
            "echo started; while [ ! -e go ]; do sleep 0.02; done; wardcell zone enter push -- touch pushed/entered; echo rc=$?; sleep 10; echo went-on",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
        let mut stdout = run.stdout.take().unwrap();
        let mut first = [0u8; 8];
        use std::io::Read;
        stdout.read_exact(&mut first).unwrap();
        // Break the log: the file becomes a directory, which nobody can append to. Once
        // the sandbox's confinement is written: that event may come after the command has
        // started, and written between the two steps below it would find no log at all.
        let runs = state_runs(&fx);
        let log = fs::read_dir(&runs).unwrap().next().unwrap().unwrap().path();
        wardcell_tests::wait_until(20, "sandbox.confined in the log", || {
            fs::read_to_string(&log).is_ok_and(|t| t.contains("\"sandbox.confined\""))
        });
        fs::remove_file(&log).unwrap();
        fs::create_dir(&log).unwrap();
        fx.write(&fx.proj.join("go"), "");
        let mut rest = String::new();
        stdout.read_to_string(&mut rest).unwrap();
        let mut err = String::new();
        run.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        let status = run.wait().unwrap();
        // The entry is refused, and the run ends rather than go on unaudited.
        assert!(
            !rest.contains("went-on"),
            "the run went on unaudited: {rest} {err}"
        );
        assert_eq!(status.code(), Some(1), "{rest} {err}");
        // The caller may say why its entry was refused before it is ended; the run's last
        // word is why it ended.
        let last = err.lines().last().unwrap_or_default();
        assert!(
            last.ends_with("; the run was ended rather than go on unaudited")
            // Worded by its cause (a directory in its place), not as a full disk.
            && last.contains("Is a directory")
            && !last.contains("make room")
            && last.starts_with("error: the run's audit log "),
            "{err}"
        );
        assert!(
            !fx.proj.join("pushed/entered").exists(),
            "the entry went ahead without its audit record"
        );
    }
);

both!(logs_show_and_a_tampered_log_is_caught, |fx| {
    zones_config(&fx, "");
    inside(&fx, "wardcell zone enter push -- sh -c 'exit 3'; true").ok();
    let (id, text) = last_log(&fx);
    let out = fx.run(&["logs", "verify", &id]);
    out.ok();
    assert!(
        out.stdout
            .contains("the chain is intact and the run finished"),
        "{out:?}"
    );
    let out = fx.run(&["logs", "show", &id, "--category", "audit"]);
    out.ok();
    assert!(
        out.stdout.contains("audit.decision") && out.stdout.contains("allowed agent -> push"),
        "{out:?}"
    );
    assert!(!out.stdout.contains("run.started"), "{out:?}");
    let listed = fx.run(&["logs", "list"]);
    assert!(listed.stdout.contains(&id), "{listed:?}");
    // Rewrite history: the entered command "exited 0".
    let path = state_runs(&fx).join(format!("{id}.jsonl"));
    fx.write(
        &path,
        &text.replace(r#""exit_status":3"#, r#""exit_status":0"#),
    );
    let out = fx.run(&["logs", "verify", &id]);
    out.expect_code(1);
    assert!(
        out.stderr.contains("tampered with or damaged at line"),
        "{out:?}"
    );
    // Remove a line.
    let lines: Vec<&str> = text.lines().collect();
    let without: String = lines
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 1)
        .map(|(_, l)| format!("{l}\n"))
        .collect();
    fx.write(&path, &without);
    fx.run(&["logs", "verify", &id]).expect_code(1);
    // Not a run id: refused before any path is built.
    fx.run(&["logs", "show", "../../../etc/passwd"])
        .expect_code(1);
});

both!(the_runs_socket_is_gone_after_the_run, |fx| {
    zones_config(&fx, "");
    let out = inside(&fx, "echo \"$WARDCELL_ZONE_SOCKET\"");
    out.ok();
    let socket = PathBuf::from(out.stdout.trim());
    assert!(!socket.exists(), "{} left behind", socket.display());
    assert!(
        !socket.parent().unwrap().exists(),
        "run directory left behind"
    );
});

both!(the_runs_socket_is_gone_after_a_signal_or_an_error, |fx| {
    zones_config(&fx, "");
    let rt = PathBuf::from(format!(
        "/var/tmp/wcrt-c-{}-{}",
        std::process::id(),
        fx.uid()
    ));
    let _ = fs::remove_dir_all(&rt);
    fs::create_dir_all(&rt).unwrap();
    fx.own(&rt);
    // Interrupted: SIGINT reaches the broker (as Ctrl-C would without a terminal).
    let (mut run, socket) = run_printing_socket(&fx, Some(&rt));
    assert!(socket.exists(), "{}", socket.display());
    // SAFETY: kill with a pid we own.
    unsafe { libc::kill(run.id() as i32, libc::SIGINT) };
    let status = run.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(130),
        "the command's own status, 128+SIGINT"
    );
    assert!(
        !socket.parent().unwrap().exists(),
        "run directory left behind after SIGINT"
    );

    // Failed: the command does not exist.
    let out: Out = fx
        .cmd(&["run", "--", "no-such-command"])
        .env("XDG_RUNTIME_DIR", &rt)
        .output()
        .unwrap()
        .into();
    out.expect_code(127);
    let runtime = rt.join("wardcell");
    let left: Vec<_> = fs::read_dir(&runtime).unwrap().collect();
    assert!(left.is_empty(), "run directories left behind: {left:?}");

    // Killed: SIGKILL to the broker leaves the directory; the next run sweeps it away.
    // (`wardcell run`, its terminal keeper, ends once it has reaped the broker.)
    let (mut run, socket) = run_printing_socket(&fx, Some(&rt));
    let killed_dir = socket.parent().unwrap().to_path_buf();
    let broker = wardcell_tests::broker_of(run.id());
    // SAFETY: kill with the pid of a process of this test's run.
    assert_eq!(unsafe { libc::kill(broker as i32, libc::SIGKILL) }, 0);
    run.wait().unwrap();
    assert!(killed_dir.exists());
    let out: Out = fx
        .cmd(&["run", "--", "true"])
        .env("XDG_RUNTIME_DIR", &rt)
        .output()
        .unwrap()
        .into();
    out.ok();
    assert!(!killed_dir.exists(), "a dead run's directory was not swept");
    let _ = fs::remove_dir_all(&rt);
});

// The sweep of dead runs works only in a runtime directory that is the caller's own and
// private: never through a link someone planted at its name, never in one someone else
// made (the review of the sweep's move into `wardcell run` deleted both ways). The run is
// refused, as before, and nothing there is touched.
both!(
    the_sweep_never_works_in_a_runtime_directory_not_our_own,
    |fx| {
        fx.test_config("");
        let base = PathBuf::from(format!(
            "/var/tmp/wcrt-s-{}-{}",
            std::process::id(),
            fx.uid()
        ));
        let _ = fs::remove_dir_all(&base);
        // What a planted link leads to: a dead run's name, with data in it, the caller's.
        let victim = base.join("victim");
        let data = victim.join("0123456789abcdef-01234567/deep/data");
        fs::create_dir_all(data.parent().unwrap()).unwrap();
        fs::write(&data, "keep").unwrap();
        let rt = base.join("rt");
        fs::create_dir_all(&rt).unwrap();
        std::os::unix::fs::symlink(&victim, rt.join("wardcell")).unwrap();
        fx.own(&base);
        fs::set_permissions(&victim, fs::Permissions::from_mode(0o700)).unwrap();
        let run = |rt: &Path| -> Out {
            fx.cmd(&["run", "--", "true"])
                .env("XDG_RUNTIME_DIR", rt)
                .output()
                .unwrap()
                .into()
        };
        let out = run(&rt);
        out.expect_code(1);
        assert!(out.stderr.contains("is not a directory you own"), "{out:?}");
        assert_eq!(fs::read_to_string(&data).unwrap(), "keep");
        // A runtime directory someone else made (root's for the user, another uid's for root).
        let other = if fx.uid() == 0 { 61234 } else { 0 };
        let theirs = base.join("theirs");
        let planted = theirs.join("wardcell/0123456789abcdef-01234568");
        fs::create_dir_all(&planted).unwrap();
        fs::set_permissions(theirs.join("wardcell"), fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(theirs.join("wardcell"), Some(other), Some(other)).unwrap();
        std::os::unix::fs::chown(&planted, Some(other), Some(other)).unwrap();
        fs::set_permissions(&theirs, fs::Permissions::from_mode(0o755)).unwrap();
        let out = run(&theirs);
        out.expect_code(1);
        assert!(
            planted.exists(),
            "a directory in someone else's runtime directory was swept"
        );
        let _ = fs::remove_dir_all(&base);
    }
);

both!(
    an_entry_running_when_the_run_ends_is_ended_and_audited,
    |fx| {
        zones_config(&fx, "");
        let probe = fx.bin.join("wardcell-probe");
        // The top-level command leaves an entered command running and ends.
        let out = inside(
        &fx,
        &format!(
            "wardcell zone enter push -- {} heartbeat pushed/beat & while [ ! -e pushed/beat ]; do sleep 0.02; done; exit 0",
            probe.display()
        ),
    );
        out.ok();
        let beat = fx.proj.join("pushed/beat");
        wardcell_tests::assert_heartbeat_stopped(&beat, "the entered command outlived the run");
        let (id, log) = last_log(&fx);
        // Ended by the run's end, or a moment before by its caller's (which died with it).
        let completed = log
            .lines()
            .position(|l| l.contains("\"audit.completed\""))
            .expect(&log);
        let finished = log
            .lines()
            .position(|l| l.contains("\"run.finished\""))
            .expect(&log);
        assert!(completed < finished, "{log}");
        assert!(log.contains("sandbox was ended"), "{log}");
        fx.run(&["logs", "verify", &id]).ok();
    }
);

both!(
    every_entry_allowed_as_the_run_ends_has_its_completion,
    |fx| {
        zones_config(&fx, "");
        // Entries asked for just as the top-level command ends, at varying moments (the
        // `sleep 0.00N` is that moment: what is tested is a race, not a wait): an
        // entry whose decision was written must have its completion written too, before
        // the run's end (the run's end waits for an entry from before its decision).
        for i in 0..25 {
            let out = inside(
                &fx,
                &format!(
                    "for n in 1 2 3; do wardcell zone enter build -- true & done; sleep 0.00{}; exit 0",
                    i % 10
                ),
            );
            out.ok();
            let (id, log) = last_log(&fx);
            let lines: Vec<&str> = log.lines().collect();
            let allowed = lines
                .iter()
                .filter(|l| l.contains("\"decision\":\"allowed\""))
                .count();
            let completed: Vec<usize> = (0..lines.len())
                .filter(|&n| lines[n].contains("\"audit.completed\""))
                .collect();
            assert_eq!(allowed, completed.len(), "round {i}:\n{log}");
            let finished = lines
                .iter()
                .position(|l| l.contains("\"run.finished\""))
                .expect(&log);
            assert!(completed.iter().all(|&c| c < finished), "round {i}:\n{log}");
            fx.run(&["logs", "verify", &id]).ok();
        }
    }
);

both!(back_to_back_entries_are_not_refused, |fx| {
    zones_config(&fx, "");
    // The "one at a time" flag is released before the caller hears the status.
    let out = inside(
        &fx,
        "n=0; for i in $(seq 40); do wardcell zone enter push -- true || n=$((n+1)); done; echo refused=$n",
    );
    out.ok();
    assert!(out.stdout.contains("refused=0"), "{out:?}");
});

/// The broker's open descriptors, by its pid (the client execs the broker in place).
fn open_fds(pid: u32) -> usize {
    fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count()
}

both!(surplus_descriptors_are_closed_and_refused, |fx| {
    zones_config(&fx, "");
    let probe = fx.bin.join("wardcell-probe");
    // 300 connections with 8 or 20 descriptors where 3 are expected: before the fix each
    // leaked 4 broker descriptors, and the supervisor ran out of them.
    let script = format!(
        "echo ready; read go; {p} enter-extra-fds \"$WARDCELL_ZONE_SOCKET\" 8 300; read go; \
         wardcell zone enter push -- echo entered; echo rc=$?",
        p = probe.display()
    );
    let mut run = fx
        .cmd(&["run", "--", "/bin/sh", "-c", &script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::{BufRead, Write};
    let mut input = run.stdin.take().unwrap();
    let mut lines = std::io::BufReader::new(run.stdout.take().unwrap()).lines();
    let mut next = || lines.next().unwrap().unwrap();
    assert_eq!(next(), "ready");
    let before = open_fds(run.id());
    input.write_all(b"go\n").unwrap();
    assert_eq!(next(), "sent 300");
    let after = open_fds(run.id());
    input.write_all(b"go\n").unwrap();
    let rest: Vec<String> = [next(), next()].into();
    let out: Out = run.wait_with_output().unwrap().into();
    assert!(
        after <= before + 1,
        "the broker holds {after} descriptors after the hostile connections, {before} before"
    );
    assert_eq!(rest, ["entered", "rc=0"], "{out:?}");
    let (_, log) = last_log(&fx);
    assert!(
        log.contains("expected 3 descriptors, 8 arrived"),
        "a surplus is audited with what came: {log}"
    );
    assert!(
        log.contains(
            "more than the 3 descriptors expected were sent (the control message was truncated)"
        ),
        "{log}"
    );
});

both!(a_closed_set_naming_other_descriptors_is_refused, |fx| {
    zones_config(&fx, "");
    let probe = fx.bin.join("wardcell-probe");
    // `closed` may name only fds 0 to 2 (issue 19, item 6): a hostile caller's other bits
    // end the connection before any descriptor is read.
    let out = fx.sh(&format!(
        "{p} enter-extra-fds \"$WARDCELL_ZONE_SOCKET\" 0 1 8; wardcell zone enter push -- echo entered",
        p = probe.display()
    ));
    assert!(out.stdout.contains("sent 1\nentered\n"), "{out:?}");
    let (_, log) = last_log(&fx);
    assert!(
        log.contains("closed is 8, not a set of fds 0 to 2"),
        "{log}"
    );
});

both!(stdio_that_is_a_directory_or_o_path_is_refused, |fx| {
    zones_config(&fx, "");
    let probe = fx.bin.join("wardcell-probe");
    // The attack: stdin an O_PATH descriptor (or a directory) to "/", through which the
    // target would walk the caller's mount namespace.
    let out = inside(
        &fx,
        &format!(
            "{p} with-stdin / opath wardcell zone enter push -- ls /proc/self/fd/0/; echo opath-rc=$?; \
             wardcell zone enter push -- ls /proc/self/fd/0/ < .; echo dir-rc=$?; \
             echo fine | wardcell zone enter push -- cat; echo pipe-rc=$?",
            p = probe.display()
        ),
    );
    assert!(out.stdout.contains("opath-rc=1\n"), "{out:?}");
    assert!(out.stdout.contains("dir-rc=1\n"), "{out:?}");
    assert!(out.stdout.contains("fine\npipe-rc=0\n"), "{out:?}");
    assert!(
        !out.stdout.contains("proc\n"),
        "the target listed /: {out:?}"
    );
    assert!(
        out.stderr.contains("error: stdin is an O_PATH descriptor: `wardcell zone enter` passes on only pipes, sockets, character devices and regular files\n"),
        "{out:?}"
    );
    assert!(
        out.stderr
            .contains("error: stdin is a directory: `wardcell zone enter` passes on only"),
        "{out:?}"
    );
    assert_eq!(out.stderr.lines().count(), 2, "{out:?}");
    let (_, log) = last_log(&fx);
    assert_eq!(
        log.matches(r#""decision":"denied""#).count(),
        2,
        "both refusals are audited: {log}"
    );
    assert!(log.contains("stdin is an O_PATH descriptor"), "{log}");
});

both!(a_fifth_caller_is_told_why_and_audited, |fx| {
    zones_config(&fx, "");
    let probe = fx.bin.join("wardcell-probe");
    // Four requests begun and stalled fill the supervisor (each has sent its byte once it
    // says so; `sleep` lets the supervisor take them); each later request is told why,
    // with the supervisor's message (not "Broken pipe"), and audited.
    let out = inside(
        &fx,
        &format!(
            "for i in 1 2 3 4; do {p} connect-stall \"$WARDCELL_ZONE_SOCKET\" & done | {{ \
             for i in 1 2 3 4; do read connected; done; sleep 0.2; exec 4<&0 </dev/null; \
             for i in 1 2 3; do wardcell zone list; echo list-rc=$?; wardcell zone enter push -- true; echo enter-rc=$?; done; \
             cat <&4 >/dev/null; }}",
            p = probe.display()
        ),
    );
    assert_eq!(out.stdout.matches("list-rc=1").count(), 3, "{out:?}");
    assert_eq!(out.stdout.matches("enter-rc=1").count(), 3, "{out:?}");
    assert_eq!(
        out.stderr
            .matches("error: this sandbox's supervisor already serves 4 connections; try again when one has finished\n")
            .count(),
        6,
        "{out:?}"
    );
    let (_, log) = last_log(&fx);
    assert_eq!(
        log.matches("\"reason\":\"this sandbox's supervisor already serves 4 connections\"")
            .count(),
        6,
        "{log}"
    );
});

both!(a_retry_right_after_a_killed_caller_is_not_refused, |fx| {
    // The plugin answers a second after it is asked (the window is the point: the first
    // caller is killed while its entry waits for it).
    let plugin = fx.dir.join("approve.sh");
    fx.write(
        &plugin,
        &format!(
            "#!/bin/sh\nread req\ntouch {}\nsleep 1\necho '{{\"approved\": true}}'\n",
            fx.proj.join("asked").display()
        ),
    );
    fs::set_permissions(&plugin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    zones_config(
        &fx,
        &format!("\n[approval]\nplugin = [\"{}\"]\n", plugin.display()),
    );
    let cfg = fx.home.join(".config/wardcell/zones.toml");
    let text = fs::read_to_string(&cfg).unwrap().replacen(
        "enter_from = [\"agent\"]\n",
        "enter_from = [\"agent\"]\nrequires_approval = true\napproval_timeout = \"10s\"\n",
        1,
    );
    fx.write(&cfg, &text);
    // The entry's slot is released once its caller is gone, before a retry is refused.
    // Gone means reaped: `kill` returns before the process has exited and closed its
    // connection, and a retry in that window meets a caller that is still there.
    let out = inside(
        &fx,
        "wardcell zone enter push -- true & pid=$!; while [ ! -e asked ]; do sleep 0.02; done; kill -9 $pid; wait $pid; \
         wardcell zone enter push -- echo retried; echo retry-rc=$?",
    );
    assert!(out.stdout.contains("retried\nretry-rc=0"), "{out:?}");
    assert!(!out.stderr.contains("already running"), "{out:?}");
});

both!(an_entered_command_ignores_what_its_caller_ignored, |fx| {
    zones_config(&fx, "");
    // `trap '' HUP` in the caller: the entered command starts ignoring SIGHUP (bit 0), as
    // after an exec, and nothing else (not the client's own ignored SIGPIPE).
    let out = inside(
        &fx,
        "grep ^SigIgn /proc/self/status; (trap '' HUP; exec wardcell zone enter push -- grep ^SigIgn /proc/self/status)",
    );
    out.ok();
    let masks: Vec<u64> = out
        .stdout
        .lines()
        .map(|l| u64::from_str_radix(l.trim_start_matches("SigIgn:\t"), 16).unwrap() & 0x7fff_ffff)
        .collect();
    assert_eq!(masks, [0, 1], "{out:?}");
});

both!(refusals_and_failures_are_one_line, |fx| {
    zones_config(&fx, "");
    let out = inside(
        &fx,
        "wardcell zone enter \"$(printf 'pu\\nsh')\" -- true; echo rc=$?; \
         wardcell zone enter push -- \"$(printf 'no\\nsuch')\"; echo rc=$?; \
         wardcell zone enter push -- ''; echo rc=$?",
    );
    assert_eq!(out.stdout, "rc=1\nrc=127\nrc=127\n", "{out:?}");
    assert_eq!(out.stderr.lines().count(), 3, "{out:?}");
    assert!(
        out.stderr.contains("error: `no\\nsuch`: command not found"),
        "{out:?}"
    );
    assert!(
        out.stderr.contains("error: ``: command not found"),
        "{out:?}"
    );
});

both!(a_message_out_of_turn_while_an_entry_runs_ends_it, |fx| {
    zones_config(&fx, "");
    let probe = fx.bin.join("wardcell-probe");
    // PROTOCOL 6.3, running: the caller must stay silent. A hand-made caller that sends a
    // frame (its Hello again) once `Started` came, and stays connected: the entered
    // `sleep 30` is ended at once, the connection closed without a reply, and the
    // completion audited as the caller having gone.
    let out = inside(
        &fx,
        &format!(
            "{p} enter-then-speak \"$WARDCELL_ZONE_SOCKET\"; echo rc=$?",
            p = probe.display()
        ),
    );
    out.ok();
    // Started is the frame [1, 0, 0, 0, 3].
    assert!(out.stdout.contains("answer [1, 0, 0, 0, 3]\n"), "{out:?}");
    assert!(out.stdout.contains("after 0 bytes in "), "{out:?}");
    let secs: u64 = out
        .stdout
        .split("after 0 bytes in ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or(99);
    assert!(
        secs < 10,
        "the entry ran on after its caller spoke: {out:?}"
    );
    let (_, log) = last_log(&fx);
    let completed: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("\"audit.completed\""))
        .collect();
    assert_eq!(completed.len(), 1, "{log}");
    assert!(
        completed[0].contains("the caller went away; the command's sandbox was ended"),
        "{log}"
    );
});
