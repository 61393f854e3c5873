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
//! only grows, up to [`kinds::KEPT`] certificates, newest first. A certificate
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

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;

use super::certificate;

use super::kinds::{self};
use super::names::{ca_config_map_name, certificate_name};
use super::objects::{TLS_CONTAINER, meta};
use super::observed::Observed;
use super::spec::{Database, issuer};

/// The annotation cert-manager puts on each CertificateRequest: the
/// Certificate it is for.
const CERTIFICATE_NAME: &str = "cert-manager.io/certificate-name";

/// The annotation cert-manager puts on each CertificateRequest: the
/// Certificate's revision it issues.
const REVISION: &str = "cert-manager.io/certificate-revision";

/// The CA of cert-manager's current issue: the Ready CertificateRequest
/// of the observed Certificate's current revision that this Certificate
/// owns (its controller), as certificates, at most [`kinds::KEPT`]. `None` when
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
        .map(|ca| kinds::certificates(&String::from_utf8_lossy(&ca.0)))
        .unwrap_or_default();
    certs.truncate(kinds::KEPT);
    Some(certs)
}

/// The bundle's certificates: the current issue's CA first, then those
/// the observed ConfigMap held, each once, at most [`kinds::KEPT`].
fn bundle(db: &Database, seen: &Observed) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for cert in newest(db, seen)
        .unwrap_or_default()
        .into_iter()
        .chain(seen.ca_bundle.iter().cloned())
    {
        if out.len() < kinds::KEPT && !out.contains(&cert) {
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
        data: Some(BTreeMap::from([(kinds::KEY.to_string(), certs.concat())])),
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

/// The issue of the Certificate the instances must serve, once an
/// instance runs an older one: its `notBefore`, when some instance's `tls`
/// init container (which copies the Secret, at each start) finished before
/// it. An instance that started after the issue serves it: a new Database's
/// instances wait for the Secret, so they do not roll; nor does a Database
/// made again over a Secret that is still valid, or a Certificate made
/// again (its revision count starts over, its notBefore does not).
///
/// Never earlier than the running template's: a Certificate not observed
/// for a moment is no new certificate to restart the instances for. Nor
/// before the observed CA bundle holds the new issue's CA: an instance the
/// roll starts must trust the instances it has not reached yet, and they
/// it (`trust`).
pub(super) fn renewal(db: &Database, seen: &Observed) -> Option<String> {
    issuer(db)?;
    let issued = certificate::observed(db, seen)
        .and_then(|c| c.status.as_ref()?.not_before.as_ref())
        .map(|t| t.0)
        .filter(|_| holds_newest(db, seen));
    let stale = issued.filter(|at| {
        seen.pods
            .iter()
            .filter_map(|p| p.init_finished_at(TLS_CONTAINER))
            .any(|copied| copied < *at)
    });
    let running = seen
        .statefulset
        .as_ref()
        .and_then(|s| {
            s.spec
                .as_ref()?
                .template
                .metadata
                .as_ref()?
                .annotations
                .as_ref()
        })
        .and_then(|a| {
            a.get(certificate::ISSUE_ANNOTATION)?
                .parse::<k8s_openapi::jiff::Timestamp>()
                .ok()
        });
    stale.max(running).map(|t| t.to_string())
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::kinds::{Certificate, CertificateRequest, KEY, certificates};
    use super::super::tls::tests::db;
    use super::*;
    use base64::Engine;
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
        assert_eq!(text.matches("BEGIN CERTIFICATE").count(), kinds::KEPT);
        assert!(text.starts_with(&pem(1)));
        assert!(!text.contains("$(id)") && !text.contains("not base64") && !text.contains("QUFB"));
        // A CA of more than kinds::KEPT certificates: its first kinds::KEPT, and held.
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

    #[test]
    fn a_renewal_waits_until_the_ca_bundle_holds_its_ca() {
        let db = db(json!({"issuerRef": {"name": "ca"}}));
        let (old, new) = (pem(1), pem(2));
        let seen = |held: &str| {
            Observed {
            certificates: Some(vec![serde_json::from_value::<Certificate>(json!({"metadata": {"name": "orders-tls", "uid": "cert-uid"}, "status": {"notBefore": "2026-03-01T00:00:00Z", "revision": 2}})).unwrap()]),
            certificate_requests: vec![request(2, true, &new)],
            ca_bundle: certificates(held),
            pods: vec![serde_json::from_value(json!({"metadata": {"name": "orders-0"}, "status": {"initContainerStatuses": [{"name": "tls", "state": {"terminated": {"exitCode": 0, "finishedAt": "2026-01-01T00:01:00Z"}}}]}})).unwrap()],
            statefulset: Some(crate::fixtures::statefulset("orders").typed()),
            ..Observed::default()
        }
        };
        // A new CA, not in the observed bundle yet: no roll.
        assert_eq!(renewal(&db, &seen(&old)), None);
        // Held: the instances roll onto the issue.
        assert_eq!(
            renewal(&db, &seen(&format!("{new}{old}"))).as_deref(),
            Some("2026-03-01T00:00:00Z")
        );
    }

    #[test]
    fn a_renewal_rolls_the_instances_once_and_never_back() {
        let db = db(json!({"issuerRef": {"name": "ca"}}));
        // The Certificate issued at `issued`; instances whose tls init
        // container finished at `copied`; the running template's annotation.
        let seen = |issued: Option<&str>, copied: &[&str], running: Option<&str>| {
            let certs = issued.map(|at| {
                vec![serde_json::from_value::<Certificate>(json!({"metadata": {"name": "orders-tls", "uid": "cert-uid"}, "status": {"notBefore": at, "revision": 1}})).unwrap()]
            });
            // The issue's CA is in the bundle: nothing holds the roll.
            let ca = pem(1);
            let pods = copied
                .iter()
                .map(|at| {
                    serde_json::from_value(json!({"metadata": {"name": "orders-0"}, "status": {"initContainerStatuses": [{"name": "tls", "state": {"terminated": {"exitCode": 0, "finishedAt": at}}}]}})).unwrap()
                })
                .collect();
            let annotations =
                running.map_or(json!({}), |r| json!({certificate::ISSUE_ANNOTATION: r}));
            Observed {
                certificates: Some(certs.unwrap_or_default()),
                certificate_requests: vec![request(1, true, &ca)],
                ca_bundle: certificates(&ca),
                pods,
                statefulset: Some(
                    crate::fixtures::statefulset("orders")
                        .template_annotations(annotations)
                        .typed(),
                ),
                ..Observed::default()
            }
        };
        let (t1, t2, t3) = (
            "2026-01-01T00:00:00Z",
            "2026-03-01T00:00:00Z",
            "2026-05-01T00:00:00Z",
        );
        let after = |t: &str| t.replace("00:00:00", "00:01:00");
        // The first issue: the instances waited for it, and copied it.
        assert_eq!(renewal(&db, &seen(Some(t1), &[&after(t1)], None)), None);
        // No instance has run yet, or none says when it copied.
        assert_eq!(renewal(&db, &seen(Some(t1), &[], None)), None);
        // Issued again after an instance copied the first: roll onto it.
        assert_eq!(
            renewal(&db, &seen(Some(t2), &[&after(t1), &after(t2)], None)).as_deref(),
            Some(t2)
        );
        // Rolled: stays, and the next issue rolls again.
        assert_eq!(
            renewal(&db, &seen(Some(t2), &[&after(t2)], Some(t2))).as_deref(),
            Some(t2)
        );
        assert_eq!(
            renewal(&db, &seen(Some(t3), &[&after(t2)], Some(t2))).as_deref(),
            Some(t3)
        );
        // The Certificate not observed, or made again over the same Secret
        // (an older notBefore): the running template's stays.
        assert_eq!(
            renewal(&db, &seen(None, &[&after(t2)], Some(t2))).as_deref(),
            Some(t2)
        );
        assert_eq!(
            renewal(&db, &seen(Some(t1), &[&after(t2)], Some(t2))).as_deref(),
            Some(t2)
        );
        // A Database made again over a Secret still valid: its instances
        // copied that issue; no roll until cert-manager issues again.
        assert_eq!(renewal(&db, &seen(Some(t1), &[&after(t2)], None)), None);
    }
}
