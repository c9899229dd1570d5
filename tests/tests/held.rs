//! Masks and read-only paths hold for the whole run, whatever the host does to them
//! (issue 35, item 2). A mount protects a directory entry only until the host replaces
//! it. A mask in a read-only tree (the home's secrets) is held by the view itself: the
//! directories on the way to it are the view's own, holding a bind of every other entry,
//! so what the host does to the masked name never reaches the sandbox, which goes on.
//! What cannot be held that way (a mask or a read-only path inside a writable tree) is
//! watched: the moment the host replaces, removes or creates one of those names, the run
//! ends every sandbox, audits `sandbox.protection_lost` and says so in one line. What the
//! host does elsewhere leaves the run alone. Real sandboxes, real git, as the invoking
//! user and as the unprivileged uid.

use std::fs;
use std::path::Path;

use wardcell_tests::{both, wait_until, Fixture, Out, Watched};

/// A run that says it is ready, then reads `target` (relative to the home) once the test
/// says go, and goes on for a while: it must never get there.
const SCRIPT: &str = "touch ready; while [ ! -e go ]; do sleep 0.05; done
cat ~/$TARGET; echo read=$?; sleep 2; echo survived";

fn config(fx: &Fixture) {
    fx.config(&format!(
        "[zones.agent]\nprofile = \"dev\"\ndefault = true\n\n[profiles.dev]\nextends = \"developer-readonly\"\nread = [\"{}\"]\ndeny = [\"~/.secret\", \"~/.aws\"]\n",
        fx.bin.display()
    ));
}

/// Start the run reading `target`; once it is ready, do `change` on the host and wait
/// for the run to end by itself (then say go, so a run the change did not end reads
/// `target`, and fails the test in what it prints rather than hanging).
fn run_while(fx: &Fixture, target: &str, change: impl FnOnce()) -> Out {
    let mut cmd = fx.cmd(&["run", "--", "/bin/sh", "-c", SCRIPT]);
    cmd.env("TARGET", target);
    let mut run = Watched::spawn(fx, cmd, "held");
    wait_until(20, "the run to start", || fx.proj.join("ready").exists());
    change();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while run.child.try_wait().unwrap().is_none() && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    fx.write(&fx.proj.join("go"), "");
    run.finish(30).0
}

#[track_caller]
fn ended_for(fx: &Fixture, out: &Out, path: &Path) {
    assert!(
        !out.stdout.contains("read="),
        "the sandbox went on: {out:#?}"
    );
    assert!(!out.stdout.contains("new-secret"), "{out:#?}");
    assert_ne!(out.code, 0, "{out:#?}");
    let line = format!(
        "error: {} was replaced, removed or created while a sandbox of this run held it masked or read-only; every sandbox of the run was ended rather than let it see {} unprotected\n",
        path.display(),
        path.display()
    );
    assert!(out.stderr.contains(&line), "{out:#?}");
    let runs = fx.home.join(".local/state/wardcell/runs");
    let log = fs::read_dir(&runs).unwrap().next().unwrap().unwrap().path();
    let log = fs::read_to_string(log).unwrap();
    let lost = format!(
        r#""event":"sandbox.protection_lost","path":"{}""#,
        path.display()
    );
    assert!(log.contains(&lost), "{log}");
}

/// The run went on, never saw the new content, and lost nothing.
#[track_caller]
fn held_for(fx: &Fixture, out: &Out) {
    assert!(!out.stdout.contains("new-secret"), "{out:#?}");
    assert!(out.stdout.contains("read=1\n"), "{out:#?}");
    assert!(out.stdout.contains("survived"), "{out:#?}");
    out.ok();
    let runs = fx.home.join(".local/state/wardcell/runs");
    let log = fs::read_dir(&runs).unwrap().next().unwrap().unwrap().path();
    let log = fs::read_to_string(log).unwrap();
    assert!(!log.contains("sandbox.protection_lost"), "{log}");
}

/// Write `content` beside `path`, then rename it over `path` (as git, editors and
/// credential helpers replace a file), as the fixture's user.
fn replace(fx: &Fixture, path: &Path, content: &str) {
    let tmp = path.with_extension("tmp");
    fx.write(&tmp, content);
    fs::rename(&tmp, path).unwrap();
}

// The run waits (`run_while`) for a change that, now, never ends it: it goes on after
// `go` and shows what it could read.
both!(a_masked_file_replaced_on_the_host_is_never_seen, |fx| {
    config(&fx);
    let secret = fx.home.join(".secret");
    fx.write(&secret, "old-secret\n");
    let out = run_while(&fx, ".secret", || replace(&fx, &secret, "new-secret\n"));
    held_for(&fx, &out);
});

both!(a_masked_path_created_on_the_host_is_never_seen, |fx| {
    config(&fx);
    // `aws configure` after the run started: ~/.aws did not exist.
    let aws = fx.home.join(".aws");
    let out = run_while(&fx, ".aws/credentials", || {
        fx.write(&aws.join("credentials"), "new-secret\n");
    });
    held_for(&fx, &out);
});

// The race the guard could only end the run after (10 runs in 20 read the new content
// before it did): a sandbox reading a masked file as fast as it can while the host
// replaces it, again and again, and the directory it is in too. It never reads it.
both!(
    a_sandbox_racing_the_host_never_reads_a_replaced_secret,
    |fx| {
        config(&fx);
        let secret = fx.home.join(".secret");
        fx.write(&secret, "old-secret\n");
        let script = "touch ready; while [ ! -e go ]; do cat ~/.secret ~/.aws/credentials 2>/dev/null; done; echo survived";
        let run = Watched::spawn(&fx, fx.cmd(&["run", "--", "/bin/sh", "-c", script]), "race");
        wait_until(20, "the run to start", || fx.proj.join("ready").exists());
        for i in 0..20 {
            replace(&fx, &secret, &format!("new-secret-{i}\n"));
            let aws = fx.home.join(format!("aws-{i}"));
            fx.write(&aws.join("credentials"), &format!("new-secret-{i}\n"));
            let _ = fs::remove_dir_all(fx.home.join(".aws"));
            fs::rename(&aws, fx.home.join(".aws")).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        fx.write(&fx.proj.join("go"), "");
        let (out, _) = run.finish(30);
        out.ok();
        assert!(!out.stdout.contains("new-secret"), "{out:#?}");
        assert!(out.stdout.ends_with("survived\n"), "{out:#?}");
    }
);

both!(
    git_config_on_the_host_ends_the_run_before_the_sandbox_can_write_it,
    |fx| {
        config(&fx);
        let git = |args: &[&str]| {
            fx.host_git(&fx.proj, args).ok();
        };
        git(&["init", "-q"]);
        // The sandbox would write `core.fsmonitor` into the config the host's git rewrote.
        let script = "touch ready; while [ ! -e go ]; do sleep 0.05; done
printf '[core]\\n\\tfsmonitor = touch pwned\\n' >> .git/config; echo wrote=$?; sleep 2";
        let mut run = Watched::spawn(&fx, fx.cmd(&["run", "--", "/bin/sh", "-c", script]), "git");
        wait_until(20, "the run to start", || fx.proj.join("ready").exists());
        git(&["config", "user.name", "x"]);
        wait_until(10, "the run to end", || {
            run.child.try_wait().unwrap().is_some()
        });
        fx.write(&fx.proj.join("go"), "");
        let (out, _) = run.finish(30);
        assert!(!out.stdout.contains("wrote="), "{out:#?}");
        let config = fs::read_to_string(fx.proj.join(".git/config")).unwrap();
        assert!(!config.contains("fsmonitor"), "{config}");
        assert!(
            out.stderr
                .contains(".git/config was replaced, removed or created while"),
            "{out:#?}"
        );
    }
);

both!(what_the_host_does_elsewhere_leaves_the_run_alone, |fx| {
    config(&fx);
    fx.write(&fx.home.join(".secret"), "old-secret\n");
    let script = "touch ready; while [ ! -e go ]; do sleep 0.05; done; echo done";
    let mut run = Watched::spawn(&fx, fx.cmd(&["run", "--", "/bin/sh", "-c", script]), "calm");
    wait_until(20, "the run to start", || fx.proj.join("ready").exists());
    // Files beside the held ones, a file written in place: nothing is held there.
    replace(&fx, &fx.home.join("notes.md"), "ls\n");
    fx.write(&fx.home.join(".secret.bak"), "x");
    fx.write(&fx.proj.join("notes.txt"), "x");
    fs::write(fx.home.join(".secret"), "in place\n").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(run.child.try_wait().unwrap().is_none(), "the run ended");
    fx.write(&fx.proj.join("go"), "");
    let (out, _) = run.finish(30);
    out.ok();
    assert_eq!(out.stdout, "done\n", "{out:#?}");
});

// A deny entry that is a symbolic link (a dotfile manager's `~/.tok -> dots/tok`) is
// masked at its target and as written; the host replacing the link itself (as tools
// that write a config by renaming do) never reaches the sandbox.
both!(a_masked_link_replaced_on_the_host_is_never_seen, |fx| {
    fx.config(&format!(
        "[zones.agent]\nprofile = \"dev\"\ndefault = true\n\n[profiles.dev]\nextends = \"developer-readonly\"\nread = [\"{}\"]\ndeny = [\"~/.tok\"]\n",
        fx.bin.display()
    ));
    fx.write(&fx.home.join("dots/tok"), "old-secret\n");
    std::os::unix::fs::symlink("dots/tok", fx.home.join(".tok")).unwrap();
    fx.own(&fx.home);
    let link = fx.home.join(".tok");
    let out = run_while(&fx, ".tok", || replace(&fx, &link, "new-secret\n"));
    held_for(&fx, &out);
});

// A mask inside the writable project cannot be held by the view (the sandbox writes the
// directory it is in): that one is watched, and its replacement ends the run.
both!(
    a_masked_file_in_the_project_replaced_on_the_host_ends_the_run,
    |fx| {
        fx.config(&format!(
        "[zones.agent]\nprofile = \"dev\"\ndefault = true\n\n[profiles.dev]\nextends = \"developer-readonly\"\nread = [\"{}\"]\ndeny = [\"./.env\"]\n",
        fx.bin.display()
    ));
        let env = fx.proj.join(".env");
        fx.write(&env, "old-secret\n");
        let out = run_while(&fx, "proj/.env", || replace(&fx, &env, "new-secret\n"));
        ended_for(&fx, &out, &env);
    }
);

// The review: a deny entry that is a link to what is not there yet (`~/.aws -> vault/aws`)
// was in neither list; made on the host later, it was read through the link. Held as
// written and where it leads.
both!(a_masked_link_to_nothing_yet_is_held_where_it_leads, |fx| {
    config(&fx);
    fs::create_dir_all(fx.home.join("vault")).unwrap();
    std::os::unix::fs::symlink("vault/aws", fx.home.join(".aws")).unwrap();
    fx.own(&fx.home);
    let out = run_while(&fx, ".aws/credentials", || {
        fx.write(&fx.home.join("vault/aws/credentials"), "new-secret\n");
    });
    held_for(&fx, &out);
});

// The review: a home under /tmp put the directories of the view's own on the sandbox's
// private, writable /tmp. They are a read-only filesystem of their own.
both!(
    the_views_own_directories_are_read_only_wherever_the_home_is,
    |fx| {
        config(&fx);
        let home = std::path::PathBuf::from(format!(
            "/tmp/wardcell-held-{}-{:?}",
            std::process::id(),
            fx.who
        ));
        let _ = fs::remove_dir_all(&home);
        fs::create_dir_all(home.join("proj")).unwrap();
        fs::create_dir_all(home.join(".config")).unwrap();
        fs::copy(
            fx.home.join(".config/wardcell/zones.toml"),
            home.join("zones.toml"),
        )
        .unwrap();
        fx.own(&home);
        let out: Out = fx
            .cmd(&[
                "run",
                "--config",
                home.join("zones.toml").to_str().unwrap(),
                "--",
                "/bin/sh",
                "-c",
                "mkdir ~/.ssh 2>&1; touch ~/x 2>&1; touch ~/proj/ok && echo proj-ok",
            ])
            .env("HOME", &home)
            .current_dir(home.join("proj"))
            .output()
            .unwrap()
            .into();
        let _ = fs::remove_dir_all(&home);
        out.ok();
        assert_eq!(
            out.stdout.matches("Read-only file system").count(),
            2,
            "{out:#?}"
        );
        assert!(out.stdout.contains("proj-ok"), "{out:#?}");
    }
);

// What the views hold is watched by the run's helper, a process of its own that also
// writes the run's log (`wardcell-shim --helper`): one that dies (here killed by the
// user) watches nothing more, and the run ends as when everything held was lost, rather
// than go on unwatched (and unaudited).
both!(a_helper_that_dies_ends_the_run, |fx| {
    config(&fx);
    let secret = fx.home.join(".secret");
    fx.write(&secret, "old-secret\n");
    let mut cmd = fx.cmd(&["run", "--", "/bin/sh", "-c", SCRIPT]);
    cmd.env("TARGET", ".secret");
    let mut run = Watched::spawn(&fx, cmd, "held");
    wait_until(20, "the run to start", || fx.proj.join("ready").exists());
    let broker = wardcell_tests::broker_of(run.child.id());
    let children = fs::read_to_string(format!("/proc/{broker}/task/{broker}/children")).unwrap();
    let helpers: Vec<&str> = children
        .split_whitespace()
        .filter(|pid| {
            let comm = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            comm.trim() == "wardcell-helper"
        })
        .collect();
    assert_eq!(helpers.len(), 1, "{children}");
    let killed = std::process::Command::new("kill")
        .args(["-KILL", helpers[0]])
        .status()
        .unwrap();
    assert!(killed.success());
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while run.child.try_wait().unwrap().is_none() && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    fx.write(&fx.proj.join("go"), "");
    replace(&fx, &secret, "new-secret\n");
    let out = run.finish(30).0;
    assert_eq!(out.code, 1, "{out:#?}");
    assert!(
        !out.stdout.contains("read="),
        "the sandbox went on: {out:#?}"
    );
    assert!(
        out.stderr.starts_with("error: the run could no longer follow what the host did to the paths its sandboxes held masked or read-only (the kernel's queue of file events overflowed, or the run's guard ended); every sandbox of the run was ended rather than go on unwatched\n"),
        "{out:#?}"
    );
    assert!(
        out.stderr.ends_with("error: the run's audit writer (wardcell-shim --helper) stopped answering; the run was ended rather than go on unaudited\n"),
        "{out:#?}"
    );
});
