//! Security review of the changes for issues 19-21: each test tries an attack that works
//! with today's binaries and fails until it is fixed. As the invoking user and as an
//! unprivileged uid.

use std::os::unix::fs::PermissionsExt;

use wardcell_tests::both;

fn chmod(p: &std::path::Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

// A `deny` path the caller cannot read or write *now* is left unmasked
// (resolve.rs `out_of_reach`), but the caller owns it (or a directory above it) and the
// sandbox runs as the caller: inside a write tree it chmods the file or the directory
// and reads what the profile denies. Only a path owned by another user (and not below a
// directory the caller owns) is out of reach for good.
both!(
    a_denied_file_the_caller_owns_stays_masked_whatever_its_mode,
    |fx| {
        let bin = fx.bin.display();
        fx.config(&format!(
            r#"
[zones.agent]
profile = "locked"
default = true

[profiles.locked]
extends = "developer-readonly"
read = ["{bin}"]
deny = ["./locked/key", "./key2", "~/vault"]
"#
        ));
        let locked = fx.proj.join("locked");
        fx.write(&locked.join("key"), "TOPSECRET-IN-DIR\n");
        fx.write(&fx.proj.join("key2"), "TOPSECRET-FILE\n");
        // A directory one may search but neither list nor change (0111): its files are
        // read by name, in a read-only tree, with no chmod at all.
        let vault = fx.home.join("vault");
        fx.write(&vault.join("secret.txt"), "TOPSECRET-BY-NAME\n");
        chmod(&fx.proj.join("key2"), 0o000);
        chmod(&locked, 0o000);
        chmod(&vault, 0o111);
        let out = fx.sh("cat ~/vault/secret.txt 2>/dev/null; \
             chmod 600 key2 2>/dev/null; cat key2 2>/dev/null; \
             chmod 700 locked 2>/dev/null; cat locked/key 2>/dev/null; true");
        // Put things back so that the fixture can be removed.
        chmod(&locked, 0o700);
        chmod(&fx.proj.join("key2"), 0o600);
        chmod(&vault, 0o700);
        assert!(!out.stdout.contains("TOPSECRET-BY-NAME"), "{out:#?}");
        assert!(!out.stdout.contains("TOPSECRET-FILE"), "{out:#?}");
        assert!(!out.stdout.contains("TOPSECRET-IN-DIR"), "{out:#?}");
        // Without the unreachable entry, the run goes on and both others stay masked.
        fx.config(&format!(
            "[zones.agent]\nprofile = \"locked\"\ndefault = true\n[profiles.locked]\nextends = \"developer-readonly\"\nread = [\"{bin}\"]\ndeny = [\"./key2\", \"~/vault\"]\n"
        ));
        chmod(&fx.proj.join("key2"), 0o000);
        chmod(&vault, 0o111);
        let two = fx.sh("cat ~/vault/secret.txt 2>/dev/null; \
             chmod 600 key2 2>/dev/null; cat key2 2>/dev/null; true");
        chmod(&fx.proj.join("key2"), 0o600);
        chmod(&vault, 0o700);
        two.ok();
        assert!(!two.stdout.contains("TOPSECRET"), "{two:#?}");
        // A deny entry below a directory the caller cannot search cannot be masked: the
        // run is refused, in words (root searches it, masks it, and runs).
        if out.code != 0 {
            assert_eq!(out.code, 1, "{out:#?}");
            assert!(
                out.stderr
                    .contains("denies \"./locked/key\", which cannot be reached to mask it"),
                "{out:#?}"
            );
        }
    }
);

// `zone why`'s raw answer (ZoneResponse::Rules) lists, in `masked`, the secret file of
// every credential of the plan, those of zones this sandbox may not enter included:
// THREAT_MODEL ("Refusals a sandbox may read") says it tells of neither credentials nor
// zones it may not enter.
both!(
    zone_why_names_no_secret_file_of_a_zone_it_may_not_enter,
    |fx| {
        let bin = fx.bin.display();
        let secret = fx.outside.join("deploy-token-file-name");
        fx.write(&secret, "not-the-point\n");
        chmod(&secret, 0o600);
        fx.own(&fx.outside);
        let client = fx.dir.join("why.py");
        fx.write(
            &client,
            &"import os, socket, struct\n\
         s = socket.socket(socket.AF_UNIX); s.connect(os.environ['WARDCELL_ZONE_SOCKET'])\n\
         f = lambda b: struct.pack('<I', len(b)) + b\n\
         # A Hello (protocol version 6: one byte in bincode; the release, 16 bytes), then\n\
         # the Why request.\n\
         s.sendall(f(b'\\x06' + b'RELEASE'.ljust(16, b'\\0')) + f(b'\\x02'))\n\
         d = b''\n\
         while True:\n\
         \x20   c = s.recv(65536)\n\
         \x20   if not c: break\n\
         \x20   d += c\n\
         print('leaked' if b'deploy-token-file-name' in d else 'clean', len(d))\n"
                .replace("RELEASE", env!("CARGO_PKG_VERSION")),
        );
        chmod(&client, 0o644);
        fx.config(&format!(
            r#"
[zones.agent]
profile = "net"
default = true

[zones.deploy]
profile = "deploy"

[profiles.net]
extends = "developer-readonly"
read = ["{bin}", "{client}"]

[profiles.deploy]
extends = "developer-readonly"
network = {{ allow = ["deploy.example.invalid:443"] }}

[credentials.deploy]
hosts = ["deploy.example.invalid"]
scheme = "bearer"
placeholder = "DEPLOY_TOKEN"
secret = {{ file = "{secret}" }}
"#,
            client = client.display(),
            secret = secret.display(),
        ));
        let out = fx.run(&["run", "--", "python3", client.to_str().unwrap()]);
        out.ok();
        assert!(out.stdout.starts_with("clean "), "{out:#?}");
    }
);

// `package-managers` (docs/AGENTS.md recommends it for agents that install packages) lets the
// sandbox write caches whose contents the host runs without checking them again: cargo's
// extracted sources (build.rs runs at the next host `cargo build`), Go's build cache,
// npx's cache. The agent profiles keep their state apart for exactly this reason.
both!(package_managers_cannot_plant_code_the_host_builds, |fx| {
    fx.config("");
    let src = fx
        .home
        .join(".cargo/registry/src/index.crates.io-6f17d22bba15001f/serde-1.0.200");
    fx.write(&src.join("build.rs"), "fn main() {}\n");
    fx.write(&fx.home.join(".cache/go-build/README"), "cache\n");
    let bin = fx.bin.display();
    fx.config(&format!(
        "[zones.agent]\nprofile = \"pm\"\ndefault = true\n[profiles.pm]\nextends = \"package-managers\"\nread = [\"{bin}\"]\n"
    ));
    let out = fx.sh(&format!(
        "echo 'fn main() {{ /* host code */ }}' > {}/build.rs 2>/dev/null && echo planted-cargo; \
         echo x > ~/.cache/go-build/planted 2>/dev/null && echo planted-go; true",
        src.display()
    ));
    out.ok();
    assert!(!out.stdout.contains("planted-cargo"), "{out:#?}");
    assert!(!out.stdout.contains("planted-go"), "{out:#?}");
});

// Every mask is a read-only, nosuid, nodev, noexec mount, the first of its kind and the
// clones made of it alike (file masks and directory masks, several of each).
both!(every_mask_is_a_read_only_mount_whatever_its_order, |fx| {
    let bin = fx.bin.display();
    for f in ["a.key", "b.key", "c.key"] {
        fx.write(&fx.proj.join(f), "secret\n");
    }
    for d in ["d1", "d2", "d3"] {
        fx.write(&fx.proj.join(d).join("x"), "secret\n");
    }
    fx.config(&format!(
        "[zones.agent]\nprofile = \"m\"\ndefault = true\n[profiles.m]\nextends = \"developer-readonly\"\nread = [\"{bin}\"]\ndeny = [\"./a.key\", \"./b.key\", \"./c.key\", \"./d1\", \"./d2\", \"./d3\"]\n"
    ));
    let script = [
        "import os",
        "masked = {os.path.join(os.getcwd(), n) for n in ['a.key', 'b.key', 'c.key', 'd1', 'd2', 'd3']}",
        "masked |= {'/proc/keys', '/proc/key-users'}",
        "seen = {}",
        "for line in open('/proc/self/mountinfo'):",
        "    f = line.split()",
        "    if f[4] in masked: seen[f[4]] = set(f[5].split(','))",
        "for p in sorted(masked):",
        "    o = seen.get(p, set())",
        "    ok = {'ro', 'nosuid', 'nodev', 'noexec'} <= o",
        "    print('mask', p, 'ok' if ok else 'BAD', sorted(o))",
    ]
    .join("\n");
    let out = fx.run(&["run", "--", "python3", "-c", &script]);
    out.ok();
    assert_eq!(out.stdout.matches(" ok ").count(), 8, "{out:#?}");
    assert!(!out.stdout.contains("BAD"), "{out:#?}");
});

// A deny entry behind another user's directory closed to the caller (a root-owned 0700
// directory `sudo` left in a home) needs no mask, since no sandbox of the caller's can
// open that directory either: the run goes on and `policy show` says why it is left out.
// Behind a directory of the caller's own, it refuses the run (above).
both!(
    a_deny_entry_behind_another_users_closed_directory_is_left_out,
    |fx| {
        let bin = fx.bin.display();
        fx.config(&format!(
        "[zones.agent]\nprofile = \"m\"\ndefault = true\n[profiles.m]\nextends = \"developer-readonly\"\nread = [\"{bin}\"]\ndeny = [\"~/rootonly/sub/secret\"]\n"
    ));
        // After the config, whose writing gives the fixture's tree to its uid: this stays
        // the invoking user's (root's, in CI).
        let closed = fx.home.join("rootonly");
        std::fs::create_dir_all(closed.join("sub")).unwrap();
        std::fs::write(closed.join("sub/secret"), "root's\n").unwrap();
        chmod(&closed, 0o700);
        let out = fx.sh("cat ~/rootonly/sub/secret 2>/dev/null; true");
        let shown = fx.run(&["policy", "show"]);
        chmod(&closed, 0o755);
        out.ok();
        shown.ok();
        if fx.uid() == 0 {
            // Root opens it, so it is masked.
            assert!(!out.stdout.contains("root's"), "{out:#?}");
        } else {
            assert!(!out.stdout.contains("root's"), "{out:#?}");
            assert!(
                shown
                    .stdout
                    .contains("a directory on the way is another user's and closed to you"),
                "{shown:#?}"
            );
        }
    }
);
