//! A dump of the Database with the Backup operator's job: what the
//! scheduled backups, the final snapshot, the dump before an upgrade and
//! the verification runs share. Each reaches the primary as the superuser
//! through the read-write Service.

use k8s_openapi::api::batch::v1::Job;

use super::names::{read_write_host, superuser_secret_name};
use super::objects::{job_labels, meta};
use super::spec::{Database, PORT, database_name};
use super::tls;
use crate::operators::backup_job::{self, Credential, Source};

/// How backup jobs reach this Database: the primary, as the superuser,
/// with the running version's pg_dump (`image`).
pub(super) fn source(db: &Database, image: String) -> Source {
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

pub(super) fn backup_plan<'a>(
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

/// A one-off dump Job named `job_name`, with `image`'s pg_dump.
pub(super) fn backup_job(
    db: &Database,
    job_name: String,
    image: String,
    client: &tls::Client,
) -> Option<Job> {
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
