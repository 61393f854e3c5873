//! The objects of other projects that a Database writes or reads:
//! cert-manager's `Certificate` and `CertificateRequest`, Prometheus
//! Operator's `PodMonitor`, and the text of the CA bundle the instances
//! trust. Only their shapes: what to build and what to make of them is the
//! features' (`certificate`, `trust`, `monitoring`); `observed` reads them
//! once from the request.

use std::collections::BTreeMap;

use base64::Engine;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::{Deserialize, Serialize};

use super::spec::IssuerRef;

/// cert-manager's `Certificate` (cert-manager.io/v1), the fields the hook
/// writes and reads.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Certificate {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// What to issue.
    #[serde(default)]
    pub spec: CertificateSpec,
    /// What cert-manager observed; read, never written.
    #[serde(default)]
    pub status: Option<CertificateStatus>,
}

impl Serialize for Certificate {
    /// As the API takes it: with its type, without the status.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        crate::hook::serialize_typed::<Self, _, _>(&self.metadata, &self.spec, s)
    }
}

/// The desired certificate.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CertificateSpec {
    /// The Secret cert-manager writes `tls.crt`, `tls.key` and `ca.crt` to.
    #[serde(default)]
    pub secret_name: String,
    /// The names the certificate is valid for.
    #[serde(default)]
    pub dns_names: Vec<String>,
    /// Who signs it.
    #[serde(default)]
    pub issuer_ref: IssuerRef,
    /// The key: EC P-256, a new one at every renewal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key: Option<BTreeMap<String, serde_json::Value>>,
    /// Server authentication only: the instances present it, never use it
    /// as a client.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub usages: Vec<String>,
}

/// cert-manager's view of a Certificate.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CertificateStatus {
    /// `Ready` and `Issuing`, as cert-manager writes them.
    #[serde(default)]
    pub conditions: Vec<CertificateCondition>,
    /// How many times it was issued.
    #[serde(default)]
    pub revision: Option<i64>,
    /// When the certificate in its Secret begins to be valid: when it was
    /// issued.
    #[serde(default)]
    pub not_before: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

/// One condition of a Certificate.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct CertificateCondition {
    /// `Ready` or `Issuing`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// cert-manager's reason.
    #[serde(default)]
    pub reason: Option<String>,
    /// cert-manager's message.
    #[serde(default)]
    pub message: Option<String>,
}

crate::hook::namespaced_resource!(
    Certificate,
    "cert-manager.io",
    "v1",
    "Certificate",
    "certificates"
);

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

/// The key of the CA bundle in the ConfigMap, as in a TLS Secret.
pub(super) const KEY: &str = "ca.crt";

/// Text longer than this is not read: [`KEPT`] certificates fit.
const MAX_TEXT_BYTES: usize = KEPT * (MAX_CERTIFICATE_BYTES + 64);

/// A certificate whose PEM body is longer than this is not read (a CA
/// certificate is a few KiB).
const MAX_CERTIFICATE_BYTES: usize = 16 * 1024;

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

/// Prometheus Operator's `PodMonitor` (monitoring.coreos.com/v1), the
/// fields the hook writes.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub(super) struct PodMonitor {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// Which pods, which port.
    #[serde(default)]
    pub spec: PodMonitorSpec,
}

impl Serialize for PodMonitor {
    /// As the API takes it: with its type.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        crate::hook::serialize_typed::<Self, _, _>(&self.metadata, &self.spec, s)
    }
}

/// A PodMonitor's spec.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(super) struct PodMonitorSpec {
    /// The instances.
    #[serde(default)]
    pub selector: LabelSelector,
    /// Their exporters' port.
    #[serde(default)]
    pub pod_metrics_endpoints: Vec<BTreeMap<String, String>>,
}

crate::hook::namespaced_resource!(
    PodMonitor,
    "monitoring.coreos.com",
    "v1",
    "PodMonitor",
    "podmonitors"
);

/// At most this many certificates are kept: the newest issue's CA and
/// those before it (a CA chain counts each certificate), enough for a CA
/// changed twice before a roll ends.
pub(super) const KEPT: usize = 8;
