//! `wardcell completions` inside real sandboxes: printed in a zone, the same script as on
//! the host; refused in a run without zones, like every command there.

use wardcell_tests::both;

both!(completions_work_in_a_zone_and_match_the_host, |fx| {
    fx.test_config("");
    let host = fx.run(&["completions", "bash"]);
    host.ok();
    assert!(host.stdout.contains("complete -F _wardcell"), "{host:?}");
    let inside = fx.sh("wardcell completions bash");
    inside.ok();
    assert_eq!(inside.stdout, host.stdout);
    for shell in ["zsh", "fish"] {
        let host = fx.run(&["completions", shell]);
        let inside = fx.sh(&format!("wardcell completions {shell}"));
        inside.ok();
        assert_eq!(inside.stdout, host.stdout, "{shell}");
    }
});

both!(completions_are_refused_without_zones, |fx| {
    fx.test_config("");
    let out = fx.run(&[
        "run",
        "--profile",
        "test",
        "--",
        "/bin/sh",
        "-c",
        "wardcell completions bash",
    ]);
    out.expect_code(1);
    assert_eq!(out.stdout, "");
    assert!(
        out.stderr
            .starts_with("error: `wardcell completions` is not available in this sandbox"),
        "{out:?}"
    );
});
