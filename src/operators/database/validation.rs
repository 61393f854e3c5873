//! The spec's own rules: what the CRD's schema cannot check in the
//! fields `spec.rs` declares, each refusal naming the field and the fix.
//! A feature with fields of its own checks them (`monitoring`);
//! `database::validate` asks both.

use super::parameters;
use k8s_openapi::jiff::Timestamp;

use super::spec::{
    ArchiveRecovery, Bootstrap, Database, DatabaseBackup, DeletionPolicy, MAX_NAME, Major, Tls,
    before_stamp, is_synchronous, name,
};
use crate::operators::backup_job::validate_destination;
use crate::operators::resources;
use crate::operators::validate::{self, InvalidSpec};

/// Checks what the schema cannot in the spec's own fields, and names the
/// field; a feature's own fields are its to check (`database::validate`).
pub(super) fn validate(db: &Database) -> Result<(), InvalidSpec> {
    validate::dns_label("metadata.name", name(db), MAX_NAME)?;
    validate_sizes(db)?;
    validate_backups(db)?;
    if let Some(bootstrap) = &db.spec.bootstrap {
        validate_bootstrap(db, bootstrap)?;
    }
    if let Some(image) = &db.spec.image_name {
        validate_image(db.spec.version, image)?;
    }
    if let Some(image) = &db.spec.storage.resize_image {
        validate::image("spec.storage.resizeImage", image)?;
    }
    if let Some(backup) = &db.spec.backup {
        validate_backup_pods(backup)?;
    }
    if let Some(r) = &db.spec.resources {
        resources::validate("spec.resources", r)?;
    }
    if let Some(tls) = &db.spec.tls {
        validate_tls(tls)?;
    }
    if let Some(pg) = &db.spec.postgresql {
        parameters::validate(&pg.parameters, db.spec.size.instances(), is_synchronous(db))?;
        parameters::validate_hba(&pg.pg_hba)?;
    }
    super::placement::validate(
        db.spec.affinity.as_ref(),
        db.spec.topology_spread_constraints.as_deref(),
    )?;
    for (i, secret) in db.spec.image_pull_secrets.iter().enumerate() {
        let field = format!("spec.imagePullSecrets[{i}].name");
        validate::object_name(&field, &secret.name, "Secret")?;
    }
    Ok(())
}

/// The sizes and names: a synchronous Database needs a standby; the
/// storage, the standby lag and the PostgreSQL names must be ones the
/// server can take.
fn validate_sizes(db: &Database) -> Result<(), InvalidSpec> {
    if is_synchronous(db) && db.spec.size.instances() < 2 {
        return Err(InvalidSpec::new(
            "spec.replication",
            "synchronous needs a standby to confirm each commit, and size small runs one instance (no commit could return); choose size medium or large, or replication asynchronous",
        ));
    }
    if validate::quantity_bytes(&db.spec.storage.size).is_none_or(|b| b == 0) {
        return Err(InvalidSpec::new(
            "spec.storage.size",
            format!(
                "{:?} is not a storage size; write it like 20Gi",
                db.spec.storage.size
            ),
        ));
    }
    let lag = db
        .spec
        .failover
        .as_ref()
        .and_then(|f| f.max_standby_lag.as_ref());
    if let Some(lag) = lag.filter(|l| validate::quantity_bytes(l).is_none_or(|b| b == 0)) {
        return Err(InvalidSpec::new(
            "spec.failover.maxStandbyLag",
            format!("{lag:?} is not an amount of WAL; write it like 64Mi"),
        ));
    }
    // PostgreSQL cuts names at 63 bytes, not characters: a longer name is
    // created but can never log in.
    for (field, value) in [
        ("spec.databaseName", &db.spec.database_name),
        ("spec.user", &db.spec.user),
    ] {
        if let Some(value) = value
            && (value.is_empty() || value.len() > 63)
        {
            return Err(InvalidSpec::new(
                field,
                format!(
                    "{value:?} is {} bytes; PostgreSQL names hold 1 to 63 bytes",
                    value.len()
                ),
            ));
        }
    }
    Ok(())
}

/// The backups' destination and schedules, and the Snapshot policy's need
/// of a destination.
fn validate_backups(db: &Database) -> Result<(), InvalidSpec> {
    if let Some(b) = &db.spec.backup {
        validate_destination("spec.backup.destination", &b.destination)?;
        match (&b.schedule, b.enabled) {
            (Some(s), _) => validate::cron("spec.backup.schedule", s)?,
            (None, true) => {
                return Err(InvalidSpec::new(
                    "spec.backup.schedule",
                    "is required when backups are enabled; write it like \"0 2 * * *\"",
                ));
            }
            (None, false) => {}
        }
        if let Some(schedule) = b.verify.as_ref().and_then(|v| v.schedule.as_ref()) {
            validate::cron("spec.backup.verify.schedule", schedule)?;
        }
    }
    if db.spec.deletion_policy == DeletionPolicy::Snapshot && db.spec.backup.is_none() {
        return Err(InvalidSpec::new(
            "spec.deletionPolicy",
            "Snapshot needs spec.backup.destination to store the snapshot; add one, or choose Retain or Delete",
        ));
    }
    Ok(())
}

/// What the pods that read or write the store run with: the upload image,
/// their resources and their ServiceAccount.
fn validate_backup_pods(backup: &DatabaseBackup) -> Result<(), InvalidSpec> {
    if let Some(image) = &backup.upload_image {
        validate::image("spec.backup.uploadImage", image)?;
    }
    if let Some(r) = &backup.resources {
        resources::validate("spec.backup.resources", r)?;
    }
    if let Some(account) = &backup.service_account_name {
        validate::object_name("spec.backup.serviceAccountName", account, "ServiceAccount")?;
    }
    Ok(())
}

/// `spec.tls`: one source, each named as Kubernetes names it.
fn validate_tls(tls: &Tls) -> Result<(), InvalidSpec> {
    if tls.secret_name.is_some() && tls.issuer_ref.is_some() {
        return Err(InvalidSpec::new(
            "spec.tls",
            "give secretName or issuerRef, not both: the instances serve one certificate",
        ));
    }
    if let Some(secret) = &tls.secret_name {
        validate::object_name("spec.tls.secretName", secret, "Secret")?;
    }
    let Some(issuer) = &tls.issuer_ref else {
        return Ok(());
    };
    if !validate::is_dns_subdomain(&issuer.name) {
        return Err(InvalidSpec::new(
            "spec.tls.issuerRef.name",
            format!(
                "{} is not an issuer's name (lower-case letters, digits, '-' and '.', at most 253)",
                validate::quote(&issuer.name)
            ),
        ));
    }
    let kind_ok = |k: &str| {
        (1..=63).contains(&k.len())
            && k.starts_with(|c: char| c.is_ascii_uppercase())
            && k.chars().all(|c| c.is_ascii_alphanumeric())
    };
    if let Some(kind) = issuer.kind.as_deref().filter(|k| !kind_ok(k)) {
        return Err(InvalidSpec::new(
            "spec.tls.issuerRef.kind",
            format!(
                "{} is not a kind; write Issuer, ClusterIssuer or an external issuer's kind (letters and digits, a capital first)",
                validate::quote(kind)
            ),
        ));
    }
    if let Some(group) = issuer
        .group
        .as_deref()
        .filter(|g| !validate::is_dns_subdomain(g))
    {
        return Err(InvalidSpec::new(
            "spec.tls.issuerRef.group",
            format!(
                "{} is not an API group; omit it for cert-manager.io, or write the external issuer's group",
                validate::quote(group)
            ),
        ));
    }
    Ok(())
}

/// `spec.imageName`: an image reference whose tag, when it names a major,
/// names `spec.version`'s.
fn validate_image(version: Major, image: &str) -> Result<(), InvalidSpec> {
    validate::image("spec.imageName", image)?;
    match Major::of_image(image) {
        Ok(Some(major)) if major != version => Err(InvalidSpec::new(
            "spec.imageName",
            format!(
                "{} names PostgreSQL {}, but spec.version is {}; change both together (a major upgrade), or use an image of {}",
                validate::quote(image),
                major.as_str(),
                version.as_str(),
                version.as_str()
            ),
        )),
        Err(number) => Err(InvalidSpec::new(
            "spec.imageName",
            format!(
                "{} names PostgreSQL {number}, which this operator does not run (14 to 18)",
                validate::quote(image)
            ),
        )),
        Ok(_) => Ok(()),
    }
}

/// Checks `spec.bootstrap` as the schema's rules do, for callers that
/// bypass the API server.
fn validate_bootstrap(db: &Database, b: &Bootstrap) -> Result<(), InvalidSpec> {
    let named = [&b.database, &b.backup, &b.key]
        .into_iter()
        .filter(|f| f.is_some())
        .count()
        + usize::from(b.archive.is_some());
    if named != 1 {
        return Err(InvalidSpec::new(
            "spec.bootstrap",
            "names exactly one of database, backup, key and archive",
        ));
    }
    if let Some(archive) = &b.archive {
        return validate_archive_recovery(db, b, archive);
    }
    for (field, value) in [
        ("spec.bootstrap.database", &b.database),
        ("spec.bootstrap.backup", &b.backup),
    ] {
        if let Some(value) = value {
            validate::dns_label(field, value, 63)?;
        }
    }
    if let Some(key) = &b.key
        && (key.is_empty() || key.chars().any(char::is_control))
    {
        return Err(InvalidSpec::new(
            "spec.bootstrap.key",
            "must be an object key without control characters, like nightly/orders-20261124T020000Z.pgdump",
        ));
    }
    if let Some(before) = &b.before {
        if b.key.is_some() {
            return Err(InvalidSpec::new(
                "spec.bootstrap.before",
                "chooses among dumps; with an exact key there is nothing to choose",
            ));
        }
        before_stamp(before)?;
    }
    match (&b.destination, &db.spec.backup) {
        (Some(d), _) => validate_destination("spec.bootstrap.destination", d),
        (None, Some(_)) => Ok(()),
        (None, None) => Err(InvalidSpec::new(
            "spec.bootstrap.destination",
            "is required without spec.backup.destination: say where the dump is",
        )),
    }
}

/// A recovery from an archive replays it with the server of its major:
/// until the Database was recovered, `spec.version` must be the folder's
/// (`-pg<major>`); after, it may be upgraded. Checked by `sync` only, so
/// that a Database created with the wrong one can still be deleted.
pub(super) fn recovery_major(db: &Database) -> Result<(), InvalidSpec> {
    let Some(archive) = db.spec.bootstrap.as_ref().and_then(|b| b.archive.as_ref()) else {
        return Ok(());
    };
    let recovered = db
        .status
        .as_ref()
        .is_some_and(|s| s.restored_from.is_some());
    let major = format!("-pg{}", db.spec.version.as_str());
    if recovered || archive.folder.ends_with(&major) {
        return Ok(());
    }
    Err(InvalidSpec::new(
        "spec.bootstrap.archive.folder",
        format!(
            "{} is not an archive folder of PostgreSQL {}: set spec.version to the archive's major (its -pg<major>); a recovered Database may be upgraded after",
            validate::quote(&archive.folder),
            db.spec.version.as_str()
        ),
    ))
}

/// Checks `spec.bootstrap.archive`: a folder of this major, at most one
/// target, each of the form the recovery scripts and PostgreSQL read, and
/// an archiver to fetch the WAL.
fn validate_archive_recovery(
    db: &Database,
    b: &Bootstrap,
    archive: &ArchiveRecovery,
) -> Result<(), InvalidSpec> {
    if b.before.is_some() || b.destination.is_some() {
        return Err(InvalidSpec::new(
            "spec.bootstrap.archive",
            "recovers from the archive in spec.backup.destination to its own target: remove spec.bootstrap.before and spec.bootstrap.destination",
        ));
    }
    if db
        .spec
        .backup
        .as_ref()
        .and_then(|b| b.archive.as_ref())
        .is_none()
    {
        return Err(InvalidSpec::new(
            "spec.bootstrap.archive",
            "needs spec.backup.archive: its sidecar fetches the WAL the recovery replays, from spec.backup.destination",
        ));
    }
    validate_archive_folder(&archive.folder)?;
    validate_recovery_target(archive)
}

/// The folder a recovery reads: one an archiving Database writes.
fn validate_archive_folder(folder: &str) -> Result<(), InvalidSpec> {
    let well_formed = folder.len() <= 120
        && folder.starts_with(|c: char| c.is_ascii_alphanumeric())
        && folder
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    let of_a_major = folder
        .rsplit_once("-pg")
        .is_some_and(|(_, m)| Major::parse(m).is_some());
    if !(well_formed && of_a_major) {
        return Err(InvalidSpec::new(
            "spec.bootstrap.archive.folder",
            format!(
                "{} is not an archive folder: name it as the source's Archiving condition does, <name>-<uid>-pg<major>",
                validate::quote(folder)
            ),
        ));
    }
    Ok(())
}

/// At most one recovery target, each written as PostgreSQL reads it.
fn validate_recovery_target(archive: &ArchiveRecovery) -> Result<(), InvalidSpec> {
    let targets = [
        &archive.target_time,
        &archive.target_lsn,
        &archive.target_name,
    ];
    if targets.iter().filter(|t| t.is_some()).count() > 1 {
        return Err(InvalidSpec::new(
            "spec.bootstrap.archive",
            "names at most one of targetTime, targetLSN and targetName",
        ));
    }
    if let Some(time) = &archive.target_time
        && time.parse::<Timestamp>().is_err()
    {
        return Err(InvalidSpec::new(
            "spec.bootstrap.archive.targetTime",
            format!(
                "{} is not an RFC 3339 time; write it like 2026-11-24T17:00:00Z",
                validate::quote(time)
            ),
        ));
    }
    if let Some(lsn) = &archive.target_lsn {
        let hex = |part: &str| {
            (1..=8).contains(&part.len()) && part.chars().all(|c| c.is_ascii_hexdigit())
        };
        if !lsn
            .split_once('/')
            .is_some_and(|(hi, lo)| hex(hi) && hex(lo))
        {
            return Err(InvalidSpec::new(
                "spec.bootstrap.archive.targetLSN",
                format!(
                    "{} is not a WAL position; write it like 0/5000028",
                    validate::quote(lsn)
                ),
            ));
        }
    }
    if let Some(point) = &archive.target_name
        && (point.is_empty() || point.len() > 63 || point.chars().any(char::is_control))
    {
        return Err(InvalidSpec::new(
            "spec.bootstrap.archive.targetName",
            "must be a restore point's name: 1 to 63 characters, none a control character",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_of_another_major_is_refused_naming_both() {
        let db = |image: &str| -> Database {
            crate::fixtures::orders().spec("imageName", image).typed()
        };
        assert!(validate(&db("postgres:16.6")).is_ok());
        assert!(validate(&db("example.com/pg@sha256:00")).is_ok());
        for bad in ["postgres:17.2", "postgres:13", "postgres 16"] {
            let e = validate(&db(bad)).unwrap_err();
            assert_eq!(e.field, "spec.imageName", "{bad}");
        }
        let e = validate(&db("postgres:17.2")).unwrap_err();
        assert!(
            e.message
                .contains("names PostgreSQL 17, but spec.version is 16"),
            "{}",
            e.message
        );
    }
    #[test]
    fn a_recovery_from_an_archive_names_a_folder_of_its_major_and_one_target() {
        let db = |archive: serde_json::Value, with_archiver: bool| -> Database {
            let mut backup = serde_json::json!({
                "destination": {"s3Bucket": "orders-backups", "credentialsSecret": "s3-creds"}
            });
            if with_archiver {
                backup["archive"] = serde_json::json!({});
            }
            crate::fixtures::orders()
                .spec("bootstrap", serde_json::json!({ "archive": archive }))
                .spec("backup", backup)
                .typed()
        };
        let folder = "orders-6f1c-pg16";
        for ok in [
            serde_json::json!({ "folder": folder }),
            serde_json::json!({ "folder": folder, "targetTime": "2026-11-24T17:00:00Z" }),
            serde_json::json!({ "folder": folder, "targetLSN": "0/5000028" }),
            serde_json::json!({ "folder": folder, "targetName": "before-migration" }),
        ] {
            let checked = validate(&db(ok.clone(), true));
            assert!(checked.is_ok(), "{ok}: {checked:?}");
        }
        for (bad, field, words) in [
            (
                serde_json::json!({ "folder": "orders-6f1c-pg13" }),
                "spec.bootstrap.archive.folder",
                "not an archive folder",
            ),
            (
                serde_json::json!({ "folder": "-x-pg16" }),
                "spec.bootstrap.archive.folder",
                "not an archive folder",
            ),
            (
                serde_json::json!({ "folder": "a b-pg16" }),
                "spec.bootstrap.archive.folder",
                "not an archive folder",
            ),
            (
                serde_json::json!({ "folder": folder, "targetLSN": "0/1", "targetName": "n" }),
                "spec.bootstrap.archive",
                "at most one of",
            ),
            (
                serde_json::json!({ "folder": folder, "targetTime": "yesterday" }),
                "spec.bootstrap.archive.targetTime",
                "not an RFC 3339 time",
            ),
            (
                serde_json::json!({ "folder": folder, "targetLSN": "5000028" }),
                "spec.bootstrap.archive.targetLSN",
                "not a WAL position",
            ),
            (
                serde_json::json!({ "folder": folder, "targetName": "a\nb" }),
                "spec.bootstrap.archive.targetName",
                "control character",
            ),
        ] {
            let e = validate(&db(bad.clone(), true)).unwrap_err();
            assert_eq!(e.field, field, "{bad}");
            assert!(e.message.contains(words), "{bad}: {}", e.message);
        }
        // Another major than spec.version: refused by sync until recovered,
        // then upgrades are free.
        let mut other = db(serde_json::json!({ "folder": "orders-6f1c-pg15" }), true);
        assert!(validate(&other).is_ok());
        let e = recovery_major(&other).unwrap_err();
        assert!(
            e.message.contains("not an archive folder of PostgreSQL 16"),
            "{}",
            e.message
        );
        assert!(recovery_major(&db(serde_json::json!({ "folder": folder }), true)).is_ok());
        other.status = Some(
            serde_json::from_value(
                serde_json::json!({"restoredFrom": {"object": "o", "restoredAt": "2026-01-01T00:00:00Z"}}),
            )
            .unwrap(),
        );
        assert!(recovery_major(&other).is_ok());
        let e = validate(&db(serde_json::json!({ "folder": folder }), false)).unwrap_err();
        assert_eq!(
            (
                e.field.as_str(),
                e.message.contains("needs spec.backup.archive")
            ),
            ("spec.bootstrap.archive", true)
        );
    }
}
