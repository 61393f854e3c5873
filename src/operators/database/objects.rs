//! What every Database feature builds with: the metadata and labels of its
//! objects, environment variables and volumes, a Job that runs one of our
//! scripts, an observed Job kept as it is, and a scoped identity. Nothing
//! here decides anything; it imports only the spec and the names.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    ConfigMapProjection, ConfigMapVolumeSource, Container, EmptyDirVolumeSource, EnvVar, KeyToPath,
    LocalObjectReference, PersistentVolumeClaimVolumeSource, PodSpec, PodTemplateSpec,
    ProjectedVolumeSource, ServiceAccount, ServiceAccountTokenProjection, Volume, VolumeMount,
    VolumeProjection,
};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::names::{credentials_secret_name, read_write_host, superuser_secret_name};
use super::spec::{Database, LABEL_DATABASE, PORT, database_name, name, namespace};
use crate::operators::backup_job::{self, Credential};
use crate::operators::common::{restricted_container, restricted_pod, standard_labels};
use crate::operators::expansion::shell_command;

/// The `app` label of the instances (the StatefulSet's selector).
pub(super) const APP: &str = "postgresql";
/// The `app` label of Job pods, which no Service selects.
pub(super) const JOB_APP: &str = "postgresql-job";
/// The `postgres` user of the official images, every container runs as it.
pub(super) const POSTGRES_UID: i64 = 999;

/// The name of the instances' `tls` init container.
pub(super) const TLS_CONTAINER: &str = "tls";

/// The metadata of a Database's object `object`: its namespace and labels.
pub(super) fn meta(db: &Database, object: String) -> ObjectMeta {
    ObjectMeta {
        name: Some(object),
        namespace: db.metadata.namespace.clone(),
        labels: Some(labels(db)),
        ..ObjectMeta::default()
    }
}

/// The labels of every object of a Database.
pub(super) fn labels(db: &Database) -> BTreeMap<String, String> {
    let mut labels = standard_labels(APP, name(db));
    labels.insert(LABEL_DATABASE.to_string(), name(db).to_string());
    labels
}

/// The labels of Job pods: never matching the StatefulSet's selector, so
/// the Services and the instance count never include them.
pub(super) fn job_labels(db: &Database) -> BTreeMap<String, String> {
    let mut labels = standard_labels(JOB_APP, name(db));
    labels.insert(LABEL_DATABASE.to_string(), name(db).to_string());
    labels
}

pub(super) fn secret_env(var: &str, secret: String, key: &str) -> EnvVar {
    backup_job::env_credential(
        var,
        &Credential::Secret {
            name: secret,
            key: key.to_string(),
        },
    )
}

pub(super) fn value_env(var: &str, value: impl AsRef<str>) -> EnvVar {
    backup_job::env(var, value)
}

pub(super) fn mount(volume: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: volume.to_string(),
        mount_path: path.to_string(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

/// The volume `volume` of the ConfigMap `config_map`: the role, mounted
/// where `start.sh` reads it, and the pg_hba.conf, where `hba_file` names
/// it.
pub(super) fn config_volume(volume: &str, config_map: String) -> Volume {
    Volume {
        name: volume.to_string(),
        config_map: Some(ConfigMapVolumeSource {
            name: config_map,
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    }
}

/// The scratch volume a Job's containers share at /work.
pub(super) fn work_volume() -> Volume {
    Volume {
        name: "work".to_string(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    }
}

/// A Job's volume named `volume` on the claim `claim`.
pub(super) fn claim_volume(volume: &str, claim: String) -> Volume {
    Volume {
        name: volume.to_string(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: claim,
            read_only: None,
        }),
        ..Volume::default()
    }
}

/// `spec.imagePullSecrets`, for every pod that runs the PostgreSQL image.
pub(super) fn pull_secrets(db: &Database) -> Option<Vec<LocalObjectReference>> {
    let secrets = &db.spec.image_pull_secrets;
    (!secrets.is_empty()).then(|| {
        secrets
            .iter()
            .map(|s| LocalObjectReference {
                name: s.name.clone(),
            })
            .collect()
    })
}

/// A container that runs one of our scripts with `/bin/sh -c`, as an
/// unprivileged user: `(name, image)`, the script, its environment (every
/// user value travels there, never in the script) and its mounts.
pub(super) fn script_container(
    (name, image): (&str, String),
    script: &str,
    env: Vec<EnvVar>,
    mounts: Option<Vec<VolumeMount>>,
) -> Container {
    Container {
        name: name.to_string(),
        image: Some(image),
        command: Some(shell_command(script)),
        env: Some(env),
        volume_mounts: mounts,
        security_context: Some(restricted_container()),
        ..Container::default()
    }
}

pub(super) fn script_job(db: &Database, job_name: String, pod: PodSpec, backoff: i32) -> Job {
    Job {
        metadata: meta(db, job_name),
        spec: Some(JobSpec {
            backoff_limit: Some(backoff),
            active_deadline_seconds: Some(6 * 3600),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(job_labels(db)),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    restart_policy: Some("Never".to_string()),
                    security_context: Some(restricted_pod(POSTGRES_UID)),
                    image_pull_secrets: pull_secrets(db),
                    ..pod
                }),
            },
            ..JobSpec::default()
        }),
        status: None,
    }
}

/// An observed Job that no builder makes (an older snapshot, a Job of a
/// version the spec moved past), kept while the Database is deleted. Jobs
/// are `OnDelete` children: Metacontroller never updates an existing one, so
/// its name is all the answer needs to keep it.
pub(super) fn kept_job(db: &Database, job_name: &str) -> Job {
    Job {
        metadata: meta(db, job_name.to_string()),
        spec: None,
        status: None,
    }
}

/// How a Job reaches the primary as the superuser: through the read-write
/// Service.
pub(super) fn superuser_env(db: &Database) -> Vec<EnvVar> {
    vec![
        value_env("PGHOST", read_write_host(db)),
        value_env("PGPORT", PORT.to_string()),
        value_env("PGUSER", "postgres"),
        secret_env("PGPASSWORD", superuser_secret_name(db), "password"),
        value_env("PGCONNECT_TIMEOUT", "30"),
    ]
}

/// A ServiceAccount `name` (its token mounted by default when `automount`),
/// a Role `name` of the one `rule`, and the RoleBinding between them: the
/// identity of the grow Job and of the instances' lease sidecar.
pub(super) fn identity(
    db: &Database,
    name: String,
    rules: Vec<PolicyRule>,
    automount: bool,
) -> (ServiceAccount, Role, RoleBinding) {
    let object = || meta(db, name.clone());
    (
        ServiceAccount {
            metadata: object(),
            automount_service_account_token: Some(automount),
            ..ServiceAccount::default()
        },
        Role {
            metadata: object(),
            rules: Some(rules),
        },
        RoleBinding {
            metadata: object(),
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".to_string(),
                kind: "Role".to_string(),
                name: name.clone(),
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".to_string(),
                name: name.clone(),
                namespace: Some(namespace(db).to_string()),
                ..Subject::default()
            }]),
        },
    )
}

/// A rule on objects of the core API group's `resource` named `names`.
pub(super) fn core_rule(resource: &str, verbs: &[&str], names: Vec<String>) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![String::new()]),
        resources: Some(vec![resource.to_string()]),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        resource_names: Some(names),
        ..PolicyRule::default()
    }
}

/// How long a projected token lives; the kubelet renews it at 80%.
const TOKEN_SECONDS: i64 = 3600;

/// A volume of the pod's ServiceAccount token (bound to the pod, for the
/// API server) and the cluster's CA, from the ConfigMap every namespace
/// has: mounted into the one container that talks to the API server, as
/// the pod mounts no token otherwise.
pub(super) fn api_credentials_volume(volume: &str) -> Volume {
    Volume {
        name: volume.to_string(),
        projected: Some(ProjectedVolumeSource {
            sources: Some(vec![
                VolumeProjection {
                    service_account_token: Some(ServiceAccountTokenProjection {
                        path: "token".to_string(),
                        expiration_seconds: Some(TOKEN_SECONDS),
                        audience: None,
                    }),
                    ..VolumeProjection::default()
                },
                VolumeProjection {
                    config_map: Some(ConfigMapProjection {
                        name: "kube-root-ca.crt".to_string(),
                        items: Some(vec![KeyToPath {
                            key: "ca.crt".to_string(),
                            path: "ca.crt".to_string(),
                            mode: None,
                        }]),
                        optional: None,
                    }),
                    ..VolumeProjection::default()
                },
            ]),
            default_mode: Some(0o440),
        }),
        ..Volume::default()
    }
}

/// The application user's name and password and the database's name, for
/// the Jobs that create or restore them.
pub(super) fn app_env(db: &Database) -> Vec<EnvVar> {
    vec![
        secret_env("APP_USER", credentials_secret_name(db), "username"),
        secret_env("APP_PASSWORD", credentials_secret_name(db), "password"),
        value_env("APP_DATABASE", database_name(db)),
    ]
}

/// The application user and database: made by the initial-configuration
/// Job, and by the restore before it restores into them.
pub(super) const INIT_APP_SCRIPT: &str = include_str!("init-app.sh");
