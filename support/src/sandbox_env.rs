//! What a sandbox with network is given, none of which the broker reads: the variables
//! wardcell sets (the proxy's, the CA bundle's) and their values, prepared by the plan
//! writer (`wardcell/src/prepare.rs`; the broker only removes a caller's and adds these);
//! the proxy's port and the CA bundle's path inside; the bound on egress ports; a
//! credential's placeholder value and the methods it is attached for.

/// Where the CA bundle is, inside a sandbox whose proxy intercepts TLS.
pub const SANDBOX_CA_BUNDLE: &str = "/dev/wardcell-ca.pem";

/// The port the zone's proxy listens on, on the sandbox's own loopback.
pub const SANDBOX_PROXY_PORT: u16 = 3128;

/// The most distinct ports an allow list may name: one listener each travels beside the
/// proxy's listener and the DNS socket, in one SCM_RIGHTS message of at most 12.
pub const MAX_EGRESS_PORTS: usize = 10;

/// What a sandbox finds in a credential's `placeholder` variable: fixed, public, and
/// never a secret. The proxy sets the credential's header on the requests it attaches
/// to, so the placeholder a client puts there is replaced; anywhere else it goes as sent.
pub const PLACEHOLDER_VALUE: &str = "wardcell-placeholder-not-a-secret";

/// Methods a credential is attached for when it names none.
pub const DEFAULT_METHODS: &[&str] = &["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"];

/// Methods no credential is ever attached for.
pub const NEVER_METHODS: &[&str] = &["TRACE", "TRACK", "CONNECT"];

/// The variables that point a command at its proxy.
pub const PROXY_VARS: &[&str] = &["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"];
pub const NO_PROXY_VARS: &[&str] = &["NO_PROXY", "no_proxy"];
/// The variables that name a CA bundle, for the tools that read each. In a zone with
/// network whose sandbox has a bundle, every one names it.
pub const CA_VARS: &[&str] = &[
    "SSL_CERT_FILE",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "PIP_CERT",
    "NIX_SSL_CERT_FILE",
    "CARGO_HTTP_CAINFO",
    "npm_config_cafile",
    "NPM_CONFIG_CAFILE",
];
/// Where distributions keep their CA bundle, in the order they are tried.
pub const SYSTEM_ROOTS: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// The loopback names NO_PROXY may hold, as NO_PROXY writes them.
pub const LOOPBACK_NAMES: &[&str] = &["localhost", "127.0.0.1", "::1"];

/// NO_PROXY for a sandbox whose proxy has the allow list `allow`: the loopback names
/// that go straight to the sandbox's own loopback, which is every one of
/// [`LOOPBACK_NAMES`] the list does not name. One the list names means the host's
/// loopback, reached only through the proxy, so it is left out and clients send it
/// there. Entries are compared as the proxy's allow list compares hosts: names in any
/// case, IPv6 in any spelling (`[0:0::1]` is `::1`); `localhost:N` names all three (the
/// proxy admits `127.0.0.1:N` and `[::1]:N` for it), `127.0.0.1:N` only itself.
pub fn no_proxy(allow: &[String]) -> String {
    use std::net::IpAddr;
    let canonical = |entry: &str| -> Option<String> {
        let (host, _port) = entry.rsplit_once(':')?;
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        Some(match host.parse::<IpAddr>() {
            Ok(ip) => ip.to_string(),
            Err(_) => host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase(),
        })
    };
    let named: Vec<String> = allow.iter().filter_map(|e| canonical(e)).collect();
    // `localhost:P` means 127.0.0.1:P and [::1]:P too: all three are the host's.
    let localhost = named.iter().any(|h| h == "localhost");
    LOOPBACK_NAMES
        .iter()
        .filter(|n| !localhost && !named.iter().any(|h| h == *n))
        .copied()
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn np(allow: &[&str]) -> String {
        no_proxy(&allow.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn no_proxy_leaves_out_the_loopback_names_the_allow_list_names() {
        assert_eq!(np(&[]), "localhost,127.0.0.1,::1");
        assert_eq!(np(&["git.example.com:443"]), "localhost,127.0.0.1,::1");
        assert_eq!(np(&["localhost:8443"]), "");
        assert_eq!(np(&["127.0.0.1:80", "[::1]:80"]), "localhost");
        // As the allow list compares them: case, a trailing dot, IPv6 spellings.
        assert_eq!(np(&["LocalHost:8443"]), "");
        assert_eq!(np(&["localhost.:8443"]), "");
        assert_eq!(np(&["[0:0:0:0:0:0:0:1]:80"]), "localhost,127.0.0.1");
        assert_eq!(np(&["[::0001]:80"]), "localhost,127.0.0.1");
        // Not the same hosts to the allow list either.
        assert_eq!(
            np(&[
                "*.localhost:80",
                "a.localhost:80",
                "127.0.0.2:80",
                "[::ffff:127.0.0.1]:80"
            ]),
            "localhost,127.0.0.1,::1"
        );
    }
}
