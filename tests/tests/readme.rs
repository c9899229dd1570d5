//! README's commands keep working: every `wardcell` command in its shell blocks and in
//! its text runs here (a `run`'s command replaced by `/bin/true`: the agents themselves
//! are tried in agents.rs), its configuration passes `policy check` and resolves, and its
//! test command is the one `.ci/run` runs. Both uids.

use std::fs;
use std::path::Path;
use std::time::Duration;

use wardcell_tests::{both, Out};

fn readme() -> String {
    fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md")).unwrap()
}

/// The fenced blocks of `kind` (`sh`, `toml`), in order.
fn blocks(text: &str, kind: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut open: Option<String> = None;
    for line in text.lines() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(k)) if k == kind => open = Some(String::new()),
            (Some(_), Some("")) => out.extend(open.take()),
            (Some(b), _) => {
                b.push_str(line);
                b.push('\n');
            }
            _ => {}
        }
    }
    out
}

/// Every `wardcell ...` command README shows: the lines of its shell blocks (without
/// comments) and the inline code spans that start with `wardcell `.
fn commands(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for b in blocks(text, "sh") {
        for line in b.lines() {
            let line = line.split(" # ").next().unwrap().trim();
            if line.starts_with("wardcell ") && !out.contains(&line.to_string()) {
                out.push(line.to_string());
            }
        }
    }
    // Inline code, joined across line breaks.
    let flat = text.replace('\n', " ");
    for span in flat.split('`').skip(1).step_by(2) {
        let span = span.split_whitespace().collect::<Vec<_>>().join(" ");
        if span.starts_with("wardcell run ") && !out.contains(&span) {
            out.push(span);
        }
    }
    out
}

/// Words as the shell splits these simple lines (no quotes in README's commands).
fn words(line: &str) -> Vec<String> {
    assert!(!line.contains(['\'', '"', '$', '|', ';', '&']), "{line}");
    line.split_whitespace().map(String::from).collect()
}

both!(readme_commands_work, |fx| {
    let text = readme();
    // Its configuration, with the approval plugin where this build has it.
    let tomls = blocks(&text, "toml");
    assert_eq!(tomls.len(), 1, "README shows one configuration");
    let plugin = fx.bin.join("wardcell-approve");
    let config = tomls[0].replace(
        "/usr/libexec/wardcell/wardcell-approve",
        plugin.to_str().unwrap(),
    );
    fx.config(&config);
    fs::create_dir_all(fx.home.join(".cache/pip")).unwrap();
    fx.own(&fx.home);
    let keys = [
        ("ANTHROPIC_API_KEY", "sk-ant-readme"),
        ("OPENAI_API_KEY", "sk-readme"),
        ("COMPANY_GIT_TOKEN", "readme-token"),
    ];
    let all = commands(&text);
    for want in [
        "wardcell run --profile claude-code -- claude",
        "wardcell run --profile codex -- codex",
        "wardcell policy check",
        "wardcell run -- claude",
        "wardcell approvals watch",
    ] {
        assert!(
            all.iter().any(|c| c == want),
            "README lost `{want}`: {all:?}"
        );
    }
    for line in &all {
        let mut argv = words(line);
        argv.remove(0);
        if argv[0] == "run" {
            // The command after `--` is an agent or a tool: /bin/true stands in.
            let dash = argv.iter().position(|a| a == "--").expect("run ... -- CMD");
            argv.truncate(dash + 1);
            argv.push("/bin/true".into());
        }
        let args: Vec<&str> = argv.iter().map(String::as_str).collect();
        if args == ["approvals", "watch"] {
            // It waits for requests until stopped: its first line, then stopped.
            let mut c = fx.cmd(&args);
            c.stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            let mut child = c.spawn().unwrap();
            std::thread::sleep(Duration::from_millis(500));
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            let said = String::from_utf8_lossy(&out.stderr);
            assert!(said.starts_with("waiting for approval requests"), "{said}");
            continue;
        }
        let out: Out = fx
            .cmd(&args)
            .envs(keys)
            .output()
            .expect("spawn wardcell")
            .into();
        assert_eq!(out.code, 0, "README's `{line}` failed: {out:#?}");
        assert!(!out.stderr.contains("warning"), "`{line}`: {out:#?}");
    }
    // The zones it describes, resolved.
    let zones = fx.run(&["zone", "list"]);
    zones.ok();
    assert!(
        zones.stdout.contains("push") && zones.stdout.contains("agent"),
        "{zones:#?}"
    );
});

// The test command README gives is the one CI runs, and the build it installs from names
// every program a run needs.
#[test]
fn readme_test_and_build_commands_are_ci_s() {
    let text = readme();
    let sh: Vec<String> = blocks(&text, "sh");
    let test = sh
        .iter()
        .flat_map(|b| b.lines())
        .find(|l| l.contains("cargo test --workspace"))
        .expect("README gives the test command");
    let ci = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/run")).unwrap();
    assert!(ci.lines().any(|l| l.trim() == test.trim()), "{test}");
    let build = sh
        .iter()
        .flat_map(|b| b.lines())
        .find(|l| l.contains("cargo build --release"))
        .expect("README gives the build");
    for program in [
        "wardcell",
        "wardcell-broker",
        "wardcell-shim",
        "wardcell-proxy",
        "wardcell-approve",
    ] {
        assert!(
            build.contains(&format!(" {program} ")) || build.contains(&format!(" {program})")),
            "{program}"
        );
    }
    assert!(build.ends_with("wardcell run -- bash"), "{build}");
}
