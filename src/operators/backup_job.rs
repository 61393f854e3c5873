//! The backup job: one pod that dumps a PostgreSQL database and streams it,
//! compressed, to S3, then prunes old dumps. Shared by the Backup operator's
//! CronJob and the Database operator's scheduled, pre-upgrade and
//! pre-delete backups, so there is one backup procedure to review and test:
//! where dumps go ([`Destination`]), the Job itself ([`job_spec`]), its
//! schedule ([`scheduled`]) and how a run ended ([`run_status`]).
//!
//! Two containers share a FIFO on an emptyDir: `dump` runs pg_dump from the
//! database's own image (so the client matches the server's major version),
//! `upload` runs the AWS CLI. The scripts (`backup_job/dump.sh`,
//! `backup_job/upload.sh`) are constant text: every user value reaches them through the
//! environment, so nothing a user writes can be read as shell, and every
//! value passes the kubelet's `$(VAR)` expansion as written
//! ([`crate::operators::expansion`]).

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{CronJob, CronJobSpec, Job, JobSpec, JobTemplateSpec};
use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EnvVar, EnvVarSource, PodSpec, PodTemplateSpec,
    ResourceRequirements, SecretKeySelector, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::operator::InvalidSpec;

pub mod verification;
use crate::operators::common::{restricted_container, restricted_pod};
use crate::operators::expansion::as_seen;
use crate::operators::resources;

/// The dump side of the backup pod.
pub const DUMP_SCRIPT: &str = include_str!("backup_job/dump.sh");
/// The upload side of the backup pod.
pub const UPLOAD_SCRIPT: &str = include_str!("backup_job/upload.sh");
/// The first step of a restore: chooses a dump and downloads it.
pub const SELECT_SCRIPT: &str = include_str!("backup_job/select.sh");
/// The AWS CLI image the upload side runs when none is given.
pub const DEFAULT_UPLOAD_IMAGE: &str = "amazon/aws-cli:2.27.0";
/// Where the two containers meet.
const WORK_DIR: &str = "/work";
/// The uid of the postgres user in the official PostgreSQL images.
const POSTGRES_UID: i64 = 999;

/// Where dumps are stored: an S3 bucket, or any S3-compatible store.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Destination {
    /// The bucket, 3 to 63 lower-case letters, digits, dots or dashes.
    #[schemars(length(min = 3, max = 63), pattern(r"^[a-z0-9][a-z0-9.-]*[a-z0-9]$"))]
    pub s3_bucket: String,
    /// A prefix for every object, usually ending in '/', for example nightly/.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 512), pattern(r"^[^/\x00-\x1f\x7f][^\x00-\x1f\x7f]*$|^$"))]
    pub s3_prefix: String,
    /// The endpoint URL of an S3-compatible store; AWS S3 when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048), pattern(r"^https?://[^\s]+$"))]
    pub endpoint: Option<String>,
    /// The bucket's region, for example eu-west-1; us-east-1 when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), pattern(r"^[a-z0-9-]+$"))]
    pub region: Option<String>,
    /// The name of a Secret in the same namespace holding the keys
    /// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY. Without it the job uses
    /// the pod's own identity (for example IRSA through serviceAccountName).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub credentials_secret: Option<String>,
}

/// A value the job reads from the environment: literal, or a Secret key.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub enum Credential {
    /// A literal value, for non-secret settings such as a user name.
    Value(String),
    /// A key of a Secret in the job's namespace.
    Secret {
        /// The Secret's name.
        name: String,
        /// The key within it.
        key: String,
    },
}

/// How to reach the database to dump.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Source {
    /// The host name, usually a Service's DNS name.
    pub host: String,
    /// The port.
    pub port: i32,
    /// The database to dump.
    pub database: String,
    /// The user to connect as.
    pub user: Credential,
    /// The user's password; always from a Secret.
    pub password: Credential,
    /// The image whose pg_dump matches the server.
    pub image: String,
}

/// Everything one backup run needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan<'a> {
    /// The database to dump.
    pub source: &'a Source,
    /// Where to store it.
    pub destination: &'a Destination,
    /// Object names start with this: `<prefix><name>-<UTC timestamp>.pgdump`.
    pub name: &'a str,
    /// Delete this backup's dumps older than this many days after a success.
    pub retention_days: Option<i32>,
    /// Retention prunes an old dump only once a newer one verified (with
    /// verification configured).
    pub retention_requires_verified: bool,
    /// The AWS CLI image.
    pub upload_image: &'a str,
    /// The pod's service account, for cloud identities such as IRSA.
    pub service_account: Option<&'a str>,
    /// The resources of each container; [`resources::backup_defaults`]
    /// when `None`.
    pub resources: Option<&'a ResourceRequirements>,
    /// The longest a run may take before Kubernetes stops it.
    pub active_deadline_seconds: i64,
    /// Labels of the Job and its pod.
    pub labels: BTreeMap<String, String>,
}

pub use crate::operators::expansion::env;

/// An environment variable from a literal or from a Secret key.
pub fn env_credential(name: &str, credential: &Credential) -> EnvVar {
    match credential {
        Credential::Value(value) => env(name, value),
        Credential::Secret { name: secret, key } => EnvVar {
            name: name.to_string(),
            value: None,
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: secret.clone(),
                    key: key.clone(),
                    optional: Some(false),
                }),
                ..EnvVarSource::default()
            }),
        },
    }
}

/// One container of a backup pod: `(name, image)`, its script and
/// environment, the scratch volume, and `resources` (see
/// [`resources::backup`]).
fn script_container(
    (name, image): (&str, &str),
    script: &str,
    env: Vec<EnvVar>,
    resources: Option<&ResourceRequirements>,
) -> Container {
    Container {
        name: name.to_string(),
        image: Some(image.to_string()),
        command: Some(crate::operators::expansion::shell_command(script)),
        env: Some(env),
        volume_mounts: Some(vec![VolumeMount {
            name: "work".to_string(),
            mount_path: WORK_DIR.to_string(),
            ..VolumeMount::default()
        }]),
        security_context: Some(restricted_container()),
        resources: Some(resources::backup(resources)),
        ..Container::default()
    }
}

/// The environment of the dump container.
pub fn dump_env(source: &Source) -> Vec<EnvVar> {
    vec![
        env("WORK_DIR", WORK_DIR),
        env("PGHOST", source.host.clone()),
        env("PGPORT", source.port.to_string()),
        env("PGDATABASE", source.database.clone()),
        env_credential("PGUSER", &source.user),
        env_credential("PGPASSWORD", &source.password),
        env("PGCONNECT_TIMEOUT", "30"),
    ]
}

/// The source a backup job was built with, read back from its pod: the
/// image and environment of its `dump` container, the inverse of
/// [`dump_env`]. `None` when the pod is not one this module built.
pub fn source_in(pod: &PodSpec) -> Option<Source> {
    let dump = pod
        .containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
        .find(|c| c.name == "dump")?;
    let vars = dump.env.as_ref()?;
    let var = |name: &str| vars.iter().find(|v| v.name == name);
    let literal = |name: &str| Some(as_seen(var(name)?.value.as_deref()?).into_owned());
    let credential = |name: &str| {
        let v = var(name)?;
        match (&v.value, &v.value_from) {
            (Some(value), None) => Some(Credential::Value(as_seen(value).into_owned())),
            (None, Some(from)) => {
                let secret = from.secret_key_ref.as_ref()?;
                Some(Credential::Secret {
                    name: secret.name.clone(),
                    key: secret.key.clone(),
                })
            }
            _ => None,
        }
    };
    Some(Source {
        host: literal("PGHOST")?,
        port: literal("PGPORT")?.parse().ok()?,
        database: literal("PGDATABASE")?,
        user: credential("PGUSER")?,
        password: credential("PGPASSWORD")?,
        image: dump.image.clone()?,
    })
}

/// The environment of the upload container.
pub fn upload_env(plan: &Plan<'_>) -> Vec<EnvVar> {
    let mut vars = vec![
        env("WORK_DIR", WORK_DIR),
        env("HOME", WORK_DIR),
        env("BACKUP_NAME", plan.name),
    ];
    if let Some(days) = plan.retention_days {
        vars.push(env("RETENTION_DAYS", days.to_string()));
        if plan.retention_requires_verified {
            vars.push(env("RETENTION_REQUIRES_VERIFIED", "1"));
        }
    }
    vars.extend(s3_env(plan.destination));
    vars
}

/// How the AWS CLI reaches a destination: bucket, prefix, region, endpoint
/// and, when given, the keys from their Secret.
pub fn s3_env(dest: &Destination) -> Vec<EnvVar> {
    let mut vars = vec![
        env("S3_BUCKET", dest.s3_bucket.clone()),
        env("S3_PREFIX", dest.s3_prefix.clone()),
        region_env(dest),
    ];
    if let Some(endpoint) = &dest.endpoint {
        vars.push(env("S3_ENDPOINT", endpoint.clone()));
    }
    vars.extend(keys_env(dest));
    vars
}

/// The destination's region as every AWS SDK reads it; us-east-1 when
/// omitted.
pub fn region_env(dest: &Destination) -> EnvVar {
    env(
        "AWS_DEFAULT_REGION",
        dest.region.as_deref().unwrap_or("us-east-1"),
    )
}

/// The destination's keys from their Secret, as every AWS SDK reads them;
/// none without `credentialsSecret` (the pod's own identity).
pub fn keys_env(dest: &Destination) -> Vec<EnvVar> {
    let Some(secret) = &dest.credentials_secret else {
        return Vec::new();
    };
    ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]
        .into_iter()
        .map(|key| {
            env_credential(
                key,
                &Credential::Secret {
                    name: secret.clone(),
                    key: key.to_string(),
                },
            )
        })
        .collect()
}

/// Which dump a restore reads, among a destination's objects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Exactly this object key.
    Key(String),
    /// The newest dump stored under one of these names, taken strictly
    /// before this UTC time (`YYYYMMDDHHMMSS`) when one is given.
    Newest {
        /// Backup names: a dump is `<prefix><name>-<YYYYMMDDTHHMMSSZ>.pgdump`.
        names: Vec<String>,
        /// The time the dump must be older than.
        before: Option<String>,
    },
}

/// The container that chooses a dump at `destination` (`select.sh`, in the
/// AWS CLI image) and downloads it to `/work/dump.pgdump`, with what it
/// chose in `/work/selected`, for the containers after it.
pub fn select_container(
    destination: &Destination,
    choice: &Choice,
    image: &str,
    resources: Option<&ResourceRequirements>,
) -> Container {
    let mut vars = vec![env("WORK_DIR", WORK_DIR), env("HOME", WORK_DIR)];
    match choice {
        Choice::Key(key) => vars.push(env("RESTORE_KEY", key.clone())),
        Choice::Newest { names, before } => {
            vars.push(env("RESTORE_NAMES", names.join(" ")));
            vars.extend(before.iter().map(|b| env("RESTORE_BEFORE", b.clone())));
        }
    }
    vars.extend(s3_env(destination));
    script_container(("select", image), SELECT_SCRIPT, vars, resources)
}

/// The pod that runs one backup.
pub fn pod_template(plan: &Plan<'_>) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(plan.labels.clone()),
            ..ObjectMeta::default()
        }),
        spec: Some(PodSpec {
            restart_policy: Some("Never".to_string()),
            service_account_name: plan.service_account.map(String::from),
            containers: vec![
                script_container(
                    ("dump", &plan.source.image),
                    DUMP_SCRIPT,
                    dump_env(plan.source),
                    plan.resources,
                ),
                script_container(
                    ("upload", plan.upload_image),
                    UPLOAD_SCRIPT,
                    upload_env(plan),
                    plan.resources,
                ),
            ],
            volumes: Some(vec![work_volume()]),
            security_context: Some(restricted_pod(POSTGRES_UID)),
            ..PodSpec::default()
        }),
    }
}

/// The scratch volume the containers of a pod share at /work.
fn work_volume() -> Volume {
    Volume {
        name: "work".to_string(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    }
}

/// The Job spec of one backup run: one retry, bounded in time.
pub fn job_spec(plan: &Plan<'_>) -> JobSpec {
    JobSpec {
        backoff_limit: Some(1),
        active_deadline_seconds: Some(plan.active_deadline_seconds),
        template: pod_template(plan),
        ..JobSpec::default()
    }
}

/// Checks a destination; shared by every operator that embeds one.
pub fn validate_destination(field: &str, d: &Destination) -> Result<(), InvalidSpec> {
    let bucket = &d.s3_bucket;
    let ok = (3..=63).contains(&bucket.len())
        && bucket
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-')
        && !bucket.starts_with(['.', '-'])
        && !bucket.ends_with(['.', '-']);
    if !ok {
        return Err(InvalidSpec::new(
            format!("{field}.s3Bucket"),
            format!(
                "{bucket:?} is not a valid bucket name; use 3 to 63 lower-case letters, digits, dots or dashes"
            ),
        ));
    }
    // The AWS CLI reads parameters starting with these from files or URLs;
    // the scripts guard against it, and such a prefix is a mistake anyway.
    let lower = d.s3_prefix.to_ascii_lowercase();
    if ["file://", "fileb://", "http://", "https://"]
        .iter()
        .any(|scheme| lower.starts_with(scheme))
    {
        return Err(InvalidSpec::new(
            format!("{field}.s3Prefix"),
            format!(
                "{:?} looks like a URL; write a plain key prefix like nightly/",
                d.s3_prefix
            ),
        ));
    }
    if d.s3_prefix.starts_with('/') || d.s3_prefix.chars().any(char::is_control) {
        return Err(InvalidSpec::new(
            format!("{field}.s3Prefix"),
            format!(
                "{:?} must not start with '/' or contain control characters; write it like nightly/",
                d.s3_prefix
            ),
        ));
    }
    if let Some(secret) = &d.credentials_secret {
        let field = format!("{field}.credentialsSecret");
        crate::operators::validate::object_name(&field, secret, "Secret")?;
    }
    Ok(())
}

/// The outcome of the most recent backup run.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum RunStatus {
    /// The last run completed.
    Succeeded,
    /// The last run failed.
    Failed,
    /// A run is in progress.
    Running,
    /// No run was observed.
    #[default]
    None,
}

/// When a backup CronJob runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule<'a> {
    /// 5-field cron or a macro.
    pub cron: &'a str,
    /// IANA time zone.
    pub time_zone: Option<&'a str>,
    /// Whether scheduling is paused.
    pub suspend: bool,
    /// Successful and failed Jobs to keep.
    pub history: (i32, i32),
}

/// A CronJob running the backup job on a schedule: never two runs at once,
/// a run missed by more than an hour skipped rather than run late.
pub fn scheduled(meta: ObjectMeta, schedule: &Schedule<'_>, plan: &Plan<'_>) -> CronJob {
    CronJob {
        metadata: meta,
        spec: Some(CronJobSpec {
            schedule: schedule.cron.to_string(),
            time_zone: schedule.time_zone.map(String::from),
            suspend: Some(schedule.suspend),
            concurrency_policy: Some("Forbid".to_string()),
            starting_deadline_seconds: Some(3600),
            successful_jobs_history_limit: Some(schedule.history.0),
            failed_jobs_history_limit: Some(schedule.history.1),
            job_template: JobTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(plan.labels.clone()),
                    ..ObjectMeta::default()
                }),
                spec: Some(job_spec(plan)),
            },
        }),
        status: None,
    }
}

/// The outcome of one Job.
pub fn run_status(job: &Job) -> RunStatus {
    let status = job.status.as_ref();
    let has = |type_: &str| {
        status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == type_ && c.status == "True"))
    };
    if has("Complete") {
        RunStatus::Succeeded
    } else if has("Failed") {
        RunStatus::Failed
    } else {
        // Created and not finished: pending or active.
        RunStatus::Running
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source() -> Source {
        Source {
            host: "db.prod.svc".into(),
            port: 5432,
            database: "orders; DROP TABLE x".into(),
            user: Credential::Value("app".into()),
            password: Credential::Secret {
                name: "db-creds".into(),
                key: "password".into(),
            },
            image: "postgres:16".into(),
        }
    }

    fn plan<'a>(source: &'a Source, dest: &'a Destination) -> Plan<'a> {
        Plan {
            source,
            destination: dest,
            name: "nightly",
            retention_days: Some(7),
            retention_requires_verified: false,
            upload_image: DEFAULT_UPLOAD_IMAGE,
            service_account: None,
            resources: None,
            active_deadline_seconds: 3600,
            labels: BTreeMap::new(),
        }
    }

    fn value<'a>(vars: &'a [EnvVar], name: &str) -> Option<&'a str> {
        vars.iter().find(|v| v.name == name)?.value.as_deref()
    }

    #[test]
    fn user_values_travel_in_the_environment_not_the_script() {
        let src = source();
        let dest = Destination {
            s3_bucket: "bucket".into(),
            s3_prefix: "it's $(here)/".into(),
            ..Destination::default()
        };
        let pod = pod_template(&plan(&src, &dest)).spec.unwrap();
        let [dump, upload] = &pod.containers[..] else {
            panic!("two containers")
        };
        // The script as written, once the kubelet expanded the command.
        let shell = |c: &Container| {
            crate::operators::expansion::expand(&c.command.as_ref().unwrap()[2], |_| None)
        };
        assert_eq!(shell(dump), DUMP_SCRIPT);
        assert_eq!(shell(upload), UPLOAD_SCRIPT);
        assert_eq!(
            value(dump.env.as_ref().unwrap(), "PGDATABASE"),
            Some("orders; DROP TABLE x")
        );
        // Written so that the kubelet's `$(VAR)` expansion gives it back.
        assert_eq!(
            value(upload.env.as_ref().unwrap(), "S3_PREFIX"),
            Some("it's $$(here)/")
        );
        assert!(!DUMP_SCRIPT.contains("orders") && !UPLOAD_SCRIPT.contains("here"));
    }

    #[test]
    fn passwords_and_keys_come_from_secrets() {
        let src = source();
        let dest = Destination {
            s3_bucket: "bucket".into(),
            credentials_secret: Some("s3".into()),
            ..Destination::default()
        };
        let p = plan(&src, &dest);
        let dump = dump_env(&src);
        let password = dump.iter().find(|v| v.name == "PGPASSWORD").unwrap();
        assert!(password.value.is_none());
        assert_eq!(
            password
                .value_from
                .as_ref()
                .unwrap()
                .secret_key_ref
                .as_ref()
                .unwrap()
                .name,
            "db-creds"
        );
        let upload = upload_env(&p);
        for key in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"] {
            let var = upload.iter().find(|v| v.name == key).unwrap();
            assert!(var.value.is_none(), "{key} must not be literal");
        }
        assert_eq!(value(&upload, "RETENTION_DAYS"), Some("7"));
        assert_eq!(value(&upload, "AWS_DEFAULT_REGION"), Some("us-east-1"));
    }

    #[test]
    fn the_job_retries_once_and_is_bounded() {
        let src = source();
        let dest = Destination::default();
        let spec = job_spec(&plan(&src, &dest));
        assert_eq!(spec.backoff_limit, Some(1));
        assert_eq!(spec.active_deadline_seconds, Some(3600));
        assert_eq!(
            spec.template.spec.unwrap().restart_policy.as_deref(),
            Some("Never")
        );
    }

    #[test]
    fn scripts_pass_a_shell_syntax_check() {
        for (name, script) in [
            ("dump.sh", DUMP_SCRIPT),
            ("upload.sh", UPLOAD_SCRIPT),
            ("select.sh", SELECT_SCRIPT),
            ("verify.sh", verification::VERIFY_SCRIPT),
            ("mark.sh", verification::MARK_SCRIPT),
        ] {
            let out = std::process::Command::new("sh")
                .args(["-n", "-c", script])
                .output()
                .expect("sh runs");
            assert!(
                out.status.success(),
                "{name}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}
