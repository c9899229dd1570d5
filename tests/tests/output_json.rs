//! Every `--output json`: one JSON object on one line (compact), its documented keys
//! there, lists as fields of the object, on the host and inside a zone
//! (docs/OUTPUT.md). As the invoking user and as an unprivileged uid.

use serde_json::Value;
use wardcell_tests::both;

/// Parse stdout as exactly one compact JSON object with at least the keys `keys`.
#[track_caller]
fn object(what: &str, stdout: &str, keys: &[&str]) -> Value {
    let line = stdout
        .strip_suffix('\n')
        .unwrap_or_else(|| panic!("{what}: no final newline: {stdout:?}"));
    assert!(!line.contains('\n'), "{what}: more than one line: {stdout}");
    let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{what}: {e}: {stdout}"));
    let obj = v
        .as_object()
        .unwrap_or_else(|| panic!("{what}: not an object: {stdout}"));
    for k in keys {
        assert!(obj.contains_key(*k), "{what}: no key {k:?}: {stdout}");
    }
    v
}

both!(every_command_prints_one_compact_object, |fx| {
    let bin = fx.bin.display();
    fx.config(&format!(
        r#"
[zones.agent]
profile = "net"
default = true

[zones.push]
profile = "net"
enter_from = ["agent"]

[profiles.net]
extends = "developer-readonly"
read = ["{bin}"]
network = {{ allow = ["allowed.example.invalid:443"] }}
"#
    ));
    // A run to have a log, with what the zone commands print inside it.
    let inside = fx.run(&[
        "run",
        "--",
        "/bin/sh",
        "-c",
        "wardcell zone list --output json; \
         wardcell zone why --output json example.com:443; \
         wardcell zone denials --output json",
    ]);
    inside.ok();
    let lines: Vec<&str> = inside.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{inside:#?}");
    object(
        "zone list (inside)",
        &format!("{}\n", lines[0]),
        &["current", "zones"],
    );
    object(
        "zone why",
        &format!("{}\n", lines[1]),
        &["target", "zone", "profile", "allowed", "rule", "allowed_in"],
    );
    object(
        "zone denials",
        &format!("{}\n", lines[2]),
        &["zone", "total", "recent"],
    );

    let host = |args: &[&str], code: i32, keys: &[&str]| -> Value {
        let mut all = args.to_vec();
        all.extend(["--output", "json"]);
        let out = fx.run(&all);
        out.expect_code(code);
        object(&args.join(" "), &out.stdout, keys)
    };
    host(&["zone", "list"], 0, &["zones"]);
    host(&["policy", "show"], 0, &["source", "start", "zones"]);
    host(
        &["policy", "why", "example.com:443"],
        1,
        &["allowed", "rule"],
    );
    let check = host(&["policy", "check"], 0, &["ok", "summary", "warnings"]);
    assert_eq!(check["ok"], true);
    let runs = host(&["logs", "list"], 0, &["runs"]);
    let id = runs["runs"][0]["run"].as_str().unwrap().to_string();
    let shown = host(&["logs", "show", &id], 0, &["run", "events"]);
    assert!(shown["events"].as_array().unwrap().len() >= 2);
    let verified = host(
        &["logs", "verify", &id],
        0,
        &[
            "run", "ok", "events", "finished", "running", "head", "damage",
        ],
    );
    assert_eq!(verified["ok"], true);
    host(&["approvals", "list"], 0, &["requests"]);
    let doctor = fx.run(&["doctor", "--output", "json"]);
    let d = object("doctor", &doctor.stdout, &["ok", "checks"]);
    assert_eq!(d["ok"], doctor.code == 0, "{doctor:#?}");
    assert!(d["checks"].as_array().unwrap().iter().all(|c| {
        c["check"].is_string() && ["ok", "warn", "fail"].contains(&c["level"].as_str().unwrap())
    }));

    // A failing check and a damaged log still print one object (and exit 1).
    fx.config("[zones.agent]\nprofile = \"nowhere\"\ndefault = true\n");
    let bad = host(&["policy", "check"], 1, &["ok", "error"]);
    assert_eq!(bad["ok"], false);
    let log = fx
        .home
        .join(".local/state/wardcell/runs")
        .join(format!("{id}.jsonl"));
    let text = std::fs::read_to_string(&log).unwrap();
    // The second event's time moved a century: the chain no longer holds.
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines[1] = lines[1].replacen("\"ts\":\"20", "\"ts\":\"21", 1);
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    let broken = host(&["logs", "verify", &id], 1, &["ok", "damage"]);
    assert_eq!(broken["ok"], false);
    assert!(broken["damage"]["line"].is_u64(), "{broken}");
});

// `--json` is `--output json` wherever `--output` is, inside a sandbox too; with it,
// every error is one JSON object on stderr (`error`, `exit_code`): a refusal, a usage
// error, a command refused where it does not work. Without it, errors are words.
both!(json_is_output_json_and_errors_are_json_too, |fx| {
    fx.test_config("network = { allow = [\"example.invalid:443\"] }\n");
    fx.run(&["run", "--", "/bin/true"]).ok();
    for args in [
        &["zone", "list"][..],
        &["policy", "show"],
        &["policy", "check"],
        &["policy", "why", "example.com:443"],
        &["logs", "list"],
        &["logs", "show", "latest"],
        &["logs", "verify", "latest"],
        &["approvals", "list"],
    ] {
        let long = fx.run(&[args, &["--output", "json"]].concat());
        let short = fx.run(&[args, &["--json"]].concat());
        assert_eq!(short.stdout, long.stdout, "{args:?}");
        assert_eq!(short.code, long.code, "{args:?}");
        assert!(short.stdout.starts_with('{'), "{args:?}: {short:#?}");
    }
    let inside = fx.sh(
        "wardcell zone list --json; wardcell zone why --json /etc; wardcell zone denials --json",
    );
    inside.ok();
    for line in inside.stdout.lines() {
        let _: Value = serde_json::from_str(line).expect("one JSON object a line");
    }
    assert_eq!(inside.stdout.lines().count(), 3, "{inside:#?}");
    for (args, code) in [
        (&["logs", "show", "nope", "--json"][..], 1),
        (&["policy", "show", "--bogus", "--json"], 2),
        (&["zone", "denials", "--json"], 1),
    ] {
        let out = fx.run(args);
        out.expect_code(code);
        assert_eq!(out.stderr.lines().count(), 1, "{out:#?}");
        let doc: Value = serde_json::from_str(&out.stderr).expect("a JSON error");
        assert!(
            doc["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{doc}"
        );
        assert_eq!(doc["exit_code"], code, "{doc}");
    }
    let words = fx.run(&["logs", "show", "nope"]);
    words.expect_code(1);
    assert!(words.stderr.starts_with("error: "), "{words:#?}");
});
