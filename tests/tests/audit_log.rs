//! The audit log under failure: a full disk, a cut tail, an empty log. Real sandboxes,
//! run as the invoking user and as an unprivileged uid.

use std::fs;
use std::path::{Path, PathBuf};

use wardcell_tests::{both, Fixture, Out, SmallFs};

/// Zones `agent` (default) and `push`, both able to run the staged binaries.
fn two_zones(fx: &Fixture) {
    let bin = fx.bin.display();
    fx.config(&format!(
        "[zones.agent]\nprofile = \"dev\"\ndefault = true\n[zones.push]\nprofile = \"dev\"\nenter_from = [\"agent\"]\n[profiles.dev]\nextends = \"readonly\"\nread = [\"{bin}\"]\n"
    ));
}

fn runs(state: &Path) -> PathBuf {
    state.join("wardcell/runs")
}

/// The only log under `state`, as its run id and text.
fn only_log(state: &Path) -> (String, String) {
    let mut logs: Vec<PathBuf> = fs::read_dir(runs(state))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(logs.len(), 1, "{logs:?}");
    let path = logs.pop().unwrap();
    let id = path.file_stem().unwrap().to_str().unwrap().to_string();
    (id, fs::read_to_string(&path).unwrap())
}

/// How the broker's last line ends when the log could not take an event; the cause is
/// said before it, in words (issue 19, item 10).
const ENDED: &str = "; the run was ended rather than go on unaudited";
/// The words for a full disk (ENOSPC), and for no other cause.
const FULL: &str = "the file system holding it is full: make room for the log, then run again (No space left on device";

// Issue 10: a run whose log filled up went on unaudited, and the log could keep a cut line.
// The tmpfs is mounted by the test process, so it needs root; the run itself goes as both
// users.
both!(a_full_disk_ends_the_run_and_leaves_no_partial_line, |fx| {
    two_zones(&fx);
    let Some(small) = SmallFs::mount(&fx, "") else {
        return;
    };
    let out: Out = fx
        .cmd(&[
            "run",
            "--",
            "/bin/sh",
            "-c",
            "i=0; while [ $i -lt 1000 ]; do wardcell zone enter push -- true 2>/dev/null; i=$((i+1)); done; echo went-on",
        ])
        .env("XDG_STATE_HOME", &small.0)
        .output()
        .unwrap()
        .into();
    assert_eq!(out.code, 1, "{out:#?}");
    assert!(!out.stdout.contains("went-on"), "{out:#?}");
    let last = out.stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: the run's audit log ")
            && last.contains(FULL)
            && last.ends_with(ENDED),
        "{out:#?}"
    );
    let (id, text) = only_log(&small.0);
    assert!(
        text.ends_with('\n'),
        "a partial line: {:?}",
        &text[text.len() - 80..]
    );
    for line in text.lines() {
        serde_json::from_str::<serde_json::Value>(line).expect(line);
    }
    assert!(text.lines().count() > 10, "{text}");
    // Whole lines, chained, but no run.finished: reported as cut.
    let out: Out = fx
        .cmd(&["logs", "verify", &id])
        .env("XDG_STATE_HOME", &small.0)
        .output()
        .unwrap()
        .into();
    out.expect_code(1);
    assert!(out.stderr.contains("without run.finished"), "{out:#?}");
});

// Issue 10: a run whose log could be created but not written ran unaudited.
both!(a_run_whose_log_cannot_be_written_does_not_start, |fx| {
    two_zones(&fx);
    let Some(small) = SmallFs::mount(&fx, "") else {
        return;
    };
    fs::create_dir_all(runs(&small.0)).unwrap();
    fx.own(&small.0);
    small.fill(0);
    let out: Out = fx
        .cmd(&["run", "--", "/bin/sh", "-c", "echo ran"])
        .env("XDG_STATE_HOME", &small.0)
        .output()
        .unwrap()
        .into();
    out.expect_code(1);
    assert!(out.stdout.is_empty(), "{out:#?}");
    assert_eq!(out.stderr.lines().count(), 1, "{out:#?}");
    assert!(
        out.stderr.starts_with("error: the run's audit log ")
            && out.stderr.contains(FULL)
            && out.stderr.trim_end().ends_with(ENDED),
        "{out:#?}"
    );
});

both!(a_log_cut_by_whole_lines_is_reported_cut, |fx| {
    two_zones(&fx);
    let state = fx.dir.join("state");
    fs::create_dir_all(&state).unwrap();
    fx.own(&state);
    let run = |args: &[&str]| -> Out {
        fx.cmd(args)
            .env("XDG_STATE_HOME", &state)
            .output()
            .unwrap()
            .into()
    };
    run(&[
        "run",
        "--",
        "/bin/sh",
        "-c",
        "wardcell zone enter push -- true",
    ])
    .ok();
    let (id, text) = only_log(&state);
    let out = run(&["logs", "verify", &id]);
    out.ok();
    assert!(
        out.stdout
            .contains("the chain is intact and the run finished"),
        "{out:#?}"
    );
    let path = runs(&state).join(format!("{id}.jsonl"));
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() >= 4, "{text}");
    for keep in [lines.len() - 1, lines.len() - 2, 1] {
        let cut: String = lines[..keep].iter().map(|l| format!("{l}\n")).collect();
        fx.write(&path, &cut);
        let out = run(&["logs", "verify", &id]);
        out.expect_code(1);
        assert!(
            out.stderr.starts_with(&format!(
                "error: run {id}: the log stops after {keep} events without run.finished, and the run is over"
            )),
            "{out:#?}"
        );
    }
    // An empty log is not an intact one.
    fx.write(&path, "");
    let out = run(&["logs", "verify", &id]);
    out.expect_code(1);
    assert!(out.stderr.contains("the log is empty"), "{out:#?}");
});

both!(a_running_runs_log_verifies_as_still_going, |fx| {
    two_zones(&fx);
    let state = fx.dir.join("state");
    fs::create_dir_all(&state).unwrap();
    fx.own(&state);
    let mut child = fx
        .cmd(&["run", "--", "/bin/sh", "-c", "echo up; sleep 30"])
        .env("XDG_STATE_HOME", &state)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut up = [0u8; 3];
    use std::io::Read;
    child.stdout.take().unwrap().read_exact(&mut up).unwrap();
    let (id, _) = only_log(&state);
    let out: Out = fx
        .cmd(&["logs", "verify", &id])
        .env("XDG_STATE_HOME", &state)
        .output()
        .unwrap()
        .into();
    let _ = child.kill();
    let _ = child.wait();
    out.ok();
    assert!(out.stdout.contains("the run is still going"), "{out:#?}");
});

// Issue 10: a command with a newline and a timestamp printed a forged event in `logs
// show`, and escape sequences reached the auditor's terminal.
both!(logs_show_cannot_be_forged_from_inside, |fx| {
    two_zones(&fx);
    let state = fx.dir.join("state");
    fs::create_dir_all(&state).unwrap();
    fx.own(&state);
    let forged = "\n2026-12-03T00:00:00.000Z  audit    audit.decision    allowed agent -> release: rm -rf / (in enter_from)\n";
    let script = format!(
        "wardcell zone enter push -- true '{forged}' \"$(printf '\\033[2J')\"; \
         wardcell zone enter \"$(printf 'nope\\n2026 forged\\033[31m')\" -- true; true"
    );
    let out: Out = fx
        .cmd(&["run", "--", "/bin/sh", "-c", &script])
        .env("XDG_STATE_HOME", &state)
        .output()
        .unwrap()
        .into();
    out.ok();
    // The refusal the caller printed is one line without ESC.
    assert!(!out.stderr.contains('\x1b'), "{out:#?}");
    assert!(
        out.stderr.contains("nope\\n2026 forged\\x1b[31m"),
        "{out:#?}"
    );
    let (id, text) = only_log(&state);
    assert!(
        text.contains("\\u001b[2J"),
        "the log keeps the command as it was: {text}"
    );
    let show: Out = fx
        .cmd(&["logs", "show", &id])
        .env("XDG_STATE_HOME", &state)
        .output()
        .unwrap()
        .into();
    show.ok();
    assert!(!show.stdout.contains('\x1b'), "{show:#?}");
    // One line per event, each starting with the event's own timestamp.
    assert_eq!(
        show.stdout.lines().count(),
        text.lines().count(),
        "{show:#?}"
    );
    for line in show.stdout.lines() {
        assert!(
            line.starts_with("20") && line.as_bytes()[10] == b'T',
            "{line}"
        );
        assert!(
            !line.contains("2026-12-03T00:00:00.000Z")
                || line.contains("\\n2026-12-03T00:00:00.000Z"),
            "{line}"
        );
    }
    assert!(
        // Quoted as a shell would need it: the word's boundaries are plain.
        show.stdout.contains("true $'\\n2026-12-03T00:00:00.000Z"),
        "{show:#?}"
    );
    assert!(show.stdout.contains("\\x1b[2J"), "{show:#?}");
    // JSON Lines output is the log's own lines, unchanged.
    let jsonl: Out = fx
        .cmd(&["logs", "show", &id, "--output", "jsonl"])
        .env("XDG_STATE_HOME", &state)
        .output()
        .unwrap()
        .into();
    jsonl.ok();
    assert_eq!(jsonl.stdout, text, "{jsonl:#?}");
    // JSON output is one document: the run and the array of those events.
    let json: Out = fx
        .cmd(&["logs", "show", &id, "--output", "json"])
        .env("XDG_STATE_HOME", &state)
        .output()
        .unwrap()
        .into();
    json.ok();
    let doc: serde_json::Value = serde_json::from_str(&json.stdout).expect("one JSON document");
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(doc["run"], id.as_str(), "{json:#?}");
    assert_eq!(doc["events"], serde_json::Value::Array(lines), "{json:#?}");
});

/// `XDG_STATE_HOME` of its own for one test, owned by the fixture's uid.
fn own_state(fx: &Fixture) -> PathBuf {
    let state = fx.dir.join("state");
    fs::create_dir_all(&state).unwrap();
    fx.own(&state);
    state
}

fn in_state(fx: &Fixture, state: &Path, args: &[&str]) -> Out {
    fx.cmd(args)
        .env("XDG_STATE_HOME", state)
        .output()
        .unwrap()
        .into()
}

fn events<'a>(text: &'a str, event: &str) -> Vec<&'a str> {
    let needle = format!("\"event\":\"{event}\"");
    text.lines().filter(|l| l.contains(&needle)).collect()
}

fn sha256_hex(text: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

// Issue 19, item 4: connect-and-close on the supervisor socket wrote ~3 MB/s of events.
// Now a burst, then 20 a second, and one count of the rest.
both!(supervisor_churn_leaves_a_small_log_with_a_count, |fx| {
    two_zones(&fx);
    let state = own_state(&fx);
    let probe = fx.bin.join("wardcell-probe");
    let script = format!(
        "{} connect-churn \"$WARDCELL_ZONE_SOCKET\" 3000",
        probe.display()
    );
    let out = in_state(&fx, &state, &["run", "--", "/bin/sh", "-c", &script]);
    out.ok();
    let made: u64 = out
        .stdout
        .trim()
        .strip_prefix("connections ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{out:#?}"));
    assert!(made > 1000, "too few connections to tell: {out:#?}");
    let (id, text) = only_log(&state);
    let closed = events(&text, "supervisor.closed").len() as u64;
    let counted: u64 = events(&text, "audit.suppressed")
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["counts"]["supervisor.closed"].as_u64().unwrap_or(0)
        })
        .sum();
    assert!(
        counted > 0,
        "no count: {closed} events for {made} connections"
    );
    // 100 at once, then 20 a second, for about 3 seconds.
    assert!(closed <= 100 + 20 * 6, "{closed} events written one by one");
    assert!(text.len() < 100_000, "{} bytes", text.len());
    assert!(
        closed + counted >= made / 2,
        "{closed} + {counted} for {made} connections"
    );
    in_state(&fx, &state, &["logs", "verify", &id]).ok();
});

// Issue 19, item 4: 20 refused entries with a 3 MB argv wrote 60 MB. A field is now cut
// at 4 KiB, with the length and SHA-256 of its whole JSON text.
both!(a_refused_entry_with_a_huge_argv_logs_a_capped_field, |fx| {
    two_zones(&fx);
    let state = own_state(&fx);
    // 15 words of 100,000 bytes (one word may be at most 128 KiB), entered 20 times.
    let script = "w=$(head -c 100000 /dev/zero | tr '\\0' x); i=0; \
                  while [ $i -lt 20 ]; do wardcell zone enter nowhere -- true $w $w $w $w $w $w $w $w $w $w $w $w $w $w $w 2>/dev/null; i=$((i+1)); done; echo done";
    let out = in_state(&fx, &state, &["run", "--", "/bin/sh", "-c", script]);
    out.ok();
    assert!(out.stdout.contains("done"), "{out:#?}");
    let (id, text) = only_log(&state);
    let refused = events(&text, "audit.decision");
    assert_eq!(refused.len(), 20, "{}", &text[..text.len().min(2000)]);
    assert!(text.len() < 20 * 12_000, "{} bytes", text.len());
    let mut argv = vec!["true".to_string()];
    argv.extend(std::iter::repeat_n("x".repeat(100_000), 15));
    let whole = serde_json::to_string(&argv).unwrap();
    let v: serde_json::Value = serde_json::from_str(refused[0]).unwrap();
    assert_eq!(v["decision"], "denied", "{v}");
    assert_eq!(v["command"]["bytes"], whole.len(), "{}", v["command"]);
    assert_eq!(v["command"]["sha256"], sha256_hex(&whole));
    assert_eq!(v["command"]["cut"].as_str().unwrap().len(), 4096);
    in_state(&fx, &state, &["logs", "verify", &id]).ok();
    let show = in_state(&fx, &state, &["logs", "show", &id]);
    show.ok();
    assert!(
        show.stdout
            .contains(&format!("[cut: {} bytes in all, sha256 ", whole.len())),
        "{}",
        &show.stdout[..show.stdout.len().min(3000)]
    );
});

// Issue 19, item 4: a per-run size limit. The run that reaches it ends its sandboxes,
// closes its log with audit.log_full and run.finished, and the chain verifies.
both!(a_run_reaching_max_log_kib_ends_cleanly, |fx| {
    two_zones(&fx);
    let cfg = fx.home.join(".config/wardcell/zones.toml");
    let text = fs::read_to_string(&cfg).unwrap() + "[audit]\nmax_log_kib = 128\n";
    fx.write(&cfg, &text);
    let state = own_state(&fx);
    let script = "p=$(head -c 3000 /dev/zero | tr '\\0' p); i=0; \
                  while [ $i -lt 200 ]; do wardcell zone enter push -- true $p 2>/dev/null; i=$((i+1)); done; echo went-on";
    let out = in_state(&fx, &state, &["run", "--", "/bin/sh", "-c", script]);
    out.expect_code(1);
    assert!(!out.stdout.contains("went-on"), "{out:#?}");
    let last = out.stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains("reached its size limit of 128 KiB ([audit] max_log_kib)")
            && last.ends_with(ENDED),
        "{out:#?}"
    );
    let (id, text) = only_log(&state);
    assert!(text.len() <= 128 * 1024, "{} bytes", text.len());
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() > 10, "{text}");
    assert!(
        lines[lines.len() - 1].contains("\"event\":\"run.finished\""),
        "{text}"
    );
    assert_eq!(events(&text, "audit.log_full").len(), 1, "{text}");
    let verify = in_state(&fx, &state, &["logs", "verify", &id]);
    verify.ok();
    assert!(verify.stdout.contains("the run finished"), "{verify:#?}");
});

/// A log of `n` events whose middle ones are `pad` bytes of padding each, chained as a
/// broker writes it, for a run that finished.
fn synthetic_log(id: &str, n: usize, pad: usize) -> String {
    let mut prev = "0".repeat(64);
    let mut out = String::new();
    for seq in 0..n {
        let mut v = serde_json::json!({
            "ts": "2026-12-04T00:00:00.000Z", "run": id, "category": "audit",
        });
        let event = match seq {
            0 => "run.started",
            s if s + 1 == n => "run.finished",
            _ => "audit.decision",
        };
        v["event"] = event.into();
        match event {
            "run.started" => {
                v["category"] = "run".into();
                v["zone"] = "agent".into();
                v["command"] = serde_json::json!(["sh", "-c", "big"]);
            }
            "run.finished" => {
                v["category"] = "run".into();
                v["exit_status"] = 0.into();
                v["events"] = seq.into();
                v["head"] = prev.clone().into();
            }
            _ => v["reason"] = "p".repeat(pad).into(),
        }
        v["seq"] = seq.into();
        v["prev"] = prev.clone().into();
        let line = v.to_string();
        prev = sha256_hex(&line);
        out.push_str(&line);
        out.push('\n');
    }
    out
}

// Issue 19, item 4: `logs list` read a 43 MB log whole (218 MB resident). Now list, show
// and verify stream it: what they hold at most is measured by the kernel (wait4).
both!(logs_list_and_show_read_a_big_log_in_bounded_memory, |fx| {
    fx.test_config("");
    let state = own_state(&fx);
    let id = "20261204T000000Z-0123abcd";
    let log = runs(&state).join(format!("{id}.jsonl"));
    let text = synthetic_log(id, 10_000, 4500);
    assert!(text.len() > 40_000_000);
    fx.write(&log, &text);
    fx.own(&state);
    drop(text);
    for args in [
        &["logs", "list", "--output", "json"][..],
        &["logs", "list"],
        &["logs", "show", id],
        &["logs", "show", id, "--output", "json"],
        &["logs", "verify", id],
    ] {
        let mut cmd = fx.cmd(args);
        cmd.env("XDG_STATE_HOME", &state);
        let (code, kib) = wardcell_tests::max_rss_kib(cmd);
        assert_eq!(code, 0, "{args:?}");
        assert!(kib < 24 * 1024, "{args:?} held {kib} KiB for a 45 MB log");
    }
    let out = in_state(&fx, &state, &["logs", "list", "--output", "json"]);
    let doc: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(doc["runs"][0]["state"], "finished", "{doc:#}");
    assert_eq!(doc["runs"][0]["exit_status"], 0, "{doc:#}");
});

// Issue 19, item 10: `logs show` exited 0 on a cut or garbage-appended log and printed
// nothing for a symlinked one; `logs list` showed killed runs as `running?` for ever.
both!(
    damaged_logs_make_logs_show_fail_and_killed_runs_are_marked,
    |fx| {
        two_zones(&fx);
        let state = own_state(&fx);
        in_state(&fx, &state, &["run", "--", "/bin/true"]).ok();
        let (id, text) = only_log(&state);
        let path = runs(&state).join(format!("{id}.jsonl"));
        in_state(&fx, &state, &["logs", "show", &id]).ok();
        let damaged = |content: &str, why: &str| {
            fx.write(&path, content);
            let out = in_state(&fx, &state, &["logs", "show", &id]);
            out.expect_code(1);
            assert!(
                out.stderr
                    .starts_with(&format!("error: run {id}: the log is damaged at line "))
                    && out.stderr.contains(why),
                "{out:#?}"
            );
        };
        damaged(&text[..text.len() - 5], "the last line is cut short");
        damaged(&format!("{text}garbage\n"), "not JSON");
        damaged(
            &format!("{text}{}", text.lines().last().unwrap()),
            "cut short",
        );
        // A symbolic link in its place, to an intact copy: refused, never followed.
        let copy = fx.dir.join("copy.jsonl");
        fx.write(&copy, &text);
        fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&copy, &path).unwrap();
        let out = in_state(&fx, &state, &["logs", "show", &id]);
        out.expect_code(1);
        assert!(
            out.stderr.contains("it is a symbolic link, not a log"),
            "{out:#?}"
        );
        assert!(out.stdout.is_empty(), "{out:#?}");
        // Without run.finished and with no broker left: killed, not running.
        fs::remove_file(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let cut: String = lines[..lines.len() - 1]
            .iter()
            .map(|l| format!("{l}\n"))
            .collect();
        fx.write(&path, &cut);
        let out = in_state(&fx, &state, &["logs", "list", "--output", "json"]);
        out.ok();
        let doc: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(doc["runs"][0]["state"], "killed", "{doc:#}");
        let out = in_state(&fx, &state, &["logs", "list"]);
        assert!(
            out.stdout.contains("killed") && !out.stdout.contains("running"),
            "{out:#?}"
        );
        let show = in_state(&fx, &state, &["logs", "show", &id]);
        show.ok();
        assert!(show.stderr.contains("without run.finished"), "{show:#?}");
    }
);

// Issue 19, item 4: refused entries are counted past the rate, and a flood of them does
// not hold back an entry that is allowed.
both!(
    refused_entries_past_the_rate_are_counted_and_entries_still_work,
    |fx| {
        two_zones(&fx);
        let state = own_state(&fx);
        let script = "i=0; while [ $i -lt 400 ]; do wardcell zone enter nowhere -- true 2>/dev/null; i=$((i+1)); done; \
                  wardcell zone enter push -- true; echo rc=$?";
        let out = in_state(&fx, &state, &["run", "--", "/bin/sh", "-c", script]);
        out.ok();
        assert!(out.stdout.contains("rc=0"), "{out:#?}");
        let (id, text) = only_log(&state);
        let decisions = events(&text, "audit.decision");
        let counted: u64 = events(&text, "audit.suppressed")
            .iter()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["counts"]["audit.decision"].as_u64().unwrap_or(0)
            })
            .sum();
        // Every refusal is either written or counted; the allowed entry is written.
        assert_eq!(decisions.len() as u64 + counted, 401, "{counted} counted");
        assert!(
            counted > 0,
            "nothing counted: {} decisions",
            decisions.len()
        );
        assert!(decisions
            .last()
            .is_some_and(|d| d.contains("\"decision\":\"allowed\"")));
        in_state(&fx, &state, &["logs", "verify", &id]).ok();
    }
);
