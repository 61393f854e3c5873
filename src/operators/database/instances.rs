//! The instances: the StatefulSet that runs them, their pod (the
//! `postgres` container with its probes, the `tls` init container, the
//! exporter's when monitoring is on), their claims, the server's arguments
//! and the configuration they mount (the pg_hba.conf, the first start's
//! scripts), and the disruption budget over them.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    RollingUpdateStatefulSetStrategy, StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy,
    StatefulSetSpec, StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EnvVar, ExecAction,
    PersistentVolumeClaim, PersistentVolumeClaimSpec, PodSpec, PodTemplateSpec, Probe,
    ResourceRequirements, SecretVolumeSource, Volume, VolumeResourceRequirements,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use super::archive;
use super::certificate;
use super::monitoring;
use super::names::{
    DATA_DIR, HBA_DIR, HBA_VOLUME, ROLE_DIR, ca_config_map_name, hba_name, headless_name,
    initdb_name, pgdata, pod_name, read_write_host, role_name, superuser_secret_name,
};
use super::objects::{
    APP, POSTGRES_UID, TLS_CONTAINER, config_volume, labels, meta, mount, pull_secrets,
    script_container, secret_env, value_env,
};
use super::observed::Observed;
use super::parameters;
use super::placement;
use super::plan::Plan;
use super::primary::jobs::{max_silence, max_standby_lag};
use super::primary::lease;
use super::spec::{
    ANNOTATION_VERSION, Database, LABEL_DATABASE, PORT, Replication, TEMPLATE_HASH, VOLUME, issuer,
    name,
};
use super::tls;
use crate::hook::digest;
use crate::operators::common::{restricted_container, restricted_pod, selector_labels};
use crate::operators::expansion::shell_command;
use crate::operators::resources::cpu_memory;

/// Runs on the primary's first start, from /docker-entrypoint-initdb.d.
pub(super) const PRIMARY_INIT_SCRIPT: &str = include_str!("primary-init.sh");
/// The postgres container's command, on every start: judges the volume,
/// clones or rejoins a standby, then starts the server.
pub const START_SCRIPT: &str = include_str!("start.sh");
/// The postgres container's probes: `ready` and `live`.
pub(super) const PROBE_SCRIPT: &str = include_str!("probe.sh");
/// The instances' `tls` init container: the server's certificate and key
/// from spec.tls's Secret, or self-signed.
pub(super) const TLS_SCRIPT: &str = include_str!("tls.sh");

/// The pg_hba.conf's key in its ConfigMap, and its file in [`HBA_DIR`].
pub(super) const HBA_KEY: &str = "pg-hba-tls.conf";

/// The key of the pg_hba.conf that templates from before TLS read (their
/// `hba_file`), without TLS rules: kept while such a template may still
/// start an instance, which serves no TLS and would refuse every TCP
/// connection with the rules of [`HBA_KEY`].
pub(super) const HBA_KEY_WITHOUT_TLS: &str = "pg_hba.conf";

/// Annotation on the instances' pod template: a hash of the pg_hba.conf
/// they read, so that a change of its lines rolls out as a new template
/// (the server reads the file when it starts).
pub(super) const HBA_HASH: &str = "opshooks.io/pg-hba-hash";

/// Where the server reads its certificate and key (`server.crt`,
/// `server.key`, and `ca.crt` when spec.tls names a Secret): on the
/// instance's volume, beside the data directories, so a clone does not
/// carry it and an upgrade keeps it. `tls.sh` writes it.
pub(super) const TLS_DIR: &str = "/var/lib/postgresql/data/tls";

/// Where `spec.tls`'s Secret is mounted.
pub(super) const TLS_SOURCE: &str = "/etc/opshooks/tls";

/// Where the `tls` init container reads the CA bundle (`trust`).
pub(super) const TLS_TRUST: &str = "/etc/opshooks/tls-trust";

/// The CA bundle's volume in the instances' pods.
pub(super) const TRUST_VOLUME: &str = "tls-trust";

/// The pg_hba.conf every instance reads (`hba_file`): the operator's own
/// rules (the local socket; over TCP, TLS only), `spec.postgresql.pgHba`'s
/// lines, then the catch-all. The one in the data directory, written at
/// initialization without TLS, is never read. While a template from
/// before TLS may still start an instance (the StatefulSet's template is
/// one, or a rollout is under way), the rules without TLS that it reads
/// stay beside them.
pub(super) fn hba_config(db: &Database, seen: &Observed) -> ConfigMap {
    let lines = hba_lines(db);
    let mut data = BTreeMap::from([(HBA_KEY.to_string(), instance_hba(db))]);
    let old_template = seen.running_parameters().get("hba_file")
        == Some(&format!("{HBA_DIR}/{HBA_KEY_WITHOUT_TLS}"))
        || (seen.config_maps.contains(&hba_name(db)) && seen.rollout_in_flight());
    if old_template {
        data.insert(
            HBA_KEY_WITHOUT_TLS.to_string(),
            parameters::hba_conf_without_tls(lines),
        );
    }
    ConfigMap {
        metadata: meta(db, hba_name(db)),
        data: Some(data),
        ..ConfigMap::default()
    }
}

/// The pg_hba.conf the instances read: the operator's rules (the
/// exporter's among them under `spec.monitoring`) and `spec.postgresql.pgHba`'s.
fn instance_hba(db: &Database) -> String {
    let monitor = monitoring::enabled(db).map(|_| monitoring::ROLE);
    parameters::hba_conf(hba_lines(db), monitor)
}

/// `spec.postgresql.pgHba`'s lines.
fn hba_lines(db: &Database) -> &[String] {
    db.spec
        .postgresql
        .as_ref()
        .map_or(&[], |pg| pg.pg_hba.as_slice())
}

/// The script the official image runs on the primary's first start.
pub(super) fn initdb_scripts(db: &Database) -> ConfigMap {
    ConfigMap {
        metadata: meta(db, initdb_name(db)),
        data: Some(BTreeMap::from([(
            "10-replication.sh".to_string(),
            PRIMARY_INIT_SCRIPT.to_string(),
        )])),
        ..ConfigMap::default()
    }
}

/// `probe.sh ready` or `probe.sh live`.
pub(super) fn script_probe(what: &str) -> Probe {
    Probe {
        exec: Some(ExecAction {
            command: Some(
                [
                    shell_command(PROBE_SCRIPT),
                    vec!["probe".into(), what.into()],
                ]
                .concat(),
            ),
        }),
        ..Probe::default()
    }
}

fn pg_isready() -> Probe {
    Probe {
        exec: Some(ExecAction {
            command: Some(
                [
                    "pg_isready",
                    "-h",
                    "127.0.0.1",
                    "-p",
                    "5432",
                    "-U",
                    "postgres",
                ]
                .map(String::from)
                .to_vec(),
            ),
        }),
        ..Probe::default()
    }
}

/// The StatefulSet: instance 0 is the primary, the others clone it and
/// stream from it. Its volumes are never deleted with it unless the plan
/// says so (finalizing under Delete, or under Snapshot after a snapshot).
/// Its rolling update's partition is the rollout's; a template that differs
/// from the one last written (its hash, [`TEMPLATE_HASH`]) is written with
/// the partition that keeps the serving primary on the old one.
pub(super) fn statefulset(db: &Database, seen: &Observed, plan: &Plan) -> StatefulSet {
    let when_deleted = if plan.delete_volumes {
        "Delete"
    } else {
        "Retain"
    };
    let template = pod_template(db, plan);
    let hash = digest::of_json(&template);
    let partition = match seen.template_hash() == Some(hash.as_str()) {
        true => plan.rollout.partition,
        false => plan.rollout.hold,
    };
    StatefulSet {
        metadata: ObjectMeta {
            annotations: Some(BTreeMap::from([
                (
                    ANNOTATION_VERSION.to_string(),
                    plan.version.as_str().to_string(),
                ),
                (TEMPLATE_HASH.to_string(), hash),
            ])),
            ..meta(db, name(db).to_string())
        },
        spec: Some(StatefulSetSpec {
            replicas: Some(plan.replicas),
            service_name: Some(headless_name(db)),
            pod_management_policy: Some(pod_management_policy(seen)),
            selector: LabelSelector {
                match_labels: Some(selector_labels(APP, name(db))),
                match_expressions: None,
            },
            persistent_volume_claim_retention_policy: Some(
                StatefulSetPersistentVolumeClaimRetentionPolicy {
                    when_deleted: Some(when_deleted.to_string()),
                    when_scaled: Some("Retain".to_string()),
                },
            ),
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some("RollingUpdate".to_string()),
                rolling_update: Some(RollingUpdateStatefulSetStrategy {
                    partition: Some(partition),
                    max_unavailable: None,
                }),
            }),
            template,
            volume_claim_templates: Some(vec![claim_template(db, &plan.growth.template)]),
            ..StatefulSetSpec::default()
        }),
        status: None,
    }
}

/// Every instance's pod template, placed as `spec.affinity` and
/// `spec.topologySpreadConstraints` say.
fn pod_template(db: &Database, plan: &Plan) -> PodTemplateSpec {
    let mut pod_labels = labels(db);
    pod_labels.extend(selector_labels(APP, name(db)));
    // The rules this template reads: a change of them is a new template.
    let hba = instance_hba(db);
    let mut volumes = vec![
        initdb_volume(db),
        config_volume("role", role_name(db)),
        config_volume(HBA_VOLUME, hba_name(db)),
    ];
    volumes.extend(tls_volume(db));
    let placed = placement::pod_placement(
        db.spec.affinity.as_ref(),
        db.spec.topology_spread_constraints.as_deref(),
        &selector_labels(APP, name(db)),
    );
    let mut annotations = BTreeMap::from([(
        HBA_HASH.to_string(),
        digest::of_json(&BTreeMap::from([(HBA_KEY, hba)])),
    )]);
    // A renewed certificate is a new template: the rollout restarts every
    // instance on it, standbys first (the kubelet's copy of the Secret
    // would reach a running pod a minute or more late, and the server
    // reads it only at start).
    if let Some(issue) = &plan.certificate_renewal {
        annotations.insert(certificate::ISSUE_ANNOTATION.to_string(), issue.clone());
    }
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(pod_labels),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        }),
        spec: Some(instance_pod(db, plan, placed, volumes)),
    }
}

/// The instances' pod: the server, its TLS init container and, with
/// standbys, the lease sidecar.
fn instance_pod(
    db: &Database,
    plan: &Plan,
    placed: placement::PodPlacement,
    volumes: Vec<Volume>,
) -> PodSpec {
    let mut pod = PodSpec {
        security_context: Some(restricted_pod(POSTGRES_UID)),
        init_containers: Some(vec![tls_container(db, plan)]),
        containers: vec![postgres_container(db, plan)],
        volumes: Some(volumes),
        image_pull_secrets: pull_secrets(db),
        affinity: placed.affinity,
        node_selector: placed.node_selector,
        tolerations: placed.tolerations,
        topology_spread_constraints: placed.topology_spread_constraints,
        ..PodSpec::default()
    };
    if lease::enabled(db) {
        lease::apply(db, plan.images.image(plan.version), &mut pod, "postgres");
    }
    archive::apply(db, plan.version, &mut pod, "postgres");
    monitoring::apply(db, &mut pod);
    pod
}

/// The PodDisruptionBudget of the instances (`spec.enablePDB`): one
/// eviction at a time once the size asks for two or more. It follows the
/// size, not the instances running: an upgrade that stops them all keeps
/// it, a budget over no pods.
pub(super) fn disruption_budget(db: &Database) -> Option<PodDisruptionBudget> {
    placement::disruption_budget(
        meta(db, name(db).to_string()),
        &selector_labels(APP, name(db)),
        db.spec.size.instances(),
        db.spec.enable_pdb.unwrap_or(true),
    )
}

/// A StatefulSet made before failover kept `OrderedReady` (the field
/// cannot change); a new one starts its instances in parallel, since the
/// primary need not be instance 0 and each instance waits in `start.sh` for
/// what it needs.
fn pod_management_policy(seen: &Observed) -> String {
    seen.statefulset
        .as_ref()
        .and_then(|s| s.spec.as_ref()?.pod_management_policy.clone())
        .unwrap_or_else(|| "Parallel".to_string())
}

/// What every instance's container knows: where the data is, the
/// passwords' Secret, where its role is and where the primary is (the
/// read-write Service, which follows the designated primary).
pub(super) fn instance_env(db: &Database, plan: &Plan) -> Vec<EnvVar> {
    let mut env = vec![
        value_env("PGDATA", pgdata(plan.version)),
        secret_env("POSTGRES_PASSWORD", superuser_secret_name(db), "password"),
        secret_env(
            "REPLICATION_PASSWORD",
            superuser_secret_name(db),
            "replication-password",
        ),
        value_env("ROLE_DIR", ROLE_DIR),
        value_env("RW_HOST", read_write_host(db)),
        value_env("RW_PORT", PORT.to_string()),
        // New clusters get data checksums, which pg_rewind can use.
        value_env("POSTGRES_INITDB_ARGS", "--data-checksums"),
    ];
    if let Some(bytes) = max_standby_lag(db) {
        env.push(value_env("MAX_LAG_BYTES", bytes.to_string()));
    }
    env.push(max_silence(db));
    env.extend(plan.tls.instance_env(&format!("{TLS_DIR}/{}", tls::CA_KEY)));
    env
}

/// Each instance's CPU and memory: `spec.resources`, else the size's, as
/// requests and limits.
fn instance_resources(db: &Database) -> ResourceRequirements {
    if let Some(given) = &db.spec.resources {
        return given.clone();
    }
    let (cpu, memory) = db.spec.size.resources();
    let resources = cpu_memory(cpu, memory);
    ResourceRequirements {
        requests: Some(resources.clone()),
        limits: Some(resources),
        ..ResourceRequirements::default()
    }
}

/// The server: its port, probes by `pg_isready`, its resources, the
/// data volume, the primary's first-start script, and the pg_hba.conf of
/// `spec.postgresql.pgHba`.
fn postgres_container(db: &Database, plan: &Plan) -> Container {
    let mounts = vec![
        mount(VOLUME, DATA_DIR, false),
        mount("initdb", "/docker-entrypoint-initdb.d", true),
        mount("role", ROLE_DIR, true),
        mount(HBA_VOLUME, HBA_DIR, true),
    ];
    let mut command = shell_command(START_SCRIPT);
    command.extend(["start".to_string(), "docker-entrypoint.sh".to_string()]);
    command.extend(postgres_args(db, plan));
    Container {
        name: "postgres".to_string(),
        image: Some(plan.images.image(plan.version)),
        command: Some(command),
        env: Some(instance_env(db, plan)),
        ports: Some(vec![ContainerPort {
            name: Some("postgresql".to_string()),
            container_port: PORT,
            protocol: Some("TCP".to_string()),
            ..ContainerPort::default()
        }]),
        // probe.sh: a server answering as a primary while the role names
        // another pod is neither ready nor live (the restart rejoins it as
        // a standby); a standby too far behind is not ready.
        // Every 2 s, two failures: a lost primary is not ready within
        // some 4 s, the first part of the RTO docs/failover.md states.
        readiness_probe: Some(Probe {
            period_seconds: Some(2),
            timeout_seconds: Some(5),
            failure_threshold: Some(2),
            ..script_probe("ready")
        }),
        // Crash recovery after an unclean stop can take long: liveness
        // starts only once the server answered.
        startup_probe: Some(Probe {
            period_seconds: Some(10),
            failure_threshold: Some(360),
            ..pg_isready()
        }),
        liveness_probe: Some(Probe {
            period_seconds: Some(10),
            timeout_seconds: Some(5),
            failure_threshold: Some(6),
            ..script_probe("live")
        }),
        resources: Some(instance_resources(db)),
        volume_mounts: Some(mounts),
        security_context: Some(restricted_container()),
        ..Container::default()
    }
}

/// The `tls` init container: `tls.sh` puts the server's certificate and
/// key into [`TLS_DIR`] on the instance's volume, from `spec.tls`'s Secret
/// or self-signed.
fn tls_container(db: &Database, plan: &Plan) -> Container {
    let mut env = vec![value_env("TLS_DIR", TLS_DIR)];
    let mut mounts = vec![mount(VOLUME, DATA_DIR, false)];
    if certificate::secret(db).is_some() {
        env.push(value_env("TLS_SOURCE", TLS_SOURCE));
        mounts.push(mount("tls", TLS_SOURCE, true));
    }
    if issuer(db).is_some() {
        env.push(value_env("TLS_TRUST", TLS_TRUST));
        mounts.push(mount(TRUST_VOLUME, TLS_TRUST, true));
    }
    Container {
        resources: Some(instance_resources(db)),
        ..script_container(
            (TLS_CONTAINER, plan.images.image(plan.version)),
            TLS_SCRIPT,
            env,
            Some(mounts),
        )
    }
}

/// `spec.tls`'s Secret, read by `tls.sh` (which copies the key with the
/// mode PostgreSQL demands, so the volume's mode only needs to let the
/// server's group read it); under `spec.tls.issuerRef`, the CA bundle
/// too, which `tls.sh` adds to the Secret's `ca.crt` (optional: before
/// cert-manager's first issue is observed there is none, and the Secret's
/// CA is all there is to trust).
fn tls_volume(db: &Database) -> Vec<Volume> {
    let mut out = Vec::new();
    if let Some(secret) = certificate::secret(db) {
        out.push(Volume {
            name: "tls".to_string(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret),
                default_mode: Some(0o440),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        });
    }
    if issuer(db).is_some() {
        out.push(Volume {
            name: TRUST_VOLUME.to_string(),
            config_map: Some(ConfigMapVolumeSource {
                name: ca_config_map_name(db),
                optional: Some(true),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        });
    }
    out
}

/// The primary's first-start script, from the `<name>-initdb` ConfigMap.
fn initdb_volume(db: &Database) -> Volume {
    Volume {
        name: "initdb".to_string(),
        config_map: Some(ConfigMapVolumeSource {
            name: initdb_name(db),
            // Executable, so the entrypoint runs it in its own shell instead
            // of sourcing it into its own.
            default_mode: Some(0o555),
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    }
}

/// Each instance's volume, `data-<name>-<i>`, labelled as the Database's
/// so customize finds it. Fixed once the StatefulSet exists.
/// The claim template, at `size`: what the StatefulSet was created with
/// (the API server refuses a change), the spec's for a new one.
pub(super) fn claim_template(db: &Database, size: &str) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(VOLUME.to_string()),
            labels: Some(BTreeMap::from([(
                LABEL_DATABASE.to_string(),
                name(db).to_string(),
            )])),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".to_string()]),
            storage_class_name: db.spec.storage.storage_class_name.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_string(),
                    Quantity(size.to_string()),
                )])),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: None,
    }
}

/// The server's arguments. Standbys that fall behind (a restart, a slow
/// node) catch up from the primary's WAL if it is still there: keep a tenth
/// of the volume of it, between 64 MB and 4 GB, rather than a replication
/// slot that would fill the primary's disk if a standby disappeared.
/// `wal_log_hints` lets a former primary rejoin with `pg_rewind`. Under
/// synchronous replication a commit waits for any one standby, named.
/// Then
/// `hba_file` with `spec.postgresql.pgHba`, TLS, the replication
/// timeouts (5 s unless the spec sets them), and the plan's parameters
/// (`spec.postgresql.parameters`, none of which the operator sets).
pub(super) fn postgres_args(db: &Database, plan: &Plan) -> Vec<String> {
    // Of the size the StatefulSet was created with: growing the claims
    // restarts nothing.
    let volume_mb =
        crate::operators::validate::quantity_bytes(&plan.growth.template).unwrap_or(0) / 1_000_000;
    let keep_mb = (volume_mb / 10).clamp(64, 4096);
    let mut args: Vec<String> = [
        "postgres",
        "-c",
        &format!("wal_keep_size={keep_mb}MB"),
        "-c",
        "wal_log_hints=on",
    ]
    .map(String::from)
    .to_vec();
    if db.spec.replication == Some(Replication::Synchronous) {
        args.extend(["-c".to_string(), synchronous_standby_names(db)]);
        if !plan.parameters.contains_key("synchronous_commit") {
            let on = parameters::SYNCHRONOUS_COMMIT;
            args.extend(["-c".to_string(), format!("synchronous_commit={on}")]);
        }
    }
    args.extend(["-c".to_string(), format!("hba_file={HBA_DIR}/{HBA_KEY}")]);
    args.extend(
        [
            "ssl=on".to_string(),
            format!("ssl_cert_file={TLS_DIR}/server.crt"),
            format!("ssl_key_file={TLS_DIR}/server.key"),
        ]
        .into_iter()
        .flat_map(|arg| ["-c".to_string(), arg]),
    );
    for timeout in ["wal_sender_timeout", "wal_receiver_timeout"] {
        if !plan.parameters.contains_key(timeout) {
            let value = parameters::REPLICATION_TIMEOUT;
            args.extend(["-c".to_string(), format!("{timeout}={value}")]);
        }
    }
    if !plan.parameters.contains_key("ssl_min_protocol_version") {
        args.extend([
            "-c".to_string(),
            format!("ssl_min_protocol_version={}", parameters::SSL_MIN_PROTOCOL),
        ]);
    }
    args.extend(archive::args(db));
    args.extend(parameters::args(&plan.parameters));
    args
}

/// `synchronous_standby_names`: any one of the instances, named as each
/// standby's `application_name` (its pod's name, which start.sh writes
/// into primary_conninfo), so that no other walsender (`pg_recvlogical`,
/// a `pg_basebackup`) confirms a commit. Every ordinal a Database may run
/// (a large one's), whatever its size: a change of size changes no
/// argument, and so restarts nothing.
fn synchronous_standby_names(db: &Database) -> String {
    let most = u32::try_from(super::spec::Size::Large.instances()).unwrap_or(3);
    let names: Vec<String> = (0..most)
        .map(|o| format!("\"{}\"", pod_name(db, o)))
        .collect();
    format!("synchronous_standby_names=ANY 1 ({})", names.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use serde_json::json;

    /// docs/failover.md: a StatefulSet made before failover keeps
    /// `OrderedReady` (the API server refuses a change of the field, and
    /// a refused StatefulSet would stop every answer); a new one starts its
    /// instances in parallel, since the primary need not be instance 0.
    #[test]
    fn a_statefulset_made_before_failover_keeps_ordered_ready() {
        let with = |policy: Option<&str>| Observed {
            statefulset: Some(
                fixtures::statefulset("orders")
                    .set("/spec/podManagementPolicy", json!(policy))
                    .typed(),
            ),
            ..Observed::default()
        };
        assert_eq!(
            pod_management_policy(&with(Some("OrderedReady"))),
            "OrderedReady"
        );
        assert_eq!(pod_management_policy(&with(Some("Parallel"))), "Parallel");
        assert_eq!(pod_management_policy(&with(None)), "Parallel");
        assert_eq!(pod_management_policy(&Observed::default()), "Parallel");
    }

    /// An instance of a template from before TLS serves no TLS: the rules
    /// it reads (`pg_hba.conf`) must keep letting it be reached without
    /// TLS while such a template may start one; the TLS rules are a key of
    /// their own, which the newer templates read.
    #[test]
    fn the_rules_without_tls_stay_while_a_template_from_before_tls_may_start_an_instance() {
        let db: Database = fixtures::orders()
            .spec(
                "postgresql",
                json!({"pgHba": ["host all all 10.0.0.0/8 scram-sha-256"]}),
            )
            .typed();
        let seen = |hba_file: &str, current: &str, update: &str| {
            Observed {
            statefulset: Some(
                fixtures::statefulset("orders")
                    .containers(json!([{"name": "postgres", "command": ["postgres", "-c", format!("hba_file={hba_file}")]}]))
                    .status(json!({"observedGeneration": 0, "currentRevision": current, "updateRevision": update}))
                    .typed(),
            ),
            config_maps: ["orders-hba".to_string()].into(),
            ..Observed::default()
        }
        };
        let keys = |seen: &Observed| -> Vec<String> {
            hba_config(&db, seen).data.unwrap().into_keys().collect()
        };
        let old = "/etc/opshooks/hba/pg_hba.conf";
        let new = "/etc/opshooks/hba/pg-hba-tls.conf";
        assert_eq!(
            keys(&seen(old, "a", "a")),
            ["pg-hba-tls.conf", "pg_hba.conf"]
        );
        assert_eq!(
            keys(&seen(new, "a", "b")),
            ["pg-hba-tls.conf", "pg_hba.conf"]
        );
        assert_eq!(keys(&seen(new, "b", "b")), ["pg-hba-tls.conf"]);
        let without = hba_config(&db, &seen(old, "a", "a")).data.unwrap();
        assert!(
            !without["pg_hba.conf"].contains("hostssl"),
            "{}",
            without["pg_hba.conf"]
        );
        assert!(without["pg_hba.conf"].contains("host all all 10.0.0.0/8 scram-sha-256"));
        assert!(without["pg-hba-tls.conf"].contains("hostnossl all all all reject"));
    }
}
