//! PostgreSQL's metrics (issue 36, `spec.monitoring`): prometheus-community's
//! postgres_exporter beside each instance, under a role that may only read
//! the statistics, and on request a Prometheus Operator `PodMonitor`.
//!
//! - The exporter reaches its own instance over the pod's loopback, with
//!   TLS (the instances refuse TCP without it) and a password: the role
//!   `opshooks_monitor` is a member of `pg_monitor` and nothing else. It
//!   never shares the server's socket directory, where every local user is
//!   trusted.
//! - The role is made on the primary by a Job, `monitor-role.sh`, through
//!   the read-write Service, as the init Job makes the application user;
//!   the standbys replay it. The Job's name carries a digest of the
//!   password and the major it ran on, so a new password (the Secret
//!   deleted, a Database created again over retained volumes) or a major
//!   upgrade runs it again.
//! - The PodMonitor is a child type only where the chart says the
//!   Prometheus Operator's CRDs exist ([`CHART_VALUE`]), as cert-manager's
//!   Certificate is: Metacontroller watches every child type, and a missing
//!   CRD would stop the whole Database controller. Asked for without it, the
//!   `Monitoring` condition says so; nothing else waits for it, since a
//!   monitoring setting must never block a failover.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, ContainerPort, KeyToPath, PodSpec, ResourceRequirements,
    Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::kinds::{PodMonitor, PodMonitorSpec};
use super::names::{monitor_job_prefix, monitor_secret_name};
use super::objects::{APP, meta, mount, script_container, script_job, secret_env, superuser_env};
use super::observed::Observed;
use super::plan::Plan;
use super::spec::{Database, Monitoring, PORT, name, shows_condition};
use super::upgrade::Upgrade;
use crate::hook::Child;
use crate::hook::conditions::Observation;
use crate::hook::digest;
use crate::operators::backup_job::RunStatus;
use crate::operators::common::{restricted_container, selector_labels};
use crate::operators::expansion::env;
use crate::operators::resources::cpu_memory;
use crate::operators::validate::{self, InvalidSpec};

/// The chart value (under `operators.database`) that adds the PodMonitor
/// child type.
pub(super) const CHART_VALUE: &str = "podMonitor";
/// The exporter's image when `spec.monitoring.image` is omitted.
pub(super) const EXPORTER_IMAGE: &str = "quay.io/prometheuscommunity/postgres-exporter:v0.17.1";
/// The exporter's role.
pub(super) const ROLE: &str = "opshooks_monitor";
/// The monitoring role Job's script.
pub(super) const ROLE_SCRIPT: &str = include_str!("monitor-role.sh");
/// Where the exporter serves its metrics.
pub(super) const METRICS_PORT: i32 = 9187;
const PORT_NAME: &str = "metrics";
const CONTAINER: &str = "exporter";
/// The role Job's container.
const CONTAINER_JOB: &str = "monitor";
const QUERIES_VOLUME: &str = "exporter-queries";
const QUERIES_DIR: &str = "/etc/opshooks/queries";
const DEFAULT_QUERIES_KEY: &str = "queries.yaml";
/// The Secret's key of the role's password.
const PASSWORD_KEY: &str = "password";

/// `spec.monitoring`, when the exporter runs.
pub(super) fn enabled(db: &Database) -> Option<&Monitoring> {
    db.spec.monitoring.as_ref().filter(|m| m.enabled)
}

/// The Secret's wanted data, `password` from `generated`.
pub(super) fn secret_data(
    generated: k8s_openapi::ByteString,
) -> BTreeMap<String, k8s_openapi::ByteString> {
    BTreeMap::from([
        (
            "username".to_string(),
            k8s_openapi::ByteString(ROLE.as_bytes().to_vec()),
        ),
        (PASSWORD_KEY.to_string(), generated),
    ])
}

/// Checks `spec.monitoring`.
pub(super) fn validate(db: &Database, monitoring: &Monitoring) -> Result<(), InvalidSpec> {
    if let Some(image) = &monitoring.image {
        validate::image("spec.monitoring.image", image)?;
    }
    if let Some(queries) = &monitoring.queries {
        validate::object_name("spec.monitoring.queries.name", &queries.name, "ConfigMap")?;
        let key_ok = |k: &str| {
            (1..=253).contains(&k.len())
                && k != "."
                && k != ".."
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        if let Some(key) = queries.key.as_deref().filter(|k| !key_ok(k)) {
            return Err(InvalidSpec::new(
                "spec.monitoring.queries.key",
                format!(
                    "{} is not a ConfigMap key (letters, digits, '-', '_' and '.', at most 253); omit it for {DEFAULT_QUERIES_KEY}",
                    validate::quote(key)
                ),
            ));
        }
    }
    if monitoring.enabled && db.spec.user.as_deref() == Some(ROLE) {
        return Err(InvalidSpec::new(
            "spec.monitoring.enabled",
            format!(
                "the exporter's role is {ROLE}, which spec.user names too; this Database cannot be monitored, or must be created with another user"
            ),
        ));
    }
    Ok(())
}

/// Adds the exporter to an instance's pod.
pub(super) fn apply(db: &Database, pod: &mut PodSpec) {
    let Some(monitoring) = enabled(db) else {
        return;
    };
    let mut args = vec![
        format!("--web.listen-address=:{METRICS_PORT}"),
        "--collector.database_wraparound".to_string(),
    ];
    let mut mounts = None;
    if let Some(queries) = &monitoring.queries {
        let key = queries.key.as_deref().unwrap_or(DEFAULT_QUERIES_KEY);
        args.push(format!(
            "--extend.query-path={QUERIES_DIR}/{DEFAULT_QUERIES_KEY}"
        ));
        mounts = Some(vec![mount(QUERIES_VOLUME, QUERIES_DIR, true)]);
        pod.volumes
            .get_or_insert_with(Vec::new)
            .push(queries_volume(&queries.name, key));
    }
    pod.containers.push(Container {
        name: CONTAINER.to_string(),
        image: Some(
            monitoring
                .image
                .clone()
                .unwrap_or_else(|| EXPORTER_IMAGE.to_string()),
        ),
        args: Some(args),
        env: Some(vec![
            // Its own instance, over the pod's loopback, with TLS: the
            // instances refuse TCP without it (the certificate is not
            // verified: it names the Services, not 127.0.0.1).
            env(
                "DATA_SOURCE_URI",
                format!("127.0.0.1:{PORT}/postgres?sslmode=require"),
            ),
            env("DATA_SOURCE_USER", ROLE),
            password_env(db),
        ]),
        ports: Some(vec![ContainerPort {
            name: Some(PORT_NAME.to_string()),
            container_port: METRICS_PORT,
            protocol: Some("TCP".to_string()),
            ..ContainerPort::default()
        }]),
        resources: Some(ResourceRequirements {
            requests: Some(cpu_memory("10m", "32Mi")),
            limits: Some(cpu_memory("200m", "128Mi")),
            ..ResourceRequirements::default()
        }),
        volume_mounts: mounts,
        security_context: Some(restricted_container()),
        ..Container::default()
    });
}

/// The user's queries, from key `key` of ConfigMap `config_map`, as the
/// exporter's queries file.
fn queries_volume(config_map: &str, key: &str) -> Volume {
    Volume {
        name: QUERIES_VOLUME.to_string(),
        config_map: Some(ConfigMapVolumeSource {
            name: config_map.to_string(),
            items: Some(vec![KeyToPath {
                key: key.to_string(),
                path: DEFAULT_QUERIES_KEY.to_string(),
                mode: None,
            }]),
            default_mode: Some(0o444),
            // A missing ConfigMap must not keep an instance from
            // starting: the exporter then runs its own queries only.
            optional: Some(true),
        }),
        ..Volume::default()
    }
}

/// The exporter's password, from the monitoring role's Secret.
fn password_env(db: &Database) -> k8s_openapi::api::core::v1::EnvVar {
    k8s_openapi::api::core::v1::EnvVar {
        name: "DATA_SOURCE_PASS".to_string(),
        value_from: Some(k8s_openapi::api::core::v1::EnvVarSource {
            secret_key_ref: Some(k8s_openapi::api::core::v1::SecretKeySelector {
                name: monitor_secret_name(db),
                key: PASSWORD_KEY.to_string(),
                // Turned off, the Secret goes while the old template may
                // still start an instance (the primary is held on it):
                // the exporter must not keep that instance from starting.
                optional: Some(true),
            }),
            ..Default::default()
        }),
        value: None,
    }
}

/// The role Job's name for the observed password on `major`: a new
/// password or a new major's data runs it again.
fn role_job_name(db: &Database, password: &[u8], plan: &Plan) -> String {
    let digest = digest::of_json(&(password, plan.version.as_str()));
    format!("{}{}", monitor_job_prefix(db), &digest[..10])
}

/// The role Job's name for the observed Secret's password, once observed.
fn current_role_job(db: &Database, seen: &Observed, plan: &Plan) -> Option<String> {
    let password = seen
        .secrets
        .get(&monitor_secret_name(db))?
        .data
        .as_ref()?
        .get(PASSWORD_KEY)?;
    Some(role_job_name(db, &password.0, plan))
}

/// The Job that makes (or updates) the role on the primary: once the
/// Secret is observed (its password is the one the exporters read) and
/// the primary serves, or while observed.
pub(super) fn role_job(db: &Database, seen: &Observed, plan: &Plan) -> Option<Job> {
    enabled(db)?;
    let job_name = current_role_job(db, seen, plan)?;
    // Through the read-write Service: only while it reaches a primary
    // that serves, not one being promoted or fenced (a read-only server
    // would use up the Job's tries).
    let serving = plan.restore.lets_serve()
        && matches!(plan.upgrade.step, Upgrade::None)
        && super::primary::is_serving(db, seen, &plan.primary);
    if !(serving || seen.jobs.contains_key(&job_name)) {
        return None;
    }
    let mut container_env = superuser_env(db);
    container_env.extend([
        env("MONITOR_USER", ROLE),
        secret_env("MONITOR_PASSWORD", monitor_secret_name(db), PASSWORD_KEY),
    ]);
    // No termination message from the logs: a statement psql quotes in an
    // error would carry the password into the Database's status.
    let container = script_container(
        (CONTAINER_JOB, plan.images.image(plan.version)),
        ROLE_SCRIPT,
        container_env,
        None,
    );
    let mut pod = PodSpec {
        containers: vec![container],
        ..PodSpec::default()
    };
    plan.tls.apply(&mut pod, &[CONTAINER_JOB]);
    Some(script_job(db, job_name, pod, 3))
}

/// The PodMonitor, when asked for and the controller manages the type:
/// the instances' `metrics` port, labelled with the Database's own labels
/// and ours.
pub(super) fn pod_monitor(db: &Database, seen: &Observed, app: &str) -> Option<PodMonitor> {
    let wanted = enabled(db).is_some_and(|m| m.pod_monitor);
    if !(wanted && seen.pod_monitors_managed) {
        return None;
    }
    let mut metadata = meta(db, name(db).to_string());
    let mut labels = db.metadata.labels.clone().unwrap_or_default();
    // Metacontroller puts its own on every child; a Database carrying one
    // (made by another controller) would fail its selector check, and the
    // whole sync with it.
    labels.remove("controller-uid");
    labels.extend(metadata.labels.take().unwrap_or_default());
    metadata.labels = Some(labels);
    Some(PodMonitor {
        metadata,
        spec: PodMonitorSpec {
            selector: LabelSelector {
                match_labels: Some(selector_labels(app, name(db))),
                match_expressions: None,
            },
            pod_metrics_endpoints: vec![BTreeMap::from([(
                "port".to_string(),
                PORT_NAME.to_string(),
            )])],
        },
    })
}

/// `Monitoring`, while `spec.monitoring.enabled` (and after, so the
/// condition does not stay as last written): whether the role is in place
/// and the PodMonitor asked for can be made.
pub(super) fn condition(db: &Database, seen: &Observed, plan: &Plan) -> Option<Observation> {
    let shown = shows_condition(db, "Monitoring");
    let Some(monitoring) = enabled(db) else {
        return shown.then(|| {
            Observation::new(
                "Monitoring",
                false,
                "Disabled",
                "spec.monitoring.enabled is not set: no exporter runs",
            )
        });
    };
    let job = current_role_job(db, seen, plan);
    let observation = match job.as_deref().and_then(|j| Some((j, seen.job(j)?))) {
        Some((j, RunStatus::Failed)) => Observation::new(
            "Monitoring",
            false,
            "RoleFailed",
            format!(
                "the Job {j} could not make the role {ROLE}: kubectl logs job/{j} says why; delete the Job to try again"
            ),
        ),
        _ if monitoring.pod_monitor && !seen.pod_monitors_managed => Observation::new(
            "Monitoring",
            false,
            "PodMonitorUnavailable",
            format!(
                "this Database controller does not manage PodMonitors (no PodMonitor.monitoring.coreos.com/v1 group in the request); install the opshooks chart with operators.database.{CHART_VALUE}=true where the Prometheus Operator's CRDs are installed, or scrape port {METRICS_PORT} yourself"
            ),
        ),
        Some((_, RunStatus::Succeeded)) => Observation::new(
            "Monitoring",
            true,
            "Exporting",
            format!(
                "each instance serves PostgreSQL's metrics on port {METRICS_PORT} ({PORT_NAME})"
            ),
        ),
        _ => Observation::new(
            "Monitoring",
            false,
            "RolePending",
            format!("the exporters wait for the role {ROLE}, made once the primary serves"),
        ),
    };
    Some(observation)
}

/// The children monitoring adds: the exporter's role Job, while one is
/// needed, and the PodMonitor, where the type is managed.
pub(super) fn children(db: &Database, seen: &Observed, plan: &Plan) -> Vec<Child> {
    let role = role_job(db, seen, plan).map(|job| Child::new(&job));
    let monitor = pod_monitor(db, seen, APP).map(|m| Child::new(&m));
    role.into_iter().chain(monitor).collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn db(monitoring: serde_json::Value) -> Database {
        crate::fixtures::orders()
            .spec("user", "opshooks_monitor")
            .spec("monitoring", monitoring)
            .typed()
    }

    fn refusal(monitoring: serde_json::Value) -> Option<String> {
        let db = db(monitoring);
        let m = db.spec.monitoring.clone().unwrap();
        validate(&db, &m).err().map(|e| format!("{e:?}"))
    }

    /// Each bad value is refused naming its field; the role's name is the
    /// exporter's alone only while the exporter runs.
    #[test]
    fn bad_monitoring_settings_are_refused_naming_the_field() {
        let cases = [
            (
                json!({"enabled": false, "queries": {"name": "q", "key": "a/b"}}),
                "spec.monitoring.queries.key",
            ),
            (
                json!({"enabled": false, "queries": {"name": "Q_"}}),
                "spec.monitoring.queries.name",
            ),
            (
                json!({"enabled": false, "image": "bad image"}),
                "spec.monitoring.image",
            ),
            (json!({"enabled": true}), "spec.monitoring.enabled"),
        ];
        for (monitoring, field) in cases {
            let refused = refusal(monitoring.clone()).unwrap_or_default();
            assert!(refused.contains(field), "{monitoring}: {refused}");
        }
        assert_eq!(
            refusal(json!({"enabled": false, "queries": {"name": "q", "key": "q.yaml"}})),
            None
        );
    }

    /// The exporter reaches its own instance over loopback with TLS, as
    /// the role that only reads statistics; a queries ConfigMap that is
    /// missing never keeps the instance from starting.
    #[test]
    fn the_exporter_connects_over_loopback_and_its_queries_are_optional() {
        let mut db = db(json!({"enabled": true, "queries": {"name": "q"}}));
        db.spec.user = None;
        let mut pod = PodSpec::default();
        apply(&db, &mut pod);
        let exporter = &pod.containers[0];
        let env: BTreeMap<_, _> = exporter
            .env
            .iter()
            .flatten()
            .map(|e| (e.name.as_str(), e.value.as_deref()))
            .collect();
        assert_eq!(
            env["DATA_SOURCE_URI"],
            Some("127.0.0.1:5432/postgres?sslmode=require")
        );
        assert_eq!(env["DATA_SOURCE_USER"], Some(ROLE));
        let volume = &pod.volumes.as_ref().unwrap()[0];
        assert_eq!(volume.config_map.as_ref().unwrap().optional, Some(true));
        db.spec.monitoring.as_mut().unwrap().enabled = false;
        let mut disabled = PodSpec::default();
        apply(&db, &mut disabled);
        assert!(disabled.containers.is_empty());
    }
}
