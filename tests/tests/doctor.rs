//! `wardcell doctor` checks by doing: a real sandbox through the real broker.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use wardcell_tests::both;

both!(doctor_passes_on_this_machine, |fx| {
    let out = fx.run(&["doctor"]);
    out.ok();
    assert!(out.stdout.contains("OK    landlock"), "{out:?}");
    assert!(out.stdout.contains("OK    seccomp"), "{out:?}");
    assert!(
        out.stdout.contains("OK    sandbox          ran /bin/true"),
        "{out:?}"
    );
    assert!(
        out.stdout
            .contains(&format!("{}/.local/state/wardcell/runs", fx.home.display())),
        "{out:?}"
    );
    assert!(!out.stdout.contains("FAIL"), "{out:?}");
    // What is not enforced here is a warning, never OK (issue 36): a limit this
    // machine cannot bound, and (below Landlock ABI 9) sockets in trees a profile reads.
    for line in out.stdout.lines().filter(|l| l.starts_with("OK")) {
        assert!(
            !line.contains("cannot be enforced") && !line.contains("stays reachable"),
            "{line}"
        );
    }
    let abi9 = out.stdout.contains("Landlock's socket rules (ABI 9)");
    assert!(
        abi9 || out
            .stdout
            .contains("WARN  unix sockets     kept out by the view only"),
        "{out:?}"
    );
});

// `policy check` does not ask for what `run` makes itself (the agent profiles' state
// directories), nor for the key of a credential no zone attaches.
both!(policy_check_asks_only_for_what_run_does_not_do, |fx| {
    fx.config(
        "[zones.agent]\nprofile = \"mine\"\ndefault = true\nauthenticated = true\n\n\
         [profiles.mine]\nextends = [\"claude-code\", \"package-managers\"]\n",
    );
    let out = fx.run(&["policy", "check"]);
    out.ok();
    assert!(!out.stderr.contains(".local/share/wardcell"), "{out:?}");
    assert!(!out.stderr.contains("OPENAI_API_KEY"), "{out:?}");
    assert!(
        out.stderr.contains("warning: credential 'anthropic' reads environment variable ANTHROPIC_API_KEY, which is not set here"),
        "{out:?}"
    );
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
});

both!(doctor_fails_without_the_shim, |fx| {
    // A copy of the client and broker with no shim beside them: an installed package's
    // is never used by another build (issue 35), so doctor fails whatever is installed.
    let bin = fx.dir.join("lonely-bin");
    fs::create_dir_all(&bin).unwrap();
    for name in ["wardcell", "wardcell-broker"] {
        fs::copy(fx.bin.join(name), bin.join(name)).unwrap();
        fs::set_permissions(bin.join(name), fs::Permissions::from_mode(0o755)).unwrap();
    }
    fx.own(&bin);
    let out = fx.run_binary(&bin.join("wardcell"), &["doctor"]);
    out.expect_code(1);
    assert!(out.stdout.contains("FAIL  wardcell-shim"), "{out:?}");
    assert!(
        out.stdout
            .contains("wardcell cannot sandbox on this machine"),
        "{out:?}"
    );
});

both!(doctor_is_refused_inside_a_sandbox, |fx| {
    fx.test_config("");
    let out = fx.sh("wardcell doctor");
    out.expect_code(1);
    assert!(
        out.stderr
            .starts_with("error: `wardcell doctor` is not available inside a wardcell sandbox"),
        "{out:?}"
    );
});

both!(doctor_names_the_kernel_and_the_peer_check, |fx| {
    let out = fx.run(&["doctor"]);
    out.ok();
    let release = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert!(
        out.stdout.contains(&format!(
            "OK    kernel           Linux {}\n",
            release.trim()
        )),
        "{out:?}"
    );
    // This machine's kernel (6.5 or later, as the zone tests need) has SO_PEERPIDFD.
    assert!(
        out.stdout.contains(
            "OK    peer check       SO_PEERPIDFD works: wardcell-broker can verify each zone request's process"
        ),
        "{out:?}"
    );
});
