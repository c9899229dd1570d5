//! Credentials never enter a sandbox: their files are masked and their variables
//! removed whatever the profile says, and a secret file others can read refuses the run.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use wardcell_tests::{both, Fixture, Out};

fn config_with_token_file(fx: &Fixture) -> std::path::PathBuf {
    let token = fx.home.join("secrets/git-token");
    fx.write(&token, "tok-3f9a1c2b-secret");
    fs::set_permissions(&token, fs::Permissions::from_mode(0o600)).unwrap();
    fx.config(&format!(
        r#"
[zones.agent]
profile = "p"
default = true

[profiles.p]
extends = "readonly"
read = ["{bin}"]

[credentials.git]
hosts = ["git.example.com"]
scheme = "basic"
username = "x-access-token"
secret = {{ file = "{token}" }}

[credentials.api]
hosts = ["api.example.com"]
scheme = "bearer"
secret = {{ env = "SOME_SERVICE_CREDENTIAL" }}
"#,
        bin = fx.bin.display(),
        token = token.display()
    ));
    token
}

both!(a_secret_file_others_can_read_refuses_the_run, |fx| {
    let token = config_with_token_file(&fx);
    fs::set_permissions(&token, fs::Permissions::from_mode(0o644)).unwrap();
    let marker = fx.proj.join("ran");
    let out = fx.run(&[
        "run",
        "--",
        "/bin/sh",
        "-c",
        &format!("touch {}", marker.display()),
    ]);
    out.expect_code(1);
    assert!(
        out.stderr
            .contains("others can access (mode 644); run `chmod 600"),
        "{out:?}"
    );
    assert!(!marker.exists(), "the command ran");
    fx.run(&["policy", "check"]).expect_code(1);
    fs::set_permissions(&token, fs::Permissions::from_mode(0o600)).unwrap();
    fx.run(&["policy", "check"]).ok();
});

both!(credential_sources_never_reach_a_sandbox, |fx| {
    let token = config_with_token_file(&fx);
    // The profile reads the whole home, where the token file lives: still masked.
    let out: Out = fx
        .cmd(&[
            "run",
            "--",
            "/bin/sh",
            "-c",
            &format!(
                "cat {} 2>&1; env; grep -r tok-3f9a1c2b ~ 2>/dev/null; echo end",
                token.display()
            ),
        ])
        .env("SOME_SERVICE_CREDENTIAL", "env-secret-77a1")
        .output()
        .unwrap()
        .into();
    out.ok();
    assert!(!out.stdout.contains("tok-3f9a1c2b"), "{out:?}");
    assert!(!out.stdout.contains("env-secret-77a1"), "{out:?}");
    assert!(!out.stdout.contains("SOME_SERVICE_CREDENTIAL"), "{out:?}");
    assert!(out.stdout.contains("end"), "{out:?}");
});

// `policy check` refuses what a credential may not say, one line each, naming the place:
// a host with a bad port or a `*.` pattern, TRACE/TRACK/CONNECT or a lower-case method,
// a placeholder that is no variable name or one wardcell sets itself.
both!(policy_check_refuses_bad_credential_rules, |fx| {
    let good = "hosts = [\"api.example.com:8443\", \"git.example.com\"]\nmethods = [\"GET\", \"POST\"]\nplaceholder = \"ANTHROPIC_API_KEY\"";
    for (rule, needle) in [
        (good, ""),
        (
            "hosts = [\"api.example.com:0\"]",
            "the port must be a number",
        ),
        ("hosts = [\"*.example.com\"]", "exact hosts"),
        (
            "hosts = [\"a.io\"]\nmethods = [\"TRACE\"]",
            "TRACE is never",
        ),
        (
            "hosts = [\"a.io\"]\nmethods = [\"GET\", \"CONNECT\"]",
            "CONNECT is never",
        ),
        (
            "hosts = [\"a.io\"]\nmethods = [\"post\"]",
            "not an HTTP method",
        ),
        (
            "hosts = [\"a.io\"]\nplaceholder = \"MY-KEY\"",
            "not a variable name",
        ),
        (
            "hosts = [\"a.io\"]\nplaceholder = \"SSL_CERT_FILE\"",
            "wardcell sets",
        ),
    ] {
        fx.config(&format!(
            "[zones.agent]\nprofile = \"readonly\"\ndefault = true\n\n[credentials.api]\n{rule}\nscheme = \"header\"\nheader = \"X-Api-Key\"\nsecret = {{ env = \"SOME_KEY\" }}\n"
        ));
        let out = fx.run(&["policy", "check"]);
        if needle.is_empty() {
            out.ok();
            continue;
        }
        out.expect_code(1);
        assert!(out.stderr.contains(needle), "{rule}: {out:?}");
        assert!(out.stderr.contains("credentials.api."), "{rule}: {out:?}");
        assert_eq!(out.stderr.lines().count(), 1, "{rule}: {out:?}");
    }
});
