//! The terminal, stopped commands and closed stdio (issue 19, items 1, 5 and 6): a
//! command never holds the caller's terminal (a pty of its own whenever any of stdin,
//! stdout or stderr is one, for `run` and `zone enter`), so job control behaves as
//! without wardcell; a stopped command is ended by SIGTERM, SIGHUP and SIGINT to
//! `wardcell run`; a closed stdin or stdout stays closed through `zone enter`.
//! Real sandboxes driven from a real interactive shell on a real pty, run as the invoking
//! user and as an unprivileged uid.

use std::fs;
use std::os::fd::{AsRawFd, FromRawFd};
use std::time::{Duration, Instant};

use wardcell_tests::{both, Fixture, Shell, Tree, Watched};

/// Zones `agent` (default) and `build` (entered from agent), both able to run the staged
/// binaries.
fn zones_config(fx: &Fixture) {
    zones_config_with(fx, "readonly", "")
}

/// [`zones_config`] with the profile extending `base`, and `extra` lines in it.
fn zones_config_with(fx: &Fixture, base: &str, extra: &str) {
    fx.config(&format!(
        r#"
[zones.agent]
profile = "dev"
default = true

[zones.build]
profile = "dev"
enter_from = ["agent"]

[profiles.dev]
extends = "{base}"
read = ["{}"]
{extra}
"#,
        fx.bin.display()
    ));
}

both!(a_backgrounded_run_reading_the_terminal_is_stopped, |fx| {
    fx.test_config("");
    let mut sh = Shell::start(&fx);
    // stdin is the terminal, stdout is not: before, the command held the terminal itself
    // (no pty, a session of its own) and read what was typed into the shell.
    sh.type_in(
        "wardcell run -- /bin/sh -c 'echo STAR\"\"TED >&2; read x; echo \"got:$x\"' > out.txt &\n",
    );
    sh.wait_for("STARTED");
    // A line for the shell: it runs it (42), the sandbox never reads it.
    sh.type_in("echo typed-$((6*7))\n");
    sh.wait_for("typed-42");
    sh.wait_for_stopped();
    // `fg`: now the command reads what is typed.
    sh.type_in("fg\n");
    // Typed once the run has the terminal again, not while the shell reads.
    sh.wait_for_job_in_foreground();
    sh.type_in("second\n");
    let out = fx.proj.join("out.txt");
    let until = Instant::now() + Duration::from_secs(20);
    while !fs::read_to_string(&out)
        .unwrap_or_default()
        .contains("got:")
    {
        assert!(Instant::now() < until, "{}", sh.seen());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(fs::read_to_string(&out).unwrap(), "got:second\n");
    sh.wait_for_prompt_after("fg\r\n");
    sh.finish(0);
});

// A caller that left 3 or 4 open makes the broker's socket or the pty land at 4 or 5,
// where the other is placed: each is moved above 5 first (a review found `fd 4 is not
// what was left there` under a terminal).
both!(
    a_terminal_run_works_whatever_the_caller_left_at_3_and_4,
    |fx| {
        fx.test_config("");
        let mut sh = Shell::start(&fx);
        sh.type_in(
            "wardcell run -- /bin/sh -c 'test -t 1 && echo PTY\"\"-OK' 3>>three.txt; echo rc3=$?\n",
        );
        sh.wait_for("rc3=0");
        sh.type_in(
            "wardcell run -- /bin/sh -c 'test -t 1 && echo PTY\"\"-OK' 4>>four.txt; echo rc4=$?\n",
        );
        sh.wait_for("rc4=0");
        sh.type_in("wardcell run -- true 3>>three.txt 4>>four.txt; echo rc34=$?\n");
        sh.wait_for("rc34=0");
        let seen = sh.seen();
        assert_eq!(seen.matches("PTY-OK").count(), 2, "{seen}");
        sh.finish(0);
    }
);

both!(stdout_alone_on_a_terminal_still_gets_a_pty, |fx| {
    fx.test_config("");
    let mut sh = Shell::start(&fx);
    // Before, fd 1 was the caller's terminal: read back through it, the command took the
    // line typed next. Now it is a pty of the command's own, where nothing is typed.
    sh.type_in(
        // (`sleep 2; kill`: the window in which a command reading its stdout would take
        // the line typed next; nothing comes to show that it did not.)
        "wardcell run -- /bin/sh -c 'test -t 0 || echo IN-NOT\"\"-TTY; test -t 1 && echo OUT\"\"-TTY; (sleep 2; kill $$) & read x <&1; echo \"got:$x\"' < /dev/null\n",
    );
    sh.wait_for("OUT-TTY");
    sh.type_in("echo typed-$((6*7))\n");
    sh.wait_for("typed-42");
    let seen = sh.seen();
    assert!(seen.contains("IN-NOT-TTY"), "{seen}");
    assert!(!seen.contains("got:echo"), "{seen}");
    sh.finish(0);
});

both!(
    a_backgrounded_zone_enter_reading_the_terminal_is_stopped,
    |fx| {
        zones_config(&fx);
        let mut sh = Shell::start(&fx);
        // Inside the run, a shell with job control starts an entry in the background. What
        // the user types while the shell waits (for `go`) wakes the entry's client, which
        // is stopped (SIGTTIN) before it reads; the shell then reads the line. Before, the
        // entered command held the terminal itself and took the line.
        sh.type_in(concat!(
        "wardcell run -- /bin/sh -c '",
        "set -m; wardcell zone enter build -- /bin/sh -c \"echo ENTE\\\"\\\"RED; read x; echo got:\\$x\" & ",
        "while [ ! -e go ]; do sleep 0.02; done; read y; echo \"shell:$y\"; jobs; kill -KILL %1; echo RUN-\"\"DONE'\n"
    ));
        sh.wait_for("ENTERED");
        sh.type_in("secret\n");
        // The entry's client (a `wardcell` under the user's shell) stops; then the run's
        // shell may read.
        wardcell_tests::wait_until(20, "the entry's client to stop", || {
            wardcell_tests::descendants(sh.pid())
                .iter()
                .any(|p| p.comm == "wardcell" && state(p.pid) == Some('T'))
        });
        fx.write(&fx.proj.join("go"), "");
        sh.wait_for("shell:secret");
        sh.wait_for("Stopped");
        let seen = sh.seen();
        assert!(!seen.contains("got:secret"), "{seen}");
        // The run is over when the user's shell prompts again.
        sh.wait_for_prompt_after("RUN-DONE");
        sh.finish(0);
    }
);

both!(
    zone_enter_with_stdout_alone_on_a_terminal_gets_a_pty,
    |fx| {
        zones_config(&fx);
        let mut sh = Shell::start(&fx);
        // (`sleep 2; kill`: the window for the entered command to take the line, as above.)
        sh.type_in(concat!(
        "wardcell run -- /bin/sh -c '",
        "wardcell zone enter build -- /bin/sh -c \"test -t 1 && echo OUT-\\\"\\\"TTY; (sleep 2; kill \\$\\$) & read x <&1; echo got:\\$x\" < /dev/null; ",
        "read y; echo \"shell:$y\"'\n"
    ));
        sh.wait_for("OUT-TTY");
        sh.type_in("secret\n");
        sh.wait_for("shell:secret");
        let seen = sh.seen();
        assert!(!seen.contains("got:secret"), "{seen}");
        sh.wait_for_prompt_after("shell:secret");
        sh.finish(0);
    }
);

/// The state letter of `pid` in /proc (R, S, T, ...), if it is there.
fn state(pid: u32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Start `wardcell run -- /bin/sh -c SCRIPT` (which stops itself) and wait until its sh
/// is stopped.
fn start_stopped(fx: &Fixture, script: &str, tag: &str) -> (Watched, u32) {
    let mut w = Watched::spawn(fx, fx.cmd(&["run", "--", "/bin/sh", "-c", script]), tag);
    let sh = w.tree.wait_for("sh", 1)[0].pid;
    let until = Instant::now() + Duration::from_secs(10);
    while state(sh) != Some('T') {
        assert!(Instant::now() < until, "the command did not stop");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Signals go to `wardcell run` (its keeper passes them on).
    let client = w.tree.client.pid;
    (w, client)
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill with a pid this test spawned and has not reaped.
    assert_eq!(unsafe { libc::kill(pid as i32, sig) }, 0);
}

both!(a_stopped_command_is_ended_by_term_hup_and_int, |fx| {
    fx.test_config("");
    for sig in [libc::SIGTERM, libc::SIGHUP, libc::SIGINT] {
        let (w, broker) = start_stopped(&fx, "kill -STOP $$; echo RESUMED", &format!("s{sig}"));
        let t = Instant::now();
        signal(broker, sig);
        // The signal, then SIGCONT: it ends at once, by that signal.
        let (out, tree): (_, Tree) = w.finish(4);
        assert!(t.elapsed() < Duration::from_secs(4));
        assert_eq!(out.code, 128 + sig, "{out:?}");
        assert!(!out.stdout.contains("RESUMED"), "{out:?}");
        tree.assert_all_gone();
    }
    // One that ignores them is killed when the grace (5 s) is over.
    let (w, broker) = start_stopped(&fx, "trap '' TERM; kill -STOP $$; sleep 60", "ignoring");
    let t = Instant::now();
    signal(broker, libc::SIGTERM);
    let (out, tree) = w.finish(10);
    assert!(
        t.elapsed() >= Duration::from_millis(4500),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(out.code, 128 + libc::SIGKILL, "{out:?}");
    tree.assert_all_gone();
});

both!(sigcont_to_the_run_is_forwarded, |fx| {
    fx.test_config("");
    let (w, broker) = start_stopped(&fx, "kill -STOP $$; echo RESUMED", "cont");
    signal(broker, libc::SIGCONT);
    let (out, tree) = w.finish(5);
    out.ok();
    assert!(out.stdout.contains("RESUMED"), "{out:?}");
    tree.assert_all_gone();
});

both!(
    a_closed_stdin_or_stdout_stays_closed_through_zone_enter,
    |fx| {
        zones_config(&fx);
        // Before, each became /dev/null for the entered command: writes succeeded, lost.
        let out = fx.sh(concat!(
            "wardcell zone enter build -- /bin/echo hi >&-; echo \"out=$?\"; ",
            "wardcell zone enter build -- /bin/cat <&-; echo \"in=$?\"; ",
            "wardcell zone enter build -- /bin/echo open"
        ));
        out.ok();
        assert!(out.stdout.contains("out=1"), "{out:?}");
        assert!(out.stdout.contains("in=1"), "{out:?}");
        assert!(out.stdout.contains("open"), "{out:?}");
        assert!(
            out.stderr
                .contains("echo: write error: Bad file descriptor")
                && out.stderr.contains("cat: -: Bad file descriptor"),
            "{out:?}"
        );
    }
);

both!(
    a_terminal_that_hangs_up_ends_the_run_even_if_it_ignores_sighup,
    |fx| {
        fx.test_config("");
        // The terminal closes under a command that ignores SIGHUP (or is stopped: the
        // issue's case). Before, the sandbox stayed for ever; now the hangup is forwarded,
        // then SIGCONT, then SIGKILL after the grace.
        let mut master: libc::c_int = -1;
        let mut slave: libc::c_int = -1;
        // SAFETY: openpty writes two descriptors; name, termios and size pointers are null.
        let r = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        assert_eq!(r, 0);
        // Close-on-exec at once: a run another test starts meanwhile must not hold the master.
        for fd in [master, slave] {
            // SAFETY: F_SETFD on descriptors we own.
            unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        }
        // SAFETY: openpty returned two new descriptors that we now own.
        let (master, slave) = unsafe {
            (
                std::os::fd::OwnedFd::from_raw_fd(master),
                std::os::fd::OwnedFd::from_raw_fd(slave),
            )
        };
        if fx.who == wardcell_tests::As::User && wardcell_tests::is_root() {
            // SAFETY: fchown on a descriptor we own.
            unsafe { libc::fchown(slave.as_raw_fd(), fx.uid(), fx.uid()) };
        }
        let mut cmd = fx.cmd(&["run", "--", "/bin/sh", "-c", "trap '' HUP; sleep 60"]);
        cmd.stdin(slave.try_clone().unwrap());
        // SAFETY: setsid and TIOCSCTTY in the child before exec, as a terminal emulator does.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut w = Watched::spawn(&fx, cmd, "hangup");
        drop(slave);
        w.tree.wait_for("sleep", 1);
        let t = Instant::now();
        drop(master);
        let (out, tree) = w.finish(10);
        assert!(
            t.elapsed() >= Duration::from_millis(4500),
            "{:?}",
            t.elapsed()
        );
        assert_ne!(out.code, 0, "{out:?}");
        tree.assert_all_gone();
    }
);

// A run stopped for reading the terminal in the background takes raw mode again as soon
// as `fg` gives it the terminal: a single key, no Enter, reaches a command reading one
// byte. Before, the broker was continued inside its read, in the shell's line mode, and
// relayed nothing until a whole line was typed.
both!(after_fg_a_single_key_reaches_the_command, |fx| {
    fx.test_config("");
    let mut sh = Shell::start(&fx);
    sh.type_in(
        "wardcell run -- /bin/sh -c 'stty raw -echo; echo STAR\"\"TED >&2; c=$(dd bs=1 count=1 2>/dev/null); echo \"got:$c\"' > out.txt &\n",
    );
    sh.wait_for("STARTED");
    sh.wait_for_stopped();
    sh.type_in("fg\n");
    sh.wait_for_job_in_foreground();
    sh.type_in("k");
    let out = fx.proj.join("out.txt");
    let until = Instant::now() + Duration::from_secs(10);
    while !fs::read_to_string(&out)
        .unwrap_or_default()
        .contains("got:")
    {
        assert!(
            Instant::now() < until,
            "one key after fg did not reach the command in 10 s: {}",
            sh.seen()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(fs::read_to_string(&out).unwrap(), "got:k\n");
    // The shell gives the job the terminal in the mode it saved, echo on, and the run
    // takes raw mode again on SIGCONT: a key typed in between is echoed once (and still
    // reaches the command, above), so the prompt may follow it on the same line.
    sh.wait_for_prompt_after_echo("fg\r\n", "k");
    sh.finish(0);
});

// Issue 35, item 4: a command that stops itself (no Ctrl-Z typed) never stops the run:
// the broker, which decides, goes on (its time limit, supervisors and audit with it), and
// the command is continued. Ctrl-Z typed by the user still stops the job (tests above).
both!(a_command_stopping_itself_never_stops_the_run, |fx| {
    fx.test_config("");
    let mut sh = Shell::start(&fx);
    sh.type_in(
        "wardcell run -- /bin/sh -c 'kill -STOP $$; kill -TSTP $$; echo contin\"\"ued-$((6*7))'\n",
    );
    sh.wait_for("continued-42");
    sh.wait_for_prompt_after("continued-42");
    assert!(!sh.seen().contains("Stopped"), "{}", sh.seen());
    sh.finish(0);
});

// Issue 35, item 4: the user's Ctrl-Z stops the job (the command, and `wardcell run`, the
// terminal keeper the shell waits on), never the broker: while the job is stopped, an
// entry from a process of the sandbox outside the stopped group is decided, and the time
// limit ends the run. `fg` then gives the status. Before, the broker stopped itself with
// its time limit and supervisors until `fg`.
both!(ctrl_z_never_stops_the_broker, |fx| {
    zones_config_with(&fx, "developer-readonly", "limits = { time = \"20s\" }");
    let mut sh = Shell::start(&fx);
    let entered = fx.proj.join("entered");
    let go = fx.proj.join("go");
    // A process in a session of its own waits for `go` (made once the job is stopped),
    // then enters `build` (its output to a file: while the job is stopped, no one reads
    // the terminal, as for any stopped job); the command itself waits in the foreground.
    sh.type_in(concat!(
        "wardcell run -- /bin/sh -c '",
        "setsid /bin/sh -c \"while [ ! -e go ]; do sleep 0.05; done; wardcell zone enter build -- /bin/true > enter.out 2>&1 && touch entered\" & ",
        // Another, once that entry is done, stops and continues the command as fast as
        // it can: each stop is told to the stopped keeper, which reads nothing (the review
        // wedged the broker in that write, and the time limit with it).
        "P=$$; setsid /bin/sh -c \"while [ ! -e entered ]; do sleep 0.05; done; while :; do kill -CONT $P; kill -STOP $P; done\" 2>/dev/null & ",
        "echo STAR\"\"TED; sleep 60'\n"
    ));
    sh.wait_for("STARTED\r\n");
    let started = Instant::now();
    let until = Instant::now() + Duration::from_secs(20);
    while !sh.seen().contains("Stopped") {
        sh.type_in("\x1a");
        let tried = Instant::now() + Duration::from_secs(2);
        while Instant::now() < tried && !sh.seen().contains("Stopped") {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(Instant::now() < until, "never stopped: {}", sh.seen());
    }
    let procs = wardcell_tests::descendants(sh.pid());
    let client = procs.iter().find(|p| p.comm == "wardcell").expect("client");
    let broker = procs
        .iter()
        .find(|p| p.comm == "wardcell-broker")
        .expect("broker");
    wardcell_tests::wait_until(10, "the client to stop", || state(client.pid) == Some('T'));
    assert_ne!(state(broker.pid), Some('T'), "the broker stopped");
    // Supervisors answer while the job is stopped.
    fs::write(&go, "").unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    while !entered.exists() {
        if Instant::now() > until {
            let states: Vec<String> = wardcell_tests::descendants(sh.pid())
                .iter()
                .map(|p| {
                    let wchan =
                        fs::read_to_string(format!("/proc/{}/wchan", p.pid)).unwrap_or_default();
                    format!("{} {} {:?} {wchan}", p.pid, p.comm, state(p.pid))
                })
                .collect();
            panic!(
                "no entry while the job is stopped: {}\n{}",
                states.join("\n"),
                sh.seen()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // The time limit runs on: the broker ends the run while the job is still stopped.
    wardcell_tests::wait_until(40, "the broker to end at the time limit", || {
        !wardcell_tests::alive(broker)
    });
    assert!(started.elapsed() < Duration::from_secs(40));
    assert!(!sh.seen().contains("rc="), "{}", sh.seen());
    sh.type_in("fg\n");
    sh.wait_for_prompt_after("fg\r\n");
    // The time limit's status (124), given by `wardcell run` once continued.
    sh.finish(124);
});

// The review: a command that reads nothing while more is typed (or pasted, or answered
// by the terminal to its queries) than its pty holds held the keeper in its write, so
// SIGTERM to `wardcell run` was passed on to no one. What the pty cannot take is dropped,
// as a full terminal's input is, and the run ends on SIGTERM.
both!(a_command_that_reads_nothing_never_holds_the_keeper, |fx| {
    fx.test_config("");
    let mut sh = Shell::start(&fx);
    sh.type_in("wardcell run -- /bin/sh -c 'stty raw -echo; echo STAR\"\"TED; sleep 60'\n");
    sh.wait_for("STARTED");
    // 64 KiB typed, from a thread: this terminal's own buffer may fill as well.
    let mut master = sh.master_clone();
    std::thread::spawn(move || {
        use std::io::Write;
        let _ = master.write_all(&vec![b'x'; 64 * 1024]);
    });
    std::thread::sleep(Duration::from_millis(500));
    let client = wardcell_tests::descendants(sh.pid())
        .into_iter()
        .find(|p| p.comm == "wardcell")
        .expect("the client");
    let t = Instant::now();
    signal(client.pid, libc::SIGTERM);
    wardcell_tests::wait_until(10, "the run to end on SIGTERM", || {
        !wardcell_tests::alive(&client)
    });
    assert!(t.elapsed() < Duration::from_secs(7), "{:?}", t.elapsed());
});

// Without a pty, the shell's Ctrl-Z (SIGTSTP to `wardcell run`) stops the command and the
// keeper, never the broker; SIGCONT (`fg`) continues both. Before, the broker stopped and
// the command ran on.
both!(
    sigtstp_without_a_pty_stops_the_command_not_the_broker,
    |fx| {
        fx.test_config("");
        // A loop of builtins: a shell that forks `sleep` spends much of its time in
        // vfork, where a stop lands on the child only (docs/COMMANDS.md: press Ctrl-Z
        // again), and the test would be about that race instead.
        let script = "while [ ! -e go ]; do :; done; echo DONE";
        // A process group of its own, as a shell gives a job: in the test runner's, a
        // group orphaned by another test's process ending gets SIGHUP and SIGCONT.
        let mut cmd = fx.cmd(&["run", "--", "/bin/sh", "-c", script]);
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut w = Watched::spawn(&fx, cmd, "tstp");
        let sh = w.tree.wait_for("sh", 1)[0].pid;
        let broker = w.tree.broker();
        let client = w.tree.client.pid;
        signal(client, libc::SIGTSTP);
        // The client stops too, as a job does, where its process group is not orphaned
        // (under a test runner it may be: the kernel then discards that stop, as it does
        // for any process).
        wardcell_tests::wait_until(10, "the command to stop", || state(sh) == Some('T'));
        assert_ne!(state(broker.pid), Some('T'), "the broker stopped");
        fs::write(fx.proj.join("go"), "").unwrap();
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(state(sh), Some('T'), "the command ran on");
        signal(client, libc::SIGCONT);
        let (out, tree) = w.finish(10);
        out.ok();
        assert!(out.stdout.contains("DONE"), "{out:?}");
        tree.assert_all_gone();
    }
);

// `wardcell run` killed (SIGKILL to the keeper) takes the broker and every sandbox with
// it, as killing the broker did before there was a keeper.
both!(a_killed_client_takes_the_broker_with_it, |fx| {
    fx.test_config("");
    let mut w = Watched::spawn(&fx, fx.cmd(&["run", "--", "/bin/sleep", "60"]), "killed");
    w.tree.wait_for("sleep", 1);
    let broker = w.tree.broker();
    signal(w.tree.client.pid, libc::SIGKILL);
    let (out, tree) = w.finish(10);
    assert_eq!(out.code, 128 + libc::SIGKILL, "{out:?}");
    assert!(tree.seen.contains(&broker));
    tree.assert_all_gone();
});
