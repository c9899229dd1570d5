//! Approvals a person acts on: the reference plugin (`wardcell-approve`) queues each entry
//! into a zone with `requires_approval`, and the test answers it as the person would, with
//! `wardcell approvals` on the host. Real `wardcell run` + `wardcell zone enter`, the real
//! plugin, real sandboxes, as the invoking user and as an unprivileged uid.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;
use wardcell_tests::{both, Fixture, Out, Watched};

/// Zones `agent` (default, writes `agent_write`) and `push` (entered from agent, approval
/// required, with network and a write tree agent lacks), the staged `wardcell-approve` as
/// the plugin.
fn config(fx: &Fixture, timeout: Option<&str>, agent_write: &str) {
    let timeout = timeout
        .map(|t| format!("approval_timeout = \"{t}\"\n"))
        .unwrap_or_default();
    let extra = fx.outside.join("extra");
    fs::create_dir_all(&extra).unwrap();
    fx.own(&extra);
    fx.config(&format!(
        r#"
[zones.agent]
profile = "agent"
default = true

[zones.push]
profile = "push"
enter_from = ["agent"]
requires_approval = true
{timeout}
[profiles.agent]
extends = "readonly"
read = ["{bin}"]
write = ["{agent_write}"]

[profiles.push]
extends = "readonly"
read = ["{bin}"]
write = [".", "{extra}"]
network = {{ allow = ["git.example.com:443"] }}

[approval]
plugin = ["{bin}/wardcell-approve", "--queue"]
"#,
        bin = fx.bin.display(),
        extra = extra.display(),
    ));
}

/// `wardcell run -- /bin/sh -c SCRIPT` in the background.
fn start(fx: &Fixture, script: &str, tag: &str) -> Watched {
    Watched::spawn(fx, fx.cmd(&["run", "--", "/bin/sh", "-c", script]), tag)
}

/// `wardcell approvals list --output json`, waiting up to 20 s for `n` requests.
#[track_caller]
fn waiting(fx: &Fixture, n: usize) -> Vec<Value> {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let out = fx.run(&["approvals", "list", "--output", "json"]);
        out.ok();
        let doc: Value = serde_json::from_str(&out.stdout).unwrap();
        let list: Vec<Value> = doc["requests"].as_array().unwrap().clone();
        if list.len() == n {
            return list;
        }
        assert!(
            Instant::now() < until,
            "{} requests waiting, not {n}: {out:?}",
            list.len()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What the background run `tag` wrote on stderr, once it says it waits (up to 10 s).
#[track_caller]
fn said_while_waiting(fx: &Fixture, tag: &str) -> String {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let said = std::fs::read_to_string(fx.dir.join(format!("{tag}.err"))).unwrap_or_default();
        if said.contains("needs approval") || Instant::now() > until {
            return said;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn id_of(r: &Value) -> String {
    r["id"].as_str().unwrap().to_string()
}

fn approvals(fx: &Fixture, args: &[&str], sudo_user: Option<&str>) -> Out {
    let mut all = vec!["approvals"];
    all.extend_from_slice(args);
    let mut c = fx.cmd(&all);
    if let Some(u) = sudo_user {
        c.env("SUDO_USER", u);
    }
    c.output().unwrap().into()
}

/// Every `audit.decision` of every run of the fixture.
fn decisions(fx: &Fixture) -> Vec<Value> {
    let runs = fx.home.join(".local/state/wardcell/runs");
    let mut out = Vec::new();
    for e in fs::read_dir(&runs).unwrap() {
        for l in fs::read_to_string(e.unwrap().path()).unwrap().lines() {
            let v: Value = serde_json::from_str(l).unwrap();
            if v["event"] == "audit.decision" {
                out.push(v);
            }
        }
    }
    out
}

fn queue(fx: &Fixture) -> PathBuf {
    fx.home.join(".local/state/wardcell/approvals")
}

/// What the queue directory holds.
fn queue_files(fx: &Fixture) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(queue(fx))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(p).unwrap().permissions().mode() & 0o777
}

both!(
    an_approved_entry_runs_and_the_audit_names_approver_and_reference,
    |fx| {
        config(&fx, Some("10m"), ".");
        let run = start(
            &fx,
            "wardcell zone enter push -- touch pushed; echo rc=$?",
            "run",
        );
        let list = waiting(&fx, 1);
        let r = &list[0];
        let id = id_of(r);
        // The caller said at once that it waits, for how long, and where the person
        // answers: while it still waits.
        let said = said_while_waiting(&fx, "run");
        assert!(
            said.contains("wardcell: entering zone 'push' needs approval: waiting for at most 10m, then it is refused; the person running wardcell answers on the host: `wardcell approvals watch` shows the request\n"),
            "{said}"
        );
        assert_eq!(r["target"], "push", "{r}");
        assert_eq!(r["calling_zone"], "agent", "{r}");
        assert_eq!(r["chain"], serde_json::json!(["agent"]), "{r}");
        assert_eq!(r["command"], serde_json::json!(["touch", "pushed"]), "{r}");
        assert_eq!(r["cwd"], fx.proj.to_str().unwrap(), "{r}");
        let left = r["time_left_secs"].as_u64().unwrap();
        assert!((590..=600).contains(&left), "{r}");
        // The queue is closed to everyone else.
        assert_eq!(mode(&queue(&fx)), 0o700);
        assert_eq!(mode(&queue(&fx).join(format!("{id}.request"))), 0o600);
        // The text list, and what entering would add over agent, computed by the broker.
        let text = approvals(&fx, &["list"], None);
        text.ok();
        assert!(text.stdout.starts_with("ID "), "{text:?}");
        assert!(text.stdout.contains(&id), "{text:?}");
        let show = approvals(&fx, &["show", &id], None);
        show.ok();
        // JSON: one document, with the list's keys and the request's log, user and adds
        // (docs/OUTPUT.md); numbers as numbers.
        let json = approvals(&fx, &["show", &id, "--output", "json"], None);
        json.ok();
        let doc: Value = serde_json::from_str(&json.stdout).expect("one JSON document");
        assert_eq!(doc["id"], id.as_str(), "{doc}");
        assert!(
            doc["age_secs"].is_u64() && doc["time_left_secs"].is_u64(),
            "{doc}"
        );
        assert_eq!(doc["waiting"], true, "{doc}");
        assert!(doc["log"].is_string() && doc["adds"].is_object(), "{doc}");
        let extra = fx.outside.join("extra");
        for want in [
            "state:".to_string(),
            "waiting".to_string(),
            "git.example.com:443".to_string(),
            extra.display().to_string(),
            format!("{}/.local/state/wardcell/runs/", fx.home.display()),
            "touch pushed".to_string(),
        ] {
            assert!(show.stdout.contains(&want), "{want}: {show:?}");
        }
        // The project is written by both zones: not something the entry adds.
        let adds_write = show
            .stdout
            .lines()
            .find(|l| l.starts_with("adds: write:"))
            .unwrap();
        assert!(!adds_write.contains(fx.proj.to_str().unwrap()), "{show:?}");

        let ok = approvals(
            &fx,
            &["approve", &id, "--reason", "fine for the release"],
            Some("ana"),
        );
        ok.ok();
        assert!(
            ok.stdout.contains(&format!("approved request {id}")),
            "{ok:?}"
        );
        let (out, _) = run.finish(30);
        out.ok();
        assert!(out.stdout.contains("rc=0"), "{out:?}");
        assert!(
            out.stderr
                .contains("wardcell: entering zone 'push' was approved; the command starts\n"),
            "{out:?}"
        );
        assert!(fx.proj.join("pushed").exists());
        let d = decisions(&fx);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0]["decision"], "allowed", "{d:?}");
        assert_eq!(d[0]["approval"]["approver"], "ana", "{d:?}");
        assert_eq!(d[0]["approval"]["reference"], id.as_str(), "{d:?}");
        assert_eq!(d[0]["approval"]["reason"], "fine for the release", "{d:?}");
        // The plugin cleaned up after itself.
        assert_eq!(queue_files(&fx), Vec::<String>::new());
        // An answer is given once.
        let again = approvals(&fx, &["approve", &id], None);
        again.expect_code(1);
        assert!(
            again
                .stderr
                .starts_with("error: there is no approval request"),
            "{again:?}"
        );
    }
);

both!(a_denial_says_why_and_nothing_starts, |fx| {
    config(&fx, None, ".");
    let run = start(
        &fx,
        "wardcell zone enter push -- touch pushed; echo rc=$?",
        "run",
    );
    let id = id_of(&waiting(&fx, 1)[0]);
    assert!(
        said_while_waiting(&fx, "run").contains("needs approval: waiting until someone answers;"),
        "no waiting line"
    );
    // No time limit: none shown.
    let show = approvals(&fx, &["show", &id], None);
    assert!(show.stdout.contains("no limit"), "{show:?}");
    // A denial needs a reason.
    let bare = approvals(&fx, &["deny", &id], None);
    bare.expect_code(2);
    let no = approvals(
        &fx,
        &["deny", &id, "--reason", "not during the release freeze"],
        None,
    );
    no.ok();
    let (out, _) = run.finish(30);
    out.ok();
    assert!(out.stdout.contains("rc=1"), "{out:?}");
    assert!(
        out.stderr.contains(
            "error: entering zone 'push' was not approved: not during the release freeze\n"
        ),
        "{out:?}"
    );
    assert!(!fx.proj.join("pushed").exists());
    let d = decisions(&fx);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0]["decision"], "denied", "{d:?}");
    assert_eq!(d[0]["reason"], "not during the release freeze", "{d:?}");
    assert_eq!(d[0]["approval"]["reference"], id.as_str(), "{d:?}");
    // The host user (no sudo): a name, or the uid where the account has none.
    let approver = d[0]["approval"]["approver"].as_str().unwrap();
    assert!(!approver.is_empty(), "{d:?}");
    if fx.uid() == 0 {
        assert_eq!(approver, "root", "{d:?}");
    }
});

both!(nobody_answering_times_out, |fx| {
    config(&fx, Some("2s"), ".");
    let start_at = Instant::now();
    let out = fx.sh("wardcell zone enter push -- touch pushed; echo rc=$?");
    out.ok();
    assert!(out.stdout.contains("rc=1"), "{out:?}");
    // The plugin answers just before the broker's own limit; either says the limit.
    assert!(
        out.stderr
            .contains("error: entering zone 'push' was not approved: ")
            && out.stderr.contains("approval_timeout"),
        "{out:?}"
    );
    assert!(
        out.stderr
            .contains("needs approval: waiting for at most 2s, then it is refused;"),
        "{out:?}"
    );
    assert!(start_at.elapsed() < Duration::from_secs(20));
    assert!(!fx.proj.join("pushed").exists());
    assert_eq!(waiting(&fx, 0), Vec::<Value>::new());
    let d = decisions(&fx);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0]["decision"], "denied", "{d:?}");
});

both!(two_requests_at_once_are_answered_each_on_its_own, |fx| {
    config(&fx, Some("10m"), ".");
    // A session bus that is not there: the notification fails, the request does not.
    let mut cmd = fx.cmd(&[
        "run",
        "--",
        "/bin/sh",
        "-c",
        "wardcell zone enter push -- touch a; echo rc=$?",
    ]);
    cmd.env("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent/bus");
    let a = Watched::spawn(&fx, cmd, "a");
    let first = id_of(&waiting(&fx, 1)[0]);
    // Queued in a later second (the queue's times are in seconds), so that "newest
    // first" has an order to show.
    let record: Value = serde_json::from_str(
        &fs::read_to_string(queue(&fx).join(format!("{first}.request"))).unwrap(),
    )
    .unwrap();
    let queued = record["queued"].as_u64().expect("a queued time");
    wardcell_tests::wait_until(5, "the next second", || {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        now.unwrap().as_secs() > queued
    });
    let b = start(&fx, "wardcell zone enter push -- touch b; echo rc=$?", "b");
    let list = waiting(&fx, 2);
    assert_eq!(list[0]["command"][1], "b", "newest first: {list:?}");
    assert_eq!(list[1]["command"][1], "a", "{list:?}");
    assert_ne!(list[0]["run"], list[1]["run"]);
    let (id_b, id_a) = (id_of(&list[0]), id_of(&list[1]));
    approvals(&fx, &["deny", &id_b, "--reason", "only a"], None).ok();
    approvals(&fx, &["approve", &id_a], None).ok();
    let (out_a, _) = a.finish(30);
    let (out_b, _) = b.finish(30);
    assert!(out_a.stdout.contains("rc=0"), "{out_a:?}");
    assert!(out_b.stdout.contains("rc=1"), "{out_b:?}");
    assert!(out_b.stderr.contains("not approved: only a"), "{out_b:?}");
    assert!(fx.proj.join("a").exists());
    assert!(!fx.proj.join("b").exists());
    let d = decisions(&fx);
    let by_ref = |id: &str| {
        d.iter()
            .find(|x| x["approval"]["reference"] == id)
            .unwrap_or_else(|| panic!("{id}: {d:?}"))["decision"]
            .clone()
    };
    assert_eq!(by_ref(&id_a), "allowed");
    assert_eq!(by_ref(&id_b), "denied");
});

both!(
    an_approval_after_the_caller_went_away_is_recorded_and_starts_nothing,
    |fx| {
        config(&fx, Some("10m"), ".");
        let mut run = start(
        &fx,
        "wardcell zone enter push -- touch late; echo rc=$?; while [ ! -e done ]; do sleep 0.05; done",
        "run",
    );
        let id = id_of(&waiting(&fx, 1)[0]);
        // The caller, seen from the host: the `wardcell` under the run's shell.
        let caller = run.tree.wait_for("wardcell", 1).into_iter().next().unwrap();
        assert_eq!(kill9(caller.pid), 0, "could not kill the caller {caller:?}");
        // Its plugin is ended with it: the request waits no more.
        waiting(&fx, 0);
        let show = approvals(&fx, &["show", &id], None);
        assert!(show.stdout.contains("no longer waiting"), "{show:?}");
        let late = approvals(&fx, &["approve", &id, "--reason", "too late"], Some("ana"));
        late.expect_code(1);
        assert!(
            late.stderr.starts_with(&format!(
                "error: request {id} is no longer waiting (its caller went away"
            )) && late
                .stderr
                .contains("your answer is recorded, but nothing will start"),
            "{late:?}"
        );
        // Recorded: the answer is kept beside the request.
        let answer: Value = serde_json::from_str(
            &fs::read_to_string(queue(&fx).join(format!("{id}.answer"))).unwrap(),
        )
        .unwrap();
        assert_eq!(answer["approved"], true);
        assert_eq!(answer["approver"], "ana");
        // Half a second for a late start to show (it must not: an absence, not a wait).
        std::thread::sleep(Duration::from_millis(500));
        fx.write(&fx.proj.join("done"), "");
        let (out, _) = run.finish(30);
        out.ok();
        assert!(!fx.proj.join("late").exists(), "the command started");
        let d = decisions(&fx);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0]["decision"], "denied", "{d:?}");
        assert!(
            d[0]["reason"]
                .as_str()
                .unwrap()
                .contains("the caller went away before the approval plugin answered"),
            "{d:?}"
        );
        assert!(
            !String::from_utf8_lossy(&fs::read(fx.dir.join("run.out")).unwrap_or_default())
                .contains("rc=0")
        );
    }
);

/// SIGKILL to `pid`, through the kill command (the tests crate keeps `unsafe` to its lib).
fn kill9(pid: u32) -> i32 {
    std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap()
        .code()
        .unwrap_or(1)
}

both!(
    a_sandbox_that_writes_home_can_neither_read_nor_answer_the_queue,
    |fx| {
        config(&fx, Some("10m"), "~");
        let run = start(
            &fx,
            r#"wardcell zone enter push -- touch pushed & p=$!
while [ ! -e id ]; do sleep 0.05; done; id=$(cat id)
Q=$HOME/.local/state/wardcell/approvals
echo "ls:[$(ls -A "$HOME/.local/state/wardcell" 2>&1)]"
cat "$Q/$id.request"; echo cat=$?
mkdir -p "$Q" 2>/dev/null; echo mkdir=$?
printf '{"approved": true, "approver": "sandbox"}' > "$Q/$id.answer"; echo write=$?
mv "$HOME/.local/state" "$HOME/moved" 2>/dev/null; echo mv=$?
wardcell approvals approve "$id"; echo approvals=$?
touch "$HOME/tried"
wait $p; echo enter=$?"#,
            "run",
        );
        let id = id_of(&waiting(&fx, 1)[0]);
        fx.write(&fx.proj.join("id"), &id);
        let until = Instant::now() + Duration::from_secs(20);
        while !fx.home.join("tried").exists() {
            assert!(Instant::now() < until, "the sandbox never tried");
            std::thread::sleep(Duration::from_millis(50));
        }
        // Still waiting, unanswered: nothing the sandbox did reached the queue.
        assert_eq!(id_of(&waiting(&fx, 1)[0]), id);
        assert_eq!(queue_files(&fx), vec![format!("{id}.request")]);
        approvals(&fx, &["deny", &id, "--reason", "checked"], None).ok();
        let (out, _) = run.finish(30);
        out.ok();
        // The state directory is masked; nothing in it can be listed, read, made or moved.
        assert!(out.stdout.contains("ls:["), "{out:?}");
        assert!(!out.stdout.contains(&format!("{id}.request")), "{out:?}");
        for step in ["cat", "mkdir", "write", "mv", "approvals"] {
            assert!(out.stdout.contains(&format!("{step}=")), "{step}: {out:?}");
            assert!(
                !out.stdout.contains(&format!("{step}=0")),
                "{step}: {out:?}"
            );
        }
        assert!(out.stdout.contains("enter=1"), "{out:?}");
        assert!(!out.stdout.contains("calling_zone"), "{out:?}");
        assert!(
            out.stderr
                .contains("error: `wardcell approvals` is not available inside a wardcell sandbox"),
            "{out:?}"
        );
        assert!(out.stderr.contains("not approved: checked"), "{out:?}");
        assert!(!fx.proj.join("pushed").exists());
        assert!(fx.home.join(".local/state/wardcell/runs").is_dir());
    }
);

both!(watch_prints_each_request_as_it_arrives, |fx| {
    config(&fx, Some("10m"), ".");
    let mut watch = fx
        .cmd(&["approvals", "watch"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let run = start(&fx, "wardcell zone enter push -- true; echo rc=$?", "run");
    let id = id_of(&waiting(&fx, 1)[0]);
    use std::io::BufRead;
    let mut line = String::new();
    std::io::BufReader::new(watch.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _ = watch.kill();
    let _ = watch.wait();
    assert!(
        line.starts_with(&format!("{id}  agent > push  true  in ")),
        "{line}"
    );
    approvals(&fx, &["approve", &id], None).ok();
    let (out, _) = run.finish(30);
    assert!(out.stdout.contains("rc=0"), "{out:?}");
});

both!(policy_check_refuses_approval_without_a_plugin, |fx| {
    fx.config(
        "[zones.agent]\nprofile = \"readonly\"\ndefault = true\n\n[zones.release]\nprofile = \"readonly\"\nenter_from = [\"agent\"]\nrequires_approval = true\n",
    );
    let out = fx.run(&["policy", "check"]);
    out.expect_code(1);
    assert!(
        out.stderr.starts_with(
            "error: zone 'release' requires approval, but no approval plugin is configured"
        ) && out.stderr.lines().count() == 1,
        "{out:?}"
    );
});

// Another user cannot answer: as root's fixture, the unprivileged uid is refused the
// queue; as the unprivileged uid's, an answer file that root placed (not the queue's
// owner) is refused by the plugin, and the entry with it.
both!(another_user_cannot_answer, |fx| {
    if !wardcell_tests::is_root() {
        wardcell_tests::skipped("needs root to act as a second user");
        return;
    }
    config(&fx, Some("10m"), ".");
    let run = start(
        &fx,
        "wardcell zone enter push -- touch pushed; echo rc=$?",
        "run",
    );
    let id = id_of(&waiting(&fx, 1)[0]);
    match fx.who {
        wardcell_tests::As::Invoker => {
            use std::os::unix::process::CommandExt;
            let uid = wardcell_tests::test_uid();
            let out: Out = fx
                .cmd(&["approvals", "approve", &id])
                .uid(uid)
                .gid(uid)
                .output()
                .unwrap()
                .into();
            out.expect_code(1);
            assert!(
                out.stderr.starts_with("error: ")
                    && out.stderr.contains("the approval queue")
                    && out.stderr.lines().count() == 1,
                "{out:?}"
            );
            assert_eq!(queue_files(&fx), vec![format!("{id}.request")]);
            approvals(&fx, &["deny", &id, "--reason", "checked"], None).ok();
            let (out, _) = run.finish(30);
            assert!(out.stderr.contains("not approved: checked"), "{out:?}");
        }
        wardcell_tests::As::User => {
            let answer = queue(&fx).join(format!("{id}.answer"));
            fs::write(&answer, r#"{"approved": true, "approver": "root"}"#).unwrap();
            let (out, _) = run.finish(30);
            assert!(out.stdout.contains("rc=1"), "{out:?}");
            assert!(
                out.stderr.contains(&format!(
                    "not approved: the answer to approval request {id} is unusable (not a file of yours closed to others)"
                )),
                "{out:?}"
            );
        }
    }
    assert!(!fx.proj.join("pushed").exists());
});

/// The invisible, format and direction characters of issue 19, item 9.
const HIDDEN: [char; 6] = [
    '\u{200b}', '\u{202e}', '\u{2060}', '\u{feff}', '\u{00ad}', '\u{3164}',
];

// Issue 19, item 9: invisible and direction characters reached the person's screen as
// themselves, and words were joined by spaces so their boundaries were lost. Each is now
// written out, and the command is quoted as a shell would need it, in `approvals list`,
// `approvals show` and `logs show` alike.
both!(hidden_characters_are_written_out_and_words_quoted, |fx| {
    config(&fx, None, ".");
    let words: Vec<String> = HIDDEN.iter().map(|c| format!("a{c}b")).collect();
    let script = format!(
        "wardcell zone enter push -- echo 'two words' {}; echo rc=$?",
        words.join(" ")
    );
    let run = start(&fx, &script, "run");
    let id = id_of(&waiting(&fx, 1)[0]);
    let want: Vec<String> = HIDDEN
        .iter()
        .map(|&c| format!("$'a\\u{:04x}b'", c as u32))
        .collect();
    let quoted = format!("echo 'two words' {}", want.join(" "));
    let list = approvals(&fx, &["list"], None);
    let show = approvals(&fx, &["show", &id], None);
    for out in [&list, &show] {
        out.ok();
        assert!(
            !out.stdout.contains(HIDDEN) && !out.stderr.contains(HIDDEN),
            "{out:?}"
        );
    }
    assert!(show.stdout.contains(&quoted), "{quoted}\n{show:?}");
    approvals(&fx, &["deny", &id, "--reason", "no"], None).ok();
    let (out, _) = run.finish(30);
    assert!(out.stdout.contains("rc=1"), "{out:?}");
    let runs = fx.home.join(".local/state/wardcell/runs");
    let log = fs::read_dir(&runs).unwrap().next().unwrap().unwrap().path();
    let run_id = log.file_stem().unwrap().to_str().unwrap().to_string();
    for args in [&["logs", "show", &run_id][..], &["logs", "list"]] {
        let out = fx.run(args);
        out.ok();
        assert!(!out.stdout.contains(HIDDEN), "{out:?}");
        if args[1] == "show" {
            assert!(out.stdout.contains(&quoted), "{quoted}\n{out:?}");
        }
    }
});

// Issue 19, item 10: `{"approved": false, "approved": true}` approved (the last key
// won). An answer naming a key twice is refused, and nothing starts.
both!(an_answer_with_a_duplicate_key_is_refused, |fx| {
    config(&fx, None, ".");
    let plugin = fx.dir.join("dup.sh");
    fx.write(
        &plugin,
        "#!/bin/sh\ncat >/dev/null\necho '{\"approved\": false, \"approved\": true, \"reason\": \"ok\"}'\n",
    );
    fs::set_permissions(&plugin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let cfg = fx.home.join(".config/wardcell/zones.toml");
    let text = fs::read_to_string(&cfg).unwrap();
    let start_at = text.find("plugin = [").unwrap();
    let end_at = start_at + text[start_at..].find('\n').unwrap();
    let text = format!(
        "{}plugin = [\"{}\"]{}",
        &text[..start_at],
        plugin.display(),
        &text[end_at..]
    );
    fx.write(&cfg, &text);
    let out = fx.sh("wardcell zone enter push -- touch pushed; echo rc=$?");
    out.ok();
    assert!(out.stdout.contains("rc=1"), "{out:?}");
    assert!(
        out.stderr.contains(
            "error: entering zone 'push' was not approved: the approval plugin's answer is refused: it names \"approved\" more than once"
        ),
        "{out:?}"
    );
    assert!(!fx.proj.join("pushed").exists());
    let d = decisions(&fx);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0]["decision"], "denied", "{d:?}");
});
