//! Backup: scheduled backups of a PostgreSQL StatefulSet to S3.
//!
//! The one child is a CronJob `<name>-backup` whose job (see [`job`]) dumps
//! the target's database through its Service, with the credentials the
//! target itself uses, streams the dump to S3 and prunes old dumps. The
//! customize hook asks for the target StatefulSet and for the Jobs the
//! CronJob created, so status can report the last run.
//!
//! What a human operator knows, encoded here: connection details are read
//! from the target (its Service, port, database, user and the Secret holding
//! the password), never copied; two backups of one target never run at once
//! (`concurrencyPolicy: Forbid`); a missed run more than an hour late is
//! skipped rather than run at peak time; and when the target disappears the
//! CronJob is kept but suspended, so nothing is lost and backups resume when
//! the target returns. Deleting a Backup deletes its CronJob and never
//! touches stored dumps.
//!
//! Imports go down only. At the bottom: `spec` (the CRD types, the names
//! derived from a Backup and the checks the schema cannot make) and
//! `source` (how to reach the target's database, or why not); `status`
//! (one small function per condition) above them; this file, the operator
//! with its hooks and child builders, on top.

mod source;
mod spec;
mod status;

pub use source::{Unusable, source_of};
pub use spec::{
    Backup, BackupSpec, BackupStatus, MAX_NAME, Target, TargetKind, cron_job_name, validate,
};
pub use status::{latest, status};

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::backup_job::verification::{self, LABEL_VERIFY};
use super::backup_job::{self as job, Schedule, Source, scheduled};
use super::common::{refuse_not_built, standard_labels};
use crate::hook::Child;
use crate::hook::{
    CustomizeRequest, CustomizeResponse, ObjectGroups, ObservedPod, RelatedResourceRule,
    SyncRequest, SyncResponse,
};
use crate::operator::{ChildResource, Context, ControllerSpec, HookError, Operator};
use spec::name;

/// Label on every Job and pod of a Backup, naming it; customize selects by it.
pub const LABEL_BACKUP: &str = "opshooks.io/backup";
/// Annotation on the CronJob recording how the target was reached, so the
/// CronJob can be kept, suspended, while the target is gone.
pub const ANNOTATION_SOURCE: &str = "opshooks.io/backup-source";
/// The app in the standard labels of a Backup's objects.
const APP: &str = "backup";

/// The Backup operator and its routes.
pub fn operator() -> Operator {
    let controller = ControllerSpec {
        children: vec![
            ChildResource::new(
                "batch/v1",
                "cronjobs",
                "InPlace",
                "a schedule, destination or suspend change updates the existing CronJob; runs already started are not touched",
            ),
            ChildResource::new(
                "batch/v1",
                "jobs",
                "OnDelete",
                "a verification run after a backup runs once; it is never replaced",
            ),
        ],
        generate_selector: true,
        // Job completions reach us as related objects; resync as a backstop.
        resync_period_seconds: Some(300),
    };
    Operator::new::<Backup>("backup", controller, "CronJob running dump + S3 upload")
        .sync(sync)
        .customize(customize)
}

/// Asks for the target StatefulSet and for this Backup's Jobs.
pub fn customize(
    req: &CustomizeRequest<Backup>,
    _ctx: &Context,
) -> Result<CustomizeResponse, HookError> {
    let b = &req.parent;
    // Deleted, it is finalized whatever its spec: finalize waits for this.
    if b.metadata.deletion_timestamp.is_none() {
        validate(b)?;
    }
    let ns = b.metadata.namespace.clone();
    Ok(CustomizeResponse {
        related_resources: vec![
            RelatedResourceRule::named(
                "apps/v1",
                "statefulsets",
                vec![b.spec.target.name.clone()],
                ns.clone(),
            ),
            RelatedResourceRule::labelled(
                "batch/v1",
                "jobs",
                BTreeMap::from([(LABEL_BACKUP.to_string(), name(b).to_string())]),
                ns.clone(),
            ),
            // The verification runs' pods say how their restore went.
            RelatedResourceRule::labelled(
                "v1",
                "pods",
                BTreeMap::from([
                    (LABEL_BACKUP.to_string(), name(b).to_string()),
                    (LABEL_VERIFY.to_string(), "true".to_string()),
                ]),
                ns,
            ),
        ],
    })
}

/// The CronJob of a Backup: the shared backup job on the Backup's schedule.
pub fn cron_job(b: &Backup, source: &Source, suspend: bool) -> CronJob {
    let mut labels = standard_labels(APP, name(b));
    labels.insert(LABEL_BACKUP.to_string(), name(b).to_string());
    let plan = job::Plan {
        source,
        destination: &b.spec.destination,
        name: name(b),
        retention_days: b.spec.retention_days,
        retention_requires_verified: b.spec.verify.is_some(),
        upload_image: &b.spec.upload_image,
        service_account: b.spec.service_account_name.as_deref(),
        resources: b.spec.resources.as_ref(),
        active_deadline_seconds: b.spec.active_deadline_seconds,
        labels: labels.clone(),
    };
    let meta = ObjectMeta {
        name: Some(cron_job_name(b)),
        namespace: b.metadata.namespace.clone(),
        labels: Some(labels.clone()),
        annotations: Some(BTreeMap::from([(
            ANNOTATION_SOURCE.to_string(),
            serde_json::to_string(source).expect("sources serialize"),
        )])),
        ..ObjectMeta::default()
    };
    let schedule = Schedule {
        cron: b.spec.schedule.trim(),
        time_zone: b.spec.time_zone.as_deref(),
        suspend,
        history: (
            b.spec.successful_jobs_history_limit,
            b.spec.failed_jobs_history_limit,
        ),
    };
    scheduled(meta, &schedule, &plan)
}

/// Desired CronJob and observed status of one Backup.
pub fn sync(
    req: &SyncRequest<Backup>,
    ctx: &Context,
) -> Result<SyncResponse<BackupStatus>, HookError> {
    let b = &req.parent;
    validate(b)?;
    let observed_cron = req
        .children
        .of::<CronJob>()?
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some(cron_job_name(b).as_str()));
    let target = req
        .related
        .of::<StatefulSet>()?
        .into_iter()
        .find(|s| s.metadata.name.as_deref() == Some(b.spec.target.name.as_str()));
    // The backup runs: the verification runs share the Backup's label.
    let (verify_jobs, jobs): (Vec<Job>, Vec<Job>) = req
        .related
        .of::<Job>()?
        .into_iter()
        .partition(|j| labelled_verify(&j.metadata));
    let pods = req.related.of::<ObservedPod>()?;

    let usable = target
        .as_ref()
        .map(|sts| source_of(sts, b.spec.database.as_deref()));
    let mut children = match (&usable, &observed_cron) {
        (Some(Ok(source)), _) => vec![Child::new(&cron_job(b, source, b.spec.suspend))],
        // While the target is gone or unusable, the CronJob is kept,
        // suspended, with the connection it was built with.
        (_, Some(cron)) => vec![Child::new(&cron_job(b, &built_with(b, cron)?, true))],
        (_, None) => vec![],
    };
    if let Some(Ok(source)) = &usable {
        children.extend(verification_children(b, source, observed_cron.as_ref()));
    }
    keep_or_refuse_not_built(b, &req.children, &mut children)?;
    let status = status(
        b,
        observed_cron.as_ref(),
        usable.as_ref(),
        (&jobs, &pods, &verify_jobs),
        ctx,
    );
    Ok(SyncResponse {
        status,
        children: Child::sorted(children),
        ..SyncResponse::default()
    })
}

/// The connection an observed CronJob was built with: read from its own
/// job template (which we wrote, and which a user edit of an annotation
/// cannot change), else from its annotation. Neither readable means the
/// CronJob cannot be rebuilt, and leaving it out would delete it and any
/// backup it is running: refuse instead.
fn built_with(b: &Backup, cron: &CronJob) -> Result<Source, HookError> {
    let from_template = || {
        let job = cron.spec.as_ref()?.job_template.spec.as_ref()?;
        job::source_in(job.template.spec.as_ref()?)
    };
    let from_annotation = || {
        let text = cron.metadata.annotations.as_ref()?.get(ANNOTATION_SOURCE)?;
        serde_json::from_str::<Source>(text).ok()
    };
    from_template().or_else(from_annotation).ok_or_else(|| {
        HookError::Unsafe(format!(
            "statefulset {} is gone or unusable and cronjob {} no longer shows which database it backs up (its dump container and its {ANNOTATION_SOURCE} annotation are unreadable); nothing is changed: restore the target statefulset",
            b.spec.target.name,
            cron_job_name(b)
        ))
    })
}

/// Children it does not build, which an answer without them would delete:
/// a CronJob of another name is refused; a Job other than a verification
/// run (one started by hand) is kept as it is, as Jobs run once and are
/// never updated.
fn keep_or_refuse_not_built(
    b: &Backup,
    observed: &ObjectGroups,
    children: &mut Vec<Child>,
) -> Result<(), HookError> {
    let verify = format!("{}-verify", name(b));
    refuse_not_built::<CronJob>(observed, "Backup", name(b), |n| {
        n == cron_job_name(b) || n == verify
    })?;
    let runs = format!("{}-v-", name(b));
    for job in observed.names_of::<Job>()? {
        if !job.starts_with(&runs) {
            children.push(Child::new(&Job {
                metadata: ObjectMeta {
                    name: Some(job.to_string()),
                    namespace: b.metadata.namespace.clone(),
                    ..ObjectMeta::default()
                },
                ..Job::default()
            }));
        }
    }
    Ok(())
}

/// True for the objects of a verification run.
fn labelled_verify(meta: &ObjectMeta) -> bool {
    meta.labels
        .as_ref()
        .is_some_and(|l| l.contains_key(LABEL_VERIFY))
}

/// With `spec.verify`: the CronJob `<name>-verify` on its schedule, and
/// after each backup the CronJob reports succeeded the Job
/// `<name>-v-<YYYYMMDDHHMMSS>` (short: a Backup's name takes up to 45 of
/// a Job's 63 characters).
fn verification_children(b: &Backup, source: &Source, cron: Option<&CronJob>) -> Vec<Child> {
    let Some(verify) = &b.spec.verify else {
        return Vec::new();
    };
    let mut labels = standard_labels(APP, name(b));
    labels.insert(LABEL_BACKUP.to_string(), name(b).to_string());
    let run = verification::Run {
        destination: &b.spec.destination,
        names: vec![name(b).to_string()],
        image: source.image.clone(),
        upload_image: &b.spec.upload_image,
        service_account: b.spec.service_account_name.as_deref(),
        resources: b.spec.resources.as_ref(),
        labels,
    };
    let meta = |object: String| ObjectMeta {
        name: Some(object),
        namespace: b.metadata.namespace.clone(),
        ..ObjectMeta::default()
    };
    let mut children = Vec::new();
    if let Some(schedule) = &verify.schedule {
        let cron = run.scheduled(meta(format!("{}-verify", name(b))), schedule.trim());
        children.push(Child::new(&cron));
    }
    let last_backup = cron
        .and_then(|c| c.status.as_ref()?.last_successful_time.as_ref())
        .map(|t| t.0);
    if let Some(at) = last_backup.filter(|_| verify.after_each_backup) {
        children.push(Child::new(
            &run.after_backup(meta(format!("{}-v", name(b))), at),
        ));
    }
    children
}
