//! Database: a PostgreSQL lifecycle that never loses data.
//!
//! One primary and `size - 1` streaming standbys in a StatefulSet, Services
//! for the primary (read-write) and the standbys (read-only), generated
//! credentials that are never rotated, a one-time initial-configuration Job,
//! scheduled backups with the Backup operator's job, major-version upgrades
//! through a pre-upgrade backup and a restore Job, and a snapshot before
//! anything is deleted.
//!
//! Volumes are the StatefulSet's own PersistentVolumeClaims, not children of
//! the Database: nothing Metacontroller does to children (a dropped child, a
//! deleted parent) can delete them. They are deleted only when finalizing
//! under `Delete`, or under `Snapshot` after the snapshot Job succeeded, by
//! switching the StatefulSet's PVC retention policy to `Delete` and then
//! removing the StatefulSet; under `Retain` they outlive the Database,
//! owned by nothing.
//!
//! Each feature owns its decision, its children and its condition in one
//! file or folder: `upgrade` (between majors), `restore` (from a dump),
//! `deletion` (with its `Snapshotted` condition), `storage`, `placement`,
//! `parameters`, `backups` (scheduled dumps and their verification),
//! `monitoring`, `tls`, `rollout` (a new template), and `primary/`
//! (failover and switchover: the decision in `primary.rs`, the promote
//! Jobs in `jobs.rs`, the lease sidecar in `lease.rs`, the `FailingOver`
//! condition and the instances' roles in `status.rs`). [`plan`] assembles the features' decisions, a pure function
//! from the observed state to what to build; [`children`] and `status`
//! turn that into objects and conditions.
//!
//! Imports go down only. At the bottom: `spec` (the types and the spec's
//! own rules), `names` (every child's name and address), `kinds` (other
//! projects' objects: cert-manager's, Prometheus Operator's), `objects`
//! (what every feature builds with: metadata, a script Job, a kept Job, a
//! scoped identity), `dumps` (a dump Job), `images` (the image of each
//! major) and `observed` (the request, read once, with the one definition
//! of "initialized"). The features
//! sit above them; `plan`, `children` and `status` assemble on top.

mod archive;
mod backups;
mod certificate;
pub mod children;
mod deletion;
mod dumps;
mod foreign;
mod images;
pub mod instances;
mod kinds;
mod monitoring;
pub mod names;
mod objects;
mod observed;
mod parameters;
mod placement;
mod plan;
mod primary;
mod restore;
mod rollout;
mod spec;
mod status;
mod storage;
mod tls;
mod trust;
mod upgrade;
mod validation;

pub use archive::base_backups::ANNOTATION as ANNOTATION_BASE_BACKUP;
pub use deletion::{Deletion, plan_deletion, plan_finalize};
pub use names::{claim_name, endpoint, jobs};
pub use observed::Observed;
pub use plan::{Plan, check_volumes, has_generated_credentials, plan};
pub use primary::jobs::PROMOTE_SCRIPT;
pub use primary::{ANNOTATION_SWITCHOVER, Failover, Primary, Step};
pub use spec::{
    ANNOTATION_VERSION, Database, DatabaseBackup, DatabaseSpec, DatabaseStatus, DeletionPolicy,
    LABEL_DATABASE, MAX_NAME, Major, PORT, Phase, Size, Storage, VOLUME, database_name, name,
    namespace,
};
pub use status::status;
pub use upgrade::Upgrade;

use std::collections::BTreeMap;

use crate::hook::Child;
use crate::hook::conditions::{self, Observation};
use crate::hook::{
    CustomizeRequest, CustomizeResponse, RelatedResourceRule, SyncRequest, SyncResponse,
};
use crate::operator::{ChildResource, Context, ControllerSpec, HookError, InvalidSpec, Operator};
pub use crate::operators::backup_job::Destination;

/// How often to look again while waiting on something that does not
/// trigger a sync by itself.
pub const WAIT_SECONDS: f64 = 15.0;

/// The Database operator and its routes.
pub fn operator() -> Operator {
    let controller = ControllerSpec {
        children: [workload_children(), access_children()].concat(),
        generate_selector: true,
        resync_period_seconds: Some(60),
    };
    Operator::new::<Database>(
        "database",
        controller,
        "StatefulSet, Services, Secrets, ConfigMap, Jobs, backup CronJob, PodDisruptionBudget, and the grow Job's ServiceAccount, Role and RoleBinding",
    )
    .sync(sync)
    .finalize(finalize)
    .customize(customize)
}

/// The kinds that hold and run the data: the instances, their Services,
/// configuration, credentials, Jobs, backups and disruption budget.
fn workload_children() -> Vec<ChildResource> {
    vec![
        ChildResource::new(
            "apps/v1",
            "statefulsets",
            "InPlace",
            "the StatefulSet rolls its own pods; scaling and image changes apply in place",
        ),
        ChildResource::new(
            "v1",
            "services",
            "InPlace",
            "selectors and ports are updated in place",
        ),
        ChildResource::new(
            "discovery.k8s.io/v1",
            "endpointslices",
            "InPlace",
            "the read-only Service's endpoints follow the ready standbys",
        ),
        ChildResource::new(
            "v1",
            "configmaps",
            "InPlace",
            "connection details follow the spec",
        ),
        ChildResource::new(
            "v1",
            "secrets",
            "OnDelete",
            "credentials are created once and never changed",
        ),
        ChildResource::new(
            "batch/v1",
            "jobs",
            "OnDelete",
            "a Job runs once; it is never replaced",
        ),
        ChildResource::new(
            "batch/v1",
            "cronjobs",
            "InPlace",
            "a schedule or destination change updates the backup CronJob",
        ),
        ChildResource::new(
            "policy/v1",
            "poddisruptionbudgets",
            "InPlace",
            "the instances' disruption budget follows the size and spec.enablePDB",
        ),
    ]
}

/// The kinds that scope what the instances' sidecars and the Jobs may do,
/// and other projects' kinds when their chart value is on.
fn access_children() -> Vec<ChildResource> {
    vec![
        ChildResource::new(
            "v1",
            "serviceaccounts",
            "InPlace",
            "the instances' lease sidecar's identity, with standbys; the grow Job's, while claims grow",
        ),
        ChildResource::new(
            "rbac.authorization.k8s.io/v1",
            "roles",
            "InPlace",
            "the lease sidecar may get the role ConfigMap; the grow Job may patch the claims it grows; no more",
        ),
        ChildResource::new(
            "rbac.authorization.k8s.io/v1",
            "rolebindings",
            "InPlace",
            "binds each Role to its ServiceAccount",
        ),
        ChildResource::new(
            "cert-manager.io/v1",
            "certificates",
            "InPlace",
            "the instances' certificate under spec.tls.issuerRef follows the issuer and the names; cert-manager reissues it",
        )
        .only_with(certificate::CHART_VALUE),
        ChildResource::new(
            "monitoring.coreos.com/v1",
            "podmonitors",
            "InPlace",
            "the instances' PodMonitor under spec.monitoring.podMonitor follows the Database's labels",
        )
        .only_with(monitoring::CHART_VALUE),
    ]
}

/// Asks for this Database's Pods and PersistentVolumeClaims, and the
/// StorageClasses. The claims are asked for under every deletion policy:
/// whether the StatefulSet holds them decides when it may go, and retained
/// claims of an earlier Database of the same name must be seen before a
/// new one starts beside them. A claim grows only if its class allows it.
pub fn customize(
    req: &CustomizeRequest<Database>,
    _ctx: &Context,
) -> Result<CustomizeResponse, HookError> {
    let db = &req.parent;
    // Deleted, it is finalized whatever its spec: finalize waits for this.
    if db.metadata.deletion_timestamp.is_none() {
        validate(db)?;
    }
    let labels = BTreeMap::from([(LABEL_DATABASE.to_string(), name(db).to_string())]);
    let ns = db.metadata.namespace.clone();
    let mut related_resources = vec![
        RelatedResourceRule::labelled("v1", "pods", labels.clone(), ns.clone()),
        RelatedResourceRule::labelled("v1", "persistentvolumeclaims", labels.clone(), ns.clone()),
        // Every StorageClass: whether a claim's allows it to grow.
        RelatedResourceRule::labelled("storage.k8s.io/v1", "storageclasses", BTreeMap::new(), None),
    ];
    // cert-manager copies the Certificate's labels to its requests: their
    // CAs make the bundle the clients trust (`trust`). Asked for only with
    // an issuer, so a cluster without cert-manager is never asked for them.
    if spec::issuer(db).is_some() {
        related_resources.push(RelatedResourceRule::labelled(
            "cert-manager.io/v1",
            "certificaterequests",
            labels,
            ns,
        ));
    }
    Ok(CustomizeResponse { related_resources })
}

/// Checks what the schema cannot, and names the field: the spec's rules,
/// then those of the features that own their fields.
pub fn validate(db: &Database) -> Result<(), InvalidSpec> {
    validation::validate(db)?;
    archive::validate(db)?;
    if let Some(m) = &db.spec.monitoring {
        monitoring::validate(db, m)?;
    }
    Ok(())
}

/// Desired children and observed status of one Database.
pub fn sync(
    req: &SyncRequest<Database>,
    ctx: &Context,
) -> Result<SyncResponse<DatabaseStatus>, HookError> {
    let db = &req.parent;
    validate(db)?;
    validation::recovery_major(db)?;
    certificate::require_group(req)?;
    let seen = Observed::from_request(req)?.at(ctx.now);
    check_volumes(db, &seen)?;
    let plan = plan(db, &seen)?;
    answer(req, &seen, plan, None, ctx)
}

/// Deletion: snapshot (under Snapshot), then remove the StatefulSet with
/// its volumes (or without them, under Retain); finalized only when neither
/// is observed any more.
pub fn finalize(
    req: &SyncRequest<Database>,
    ctx: &Context,
) -> Result<SyncResponse<DatabaseStatus>, HookError> {
    let db = &req.parent;
    if let Err(invalid) = validate(db) {
        // Nothing of it is left: an invalid spec must not hold the deletion
        // (but a group missing from the request shows nothing).
        foreign::require_groups(req)?;
        if req.children.is_empty() && req.related.is_empty() {
            let previous = db.status.as_ref().map(|s| s.conditions.as_slice());
            let status = DatabaseStatus {
                phase: Phase::Deleting,
                conditions: conditions::reconcile(
                    previous.unwrap_or_default(),
                    vec![Observation::new(
                        "Ready",
                        false,
                        "Deleted",
                        format!("{invalid}; nothing of this Database is left, so it is deleted"),
                    )],
                    db.metadata.generation,
                    ctx.now,
                ),
                ..DatabaseStatus::default()
            };
            return Ok(SyncResponse {
                status,
                children: vec![],
                resync_after_seconds: None,
                finalized: Some(true),
            });
        }
        return Err(invalid.into());
    }
    let seen = Observed::from_request(req)?.with_children(req).at(ctx.now);
    let (plan, deletion) = plan_finalize(db, &seen, ctx)?;
    answer(req, &seen, plan, Some(&deletion), ctx)
}

/// When to look again: soon while something moves by itself, and when the
/// failover delay of a primary that is not ready ends (nothing else would
/// call the hook then; the controller's resync period still calls it
/// meanwhile). Each call while waiting answers how long is left, so an
/// answer that stays the same means nothing is waiting for time to pass
/// (the simulator takes two such answers for a settled loop).
fn resync_after(waiting: bool, primary: &Primary, ctx: &Context) -> Option<f64> {
    let delay_ends = match primary.step {
        Step::Waiting { after, .. } => {
            let seconds = after.duration_since(ctx.now).as_secs_f64();
            Some(seconds.max(1.0))
        }
        _ => None,
    };
    delay_ends.or(waiting.then_some(WAIT_SECONDS))
}

/// The answer from the plan; `deletion` is how far a deletion got, `None`
/// when not finalizing.
fn answer(
    req: &SyncRequest<Database>,
    seen: &Observed,
    plan: Plan,
    deletion: Option<&Deletion>,
    ctx: &Context,
) -> Result<SyncResponse<DatabaseStatus>, HookError> {
    let db = &req.parent;
    let finalizing = deletion.is_some();
    let mut built = children::build(db, seen, &plan, ctx)?;
    foreign::keep_or_refuse(db, &req.children, &mut built, finalizing)?;
    let status = status(db, seen, &plan, deletion, ctx);
    let finalized = finalizing && plan.is_finalized(db, seen);
    let waiting =
        finalizing && !finalized || plan.upgrade.step.in_progress() || plan.primary.changing();
    Ok(SyncResponse {
        status,
        children: Child::sorted(built),
        resync_after_seconds: resync_after(waiting, &plan.primary, ctx),
        finalized: finalizing.then_some(finalized),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by `opshooks simulate` with `spec.failover.delay: 60`: the
    /// answer while waiting said 15 s every time, so the loop looked
    /// settled and the failover never came in the timeline.
    #[test]
    fn regression_the_resync_while_waiting_is_the_time_left_of_the_delay() {
        let ctx = Context::fixed();
        let at = |seconds: i64| {
            ctx.now
                .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(seconds))
                .unwrap()
        };
        let waiting = |left: i64| Primary {
            designated: 0,
            epoch: 0,
            serving: Some(0),
            step: Step::Waiting {
                since: at(-10),
                after: at(left),
            },
            promote_job: None,
            last: None,
            refusals: Vec::new(),
            planned: false,
            request_ignored: None,
            status_ignored: None,
            recovered: None,
        };
        assert_eq!(resync_after(false, &waiting(50), &ctx), Some(50.0));
        assert_eq!(resync_after(false, &waiting(0), &ctx), Some(1.0));
        let steady = Primary {
            step: Step::Steady,
            ..waiting(0)
        };
        assert_eq!(resync_after(true, &steady, &ctx), Some(WAIT_SECONDS));
        assert_eq!(resync_after(false, &steady, &ctx), None);
    }
}
