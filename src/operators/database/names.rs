//! Every name and address a Database's children take, in one place: the
//! builders, the plan, the status, the simulator and the tests read them
//! here, and nothing else formats one.

use super::spec::{Database, Major, PORT, VOLUME, name, namespace};
use crate::operators::backup_job::Destination;

/// The pod name of instance `ordinal`.
pub fn pod_name(db: &Database, ordinal: u32) -> String {
    format!("{}-{ordinal}", name(db))
}

/// The headless Service that gives each instance its own address.
pub fn headless_name(db: &Database) -> String {
    format!("{}-headless", name(db))
}

/// The read-only Service: the ready standbys.
pub fn read_only_name(db: &Database) -> String {
    format!("{}-ro", name(db))
}

/// `<service>.<namespace>.svc`: a Service's address inside the cluster.
pub fn service_host(db: &Database, service: &str) -> String {
    format!("{service}.{}.svc", namespace(db))
}

/// A Service's fully qualified name (`….svc.cluster.local`), as clients
/// outside the namespace and certificates name it.
pub fn service_fqdn(db: &Database, service: &str) -> String {
    format!("{}.cluster.local", service_host(db, service))
}

/// The read-write Service's address (it has the Database's name).
pub fn read_write_host(db: &Database) -> String {
    service_host(db, name(db))
}

/// Where instance `ordinal` answers: its own name in the headless Service.
pub fn instance_host(db: &Database, ordinal: u32) -> String {
    format!(
        "{}.{}",
        pod_name(db, ordinal),
        service_host(db, &headless_name(db))
    )
}

/// The read-write Service's fully qualified name and port.
pub fn endpoint(db: &Database) -> String {
    format!("{}:{PORT}", service_fqdn(db, name(db)))
}

/// The role ConfigMap: who the primary is, read by every instance.
pub fn role_name(db: &Database) -> String {
    role_name_of(name(db))
}

/// The role ConfigMap of the Database named `database` (the simulator
/// knows its parent by name only).
pub fn role_name_of(database: &str) -> String {
    format!("{database}-role")
}

/// The ConfigMap of `pg_hba.conf` lines (`spec.postgresql.pgHba`).
pub fn hba_name(db: &Database) -> String {
    format!("{}-hba", name(db))
}

/// The ConfigMap of the primary's first-start script.
pub fn initdb_name(db: &Database) -> String {
    format!("{}-initdb", name(db))
}

/// The ConfigMap of the server's `archive_command` script.
pub fn archive_name(db: &Database) -> String {
    format!("{}-archive", name(db))
}

/// The ConfigMap the primary's archiver writes its progress to (the hook
/// desires it without data).
pub fn archive_report_name(db: &Database) -> String {
    format!("{}-archive-report", name(db))
}

/// The ConfigMap that tells applications how to connect.
pub fn connection_name(db: &Database) -> String {
    format!("{}-connection", name(db))
}

/// The superuser and replication passwords' Secret.
pub fn superuser_secret_name(db: &Database) -> String {
    format!("{}-superuser", name(db))
}

/// The Secret opshooks generates for the application user.
pub fn generated_credentials_name(db: &Database) -> String {
    format!("{}-credentials", name(db))
}

/// The Certificate's name, and its Secret's.
pub fn certificate_name(db: &Database) -> String {
    format!("{}-tls", name(db))
}

/// The ConfigMap of the certificate authority clients trust.
pub fn ca_config_map_name(db: &Database) -> String {
    format!("{}-ca", name(db))
}

/// `<name>-lease`: the ServiceAccount, Role and RoleBinding of the
/// instances' lease sidecar.
pub fn lease_account_name(db: &Database) -> String {
    format!("{}-lease", name(db))
}

/// The ServiceAccount, Role and RoleBinding of the grow Job.
pub fn grow_name(db: &Database) -> String {
    format!("{}-grow", name(db))
}

/// `<name>-monitor`: the monitoring role's Secret.
pub fn monitor_secret_name(db: &Database) -> String {
    format!("{}-monitor", name(db))
}

/// What every monitoring role Job's name starts with: one of another
/// password or major is the operator's too, and is left out (deleted)
/// once replaced.
pub fn monitor_job_prefix(db: &Database) -> String {
    format!("{}-monitor-", name(db))
}

/// The CronJob of the scheduled backups.
pub fn backup_cron_name(db: &Database) -> String {
    format!("{}-backup", name(db))
}

/// The CronJob of the scheduled verifications, and the prefix of the
/// verification run after each backup.
pub fn verify_name(db: &Database) -> String {
    format!("{}-verify", name(db))
}

/// The CronJob that proves the newest base backup restores (issue 35).
pub fn verify_base_name(db: &Database) -> String {
    format!("{}-verify-base", name(db))
}

/// The promote Job of `ordinal` at `epoch`.
pub fn promote_job(db: &Database, epoch: u64, ordinal: u32) -> String {
    format!("{}-promote-{epoch}-{ordinal}", name(db))
}

/// True for the name of one of this Database's promote Jobs.
pub fn is_promote_job(db: &Database, job: &str) -> bool {
    parse_promote_job(db, job).is_some()
}

/// The epoch and ordinal a promote Job's name carries.
pub fn parse_promote_job(db: &Database, job: &str) -> Option<(u64, u32)> {
    let rest = job.strip_prefix(name(db))?.strip_prefix("-promote-")?;
    let (epoch, ordinal) = rest.split_once('-')?;
    Some((epoch.parse().ok()?, ordinal.parse().ok()?))
}

/// The ordinal of one of this Database's pod names.
pub fn pod_ordinal(db: &Database, pod: &str) -> Option<u32> {
    pod.strip_prefix(name(db))?.strip_prefix('-')?.parse().ok()
}

/// The claim holding instance `ordinal`'s volume, as the StatefulSet
/// controller names it; `claim_ordinal` reads the name back.
pub fn claim_name(db: &Database, ordinal: u32) -> String {
    format!("{VOLUME}-{}-{ordinal}", name(db))
}

/// The instance whose volume a claim of this name is, if it is one.
pub fn claim_ordinal(db: &Database, claim: &str) -> Option<u32> {
    claim
        .strip_prefix(VOLUME)?
        .strip_prefix('-')?
        .strip_prefix(name(db))?
        .strip_prefix('-')?
        .parse::<u32>()
        .ok()
}

/// The Jobs' names (the promote Jobs': [`promote_job`]).
pub mod jobs {
    use super::{Database, Major, name};

    /// The initial configuration.
    pub fn init(db: &Database) -> String {
        format!("{}-init", name(db))
    }

    /// The backup taken before upgrading to `to`.
    pub fn pre_upgrade(db: &Database, to: Major) -> String {
        pre_upgrade_of(name(db), to)
    }

    /// The restore into `to`.
    pub fn upgrade(db: &Database, to: Major) -> String {
        format!("{}-upgrade-{}", name(db), to.as_str())
    }

    /// The snapshot before deletion.
    pub fn snapshot(db: &Database) -> String {
        snapshot_of(name(db))
    }

    /// The restore of `spec.bootstrap`'s dump into a new Database.
    pub fn restore(db: &Database) -> String {
        format!("{}-restore", name(db))
    }

    fn snapshot_of(database: &str) -> String {
        format!("{database}-snapshot")
    }

    fn pre_upgrade_of(database: &str, to: Major) -> String {
        format!("{database}-pre-upgrade-{}", to.as_str())
    }

    /// The names a Database's dumps are stored under: a dump Job's name is
    /// its dump's name, `<prefix><name>-<YYYYMMDDTHHMMSSZ>.pgdump` (see
    /// `backup_job`). The scheduled dumps carry the Database's own name, the
    /// snapshot `<name>-snapshot`, the pre-upgrade dumps
    /// `<name>-pre-upgrade-<major>`.
    pub fn dump_names(database: &str) -> Vec<String> {
        let mut names = vec![database.to_string(), snapshot_of(database)];
        names.extend(
            Major::ALL
                .into_iter()
                .map(|to| pre_upgrade_of(database, to)),
        );
        names
    }
}

/// The Secret of the application user's credentials: the spec's own, else
/// the generated one.
pub fn credentials_secret_name(db: &Database) -> String {
    db.spec
        .credentials_secret
        .clone()
        .unwrap_or_else(|| generated_credentials_name(db))
}

/// Where every instance reads the role ConfigMap.
pub const ROLE_DIR: &str = "/etc/opshooks/role";

/// Where every instance reads the pg_hba.conf of `spec.postgresql.pgHba`.
pub const HBA_DIR: &str = "/etc/opshooks/hba";

/// The volume of the pg_hba.conf's ConfigMap, mounted at [`HBA_DIR`].
pub const HBA_VOLUME: &str = "hba";

/// Where each instance's volume is mounted.
pub const DATA_DIR: &str = "/var/lib/postgresql/data";

/// The data directory of a major: versioned, so an upgrade builds the new
/// version beside the old one on the same volume.
pub fn pgdata(version: Major) -> String {
    version.data_dir(DATA_DIR)
}

/// Where barman-cloud stores a Database's archive: `archive/` under the
/// destination's prefix, beside the dumps, in a folder of its own
/// (`archive::server_name`).
pub fn destination_url(dest: &Destination) -> String {
    format!("s3://{}/{}archive", dest.s3_bucket, dest.s3_prefix)
}
