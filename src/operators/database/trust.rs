//! The CAs a Database's clients trust under `spec.tls.issuerRef`: the
//! ConfigMap `<name>-ca` (`ca.crt`), which holds the CA of cert-manager's
//! newest issue and the ones before it, so that a renewal that changes the
//! CA (a SelfSigned issuer on every renewal, a CA issuer whose own
//! certificate is renewed with a new key, a change of issuer) never leaves
//! a client unable to verify an instance that still serves the certificate
//! of the CA before.
//!
//! The newest CA comes from the Ready `CertificateRequest` of the
//! Database's Certificate's current revision (owned by that Certificate,
//! its `status.ca`, which cert-manager also writes to the Secret's
//! `ca.crt`; a CertificateRequest holds no private key, so the hook never
//! reads the Secret). cert-manager keeps only the newest request by
//! default, so the earlier CAs come from the observed ConfigMap itself: it
//! only grows, up to [`KEPT`] certificates, newest first. A certificate
//! counts only if its PEM body decodes to a DER sequence: one that does
//! not would make OpenSSL refuse the whole file.
//!
//! Until the ConfigMap is observed, clients trust the Secret's `ca.crt`
//! ([`observed_bundle`]), so nothing waits for it. After `issuerRef` is
//! removed it is kept as it is while an instance may still mount it.
//!
//! Who reads it: `tls.sh` adds it to the instances' trust (beside the
//! Secret's `ca.crt`) at each pod's start, every Job that connects mounts
//! it as `PGSSLROOTCERT`, and the connection ConfigMap names it for the
//! applications. A renewed certificate rolls the instances only once the
//! observed ConfigMap holds its CA ([`holds_newest`]), so a pod the roll
//! starts trusts both the CA of the instances not yet rolled and the new
//! one.

use super::names::{ca_config_map_name, certificate_name};
use std::collections::BTreeMap;

use base64::Engine;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

use super::certificate::{self, issuer};
use super::children::meta;
use super::observed::Observed;
use super::spec::Database;

/// The key of the CA bundle in the ConfigMap, as in a TLS Secret.
pub(super) const KEY: &str = "ca.crt";

/// At most this many certificates are kept: the newest issue's CA and
/// those before it (a CA chain counts each certificate), enough for a CA
/// changed twice before a roll ends.
pub(super) const KEPT: usize = 8;

/// A certificate whose PEM body is longer than this is not read (a CA
/// certificate is a few KiB).
const MAX_CERTIFICATE_BYTES: usize = 16 * 1024;

/// Text longer than this is not read: [`KEPT`] certificates fit.
const MAX_TEXT_BYTES: usize = KEPT * (MAX_CERTIFICATE_BYTES + 64);

/// The annotation cert-manager puts on each CertificateRequest: the
/// Certificate it is for.
const CERTIFICATE_NAME: &str = "cert-manager.io/certificate-name";

/// The annotation cert-manager puts on each CertificateRequest: the
/// Certificate's revision it issues.
const REVISION: &str = "cert-manager.io/certificate-revision";

/// cert-manager's `CertificateRequest` (cert-manager.io/v1), only what the
/// hook reads: observed as a related object, never written.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct CertificateRequest {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// What the issuer answered.
    #[serde(default)]
    pub status: Option<CertificateRequestStatus>,
}

/// What the issuer answered.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct CertificateRequestStatus {
    /// The CA that signed the certificate, PEM (base64 on the wire, as
    /// any `[]byte` field; absent when the issuer does not say).
    #[serde(default)]
    pub ca: Option<k8s_openapi::ByteString>,
    /// `Ready`, `Approved`, `Denied`, `InvalidRequest`.
    #[serde(default)]
    pub conditions: Vec<RequestCondition>,
}

/// One condition of a CertificateRequest.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct RequestCondition {
    /// The condition's type.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
}

crate::hook::namespaced_resource!(
    CertificateRequest,
    "cert-manager.io",
    "v1",
    "CertificateRequest",
    "certificaterequests"
);

/// The PEM certificates of `text`, each normalized to its BEGIN and END
/// lines around its base64 lines; anything else, and a body that does not
/// decode to a DER sequence, is left out.
pub(super) fn certificates(text: &str) -> Vec<String> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    if text.len() > MAX_TEXT_BYTES {
        return Vec::new();
    }
    let der = |lines: &[&str]| {
        let body = lines.concat();
        body.len() <= MAX_CERTIFICATE_BYTES
            && base64::engine::general_purpose::STANDARD
                .decode(body)
                .is_ok_and(|der| der.first() == Some(&0x30))
    };
    let mut out = Vec::new();
    let mut body: Option<Vec<&str>> = None;
    for line in text.lines().map(str::trim) {
        match (&mut body, line) {
            (None, BEGIN) => body = Some(Vec::new()),
            (Some(lines), END) => {
                if der(lines) {
                    out.push(format!("{BEGIN}\n{}\n{END}\n", lines.join("\n")));
                }
                body = None;
            }
            (Some(lines), l)
                if !l.is_empty()
                    && l.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=')) =>
            {
                lines.push(l);
            }
            // A line that is not base64 spoils the certificate.
            (Some(_), _) => body = None,
            (None, _) => {}
        }
    }
    out
}

/// The CA of cert-manager's current issue: the Ready CertificateRequest
/// of the observed Certificate's current revision that this Certificate
/// owns (its controller), as certificates, at most [`KEPT`]. `None` when
/// that request is not observed (yet): the informers of Certificates and
/// requests are separate, and a request of another revision or owner says
/// nothing of the issue the instances would roll to.
fn newest(db: &Database, seen: &Observed) -> Option<Vec<String>> {
    let certificate = certificate::observed(db, seen)?;
    let uid = certificate.metadata.uid.as_deref()?;
    let revision = certificate.status.as_ref()?.revision?.to_string();
    let request = seen.certificate_requests.iter().find(|r| {
        let annotations = r.metadata.annotations.as_ref();
        let owned = r
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.controller == Some(true) && o.kind == "Certificate" && o.uid == uid);
        owned
            && annotations.and_then(|a| a.get(CERTIFICATE_NAME)) == Some(&certificate_name(db))
            && annotations.and_then(|a| a.get(REVISION)) == Some(&revision)
            && r.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            })
    })?;
    let ca = request.status.as_ref()?.ca.as_ref();
    let mut certs = ca
        .map(|ca| certificates(&String::from_utf8_lossy(&ca.0)))
        .unwrap_or_default();
    certs.truncate(KEPT);
    Some(certs)
}

/// The bundle's certificates: the current issue's CA first, then those
/// the observed ConfigMap held, each once, at most [`KEPT`].
fn bundle(db: &Database, seen: &Observed) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for cert in newest(db, seen)
        .unwrap_or_default()
        .into_iter()
        .chain(seen.ca_bundle.iter().cloned())
    {
        if out.len() < KEPT && !out.contains(&cert) {
            out.push(cert);
        }
    }
    out
}

/// The ConfigMap `<name>-ca` under `spec.tls.issuerRef`, once a CA is
/// known; after `issuerRef` is removed, the observed one as it is while an
/// instance may still mount it (the template does, or its rollout is not
/// done).
pub(super) fn config_map(db: &Database, seen: &Observed) -> Option<ConfigMap> {
    let certs = if issuer(db).is_some() {
        bundle(db, seen)
    } else {
        let wanted = ca_config_map_name(db);
        if !seen.may_mount(|v| v.config_map.as_ref().map(|c| &c.name) == Some(&wanted)) {
            return None;
        }
        seen.ca_bundle.clone()
    };
    if certs.is_empty() {
        return None;
    }
    Some(ConfigMap {
        metadata: meta(db, ca_config_map_name(db)),
        data: Some(BTreeMap::from([(KEY.to_string(), certs.concat())])),
        ..ConfigMap::default()
    })
}

/// Whether the observed ConfigMap holds every certificate of the CA of
/// cert-manager's current issue: false while that issue's request is not
/// observed; true when the issuer names no CA (nothing to wait for).
pub(super) fn holds_newest(db: &Database, seen: &Observed) -> bool {
    newest(db, seen).is_some_and(|certs| certs.iter().all(|c| seen.ca_bundle.contains(c)))
}

/// Whether the observed ConfigMap holds a CA: clients are pointed at it
/// only then (before, at the Secret's `ca.crt`), so no pod waits for it.
pub(super) fn observed_bundle(seen: &Observed) -> bool {
    !seen.ca_bundle.is_empty()
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::certificate::Certificate;
    use super::super::tls::tests::db;
    use super::*;
    use serde_json::json;

    /// A certificate whose body decodes to a DER sequence, told apart by `n`.
    pub(in crate::operators::database) fn pem(n: u8) -> String {
        let body = base64::engine::general_purpose::STANDARD.encode([0x30, n]);
        format!("-----BEGIN CERTIFICATE-----\n{body}\n-----END CERTIFICATE-----\n")
    }

    /// A request of the Certificate `orders-tls` (uid `cert-uid`), owned by it.
    pub(in crate::operators::database) fn request(
        revision: i64,
        ready: bool,
        ca: &str,
    ) -> CertificateRequest {
        serde_json::from_value(json!({
            "metadata": {"name": format!("orders-tls-{revision}"), "annotations": {
                "cert-manager.io/certificate-name": "orders-tls",
                "cert-manager.io/certificate-revision": revision.to_string()},
                "ownerReferences": [{"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
                    "name": "orders-tls", "uid": "cert-uid", "controller": true}]},
            "status": {"ca": base64::engine::general_purpose::STANDARD.encode(ca), "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
        }))
        .unwrap()
    }

    /// The Certificate `orders-tls` at `revision`.
    pub(in crate::operators::database) fn certificate(revision: i64) -> Certificate {
        serde_json::from_value(json!({"metadata": {"name": "orders-tls", "uid": "cert-uid"}, "status": {"revision": revision}})).unwrap()
    }

    fn issued() -> Database {
        db(json!({"issuerRef": {"name": "ca"}}))
    }

    fn seen(revision: i64, requests: Vec<CertificateRequest>, held: Option<&str>) -> Observed {
        Observed {
            certificates: Some(vec![certificate(revision)]),
            certificate_requests: requests,
            ca_bundle: held.map(certificates).unwrap_or_default(),
            ..Observed::default()
        }
    }

    fn bundle_of(seen: &Observed) -> String {
        config_map(&issued(), seen).unwrap().data.unwrap()[KEY].clone()
    }

    #[test]
    fn the_current_issue_comes_first_and_earlier_cas_stay() {
        let (a, b) = (pem(1), pem(2));
        let requests = vec![
            request(1, true, &a),
            request(2, true, &b),
            request(3, false, &pem(3)),
        ];
        let seen = seen(2, requests, Some(&a));
        assert_eq!(bundle_of(&seen), format!("{b}{a}"));
        assert_eq!(
            config_map(&issued(), &seen)
                .unwrap()
                .metadata
                .name
                .as_deref(),
            Some("orders-ca")
        );
        assert!(!holds_newest(&issued(), &seen), "b is not held yet");
        assert!(holds_newest(
            &issued(),
            &self::seen(2, vec![request(2, true, &b)], Some(&format!("{b}{a}")))
        ));
    }

    #[test]
    fn cert_manager_keeps_one_request_the_config_map_keeps_the_rest() {
        let (a, b, c) = (pem(1), pem(2), pem(3));
        let seen = seen(3, vec![request(3, true, &c)], Some(&format!("{b}{a}")));
        assert_eq!(bundle_of(&seen), format!("{c}{b}{a}"));
    }

    #[test]
    fn a_request_of_another_revision_or_owner_says_nothing_of_the_issue() {
        let (a, b) = (pem(1), pem(2));
        // The Certificate says revision 2; only revision 1's request is
        // observed yet (separate informers): no roll before it is.
        let seen = seen(2, vec![request(1, true, &a)], Some(&a));
        assert!(!holds_newest(&issued(), &seen));
        assert_eq!(bundle_of(&seen), a);
        // Someone's request with the labels and annotations, not owned by
        // the Certificate: never trusted.
        let mut forged = request(2, true, &b);
        forged.metadata.owner_references = None;
        let seen = self::seen(2, vec![forged], Some(&a));
        assert_eq!(bundle_of(&seen), a);
        assert!(!holds_newest(&issued(), &seen));
    }

    #[test]
    fn only_certificates_are_kept_and_at_most_kept() {
        let many: String = (10..30).map(pem).collect();
        let not_der = "-----BEGIN CERTIFICATE-----\nQUFB\n-----END CERTIFICATE-----\n";
        let hostile = format!(
            "{}$(id)\n{not_der}-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n",
            pem(1)
        );
        let seen = seen(1, vec![request(1, true, &hostile)], Some(&many));
        let text = bundle_of(&seen);
        assert_eq!(text.matches("BEGIN CERTIFICATE").count(), KEPT);
        assert!(text.starts_with(&pem(1)));
        assert!(!text.contains("$(id)") && !text.contains("not base64") && !text.contains("QUFB"));
        // A CA of more than KEPT certificates: its first KEPT, and held.
        let long: String = (40..50).map(pem).collect();
        let seen = self::seen(1, vec![request(1, true, &long)], None);
        let text = bundle_of(&seen);
        let seen = self::seen(1, vec![request(1, true, &long)], Some(&text));
        assert!(holds_newest(&issued(), &seen));
    }

    #[test]
    fn nothing_before_a_ca_is_known_nor_without_an_issuer_once_unmounted() {
        assert_eq!(config_map(&issued(), &seen(1, vec![], None)), None);
        assert!(!holds_newest(&issued(), &seen(1, vec![], None)));
        // An issuer that names no CA: nothing to wait for.
        assert!(holds_newest(
            &issued(),
            &seen(1, vec![request(1, true, "")], None)
        ));
        let other = db(json!({"secretName": "mine"}));
        let seen = seen(1, vec![request(1, true, &pem(1))], Some(&pem(1)));
        assert_eq!(config_map(&other, &seen), None, "no template mounts it");
    }
}
