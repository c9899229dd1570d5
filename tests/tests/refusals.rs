//! Refusals reach the agent in the text its tools already print: the proxy's 403 carries
//! what was refused, where, why, and the `zone enter` to use, in the status line's
//! reason phrase (which Python, Node and npm print) and in the body; `zone why` never
//! calls allowed what the proxy refuses. Real sandboxes, both uids.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use wardcell_tests::{both, Fixture, Out};

fn config(fx: &Fixture) {
    fx.config(&format!(
        r#"
[zones.agent]
profile = "a"
default = true

[zones.net]
profile = "n"
enter_from = ["agent"]

[zones.hidden]
profile = "n"

[zones.inside]
profile = "i"
enter_from = ["agent"]

[profiles.a]
extends = "readonly"
read = ["{bin}"]
network = {{ allow = ["reserved.test:443", "localhost:9"] }}

[profiles.n]
extends = "readonly"
network = {{ allow = ["pypi.org:443", "reserved.test:443"] }}

[profiles.i]
extends = "readonly"
network = {{ internal = ["reserved.test:443"] }}
"#,
        bin = fx.bin.display()
    ));
}

/// A hosts file where `reserved.test` leads to a documentation address (TEST-NET-3),
/// which a name under `network.allow` never reaches.
fn hosts(fx: &Fixture) -> std::path::PathBuf {
    let root = &wardcell_tests::staged().root;
    let base = fx.dir.file_name().unwrap().to_str().unwrap();
    let path = root.join(format!("{base}.hosts"));
    fs::write(&path, "127.0.0.1 localhost\n203.0.113.7 reserved.test\n").unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    path
}

const PYTHON: &str = r#"
import socket, urllib.request, urllib.error, os
# A request in absolute form for another scheme: refused for its scheme, no zone named.
p = os.environ["HTTP_PROXY"].split("//")[1].rstrip("/").split(":")
s = socket.create_connection((p[0], int(p[1])))
s.sendall(b"GET https://pypi.org/ HTTP/1.1\r\nHost: pypi.org\r\n\r\n")
print("scheme:", s.recv(4096).split(b"\r\n")[0].decode())
for url in ["https://pypi.org/simple/", "http://pypi.org/simple/", "https://example.org/"]:
    try:
        urllib.request.urlopen(url, timeout=20)
        print("fetched", url)
    except urllib.error.HTTPError as e:
        print("http-error", e.code, e.reason)
        print(e.read().decode())
    except urllib.error.URLError as e:
        print("url-error", e.reason)
"#;

both!(a_proxy_refusal_says_why_and_which_zone_to_enter, |fx| {
    config(&fx);
    let out: Out = fx
        .cmd(&["run", "--", "/usr/bin/python3", "-c", PYTHON])
        .output()
        .unwrap()
        .into();
    out.ok();
    // CONNECT: Python prints the status line's reason phrase.
    assert!(
        out.stdout.contains(
            "url-error Tunnel connection failed: 403 Forbidden by wardcell: pypi.org:443 is not allowed in zone agent (not in the allow list); zone net allows it: run the command that needs it with `wardcell zone enter net -- COMMAND`"
        ),
        "{out:#?}"
    );
    // Plain HTTP: the reason phrase and the body; no zone this run may enter allows
    // port 80, and a zone it may not enter (`hidden`) is never named.
    assert!(
        out.stdout.contains(
            "http-error 403 Forbidden by wardcell: pypi.org:80 is not allowed in zone agent (not in the allow list); no zone this sandbox may enter allows it: ask the person running wardcell to allow it (`wardcell run --allow pypi.org:80`, or network.allow in zones.toml)"
        ),
        "{out:#?}"
    );
    assert!(
        out.stdout
            .contains("wardcell: pypi.org:80 is not allowed in zone agent: not in the allow list\nwardcell: no zone this sandbox may enter allows it"),
        "{out:#?}"
    );
    assert!(
        out.stdout
            .contains("Forbidden by wardcell: example.org:443 is not allowed in zone agent"),
        "{out:#?}"
    );
    assert!(!out.stdout.contains("hidden"), "{out:#?}");
    assert!(
        out.stdout.contains("scheme: HTTP/1.1 403 Forbidden by wardcell: pypi.org:443 is not allowed in zone agent (only http:// URLs and CONNECT are proxied)\n"),
        "{out:#?}"
    );
    assert!(!out.stdout.contains("fetched"), "{out:#?}");
});

// A host the rules allow but whose name leads to an address the proxy refuses: `zone
// why` says denied, with the proxy's reason, as the proxy does when asked.
both!(zone_why_agrees_with_the_proxy, |fx| {
    config(&fx);
    let hosts = hosts(&fx);
    let script = "wardcell zone why reserved.test:443; echo rc=$?; \
         /usr/bin/python3 -c 'import urllib.request as u\ntry: u.urlopen(\"https://reserved.test/\", timeout=20)\nexcept Exception as e: print(\"python:\", e)'; \
         wardcell zone why localhost:9; echo rc=$?";
    let out: Out = fx
        .cmd_with_hosts(&hosts, &["run", "--", "/bin/sh", "-c", script])
        .output()
        .unwrap()
        .into();
    out.ok();
    assert!(
        out.stdout
            .contains("denied: reserved.test:443 in zone 'agent'"),
        "{out:#?}"
    );
    assert!(
        out.stdout.contains(
            "because: this sandbox's proxy refuses it: reserved.test resolves to 203.0.113.7"
        ),
        "{out:#?}"
    );
    assert!(out.stdout.contains("rc=1"), "{out:#?}");
    // Only a zone whose network.internal lists it would reach that address: `inside`,
    // not `net`, whose `allow` names it too but whose proxy would refuse it the same way.
    assert!(out.stdout.contains("  allowed in: inside ("), "{out:#?}");
    assert!(
        out.stdout.contains("python: <urlopen error Tunnel connection failed: 403 Forbidden by wardcell: reserved.test:443 is not allowed in zone agent (reserved.test resolves to 203.0.113.7"),
        "{out:#?}"
    );
    assert!(
        out.stdout.contains("); zone inside allows it: run the command that needs it with `wardcell zone enter inside -- COMMAND`>"),
        "{out:#?}"
    );
    assert!(!out.stdout.contains("zone net"), "{out:#?}");
    assert!(
        out.stdout.contains("allowed: localhost:9 in zone 'agent'"),
        "{out:#?}"
    );
    assert!(out.stdout.contains("rc=0"), "{out:#?}");
});
