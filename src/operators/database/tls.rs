//! TLS of a Database's clients: how the operator's own clients (the
//! standbys, every Job that connects) and the connection details it
//! publishes say `sslmode`. The server side (the certificate, `ssl=on`,
//! the pg_hba.conf rules) is built in `children`.
//!
//! A certificate with a CA (`spec.tls.secretName`) is verified
//! (`verify-full` with `sslrootcert`); a self-signed one only encrypts
//! (`require`). A Database made before TLS runs instances that serve
//! none until its rollout is done: its clients ask for TLS only once every
//! instance serves it, and then for good.

use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, EnvVar, KeyToPath, PodSpec, SecretVolumeSource, Volume,
};

use super::certificate;
use super::names::ca_config_map_name;
use super::observed::Observed;
use super::spec::{Database, issuer};
use super::trust;
use crate::operators::backup_job;

/// Where a Job's containers read the CAs (`ca.crt` of the TLS Secret, or
/// of the CA bundle ConfigMap).
const CA_DIR: &str = "/etc/opshooks/tls-ca";
/// The volume of the CA in a Job's pod.
const CA_VOLUME: &str = "tls-ca";
/// The CA's key in the TLS Secret.
pub(super) const CA_KEY: &str = "ca.crt";

/// How a client of this Database connects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Client {
    /// libpq's sslmode: `verify-full`, `require`, or `prefer` while an
    /// instance may serve no TLS.
    pub mode: &'static str,
    /// Where the CAs the server's certificate is verified with are, when
    /// there are.
    pub ca: Option<Ca>,
}

/// Where a client reads the CAs it trusts (always under the key `ca.crt`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ca {
    /// `spec.tls.secretName`'s Secret: its `ca.crt` (a rotation of that CA
    /// is the user's: old and new together until every instance serves
    /// the new certificate).
    Secret(String),
    /// Under `spec.tls.issuerRef`, the ConfigMap of the CAs of
    /// cert-manager's newest issue and those before (`trust`).
    ConfigMap(String),
}

/// Whether every instance serves TLS: none runs yet, or the StatefulSet's
/// template starts the server with `ssl=on` and either no instance runs
/// an older one, or the template's own clients already ask for TLS (which
/// it only does after that: a later rollout changes nothing of TLS).
pub(super) fn served_by_every_instance(seen: &Observed) -> bool {
    if seen.statefulset.is_none() {
        return true;
    }
    let serving = seen.running_parameters().get("ssl").map(String::as_str) == Some("on");
    let asked = seen
        .postgres_env("RW_SSLMODE")
        .is_some_and(|mode| mode != "prefer");
    serving && (asked || !seen.rollout_in_flight())
}

/// How the operator's clients and the applications connect.
pub(super) fn client(db: &Database, seen: &Observed) -> Client {
    // The bundle once it is observed (before, cert-manager's Secret's
    // `ca.crt`: a client never waits for a ConfigMap that is not there).
    let ca = match issuer(db) {
        Some(_) if trust::observed_bundle(seen) => Some(Ca::ConfigMap(ca_config_map_name(db))),
        _ => certificate::secret(db).map(Ca::Secret),
    };
    let mode = match (served_by_every_instance(seen), &ca) {
        (false, _) => "prefer",
        (true, Some(_)) => "verify-full",
        (true, None) => "require",
    };
    Client { mode, ca }
}

impl Client {
    /// Whether the server is verified against a CA.
    fn verifies(&self) -> bool {
        self.mode == "verify-full"
    }

    /// Where the CAs the server is verified with are, when it is.
    pub fn verified_by(&self) -> Option<&Ca> {
        self.ca.as_ref().filter(|_| self.verifies())
    }

    /// Gives the containers named `containers` of `pod` libpq's
    /// `PGSSLMODE` and, when verifying, `PGSSLROOTCERT` with the CAs
    /// mounted (only `ca.crt` of a Secret, never its key; a ConfigMap that
    /// is not there yet is waited for).
    pub fn apply(&self, pod: &mut PodSpec, containers: &[&str]) {
        let verified = self.verified_by();
        let every = pod
            .containers
            .iter_mut()
            .chain(pod.init_containers.iter_mut().flatten());
        for container in every.filter(|c| containers.contains(&c.name.as_str())) {
            let env = container.env.get_or_insert_with(Vec::new);
            env.push(backup_job::env("PGSSLMODE", self.mode));
            if verified.is_some() {
                env.push(backup_job::env(
                    "PGSSLROOTCERT",
                    format!("{CA_DIR}/{CA_KEY}"),
                ));
                container.volume_mounts.get_or_insert_with(Vec::new).push(
                    k8s_openapi::api::core::v1::VolumeMount {
                        name: CA_VOLUME.to_string(),
                        mount_path: CA_DIR.to_string(),
                        read_only: Some(true),
                        ..Default::default()
                    },
                );
            }
        }
        let items = || {
            Some(vec![KeyToPath {
                key: CA_KEY.to_string(),
                path: CA_KEY.to_string(),
                mode: None,
            }])
        };
        let volume = match verified {
            None => return,
            Some(Ca::Secret(secret)) => Volume {
                name: CA_VOLUME.to_string(),
                secret: Some(SecretVolumeSource {
                    secret_name: Some(secret.clone()),
                    items: items(),
                    default_mode: Some(0o444),
                    ..SecretVolumeSource::default()
                }),
                ..Volume::default()
            },
            Some(Ca::ConfigMap(config_map)) => Volume {
                name: CA_VOLUME.to_string(),
                config_map: Some(ConfigMapVolumeSource {
                    name: config_map.clone(),
                    items: items(),
                    default_mode: Some(0o444),
                    ..ConfigMapVolumeSource::default()
                }),
                ..Volume::default()
            },
        };
        pod.volumes.get_or_insert_with(Vec::new).push(volume);
    }

    /// The instances' own clients (`start.sh`: the clone, the rewind,
    /// the standby's `primary_conninfo`) to the read-write Service:
    /// `RW_SSLMODE`, and `RW_SSLROOTCERT` with the CA `tls.sh` put at
    /// `ca_file`. Not libpq's own variables, which the server would
    /// inherit and pass to every connection it makes (dblink,
    /// postgres_fdw).
    pub fn instance_env(&self, ca_file: &str) -> Vec<EnvVar> {
        let mut env = vec![backup_job::env("RW_SSLMODE", self.mode)];
        if self.verifies() {
            env.push(backup_job::env("RW_SSLROOTCERT", ca_file));
        }
        env
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::fixtures;
    use serde_json::json;

    /// Database `orders` (medium) with `spec.tls` as given.
    pub(in crate::operators::database) fn db(tls: serde_json::Value) -> Database {
        fixtures::orders().spec("tls", tls).typed()
    }

    /// A StatefulSet whose template starts the server with `args` and
    /// gives start.sh `env`, at revisions `current` and `update`.
    fn seen(args: &[&str], env: serde_json::Value, current: &str, update: &str) -> Observed {
        let mut command = vec!["postgres"];
        for a in args {
            command.extend(["-c", a]);
        }
        Observed {
            statefulset: Some(
                fixtures::statefulset("orders")
                    .containers(json!([{"name": "postgres", "command": command, "env": env}]))
                    .status(json!({"observedGeneration": 0, "currentRevision": current, "updateRevision": update}))
                    .typed(),
            ),
            ..Observed::default()
        }
    }

    #[test]
    fn clients_ask_for_tls_once_every_instance_serves_it_and_then_for_good() {
        let with_ca = db(json!({"secretName": "orders-tls"}));
        let mode = |seen: &Observed| client(&with_ca, seen).mode;
        // A new Database: every instance will serve TLS.
        assert_eq!(mode(&Observed::default()), "verify-full");
        assert_eq!(
            client(&db(json!(null)), &Observed::default()).mode,
            "require"
        );
        // Made before TLS: its instances serve none.
        assert_eq!(mode(&seen(&[], json!([]), "a", "a")), "prefer");
        // The TLS template written, rolling: an older instance serves none.
        assert_eq!(mode(&seen(&["ssl=on"], json!([]), "a", "b")), "prefer");
        // Rolled out: every instance serves TLS.
        assert_eq!(mode(&seen(&["ssl=on"], json!([]), "b", "b")), "verify-full");
        // Asked once, a later rollout keeps it.
        let asked = json!([{"name": "RW_SSLMODE", "value": "verify-full"}]);
        assert_eq!(mode(&seen(&["ssl=on"], asked, "b", "c")), "verify-full");
    }

    #[test]
    fn a_job_reads_only_the_ca_of_the_secret() {
        let c = client(
            &db(json!({"secretName": "orders-tls"})),
            &Observed::default(),
        );
        let mut pod: PodSpec = serde_json::from_value(json!({
            "containers": [{"name": "dump"}, {"name": "upload"}]
        }))
        .unwrap();
        c.apply(&mut pod, &["dump"]);
        let pod = serde_json::to_value(&pod).unwrap();
        assert_eq!(
            pod["containers"][0]["env"],
            json!([{"name": "PGSSLMODE", "value": "verify-full"}, {"name": "PGSSLROOTCERT", "value": "/etc/opshooks/tls-ca/ca.crt"}])
        );
        assert_eq!(pod["containers"][1].get("env"), None);
        assert_eq!(
            pod["volumes"][0]["secret"]["items"],
            json!([{"key": "ca.crt", "path": "ca.crt"}])
        );
    }

    #[test]
    fn under_an_issuer_a_job_reads_the_ca_bundle_once_it_is_observed() {
        let issued = db(json!({"issuerRef": {"name": "ca"}}));
        // Not observed yet: the Secret's ca.crt, so nothing waits for it.
        let c = client(&issued, &Observed::default());
        assert_eq!(c.ca, Some(Ca::Secret("orders-tls".to_string())));
        let seen = Observed {
            ca_bundle: vec![trust::tests::pem(1)],
            ..Observed::default()
        };
        let c = client(&issued, &seen);
        assert_eq!(c.ca, Some(Ca::ConfigMap("orders-ca".to_string())));
        let mut pod: PodSpec =
            serde_json::from_value(json!({"containers": [{"name": "dump"}]})).unwrap();
        c.apply(&mut pod, &["dump"]);
        let pod = serde_json::to_value(&pod).unwrap();
        assert_eq!(pod["volumes"][0]["configMap"]["name"], "orders-ca");
        assert_eq!(pod["volumes"][0].get("secret"), None);
    }
}
