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
