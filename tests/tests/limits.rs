//! Size limits on frames and on the configuration: large but legal inputs run, and what
//! is over a limit is refused with one line naming the limit. Real sandboxes, run as the
//! invoking user and as an unprivileged uid.

use std::fmt::Write as _;

use wardcell_tests::{both, Fixture};

/// A configuration with `n` zones besides `agent`, each entered from `agent`.
fn many_zones(fx: &Fixture, n: usize) {
    let bin = fx.bin.display();
    let mut toml = format!(
        "[zones.agent]\nprofile = \"dev\"\ndefault = true\n\n[profiles.dev]\nextends = \"readonly\"\nread = [\"{bin}\"]\n"
    );
    for i in 0..n {
        write!(
            toml,
            "\n[zones.z{i}]\nprofile = \"dev\"\ndescription = \"zone number {i}\"\nenter_from = [\"agent\"]\n"
        )
        .unwrap();
    }
    fx.config(&toml);
}

// Issue 10: 31 zones made the broker refuse the plan ("malformed frame: LimitExceeded").
both!(a_thousand_zones_run, |fx| {
    many_zones(&fx, 1000);
    fx.run(&["policy", "check"]).ok();
    let out = fx.sh(
        "wardcell zone list | wc -l; wardcell zone enter z999 -- sh -c 'echo in $WARDCELL_ZONE'",
    );
    out.ok();
    // The header, a blank line, "current zone" and 1,000 zones.
    assert_eq!(out.stdout, "1003\nin z999\n", "{out:#?}");
});

/// An argument list of `total` bytes in `count` arguments of equal length.
fn args_of(total: usize, count: usize) -> Vec<String> {
    (0..count)
        .map(|i| format!("{i:06}{}", "a".repeat(total / count - 6)))
        .collect()
}

// Issue 10: a 70 KB argument made the broker lose contact with the sandbox.
both!(a_one_megabyte_argument_list_runs, |fx| {
    fx.test_config("");
    // 1 MiB in 16 arguments of 64 KiB (the kernel allows 128 KiB per string), then the
    // same list through `zone enter` from inside.
    let args = args_of(1024 * 1024, 16);
    let mut argv = vec![
        "run",
        "--",
        "/bin/sh",
        "-c",
        "n=0; for a; do n=$((n + ${#a})); done; echo \"$# $n\"",
        "sh",
    ];
    argv.extend(args.iter().map(String::as_str));
    let out = fx.run(&argv);
    out.ok();
    assert_eq!(out.stdout, format!("16 {}\n", 1024 * 1024), "{out:#?}");

    let mut seventy = vec!["run", "--", "/bin/sh", "-c", "echo ${#1}", "sh"];
    let big = "x".repeat(70_000);
    seventy.push(&big);
    let out = fx
        .cmd(&seventy)
        .env("BIG", "y".repeat(70_000))
        .output()
        .unwrap();
    let out: wardcell_tests::Out = out.into();
    out.ok();
    assert_eq!(out.stdout, "70000\n", "{out:#?}");
});

both!(a_one_megabyte_argument_list_enters_a_zone, |fx| {
    let bin = fx.bin.display();
    fx.config(&format!(
        "[zones.agent]\nprofile = \"dev\"\ndefault = true\n[zones.other]\nprofile = \"dev\"\nenter_from = [\"agent\"]\n[profiles.dev]\nextends = \"readonly\"\nread = [\"{bin}\"]\n"
    ));
    // Inside: build 16 arguments of 64 KiB and enter another zone with them.
    let out = fx.sh(
        "a=$(head -c 65536 /dev/zero | tr '\\0' a); \
         set -- \"$a\" \"$a\" \"$a\" \"$a\" \"$a\" \"$a\" \"$a\" \"$a\" \"$a\" \"$a\" \"$a\" \"$a\" \"$a\" \"$a\" \"$a\" \"$a\"; \
         wardcell zone enter other -- sh -c 'n=0; for a; do n=$((n + ${#a})); done; echo \"$WARDCELL_ZONE $# $n\"' sh \"$@\"",
    );
    out.ok();
    assert_eq!(
        out.stdout,
        format!("other 16 {}\n", 1024 * 1024),
        "{out:#?}"
    );
});

/// Run `wardcell policy check --config PATH` with a deadline: `None` if it had to be
/// killed.
fn check_within(fx: &Fixture, path: &std::path::Path, secs: u64) -> Option<wardcell_tests::Out> {
    let mut child = fx
        .cmd(&["policy", "check", "--config", path.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Some(child.wait_with_output().unwrap().into())
}

// Issue 10: `--config /dev/zero` read until memory ran out, `--config FIFO` blocked forever.
both!(
    a_configuration_that_is_not_a_regular_file_is_refused,
    |fx| {
        let fifo = fx.dir.join("fifo");
        let st = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(st.success());
        fx.own(&fifo);
        for path in [std::path::Path::new("/dev/zero"), &fifo, &fx.home] {
            let out = check_within(&fx, path, 10).expect("policy check blocked");
            out.expect_code(1);
            assert_eq!(out.stderr.lines().count(), 1, "{out:#?}");
            assert!(
                out.stderr
                    .contains("it is not a regular file (a directory, a FIFO or a device)"),
                "{out:#?}"
            );
        }
    }
);

both!(a_configuration_over_16_mib_is_refused, |fx| {
    let big = fx.dir.join("big.toml");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(16 * 1024 * 1024 + 1).unwrap();
    fx.own(&big);
    let out = check_within(&fx, &big, 10).expect("policy check took too long");
    out.expect_code(1);
    assert!(
        out.stderr.contains(
            "it is 16777217 bytes, over the 16777216 bytes (16 MiB) a configuration may take"
        ),
        "{out:#?}"
    );
});

/// A configuration whose profile reads `n` paths (half of them repeats, half missing).
fn long_read_list(fx: &Fixture, n: usize) -> std::path::PathBuf {
    let mut toml = String::from(
        "[zones.agent]\nprofile = \"p\"\ndefault = true\n[profiles.p]\nextends = \"readonly\"\nread = [\n",
    );
    for i in 0..n {
        if i % 2 == 0 {
            toml.push_str("  \"/usr\",\n");
        } else {
            writeln!(toml, "  \"/usr/share/wardcell-missing-{i}\",").unwrap();
        }
    }
    toml.push_str("]\n");
    let path = fx.dir.join(format!("read-{n}.toml"));
    fx.write(&path, &toml);
    path
}

// Issue 10: `policy check` was quadratic in the length of `read` (200,000 entries took
// over 20 s). Four times the entries must take about four times as long, not sixteen.
both!(policy_check_is_linear_in_the_read_list, |fx| {
    let small = long_read_list(&fx, 10_000);
    let large = long_read_list(&fx, 40_000);
    let time = |path: &std::path::Path| {
        (0..3)
            .map(|_| {
                let t = std::time::Instant::now();
                check_within(&fx, path, 120).expect("too slow").ok();
                t.elapsed().as_secs_f64()
            })
            .fold(f64::MAX, f64::min)
    };
    let (a, b) = (time(&small), time(&large));
    assert!(b < 10.0 * a, "10,000 entries: {a:.3}s, 40,000: {b:.3}s");
});

// A plan over its 32 MiB frame is refused by the client, before anything is sent, with
// one line that names the limit.
both!(a_plan_over_its_limit_is_refused_with_one_line, |fx| {
    // 8 zones, each carrying a resolved profile that skips 10,000 missing paths of
    // 500 bytes: about 44 MB.
    let mut toml = String::from("[zones.agent]\nprofile = \"p\"\ndefault = true\n");
    for i in 0..11 {
        writeln!(
            toml,
            "[zones.z{i}]\nprofile = \"p\"\nenter_from = [\"agent\"]"
        )
        .unwrap();
    }
    toml.push_str("[profiles.p]\nextends = \"readonly\"\nread = [\n");
    let long = "x".repeat(220);
    for i in 0..10_000 {
        writeln!(
            toml,
            "  \"/usr/share/wardcell-missing-{long}/{long}-{i:06}\","
        )
        .unwrap();
    }
    toml.push_str("]\n");
    fx.config(&toml);
    let out = fx.run(&["run", "--", "/bin/sh", "-c", "echo ran"]);
    out.expect_code(1);
    assert!(out.stdout.is_empty(), "{out:#?}");
    assert_eq!(out.stderr.lines().count(), 1, "{out:#?}");
    assert!(
        out.stderr.starts_with("error: ")
            && out.stderr.contains("the plan takes ")
            && out
                .stderr
                .contains(" bytes, over its limit of 33554432 bytes (32 MiB)"),
        "{out:#?}"
    );
});

/// `wardcell ARGS` with the open-file limit at `soft` and `hard` (set in the child, after
/// it has taken the fixture's uid).
fn with_open_files(fx: &Fixture, soft: u64, hard: u64, args: &[&str]) -> wardcell_tests::Out {
    use std::os::unix::process::CommandExt;
    let mut cmd = fx.cmd(args);
    // SAFETY: setrlimit is async-signal-safe and touches only the limit given here.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            };
            match libc::setrlimit(libc::RLIMIT_NOFILE, &lim) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
    cmd.output().expect("spawn wardcell").into()
}

/// The audit logs in the fixture's state directory.
fn logs(fx: &Fixture) -> usize {
    std::fs::read_dir(fx.home.join(".local/state/wardcell/runs"))
        .map(|d| d.count())
        .unwrap_or(0)
}

// Issue 19: below about 49 open files, runs failed with "/usr/sbin changed since the run
// started"; at `ulimit -n 8` an empty log was left. wardcell now runs with the hard
// limit, and the command gets the caller's soft limit back.
both!(
    a_low_soft_open_file_limit_is_raised_for_wardcell_not_the_command,
    |fx| {
        fx.test_config("");
        let out = with_open_files(
            &fx,
            12,
            4096,
            &["run", "--", "/bin/sh", "-c", "ulimit -Sn; ulimit -Hn"],
        );
        out.ok();
        assert_eq!(out.stdout, "12\n4096\n", "{out:#?}");
    }
);

// ...and a profile that needs more descriptors than the hard limit allows is refused
// before anything starts, in words, by `run` and by `policy check` alike; no log is left.
both!(
    a_profile_over_the_hard_open_file_limit_is_refused_in_words,
    |fx| {
        let mut read = String::new();
        for i in 0..100 {
            let d = fx.outside.join(format!("d{i}"));
            std::fs::create_dir_all(&d).unwrap();
            write!(read, "\"{}\", ", d.display()).unwrap();
        }
        fx.own(&fx.outside);
        fx.test_config(&format!(
            "\n[profiles.wide]\nextends = \"test\"\nread = [{read}]\n"
        ));
        let want = "profile 'wide' names 1";
        let out = with_open_files(&fx, 200, 200, &["run", "--profile", "wide", "--", "true"]);
        out.expect_code(1);
        assert_eq!(out.stderr.lines().count(), 1, "{out:#?}");
        assert!(
            out.stderr.starts_with(&format!("error: {want}")),
            "{out:#?}"
        );
        assert!(
            out.stderr.contains("hard open-file limit of 200"),
            "{out:#?}"
        );
        assert_eq!(logs(&fx), 0, "a refused run leaves no log");
        let out = with_open_files(&fx, 200, 200, &["policy", "check"]);
        out.expect_code(1);
        assert!(
            out.stderr.starts_with(&format!("error: {want}")),
            "{out:#?}"
        );
        // With room, both pass and the run works.
        with_open_files(&fx, 1024, 1024, &["policy", "check"]).ok();
        with_open_files(&fx, 1024, 1024, &["run", "--profile", "wide", "--", "true"]).ok();
    }
);

// Issue 19: `policy check` said ok to a profile with more ports than `run` accepts.
both!(policy_check_refuses_what_run_refuses, |fx| {
    // Ports under network.internal count as those under allow (issue 20, item 1).
    let ports: Vec<String> = (1..=6).map(|p| format!("\"h.example:{p}\"")).collect();
    let internal: Vec<String> = (7..=11).map(|p| format!("\"git.corp:{p}\"")).collect();
    fx.test_config(&format!(
        "\n[profiles.ports]\nextends = \"test\"\nnetwork = {{ allow = [{}], internal = [{}] }}\n",
        ports.join(", "),
        internal.join(", ")
    ));
    let out = fx.run(&["policy", "check"]);
    out.expect_code(1);
    assert!(
        out.stderr
            .starts_with("error: profile 'ports': network.allow and network.internal name 11 distinct ports; a sandbox can have at most 10"),
        "{out:#?}"
    );
    let out = fx.run(&["run", "--profile", "ports", "--", "true"]);
    out.expect_code(1);
    assert!(out.stderr.contains("name 11 distinct ports"), "{out:#?}");
});

// Issue 19: a working directory whose path is not UTF-8 gave a Rust debug string.
both!(
    a_working_directory_that_is_not_utf8_is_refused_in_words,
    |fx| {
        use std::os::unix::ffi::OsStrExt;
        fx.test_config("");
        let bad = fx.proj.join(std::ffi::OsStr::from_bytes(b"bad\xff"));
        std::fs::create_dir(&bad).unwrap();
        fx.own(&bad);
        let out: wardcell_tests::Out = fx
            .cmd(&["run", "--", "true"])
            .current_dir(&bad)
            .output()
            .unwrap()
            .into();
        out.expect_code(1);
        assert_eq!(
        out.stderr,
        format!(
            "error: the current directory {}/bad\\xff is not valid UTF-8, and wardcell hands paths to its sandboxes as UTF-8 text: run it from a directory whose path is UTF-8\n",
            fx.proj.display()
        ),
        "{out:#?}"
    );
    }
);
