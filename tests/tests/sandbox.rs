//! Real sandboxes, real escape attempts. Every test runs as the invoking user (root in
//! CI) and as an unprivileged uid.

use std::fs;
use std::io::Read;
use std::net::{TcpListener, UdpSocket};
use std::time::{Duration, Instant};

use wardcell_tests::{both, wait_until, Fixture, Out};

fn status_field<'a>(out: &'a str, field: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map(str::trim)
        .unwrap_or_else(|| panic!("{field} missing from {out}"))
}

both!(command_runs_and_status_relays, |fx| {
    fx.sh("exit 0").ok();
    fx.sh("exit 7").expect_code(7);
    // A signal becomes 128+N.
    fx.sh("kill -TERM $$").expect_code(143);
    let out = fx.sh("echo hello; echo oops >&2");
    out.ok();
    assert_eq!(out.stdout, "hello\n");
    assert_eq!(out.stderr, "oops\n");
});

both!(exec_failures_are_reported, |fx| {
    let out = fx.run(&["run", "--", "no-such-command-wardcell"]);
    out.expect_code(127);
    assert!(
        out.stderr
            .starts_with("error: `no-such-command-wardcell`: command not found"),
        "{out:?}"
    );
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");

    let script = fx.proj.join("not-executable.sh");
    fx.write(&script, "#!/bin/sh\necho ran\n");
    let out = fx.run(&["run", "--", script.to_str().unwrap()]);
    out.expect_code(126);
    assert!(out.stderr.starts_with("error: `"), "{out:?}");
    assert!(!out.stdout.contains("ran"));
});

both!(allowed_reads_and_writes_work, |fx| {
    fx.write(&fx.proj.join("in.txt"), "input");
    let out =
        fx.sh("cat in.txt && echo written > out.txt && mkdir -p sub/dir && echo x > sub/dir/f");
    out.ok();
    assert_eq!(out.stdout, "input");
    assert_eq!(
        fs::read_to_string(fx.proj.join("out.txt")).unwrap(),
        "written\n"
    );
    assert!(fx.proj.join("sub/dir/f").is_file());
});

both!(writes_outside_the_profile_fail, |fx| {
    fx.test_config("");
    // The home is readable but not writable in developer-readonly.
    let target = fx.home.join("notes.txt");
    fx.write(&target, "original");
    let t = target.to_str().unwrap();
    // Two barriers refuse this: the read-only mount (EROFS) before Landlock (EACCES).
    let refused = |o: &wardcell_tests::Out| {
        o.stdout.starts_with("err EROFS") || o.stdout.starts_with("err EACCES")
    };
    let out = fx.probe(&["write", t, "changed"]);
    out.expect_code(1);
    assert!(refused(&out), "{out:?}");
    let out = fx.probe(&["truncate", t]);
    assert!(refused(&out), "{out:?}");
    // Landlock alone: /proc is mounted writable, but the profile only reads it.
    let out = fx.probe(&["write", "/proc/self/comm", "renamed"]);
    assert!(out.stdout.starts_with("err EACCES"), "{out:?}");
    let out = fx.probe(&["rename", t, fx.proj.join("moved").to_str().unwrap()]);
    assert!(out.stdout.starts_with("err"), "{out:?}");
    assert_eq!(fs::read_to_string(&target).unwrap(), "original");
    // Outside the profile's trees entirely: not there at all.
    let secret = fx.outside.join("secret.txt");
    fx.write(&secret, "hidden");
    let out = fx.probe(&["read", secret.to_str().unwrap()]);
    assert!(out.stdout.starts_with("err ENOENT"), "{out:?}");
});

both!(deny_paths_are_masked_inside_allowed_trees, |fx| {
    fx.test_config("");
    let key = fx.home.join(".ssh/id_ed25519");
    fx.write(&key, "PRIVATE KEY");
    let aws = fx.home.join(".aws/credentials");
    fx.write(&aws, "[default]\nkey=1");
    for p in [&key, &aws] {
        let out = fx.probe(&["read", p.to_str().unwrap()]);
        assert!(
            out.stdout.starts_with("err"),
            "{} readable: {out:?}",
            p.display()
        );
    }
    let out = fx.sh("ls -a ~/.ssh 2>&1; cat ~/.ssh/id_ed25519 2>&1; echo end");
    assert!(!out.stdout.contains("PRIVATE KEY"), "{out:?}");
    assert!(!out.stdout.contains("id_ed25519\n"), "{out:?}");
    assert_eq!(fs::read_to_string(&key).unwrap(), "PRIVATE KEY");
});

both!(own_directories_stay_unwritable_with_write_home, |fx| {
    fx.config(&format!(
        "[zones.agent]\nprofile = \"wide\"\ndefault = true\n\n[profiles.wide]\nextends = \"developer-readonly\"\nread = [\"{}\"]\nwrite = [\"~\"]\n",
        fx.bin.display()
    ));
    let cfg = fx.home.join(".config/wardcell/zones.toml");
    let before = fs::read_to_string(&cfg).unwrap();
    let h = fx.home.to_str().unwrap();
    // The home is writable...
    fx.probe(&["write", &format!("{h}/scratch.txt"), "x"]).ok();
    // ...but wardcell's config and state are not, by any route.
    for (args, what) in [
        (
            vec![
                "write",
                &format!("{h}/.config/wardcell/zones.toml"),
                "[zones]",
            ],
            "config write",
        ),
        (
            vec!["mkdir", &format!("{h}/.config/wardcell/new")],
            "config mkdir",
        ),
        (
            vec![
                "write",
                &format!("{h}/.local/state/wardcell/runs/fake.jsonl"),
                "{}",
            ],
            "state write",
        ),
        (
            vec![
                "rename",
                &format!("{h}/.config"),
                &format!("{h}/.config-moved"),
            ],
            "rename config parent",
        ),
        (
            vec![
                "rename",
                &format!("{h}/.config/wardcell"),
                &format!("{h}/wc"),
            ],
            "rename config dir",
        ),
        (
            vec![
                "rename",
                &format!("{h}/.local"),
                &format!("{h}/.local-moved"),
            ],
            "rename state ancestor",
        ),
        (
            vec!["read", &format!("{h}/.config/wardcell/zones.toml")],
            "config read",
        ),
    ] {
        let out = fx.probe(&args);
        assert!(out.stdout.starts_with("err"), "{what} succeeded: {out:?}");
    }
    assert_eq!(fs::read_to_string(&cfg).unwrap(), before);
    assert!(!fx.home.join(".config-moved").exists());
    assert!(!fx.home.join(".local-moved").exists());
});

both!(symlinks_and_hard_links_do_not_reach_outside, |fx| {
    fx.test_config("");
    let outside = fx.outside.join("target.txt");
    fx.write(&outside, "untouched");
    let home_file = fx.home.join("readonly.txt");
    fx.write(&home_file, "untouched");
    std::os::unix::fs::symlink(&outside, fx.proj.join("link-out")).unwrap();
    std::os::unix::fs::symlink(&home_file, fx.proj.join("link-home")).unwrap();
    fx.own(&fx.proj);
    for link in ["link-out", "link-home"] {
        let out = fx.probe(&["write", fx.proj.join(link).to_str().unwrap(), "changed"]);
        assert!(out.stdout.starts_with("err"), "{link}: {out:?}");
    }
    // A hard link to a file the sandbox may only read would make it writable: refused.
    let out = fx.probe(&[
        "link",
        home_file.to_str().unwrap(),
        fx.proj.join("hard").to_str().unwrap(),
    ]);
    assert!(out.stdout.starts_with("err"), "{out:?}");
    assert_eq!(fs::read_to_string(&outside).unwrap(), "untouched");
    assert_eq!(fs::read_to_string(&home_file).unwrap(), "untouched");
});

both!(no_tcp_or_udp_to_the_host, |fx| {
    fx.test_config("");
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    let port = tcp.local_addr().unwrap().port().to_string();
    let out = fx.probe(&["tcp", "127.0.0.1", &port]);
    assert!(out.stdout.starts_with("err"), "{out:?}");
    assert!(tcp.accept().is_err(), "the host listener got a connection");

    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let port = udp.local_addr().unwrap().port().to_string();
    // The datagram goes to the sandbox's own loopback, if anywhere: never to the host.
    let _ = fx.probe(&["udp", "127.0.0.1", &port]);
    let mut buf = [0u8; 64];
    assert!(
        udp.recv_from(&mut buf).is_err(),
        "the host received a datagram"
    );
});

both!(no_namespaces_no_mounts, |fx| {
    fx.test_config("");
    for ns in ["user", "net", "mount", "pid"] {
        let out = fx.probe(&["unshare", ns]);
        assert!(out.stdout.starts_with("err EPERM"), "unshare {ns}: {out:?}");
    }
    let out = fx.probe(&["clone-newuser"]);
    assert!(out.stdout.starts_with("err EPERM"), "{out:?}");
    // clone3 answers ENOSYS so that libc falls back to the clone(2) the filter checks.
    let out = fx.probe(&["clone3"]);
    assert!(out.stdout.starts_with("err ENOSYS"), "{out:?}");
    let out = fx.probe(&["mount-tmpfs", fx.proj.to_str().unwrap()]);
    assert!(out.stdout.starts_with("err EPERM"), "{out:?}");
    let out = fx.probe(&["umount", "/proc"]);
    assert!(out.stdout.starts_with("err EPERM"), "{out:?}");
    // And the tools a person would reach for.
    let out = fx.sh("unshare -Ur true");
    assert_ne!(out.code, 0, "{out:?}");
});

// A sandbox tool looked up by name inside says that wardcell is already the sandbox
// (issue 21, item 5), instead of the kernel's EPERM and the tool's guess at why; by its
// own path the tool is still refused by the kernel.
both!(sandbox_tools_say_wardcell_is_the_sandbox, |fx| {
    fx.test_config("");
    let out = fx.sh(
        "command -v bwrap; bwrap --ro-bind / / /bin/true; echo \"bwrap rc=$?\"; \
         firejail --quiet true; echo \"firejail rc=$?\"; nsjail -- /bin/true; echo \"nsjail rc=$?\"",
    );
    out.ok();
    let nested = fx.bin.join("wardcell-nested");
    assert!(
        out.stdout
            .starts_with(&format!("{}\n", nested.join("bwrap").display())),
        "{out:#?}"
    );
    for tool in ["bwrap", "firejail", "nsjail"] {
        assert!(out.stdout.contains(&format!("{tool} rc=1\n")), "{out:#?}");
        assert!(
            out.stderr.contains(&format!(
                "error: {tool} cannot make a sandbox here: this command already runs in a wardcell sandbox (zone 'agent'), where no process can make namespaces; run it without a sandbox of its own, wardcell is the sandbox\n"
            )),
            "{out:#?}"
        );
    }
    if std::path::Path::new("/usr/bin/bwrap").exists() {
        let out = fx.sh("/usr/bin/bwrap --ro-bind / / /bin/true");
        assert_ne!(out.code, 0, "{out:?}");
        assert!(!out.stderr.contains("wardcell"), "{out:?}");
    }
});

both!(dangerous_syscalls_and_families_are_refused, |fx| {
    fx.test_config("");
    for sc in [
        "io_uring_setup",
        "bpf",
        "keyctl",
        "userfaultfd",
        "perf_event_open",
        "setns",
        "process_vm_readv",
    ] {
        let out = fx.probe(&["syscall", sc]);
        assert!(out.stdout.starts_with("err EPERM"), "{sc}: {out:?}");
    }
    for family in [
        "16", /* netlink */
        "17", /* packet */
        "40", /* vsock */
        "38", /* alg */
    ] {
        let out = fx.probe(&["socket", family]);
        assert!(
            out.stdout.starts_with("err EAFNOSUPPORT"),
            "family {family}: {out:?}"
        );
    }
    fx.probe(&["socket", "1"]).ok();
    // An x32 syscall number kills the process outright (SIGSYS: 128+31).
    let out = fx.probe(&["syscall", "x32_getpid"]);
    assert_eq!(out.code, 159, "{out:?}");
});

// MPTCP is TCP to the network but not to Landlock: its sockets are refused outright,
// whatever the family; plain TCP still works.
both!(mptcp_sockets_are_refused, |fx| {
    fx.test_config("");
    for family in ["2", "10"] {
        let out = fx.probe(&["socket-proto", family, "262"]);
        assert!(
            out.stdout.starts_with("err EAFNOSUPPORT"),
            "family {family}: {out:?}"
        );
        fx.probe(&["socket-proto", family, "6"]).ok();
    }
});

// The sandbox's /proc does not list the host user's keys: /proc/keys and /proc/key-users
// are masks there (the host's /dev/null, a character device, that cannot be opened), not
// the kernel's regular files.
both!(proc_keys_are_masked, |fx| {
    fx.test_config("");
    let host = std::fs::symlink_metadata("/proc/keys").expect("the host has /proc/keys");
    assert!(host.file_type().is_file());
    let out = fx.sh(
        "for f in /proc/keys /proc/key-users; do stat -c \"$f %F\" $f; cat $f 2>/dev/null; done; \
         echo x > /proc/keys 2>/dev/null && echo written; true",
    );
    out.ok();
    assert_eq!(
        out.stdout.split_whitespace().collect::<Vec<_>>(),
        [
            "/proc/keys",
            "character",
            "special",
            "file",
            "/proc/key-users",
            "character",
            "special",
            "file",
        ],
        "{out:?}"
    );
});

both!(syscalls_newer_than_the_table_get_enosys, |fx| {
    fx.test_config("");
    let p = fx.bin.join("wardcell-probe");
    let p = p.display();
    // open_tree_attr (467, Linux 6.15) would return a descriptor for "/" here; file_getattr
    // (468) and numbers no kernel has are refused the same way. The newest reviewed
    // syscall (466, removexattrat) still reaches the kernel, which answers for itself.
    let out = fx.sh(&format!(
        "{p} open_tree_attr; {p} syscall-nr 468; {p} syscall-nr 1000; {p} syscall-nr 1073741823; {p} syscall-nr 466; true"
    ));
    out.ok();
    assert_eq!(
        out.stdout,
        "err ENOSYS (38)\nerr ENOSYS (38)\nerr ENOSYS (38)\nerr ENOSYS (38)\nerr OTHER (14)\n",
        "{out:?}"
    );
});

both!(the_command_starts_with_default_signal_dispositions, |fx| {
    fx.test_config("");
    // Nothing ignored, nothing blocked: wardcell's own ignored SIGPIPE (every Rust program
    // has one) does not leak into the command.
    let out = fx.run(&[
        "run",
        "--",
        "grep",
        "-E",
        "^Sig(Ign|Blk)",
        "/proc/self/status",
    ]);
    out.ok();
    assert_eq!(sig_mask(&out, "SigBlk"), 0, "{out:?}");
    assert_eq!(sig_mask(&out, "SigIgn"), 0, "{out:?}");
    // `wardcell run -- yes | head -1`: yes dies of SIGPIPE, silently, and the run says so
    // with 128+13.
    let mut run = fx
        .cmd(&["run", "--", "yes"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = [0u8; 2];
    std::io::Read::read_exact(run.stdout.as_mut().unwrap(), &mut line).unwrap();
    assert_eq!(&line, b"y\n");
    drop(run.stdout.take());
    let out: Out = run.wait_with_output().unwrap().into();
    assert_eq!(out.code, 141, "{out:?}");
    assert_eq!(out.stderr, "", "{out:?}");
});

/// The mask of signals 1 to 31 on the `/proc/PID/status` line `key` in `out` (real-time
/// signals pass through as after any exec: the test harness's own are not wardcell's).
fn sig_mask(out: &Out, key: &str) -> u64 {
    let hex = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(":\t"))
        .unwrap_or_else(|| panic!("no {key}: {out:?}"));
    u64::from_str_radix(hex, 16).unwrap() & 0x7fff_ffff
}

/// `wardcell run ARGS` started with SIGHUP and SIGINT ignored, as a shell starts a
/// background job (SIGINT) under nohup (SIGHUP).
fn run_ignoring(fx: &Fixture, args: &[&str]) -> std::process::Child {
    let mut cmd = fx.cmd(args);
    // SAFETY: signal() with SIG_IGN is async-signal-safe and touches no memory.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            Ok(())
        });
    }
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

both!(
    signals_the_caller_ignored_stay_ignored_and_are_not_forwarded,
    |fx| {
        fx.test_config("");
        // What the caller ignored, the command ignores, as after a plain exec.
        let out: Out = run_ignoring(&fx, &["run", "--", "grep", "^SigIgn", "/proc/self/status"])
            .wait_with_output()
            .unwrap()
            .into();
        out.ok();
        assert_eq!(sig_mask(&out, "SigIgn"), 0b11, "SIGHUP and SIGINT: {out:?}");
        // An ignored SIGINT sent to wardcell is not forwarded, however late it comes:
        // the command catches SIGINT and sees none.
        let probe = fx.bin.join("wardcell-probe");
        let mut run = run_ignoring(&fx, &["run", "--", probe.to_str().unwrap(), "sigint-watch"]);
        let mut started = [0u8; 8];
        std::io::Read::read_exact(run.stdout.as_mut().unwrap(), &mut started).unwrap();
        // SAFETY: kill with the pid of our own child.
        unsafe { libc::kill(run.id() as i32, libc::SIGINT) };
        let out: Out = run.wait_with_output().unwrap().into();
        assert_eq!(out.code, 0, "{out:?}");
        assert_eq!(out.stdout, "not caught\n", "{out:?}");
    }
);

both!(the_broker_and_init_are_out_of_reach, |fx| {
    fx.test_config("");
    let mut child = fx
        .cmd(&[
            "run",
            "--",
            fx.bin.join("wardcell-probe").to_str().unwrap(),
            "heartbeat",
            fx.proj.join("beat").to_str().unwrap(),
        ])
        .spawn()
        .unwrap();
    // The broker: the child of `wardcell run`'s terminal keeper.
    let broker = wardcell_tests::broker_of(child.id()).to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !fx.proj.join("beat").exists() {
        assert!(Instant::now() < deadline, "the heartbeat never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    for args in [
        vec!["ptrace", broker.as_str()],
        vec!["kill", broker.as_str()],
        vec!["procmem", broker.as_str()],
        vec!["ptrace", "1"],
        vec!["kill", "1"],
        vec!["procmem", "1"],
    ] {
        let out = fx.probe(&args);
        assert!(out.stdout.starts_with("err"), "{args:?}: {out:?}");
    }
    assert!(child.try_wait().unwrap().is_none(), "the broker died");
    child.kill().unwrap();
    child.wait().unwrap();
});

both!(confinement_status_is_complete, |fx| {
    fx.test_config("");
    let out = fx.probe(&["status"]);
    out.ok();
    assert_eq!(status_field(&out.stdout, "NoNewPrivs"), "1");
    assert_eq!(status_field(&out.stdout, "Seccomp"), "2");
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(status_field(&out.stdout, set), "0000000000000000", "{set}");
    }
});

both!(no_descriptor_above_2_is_inherited, |fx| {
    fx.test_config("");
    let leaked = fs::File::open("/etc/hostname")
        .or_else(|_| fs::File::open("/etc/passwd"))
        .unwrap();
    let mut cmd = fx.cmd(&[
        "run",
        "--",
        fx.bin.join("wardcell-probe").to_str().unwrap(),
        "fds",
    ]);
    use std::os::fd::AsRawFd;
    let raw = leaked.as_raw_fd();
    // SAFETY: dup2 in the child before exec: async-signal-safe, no allocation.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
            if libc::dup2(raw, 7) < 0 || libc::dup2(raw, 200) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out: wardcell_tests::Out = cmd.output().unwrap().into();
    out.ok();
    assert_eq!(out.stdout.trim(), "[0, 1, 2]");
});

both!(tiocsti_is_refused, |fx| {
    fx.test_config("");
    // Seccomp answers before the tty layer: EPERM even where stdin is not a terminal
    // (ENOTTY would mean the filter let it through).
    for variant in ["plain", "high"] {
        let out = fx.probe(&["tiocsti", variant]);
        assert!(out.stdout.starts_with("err EPERM"), "{variant}: {out:?}");
    }
});

both!(private_tmp_and_host_sockets, |fx| {
    fx.test_config("");
    let marker = format!("wardcell-private-tmp-{}-{}", std::process::id(), fx.uid());
    fx.sh(&format!("echo x > /tmp/{marker} && cat /tmp/{marker}"))
        .ok();
    assert!(!std::path::Path::new("/tmp").join(&marker).exists());

    // A socket in the caller's runtime directory cannot be reached. (A short path: the
    // run's own sockets live below it, and Unix socket paths are at most 107 bytes.)
    let runtime = std::path::PathBuf::from(format!(
        "/var/tmp/wcrt-s-{}-{}",
        std::process::id(),
        fx.uid()
    ));
    let _ = fs::remove_dir_all(&runtime);
    fs::create_dir_all(&runtime).unwrap();
    fx.own(&runtime);
    let sock_path = runtime.join("agent.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock_path).unwrap();
    fx.own(&sock_path);
    listener.set_nonblocking(true).unwrap();
    let probe = fx.bin.join("wardcell-probe");
    let out: wardcell_tests::Out = fx
        .cmd(&[
            "run",
            "--",
            probe.to_str().unwrap(),
            "connect-unix",
            sock_path.to_str().unwrap(),
        ])
        .env("XDG_RUNTIME_DIR", &runtime)
        .env("SSH_AUTH_SOCK", &sock_path)
        .output()
        .unwrap()
        .into();
    assert!(out.stdout.starts_with("err"), "{out:?}");
    assert!(listener.accept().is_err());
    let _ = fs::remove_dir_all(&runtime);
});

both!(environment_is_filtered, |fx| {
    let out: wardcell_tests::Out = fx
        .cmd(&["run", "--", "/bin/sh", "-c", "env | sort"])
        .env("GITHUB_TOKEN", "ghp_secret")
        .env("WARDCELL_ZONE", "forged")
        .env("KEEP_ME", "yes")
        .output()
        .unwrap()
        .into();
    out.ok();
    assert!(!out.stdout.contains("ghp_secret"), "{out:?}");
    assert!(out.stdout.contains("KEEP_ME=yes"));
    assert!(out.stdout.contains("WARDCELL_SANDBOX=1"));
    assert!(out.stdout.contains("WARDCELL_ZONE=agent\n"), "{out:?}");
    assert!(!out.stdout.contains("forged"));
});

both!(nested_run_is_refused_even_with_variables_unset, |fx| {
    fx.test_config("");
    let out = fx.sh("wardcell run -- true; echo rc=$?");
    assert!(
        out.stderr
            .contains("error: `wardcell run` is not available inside a wardcell sandbox"),
        "{out:?}"
    );
    // With every hint removed, and a home of its own so that the client gets as far as
    // the broker on the built-in configuration, the kernel still refuses: nothing runs.
    let marker = fx.proj.join("nested-ran");
    let out = fx.sh(&format!(
        "mkdir -p fakehome rt && env -u WARDCELL_SANDBOX -u WARDCELL_ZONE -u WARDCELL_ZONE_SOCKET HOME=$PWD/fakehome XDG_RUNTIME_DIR=$PWD/rt wardcell run -- /bin/sh -c 'touch {}'; echo rc=$?",
        marker.display()
    ));
    assert!(!marker.exists(), "a nested sandbox ran: {out:?}");
    assert!(out.stdout.contains("rc=1"), "{out:?}");
    assert!(
        out.stderr.contains("error: could not start the sandbox"),
        "{out:?}"
    );
});

both!(signals_reach_the_command, |fx| {
    let mut child = fx
        .cmd(&["run", "--", "/bin/sh", "-c", "trap 'echo got-term > term.txt; exit 3' TERM; echo ready > ready.txt; while :; do sleep 0.05; done"])
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !fx.proj.join("ready.txt").exists() {
        assert!(Instant::now() < deadline, "never became ready");
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: kill with a pid we own.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(3));
    assert_eq!(
        fs::read_to_string(fx.proj.join("term.txt")).unwrap(),
        "got-term\n"
    );
});

both!(the_sandbox_dies_with_the_broker, |fx| {
    fx.test_config("");
    let beat = fx.proj.join("beat");
    let mut child = fx
        .cmd(&[
            "run",
            "--",
            fx.bin.join("wardcell-probe").to_str().unwrap(),
            "heartbeat",
            beat.to_str().unwrap(),
        ])
        .spawn()
        .unwrap();
    wait_until(10, "the heartbeat to start", || beat.exists());
    child.kill().unwrap(); // SIGKILL to the broker
    child.wait().unwrap();
    wardcell_tests::assert_heartbeat_stopped(&beat, "the sandboxed process outlived the broker");
});

// The harness's check that a heartbeat has stopped sees its writer: a probe run on the
// host is found holding the file while it beats, and the check passes once it is killed.
#[test]
fn a_heartbeats_writer_is_seen_until_it_ends() {
    let fx = Fixture::new("heartbeat_writer", wardcell_tests::As::Invoker);
    let beat = fx.dir.join("beat");
    let mut probe = std::process::Command::new(fx.bin.join("wardcell-probe"))
        .arg("heartbeat")
        .arg(&beat)
        .spawn()
        .unwrap();
    wait_until(10, "the heartbeat to start", || beat.exists());
    let pids: Vec<u32> = wardcell_tests::holders(&beat)
        .iter()
        .map(|p| p.pid)
        .collect();
    assert_eq!(pids, [probe.id()]);
    probe.kill().unwrap();
    probe.wait().unwrap();
    wardcell_tests::assert_heartbeat_stopped(&beat, "the probe outlived its kill");
}

both!(interactive_shell_gets_a_terminal, |fx| {
    // A real pty on the host side, as a person's terminal would be.
    let mut master: libc::c_int = -1;
    let mut slave: libc::c_int = -1;
    let ws = libc::winsize {
        ws_row: 33,
        ws_col: 101,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: openpty writes two descriptors; the name and termios pointers are null.
    let r = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            &ws,
        )
    };
    assert_eq!(r, 0);
    use std::os::fd::FromRawFd;
    // SAFETY: openpty returned two new descriptors that we now own.
    let (master, slave) = unsafe {
        (
            fs::File::from_raw_fd(master),
            std::os::fd::OwnedFd::from_raw_fd(slave),
        )
    };
    if let Some((uid, gid)) = (fx.who == wardcell_tests::As::User && wardcell_tests::is_root())
        .then(|| (fx.uid(), fx.uid()))
    {
        use std::os::fd::AsRawFd;
        // SAFETY: fchown on a descriptor we own.
        unsafe { libc::fchown(slave.as_raw_fd(), uid, gid) };
    }
    let mut cmd = fx.cmd(&["run", "--", "/bin/bash", "--norc", "--noprofile", "-i"]);
    cmd.stdin(slave.try_clone().unwrap())
        .stdout(slave.try_clone().unwrap())
        .stderr(slave.try_clone().unwrap());
    // SAFETY: setsid and TIOCSCTTY in the child before exec, as a terminal emulator does.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    // The Command holds copies of the slave: drop them so the master sees the end.
    drop(cmd);
    drop(slave);
    let mut w = master.try_clone().unwrap();
    use std::io::Write;
    w.write_all(
        b"stty size; tty; case $- in *m*) echo JOBCONTROL-ON;; esac; sleep 5 & jobs; exit 4\n",
    )
    .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let mut r = master;
    std::thread::spawn(move || {
        let mut all = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 {
                break;
            }
            all.extend_from_slice(&buf[..n]);
        }
        let _ = tx.send(String::from_utf8_lossy(&all).into_owned());
    });
    let status = child.wait().unwrap();
    let out = rx.recv_timeout(Duration::from_secs(10)).unwrap_or_default();
    assert_eq!(status.code(), Some(4), "{out}");
    assert!(out.contains("33 101"), "window size not passed: {out}");
    assert!(out.contains("JOBCONTROL-ON"), "no job control: {out}");
    // stdin is the pty's slave, found at /dev/console (as in a container), not "not a tty".
    assert!(out.contains("\n/dev/console\r\n"), "tty: {out}");
    assert!(!out.contains("not a tty"), "{out}");
    assert!(out.contains("[1]+"), "jobs not listed: {out}");
    assert!(!out.contains("no job control"), "{out}");
});

both!(host_ipc_is_out_of_reach, |fx| {
    fx.test_config("");
    // A System V segment of the same user on the host is invisible inside.
    let key = (0x5743_0000 + (std::process::id() & 0xffff) + fx.uid() % 7).to_string();
    let probe = fx.bin.join("wardcell-probe");
    let host = |args: &[&str]| -> wardcell_tests::Out {
        let mut c = std::process::Command::new(&probe);
        c.args(args);
        if fx.who == wardcell_tests::As::User && wardcell_tests::is_root() {
            use std::os::unix::process::CommandExt;
            c.uid(fx.uid()).gid(fx.uid());
        }
        c.output().unwrap().into()
    };
    host(&["shm-create", &key]).ok();
    host(&["shm-find", &key]).ok();
    let out = fx.probe(&["shm-find", &key]);
    assert!(out.stdout.starts_with("err ENOENT"), "{out:?}");
    host(&["shm-remove", &key]).ok();
});

both!(own_directories_stay_protected_through_symlinks, |fx| {
    let wide = |fx: &wardcell_tests::Fixture| {
        format!(
            "[zones.agent]\nprofile = \"wide\"\ndefault = true\n\n[profiles.wide]\nextends = \"developer-readonly\"\nread = [\"{}\"]\nwrite = [\"~\"]\n",
            fx.bin.display()
        )
    };
    // $HOME itself reached through a symbolic link: masks and pins follow the real path.
    let link_home = fx.dir.join("home-link");
    std::os::unix::fs::symlink(&fx.home, &link_home).unwrap();
    fx.config(&wide(&fx));
    let h = link_home.to_str().unwrap();
    let out: wardcell_tests::Out = fx
        .cmd(&["run", "--", "/bin/sh", "-c", &format!("mv {h}/.config {h}/.config-old; mkdir -p {h}/.config/wardcell && echo planted > {h}/.config/wardcell/zones.toml; echo done")])
        .env("HOME", &link_home)
        .output()
        .unwrap()
        .into();
    out.ok();
    assert!(
        !fx.home.join(".config-old").exists(),
        "the config directory was moved aside: {out:?}"
    );
    assert_ne!(
        fs::read_to_string(fx.home.join(".config/wardcell/zones.toml")).unwrap(),
        "planted\n"
    );

    // A link on the way to the config, inside the writable home: refused before anything runs.
    let real = fx.home.join("dotfiles-config");
    fs::rename(fx.home.join(".config"), &real).unwrap();
    std::os::unix::fs::symlink(&real, fx.home.join(".config")).unwrap();
    fx.own(&fx.home);
    let marker = fx.proj.join("ran");
    let out = fx.sh(&format!("touch {}", marker.display()));
    out.expect_code(1);
    assert!(
        out.stderr.contains("is reached through the symbolic link"),
        "{out:?}"
    );
    assert!(!marker.exists());
});

both!(metadata_outside_the_write_trees_cannot_change, |fx| {
    fx.test_config("");
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let outside = fx.home.join("notes.txt");
    fx.write(&outside, "kept");
    fs::set_permissions(&outside, fs::Permissions::from_mode(0o600)).unwrap();
    let before = fs::metadata(&outside).unwrap();
    let o = outside.to_str().unwrap();
    let out = fx.probe(&["chmod", o, "666"]);
    assert!(out.stdout.starts_with("err EROFS"), "{out:?}");
    let out = fx.probe(&["utime", o]);
    assert!(out.stdout.starts_with("err EROFS"), "{out:?}");
    let after = fs::metadata(&outside).unwrap();
    assert_eq!(after.mode(), before.mode());
    assert_eq!(after.mtime(), before.mtime());
    // Inside the write tree (the project) both work, as builds need.
    let inside = fx.proj.join("script.sh");
    fx.write(&inside, "#!/bin/sh\n");
    fx.probe(&["chmod", inside.to_str().unwrap(), "755"]).ok();
    fx.probe(&["utime", inside.to_str().unwrap()]).ok();
    assert_eq!(fs::metadata(&inside).unwrap().mode() & 0o777, 0o755);
});

both!(git_hooks_stay_read_only_in_a_writable_project, |fx| {
    // The built-in default: the project is writable, its hooks are not.
    let hooks = fx.proj.join(".git/hooks");
    fx.write(&hooks.join("pre-commit"), "#!/bin/sh\nexit 0\n");
    let out = fx.sh(
        "echo planted > .git/hooks/post-checkout; echo rc=$?; echo x > .git/hooks/pre-commit; echo rc=$?; \
         cat .git/hooks/pre-commit >/dev/null && echo readable; echo ok > .git/HEAD-note && echo project-writable",
    );
    out.ok();
    assert_eq!(
        out.stdout.matches("rc=1").count() + out.stdout.matches("rc=2").count(),
        2,
        "{out:?}"
    );
    assert!(
        out.stdout.contains("readable") && out.stdout.contains("project-writable"),
        "{out:?}"
    );
    assert!(!hooks.join("post-checkout").exists());
    assert_eq!(
        fs::read_to_string(hooks.join("pre-commit")).unwrap(),
        "#!/bin/sh\nexit 0\n"
    );
});

// `wardcell run` forks a plan writer and execs the broker in its own pid; once the
// sandbox runs, the broker's only child is the sandbox's init: the writer was reaped,
// not left a zombie for the length of the run.
both!(the_plan_writer_does_not_outlive_the_start, |fx| {
    let ready = fx.proj.join("ready");
    let done = fx.proj.join("done");
    // The command runs until the broker's children have been looked at.
    let script = format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.02; done",
        ready.display(),
        done.display()
    );
    let mut run = fx
        .cmd(&["run", "--", "/bin/sh", "-c", &script])
        .spawn()
        .expect("spawn wardcell");
    wait_until(10, "the command to start", || ready.exists());
    let broker = wardcell_tests::broker_of(run.id());
    let children =
        std::fs::read_to_string(format!("/proc/{broker}/task/{broker}/children")).unwrap();
    // Each child by its command line: the sandbox's shim, the run's helper (writing its
    // audit log, watching what the views hold), and the shim watching the run's
    // repository (which the sandbox may write).
    let mut commands: Vec<String> = children
        .split_whitespace()
        .map(|pid| {
            let line = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let line = String::from_utf8_lossy(&line).replace('\0', " ");
            line.trim().to_string()
        })
        .collect();
    commands.sort();
    // The command ends before anything is checked: a failed check leaves nothing running.
    fx.write(&done, "");
    assert!(run.wait().unwrap().success());
    // The project has no repository: the watcher's snapshot is of nothing (`--empty`).
    let watcher = format!("wardcell-shim --git-watch {} --empty", fx.proj.display());
    assert_eq!(
        commands,
        [
            "wardcell-shim".to_string(),
            watcher,
            "wardcell-shim --helper".into(),
        ],
        "the broker's children: {children}"
    );
});

both!(an_empty_or_multi_line_command_gets_one_line_and_127, |fx| {
    fx.test_config("");
    // An empty name is "command not found" (127), as in a shell, not "not executable".
    let out = fx.run(&["run", "--", ""]);
    out.expect_code(127);
    assert!(
        out.stderr.starts_with("error: ``: command not found"),
        "{out:?}"
    );
    // A name with a newline and an escape sequence: one line, the characters escaped.
    let out = fx.run(&["run", "--", "no\nsuch\x1b[2J"]);
    out.expect_code(127);
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    assert!(
        out.stderr
            .starts_with("error: `no\\nsuch\\x1b[2J`: command not found"),
        "{out:?}"
    );
});

both!(a_closed_stdout_or_stdin_stays_closed, |fx| {
    fx.test_config("");
    // `wardcell run -- echo hi >&-` (and `cat <&-`) as without wardcell: the command finds
    // the descriptor closed and fails (rc 1), rather than writing to a /dev/null in its
    // place and succeeding.
    let closed = |fd: i32, args: &[&str]| -> Out {
        let mut cmd = fx.cmd(args);
        cmd.stderr(std::process::Stdio::piped());
        // SAFETY: close is async-signal-safe and touches no memory.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                libc::close(fd);
                Ok(())
            });
        }
        cmd.output().unwrap().into()
    };
    let out = closed(1, &["run", "--", "/bin/echo", "hi"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("Bad file descriptor"), "{out:?}");
    let out = closed(0, &["run", "--", "cat"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("Bad file descriptor"), "{out:?}");
    // Open ones are untouched.
    fx.run(&["run", "--", "/bin/echo", "hi"]).ok();
});

both!(ctrl_z_stops_the_command_as_under_a_shell, |fx| {
    fx.test_config("");
    // The user's own interactive shell, on a real pty, runs wardcell in the foreground.
    let mut sh = wardcell_tests::Shell::start(&fx);
    // The command waits for a file the test makes only once it is stopped, so that no
    // timing decides whether ^Z comes in time.
    let go = fx.proj.join("go");
    let _ = std::fs::remove_file(&go);
    sh.type_in(
        "wardcell run -- /bin/sh -c 'echo STARTED; while [ ! -e go ]; do sleep 0.05; done; echo FINISHED'\n",
    );
    sh.wait_for("STARTED\r\n");
    // ^Z, again if it landed while the command's shell was between vfork and exec (then
    // only the child not yet started stops, and the job goes on: a person presses it
    // again; docs/COMMANDS.md). The shell has its prompt back once the job stopped.
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        sh.type_in("\x1a");
        let tried = Instant::now() + Duration::from_secs(2);
        while Instant::now() < tried && !sh.seen().contains("Stopped") {
            std::thread::sleep(Duration::from_millis(20));
        }
        if sh.seen().contains("Stopped") {
            break;
        }
        assert!(Instant::now() < until, "never stopped: {}", sh.seen());
    }
    // The command stays stopped once it could go on.
    std::fs::write(&go, "").unwrap();
    // What is tested is that FINISHED does not come: an absence, given half a second.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !sh.seen().contains("FINISHED\r\n"),
        "the command ran on: {}",
        sh.seen()
    );
    sh.type_in("fg\n");
    // (Not the echoed command line: there a quote follows.)
    sh.wait_for("FINISHED\r\n");
    // The shell's prompt: the run is over (typed before, the line would be the pty's).
    sh.wait_for("FINISHED\r\n$ ");
    sh.finish(0);
});

// What a command finds at exec (issue 19, review of the start-up order: the command's
// process is forked while `pivot_root` still leaves the host's tree stacked on the view's
// root, where `/..` reaches it, and init detaches it before it says go): one `/` mount,
// `/..` is `/`, and `/` is not the host's; and no capability in any set, in the command
// nor in its init (which drops them before it says go). Printed by `sh at-exec.sh` as
// one line: `at-exec ROOT DOTDOT ROOT_MOUNTS SELF_CAPS INIT_CAPS`.
const AT_EXEC: &str = r#"r=$(stat -c %d:%i /); d=$(stat -c %d:%i /..)
m=$(awk '$5 == "/"' /proc/self/mountinfo | wc -l)
caps() { grep '^Cap' "$1" | awk '{ printf "%s", $2 }'; }
echo "at-exec $r $d $m $(caps /proc/self/status) $(caps /proc/1/status)"
"#;

/// Write the check into the project; the host's `/` as `dev:ino`.
fn at_exec_script(fx: &Fixture) -> String {
    fx.write(&fx.proj.join("at-exec.sh"), AT_EXEC);
    let root = fs::metadata("/").unwrap();
    use std::os::unix::fs::MetadataExt;
    // As stat(1) prints them: the device number in decimal.
    format!("{}:{}", root.dev(), root.ino())
}

/// Every `at-exec` line of `out` (`want` of them) says the host's tree was gone and no
/// capability was left.
#[track_caller]
fn assert_at_exec(out: &str, host_root: &str, want: usize) {
    let lines: Vec<&str> = out
        .lines()
        .map(|l| l.trim_end_matches('\r'))
        .filter(|l| l.starts_with("at-exec "))
        .collect();
    assert_eq!(lines.len(), want, "{out}");
    let no_caps = "0".repeat(16 * 5);
    for l in lines {
        let f: Vec<&str> = l.split(' ').collect();
        assert_eq!(f.len(), 6, "{l}");
        assert_ne!(f[1], host_root, "the view's / is the host's: {l}");
        assert_eq!(
            f[2], f[1],
            "/.. is not / (the host's tree is stacked there): {l}"
        );
        assert_eq!(f[3], "1", "more than one mount at /: {l}");
        assert_eq!(f[4], no_caps, "the command holds a capability: {l}");
        assert_eq!(f[5], no_caps, "init holds a capability: {l}");
    }
}

fn at_exec_config(fx: &Fixture) {
    let bin = fx.bin.display();
    fx.config(&format!(
        "[zones.agent]\nprofile = \"plain\"\ndefault = true\n\
         [zones.net]\nprofile = \"net\"\nenter_from = [\"agent\"]\n\
         [zones.still]\nprofile = \"plain\"\nenter_from = [\"agent\"]\n\
         [profiles.plain]\nextends = \"developer-readonly\"\nread = [\"{bin}\"]\n\
         [profiles.net]\nextends = \"developer-readonly\"\nread = [\"{bin}\"]\n\
         network = {{ allow = [\"localhost:1\"] }}\n"
    ));
}

// A run without and with network (the host's tree goes before the listeners there), and
// an entry into a zone of each kind.
both!(no_host_tree_and_no_capability_at_exec, |fx| {
    at_exec_config(&fx);
    let host_root = at_exec_script(&fx);
    let out = fx.sh(
        "sh at-exec.sh; wardcell zone enter net -- sh at-exec.sh; wardcell zone enter still -- sh at-exec.sh",
    );
    out.ok();
    assert_at_exec(&out.stdout, &host_root, 3);
    let out = fx.run(&["run", "--zone", "net", "--", "sh", "at-exec.sh"]);
    out.ok();
    assert_at_exec(&out.stdout, &host_root, 1);
});

// The same with a pty (init makes a session of its own, the command takes the foreground).
both!(no_host_tree_and_no_capability_at_exec_with_a_pty, |fx| {
    at_exec_config(&fx);
    let host_root = at_exec_script(&fx);
    let mut sh = wardcell_tests::Shell::start(&fx);
    sh.type_in("wardcell run -- /bin/sh -c 'sh at-exec.sh; echo DO\"\"NE'\n");
    sh.wait_for("DONE\r\n$ ");
    assert_at_exec(&sh.seen(), &host_root, 1);
    sh.finish(0);
});

// Init has no capability left once the command may run: it drops them (and becomes
// undumpable) before it says go, not beside the command's start. The command reads
// init's status first thing, many times; before, about one run in ten found init still
// holding its capabilities, and a failure of init's own steps after go could come after
// the command had run (item 2 and 1 of the start-up review, issue 19).
both!(init_holds_no_capability_when_the_command_starts, |fx| {
    fx.test_config("");
    let probe = fx.bin.join("wardcell-probe");
    for _ in 0..40 {
        let out = fx.run(&[
            "run",
            "--",
            probe.to_str().unwrap(),
            "read",
            "/proc/1/status",
        ]);
        out.ok();
        for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
            assert_eq!(
                status_field(&out.stdout, set),
                "0000000000000000",
                "{set}: {out:#?}"
            );
        }
        assert_eq!(status_field(&out.stdout, "NoNewPrivs"), "1", "{out:#?}");
    }
});

// The shim run by hand with a socket at fd 3 (anyone's, not the broker's) refuses in one
// line and touches nothing: not even its Hello goes out, and no mount is changed (it is
// run in a mount namespace of its own, so that a regression could not change the host's).
#[test]
fn the_shim_run_by_hand_refuses_before_doing_anything() {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let shim = wardcell_tests::staged().bin.join("wardcell-shim");
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let fd = theirs.as_raw_fd();
    let mut cmd = std::process::Command::new("unshare");
    cmd.args(["-m", "--propagation", "unchanged"]).arg(&shim);
    // SAFETY: between fork and exec only dup2, which is async-signal-safe, on integers.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(fd, 3) == 3 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    // Nothing will come from "the broker": a shim that waited for it ends, not hangs.
    ours.shutdown(std::net::Shutdown::Write).unwrap();
    let out = cmd.output().unwrap();
    drop(theirs);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr,
        "error: wardcell-shim is started by wardcell-broker, not by hand (it is not PID 1 of a new PID namespace)\n"
    );
    let mut sent = Vec::new();
    (&ours).read_to_end(&mut sent).unwrap();
    assert!(sent.is_empty(), "the shim spoke: {sent:?}");
}
