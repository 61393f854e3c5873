//! The instances' certificate from cert-manager (`spec.tls.issuerRef`): a
//! `Certificate` child whose Secret the instances serve, exactly as they
//! serve a Secret named by `spec.tls.secretName`.
//!
//! cert-manager's Certificate is a child type only where the chart says
//! cert-manager is installed (`operators.database.certManager`):
//! Metacontroller watches every child type of a controller, and a type
//! whose CRD is missing stops the whole Database controller. So the group
//! may be absent from a request; a Database that asks for an issuer then is
//! refused, naming the chart value, and any other goes on without it.

use std::collections::BTreeMap;

use super::kinds::{Certificate, CertificateSpec};
use super::names::{certificate_name, headless_name, read_only_name, service_fqdn, service_host};
use super::objects::meta;
use super::observed::Observed;
use super::spec::{Database, issuer, name, namespace, shows_condition};
use crate::hook::SyncRequest;
use crate::hook::conditions::Observation;
use crate::operator::{HookError, InvalidSpec};

/// The chart value (under `operators.database`) that adds the Certificate
/// child type.
pub(super) const CHART_VALUE: &str = "certManager";

/// The instances' template annotation that names the certificate's issue
/// they must serve (its `notBefore`).
pub(super) const ISSUE_ANNOTATION: &str = "opshooks.io/certificate-not-before";

/// The observed Certificate of this Database, if any.
pub(super) fn observed<'a>(db: &Database, seen: &'a Observed) -> Option<&'a Certificate> {
    let wanted = certificate_name(db);
    seen.certificates
        .iter()
        .flatten()
        .find(|c| c.metadata.name.as_deref() == Some(wanted.as_str()))
}

/// The Secret the instances' certificate comes from, when there is one:
/// `spec.tls.secretName`, or the Certificate's under `spec.tls.issuerRef`.
pub(super) fn secret(db: &Database) -> Option<String> {
    let tls = db.spec.tls.as_ref()?;
    tls.secret_name
        .clone()
        .or_else(|| tls.issuer_ref.as_ref().map(|_| certificate_name(db)))
}

/// Every name a client reaches an instance by: the read-write and
/// read-only Services as a client in the namespace, in another namespace
/// and fully qualified writes them (the connection ConfigMap publishes
/// the last), and each instance under the headless Service (the promote
/// and restore Jobs) as one wildcard, so an added instance is named
/// without a new certificate.
pub(super) fn dns_names(db: &Database) -> Vec<String> {
    let ns = namespace(db);
    let mut names = Vec::new();
    for service in [name(db).to_string(), read_only_name(db)] {
        names.push(service.clone());
        names.push(format!("{service}.{ns}"));
        names.push(service_host(db, &service));
        names.push(service_fqdn(db, &service));
    }
    let headless = headless_name(db);
    names.push(format!("*.{}", service_host(db, &headless)));
    names.push(format!("*.{}", service_fqdn(db, &headless)));
    names
}

/// The Certificate child under `spec.tls.issuerRef`. Metacontroller's
/// selector labels are on the Certificate only, never on its Secret
/// (cert-manager's, not a child: were it labelled, Metacontroller would
/// take it for one the answer leaves out and delete it).
pub(super) fn certificate(db: &Database) -> Option<Certificate> {
    let issuer = issuer(db)?.clone();
    let private_key = BTreeMap::from([
        ("algorithm".to_string(), "ECDSA".into()),
        ("size".to_string(), 256.into()),
        ("rotationPolicy".to_string(), "Always".into()),
    ]);
    Some(Certificate {
        metadata: meta(db, certificate_name(db)),
        spec: CertificateSpec {
            secret_name: certificate_name(db),
            dns_names: dns_names(db),
            issuer_ref: issuer,
            private_key: Some(private_key),
            usages: vec!["digital signature".into(), "server auth".into()],
        },
        status: None,
    })
}

/// The observed Certificate, as it is, after `spec.tls.issuerRef` was
/// removed, while an instance may still mount its Secret: the template
/// still does, or its rollout is not done. Left out at once, it would be
/// deleted, and with cert-manager's `--enable-certificate-owner-ref` its
/// Secret with it, under pods that mount it.
pub(super) fn kept(db: &Database, seen: &Observed) -> Option<Certificate> {
    if issuer(db).is_some() {
        return None;
    }
    let wanted = certificate_name(db);
    let observed = observed(db, seen)?;
    let mounted = seen.may_mount(|v| {
        v.secret.as_ref().and_then(|s| s.secret_name.as_deref()) == Some(wanted.as_str())
    });
    mounted.then(|| Certificate {
        metadata: meta(db, wanted),
        spec: observed.spec.clone(),
        status: None,
    })
}

/// Refuses a Database that asks for an issuer when this controller does
/// not watch Certificates: its answer could not carry one.
pub(super) fn require_group(req: &SyncRequest<Database>) -> Result<(), HookError> {
    if issuer(&req.parent).is_none() || req.children.has::<Certificate>() {
        return Ok(());
    }
    Err(InvalidSpec::new(
        "spec.tls.issuerRef",
        format!(
            "this Database controller does not manage cert-manager Certificates (no Certificate.cert-manager.io/v1 group in the request); install the opshooks chart with operators.database.{CHART_VALUE}=true where cert-manager's CRDs are installed, or give spec.tls.secretName instead"
        ),
    )
    .into())
}

/// `CertificateReady`, under `spec.tls.issuerRef` (and after it, so the
/// condition does not stay as last written): what cert-manager says of the
/// Certificate, which the instances wait for. Only cert-manager's own
/// status counts; the Secret's presence is the kubelet's to wait for.
pub(super) fn condition(db: &Database, seen: &Observed) -> Option<Observation> {
    const TYPE: &str = "CertificateReady";
    let shown = shows_condition(db, TYPE);
    let wanted = certificate_name(db);
    if issuer(db).is_none() {
        return shown.then(|| {
            Observation::new(
                TYPE,
                true,
                "NotAsked",
                "spec.tls names no cert-manager issuer",
            )
        });
    }
    let Some(cert) = observed(db, seen) else {
        return Some(Observation::new(
            TYPE,
            false,
            "Creating",
            format!(
                "Certificate {wanted} is not observed yet; the instances start once cert-manager has written Secret {wanted}"
            ),
        ));
    };
    let status = cert.status.as_ref();
    let ready = status
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default()
        .iter()
        .find(|c| c.type_ == "Ready");
    Some(match ready {
        Some(c) if c.status == "True" => Observation::new(
            TYPE,
            true,
            "Issued",
            format!(
                "Certificate {wanted} is Ready (revision {}); the instances serve it",
                status.and_then(|s| s.revision).unwrap_or_default()
            ),
        ),
        Some(c) => Observation::new(
            TYPE,
            false,
            "NotReady",
            format!(
                "Certificate {wanted} is not Ready: {}: {}",
                c.reason.as_deref().unwrap_or("no reason"),
                c.message.as_deref().unwrap_or("no message")
            ),
        ),
        None => Observation::new(
            TYPE,
            false,
            "NotIssued",
            format!(
                "Certificate {wanted} has no Ready condition yet: cert-manager has not issued it"
            ),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::super::tls::tests::db;
    use super::*;
    use serde_json::json;

    #[test]
    fn the_certificate_names_every_address_a_client_or_job_dials() {
        let db = db(json!({"issuerRef": {"name": "internal-ca", "kind": "ClusterIssuer"}}));
        let cert = serde_json::to_value(certificate(&db).unwrap()).unwrap();
        assert_eq!(cert["spec"]["secretName"], "orders-tls");
        assert_eq!(
            cert["spec"]["issuerRef"],
            json!({"name": "internal-ca", "kind": "ClusterIssuer"})
        );
        let names: Vec<String> = serde_json::from_value(cert["spec"]["dnsNames"].clone()).unwrap();
        for dialled in [
            "orders.prod.svc",
            "orders-ro.prod.svc",
            "orders.prod.svc.cluster.local",
            "orders-ro.prod.svc.cluster.local",
        ] {
            assert!(names.iter().any(|n| n == dialled), "{dialled} in {names:?}");
        }
        // An instance's address matches the wildcard in its first label only.
        assert!(names.iter().any(|n| n == "*.orders-headless.prod.svc"));
        assert_eq!(cert.get("status"), None);
        // The Secret is cert-manager's: no labels of ours reach it.
        assert_eq!(cert["spec"].get("secretTemplate"), None);
        assert_eq!(secret(&db).as_deref(), Some("orders-tls"));
    }

    #[test]
    fn a_secret_name_or_no_tls_makes_no_certificate() {
        assert!(certificate(&db(json!({"secretName": "mine"}))).is_none());
        assert_eq!(
            secret(&db(json!({"secretName": "mine"}))).as_deref(),
            Some("mine")
        );
        assert!(certificate(&db(json!(null))).is_none());
        assert_eq!(secret(&db(json!(null))), None);
    }

    #[test]
    fn without_an_issuer_the_certificate_stays_until_no_instance_mounts_it() {
        let observed: Certificate = serde_json::from_value(json!({"metadata": {"name": "orders-tls"}, "spec": {"secretName": "orders-tls", "dnsNames": ["orders"], "issuerRef": {"name": "ca"}}})).unwrap();
        let seen = |volumes: serde_json::Value, current: &str| Observed {
            certificates: Some(vec![observed.clone()]),
            statefulset: Some(
                crate::fixtures::statefulset("orders")
                    .set("/spec/template/spec/volumes", volumes)
                    .status(json!({"currentRevision": current, "updateRevision": "b"}))
                    .typed(),
            ),
            ..Observed::default()
        };
        let without = db(json!(null));
        let mounted = json!([{"name": "tls", "secret": {"secretName": "orders-tls"}}]);
        let kept = kept(&without, &seen(mounted, "b")).unwrap();
        assert_eq!(kept.spec, observed.spec);
        // The new template written, the old pods not yet replaced.
        assert!(super::kept(&without, &seen(json!([]), "a")).is_some());
        // Rolled: it goes.
        assert!(super::kept(&without, &seen(json!([]), "b")).is_none());
        // With an issuer, the Certificate is built, not kept.
        assert!(
            super::kept(
                &db(json!({"issuerRef": {"name": "ca"}})),
                &seen(json!([]), "a")
            )
            .is_none()
        );
    }

    #[test]
    fn the_condition_says_what_cert_manager_said() {
        let with = db(json!({"issuerRef": {"name": "ca"}}));
        let cert = |status: serde_json::Value| -> Certificate {
            serde_json::from_value(json!({"metadata": {"name": "orders-tls"}, "spec": {"secretName": "orders-tls", "dnsNames": [], "issuerRef": {"name": "ca"}}, "status": status})).unwrap()
        };
        let said = |certs: Vec<Certificate>| {
            let seen = Observed {
                certificates: Some(certs),
                ..Observed::default()
            };
            let o = condition(&with, &seen).unwrap();
            (o.status == true.into(), o.reason.to_string(), o.message)
        };
        assert_eq!(said(vec![]).1, "Creating");
        assert_eq!(said(vec![cert(json!({}))]).1, "NotIssued");
        let failed = cert(
            json!({"conditions": [{"type": "Ready", "status": "False", "reason": "DoesNotExist", "message": "Issuer ca not found"}]}),
        );
        let (ok, reason, message) = said(vec![failed]);
        assert!(
            !ok && reason == "NotReady" && message.contains("Issuer ca not found"),
            "{message}"
        );
        let ready =
            cert(json!({"conditions": [{"type": "Ready", "status": "True"}], "revision": 3}));
        let (ok, _, message) = said(vec![ready]);
        assert!(ok && message.contains("revision 3"), "{message}");
        // No issuer and never shown: no condition.
        assert!(condition(&db(json!(null)), &Observed::default()).is_none());
    }
}
