//! Fault injection: each process of a run killed at each stage (plan writer, broker,
//! shim, command, proxy, approval plugin, `zone enter` caller), and the state disk full.
//! After each, nothing of the run is left (no process descended from the broker, no
//! run directory in the runtime directory, no host mount added), the exit status is
//! what DESIGN.md says, and the log verifies (or, for a broker killed with SIGKILL, is
//! reported cut, as documented) and its events say what happened. Real sandboxes, run
//! as the invoking user and as an unprivileged uid; the signals are sent by that uid.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use wardcell_tests::{both, host_mounts, run_dirs, Fixture, Out, SmallFs, Tree, Watched};

/// One run's surroundings: its own runtime and state directories, and the host's mounts
/// before it.
struct Scene<'a> {
    fx: &'a Fixture,
    rt: PathBuf,
    state: PathBuf,
    mounts: Vec<String>,
}

impl<'a> Scene<'a> {
    /// A runtime directory of its own (short: a socket path holds at most 107 bytes)
    /// and a state directory named after `tag`; `state` replaces the latter.
    fn new(fx: &'a Fixture, tag: &str, state: Option<PathBuf>) -> Scene<'a> {
        static N: AtomicUsize = AtomicUsize::new(0);
        let rt = PathBuf::from(format!(
            "/var/tmp/wardcell-faults-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = fs::remove_dir_all(&rt);
        fs::create_dir_all(&rt).unwrap();
        fs::set_permissions(&rt, fs::Permissions::from_mode(0o700)).unwrap();
        fx.own(&rt);
        let state = state.unwrap_or_else(|| {
            let s = fx.dir.join(format!("state-{tag}"));
            fs::create_dir_all(&s).unwrap();
            fx.own(&s);
            s
        });
        Scene {
            fx,
            rt,
            state,
            mounts: host_mounts(),
        }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = self.fx.cmd(args);
        c.env("XDG_RUNTIME_DIR", &self.rt)
            .env("XDG_STATE_HOME", &self.state);
        c
    }

    fn run(&self, args: &[&str]) -> Out {
        self.cmd(args).output().unwrap().into()
    }

    /// `wardcell run -- /bin/sh -c SCRIPT` in the background.
    fn start(&self, script: &str) -> Watched {
        Watched::spawn(
            self.fx,
            self.cmd(&["run", "--", "/bin/sh", "-c", script]),
            "run",
        )
    }

    /// The run's log (the only one), as its id and text.
    fn log(&self) -> (String, String) {
        let runs = self.state.join("wardcell/runs");
        let logs: Vec<PathBuf> = fs::read_dir(&runs)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .collect();
        assert_eq!(logs.len(), 1, "{logs:?}");
        let id = logs[0].file_stem().unwrap().to_str().unwrap().to_string();
        (id, fs::read_to_string(&logs[0]).unwrap())
    }

    /// `wardcell logs verify` of the run's log; with `finished`, it must pass and say the
    /// run finished, without, it must report the log cut.
    #[track_caller]
    fn verify(&self, finished: bool) -> String {
        let (id, text) = self.log();
        for line in text.lines() {
            serde_json::from_str::<serde_json::Value>(line).expect(line);
        }
        let out = self.run(&["logs", "verify", &id]);
        if finished {
            out.ok();
            assert!(
                out.stdout
                    .contains("the chain is intact and the run finished"),
                "{out:#?}"
            );
        } else {
            out.expect_code(1);
            assert!(
                out.stderr.contains(
                    "without run.finished, and the run is over: its last lines were cut, or its broker was killed"
                ),
                "{out:#?}"
            );
        }
        text
    }

    /// Nothing of the run is left: no process, no run directory, no new host mount.
    #[track_caller]
    fn assert_clean(&self, tree: &Tree) {
        tree.assert_all_gone();
        assert_eq!(
            run_dirs(&self.rt),
            Vec::<String>::new(),
            "a run directory is left"
        );
        assert_eq!(host_mounts(), self.mounts, "the host's mounts changed");
    }

    /// After a broker killed with SIGKILL: no process is left, its run directory is (it
    /// could not clean up), unlocked, and the next run removes it.
    #[track_caller]
    fn assert_swept(&self, tree: &Tree) {
        tree.assert_all_gone();
        assert_eq!(run_dirs(&self.rt).len(), 1, "{:?}", run_dirs(&self.rt));
        let next = Watched::spawn(self.fx, self.cmd(&["run", "--", "true"]), "next");
        let (out, next) = next.finish(30);
        out.ok();
        next.assert_all_gone();
        assert_eq!(run_dirs(&self.rt), Vec::<String>::new(), "not swept");
        assert_eq!(host_mounts(), self.mounts, "the host's mounts changed");
    }
}

impl Drop for Scene<'_> {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.rt);
    }
}

/// Zones `agent` (default) and `push` (entered from agent), both writing the project and
/// running the staged binaries; `push_extra` and `profile_extra` are added to the zone
/// and the profile, `extra` at the end.
fn config(fx: &Fixture, push_extra: &str, profile_extra: &str, extra: &str) {
    fx.config(&format!(
        "[zones.agent]\nprofile = \"dev\"\ndefault = true\n\n[zones.push]\nprofile = \"dev\"\nenter_from = [\"agent\"]\n{push_extra}\n[profiles.dev]\nextends = \"developer-readonly\"\nread = [\"{bin}\"]\n{profile_extra}\n{extra}",
        bin = fx.bin.display()
    ));
}

/// Send `sig` to `pid` as the fixture's uid (`kill` run as that user).
#[track_caller]
fn kill_as(fx: &Fixture, pid: u32, sig: &str) {
    let mut c = Command::new("kill");
    c.arg(format!("-{sig}")).arg(pid.to_string());
    if fx.uid() != fx_invoker_uid() {
        use std::os::unix::process::CommandExt;
        c.uid(fx.uid()).gid(fx.uid());
    }
    assert!(c.status().unwrap().success(), "kill -{sig} {pid}");
}

fn fx_invoker_uid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

/// Wait up to 10 s for `path` to exist.
#[track_caller]
fn wait_file(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn events(log: &str, event: &str) -> Vec<serde_json::Value> {
    log.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["event"] == event)
        .collect()
}

/// The `exit_status` of the log's `run.finished`.
#[track_caller]
fn finished_status(log: &str) -> serde_json::Value {
    let f = events(log, "run.finished");
    assert_eq!(f.len(), 1, "{log}");
    f[0]["exit_status"].clone()
}

fn probe(fx: &Fixture) -> String {
    fx.bin.join("wardcell-probe").display().to_string()
}

// SIGTERM and SIGINT to `wardcell run` (the broker) reach the command, which dies of
// them; the run ends with 128+N, finished and audited.
both!(the_broker_relays_term_and_int_and_finishes, |fx| {
    config(&fx, "", "", "");
    for (sig, code) in [("TERM", 143), ("INT", 130)] {
        let scene = Scene::new(&fx, sig, None);
        let beat = fx.proj.join(format!("beat-{sig}"));
        let mut cmd = scene.cmd(&[
            "run",
            "--",
            &probe(&fx),
            "heartbeat",
            beat.to_str().unwrap(),
        ]);
        // A signal ignored when `wardcell run` starts is not forwarded (a background job
        // of a shell without job control ignores SIGINT): start with both at default.
        // SAFETY: signal() with SIG_DFL is async-signal-safe and touches no memory.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                libc::signal(libc::SIGTERM, libc::SIG_DFL);
                Ok(())
            });
        }
        let run = Watched::spawn(&fx, cmd, "run");
        wait_file(&beat);
        kill_as(&fx, run.tree.client.pid, sig);
        let (out, tree) = run.finish(30);
        out.expect_code(code);
        assert_eq!(out.stderr, "", "{out:#?}");
        scene.assert_clean(&tree);
        let log = scene.verify(true);
        assert_eq!(finished_status(&log), code, "{log}");
    }
});

// SIGKILL to the broker while the first sandbox's command runs, and while an entered
// zone's command runs: every sandbox dies with it, its run directory is left unlocked
// for the next run to sweep, and `logs verify` reports the log cut.
both!(a_broker_killed_takes_every_sandbox_with_it, |fx| {
    config(&fx, "", "", "");
    for entered in [false, true] {
        let scene = Scene::new(&fx, &format!("kill-{entered}"), None);
        let beat = fx.proj.join(format!("beat-{entered}"));
        let cmd = format!("{} heartbeat {}", probe(&fx), beat.display());
        let script = if entered {
            format!("wardcell zone enter push -- {cmd}")
        } else {
            format!("exec {cmd}")
        };
        let mut run = scene.start(&script);
        wait_file(&beat);
        let shims = run.tree.wait_for("wardcell-shim", 1 + entered as usize);
        assert_eq!(shims.len(), 1 + entered as usize, "{shims:?}");
        run.tree.look();
        let broker = run.tree.broker().pid;
        kill_as(&fx, broker, "KILL");
        let (out, tree) = run.finish(30);
        out.expect_code(137);
        // Every process of the sandboxes dies (asynchronously) with the broker.
        tree.assert_all_gone();
        wardcell_tests::assert_heartbeat_stopped(&beat, "the command outlived the broker");
        let log = scene.verify(false);
        scene.assert_swept(&tree);
        let decisions = events(&log, "audit.decision");
        if entered {
            assert_eq!(decisions.len(), 1, "{log}");
            assert_eq!(decisions[0]["decision"], "allowed", "{log}");
            assert_eq!(decisions[0]["target"], "push", "{log}");
        } else {
            assert!(decisions.is_empty(), "{log}");
        }
        assert!(events(&log, "audit.completed").is_empty(), "{log}");
    }
});

// SIGKILL to the first sandbox's shim (its init): the PID namespace dies, the run ends
// with 137, finished and audited.
both!(a_killed_first_shim_ends_the_run_with_137, |fx| {
    config(&fx, "", "", "");
    let scene = Scene::new(&fx, "shim", None);
    let beat = fx.proj.join("beat");
    let mut run = scene.start(&format!("exec {} heartbeat {}", probe(&fx), beat.display()));
    wait_file(&beat);
    let shim = run.tree.wait_for("wardcell-shim", 1).remove(0);
    run.tree.look();
    kill_as(&fx, shim.pid, "KILL");
    let (out, tree) = run.finish(30);
    out.expect_code(137);
    tree.assert_all_gone();
    wardcell_tests::assert_heartbeat_stopped(&beat, "the command outlived its init");
    scene.assert_clean(&tree);
    let log = scene.verify(true);
    assert_eq!(finished_status(&log), 137, "{log}");
});

// SIGKILL to an entered sandbox's shim: its caller gets 137, the completion is audited,
// and the run goes on to finish with its own command's status.
both!(a_killed_entered_shim_is_relayed_to_its_caller, |fx| {
    config(&fx, "", "", "");
    let scene = Scene::new(&fx, "eshim", None);
    let beat = fx.proj.join("beat");
    let mut run = scene.start(&format!(
        "wardcell zone enter push -- {} heartbeat {}; echo rc=$?; exit 3",
        probe(&fx),
        beat.display()
    ));
    wait_file(&beat);
    let shims = run.tree.wait_for("wardcell-shim", 2);
    // The entered one started last.
    let entered = shims
        .iter()
        .max_by_key(|p| (p.start, p.pid))
        .unwrap()
        .clone();
    kill_as(&fx, entered.pid, "KILL");
    let (out, tree) = run.finish(30);
    out.expect_code(3);
    assert_eq!(out.stdout, "rc=137\n", "{out:#?}");
    tree.assert_all_gone();
    wardcell_tests::assert_heartbeat_stopped(&beat, "the command outlived its init");
    scene.assert_clean(&tree);
    let log = scene.verify(true);
    let completed = events(&log, "audit.completed");
    assert_eq!(completed.len(), 1, "{log}");
    assert_eq!(completed[0]["exit_status"], 137, "{log}");
    assert_eq!(finished_status(&log), 3, "{log}");
});

// SIGKILL and SIGTERM to the command itself, in the first sandbox and in an entered
// one: the status (137, 143) is relayed and audited.
both!(a_killed_command_is_relayed_as_128_plus_n, |fx| {
    config(&fx, "", "", "");
    for (sig, code) in [("KILL", 137), ("TERM", 143)] {
        let scene = Scene::new(&fx, sig, None);
        let beat = fx.proj.join(format!("beat-{sig}"));
        let ebeat = fx.proj.join(format!("ebeat-{sig}"));
        let mut run = scene.start(&format!(
            "wardcell zone enter push -- {p} heartbeat {e}; echo rc=$?; exec {p} heartbeat {b}",
            p = probe(&fx),
            e = ebeat.display(),
            b = beat.display()
        ));
        // The entered command first, then the first sandbox's.
        wait_file(&ebeat);
        let probes = run.tree.wait_for("wardcell-probe", 1);
        assert_eq!(probes.len(), 1, "{probes:?}");
        kill_as(&fx, probes[0].pid, sig);
        wait_file(&beat);
        let probes = run.tree.wait_for("wardcell-probe", 1);
        assert_eq!(probes.len(), 1, "{probes:?}");
        kill_as(&fx, probes[0].pid, sig);
        let (out, tree) = run.finish(30);
        out.expect_code(code);
        assert_eq!(out.stdout, format!("rc={code}\n"), "{out:#?}");
        scene.assert_clean(&tree);
        let log = scene.verify(true);
        let completed = events(&log, "audit.completed");
        assert_eq!(completed.len(), 1, "{log}");
        assert_eq!(completed[0]["exit_status"], code, "{log}");
        assert_eq!(finished_status(&log), code, "{log}");
    }
});

// SIGKILL to the proxy mid-run (tests/tests/lifecycle.rs checks the sandbox's side):
// `proxy.died` is audited, nothing is left, and the run ends with its command's status.
both!(
    a_killed_proxy_leaves_nothing_and_the_command_decides,
    |fx| {
        config(&fx, "", "network = { allow = [\"example.com:80\"] }", "");
        let scene = Scene::new(&fx, "proxy", None);
        let (ready, go) = (fx.proj.join("ready"), fx.proj.join("go"));
        let mut run = scene.start(&format!(
            "touch {r}; while [ ! -e {g} ]; do sleep 0.02; done; exit 7",
            r = ready.display(),
            g = go.display()
        ));
        wait_file(&ready);
        let proxy = run.tree.wait_for("wardcell-proxy", 1).remove(0);
        kill_as(&fx, proxy.pid, "KILL");
        // The command ends once the broker has noticed (else the run's end could come
        // first, and the death would be part of it).
        let deadline = Instant::now() + Duration::from_secs(10);
        while !scene.log().1.contains("\"proxy.died\"") {
            assert!(
                Instant::now() < deadline,
                "the proxy's death was not noticed"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        fx.write(&go, "");
        let (out, tree) = run.finish(30);
        out.expect_code(7);
        assert_eq!(
        out.stderr,
        "error: the proxy of zone 'agent' died (killed by signal 9); connections from its sandbox now fail; start the run again to get its network back\n"
    );
        scene.assert_clean(&tree);
        let log = scene.verify(true);
        let died = events(&log, "proxy.died");
        assert_eq!(died.len(), 1, "{log}");
        assert_eq!(died[0]["signal"], 9, "{log}");
        assert_eq!(finished_status(&log), 7, "{log}");
    }
);

/// `push` requires approval from a plugin that notes its pid and its child's in `~/plugin`
/// and waits for ever.
fn pending_plugin(fx: &Fixture) -> PathBuf {
    let notes = fx.home.join("plugin");
    fs::create_dir_all(&notes).unwrap();
    fx.own(&notes);
    let script = fx.dir.join("approve.sh");
    fx.write(
        &script,
        &format!(
            "#!/bin/sh\nn={}\nsleep 1000 &\necho $! > $n/child\necho $$ > $n/pid.tmp; mv $n/pid.tmp $n/pid\nexec sleep 1000\n",
            notes.display()
        ),
    );
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    config(
        fx,
        "requires_approval = true",
        "",
        &format!("[approval]\nplugin = [\"{}\"]\n", script.display()),
    );
    notes
}

fn pid_in(file: &Path) -> u32 {
    fs::read_to_string(file).unwrap().trim().parse().unwrap()
}

// SIGKILL to the approval plugin while the entry waits for it: the entry is refused and
// audited, the plugin's group (its child) is ended, and the run goes on.
both!(a_killed_plugin_refuses_the_entry, |fx| {
    let notes = pending_plugin(&fx);
    let scene = Scene::new(&fx, "plugin", None);
    let mut run = scene.start("wardcell zone enter push -- true; echo rc=$?; exit 0");
    wait_file(&notes.join("pid"));
    // The plugin and its child are seen under the broker before either is killed.
    run.tree.wait_for("sleep", 2);
    kill_as(&fx, pid_in(&notes.join("pid")), "KILL");
    let (out, tree) = run.finish(30);
    out.ok();
    assert_eq!(out.stdout, "rc=1\n", "{out:#?}");
    assert_eq!(
        out.stderr,
        "wardcell: entering zone 'push' needs approval: waiting until someone answers; the approval plugin approve.sh asks someone\n\
         error: entering zone 'push' was not approved: the approval plugin failed (signal: 9 (SIGKILL))\n",
        "{out:#?}"
    );
    scene.assert_clean(&tree);
    let log = scene.verify(true);
    let decisions = events(&log, "audit.decision");
    assert_eq!(decisions.len(), 1, "{log}");
    assert_eq!(decisions[0]["decision"], "denied", "{log}");
    assert!(
        decisions[0]["reason"]
            .as_str()
            .unwrap()
            .contains("the approval plugin failed (signal: 9 (SIGKILL))"),
        "{log}"
    );
});

// SIGKILL, from the host, to the `zone enter` caller while the plugin is pending: the
// plugin's group is ended, the attempt audited, and the run ends with its command.
both!(a_caller_killed_while_the_plugin_is_pending, |fx| {
    let notes = pending_plugin(&fx);
    let scene = Scene::new(&fx, "caller", None);
    // The command ends once told to (after the plugin is gone): the run's end must not
    // be what ends the plugin.
    let go = fx.proj.join("go");
    let mut run = scene.start(&format!(
        "wardcell zone enter push -- true; echo rc=$?; while [ ! -e {} ]; do sleep 0.02; done; exit 4",
        go.display()
    ));
    wait_file(&notes.join("pid"));
    let plugin = run.tree.wait_for("sleep", 2);
    let caller = run.tree.wait_for("wardcell", 1);
    assert_eq!(caller.len(), 1, "{caller:?}");
    kill_as(&fx, caller[0].pid, "KILL");
    let deadline = Instant::now() + Duration::from_secs(5);
    while plugin.iter().any(wardcell_tests::alive) {
        assert!(Instant::now() < deadline, "the plugin outlived its caller");
        std::thread::sleep(Duration::from_millis(5));
    }
    fx.write(&go, "");
    let (out, tree) = run.finish(30);
    out.expect_code(4);
    assert_eq!(out.stdout, "rc=137\n", "{out:#?}");
    scene.assert_clean(&tree);
    let log = scene.verify(true);
    let decisions = events(&log, "audit.decision");
    assert_eq!(decisions.len(), 1, "{log}");
    assert_eq!(decisions[0]["decision"], "denied", "{log}");
    assert!(
        decisions[0]["reason"]
            .as_str()
            .unwrap()
            .contains("the caller went away before the approval plugin answered"),
        "{log}"
    );
    assert_eq!(finished_status(&log), 4, "{log}");
});

/// How the broker's last line ends when the log could not take an event; the cause is
/// said before it, in words (issue 19, item 10).
const ENDED: &str = "; the run was ended rather than go on unaudited";
/// The words for a full disk (ENOSPC), and for no other cause.
const FULL: &str = "the file system holding it is full: make room for the log, then run again (No space left on device";

// The state disk full before the run: no inode left for the log (it cannot be created),
// or no byte (it cannot take `run.started`). The run does not start: one line, status 1,
// and nothing left (before the fix, a log that could not be created left the run's
// directory behind). Mounting the tmpfs needs root.
both!(a_full_state_disk_refuses_the_run_and_leaves_nothing, |fx| {
    config(&fx, "", "", "");
    for inodes in [true, false] {
        let opts = if inodes { ",nr_inodes=8" } else { "" };
        let Some(small) = SmallFs::mount(&fx, opts) else {
            return;
        };
        fs::create_dir_all(small.0.join("wardcell/runs")).unwrap();
        if inodes {
            let mut i = 0;
            while fs::write(small.0.join(format!("f{i}")), "").is_ok() {
                i += 1;
            }
        } else {
            small.fill(0);
        }
        fx.own(&small.0);
        let scene = Scene::new(&fx, &format!("full-{inodes}"), Some(small.0.clone()));
        let marker = fx.proj.join("ran");
        let run = scene.start(&format!("touch {}", marker.display()));
        let (out, tree) = run.finish(30);
        out.expect_code(1);
        assert!(!marker.exists(), "the command ran");
        assert!(out.stdout.is_empty(), "{out:#?}");
        assert_eq!(out.stderr.lines().count(), 1, "{out:#?}");
        let why = if inodes {
            "cannot create the run's audit log: the file system holding it is full: make room for the log, then run again (No space left on device"
        } else {
            "No space left on device"
        };
        assert!(
            out.stderr.starts_with("error: ") && out.stderr.contains(why),
            "{out:#?}"
        );
        if !inodes {
            assert!(
                out.stderr.contains(FULL) && out.stderr.trim_end().ends_with(ENDED),
                "{out:#?}"
            );
        }
        scene.assert_clean(&tree);
        drop(scene);
        drop(small);
    }
});

// The state disk filled, from outside, while the command runs and enters zones: the
// first event that does not fit ends the run (every sandbox of it), one line, status 1;
// the log holds whole lines only and reads cut.
both!(a_state_disk_filled_mid_run_ends_everything, |fx| {
    config(&fx, "", "", "");
    let Some(small) = SmallFs::mount(&fx, "") else {
        return;
    };
    let scene = Scene::new(&fx, "midrun", Some(small.0.clone()));
    let (ready, go) = (fx.proj.join("ready"), fx.proj.join("go"));
    let mut run = scene.start(&format!(
        "touch {r}; while [ ! -e {g} ]; do sleep 0.02; done\n\
         while :; do wardcell zone enter push -- sleep 0.05 2>/dev/null; done",
        r = ready.display(),
        g = go.display()
    ));
    wait_file(&ready);
    run.tree.look();
    small.fill(0);
    fx.write(&go, "");
    let (out, tree) = run.finish(30);
    out.expect_code(1);
    let last = out.stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: the run's audit log ")
            && last.contains(FULL)
            && last.ends_with(ENDED),
        "{out:#?}"
    );
    scene.assert_clean(&tree);
    let text = scene.verify(false);
    assert!(text.ends_with('\n'), "a partial line");
    assert!(!events(&text, "audit.decision").is_empty(), "{text}");
});

// `wardcell run` forks a plan writer that resolves the configuration while the broker
// starts the first sandbox. Killed while it resolves (a long configuration keeps it busy
// long enough to be seen), the broker ends as it did (137), quietly, before any run
// directory or log exists, and ends the sandbox it had started.
both!(a_killed_plan_writer_ends_the_run_as_it_died, |fx| {
    let bin = fx.bin.display();
    let mut toml = format!(
        "[zones.agent]\nprofile = \"p\"\ndefault = true\n[profiles.p]\nextends = \"readonly\"\nread = [\"{bin}\",\n"
    );
    for i in 0..20_000 {
        toml.push_str(&format!("  \"/usr/share/wardcell-missing-{i}\",\n"));
    }
    toml.push_str("]\n");
    fx.config(&toml);
    let scene = Scene::new(&fx, "writer", None);
    let marker = fx.proj.join("ran");
    let mut run = scene.start(&format!("touch {}", marker.display()));
    // The first sandbox's shim is started before the plan is taken (and once it is there,
    // the broker is: the only `wardcell` left under the run is the plan writer).
    run.tree.wait_for("wardcell-shim", 1);
    let writer = run.tree.wait_for("wardcell", 1).remove(0);
    kill_as(&fx, writer.pid, "KILL");
    let (out, tree) = run.finish(30);
    out.expect_code(137);
    assert_eq!(out.stderr, "", "{out:#?}");
    assert!(!marker.exists(), "the command ran");
    scene.assert_clean(&tree);
    let runs = scene.state.join("wardcell/runs");
    let logs = fs::read_dir(&runs).map(|d| d.count()).unwrap_or(0);
    assert_eq!(logs, 0, "a log was made");
});

// The broker takes and prepares the plan in a thread of its own while it starts the first
// sandbox (issue 19, review of the start-up order, item 3). A variable of the caller's
// environment that is not UTF-8 (a file name in a locale's bytes, say) is no plan error:
// the run goes on (the variable is not passed on, as the sandbox's environment is text),
// nothing panics, and the run finishes as any other. Before, the thread panicked reading
// the environment for the identities it records, and every run ended with "reading the
// plan failed", as if the broker had been started by hand.
both!(a_variable_that_is_not_utf8_does_not_stop_the_run, |fx| {
    use std::os::unix::ffi::OsStrExt;
    config(&fx, "", "", "");
    let scene = Scene::new(&fx, "bytes", None);
    let mut cmd = scene.cmd(&["run", "--", "/bin/sh", "-c", "echo ran"]);
    cmd.env(
        std::ffi::OsStr::from_bytes(b"WARDCELL_TEST_LATIN1"),
        std::ffi::OsStr::from_bytes(b"caf\xe9"),
    );
    let out: Out = cmd.output().unwrap().into();
    out.ok();
    assert_eq!(out.stdout, "ran\n", "{out:#?}");
    assert!(!out.stderr.contains("panicked"), "{out:#?}");
    assert_eq!(
        run_dirs(&scene.rt),
        Vec::<String>::new(),
        "a run directory is left"
    );
    scene.verify(true);
});

// Without the shim beside the broker (a build uses its own helpers only), the plan is still taken in
// its thread and the run's directory and log made there: they are removed again, and the
// one line says why (item 3 as above).
both!(a_missing_shim_leaves_neither_run_directory_nor_log, |fx| {
    config(&fx, "", "", "");
    let scene = Scene::new(&fx, "noshim", None);
    let bin = fx.dir.join("shimless-bin");
    fs::create_dir_all(&bin).unwrap();
    for name in ["wardcell", "wardcell-broker"] {
        fs::copy(fx.bin.join(name), bin.join(name)).unwrap();
        fs::set_permissions(bin.join(name), fs::Permissions::from_mode(0o755)).unwrap();
    }
    fx.own(&bin);
    let marker = fx.proj.join("ran");
    let mut cmd = Command::new(bin.join("wardcell"));
    cmd.args([
        "run",
        "--",
        "/bin/sh",
        "-c",
        &format!("touch {}", marker.display()),
    ])
    .current_dir(&fx.proj)
    .env_clear()
    .env("PATH", "/usr/bin:/bin")
    .env("HOME", &fx.home)
    .env("XDG_RUNTIME_DIR", &scene.rt)
    .env("XDG_STATE_HOME", &scene.state)
    .stdin(std::process::Stdio::null());
    if let Some((uid, gid)) = fx.who.ids() {
        use std::os::unix::process::CommandExt;
        cmd.uid(uid).gid(gid);
    }
    let out: Out = cmd.output().unwrap().into();
    out.expect_code(1);
    assert_eq!(
        out.stderr,
        format!("error: could not start the sandbox: wardcell-shim is not in {}, where this build of wardcell keeps its helpers; reinstall wardcell\n", bin.display()),
        "{out:#?}"
    );
    assert!(!marker.exists(), "the command ran");
    assert_eq!(
        run_dirs(&scene.rt),
        Vec::<String>::new(),
        "a run directory is left"
    );
    let runs = scene.state.join("wardcell/runs");
    let logs = fs::read_dir(&runs).map(|d| d.count()).unwrap_or(0);
    assert_eq!(logs, 0, "a log is left");
});

// `wardcell run` (the broker) ended by SIGTERM or SIGKILL while its plan writer still
// resolves the configuration, before the broker takes its signals over (item 3 of the
// start-up review, issue 19): it ends as the signal says, and takes the writer with it.
// Before, the writer went on resolving, then said "could not start the broker: handing
// over the plan: Broken pipe" after `wardcell run` had already ended.
both!(a_broker_ended_before_the_plan_takes_its_writer, |fx| {
    let bin = fx.bin.display();
    let mut toml = format!(
        "[zones.agent]\nprofile = \"p\"\ndefault = true\n[profiles.p]\nextends = \"readonly\"\nread = [\"{bin}\",\n"
    );
    // Enough to keep the writer busy for a second or more.
    for i in 0..100_000 {
        toml.push_str(&format!("  \"/usr/share/wardcell-missing-{i}\",\n"));
    }
    toml.push_str("]\n");
    fx.config(&toml);
    for (sig, code) in [("TERM", 143), ("KILL", 137)] {
        let scene = Scene::new(&fx, &format!("early-{sig}"), None);
        let marker = fx.proj.join("ran");
        let mut run = scene.start(&format!("touch {}", marker.display()));
        run.tree.wait_for("wardcell-shim", 1);
        let writer = run.tree.wait_for("wardcell", 1).remove(0);
        // `wardcell run` signalled: the keeper passes TERM on, and KILL takes the broker
        // with it (its death signal).
        kill_as(&fx, run.tree.client.pid, sig);
        let (out, tree) = run.finish(30);
        out.expect_code(code);
        assert_eq!(out.stderr, "", "{sig}: {out:#?}");
        assert!(!marker.exists(), "{sig}: the command ran");
        // Gone (or a zombie) at once, not once it has resolved the plan.
        let running = || {
            fs::read_to_string(format!("/proc/{}/stat", writer.pid))
                .is_ok_and(|s| !s.contains(") Z "))
        };
        let until = Instant::now() + Duration::from_millis(500);
        while running() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!running(), "{sig}: the plan writer goes on");
        tree.assert_all_gone();
    }
});

// The proxy dies when its death cannot be audited: `proxy.died` is refused by the log's
// writer (here because someone else changed the log: one byte appended from outside),
// and an event that cannot be written ends the run, as every other does (PROTOCOL 8),
// rather than leave a sandbox running unaudited. The command here would wait for ever.
both!(a_proxy_death_that_cannot_be_audited_ends_the_run, |fx| {
    config(&fx, "", "network = { allow = [\"example.com:80\"] }", "");
    let scene = Scene::new(&fx, "proxydied", None);
    let ready = fx.proj.join("ready");
    let mut run = scene.start(&format!(
        "touch {r}; while :; do sleep 0.05; done",
        r = ready.display()
    ));
    wait_file(&ready);
    let proxy = run.tree.wait_for("wardcell-proxy", 1).remove(0);
    let (id, _) = scene.log();
    let log = scene
        .state
        .join("wardcell/runs")
        .join(format!("{id}.jsonl"));
    let mut f = fs::OpenOptions::new().append(true).open(&log).unwrap();
    std::io::Write::write_all(&mut f, b"x").unwrap();
    kill_as(&fx, proxy.pid, "KILL");
    let (out, tree) = run.finish(30);
    out.expect_code(1);
    let last = out.stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: the run's audit log ")
            && last.contains("someone else changed it")
            && last.ends_with(ENDED),
        "{out:#?}"
    );
    scene.assert_clean(&tree);
    let text = fs::read_to_string(&log).unwrap();
    assert!(!text.contains("proxy.died"), "{text}");
});
