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
