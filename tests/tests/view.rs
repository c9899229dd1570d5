//! The sandbox's view built from nothing (issue: "The sandbox sees only its own trees").
//! Each test tries one of the escapes found against the old bind-of-/ design, in a real
//! sandbox, as the invoking user and as an unprivileged uid.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use wardcell_tests::{both, Fixture, Out};

/// A listening socket at `path`, connectable by the fixture's uid.
fn listen(fx: &Fixture, path: &Path) -> UnixListener {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).unwrap();
    }
    let _ = fs::remove_file(path);
    let l = UnixListener::bind(path).unwrap();
    fx.own(path);
    l
}

/// A private directory under the host's /tmp for this test, owned by the fixture's uid,
/// removed on drop.
struct HostTmp(PathBuf);
impl HostTmp {
    fn new(fx: &Fixture, tag: &str) -> HostTmp {
        let p = PathBuf::from(format!(
            "/tmp/wardcell-view-{tag}-{}-{}",
            std::process::id(),
            fx.uid()
        ));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        fx.own(&p);
        HostTmp(p)
    }
}
impl Drop for HostTmp {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn last_log(fx: &Fixture) -> String {
    let dir = fx.home.join(".local/state/wardcell/runs");
    let mut logs: Vec<(std::time::SystemTime, PathBuf)> = fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            Some((e.metadata().ok()?.modified().ok()?, e.path()))
        })
        .collect();
    logs.sort();
    fs::read_to_string(&logs.pop().expect("a log").1).unwrap()
}

both!(host_sockets_outside_the_view_do_not_exist, |fx| {
    fx.test_config("");
    // A tmux-like server socket under the host's /tmp, and one anywhere else.
    let tmp = HostTmp::new(&fx, "tmux");
    let tmux = tmp.0.join("default");
    let _a = listen(&fx, &tmux);
    let other = fx.outside.join("editor.sock");
    let _b = listen(&fx, &other);
    for sock in [&tmux, &other] {
        let out = fx.probe(&["connect-unix", sock.to_str().unwrap()]);
        assert!(
            out.stdout.starts_with("err ENOENT"),
            "{}: {out:?}",
            sock.display()
        );
    }
    // Nothing of the host but the profile's trees: no /run, no /root, and /var/tmp holds
    // only the staged binaries' directory (the profile reads them).
    let staged = fx
        .bin
        .parent()
        .unwrap()
        .file_name()
        .unwrap()
        .to_str()
        .unwrap();
    let out = fx.sh("for p in /run /var/run /root /srv /mnt; do test -e $p && echo present $p; done; ls -A /var/tmp; ls -A /tmp; ls -A /");
    out.ok();
    assert!(!out.stdout.contains("present"), "{out:?}");
    let mut lines = out.stdout.lines();
    assert_eq!(lines.next(), Some(staged), "{out:?}");
    // The private /tmp holds only wardcell's runtime directory (no XDG_RUNTIME_DIR
    // here), which holds only this sandbox's supervisor socket.
    let runtime = format!("wardcell-{}", fx.uid());
    assert_eq!(lines.next(), Some(runtime.as_str()), "{out:?}");
    let root: Vec<&str> = lines.collect();
    for name in &root {
        assert!(
            [
                "bin", "dev", "etc", "lib", "lib32", "lib64", "opt", "proc", "sbin", "sys", "tmp",
                "usr", "var", "home", "root"
            ]
            .contains(name),
            "unexpected /{name} in the view: {root:?}"
        );
    }
    // /bin is the host's link, so #!/bin/sh scripts work where only /usr is bound.
    let out = fx.sh("readlink /bin; test -x /bin/sh && echo sh-ok");
    assert!(out.stdout.contains("sh-ok"), "{out:?}");
});

both!(a_project_under_tmp_still_gets_a_private_tmp, |fx| {
    fx.test_config("");
    let tmp = HostTmp::new(&fx, "proj");
    let proj = tmp.0.join("proj");
    fs::create_dir_all(&proj).unwrap();
    fx.own(&tmp.0);
    let host_sock = tmp.0.join("tmux-0");
    let _l = listen(&fx, &host_sock);
    let probe = fx.bin.join("wardcell-probe");
    let script = format!(
        "f=$(mktemp) && echo scratch > \"$f\" && cat \"$f\" && echo made > in-project && {} connect-unix {}",
        probe.display(),
        host_sock.display()
    );
    let out: Out = fx
        .cmd(&["run", "--", "/bin/sh", "-c", &script])
        .current_dir(&proj)
        .output()
        .unwrap()
        .into();
    assert!(out.stdout.starts_with("scratch\n"), "mktemp works: {out:?}");
    assert!(
        out.stdout.contains("err ENOENT"),
        "the host's /tmp is not there: {out:?}"
    );
    assert_eq!(
        fs::read_to_string(proj.join("in-project")).unwrap(),
        "made\n"
    );
});

/// Zone `agent` (developer-readonly and the staged binaries, the default) and a zone
/// `second` that agent may enter, with a profile extending `base` plus `body`.
fn agent_and(fx: &Fixture, second: &str, base: &str, body: &str) {
    let bin = fx.bin.display();
    fx.config(&format!(
        r#"
[zones.agent]
profile = "dev"
default = true

[zones.{second}]
profile = "second"
enter_from = ["agent"]

[profiles.dev]
extends = "developer-readonly"
read = ["{bin}"]

[profiles.second]
extends = "{base}"
read = ["{bin}"]
{body}
"#
    ));
}

/// agent writes the project; build writes ./target only and may be entered from agent.
fn two_zones(fx: &Fixture) {
    fs::create_dir_all(fx.proj.join("target")).unwrap();
    fx.own(&fx.proj);
    fx.write(&fx.home.join(".bashrc"), "# the user's own\n");
    agent_and(fx, "build", "readonly", "write = [\"./target\"]");
}

both!(an_entry_refuses_a_write_tree_swapped_for_a_link, |fx| {
    two_zones(&fx);
    let out = fx.sh("rm -rf target && ln -s \"$HOME\" target && \
         wardcell zone enter build -- /bin/sh -c 'echo pwned >> target/.bashrc'; echo rc=$?");
    assert!(out.stdout.contains("rc=1"), "{out:?}");
    let line = out
        .stderr
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or("");
    assert!(
        line.contains(&format!(
            "{}/target changed since the run started",
            fx.proj.display()
        )),
        "one line naming the path: {out:?}"
    );
    assert_eq!(
        fs::read_to_string(fx.home.join(".bashrc")).unwrap(),
        "# the user's own\n"
    );
    let log = last_log(&fx);
    assert!(
        log.lines()
            .any(|l| l.contains("audit.completed") && l.contains("changed since the run started")),
        "{log}"
    );
});

both!(
    an_entry_refuses_a_write_tree_replaced_by_another_directory,
    |fx| {
        two_zones(&fx);
        let out = fx.sh("mv target target.old && mkdir target && \
         wardcell zone enter build -- /bin/sh -c 'echo in > target/x'; echo rc=$?");
        assert!(out.stdout.contains("rc=1"), "{out:?}");
        assert!(
            out.stderr.contains("target changed since the run started"),
            "{out:?}"
        );
        assert!(!fx.proj.join("target/x").exists());
        // Untouched, the same entry works.
        let out = fx.sh("wardcell zone enter build -- /bin/sh -c 'echo in > target/x'; echo rc=$?");
        assert!(out.stdout.contains("rc=0"), "{out:?}");
        assert_eq!(
            fs::read_to_string(fx.proj.join("target/x")).unwrap(),
            "in\n"
        );
    }
);

both!(wardcells_own_directories_cannot_be_moved_aside, |fx| {
    // A profile that writes the whole home, on purpose.
    let bin = fx.bin.display();
    fx.config(&format!(
        "[zones.agent]\nprofile = \"home\"\ndefault = true\n[profiles.home]\nextends = \"readonly\"\nread = [\"{bin}\"]\nwrite = [\"~\"]\n"
    ));
    let out = fx.sh(
        "for m in \"$HOME/.local:$HOME/.local-old\" \"$HOME/.local/state:$HOME/st\" \
         \"$HOME/.local/state/wardcell:$HOME/w\" \"$HOME/.config:$HOME/c\" \
         \"$HOME/.config/wardcell:$HOME/c2\"; do \
           mv \"${m%%:*}\" \"${m##*:}\" 2>/dev/null && echo moved \"${m%%:*}\"; done; \
         ls \"$HOME/.local/state/wardcell\" 2>/dev/null && echo listed; \
         echo '[zones.x]' > \"$HOME/.config/wardcell/zones.toml\" 2>/dev/null && echo planted; \
         touch \"$HOME/ok\" && echo home-writable",
    );
    assert!(!out.stdout.contains("moved"), "{out:?}");
    assert!(!out.stdout.contains("listed"), "{out:?}");
    assert!(!out.stdout.contains("planted"), "{out:?}");
    assert!(out.stdout.contains("home-writable"), "{out:?}");
    let id = fs::read_dir(fx.home.join(".local/state/wardcell/runs"))
        .unwrap()
        .flatten()
        .map(|e| {
            e.file_name()
                .to_string_lossy()
                .trim_end_matches(".jsonl")
                .to_string()
        })
        .next()
        .unwrap();
    fx.run(&["logs", "verify", &id]).ok();
});

both!(git_hooks_and_config_stay_read_only, |fx| {
    fx.test_config("");
    fx.write(&fx.proj.join(".git/config"), "[core]\n\tbare = false\n");
    fx.write(&fx.proj.join(".git/hooks/pre-commit.sample"), "#!/bin/sh\n");
    let out = fx.sh(
        "echo '[core] hooksPath = /tmp' >> .git/config 2>/dev/null && echo config-written; \
         echo x > .git/hooks/pre-commit 2>/dev/null && echo hook-written; \
         mv .git .git-old 2>/dev/null && echo git-moved; \
         mv .git/hooks .git/h 2>/dev/null && echo hooks-moved; \
         mv .git/config .git/c 2>/dev/null && echo config-moved; \
         rm -rf .git 2>/dev/null; \
         echo x > .git/HEAD && echo head-written",
    );
    for bad in [
        "config-written",
        "hook-written",
        "git-moved",
        "hooks-moved",
        "config-moved",
    ] {
        assert!(!out.stdout.contains(bad), "{bad}: {out:?}");
    }
    // The rest of .git is the project's own: git itself writes it.
    assert!(out.stdout.contains("head-written"), "{out:?}");
    assert_eq!(
        fs::read_to_string(fx.proj.join(".git/config")).unwrap(),
        "[core]\n\tbare = false\n"
    );
    assert!(!fx.proj.join(".git/hooks/pre-commit").exists());
});

both!(git_files_made_inside_are_reported_when_the_run_ends, |fx| {
    fx.test_config("");
    let out = fx.sh(
        "mkdir -p .git/hooks && printf '#!/bin/sh\\n' > .git/hooks/post-checkout && \
         printf '[core]\\n\\tfsmonitor = ./x\\n' > .git/config && \
         printf '#!/bin/sh\\n' > .git/hooks/pre-push.sample",
    );
    out.ok();
    let warnings: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.starts_with("warning: "))
        .collect();
    assert_eq!(warnings.len(), 2, "{out:?}");
    assert!(
        warnings
            .iter()
            .any(|w| w.contains(".git/hooks/post-checkout")),
        "{warnings:?}"
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.contains(".git/config\" (core.fsmonitor)")),
        "{warnings:?}"
    );
    let log = last_log(&fx);
    let ev = log
        .lines()
        .find(|l| l.contains("sandbox.git_changed"))
        .unwrap_or_else(|| panic!("no sandbox.git_changed: {log}"));
    assert!(
        ev.contains("post-checkout") && ev.contains("core.fsmonitor"),
        "{ev}"
    );
    assert!(!ev.contains("pre-push.sample"), "{ev}");
});

both!(dot_is_not_the_home_or_the_root_by_accident, |fx| {
    fx.test_config("");
    let run_in = |dir: &Path| -> Out {
        fx.cmd(&["run", "--", "/bin/true"])
            .current_dir(dir)
            .output()
            .unwrap()
            .into()
    };
    let out = run_in(&fx.home);
    out.expect_code(1);
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    assert!(
        out.stderr.contains("started in your home directory"),
        "{out:?}"
    );
    let out = run_in(Path::new("/"));
    out.expect_code(1);
    assert!(out.stderr.contains("started in /,"), "{out:?}");
    // Named on purpose, the home is allowed.
    let bin = fx.bin.display();
    fx.config(&format!(
        "[zones.agent]\nprofile = \"home\"\ndefault = true\n[profiles.home]\nextends = \"readonly\"\nread = [\"{bin}\"]\nwrite = [\"~\", \".\"]\n"
    ));
    run_in(&fx.home).ok();
});

both!(missing_write_paths_are_reported, |fx| {
    fx.test_config("write = [\"./not-yet\"]\n");
    let out = fx.run(&["policy", "check"]);
    out.ok();
    assert!(
        out.stderr
            .contains("warning: profile 'test' writes \"./not-yet\", which does not exist"),
        "{out:?}"
    );
    let out = fx.run(&["run", "--", "/bin/true"]);
    out.ok();
    assert!(out.stderr.contains("\"./not-yet\""), "{out:?}");
});

both!(unix_sockets_are_a_zone_property, |fx| {
    let agent_sock = fx.outside.join("agent.sock");
    let _l = listen(&fx, &agent_sock);
    agent_and(
        &fx,
        "push",
        "developer-readonly",
        "unix_sockets = [\"$SSH_AUTH_SOCK\"]",
    );
    let sock = agent_sock.display().to_string();
    let script = format!(
        "echo \"agent:[$SSH_AUTH_SOCK]\"; wardcell-probe connect-unix {sock}; \
         wardcell zone enter push -- /bin/sh -c 'echo \"push:[$SSH_AUTH_SOCK]\"; wardcell-probe connect-unix {sock}'"
    );
    let out: Out = fx
        .cmd(&["run", "--", "/bin/sh", "-c", &script])
        .env("SSH_AUTH_SOCK", &agent_sock)
        .output()
        .unwrap()
        .into();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.first(), Some(&"agent:[]"), "{out:?}");
    assert!(lines[1].starts_with("err ENOENT"), "{out:?}");
    assert_eq!(
        lines.get(2),
        Some(&format!("push:[{sock}]").as_str()),
        "{out:?}"
    );
    assert_eq!(lines.get(3), Some(&"ok"), "{out:?}");
    // policy show names it.
    let out: Out = fx
        .cmd(&["policy", "show", "push"])
        .env("SSH_AUTH_SOCK", &agent_sock)
        .output()
        .unwrap()
        .into();
    assert!(out.stdout.contains(&sock), "{out:?}");
});

both!(the_client_is_always_there, |fx| {
    // A profile that reads nothing of where the client lives.
    fx.config("[zones.agent]\nprofile = \"developer-readonly\"\ndefault = true\n");
    let client = fx.bin.join("wardcell");
    let probe = fx.bin.join("wardcell-probe");
    let out = fx.run(&[
        "run",
        "--",
        "/bin/sh",
        "-c",
        &format!(
            "{} zone current; test -e {} && echo probe-visible; true",
            client.display(),
            probe.display()
        ),
    ]);
    out.ok();
    assert_eq!(out.stdout, "agent\n", "{out:?}");
});

both!(
    a_profile_that_reads_everything_still_gets_its_own_proc_tmp_and_masks,
    |fx| {
        let bin = fx.bin.display();
        fx.config(&format!(
        "[zones.agent]\nprofile = \"all\"\ndefault = true\n[profiles.all]\nread = [\"/\", \"{bin}\"]\nwrite = [\".\"]\ndeny = [\"~/.ssh\"]\n"
    ));
        fx.write(&fx.home.join(".ssh/id_ed25519"), "PRIVATE KEY");
        let tmp = HostTmp::new(&fx, "all");
        fx.write(&tmp.0.join("host-file"), "x");
        let out = fx.sh(&format!(
            "cat /etc/hostname >/dev/null && echo etc-ok; echo made > here && echo proj-ok; \
         test -e {} && echo host-tmp-visible; cat ~/.ssh/id_ed25519 2>/dev/null && echo key-read; \
         ls /proc | grep -c '^[0-9]'; touch /etc/x 2>/dev/null && echo etc-written; true",
            tmp.0.join("host-file").display()
        ));
        out.ok();
        assert!(
            out.stdout.contains("etc-ok") && out.stdout.contains("proj-ok"),
            "{out:?}"
        );
        for bad in ["host-tmp-visible", "key-read", "etc-written"] {
            assert!(!out.stdout.contains(bad), "{bad}: {out:?}");
        }
        let procs: u32 = out.stdout.lines().find_map(|l| l.parse().ok()).unwrap();
        assert!(procs < 10, "the host's processes are not listed: {out:?}");
    }
);

both!(
    wardcells_config_linked_into_the_project_stays_masked,
    |fx| {
        // A stow-style ~/.config/wardcell -> ../proj/wardcell-conf, with the agent in proj.
        let real = fx.proj.join("wardcell-conf");
        let cfg = "[zones.agent]\nprofile = \"test\"\ndefault = true\n\n[profiles.test]\nextends = \"developer-readonly\"\n";
        fx.write(
            &real.join("zones.toml"),
            &format!("{cfg}read = [\"{}\"]\n", fx.bin.display()),
        );
        fs::create_dir_all(fx.home.join(".config")).unwrap();
        std::os::unix::fs::symlink("../proj/wardcell-conf", fx.home.join(".config/wardcell"))
            .unwrap();
        fx.own(&fx.home);
        let out = fx.sh("echo '[zones.evil]' >> wardcell-conf/zones.toml && echo planted; cat wardcell-conf/zones.toml >/dev/null && echo read; mv wardcell-conf w2 && echo moved; true");
        out.ok();
        for bad in ["planted", "read", "moved"] {
            assert!(!out.stdout.contains(bad), "{bad}: {out:?}");
        }
        assert!(!fs::read_to_string(real.join("zones.toml"))
            .unwrap()
            .contains("evil"));
    }
);

both!(
    a_credential_file_reached_through_a_link_stays_masked,
    |fx| {
        let bin = fx.bin.display();
        fx.write(&fx.home.join(".tokens/real"), "s3cret-token\n");
        fs::set_permissions(
            fx.home.join(".tokens/real"),
            fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        std::os::unix::fs::symlink(".tokens/real", fx.home.join(".tok")).unwrap();
        fx.own(&fx.home);
        fx.config(&format!(
        "[zones.agent]\nprofile = \"test\"\ndefault = true\n[profiles.test]\nextends = \"developer-readonly\"\nread = [\"{bin}\"]\n\
         [credentials.c]\nhosts = [\"h.example\"]\nscheme = \"bearer\"\nsecret = {{ file = \"~/.tok\" }}\n"
    ));
        let out = fx.sh("cat ~/.tok ~/.tokens/real 2>/dev/null; true");
        out.ok();
        assert!(!out.stdout.contains("s3cret"), "{out:?}");
    }
);

both!(device_nodes_and_sockets_are_bound_read_only, |fx| {
    fx.test_config("");
    let out = fx.sh(
        "echo x > /dev/null && echo null-ok; chmod 0600 /dev/null 2>/dev/null && echo chmod-dev; \
         touch -m -d 2001-01-01 /dev/full 2>/dev/null && echo touch-dev; \
         chmod 0777 \"$WARDCELL_ZONE_SOCKET\" 2>/dev/null && echo chmod-sock; \
         wardcell zone current",
    );
    out.ok();
    assert!(out.stdout.contains("null-ok"), "{out:?}");
    for bad in ["chmod-dev", "touch-dev", "chmod-sock"] {
        assert!(!out.stdout.contains(bad), "{bad}: {out:?}");
    }
    assert!(
        out.stdout.ends_with("agent\n"),
        "the socket still works: {out:?}"
    );
});

both!(
    git_files_beyond_hooks_and_config_are_reported_and_stop_entries,
    |fx| {
        two_zones(&fx);
        fx.write(&fx.proj.join(".git/config"), "[core]\n\tbare = false\n");
        fx.write(&fx.proj.join(".git/hooks/pre-commit.sample"), "#!/bin/sh\n");
        let out = fx.sh("printf '../evil\\n' > .git/commondir && \
         printf '[core]\\n\\tfsmonitor = ./x\\n' > .git/config.worktree && \
         wardcell zone enter build -- true; echo rc=$?");
        assert!(out.stdout.contains("rc=1"), "the entry is refused: {out:?}");
        assert!(
            out.stderr
                .contains("appeared during this run and git would run it in the new sandbox"),
            "{out:?}"
        );
        let warnings: Vec<&str> = out
            .stderr
            .lines()
            .filter(|l| l.starts_with("warning: "))
            .collect();
        assert!(
            warnings.iter().any(|w| w.contains(".git/commondir")),
            "{warnings:?}"
        );
        assert!(
            warnings
                .iter()
                .any(|w| w.contains(".git/config.worktree\" (core.fsmonitor)")),
            "{warnings:?}"
        );
        // Removed again, entries work.
        let out = fx.sh("rm -f .git/commondir .git/config.worktree; wardcell zone enter build -- true; echo rc=$?");
        assert!(out.stdout.contains("rc=0"), "{out:?}");
    }
);

both!(a_rewritten_dot_git_file_is_reported, |fx| {
    fx.test_config("");
    // A linked worktree or submodule checkout: .git is a file naming the real directory.
    fs::create_dir_all(fx.home.join("realgit/hooks")).unwrap();
    fx.write(&fx.proj.join(".git"), "gitdir: ../realgit\n");
    let out = fx.sh("mkdir -p evil/hooks && printf 'gitdir: ./evil\\n' > .git");
    out.ok();
    assert!(
        out.stderr
            .lines()
            .any(|l| l.starts_with("warning: ") && l.contains("/.git\" (changed")),
        "{out:?}"
    );
});

// Root-only secrets under /etc: run as root, the built-in profiles (which read /etc whole)
// mask them (not there at all: /etc is a directory of the view's own then, so `useradd`
// replacing /etc/shadow on the host never reaches the sandbox); run unprivileged, nothing
// changes (they are the host's files, which the kernel refuses as before).
both!(root_only_etc_secrets_are_masked_for_root, |fx| {
    fx.test_config("");
    let host = fs::metadata("/etc/shadow").expect("the host has /etc/shadow");
    assert!(host.len() > 0 && host.permissions().mode() & 0o004 == 0);
    let out = fx.sh(
        "for f in /etc/shadow /etc/gshadow; do stat -c %F $f; cat $f >/dev/null 2>&1 || echo refused; done; \
         cat /etc/passwd > /dev/null && echo passwd",
    );
    out.ok();
    let want = if fx.uid() == 0 {
        "refused\nrefused\npasswd\n"
    } else {
        "regular file\nrefused\nregular file\nrefused\npasswd\n"
    };
    assert_eq!(out.stdout, want, "{out:?}");
    // The rule is decided when the plan is made: an unprivileged policy names none of them.
    let shown = fx.run(&["policy", "show"]);
    assert_eq!(
        shown.stdout.contains("/etc/shadow"),
        fx.uid() == 0,
        "{shown:?}"
    );
});

/// The project as a git repository with a linked worktree `wt` beside it, and a program
/// that leaves `outside/pwned` when git runs it. Returns the worktree and the program.
fn repo_with_worktree(fx: &Fixture) -> (PathBuf, PathBuf) {
    fx.host_git(&fx.proj, &["init", "-q"]).ok();
    fx.host_git(&fx.proj, &["commit", "-q", "--allow-empty", "-m", "one"])
        .ok();
    let wt = fx.home.join("wt");
    fx.host_git(&fx.proj, &["worktree", "add", "-q", wt.to_str().unwrap()])
        .ok();
    let program = fx.outside.join("fsmonitor");
    fx.write(
        &program,
        &format!("#!/bin/sh\ntouch {}/pwned\n", fx.outside.display()),
    );
    fs::set_permissions(&program, fs::Permissions::from_mode(0o755)).unwrap();
    (wt, program)
}

/// `git status` in the worktree on the host runs no planted program; and git here does run
/// a configured fsmonitor (so that the first check can fail).
fn assert_git_runs_nothing_planted(fx: &Fixture, wt: &Path, program: &Path) {
    fx.host_git(wt, &["status", "--short"]).ok();
    let pwned = fx.outside.join("pwned");
    assert!(!pwned.exists(), "git ran the planted program");
    let fsmonitor = format!("core.fsmonitor={}", program.display());
    fx.host_git(wt, &["-c", &fsmonitor, "status", "--short"])
        .ok();
    assert!(pwned.exists(), "this git runs a configured fsmonitor");
}

// A sandbox that writes the project cannot repoint a linked worktree's commondir (or its
// gitdir) at a planted common directory whose config runs a program: the files are bound
// read-only and their directory pinned.
both!(a_linked_worktrees_commondir_cannot_be_repointed, |fx| {
    fx.test_config("");
    let (wt, program) = repo_with_worktree(&fx);
    let out = fx.sh(&format!(
        "cp -r .git planted && printf '[core]\\n\\tfsmonitor = {}\\n' >> planted/config && \
         {{ printf \"$PWD/planted\\n\" > .git/worktrees/wt/commondir && echo repointed; \
         printf '/elsewhere\\n' > .git/worktrees/wt/gitdir && echo gitdir-written; \
         mv .git/worktrees/wt .git/worktrees/old && echo wt-moved; \
         mv .git/worktrees .git/old && echo worktrees-moved; true; }}",
        program.display()
    ));
    out.ok();
    for bad in ["repointed", "gitdir-written", "wt-moved", "worktrees-moved"] {
        assert!(!out.stdout.contains(bad), "{bad}: {out:?}");
    }
    assert_eq!(
        fs::read_to_string(fx.proj.join(".git/worktrees/wt/commondir")).unwrap(),
        "../..\n"
    );
    assert_git_runs_nothing_planted(&fx, &wt, &program);
});

// The same for a worktree's own configuration (read when extensions.worktreeConfig is on).
both!(a_linked_worktrees_config_worktree_cannot_be_written, |fx| {
    fx.test_config("");
    let (wt, program) = repo_with_worktree(&fx);
    fx.host_git(&fx.proj, &["config", "extensions.worktreeConfig", "true"])
        .ok();
    fx.host_git(&wt, &["config", "--worktree", "status.short", "false"])
        .ok();
    let out = fx.sh(&format!(
        "printf '[core]\\n\\tfsmonitor = {}\\n' >> .git/worktrees/wt/config.worktree && echo written; true",
        program.display()
    ));
    out.ok();
    assert!(!out.stdout.contains("written"), "{out:?}");
    assert_git_runs_nothing_planted(&fx, &wt, &program);
});

// A worktree directory made during the run cannot be prevented (the kernel cannot forbid
// names inside a writable tree): it is detected, reported, and zone entries are refused.
both!(
    a_worktree_made_during_the_run_is_reported_and_stops_entries,
    |fx| {
        two_zones(&fx);
        fx.write(&fx.proj.join(".git/config"), "[core]\n\tbare = false\n");
        let out = fx.sh(
        "mkdir -p planted .git/worktrees/evil && printf \"$PWD/planted\\n\" > .git/worktrees/evil/commondir && \
         printf '/elsewhere/.git\\n' > .git/worktrees/evil/gitdir && \
         wardcell zone enter build -- true; echo rc=$?",
    );
        assert!(out.stdout.contains("rc=1"), "the entry is refused: {out:?}");
        let warnings: Vec<&str> = out
            .stderr
            .lines()
            .filter(|l| l.starts_with("warning: "))
            .collect();
        for name in ["worktrees/evil/commondir", "worktrees/evil/gitdir"] {
            assert!(warnings.iter().any(|w| w.contains(name)), "{name}: {out:?}");
        }
    }
);

// A profile that writes the host's /tmp itself (or a run started there) gets the host's
// /tmp: before, the tree was cloned after the sandbox's root had been staged on the
// host's /tmp, so /tmp showed a copy of the half-built view (its /etc, /proc, ...) in
// the place of the host's, and what the command wrote there went nowhere.
both!(a_profile_writing_tmp_gets_the_hosts_tmp, |fx| {
    fx.test_config("write = [\"/tmp\"]\n");
    let name = format!("wardcell-view-tmp-{}-{}", std::process::id(), fx.uid());
    let host = PathBuf::from("/tmp").join(&name);
    let _ = fs::remove_file(&host);
    let out = fx.sh(&format!(
        "echo written > /tmp/{name} && test ! -e /tmp/proc && test ! -e /tmp/etc && echo ok"
    ));
    let written = fs::read_to_string(&host);
    let _ = fs::remove_file(&host);
    out.expect_code(0);
    assert_eq!(out.stdout, "ok\n", "{out:?}");
    assert_eq!(written.unwrap_or_default(), "written\n");
});

// Issue 25, item 4: a profile of many read paths (siblings whose parent is not in the
// view). Each is bound alone, needs no Landlock rule of its own (the root's read rule
// reaches it), and is mounted on by name in the view's own tmpfs. What the sandbox sees
// stays exactly the named paths: each readable and executable, none writable, the
// sibling not named absent, and one swapped for a link or another directory after the
// run started refuses the sandbox.
both!(many_read_paths_are_each_what_was_named, |fx| {
    const N: usize = 200;
    let many = fx.proj.join("many");
    let mut read = Vec::new();
    for i in 0..N {
        let d = many.join(format!("s{i:03}"));
        fx.write(&d.join("f"), &format!("{i}\n"));
        read.push(format!("\"{}\"", d.display()));
    }
    fx.write(&many.join("unnamed/f"), "not in the view\n");
    let x = many.join("s007/x");
    fx.write(&x, "#!/bin/sh\necho ran\n");
    fs::set_permissions(&x, fs::Permissions::from_mode(0o755)).unwrap();
    read.push(format!("\"{}\"", fx.bin.display()));
    fx.config(&format!(
        "[zones.agent]\nprofile = \"developer-readonly\"\ndefault = true\n\
         [zones.build]\nprofile = \"many\"\nenter_from = [\"agent\"]\n\
         [profiles.many]\nextends = \"base\"\nread = [{}]\n",
        read.join(", ")
    ));
    let out = fx.sh("cd many/s000 && wardcell zone enter build -- /bin/sh -c '\
           cat ../s*/f | wc -l; ls .. | wc -l; test -e ../unnamed || echo no-unnamed; \
           ../s007/x; ls ../s199; m=$(cd .. && pwd); \
           grep -c -E \"^([^ ]+ ){4}$m/s[0-9]+ ro,nosuid,nodev(,| )\" /proc/self/mountinfo; \
           for w in \"touch ../s001/new\" \": > ../s002/f\" \"mkdir ../s003/d\"; do \
             (eval \"$w\") 2>&1 | grep -c \"Read-only file system\"; done; echo end'; echo rc=$?; \
         mv ../s150 ../s150.old && ln -s \"$HOME\" ../s150 && \
         wardcell zone enter build -- true; echo linked=$?; \
         rm ../s150 && mkdir ../s150 && wardcell zone enter build -- true; echo replaced=$?");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(
        lines,
        [
            &N.to_string(),
            &N.to_string(),
            "no-unnamed",
            "ran",
            "f",
            // Each its own mount, read-only, nosuid and nodev.
            &N.to_string(),
            // Refused by the read-only mount each tree is (EROFS comes before
            // Landlock's EACCES), for creating, truncating and making a directory.
            "1",
            "1",
            "1",
            "end",
            "rc=0",
            "linked=1",
            "replaced=1"
        ],
        "{out:?}"
    );
    let changed = format!("{}/s150 changed since the run started", many.display());
    assert_eq!(out.stderr.matches(&changed).count(), 2, "{out:?}");
    assert_eq!(fs::read_to_string(many.join("s002/f")).unwrap(), "2\n");
    assert!(!many.join("s001/new").exists());
});

both!(
    read_trees_are_the_same_on_a_kernel_without_open_tree_attr,
    |fx| {
        // open_tree_attr(2) (Linux 6.15) answers ENOSYS here, as on an older kernel: the shim
        // clones each tree and sets its attributes in two calls instead, with the same result.
        const N: usize = 20;
        let many = fx.proj.join("many");
        let mut read = Vec::new();
        for i in 0..N {
            let d = many.join(format!("s{i:02}"));
            fx.write(&d.join("f"), &format!("{i}\n"));
            read.push(format!("\"{}\"", d.display()));
        }
        fx.config(&format!(
            "[zones.agent]\nprofile = \"many\"\ndefault = true\n\
         [profiles.many]\nextends = \"developer-readonly\"\nread = [{}]\n",
            read.join(", ")
        ));
        let script = format!(
            "cat {m}/s*/f | wc -l; \
         grep -c -E \"^([^ ]+ ){{4}}{m}/s[0-9]+ ro,nosuid,nodev(,| )\" /proc/self/mountinfo; \
         (: > {m}/s03/f) 2>&1 | grep -c 'Read-only file system'",
            m = many.display()
        );
        let wardcell = fx.bin.join("wardcell");
        let wardcell = wardcell.to_str().unwrap();
        let run = ["run", "--", "/bin/sh", "-c", &script];
        let with = fx.run(&run);
        let mut without_args = vec!["enosys", "467", wardcell];
        without_args.extend_from_slice(&run);
        let without = fx.run_binary(&fx.bin.join("wardcell-probe"), &without_args);
        let want = format!("{N}\n{N}\n1\n");
        assert_eq!(with.stdout, want, "{with:?}");
        assert_eq!(without.stdout, want, "{without:?}");
        assert_eq!(fs::read_to_string(many.join("s03/f")).unwrap(), "3\n");
    }
);
