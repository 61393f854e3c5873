//! The spec's own rules: what the CRD's schema cannot check in the
//! fields `spec.rs` declares, each refusal naming the field and the fix.
//! A feature with fields of its own checks them (`monitoring`);
//! `database::validate` asks both.

use super::parameters;
use super::spec::{
    Bootstrap, Database, DatabaseBackup, DeletionPolicy, MAX_NAME, Major, Tls, before_stamp,
    is_synchronous, name,
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
        .count();
    if named != 1 {
        return Err(InvalidSpec::new(
            "spec.bootstrap",
            "names exactly one of database, backup and key",
        ));
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
}
