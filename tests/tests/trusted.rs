//! What a run trusts cannot be changed by its sandboxes (issue 35, item 1): the
//! client, the broker and its helpers, the approval plugin and a credential's command,
//! lying in a tree the sandbox writes (README's "Try it" runs a build in the project), are
//! read-only in every view, their directories there cannot be moved, and each program the
//! run starts is the file opened when it started, whatever replaces it later. CA bundles
//! are read once, never from a device. A helper of another build is refused.
//! Real sandboxes, as the invoking user and as the unprivileged uid.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use wardcell_tests::{both, wait_until, Fixture, Out, Watched};

const HELPERS: &[&str] = &[
    "wardcell",
    "wardcell-broker",
    "wardcell-shim",
    "wardcell-proxy",
];

/// A build of wardcell inside the project, as `cargo build --release` leaves one, and the
/// client in it.
fn build_in_project(fx: &Fixture) -> PathBuf {
    build_in(fx, &fx.proj.join("target/release"))
}

/// A build of wardcell in `release`, and the client in it.
fn build_in(fx: &Fixture, release: &Path) -> PathBuf {
    fs::create_dir_all(release).unwrap();
    for name in HELPERS {
        fs::copy(fx.bin.join(name), release.join(name)).unwrap();
        fs::set_permissions(release.join(name), fs::Permissions::from_mode(0o755)).unwrap();
    }
    fx.own(&fx.dir);
    release.join("wardcell")
}

/// An executable script at `path` (written beside it, then renamed over it, as a build
/// or an editor replaces a file).
fn put_script(fx: &Fixture, path: &Path, body: &str) {
    let tmp = path.with_extension("new");
    fx.write(&tmp, &format!("#!/bin/sh\n{body}\n"));
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o755)).unwrap();
    fs::rename(&tmp, path).unwrap();
}

/// Zones `agent` (writes the project), `other`, `push` (its proxy attaches a credential
/// whose command is in the project) and `appr` (asks the plugin in the project, which
/// refuses).
fn config(fx: &Fixture) {
    config_with(fx, &fx.proj)
}

/// [`config`] with the plugin and the command in `dir`.
fn config_with(fx: &Fixture, dir: &Path) {
    let (proj, bin) = (dir.display(), fx.bin.display());
    put_script(
        fx,
        &dir.join("approve.sh"),
        r#"read l; echo '{"approved": false, "reason": "the original plugin"}'"#,
    );
    put_script(fx, &dir.join("token.sh"), "echo original-token");
    fx.config(&format!(
        r#"
[zones.agent]
profile = "dev"
default = true

[zones.other]
profile = "ro"
enter_from = ["agent"]

[zones.push]
profile = "pusher"
authenticated = true
enter_from = ["agent"]

[zones.appr]
profile = "ro"
enter_from = ["agent"]
requires_approval = true

[approval]
plugin = ["{proj}/approve.sh"]

[profiles.dev]
extends = "developer-readonly"
read = ["{bin}"]

[profiles.ro]
extends = "readonly"

[profiles.pusher]
extends = "readonly"
network = {{ allow = ["example.com:443"] }}
credentials = ["tok"]

[credentials.tok]
hosts = ["example.com"]
scheme = "bearer"
secret = {{ command = ["{proj}/token.sh"] }}
"#
    ));
}

fn digest(path: &Path) -> Vec<u8> {
    fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

both!(what_the_run_trusts_cannot_be_changed_from_inside, |fx| {
    let client = build_in_project(&fx);
    config(&fx);
    let trusted: Vec<PathBuf> = HELPERS
        .iter()
        .map(|n| fx.proj.join("target/release").join(n))
        .chain([fx.proj.join("approve.sh"), fx.proj.join("token.sh")])
        .collect();
    let before: Vec<Vec<u8>> = trusted.iter().map(|p| digest(p)).collect();
    // Every way a sandbox could change what the host runs next: write in place, replace,
    // remove, move the file or a directory above it away.
    let script = r#"
w() { if "$@" 2>/dev/null; then echo "ALLOWED: $*"; else echo "refused: $*"; fi; }
cd target/release
for f in wardcell wardcell-broker wardcell-shim wardcell-proxy; do
  w sh -c "echo x >> $f"
  w cp /bin/true $f
  w rm -f $f
  w mv $f $f.old
done
w mv ../release ../moved
w sh -c 'echo "echo planted" > git'
w mkdir wardcell-nested
w mv ../../target ../../moved
w sh -c 'echo "echo approved" > ../../approve.sh'
w rm -f ../../token.sh
w mv ../../token.sh ../../t
w ln -sf /bin/true ../../approve.sh
cd ../..
wardcell zone enter other -- /bin/echo entered-other
wardcell zone enter push -- /bin/true && echo entered-push
wardcell zone enter appr -- /bin/echo approved-entry; echo appr=$?
"#;
    let out: Out = fx.run_binary(&client, &["run", "--", "/bin/sh", "-c", script]);
    assert!(!out.stdout.contains("ALLOWED"), "{out:#?}");
    assert_eq!(out.stdout.matches("refused: ").count(), 24, "{out:#?}");
    assert!(out.stdout.contains("entered-other\n"), "{out:#?}");
    assert!(out.stdout.contains("entered-push\n"), "{out:#?}");
    assert!(!out.stdout.contains("approved-entry"), "{out:#?}");
    assert!(out.stdout.contains("appr=1\n"), "{out:#?}");
    assert!(out.stderr.contains("the original plugin"), "{out:#?}");
    let after: Vec<Vec<u8>> = trusted.iter().map(|p| digest(p)).collect();
    assert!(before == after, "a trusted file changed: {out:#?}");
});

// The run's own programs, outside every tree a sandbox holds (so nothing of them is in
// any view), replaced on the host mid-run (a rebuild, an edit): the run goes on with the
// files it opened, and no replacement ever runs.
both!(what_runs_is_what_was_opened_when_the_run_started, |fx| {
    let release = fx.outside.join("build");
    let client = build_in(&fx, &release);
    config_with(&fx, &fx.outside);
    let marker = fx.outside.join("replacement-ran");
    let script = "touch ready; while [ ! -e go ]; do sleep 0.05; done
wardcell zone enter other -- /bin/echo entered-other
wardcell zone enter push -- /bin/true && echo entered-push
wardcell zone enter appr -- /bin/true; echo appr=$?";
    let cmd = fx.cmd_of(&client, &["run", "--", "/bin/sh", "-c", script]);
    let run = Watched::spawn(&fx, cmd, "replaced");
    wait_until(20, "the run to start", || fx.proj.join("ready").exists());
    let evil = format!("touch {}; echo '{{\"approved\": true}}'", marker.display());
    for path in [
        release.join("wardcell-shim"),
        release.join("wardcell-proxy"),
        fx.outside.join("approve.sh"),
        fx.outside.join("token.sh"),
    ] {
        put_script(&fx, &path, &evil);
    }
    fx.write(&fx.proj.join("go"), "");
    let (out, _) = run.finish(60);
    assert!(out.stdout.contains("entered-other\n"), "{out:#?}");
    assert!(out.stdout.contains("entered-push\n"), "{out:#?}");
    assert!(out.stdout.contains("appr=1\n"), "{out:#?}");
    assert!(out.stderr.contains("the original plugin"), "{out:#?}");
    assert!(!marker.exists(), "a replaced program ran: {out:#?}");
});

// The same in the project, where every view holds the build's directory read-only: the
// host replacing it (as a clean build does) ends the run at once (3.16), and no
// replacement runs either.
both!(a_program_replaced_in_the_project_ends_the_run, |fx| {
    let client = build_in_project(&fx);
    config(&fx);
    let marker = fx.outside.join("replacement-ran");
    let script = "touch ready; while [ ! -e go ]; do sleep 0.05; done
wardcell zone enter push -- /bin/true; echo push=$?";
    let cmd = fx.cmd_of(&client, &["run", "--", "/bin/sh", "-c", script]);
    let mut run = Watched::spawn(&fx, cmd, "replaced");
    wait_until(20, "the run to start", || fx.proj.join("ready").exists());
    let release = fx.proj.join("target/release");
    fs::rename(&release, fx.proj.join("target/old")).unwrap();
    fs::create_dir(&release).unwrap();
    put_script(
        &fx,
        &release.join("wardcell-proxy"),
        &format!("touch {}", marker.display()),
    );
    wait_until(10, "the run to end", || {
        run.child.try_wait().unwrap().is_some()
    });
    fx.write(&fx.proj.join("go"), "");
    let (out, _) = run.finish(30);
    assert!(!out.stdout.contains("push="), "{out:#?}");
    let line = format!(
        "error: {} was replaced, removed or created while",
        release.display()
    );
    assert!(out.stderr.contains(&line), "{out:#?}");
    assert!(!marker.exists(), "a replaced program ran: {out:#?}");
});

both!(ca_bundles_are_regular_files_read_once, |fx| {
    config(&fx);
    for bad in ["/dev/zero", "/dev/null"] {
        let mut cmd = fx.cmd(&["run", "--", "/bin/true"]);
        let out: Out = cmd.env("SSL_CERT_FILE", bad).output().unwrap().into();
        out.expect_code(1);
        assert_eq!(
            out.stderr,
            format!("error: CA certificates: {bad} is not a regular file; SSL_CERT_FILE and SSL_CERT_DIR must name certificates in regular files\n"),
            "{out:#?}"
        );
    }
    // A bundle in the project, which the sandbox writes: the proxy trusts what it held
    // when the run started. Here an empty one: the entry's proxy says it has no roots,
    // however the sandbox fills the file first.
    let bundle = fx.proj.join("roots.pem");
    fx.write(&bundle, "");
    let script = "echo '-----BEGIN CERTIFICATE-----' > roots.pem; echo wrote=$?
wardcell zone enter push -- /bin/true; echo push=$?";
    let mut cmd = fx.cmd(&["run", "--", "/bin/sh", "-c", script]);
    let out: Out = cmd.env("SSL_CERT_FILE", &bundle).output().unwrap().into();
    assert!(
        out.stdout.contains("wrote=2\n"),
        "the bundle was writable: {out:#?}"
    );
    assert!(
        out.stderr.contains("roots.pem: Read-only file system"),
        "{out:#?}"
    );
    assert!(out.stdout.contains("push=1\n"), "{out:#?}");
    assert!(
        out.stderr.contains("no trusted root certificates"),
        "{out:#?}"
    );
});

both!(a_helper_of_another_build_is_refused, |fx| {
    let bin = fx.dir.join("mixed-bin");
    fs::create_dir_all(&bin).unwrap();
    for name in ["wardcell", "wardcell-broker", "wardcell-shim"] {
        fs::copy(fx.bin.join(name), bin.join(name)).unwrap();
    }
    // A proxy that speaks the protocol but is release 0.0.9.
    fx.write(
        &bin.join("wardcell-proxy"),
        "#!/usr/bin/python3\nimport os, struct\n\
         n = struct.unpack('<I', os.read(3, 4))[0]; os.read(3, n)\n\
         hello = bytes([6]) + b'0.0.9'.ljust(16, b'\\0')\n\
         os.write(3, struct.pack('<I', len(hello)) + hello)\n\
         os.read(3, 1)\n",
    );
    for name in [
        "wardcell",
        "wardcell-broker",
        "wardcell-shim",
        "wardcell-proxy",
    ] {
        fs::set_permissions(bin.join(name), fs::Permissions::from_mode(0o755)).unwrap();
    }
    fx.own(&bin);
    let args = ["run", "--allow", "example.com:443", "--", "/bin/true"];
    let out = fx.run_binary(&bin.join("wardcell"), &args);
    out.expect_code(1);
    let release = env!("CARGO_PKG_VERSION");
    assert_eq!(
        out.stderr,
        format!("error: could not start the sandbox: starting zone 'agent''s proxy: hello: the peer is another build of wardcell: this side is wardcell {release} (protocol 6), the peer is wardcell 0.0.9 (protocol 6); install matching wardcell binaries\n"),
        "{out:#?}"
    );
});

// A trusted file with a second name in a tree a sandbox writes (cargo links
// `target/release/X` to `target/release/deps/X-<hash>`; the review found a plugin
// replaced through such a link ran on the host) is refused by `run` and `policy check`
// alike, naming the file and the profile; a secret file with a second name, wherever.
both!(
    a_trusted_file_with_another_name_in_a_writable_tree_is_refused,
    |fx| {
        let client = build_in_project(&fx);
        config(&fx);
        let release = fx.proj.join("target/release");
        fs::create_dir_all(release.join("deps")).unwrap();
        fs::hard_link(
            release.join("wardcell-proxy"),
            release.join("deps/wardcell_proxy-0123"),
        )
        .unwrap();
        fx.own(&fx.proj);
        for args in [&["run", "--", "/bin/true"][..], &["policy", "check"]] {
            let out = fx.run_binary(&client, args);
            out.expect_code(1);
            let proxy = release.join("wardcell-proxy");
            assert_eq!(
            out.stderr,
            format!(
                "error: {} (a helper of wardcell) has 2 names (hard links), and profile 'dev' writes {}, so a sandbox could change it through another one; copy it to a file of its own (`cp --remove-destination`), or run wardcell from outside {}\n",
                proxy.display(), fx.proj.display(), fx.proj.display()
            ),
            "{out:#?}"
        );
        }
        // The plugin the same way.
        fs::remove_file(release.join("deps/wardcell_proxy-0123")).unwrap();
        fs::hard_link(
            fx.proj.join("approve.sh"),
            release.join("deps/approve-0123"),
        )
        .unwrap();
        let out = fx.run_binary(&client, &["run", "--", "/bin/true"]);
        out.expect_code(1);
        assert!(
            out.stderr.contains("(the approval plugin) has 2 names"),
            "{out:#?}"
        );
        fs::remove_file(release.join("deps/approve-0123")).unwrap();
        assert!(fx.run_binary(&client, &["policy", "check"]).code == 0);
    }
);

// A build of wardcell whose directory is a tree a profile writes cannot be held
// read-only there (a sandbox could put a `git` beside the client, which goes on every
// sandbox's PATH, or replace a helper this run does not start, which the next one
// does): refused by `run` and `policy check` alike.
both!(a_build_in_a_written_tree_itself_is_refused, |fx| {
    let client = build_in(&fx, &fx.proj);
    config(&fx);
    fx.own(&fx.proj);
    for args in [&["run", "--", "/bin/true"][..], &["policy", "check"]] {
        let out = fx.run_binary(&client, args);
        out.expect_code(1);
        assert_eq!(
            out.stderr,
            format!(
                "error: {} holds wardcell's programs, and profile 'dev' writes it, so a sandbox could replace them or put a program beside them that a later run or another zone starts; install wardcell outside every tree a profile writes (README, \"Try it\")\n",
                fx.proj.display()
            ),
            "{out:#?}"
        );
    }
});

both!(a_secret_file_with_another_name_is_refused, |fx| {
    let secret = fx.outside.join("token");
    fx.write(&secret, "s3cret\n");
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    fs::hard_link(&secret, fx.outside.join("token-copy")).unwrap();
    fx.config(&format!(
        "[zones.agent]\nprofile = \"p\"\ndefault = true\nauthenticated = true\n[profiles.p]\nextends = \"developer-readonly\"\nread = [\"{}\"]\nnetwork = {{ allow = [\"example.com:443\"] }}\ncredentials = [\"c\"]\n[credentials.c]\nhosts = [\"example.com\"]\nscheme = \"bearer\"\nsecret = {{ file = \"{}\" }}\n",
        fx.bin.display(),
        secret.display()
    ));
    let out = fx.run(&["run", "--", "/bin/true"]);
    out.expect_code(1);
    assert_eq!(
        out.stderr,
        format!("error: the secret file {} has 2 names (hard links): every sandbox is kept from this one only; give the secret a file of its own\n", secret.display()),
        "{out:#?}"
    );
});

/// A mount of a test's, unmounted when dropped (lazily: a run may still hold it).
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// `mount ARGS...`, which must succeed.
fn mount(args: &[&std::ffi::OsStr]) {
    let st = std::process::Command::new("mount")
        .args(args)
        .status()
        .unwrap();
    assert!(st.success(), "mount {args:?}");
}

/// `policy check` with `client` refuses: `alias` is a second name of what it trusts.
#[track_caller]
fn refused_through(fx: &Fixture, client: &Path, alias: &Path) {
    let out = fx.run_binary(client, &["policy", "check"]);
    out.expect_code(1);
    let said = format!("is also {} through a bind mount", alias.display());
    assert!(out.stderr.contains(&said), "{out:#?}");
}

// A pin binds a directory by its name. The review found a second name: the build's
// directory bind-mounted (on the host) inside the project, which the sandbox writes,
// stayed writable there, so a sandbox could replace the helpers the next run starts.
// Such a run is refused, by `run` and `policy check` alike, naming the second name.
// (Mounting needs root: as another user the test is skipped, said on stderr.)
both!(a_second_name_by_a_bind_mount_is_refused, |fx| {
    if !wardcell_tests::is_root() {
        wardcell_tests::skipped("a bind mount needs root");
        return;
    }
    let client = build_in(&fx, &fx.dir.join("opt/w"));
    config(&fx);
    let alias = fx.proj.join("vendor/w");
    fs::create_dir_all(&alias).unwrap();
    fx.own(&fx.proj);
    mount(&[
        "--bind".as_ref(),
        fx.dir.join("opt/w").as_os_str(),
        alias.as_os_str(),
    ]);
    let bound = Mounted(alias.clone());
    for args in [&["run", "--", "/bin/true"][..], &["policy", "check"]] {
        let out = fx.run_binary(&client, args);
        out.expect_code(1);
        assert!(
            out.stderr.contains(&format!(
                "(wardcell's programs) is also {} through a bind mount, and profile 'dev' writes {}",
                alias.display(),
                fx.proj.display()
            )),
            "{out:#?}"
        );
    }
    // Read-only, the second name is no way in.
    let st = std::process::Command::new("mount")
        .args(["-o", "remount,bind,ro"])
        .arg(&alias)
        .status()
        .unwrap();
    assert!(st.success());
    fx.run_binary(&client, &["policy", "check"]).ok();
    drop(bound);
});

// The review: wardcell installed outside the project (a copy of its own), with a second
// name (a hard link) in the project: the sandbox rewrote the installed proxy through it,
// and the next run with network started it on the host. No inode lists its names, so a
// trusted file with another name on the filesystem of a written tree is refused.
both!(
    a_trusted_file_with_another_name_on_a_written_filesystem_is_refused,
    |fx| {
        let inst = fx.dir.join("inst");
        let client = build_in(&fx, &inst);
        config(&fx);
        fs::create_dir_all(fx.proj.join("vendor")).unwrap();
        fs::hard_link(
            inst.join("wardcell-proxy"),
            fx.proj.join("vendor/proxy-copy"),
        )
        .unwrap();
        fx.own(&fx.proj);
        for args in [&["run", "--", "/bin/true"][..], &["policy", "check"]] {
            let out = fx.run_binary(&client, args);
            out.expect_code(1);
            assert_eq!(
            out.stderr,
            format!(
                "error: {} (a helper of wardcell) has 2 names (hard links), and profile 'dev' writes {} on the same filesystem, so a sandbox could change it through another name there; copy it to a file of its own (`cp --remove-destination`)\n",
                inst.join("wardcell-proxy").display(),
                fx.proj.display()
            ),
            "{out:#?}"
        );
        }
        fs::remove_file(fx.proj.join("vendor/proxy-copy")).unwrap();
        fx.run_binary(&client, &["policy", "check"]).ok();
        // A cargo build's layout outside every written tree (`deps/` beside it holds the
        // other name) is no second name a sandbox reaches; one more in the project is.
        fs::create_dir_all(inst.join("deps")).unwrap();
        let deps = inst.join("deps/wardcell_proxy-0123");
        fs::hard_link(inst.join("wardcell-proxy"), deps).unwrap();
        fx.run_binary(&client, &["policy", "check"]).ok();
        fx.run_binary(&client, &["run", "--", "/bin/true"]).ok();
        let again = fx.proj.join("vendor/proxy-copy");
        fs::hard_link(inst.join("wardcell-proxy"), again).unwrap();
        let out = fx.run_binary(&client, &["policy", "check"]);
        out.expect_code(1);
        assert!(out.stderr.contains("has 3 names"), "{out:#?}");
    }
);

// A single trusted file bound into the project, or an overlay whose writes go to the
// directory of wardcell's programs: second names the review found past the directory
// check. (Mounting needs root: as another user the test is skipped, said on stderr.)
both!(
    a_file_bind_or_an_overlay_writing_a_trusted_directory_is_refused,
    |fx| {
        if !wardcell_tests::is_root() {
            wardcell_tests::skipped("mounting needs root");
            return;
        }
        let inst = fx.dir.join("inst");
        let client = build_in(&fx, &inst);
        config(&fx);
        // One file.
        let file = fx.proj.join("proxyfile");
        fx.write(&file, "");
        fx.own(&fx.proj);
        mount(&[
            "--bind".as_ref(),
            inst.join("wardcell-proxy").as_os_str(),
            file.as_os_str(),
        ]);
        let bound = Mounted(file.clone());
        refused_through(&fx, &client, &file);
        drop(bound);
        // An overlay whose upper directory is the programs'.
        let (low, work, ov) = (fx.dir.join("low"), fx.dir.join("work"), fx.proj.join("ov"));
        for d in [&low, &work, &ov] {
            fs::create_dir_all(d).unwrap();
        }
        let opts = format!(
            "lowerdir={},upperdir={},workdir={}",
            low.display(),
            inst.display(),
            work.display()
        );
        mount(&[
            "-t".as_ref(),
            "overlay".as_ref(),
            "overlay".as_ref(),
            "-o".as_ref(),
            opts.as_ref(),
            ov.as_os_str(),
        ]);
        let overlay = Mounted(ov.clone());
        refused_through(&fx, &client, &ov);
        drop(overlay);
        fx.run_binary(&client, &["policy", "check"]).ok();
    }
);
