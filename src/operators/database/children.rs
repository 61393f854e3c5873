//! The objects of a Database, one builder each, from the spec, the
//! observed state and the [`Plan`]. Only fields we own are set.

use std::collections::BTreeMap;

use base64::Engine;
use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    ConfigMap, ObjectReference, PodSpec, Secret, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::archive;
use super::backups;
use super::certificate;
use super::deletion::while_deleting;
use super::instances::{disruption_budget, hba_config, initdb_scripts, statefulset};
use super::monitoring;
use super::names::{
    connection_name, credentials_secret_name, generated_credentials_name, headless_name,
    instance_host, jobs, monitor_secret_name, pod_name, read_only_name, role_name, service_fqdn,
    superuser_secret_name,
};
use super::objects::{
    APP, INIT_APP_SCRIPT, app_env, labels, meta, script_container, script_job, superuser_env,
};
use super::observed::Observed;
use super::plan::{Plan, has_generated_credentials};
use super::primary::lease;
use super::primary::{self, Primary};
use super::restore;
use super::spec::{Database, PORT, database_name, name};
use super::tls;
use super::trust;
use super::upgrade;
use crate::hook::Child;
use crate::operator::{Context, HookError};
use crate::operators::common::selector_labels;

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
    out.extend(archive::scripts(db, seen, plan).map(|scripts| Child::new(&scripts)));
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
    // The instances' identity: the lease's, and the archiver's report.
    out.extend(archive::report::config_map(db).as_ref().map(Child::new));
    if lease::kept(db, seen) || archive::enabled(db).is_some() {
        let (account, role, binding) = lease::children(db, archive::report::rule(db));
        out.extend([
            Child::new(&account),
            Child::new(&role),
            Child::new(&binding),
        ]);
    }
    out.extend(disruption_budget(db).as_ref().map(Child::new));
    if plan.init_job {
        out.push(Child::new(&init_job(db, plan)));
    }
    out.extend(monitoring::children(db, seen, plan));
    out.extend(jobs(db, seen, plan));
    out.extend(backups::children(db, plan));
    out.extend(archive::verification::cron_job(db, plan).map(|cron| Child::new(&cron)));
    if plan.growth.growing() && !plan.deleting {
        let (account, role, binding, job) = plan.growth.children(db, seen);
        out.extend([
            Child::new(&account),
            Child::new(&role),
            Child::new(&binding),
        ]);
        out.extend(job.as_ref().map(Child::new));
    }
    if plan.deleting {
        out = while_deleting(db, seen, plan, out);
    }
    Ok(out)
}

/// The Jobs of a failover or switchover, of an upgrade, and of the
/// bootstrap's restore.
fn jobs(db: &Database, seen: &Observed, plan: &Plan) -> Vec<Child> {
    let mut out = Vec::new();
    let promote = primary::jobs::Build {
        replicas: plan.replicas,
        image: plan.images.image(plan.version),
        tls: &plan.tls,
        template: seen.template_hash(),
    };
    out.extend(
        primary::jobs::promote_jobs(db, seen, &plan.primary, &promote)
            .iter()
            .map(Child::new),
    );
    out.extend(upgrade_jobs(db, plan).iter().map(Child::new));
    if plan.restore_job {
        let image = plan.images.image(plan.version);
        let job = restore::job(db, plan.primary.designated, image, &plan.tls);
        out.extend(job.as_ref().map(Child::new));
    }
    out
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
/// (`start.sh` reads it mounted at [`ROLE_DIR`](super::names::ROLE_DIR)): the designated primary's
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

/// The upgrade's Jobs, from what the plan decided of it.
pub(super) fn upgrade_jobs(db: &Database, plan: &Plan) -> Vec<Job> {
    let build = upgrade::Build {
        from: plan.running,
        to: plan.upgrade.target,
        pre_upgrade_job: plan.upgrade.pre_upgrade_job,
        upgrade_job: plan.upgrade.upgrade_job,
        images: &plan.images,
        tls: &plan.tls,
        designated: plan.primary.designated,
    };
    upgrade::jobs(db, &build)
}
