//! What the kernel would still show a sandbox, closed (issue 19, item 8): the host's
//! key serials in /proc/keys and /proc/key-users, MPTCP sockets (which Landlock's TCP
//! rules do not cover), and, run as root, the root-only secrets under /etc. As the
//! invoking user and as an unprivileged uid.

use wardcell_tests::{both, is_root, As};

// Inside: /proc/keys and /proc/key-users give nothing (the host's own list the key
// serials of the caller's keyrings); the rest of /proc is the sandbox's own and readable.
both!(proc_keys_and_key_users_show_nothing, |fx| {
    fx.test_config("");
    let out = fx.sh("for f in /proc/keys /proc/key-users; do \
           n=$(cat $f 2>/dev/null | wc -l); echo \"$f lines=$n\"; done; \
         head -c 5 /proc/self/status");
    out.ok();
    assert!(out.stdout.contains("/proc/keys lines=0"), "{out:#?}");
    assert!(out.stdout.contains("/proc/key-users lines=0"), "{out:#?}");
    assert!(out.stdout.contains("Name:"), "{out:#?}");
    // The host's do show something here, so the test can fail.
    let host = std::fs::read_to_string("/proc/key-users").unwrap_or_default();
    assert!(!host.is_empty(), "this host's /proc/key-users is empty");
});

// An MPTCP socket cannot be made (EAFNOSUPPORT); plain TCP and UDP still can.
both!(mptcp_sockets_are_refused, |fx| {
    fx.test_config("");
    let script = [
        "import socket, errno",
        "for fam in (socket.AF_INET, socket.AF_INET6):",
        "    try:",
        "        socket.socket(fam, socket.SOCK_STREAM, 262)",
        "        print('mptcp made')",
        "    except OSError as e:",
        "        print('mptcp errno=%s' % errno.errorcode[e.errno])",
        "socket.socket(socket.AF_INET, socket.SOCK_STREAM, 0).close()",
        "socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP).close()",
        "socket.socket(socket.AF_INET6, socket.SOCK_DGRAM, 0).close()",
        "print('tcp ok')",
    ]
    .join("\n");
    let out = fx.run(&["run", "--", "python3", "-c", &script]);
    out.ok();
    assert_eq!(
        out.stdout.matches("mptcp errno=EAFNOSUPPORT").count(),
        2,
        "{out:#?}"
    );
    assert!(!out.stdout.contains("mptcp made"), "{out:#?}");
    assert!(out.stdout.contains("tcp ok"), "{out:#?}");
});

// The built-in profiles mask the root-only secrets under /etc that the caller can read:
// run as root, /etc/shadow and /etc/ssl/private cannot be read inside though root reads
// them outside; /etc/passwd still can. As another user they are out of reach anyway, and
// `policy show` says so instead of masking them.
both!(root_only_files_under_etc_stay_out_of_reach, |fx| {
    fx.test_config("");
    let out = fx.sh("cat /etc/shadow >/dev/null 2>&1; echo \"shadow=$?\"; \
         ls /etc/ssl/private >/dev/null 2>&1; echo \"private=$?\"; \
         grep -c '^root:' /etc/passwd");
    out.ok();
    assert!(out.stdout.contains("shadow=1"), "{out:#?}");
    assert!(out.stdout.contains("\n1\n"), "{out:#?}");
    if std::path::Path::new("/etc/ssl/private").exists() {
        assert!(
            out.stdout.contains("private=2") || out.stdout.contains("private=1"),
            "{out:#?}"
        );
    }
    let shown = fx.run(&["policy", "show"]);
    shown.ok();
    if is_root() && fx.who == As::Invoker {
        assert!(std::fs::read_to_string("/etc/shadow").is_ok());
        assert!(shown.stdout.contains("      /etc/shadow\n"), "{shown:#?}");
    } else {
        assert!(
            shown
                .stdout
                .contains("/etc/shadow: you can neither read nor write it"),
            "{shown:#?}"
        );
    }
});
