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
    // JSON output is one document: the array of those events.
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
    assert_eq!(doc, serde_json::Value::Array(lines), "{json:#?}");
});
