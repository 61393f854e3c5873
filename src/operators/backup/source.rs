//! What a Backup's target shows: how to reach the database in a
//! PostgreSQL StatefulSet (its Service, port, database, user and password
//! Secret), read from the StatefulSet's own spec, or why it cannot be
//! backed up. Reads only the StatefulSet; imports nothing of the Backup.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Container, EnvVar};

use crate::operators::backup_job::{Credential, Source};
use crate::operators::expansion::as_seen;

/// Why a target cannot be backed up.
#[derive(Clone, Debug, PartialEq)]
pub struct Unusable {
    /// CamelCase reason for the condition.
    pub reason: &'static str,
    /// One line for people.
    pub message: String,
}

/// How to reach the database in a PostgreSQL StatefulSet, read from its own
/// spec: its Service, port, database, user and password Secret.
pub fn source_of(sts: &StatefulSet, database: Option<&str>) -> Result<Source, Unusable> {
    let sts_name = sts.metadata.name.clone().unwrap_or_default();
    let ns = sts
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let spec = sts.spec.as_ref();
    let containers = spec
        .and_then(|s| s.template.spec.as_ref())
        .map(|p| p.containers.as_slice())
        .unwrap_or_default();
    let container = postgres_container(containers).ok_or_else(|| Unusable {
        reason: "NotPostgres",
        message: format!("statefulset {sts_name} has no PostgreSQL container (none sets POSTGRES_PASSWORD or runs a postgres image)"),
    })?;
    let var = |name: &str| container.env.iter().flatten().find(|e| e.name == name);
    let password = match var("POSTGRES_PASSWORD").and_then(credential) {
        Some(secret @ Credential::Secret { .. }) => secret,
        _ => {
            return Err(Unusable {
                reason: "PasswordNotInSecret",
                message: format!(
                    "statefulset {sts_name} container {} does not take POSTGRES_PASSWORD from a Secret; backups reuse that Secret and never copy passwords",
                    container.name
                ),
            });
        }
    };
    let user = var("POSTGRES_USER")
        .and_then(credential)
        .unwrap_or_else(|| Credential::Value("postgres".into()));
    let database = database
        .map(String::from)
        .or_else(|| {
            var("POSTGRES_DB").and_then(|e| Some(as_seen(e.value.as_deref()?).into_owned()))
        })
        .or_else(|| match &user {
            Credential::Value(u) => Some(u.clone()),
            Credential::Secret { .. } => None,
        })
        .unwrap_or_else(|| "postgres".into());
    let port = postgres_port(container);
    let service = spec
        .and_then(|s| s.service_name.clone())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| sts_name.clone());
    Ok(Source {
        host: format!("{service}.{ns}.svc"),
        port,
        database,
        user,
        password,
        image: container.image.clone().unwrap_or_else(|| "postgres".into()),
    })
}

/// The container that runs PostgreSQL: the one given POSTGRES_PASSWORD,
/// else the one running a postgres image.
fn postgres_container(containers: &[Container]) -> Option<&Container> {
    let has = |c: &Container, var: &str| c.env.iter().flatten().any(|e| e.name == var);
    containers
        .iter()
        .find(|c| has(c, "POSTGRES_PASSWORD"))
        .or_else(|| {
            containers
                .iter()
                .find(|c| c.image.as_deref().is_some_and(|i| i.contains("postgres")))
        })
}

/// Where a variable's value comes from: written in the spec (as its
/// program sees it), or a Secret's key (a ConfigMap or field reference is
/// no credential).
fn credential(e: &EnvVar) -> Option<Credential> {
    if let Some(value) = &e.value {
        return Some(Credential::Value(as_seen(value).into_owned()));
    }
    let secret = e.value_from.as_ref()?.secret_key_ref.as_ref()?;
    Some(Credential::Secret {
        name: secret.name.clone(),
        key: secret.key.clone(),
    })
}

/// The port PostgreSQL listens on: the one named for it, else 5432.
fn postgres_port(container: &Container) -> i32 {
    let ports = || container.ports.iter().flatten();
    ports()
        .find(|p| {
            matches!(
                p.name.as_deref(),
                Some("postgres" | "postgresql" | "tcp-postgresql")
            )
        })
        .or_else(|| ports().find(|p| p.container_port == 5432))
        .map_or(5432, |p| p.container_port)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use serde_json::json;

    fn sts(env: serde_json::Value, ports: serde_json::Value, service: Option<&str>) -> StatefulSet {
        fixtures::statefulset("mydb")
            .namespace("prod")
            .set("/spec/serviceName", json!(service))
            .containers(json!([
                {"name": "sidecar", "image": "busybox"},
                {"name": "pg", "image": "postgres:16.4", "env": env, "ports": ports}]))
            .typed()
    }

    fn secret(name: &str, key: &str) -> serde_json::Value {
        json!({"secretKeyRef": {"name": name, "key": key}})
    }

    #[test]
    fn source_is_read_from_the_target() {
        let env = json!([
            {"name": "POSTGRES_USER", "valueFrom": secret("creds", "user")},
            {"name": "POSTGRES_PASSWORD", "valueFrom": secret("creds", "pass")},
            {"name": "POSTGRES_DB", "value": "orders"}]);
        let source = source_of(
            &sts(
                env,
                json!([{"name": "postgresql", "containerPort": 6432}]),
                Some("mydb-hl"),
            ),
            None,
        )
        .unwrap();
        assert_eq!(source.host, "mydb-hl.prod.svc");
        assert_eq!(source.port, 6432);
        assert_eq!(source.database, "orders");
        assert_eq!(source.image, "postgres:16.4");
        assert_eq!(
            source.user,
            Credential::Secret {
                name: "creds".into(),
                key: "user".into()
            }
        );
        assert_eq!(
            source.password,
            Credential::Secret {
                name: "creds".into(),
                key: "pass".into()
            }
        );
    }

    #[test]
    fn defaults_follow_the_postgres_image() {
        let env = json!([{"name": "POSTGRES_PASSWORD", "valueFrom": secret("c", "p")}]);
        let source = source_of(&sts(env.clone(), json!([]), None), None).unwrap();
        assert_eq!(
            source.host, "mydb.prod.svc",
            "no serviceName: the StatefulSet's name"
        );
        assert_eq!(source.port, 5432);
        assert_eq!(source.user, Credential::Value("postgres".into()));
        assert_eq!(source.database, "postgres", "the user's own database");
        let chosen = source_of(&sts(env, json!([]), None), Some("other")).unwrap();
        assert_eq!(chosen.database, "other", "spec.database wins");
    }

    #[test]
    fn a_literal_password_is_never_copied() {
        let env = json!([{"name": "POSTGRES_PASSWORD", "value": "hunter2"}]);
        let err = source_of(&sts(env, json!([]), None), None).unwrap_err();
        assert_eq!(err.reason, "PasswordNotInSecret");
        assert!(!err.message.contains("hunter2"));
    }

    #[test]
    fn a_statefulset_without_postgres_is_unusable() {
        let not_pg: StatefulSet = fixtures::statefulset("web")
            .containers(json!([{"name": "nginx", "image": "nginx"}]))
            .typed();
        assert_eq!(source_of(&not_pg, None).unwrap_err().reason, "NotPostgres");
    }
}
