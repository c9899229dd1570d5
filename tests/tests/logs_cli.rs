//! `wardcell logs list` and `logs show` as people and programs read them, on real runs:
//! newest first with start, zone, exit status and duration; `--limit`; `doctor`'s trial
//! runs left out unless `--all`; every event in words; one JSON document for `--output
//! json`. As the invoking user and as an unprivileged uid.

use serde_json::Value;
use wardcell_tests::{both, Fixture};

fn ids_in_order(fx: &Fixture, args: &[&str]) -> Vec<String> {
    let mut all = vec!["logs", "list", "--output", "json"];
    all.extend_from_slice(args);
    let out = fx.run(&all);
    out.ok();
    let doc: Value = serde_json::from_str(&out.stdout).expect("one JSON document");
    doc["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run"].as_str().unwrap().to_string())
        .collect()
}

both!(
    logs_list_is_newest_first_with_times_and_leaves_doctor_out,
    |fx| {
        fx.test_config("");
        fx.sh("exit 3").expect_code(3);
        // A run that lasts at least 300 ms: its duration is checked below.
        fx.sh("sleep 0.3").ok();
        // doctor's trial run writes a log too (its own status does not matter here).
        let _ = fx.run(&["doctor"]);
        fx.sh("true").ok();

        let out = fx.run(&["logs", "list", "--output", "json"]);
        out.ok();
        let doc: Value = serde_json::from_str(&out.stdout).unwrap();
        let runs = doc["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 3, "{doc:#}");
        // Newest first: `true`, `sleep 0.3`, `exit 3`; numbers as numbers, null when absent.
        assert_eq!(runs[0]["command"][2], "true", "{doc:#}");
        assert_eq!(runs[1]["command"][2], "sleep 0.3", "{doc:#}");
        assert_eq!(runs[2]["exit_status"], 3, "{doc:#}");
        assert_eq!(runs[0]["exit_status"], 0, "{doc:#}");
        assert_eq!(runs[0]["zone"], "agent", "{doc:#}");
        assert_eq!(runs[0]["trial"], false, "{doc:#}");
        assert_eq!(runs[0]["finished"], true, "{doc:#}");
        assert!(runs[1]["duration_ms"].as_i64().unwrap() >= 300, "{doc:#}");
        assert!(runs[0]["start"].as_str().unwrap().ends_with('Z'), "{doc:#}");

        // --all: the trial runs too (doctor may start more than one), marked.
        let all = ids_in_order(&fx, &["--all"]);
        assert!(all.len() >= 4, "{all:?}");
        let text = fx.run(&["logs", "list", "--all"]);
        text.ok();
        let lines: Vec<&str> = text.stdout.lines().collect();
        assert!(
            lines[0].starts_with("RUN")
                && lines[0].contains("START")
                && lines[0].contains("DURATION"),
            "{text:?}"
        );
        assert_eq!(
            lines.iter().filter(|l| l.contains("(doctor)")).count(),
            all.len() - 3,
            "{text:?}"
        );
        // Without --all the text has no trial run; --limit keeps the newest.
        let text = fx.run(&["logs", "list"]);
        assert!(!text.stdout.contains("(doctor)"), "{text:?}");
        assert_eq!(text.stdout.lines().count(), 4, "{text:?}");
        assert!(
            text.stdout.lines().nth(3).unwrap().contains(" 3 "),
            "{text:?}"
        );
        let one = ids_in_order(&fx, &["--limit", "1"]);
        assert_eq!(one, ids_in_order(&fx, &[])[..1].to_vec());
        let text = fx.run(&["logs", "list", "--limit", "1"]);
        assert_eq!(text.stdout.lines().count(), 2, "{text:?}");
    }
);

both!(logs_show_prints_every_event_in_words, |fx| {
    fx.test_config("");
    fx.sh("exit 3").expect_code(3);
    let id = ids_in_order(&fx, &[])[0].clone();
    let out = fx.run(&["logs", "show", &id]);
    out.ok();
    assert!(out.stdout.lines().count() >= 3, "{out:?}");
    for line in out.stdout.lines() {
        assert!(!line.contains(['{', '}']), "JSON in: {line}");
        assert!(!line.trim_end().ends_with("exit status"), "{line}");
    }
    assert!(
        out.stdout.contains("run.finished      exit status 3"),
        "{out:?}"
    );
    assert!(out.stdout.contains("Landlock ABI"), "{out:?}");
});

// Help is never refused, in a real sandbox too; running what does not work there is.
both!(help_works_inside_a_real_sandbox, |fx| {
    fx.test_config("");
    let out = fx.sh("wardcell help run | grep -c 'Usage: wardcell run'; \
         wardcell logs list --help | grep -c 'Usage: wardcell logs list'; \
         wardcell help zone enter | grep -c 'Usage: wardcell zone enter'; \
         wardcell logs list; echo rc=$?");
    out.ok();
    assert_eq!(out.stdout, "1\n1\n1\nrc=1\n", "{out:?}");
    assert!(
        out.stderr
            .starts_with("error: `wardcell logs` is not available inside a wardcell sandbox"),
        "{out:?}"
    );
});
