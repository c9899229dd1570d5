//! The per-run CA: minted at start, its key only in this process's memory, and
//! name-constrained to the hosts the zone's credentials name, so that even a leaked key
//! could not vouch for any other site. Leaf certificates are issued on first use for a
//! host and cached for the life of the run.

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, CidrSubnet, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, GeneralSubtree, IsCa, KeyPair, KeyUsagePurpose, NameConstraints,
    SanType,
};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use crate::allow::Host;
use crate::error::Error;

/// Certificates are valid from a day before start (clock skew) ...
const BACKDATE: Duration = Duration::from_secs(24 * 3600);
/// ... until 90 days after: far longer than a run, far shorter than a leak would want.
const LIFETIME: Duration = Duration::from_secs(90 * 24 * 3600);

pub struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
    pem: String,
    /// Seconds since the epoch.
    not_before: u64,
    not_after: u64,
    provider: Arc<CryptoProvider>,
    leaves: Mutex<HashMap<Host, Arc<ServerConfig>>>,
}

/// A time in rcgen's terms, `secs` seconds after the epoch (a macro, so that the
/// `time` crate's type need not be named here).
macro_rules! epoch_plus {
    ($secs:expr) => {
        rcgen::date_time_ymd(1970, 1, 1) + Duration::from_secs($secs)
    };
}

impl Ca {
    /// Mint the CA for a run; it may only vouch for `hosts`.
    pub fn mint(
        run_id: &str,
        zone: &str,
        hosts: &[Host],
        provider: Arc<CryptoProvider>,
    ) -> Result<Ca, Error> {
        let err = |e: rcgen::Error| Error::Ca(e.to_string());
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_err(|_| Error::Ca("the clock is before 1970".into()))?;
        let not_before = now.saturating_sub(BACKDATE).as_secs();
        let not_after = (now + LIFETIME).as_secs();

        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, "wardcell");
        dn.push(
            DnType::CommonName,
            format!("wardcell per-run CA, zone {zone}, run {run_id}"),
        );
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.not_before = epoch_plus!(not_before);
        params.not_after = epoch_plus!(not_after);
        params.name_constraints = Some(NameConstraints {
            permitted_subtrees: hosts.iter().map(subtree).collect(),
            excluded_subtrees: vec![],
        });
        let key = KeyPair::generate().map_err(err)?;
        let cert = params.self_signed(&key).map_err(err)?;
        let pem = cert.pem();
        Ok(Ca {
            cert,
            key,
            pem,
            not_before,
            not_after,
            provider,
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// The CA certificate, for the sandbox's trust bundle.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// A TLS server configuration presenting a leaf for `host` (issued once, then cached).
    pub fn server_config(&self, host: &Host) -> Result<Arc<ServerConfig>, String> {
        let mut leaves = self.leaves.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(cfg) = leaves.get(host) {
            return Ok(cfg.clone());
        }
        let cfg = Arc::new(self.issue(host)?);
        leaves.insert(host.clone(), cfg.clone());
        Ok(cfg)
    }

    fn issue(&self, host: &Host) -> Result<ServerConfig, String> {
        let err = |e: rcgen::Error| format!("issuing a certificate for {host}: {e}");
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, host.to_string());
        params.distinguished_name = dn;
        params.subject_alt_names = vec![match host {
            Host::Name(n) => SanType::DnsName(n.clone().try_into().map_err(err)?),
            Host::Ip(ip) => SanType::IpAddress(*ip),
        }];
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        params.not_before = epoch_plus!(self.not_before);
        params.not_after = epoch_plus!(self.not_after);
        let key = KeyPair::generate().map_err(err)?;
        let leaf = params.signed_by(&key, &self.cert, &self.key).map_err(err)?;
        let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let chain: Vec<CertificateDer<'static>> = vec![leaf.der().clone()];
        let mut cfg = ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(chain, key_der)
            .map_err(|e| e.to_string())?;
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(cfg)
    }
}

fn subtree(host: &Host) -> GeneralSubtree {
    match host {
        Host::Name(n) => GeneralSubtree::DnsName(n.clone()),
        Host::Ip(IpAddr::V4(ip)) => {
            GeneralSubtree::IpAddress(CidrSubnet::V4(ip.octets(), [0xff; 4]))
        }
        Host::Ip(IpAddr::V6(ip)) => {
            GeneralSubtree::IpAddress(CidrSubnet::V6(ip.octets(), [0xff; 16]))
        }
    }
}
/// What interception needs, made before the proxy confines itself.
pub struct Interceptor {
    pub ca: Ca,
    pub upstream: Arc<ClientConfig>,
}

/// The client configuration for upstream servers: the certificates in `pem`, which
/// `wardcell run` read when the run started (the spec's `roots`; never a file read here,
/// where a sandbox of the run may have written since).
pub fn upstream_config(
    provider: Arc<CryptoProvider>,
    pem: &[u8],
) -> Result<Arc<ClientConfig>, Error> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let mut roots = RootCertStore::empty();
    let certs = CertificateDer::pem_slice_iter(pem).filter_map(Result::ok);
    let (added, _ignored) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(Error::Roots("none found".into()));
    }
    let mut cfg = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Roots(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}
