//! Tracing (`WARDCELL_LOG`, `wardcell run -v`): off by default; when asked, every process
//! writes what it does to stderr, each line with the run id of the audit log; the variable
//! never reaches the command. Real sandboxes, as the invoking user and as an
//! unprivileged uid. (The authenticated zone's proxy and the secret: proxy_e2e.rs.)

use std::fs;

use serde_json::Value;
use wardcell_tests::{both, Fixture, Out};

/// The run ids of the fixture's audit logs.
fn run_ids(fx: &Fixture) -> Vec<String> {
    let runs = fx.home.join(".local/state/wardcell/runs");
    let Ok(d) = fs::read_dir(&runs) else {
        return Vec::new();
    };
    d.filter_map(|e| {
        let text = fs::read_to_string(e.ok()?.path()).ok()?;
        let first: Value = serde_json::from_str(text.lines().next()?).ok()?;
        Some(first["run"].as_str()?.to_string())
    })
    .collect()
}

/// The trace lines of stderr: `process[pid] run=ID LEVEL ...`.
fn traced(out: &Out) -> Vec<&str> {
    out.stderr
        .lines()
        .filter(|l| l.starts_with("wardcell") && l.contains("] run="))
        .collect()
}

#[track_caller]
fn assert_from_each(lines: &[&str], processes: &[&str], id: &str, out: &Out) {
    for l in lines {
        assert!(
            l.contains(&format!("] run={id} ")),
            "not run {id}: {l}\n{out:#?}"
        );
    }
    for p in processes {
        assert!(
            lines.iter().any(|l| l.starts_with(&format!("{p}["))),
            "nothing from {p}: {out:#?}"
        );
    }
}

both!(run_v_traces_each_process_with_the_run_id, |fx| {
    fx.test_config("");
    let out = fx.run(&[
        "run",
        "-v",
        "--",
        "/bin/sh",
        "-c",
        "echo \"log=${WARDCELL_LOG-unset}\"",
    ]);
    out.ok();
    // -v changes nothing in the command's environment.
    assert!(out.stdout.contains("log=unset"), "{out:#?}");
    let ids = run_ids(&fx);
    assert_eq!(ids.len(), 1, "{ids:?}");
    let lines = traced(&out);
    assert_from_each(
        &lines,
        &["wardcell", "wardcell-broker", "wardcell-shim"],
        &ids[0],
        &out,
    );
    // The plan writer's lines (held until the run id existed) and the run's end.
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("wardcell[") && l.contains("plan resolved")),
        "{out:#?}"
    );
    assert!(lines.iter().any(|l| l.contains("run.finished")), "{out:#?}");
});

both!(nothing_is_traced_unless_asked, |fx| {
    fx.test_config("");
    let out = fx.sh("echo \"log=${WARDCELL_LOG-unset}\"");
    out.ok();
    assert_eq!(out.stderr, "", "{out:#?}");
    let mut c = fx.cmd(&["run", "--", "/bin/true"]);
    c.env("WARDCELL_LOG", "off");
    let out: Out = c.output().unwrap().into();
    out.ok();
    assert_eq!(out.stderr, "", "{out:#?}");
});

both!(
    wardcell_log_set_by_the_caller_stays_out_of_the_command,
    |fx| {
        fx.test_config("");
        let mut c = fx.cmd(&[
        "run",
        "--",
        "/bin/sh",
        "-c",
        "echo \"log=${WARDCELL_LOG-unset}\"; cat /proc/1/environ | tr '\\0' '\\n' | grep -c WARDCELL_LOG",
    ]);
        c.env("WARDCELL_LOG", "debug");
        let out: Out = c.output().unwrap().into();
        assert!(out.stdout.contains("log=unset"), "{out:#?}");
        // Nor is it in the shim's (init's) environment.
        assert!(out.stdout.contains("\n0\n"), "{out:#?}");
        let ids = run_ids(&fx);
        assert_from_each(
            &traced(&out),
            &["wardcell", "wardcell-broker", "wardcell-shim"],
            &ids[0],
            &out,
        );
    }
);

both!(
    a_value_that_is_not_a_level_is_refused_before_anything_runs,
    |fx| {
        fx.test_config("");
        let mut c = fx.cmd(&["run", "--", "/bin/true"]);
        c.env("WARDCELL_LOG", "loud\x1b[31m");
        let out: Out = c.output().unwrap().into();
        out.expect_code(2);
        assert_eq!(
        out.stderr,
        "error: WARDCELL_LOG=\"loud\\x1b[31m\" is not a level: use off, error, warn, info, debug or trace\n"
    );
        assert!(run_ids(&fx).is_empty());
    }
);

// The approval plugin traces too: the broker gives it WARDCELL_LOG, and its lines carry
// the run id the request names.
both!(the_approval_plugin_traces_with_the_run_id, |fx| {
    fx.config(&format!(
        r#"
[zones.agent]
profile = "agent"
default = true

[zones.push]
profile = "agent"
enter_from = ["agent"]
requires_approval = true
approval_timeout = "1s"

[profiles.agent]
extends = "readonly"
read = ["{bin}"]

[approval]
plugin = ["{bin}/wardcell-approve", "--queue"]
"#,
        bin = fx.bin.display(),
    ));
    let mut c = fx.cmd(&[
        "run",
        "--",
        "/bin/sh",
        "-c",
        "wardcell zone enter push -- true; echo rc=$?",
    ]);
    c.env("WARDCELL_LOG", "debug");
    let out: Out = c.output().unwrap().into();
    out.ok();
    assert!(out.stdout.contains("rc=1"), "{out:#?}");
    let ids = run_ids(&fx);
    let lines = traced(&out);
    assert_from_each(
        &lines,
        &["wardcell-broker", "wardcell-approve"],
        &ids[0],
        &out,
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("wardcell-approve[") && l.contains("queued")),
        "{out:#?}"
    );
});

// Inside a sandbox, `WARDCELL_LOG` set by the command itself traces that client, with
// the run id (from its zone socket's directory); it still never reaches the entered
// zone's command.
both!(a_client_inside_traces_with_the_run_id, |fx| {
    fx.test_config("\n[zones.other]\nprofile = \"test\"\nenter_from = [\"agent\"]\n");
    let out = fx.sh(
        "WARDCELL_LOG=debug wardcell zone enter other -- sh -c 'echo \"inner=${WARDCELL_LOG-unset}\"'",
    );
    out.ok();
    assert!(out.stdout.contains("inner=unset"), "{out:#?}");
    let ids = run_ids(&fx);
    assert_eq!(ids.len(), 1, "{ids:?}");
    let lines = traced(&out);
    assert!(
        lines.iter().any(|l| l.starts_with("wardcell[")
            && l.contains(&format!("] run={} ", ids[0]))
            && l.contains("asking the supervisor to enter")),
        "{out:#?}"
    );
});
