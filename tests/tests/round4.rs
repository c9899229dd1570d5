//! The smaller findings of the fourth attack round (issue 35, items 5 and 6), each tried
//! as it was seen. Real sandboxes, as the invoking user and as the unprivileged uid.

use wardcell_tests::{both, Out};

both!(a_missing_home_is_said_and_never_created, |fx| {
    let home = fx.dir.join("no-such-home");
    for args in [&["run", "--", "/bin/true"][..], &["policy", "show"]] {
        let out: Out = fx.cmd(args).env("HOME", &home).output().unwrap().into();
        out.expect_code(1);
        assert_eq!(
            out.stderr,
            format!("error: your home directory {} does not exist, and wardcell does not create it: create it, or set HOME to one that exists\n", home.display()),
            "{out:#?}"
        );
        assert!(!home.exists(), "the home was made: {out:#?}");
    }
});

both!(secret_shaped_variables_stay_outside, |fx| {
    let mut cmd = fx.cmd(&["run", "--", "/usr/bin/env"]);
    for (k, v) in [
        ("PRIVATE_KEY", "pk"),
        ("STRIPE_KEY", "sk"),
        ("SENTRY_DSN", "https://k@sentry"),
        ("SLACK_WEBHOOK_URL", "https://hooks"),
        ("DEPLOY_WEBHOOK", "https://hook"),
        ("KEYBOARD", "kept"),
    ] {
        cmd.env(k, v);
    }
    let out: Out = cmd.output().unwrap().into();
    out.ok();
    for gone in ["PRIVATE_KEY=", "STRIPE_KEY=", "SENTRY_DSN=", "WEBHOOK"] {
        assert!(!out.stdout.contains(gone), "{gone}: {out:#?}");
    }
    assert!(out.stdout.contains("KEYBOARD=kept\n"), "{out:#?}");
});
