//! The promote Jobs: one for the designated standby when the decision
//! asks for it (`promote.sh`), every observed one kept (a Job runs once,
//! and its report is the record of what it did), and the settings the
//! promote Job and the instances' probes share.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{EnvVar, PodSpec};

use super::super::names::{
    ROLE_DIR, instance_host, is_promote_job, pod_name, promote_job as promote_job_name,
    superuser_secret_name,
};
use super::super::objects::{kept_job, script_container, script_job, secret_env, value_env};
use super::super::observed::Observed;
use super::super::spec::{Database, Replication, TEMPLATE_HASH};
use super::super::tls;
use super::{Primary, SWITCHOVER_MODE};

/// The promote Job: promotes a standby once it is safe.
pub const PROMOTE_SCRIPT: &str = include_str!("../promote.sh");

/// What the promote Job is built from, besides the decision.
pub(in super::super) struct Build<'a> {
    /// The instances the plan runs.
    pub replicas: i32,
    /// The image of the running major.
    pub image: String,
    /// How the Job connects to the instances.
    pub tls: &'a tls::Client,
    /// The hash of the instances' template last written.
    pub template: Option<&'a str>,
}

/// The promote Jobs: every observed one is kept (a Job runs once, and its
/// report is the record of what it did), and the plan's, if any, made.
pub(in super::super) fn promote_jobs(
    db: &Database,
    seen: &Observed,
    primary: &Primary,
    build: &Build<'_>,
) -> Vec<Job> {
    let wanted = primary.promote_job.as_deref();
    let mut out: Vec<Job> = seen
        .jobs
        .keys()
        .filter(|job| is_promote_job(db, job) && Some(job.as_str()) != wanted)
        .map(|job| kept_job(db, job))
        .collect();
    out.extend(wanted.map(|_| promote_job(db, primary, build)));
    out
}

/// The promote Job of the designated standby: promotes it over the
/// network (`promote.sh`) once it is the most advanced standby and the old
/// primary does not answer as one; refuses otherwise, changing nothing.
/// Annotated with the hash of the instances' template last written, so
/// the switchovers a rollout of that template had refused can be counted.
fn promote_job(db: &Database, primary: &Primary, build: &Build<'_>) -> Job {
    let others: Vec<String> = (0..u32::try_from(build.replicas).unwrap_or(0))
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
                SWITCHOVER_MODE
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
    if super::lease::enabled(db) {
        env.extend(super::lease::script_env());
    }
    let container = script_container(("promote", build.image.clone()), PROMOTE_SCRIPT, env, None);
    let job_name = primary
        .promote_job
        .clone()
        .unwrap_or_else(|| promote_job_name(db, primary.epoch, primary.designated));
    let mut pod = PodSpec {
        containers: vec![container],
        ..PodSpec::default()
    };
    build.tls.apply(&mut pod, &["promote"]);
    let mut job = script_job(db, job_name, pod, 0);
    if let Some(hash) = build.template {
        job.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(TEMPLATE_HASH.to_string(), hash.to_string());
    }
    job
}

/// `MAX_SILENCE_SECONDS` of `probe.sh` and `promote.sh`: a standby last
/// current with a primary longer ago is not ready and is never promoted.
/// A standby that streamed until the primary failed is checked by the
/// promote Job at most this long after: the failover delay, plus the
/// primary's readiness failing (3 probes 5 s apart), the hook's answer,
/// the Job's start and one probe period, for which a minute allows.
pub(in super::super) fn max_silence(db: &Database) -> EnvVar {
    let seconds = super::delay_seconds(db).saturating_add(60);
    value_env("MAX_SILENCE_SECONDS", seconds.to_string())
}

/// `spec.failover.maxStandbyLag` in bytes: a standby further behind is not
/// ready, so it leaves the read-only endpoints and is no failover candidate.
pub(in super::super) fn max_standby_lag(db: &Database) -> Option<u64> {
    let lag = db.spec.failover.as_ref()?.max_standby_lag.as_deref()?;
    crate::operators::validate::quantity_bytes(lag)
}
