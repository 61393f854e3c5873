//! Children of a Database that the operator did not build, for example a
//! `pg_dump` Job someone started by hand with the Database as its owner.
//! Metacontroller deletes every observed child an answer leaves out, so
//! each is kept or refused, never dropped: a Job is kept as it is (it runs
//! once; finalize keeps every Job the same way), any other type is refused
//! with a 409, as the answer would have to carry fields opshooks does not
//! own. While the Database is deleted nothing is refused: the garbage
//! collector deletes its children with it anyway.

use std::collections::BTreeSet;

use k8s_openapi::Resource;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolumeClaim, Pod, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::api::storage::v1::StorageClass;

use super::kinds::{Certificate, PodMonitor};

use super::names::{
    backup_cron_name, ca_config_map_name, certificate_name, connection_name,
    generated_credentials_name, grow_name, hba_name, headless_name, initdb_name, is_promote_job,
    jobs, lease_account_name, monitor_job_prefix, monitor_secret_name, read_only_name, role_name,
    superuser_secret_name, verify_base_name, verify_name,
};
use super::objects::kept_job;
use super::spec::{Database, Major, name};
use crate::hook::{Child, ObjectGroups, SyncRequest, group_key};
use crate::operator::HookError;
use crate::operators::common::not_built;

/// Keeps (a Job) or refuses (anything else) every observed child that `out`
/// leaves out and no builder makes. Every declared child group must be in
/// the request: one that is not was never asked for.
pub(super) fn keep_or_refuse(
    db: &Database,
    children: &ObjectGroups,
    out: &mut Vec<Child>,
    deleting: bool,
) -> Result<(), HookError> {
    let answered: BTreeSet<(String, String)> = out
        .iter()
        .map(|c| {
            let (group, name) = c.group_and_name();
            (group, name.to_string())
        })
        .collect();
    let observed = [
        names::<StatefulSet>(children)?,
        names::<Service>(children)?,
        names::<EndpointSlice>(children)?,
        names::<ConfigMap>(children)?,
        names::<Secret>(children)?,
        names::<Job>(children)?,
        names::<CronJob>(children)?,
        names::<PodDisruptionBudget>(children)?,
        names::<ServiceAccount>(children)?,
        names::<Role>(children)?,
        names::<RoleBinding>(children)?,
        match children.has::<Certificate>() {
            true => names::<Certificate>(children)?,
            false => Vec::new(),
        },
        match children.has::<PodMonitor>() {
            true => names::<PodMonitor>(children)?,
            false => Vec::new(),
        },
    ];
    if deleting {
        return Ok(());
    }
    let job_group = group_key::<Job>();
    for (group, name) in observed.into_iter().flatten() {
        if answered.contains(&(group.clone(), name.to_string())) || is_built(db, &group, name) {
            continue;
        }
        if group == job_group {
            out.push(Child::new(&kept_job(db, name)));
        } else {
            return Err(not_built("Database", super::spec::name(db), &group, name));
        }
    }
    Ok(())
}

/// The group key and the names of the observed objects of type `K`.
fn names<K: Resource>(children: &ObjectGroups) -> Result<Vec<(String, &str)>, HookError> {
    let group = group_key::<K>();
    Ok(children
        .names_of::<K>()?
        .into_iter()
        .map(|n| (group.clone(), n))
        .collect())
}

/// Whether some builder makes a child of this group and name, now or in
/// another step: such a child is left out when the plan no longer wants it.
fn is_built(db: &Database, group: &str, object: &str) -> bool {
    let own = name(db);
    let exact: Vec<String> = match group {
        g if g == group_key::<StatefulSet>()
            || g == group_key::<PodDisruptionBudget>()
            || g == group_key::<PodMonitor>() =>
        {
            vec![own.to_string()]
        }
        g if g == group_key::<Service>() => {
            vec![own.to_string(), headless_name(db), read_only_name(db)]
        }
        g if g == group_key::<EndpointSlice>() => vec![read_only_name(db)],
        g if g == group_key::<ConfigMap>() => vec![
            connection_name(db),
            initdb_name(db),
            role_name(db),
            hba_name(db),
            ca_config_map_name(db),
        ],
        g if g == group_key::<Secret>() => {
            vec![
                superuser_secret_name(db),
                generated_credentials_name(db),
                monitor_secret_name(db),
            ]
        }
        g if g == group_key::<CronJob>() => {
            vec![backup_cron_name(db), verify_name(db), verify_base_name(db)]
        }
        g if g == group_key::<Certificate>() => vec![certificate_name(db)],
        g if g == group_key::<ServiceAccount>()
            || g == group_key::<Role>()
            || g == group_key::<RoleBinding>() =>
        {
            vec![grow_name(db), lease_account_name(db)]
        }
        g if g == group_key::<Job>() => {
            let mut names = jobs::dump_names(own);
            names.extend([jobs::init(db), jobs::restore(db), verify_name(db)]);
            names.extend(Major::ALL.into_iter().map(|to| jobs::upgrade(db, to)));
            if is_promote_job(db, object) {
                return true;
            }
            let prefixes = [
                format!("{}-", grow_name(db)),
                format!("{}-", verify_name(db)),
                monitor_job_prefix(db),
            ];
            if prefixes.iter().any(|p| object.starts_with(p.as_str())) {
                return true;
            }
            names
        }
        _ => Vec::new(),
    };
    exact.iter().any(|n| n == object)
}

/// Every group a Database's hooks read, children and related, without
/// decoding any: what a finalize checks before it lets an invalid Database
/// go because nothing of it is observed.
pub(super) fn require_groups(req: &SyncRequest<Database>) -> Result<(), HookError> {
    keep_or_refuse(&req.parent, &req.children, &mut Vec::new(), true)?;
    req.related.names_of::<Pod>()?;
    req.related.names_of::<PersistentVolumeClaim>()?;
    req.related.names_of::<StorageClass>()?;
    Ok(())
}
