//! The objects of a Database, one builder each, from the spec, the
//! observed state and the [`Plan`]. Only fields we own are set.

use std::collections::BTreeMap;

use base64::Engine;
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{
    RollingUpdateStatefulSetStrategy, StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy,
    StatefulSetSpec, StatefulSetUpdateStrategy,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EnvVar, ExecAction,
    ObjectReference, PersistentVolumeClaim, PersistentVolumeClaimSpec, PodSpec, PodTemplateSpec,
    Probe, ResourceRequirements, Secret, SecretVolumeSource, Service, ServicePort, ServiceSpec,
    Volume, VolumeResourceRequirements,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::certificate;
use super::deletion::while_deleting;
use super::lease;
use super::monitoring;
use super::names::{
    backup_cron_name, ca_config_map_name, claim_name, generated_credentials_name, hba_name,
    headless_name, is_promote_job, jobs, monitor_secret_name, pod_name, read_only_name, role_name,
    superuser_secret_name, verify_name,
};
use super::names::{connection_name, initdb_name, instance_host, read_write_host, service_fqdn};
use super::objects::{
    APP, POSTGRES_UID, TLS_CONTAINER, claim_volume, config_volume, job_labels, kept_job, labels,
    meta, mount, pull_secrets, script_container, script_job, secret_env, superuser_env, value_env,
    work_volume,
};
use super::observed::Observed;
use super::parameters;
use super::placement;
use super::plan::{Plan, credentials_secret_name, has_generated_credentials};
use super::primary::{self, Primary};
use super::spec::{
    ANNOTATION_VERSION, Database, LABEL_DATABASE, Major, PORT, Replication, TEMPLATE_HASH, VOLUME,
    before_stamp, bootstrap_destination, database_name, issuer, name,
};
use super::tls;
use super::trust;
use crate::hook::Child;
use crate::hook::digest;
use crate::operator::{Context, HookError};
use crate::operators::backup_job::verification;
use crate::operators::backup_job::{self, Choice, Credential, Schedule, Source};
use crate::operators::common::{restricted_container, restricted_pod, selector_labels};
use crate::operators::expansion::shell_command;
use crate::operators::resources;

/// Runs on the primary's first start, from /docker-entrypoint-initdb.d.
pub const PRIMARY_INIT_SCRIPT: &str = include_str!("primary-init.sh");
/// The postgres container's command, on every start: judges the volume,
/// clones or rejoins a standby, then starts the server.
pub const START_SCRIPT: &str = include_str!("start.sh");
/// The promote Job: promotes a standby once it is safe.
pub const PROMOTE_SCRIPT: &str = include_str!("promote.sh");
/// The postgres container's probes: `ready` and `live`.
pub const PROBE_SCRIPT: &str = include_str!("probe.sh");
/// The initial-configuration Job.
pub const INIT_APP_SCRIPT: &str = include_str!("init-app.sh");
/// The upgrade Job's restore into the new version.
pub const UPGRADE_SCRIPT: &str = include_str!("upgrade.sh");
/// The bootstrap's restore Job: restores the chosen dump.
pub const RESTORE_SCRIPT: &str = include_str!("restore.sh");
/// The upgrade Job's init container: dumps the stopped old version.
pub const DUMP_STOPPED_SCRIPT: &str = include_str!("dump-stopped.sh");
/// The instances' `tls` init container: the server's certificate and key
/// from spec.tls's Secret, or self-signed.
pub const TLS_SCRIPT: &str = include_str!("tls.sh");

const DATA_DIR: &str = "/var/lib/postgresql/data";
/// Where every instance reads the role ConfigMap.
const ROLE_DIR: &str = "/etc/opshooks/role";
/// Where every instance reads the pg_hba.conf of `spec.postgresql.pgHba`.
const HBA_DIR: &str = "/etc/opshooks/hba";
/// The pg_hba.conf's key in its ConfigMap, and its file in [`HBA_DIR`].
const HBA_KEY: &str = "pg-hba-tls.conf";
/// The key of the pg_hba.conf that templates from before TLS read (their
/// `hba_file`), without TLS rules: kept while such a template may still
/// start an instance, which serves no TLS and would refuse every TCP
/// connection with the rules of [`HBA_KEY`].
const HBA_KEY_WITHOUT_TLS: &str = "pg_hba.conf";
/// Annotation on the instances' pod template: a hash of the pg_hba.conf
/// they read, so that a change of its lines rolls out as a new template
/// (the server reads the file when it starts).
const HBA_HASH: &str = "opshooks.io/pg-hba-hash";
/// Where the server reads its certificate and key (`server.crt`,
/// `server.key`, and `ca.crt` when spec.tls names a Secret): on the
/// instance's volume, beside the data directories, so a clone does not
/// carry it and an upgrade keeps it. `tls.sh` writes it.
const TLS_DIR: &str = "/var/lib/postgresql/data/tls";
/// Where `spec.tls`'s Secret is mounted.
const TLS_SOURCE: &str = "/etc/opshooks/tls";
/// Where the `tls` init container reads the CA bundle (`trust`).
const TLS_TRUST: &str = "/etc/opshooks/tls-trust";
/// The CA bundle's volume in the instances' pods.
const TRUST_VOLUME: &str = "tls-trust";

/// Every desired child of a Database.
pub fn build(
    db: &Database,
    seen: &Observed,
    plan: &Plan,
    ctx: &Context,
) -> Result<Vec<Child>, HookError> {
    let mut out: Vec<Child> = secrets(db, seen, ctx).iter().map(Child::new).collect();
    out.push(Child::new(&connection(db, &plan.tls)));
    out.push(Child::new(&initdb_scripts(db)));
    out.push(Child::new(&role(db, plan)));
    out.push(Child::new(&hba_config(db, seen)));
    let [headless, read_write, read_only] = services(db, &plan.primary);
    out.push(Child::new(&headless));
    // Nobody reads or writes before the bootstrap's restore succeeded.
    if plan.restore.lets_serve() {
        out.push(Child::new(&read_write));
        out.push(Child::new(&read_only));
        out.push(Child::new(&read_only_endpoints(db, seen, &plan.primary)));
    }
    if plan.keep_statefulset {
        out.push(Child::new(&statefulset(db, seen, plan)));
    }
    // The chart declares Certificates only where cert-manager runs; sync
    // refuses an issuer without them, so only a deletion gets here then.
    if seen.certificates.is_some() {
        let cert = certificate::certificate(db).or_else(|| certificate::kept(db, seen));
        out.extend(cert.as_ref().map(Child::new));
    }
    out.extend(trust::config_map(db, seen).as_ref().map(Child::new));
    if lease::kept(db, seen) {
        let (account, role, binding) = lease::children(db);
        out.push(Child::new(&account));
        out.push(Child::new(&role));
        out.push(Child::new(&binding));
    }
    out.extend(disruption_budget(db).as_ref().map(Child::new));
    if plan.init_job {
        out.push(Child::new(&init_job(db, plan)));
    }
    out.extend(
        monitoring::role_job(db, seen, plan)
            .as_ref()
            .map(Child::new),
    );
    out.extend(
        monitoring::pod_monitor(db, seen, APP)
            .as_ref()
            .map(Child::new),
    );
    out.extend(promote_jobs(db, seen, plan).iter().map(Child::new));
    out.extend(upgrade_jobs(db, plan).iter().map(Child::new));
    if plan.restore_job {
        out.extend(restore_job(db, plan).as_ref().map(Child::new));
    }
    if plan.snapshot_job {
        out.extend(snapshot_job(db, plan).as_ref().map(Child::new));
    }
    if let Some(cron) = backup_cron_job(db, plan) {
        out.push(Child::new(&cron));
    }
    if let Some(run) = verification(db, plan) {
        let verify = db.spec.backup.as_ref().and_then(|b| b.verify.as_ref());
        if let Some(schedule) = verify.and_then(|v| v.schedule.as_deref()) {
            out.push(Child::new(
                &run.scheduled(meta(db, verify_name(db)), schedule.trim()),
            ));
        }
        if let Some(at) = plan.verify_after {
            out.push(Child::new(&run.after_backup(meta(db, verify_name(db)), at)));
        }
    }
    if plan.growth.growing() && !plan.deleting {
        let (account, role, binding, job) = plan.growth.children(db, seen);
        out.push(Child::new(&account));
        out.push(Child::new(&role));
        out.push(Child::new(&binding));
        out.extend(job.as_ref().map(Child::new));
    }
    if plan.deleting {
        out = while_deleting(db, seen, plan, out);
    }
    Ok(out)
}

fn password(bytes: &[u8]) -> ByteString {
    // URL-safe base64 of 21 random bytes: 28 characters, 168 bits, safe in
    // connection strings.
    ByteString(
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(bytes)
            .into_bytes(),
    )
}

/// The Secrets we own. Once observed, a Secret's data is answered back
/// unchanged: a sync never rotates a password.
pub fn secrets(db: &Database, seen: &Observed, ctx: &Context) -> Vec<Secret> {
    let e = &ctx.entropy;
    let mut wanted = vec![(
        superuser_secret_name(db),
        BTreeMap::from([
            ("password".to_string(), password(&e[0..21])),
            ("replication-password".to_string(), password(&e[21..42])),
        ]),
    )];
    let generated_credentials = generated_credentials_name(db);
    if has_generated_credentials(db, seen) {
        let user = db.spec.user.clone().unwrap_or_else(|| name(db).to_string());
        wanted.push((
            generated_credentials,
            BTreeMap::from([
                ("username".to_string(), ByteString(user.into_bytes())),
                ("password".to_string(), password(&e[42..63])),
            ]),
        ));
    }
    if monitoring::enabled(db).is_some() {
        wanted.push((
            monitor_secret_name(db),
            monitoring::secret_data(password(&e[63..84])),
        ));
    }
    wanted
        .into_iter()
        .map(|(secret_name, generated)| {
            let data = seen
                .secrets
                .get(&secret_name)
                .and_then(|s| s.data.clone())
                .unwrap_or(generated);
            Secret {
                metadata: meta(db, secret_name),
                data: Some(data),
                immutable: Some(true),
                type_: Some("Opaque".to_string()),
                ..Secret::default()
            }
        })
        .collect()
}

/// Connection details for applications: where, which database, whose
/// credentials, and how to connect over TLS (`sslmode`, and with a CA the
/// Secret, or under an issuer the ConfigMap, and the key that hold the
/// CAs to trust: mount only that key).
pub fn connection(db: &Database, client: &tls::Client) -> ConfigMap {
    let mut tls_data = vec![("sslmode".to_string(), client.mode.to_string())];
    if let Some(ca) = client.verified_by() {
        let (field, object) = match ca {
            tls::Ca::Secret(secret) => ("sslrootcertSecret", secret),
            tls::Ca::ConfigMap(config_map) => ("sslrootcertConfigMap", config_map),
        };
        tls_data.push((field.to_string(), object.clone()));
        tls_data.push(("sslrootcertKey".to_string(), tls::CA_KEY.to_string()));
    }
    let mut data = BTreeMap::from([
        ("host".to_string(), service_fqdn(db, name(db))),
        (
            "readOnlyHost".to_string(),
            service_fqdn(db, &read_only_name(db)),
        ),
        ("port".to_string(), PORT.to_string()),
        ("database".to_string(), database_name(db)),
        ("credentialsSecret".to_string(), credentials_secret_name(db)),
    ]);
    data.extend(tls_data);
    ConfigMap {
        metadata: meta(db, connection_name(db)),
        data: Some(data),
        ..ConfigMap::default()
    }
}

/// Who the primary is, for every instance to read when it starts
/// (`start.sh` reads it mounted at [`ROLE_DIR`]): the designated primary's
/// pod and where it answers (`host`: `probe.sh` asks it whether it is
/// promoted yet before it fences the primary it replaces), the epoch,
/// whether the Database was ever initialized (an instance with an empty
/// volume then never initializes a new cluster), and the Database's uid
/// (`database`: an instance whose volume recorded another Database's tells
/// a re-creation over retained volumes); during a switchover, `change`
/// says so.
pub fn role(db: &Database, plan: &Plan) -> ConfigMap {
    let mut data = BTreeMap::from([
        ("primary".to_string(), pod_name(db, plan.primary.designated)),
        (
            "host".to_string(),
            instance_host(db, plan.primary.designated),
        ),
        ("epoch".to_string(), plan.primary.epoch.to_string()),
        ("initialized".to_string(), plan.initialized.to_string()),
    ]);
    if let Some(uid) = &db.metadata.uid {
        data.insert("database".to_string(), uid.clone());
    }
    // A switchover is one from its designation: a rollout that moves on or
    // a primary lost before its promote Job exists does not make it a
    // failover half-way (which would skip the failover delay).
    if plan.primary.changing() && plan.primary.planned {
        data.insert("change".to_string(), "switchover".to_string());
    }
    ConfigMap {
        metadata: meta(db, role_name(db)),
        data: Some(data),
        ..ConfigMap::default()
    }
}

/// The pg_hba.conf every instance reads (`hba_file`): the operator's own
/// rules (the local socket; over TCP, TLS only), `spec.postgresql.pgHba`'s
/// lines, then the catch-all. The one in the data directory, written at
/// initialization without TLS, is never read. While a template from
/// before TLS may still start an instance (the StatefulSet's template is
/// one, or a rollout is under way), the rules without TLS that it reads
/// stay beside them.
pub fn hba_config(db: &Database, seen: &Observed) -> ConfigMap {
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
pub fn initdb_scripts(db: &Database) -> ConfigMap {
    ConfigMap {
        metadata: meta(db, initdb_name(db)),
        data: Some(BTreeMap::from([(
            "10-replication.sh".to_string(),
            PRIMARY_INIT_SCRIPT.to_string(),
        )])),
        ..ConfigMap::default()
    }
}

fn service_port() -> ServicePort {
    ServicePort {
        name: Some("postgresql".to_string()),
        port: PORT,
        target_port: Some(IntOrString::Int(PORT)),
        protocol: Some("TCP".to_string()),
        ..ServicePort::default()
    }
}

/// The headless Service of the StatefulSet, the read-write Service of the
/// primary, and the read-only Service of the standbys (its endpoints are
/// ours: see [`read_only_endpoints`]). The read-write Service selects the
/// designated primary, but during a switchover, the primary it replaces
/// until the candidate is promoted: the standbys stream from it through
/// this Service, and the promote Job stops its writes first.
pub fn services(db: &Database, designated: &Primary) -> [Service; 3] {
    let selector = selector_labels(APP, name(db));
    let mut primary = selector.clone();
    let selected = match designated.serving {
        Some(serving) if designated.planned => serving,
        _ => designated.designated,
    };
    primary.insert(
        "statefulset.kubernetes.io/pod-name".to_string(),
        pod_name(db, selected),
    );
    let service = |object: String, spec: ServiceSpec| Service {
        metadata: meta(db, object),
        spec: Some(spec),
        status: None,
    };
    [
        service(
            headless_name(db),
            ServiceSpec {
                cluster_ip: Some("None".to_string()),
                publish_not_ready_addresses: Some(true),
                selector: Some(selector),
                ports: Some(vec![service_port()]),
                ..ServiceSpec::default()
            },
        ),
        service(
            name(db).to_string(),
            ServiceSpec {
                selector: Some(primary),
                ports: Some(vec![service_port()]),
                ..ServiceSpec::default()
            },
        ),
        service(
            read_only_name(db),
            ServiceSpec {
                ports: Some(vec![service_port()]),
                ..ServiceSpec::default()
            },
        ),
    ]
}

/// The read-only Service's endpoints: the ready standbys, as observed:
/// neither the designated primary nor, during a change, the one it
/// replaces. A Service selector cannot say "every instance but one".
pub fn read_only_endpoints(db: &Database, seen: &Observed, primary: &Primary) -> EndpointSlice {
    let mut slice_labels = labels(db);
    slice_labels.insert("kubernetes.io/service-name".to_string(), read_only_name(db));
    slice_labels.insert(
        "endpointslice.kubernetes.io/managed-by".to_string(),
        "opshooks.io".to_string(),
    );
    let endpoints = seen
        .instances(db)
        .filter(|(index, p)| {
            *index != primary.designated && Some(*index) != primary.serving && p.is_ready()
        })
        .map(|(_, p)| p)
        .filter_map(|p| {
            let ip = p.status.as_ref()?.pod_ip.clone()?;
            ip.parse::<std::net::Ipv4Addr>().ok()?;
            Some(Endpoint {
                addresses: vec![ip],
                conditions: Some(EndpointConditions {
                    ready: Some(true),
                    ..EndpointConditions::default()
                }),
                target_ref: Some(ObjectReference {
                    kind: Some("Pod".to_string()),
                    name: p.metadata.name.clone(),
                    namespace: db.metadata.namespace.clone(),
                    ..ObjectReference::default()
                }),
                ..Endpoint::default()
            })
        })
        .collect();
    EndpointSlice {
        metadata: ObjectMeta {
            labels: Some(slice_labels),
            ..meta(db, read_only_name(db))
        },
        address_type: "IPv4".to_string(),
        endpoints,
        ports: Some(vec![EndpointPort {
            name: Some("postgresql".to_string()),
            port: Some(PORT),
            protocol: Some("TCP".to_string()),
            app_protocol: None,
        }]),
    }
}

/// The data directory of a major: versioned, so an upgrade builds the new
/// version beside the old one on the same volume.
pub fn pgdata(version: Major) -> String {
    version.data_dir(DATA_DIR)
}

/// `probe.sh ready` or `probe.sh live`.
fn script_probe(what: &str) -> Probe {
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
pub fn statefulset(db: &Database, seen: &Observed, plan: &Plan) -> StatefulSet {
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
        config_volume("hba", hba_name(db)),
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
    monitoring::apply(db, &mut pod);
    pod
}

/// The PodDisruptionBudget of the instances (`spec.enablePDB`): one
/// eviction at a time once the size asks for two or more. It follows the
/// size, not the instances running: an upgrade that stops them all keeps
/// it, a budget over no pods.
pub fn disruption_budget(db: &Database) -> Option<PodDisruptionBudget> {
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
fn instance_env(db: &Database, plan: &Plan) -> Vec<EnvVar> {
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

/// `MAX_SILENCE_SECONDS` of `probe.sh` and `promote.sh`: a standby last
/// current with a primary longer ago is not ready and is never promoted.
/// A standby that streamed until the primary failed is checked by the
/// promote Job at most this long after: the failover delay, plus the
/// primary's readiness failing (3 probes 5 s apart), the hook's answer,
/// the Job's start and one probe period, for which a minute allows.
fn max_silence(db: &Database) -> EnvVar {
    let seconds = primary::delay_seconds(db).saturating_add(60);
    value_env("MAX_SILENCE_SECONDS", seconds.to_string())
}

/// `spec.failover.maxStandbyLag` in bytes: a standby further behind is not
/// ready, so it leaves the read-only endpoints and is no failover candidate.
fn max_standby_lag(db: &Database) -> Option<u64> {
    let lag = db.spec.failover.as_ref()?.max_standby_lag.as_deref()?;
    crate::operators::validate::quantity_bytes(lag)
}

/// Each instance's CPU and memory: `spec.resources`, else the size's, as
/// requests and limits.
fn instance_resources(db: &Database) -> ResourceRequirements {
    if let Some(given) = &db.spec.resources {
        return given.clone();
    }
    let (cpu, memory) = db.spec.size.resources();
    let resources = BTreeMap::from([
        ("cpu".to_string(), Quantity(cpu.to_string())),
        ("memory".to_string(), Quantity(memory.to_string())),
    ]);
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
        mount("hba", HBA_DIR, true),
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
        // some 4 s, the first part of the RTO the README states.
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
fn claim_template(db: &Database, size: &str) -> PersistentVolumeClaim {
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
pub fn postgres_args(db: &Database, plan: &Plan) -> Vec<String> {
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

fn app_env(db: &Database) -> Vec<EnvVar> {
    vec![
        secret_env("APP_USER", credentials_secret_name(db), "username"),
        secret_env("APP_PASSWORD", credentials_secret_name(db), "password"),
        value_env("APP_DATABASE", database_name(db)),
    ]
}

/// The initial configuration: the application user and database.
pub fn init_job(db: &Database, plan: &Plan) -> Job {
    let mut env = superuser_env(db);
    env.extend(app_env(db));
    let container = script_container(
        ("init", plan.images.image(plan.version)),
        INIT_APP_SCRIPT,
        env,
        None,
    );
    let mut pod = PodSpec {
        containers: vec![container],
        ..PodSpec::default()
    };
    plan.tls.apply(&mut pod, &["init"]);
    script_job(db, jobs::init(db), pod, 3)
}

/// How backup jobs reach this Database: the primary, as the superuser,
/// with the running version's pg_dump (`image`).
pub fn source(db: &Database, image: String) -> Source {
    Source {
        host: read_write_host(db),
        port: PORT,
        database: database_name(db),
        user: Credential::Value("postgres".to_string()),
        password: Credential::Secret {
            name: superuser_secret_name(db),
            key: "password".to_string(),
        },
        image,
    }
}

fn backup_plan<'a>(
    db: &'a Database,
    source: &'a Source,
    dump_name: &'a str,
    retention_days: Option<i32>,
) -> Option<backup_job::Plan<'a>> {
    let backup = db.spec.backup.as_ref()?;
    Some(backup_job::Plan {
        source,
        destination: &backup.destination,
        name: dump_name,
        retention_days,
        retention_requires_verified: backup.verify.is_some(),
        upload_image: backup.upload_image(),
        service_account: backup.service_account_name.as_deref(),
        resources: backup.resources.as_ref(),
        active_deadline_seconds: 6 * 3600,
        labels: job_labels(db),
    })
}

fn backup_job(db: &Database, job_name: String, image: String, client: &tls::Client) -> Option<Job> {
    let source = source(db, image);
    let plan = backup_plan(db, &source, &job_name, None)?;
    let mut spec = backup_job::job_spec(&plan);
    if let Some(pod) = spec.template.spec.as_mut() {
        client.apply(pod, &["dump"]);
    }
    Some(Job {
        metadata: meta(db, job_name.clone()),
        spec: Some(spec),
        status: None,
    })
}

/// The final snapshot, a dump with the backup job, before deletion.
pub fn snapshot_job(db: &Database, plan: &Plan) -> Option<Job> {
    backup_job(
        db,
        jobs::snapshot(db),
        plan.images.image(plan.version),
        &plan.tls,
    )
}

/// The scheduled backups, when enabled.
pub fn backup_cron_job(db: &Database, plan: &Plan) -> Option<k8s_openapi::api::batch::v1::CronJob> {
    // A schedule before the bootstrap's restore would store empty dumps
    // under this Database's name, newer than the one it restores.
    let backup = db
        .spec
        .backup
        .as_ref()
        .filter(|b| b.enabled && plan.restore.lets_serve())?;
    let source = source(db, plan.images.image(plan.version));
    let dump_name = name(db).to_string();
    let job_plan = backup_plan(db, &source, &dump_name, backup.retention_days)?;
    let schedule = Schedule {
        cron: backup.schedule.as_deref()?.trim(),
        time_zone: None,
        suspend: false,
        history: (3, 3),
    };
    let mut cron = backup_job::scheduled(meta(db, backup_cron_name(db)), &schedule, &job_plan);
    let pod = cron
        .spec
        .as_mut()
        .and_then(|s| s.job_template.spec.as_mut())
        .and_then(|j| j.template.spec.as_mut());
    if let Some(pod) = pod {
        plan.tls.apply(pod, &["dump"]);
    }
    Some(cron)
}

/// The Jobs of an upgrade, as the plan decided: the pre-upgrade backup of
/// the running version and the restore into the new one.
pub fn upgrade_jobs(db: &Database, plan: &Plan) -> Vec<Job> {
    let (from, to) = (plan.running, plan.target);
    let mut out = Vec::new();
    if plan.pre_upgrade_job {
        out.extend(backup_job(
            db,
            jobs::pre_upgrade(db, to),
            plan.images.image(from),
            &plan.tls,
        ));
    }
    if plan.upgrade_job {
        out.push(upgrade_job(db, plan, from, to));
    }
    out
}

/// The restore into `to`, while every instance is stopped: dump the old
/// version from its own volume (nothing can write any more, so the dump is
/// complete), build the new version's cluster beside the old one, restore.
/// The S3 pre-upgrade backup taken before stopping stays as a safety copy.
pub fn upgrade_job(db: &Database, plan: &Plan, from: Major, to: Major) -> Job {
    // Whether a restore may start (only after the S3 safety copy) is the
    // plan's decision; one that started is always built, to be kept.
    let dump = "/work/dump.pgdump";
    let dump_env = vec![
        value_env("OLD_PGDATA", pgdata(from)),
        value_env("DUMP", dump),
        value_env("PGDATABASE", database_name(db)),
    ];
    let mut env = vec![
        value_env("NEW_PGDATA", pgdata(to)),
        value_env("OLD_PGDATA", pgdata(from)),
        value_env("DUMP", dump),
        secret_env("POSTGRES_PASSWORD", superuser_secret_name(db), "password"),
        secret_env(
            "REPLICATION_PASSWORD",
            superuser_secret_name(db),
            "replication-password",
        ),
    ];
    env.extend(app_env(db));
    let mounts = vec![
        mount("work", "/work", false),
        mount("data", DATA_DIR, false),
    ];
    let pod = PodSpec {
        init_containers: Some(vec![script_container(
            ("dump", plan.images.image(from)),
            DUMP_STOPPED_SCRIPT,
            dump_env,
            Some(mounts.clone()),
        )]),
        containers: vec![script_container(
            ("upgrade", plan.images.image(to)),
            UPGRADE_SCRIPT,
            env,
            Some(mounts),
        )],
        volumes: Some(vec![
            work_volume(),
            claim_volume("data", claim_name(db, plan.primary.designated)),
        ]),
        ..PodSpec::default()
    };
    script_job(db, jobs::upgrade(db, to), pod, 1)
}

/// The restore of `spec.bootstrap`'s dump into the new primary, before
/// anyone can write: `select` chooses the dump and downloads it, `init`
/// creates the application user and database (as the init Job does), and
/// `restore` restores the dump into it in one transaction, everything owned
/// by the application user. It reaches the designated primary through the
/// headless Service, since the read-write Service does not exist yet.
pub fn restore_job(db: &Database, plan: &Plan) -> Option<Job> {
    let bootstrap = db.spec.bootstrap.as_ref()?;
    let destination = bootstrap_destination(db)?;
    // The store is read with the Database's backup settings when it has
    // them (the same account reads what it wrote).
    let backup = db.spec.backup.as_ref();
    let upload_image = backup.map_or(backup_job::DEFAULT_UPLOAD_IMAGE, |b| b.upload_image());
    let before = bootstrap
        .before
        .as_deref()
        .and_then(|b| before_stamp(b).ok());
    let choice = match (&bootstrap.key, &bootstrap.database, &bootstrap.backup) {
        (Some(key), _, _) => Choice::Key(key.clone()),
        (None, Some(database), _) => Choice::Newest {
            names: jobs::dump_names(database),
            before,
        },
        (None, None, Some(backup)) => Choice::Newest {
            names: vec![backup.clone()],
            before,
        },
        (None, None, None) => return None,
    };
    let connection = vec![
        value_env("PGHOST", instance_host(db, plan.primary.designated)),
        value_env("PGPORT", PORT.to_string()),
        value_env("PGUSER", "postgres"),
        secret_env("PGPASSWORD", superuser_secret_name(db), "password"),
        value_env("PGCONNECT_TIMEOUT", "30"),
    ];
    let mut init_env = connection.clone();
    init_env.extend(app_env(db));
    let mut restore_env = connection;
    restore_env.extend([
        value_env("WORK_DIR", "/work"),
        value_env("PGDATABASE", database_name(db)),
        secret_env("APP_USER", credentials_secret_name(db), "username"),
    ]);
    let image = plan.images.image(plan.version);
    let given = backup.and_then(|b| b.resources.as_ref());
    let with_resources = |container: Container| Container {
        resources: Some(resources::backup(given)),
        ..container
    };
    let pod = PodSpec {
        init_containers: Some(vec![
            backup_job::select_container(destination, &choice, upload_image, given),
            with_resources(script_container(
                ("init", image.clone()),
                INIT_APP_SCRIPT,
                init_env,
                None,
            )),
        ]),
        containers: vec![with_resources(script_container(
            ("restore", image),
            RESTORE_SCRIPT,
            restore_env,
            Some(vec![mount("work", "/work", false)]),
        ))],
        volumes: Some(vec![work_volume()]),
        service_account_name: backup.and_then(|b| b.service_account_name.clone()),
        ..PodSpec::default()
    };
    let mut pod = pod;
    plan.tls.apply(&mut pod, &["init", "restore"]);
    Some(script_job(db, jobs::restore(db), pod, 1))
}

/// The promote Jobs: every observed one is kept (a Job runs once, and its
/// report is the record of what it did), and the plan's, if any, made.
pub fn promote_jobs(db: &Database, seen: &Observed, plan: &Plan) -> Vec<Job> {
    let wanted = plan.primary.promote_job.as_deref();
    let mut out: Vec<Job> = seen
        .jobs
        .keys()
        .filter(|job| is_promote_job(db, job) && Some(job.as_str()) != wanted)
        .map(|job| kept_job(db, job))
        .collect();
    out.extend(wanted.map(|_| promote_job(db, plan, seen.template_hash())));
    out
}

/// The promote Job of the designated standby: promotes it over the
/// network (`promote.sh`) once it is the most advanced standby and the old
/// primary does not answer as one; refuses otherwise, changing nothing.
/// Annotated with the hash of the instances' template last written
/// (`template`), so the switchovers a rollout of that template had refused
/// can be counted.
fn promote_job(db: &Database, plan: &Plan, template: Option<&str>) -> Job {
    let primary = &plan.primary;
    let others: Vec<String> = (0..u32::try_from(plan.replicas).unwrap_or(0))
        .filter(|o| *o != primary.designated && Some(*o) != primary.serving)
        .map(|o| instance_host(db, o))
        .collect();
    let mut env = vec![
        value_env("CANDIDATE", instance_host(db, primary.designated)),
        value_env(
            "OLD_PRIMARY",
            primary
                .serving
                .map(|o| instance_host(db, o))
                .unwrap_or_default(),
        ),
        value_env("STANDBYS", others.join(" ")),
        value_env(
            "SYNCHRONOUS",
            (db.spec.replication == Some(Replication::Synchronous)).to_string(),
        ),
        value_env(
            "MODE",
            if primary.planned {
                primary::SWITCHOVER_MODE
            } else {
                "failover"
            },
        ),
        // The role the instances must read before anything is promoted.
        value_env("EXPECT_PRIMARY", pod_name(db, primary.designated)),
        value_env("EXPECT_EPOCH", primary.epoch.to_string()),
        value_env("ROLE_DIR", ROLE_DIR),
        secret_env("PGPASSWORD", superuser_secret_name(db), "password"),
        value_env("CONNECT_TIMEOUT", "5"),
        max_silence(db),
    ];
    if let Some(bytes) = max_standby_lag(db) {
        env.push(value_env("MAX_LAG_BYTES", bytes.to_string()));
    }
    if lease::enabled(db) {
        env.extend(lease::script_env());
    }
    let container = script_container(
        ("promote", plan.images.image(plan.version)),
        PROMOTE_SCRIPT,
        env,
        None,
    );
    let job_name = primary
        .promote_job
        .clone()
        .unwrap_or_else(|| super::names::promote_job(db, primary.epoch, primary.designated));
    let mut pod = PodSpec {
        containers: vec![container],
        ..PodSpec::default()
    };
    plan.tls.apply(&mut pod, &["promote"]);
    let mut job = script_job(db, job_name, pod, 0);
    if let Some(hash) = template {
        job.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(TEMPLATE_HASH.to_string(), hash.to_string());
    }
    job
}

/// How this Database's dumps are verified, once it serves: the newest of
/// them (scheduled, pre-upgrade or snapshot), restored with the running
/// major's image (the dumps' own or newer).
fn verification<'a>(db: &'a Database, plan: &Plan) -> Option<verification::Run<'a>> {
    let backup = db.spec.backup.as_ref()?;
    backup.verify.as_ref()?;
    plan.restore.lets_serve().then(|| verification::Run {
        destination: &backup.destination,
        names: jobs::dump_names(name(db)),
        image: plan.images.image(plan.version),
        upload_image: backup.upload_image(),
        service_account: backup.service_account_name.as_deref(),
        resources: backup.resources.as_ref(),
        labels: job_labels(db),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use serde_json::json;

    /// README Failover: a StatefulSet made before failover keeps
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
        let db: Database = serde_json::from_value(json!({
            "metadata": {"name": "orders", "namespace": "prod"},
            "spec": {"version": "16", "size": "medium", "storage": {"size": "1Gi"}, "deletionPolicy": "Retain",
                     "postgresql": {"pgHba": ["host all all 10.0.0.0/8 scram-sha-256"]}}
        }))
        .unwrap();
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
