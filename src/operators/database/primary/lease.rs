//! The lease (issue 32, fencing): each instance of a Database that can
//! fail over runs a sidecar, `lease.sh`, that reads the role ConfigMap from
//! the API server every [`RENEW_SECONDS`] and rewrites [`FILE`] with when
//! it asked and what the role said. The kubelet's mount of the same
//! ConfigMap lags a minute and never changes on a node cut off from the
//! control plane; the lease does, and its age counts the cut.
//!
//! - `start.sh` starts a primary only on a fresh lease naming it, and its
//!   watchdog stops the primary once its lease is older than
//!   [`SECONDS`] (not when a fresh one names another pod: a planned
//!   switchover's promote Job stops the old primary itself).
//! - `promote.sh` (a failover) promotes only [`SECONDS`] plus the
//!   watchdog's period and a margin after the hook saw the role name the
//!   candidate: by then an old primary that still runs, partitioned or
//!   paused, has stopped.
//! - `probe.sh` and `start.sh` take a lease at a newer epoch than the mount
//!   over the mount.
//!
//! The sidecar runs the instances' own image (its `openssl` and `perl` are
//! dependencies of Debian's PostgreSQL packages) as the server's user, with
//! a ServiceAccount `<name>-lease` whose Role may `get` the one ConfigMap.
//! Its token is projected into the sidecar only: the pod mounts no token
//! otherwise, so the server's sessions (`COPY TO PROGRAM` as a superuser)
//! cannot read it.
//!
//! The cost, stated in docs/failover.md: a primary whose node cannot reach the
//! API server for [`SECONDS`] stops taking writes until it can. A single
//! instance cannot fail over, so it gets no lease and keeps serving.

use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EnvVar, PodSpec, ResourceRequirements, ServiceAccount, Volume,
};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::super::names::{lease_account_name, role_name};
use super::super::objects::{api_credentials_volume, core_rule, identity, mount};
use super::super::observed::Observed;
use super::super::spec::{Database, namespace};

use crate::operators::common::restricted_container;
use crate::operators::expansion::{env, shell_command};
use crate::operators::resources::cpu_memory;

/// The sidecar's script.
const SCRIPT: &str = include_str!("../lease.sh");
/// Where both containers see the lease: an emptyDir in memory.
const DIR: &str = "/var/run/opshooks/lease";
/// The lease file, in [`DIR`].
const FILE: &str = "/var/run/opshooks/lease/lease";
/// Where the sidecar reads its token and the cluster's CA.
const CREDENTIALS: &str = "/var/run/secrets/opshooks/lease";
/// A primary serves while its lease is at most this old. Patroni's leader
/// TTL is 30 s; this is shorter so that a failover fits in the RTO the
/// docs/failover.md states (a failover's promote Job waits this plus some 4 s), and
/// still outlasts a failed renewal or two (each gives up after 5 s) and
/// an API server's restart of some seconds.
const SECONDS: u32 = 10;
/// How often the sidecar renews.
const RENEW_SECONDS: u32 = 2;
/// How often the watchdog checks.
const CHECK_SECONDS: u32 = 1;
/// The volumes.
const VOLUME: &str = "lease";
const CREDENTIALS_VOLUME: &str = "lease-credentials";

/// Whether this Database's instances hold a lease: when it has standbys,
/// which a failover promotes.
pub(in super::super) fn enabled(db: &Database) -> bool {
    db.spec.size.instances() > 1
}

/// Whether the lease's ServiceAccount, Role and RoleBinding are kept:
/// while it is [`enabled`], and while the observed StatefulSet's pods still
/// run as that ServiceAccount (a `size` made `small`): deleted under them,
/// the sidecar's token stops working, its lease ages, and the watchdog
/// stops the primary before the rollout replaces it.
pub(in super::super) fn kept(db: &Database, seen: &Observed) -> bool {
    let account = lease_account_name(db);
    enabled(db)
        || seen
            .statefulset
            .as_ref()
            .and_then(|sts| {
                sts.spec
                    .as_ref()?
                    .template
                    .spec
                    .as_ref()?
                    .service_account_name
                    .as_ref()
            })
            .is_some_and(|used| *used == account)
}

/// The instances' ServiceAccount (named after the lease, its first use),
/// its Role (`get` on the role ConfigMap, and `more`: the archiver's
/// report) and their binding.
pub(in super::super) fn children(
    db: &Database,
    more: Option<PolicyRule>,
) -> (ServiceAccount, Role, RoleBinding) {
    let lease = core_rule("configmaps", &["get"], vec![role_name(db)]);
    identity(
        db,
        lease_account_name(db),
        [lease].into_iter().chain(more).collect(),
        false,
    )
}

/// The values `start.sh`, `probe.sh` and `promote.sh` read the lease by.
pub(in super::super) fn script_env() -> Vec<EnvVar> {
    vec![
        env("LEASE_FILE", FILE),
        env("LEASE_SECONDS", SECONDS.to_string()),
        env("LEASE_CHECK_SECONDS", CHECK_SECONDS.to_string()),
    ]
}

/// Adds the lease to an instance's pod: the sidecar, its volumes and
/// ServiceAccount, and the lease's values and mount to `server`, the
/// container that runs `start.sh`.
pub(in super::super) fn apply(db: &Database, image: String, pod: &mut PodSpec, server: &str) {
    for container in pod.containers.iter_mut().filter(|c| c.name == server) {
        container
            .env
            .get_or_insert_with(Vec::new)
            .extend(script_env());
        container
            .volume_mounts
            .get_or_insert_with(Vec::new)
            .push(mount(VOLUME, DIR, true));
    }
    pod.containers.push(sidecar(db, image));
    pod.volumes.get_or_insert_with(Vec::new).extend([
        Volume {
            name: VOLUME.to_string(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("Memory".to_string()),
                size_limit: Some(Quantity("1Mi".to_string())),
            }),
            ..Volume::default()
        },
        api_credentials_volume(CREDENTIALS_VOLUME),
    ]);
    pod.service_account_name = Some(lease_account_name(db));
    pod.automount_service_account_token = Some(false);
}

/// The sidecar: `lease.sh` in the instances' image.
fn sidecar(db: &Database, image: String) -> Container {
    Container {
        name: "lease".to_string(),
        image: Some(image),
        command: Some(shell_command(SCRIPT)),
        env: Some(vec![
            env("NAMESPACE", namespace(db)),
            env("CONFIGMAP", role_name(db)),
            env("LEASE_FILE", FILE),
            env("LEASE_CREDENTIALS", CREDENTIALS),
            env("LEASE_RENEW_SECONDS", RENEW_SECONDS.to_string()),
        ]),
        volume_mounts: Some(vec![
            mount(VOLUME, DIR, false),
            mount(CREDENTIALS_VOLUME, CREDENTIALS, true),
        ]),
        resources: Some(ResourceRequirements {
            requests: Some(cpu_memory("20m", "32Mi")),
            limits: Some(cpu_memory("100m", "64Mi")),
            ..ResourceRequirements::default()
        }),
        security_context: Some(restricted_container()),
        ..Container::default()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::fixtures;

    fn db(size: &str) -> Database {
        fixtures::orders().spec("size", size).typed()
    }

    /// With standbys the pods hold a lease, through a token only the
    /// sidecar mounts; a single instance holds none, but the lease's
    /// ServiceAccount, Role and RoleBinding stay while the observed pods
    /// still run as it (deleted under them, the sidecar's token stops
    /// working and the watchdog stops the primary).
    #[test]
    fn the_lease_is_the_sidecars_alone_and_outlives_the_pods_that_use_it() {
        let medium = db("medium");
        assert!(enabled(&medium) && !enabled(&db("small")));
        let mut pod = PodSpec {
            containers: vec![Container {
                name: "postgres".into(),
                ..Container::default()
            }],
            ..PodSpec::default()
        };
        apply(&medium, "postgres:16".into(), &mut pod, "postgres");
        assert_eq!(pod.automount_service_account_token, Some(false));
        assert_eq!(pod.service_account_name.as_deref(), Some("orders-lease"));
        let mounts = |c: &Container| -> Vec<String> {
            c.volume_mounts
                .iter()
                .flatten()
                .map(|m| m.name.clone())
                .collect()
        };
        assert_eq!(mounts(&pod.containers[0]), [VOLUME]);
        assert_eq!(mounts(&pod.containers[1]), [VOLUME, CREDENTIALS_VOLUME]);
        let server_env: Vec<&str> = pod.containers[0]
            .env
            .iter()
            .flatten()
            .map(|e| e.name.as_str())
            .collect();
        assert_eq!(
            server_env,
            ["LEASE_FILE", "LEASE_SECONDS", "LEASE_CHECK_SECONDS"]
        );
        let (_, role, _) = children(&medium, None);
        let rules = role.rules.unwrap();
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].verbs, ["get"]);
        assert_eq!(
            rules[0].resource_names.as_deref(),
            Some(&["orders-role".to_string()][..])
        );

        let small = db("small");
        let running = |account: &str| Observed {
            statefulset: Some(
                fixtures::statefulset("orders")
                    .set("/spec/template/spec/serviceAccountName", json!(account))
                    .typed(),
            ),
            ..Observed::default()
        };
        assert!(kept(&small, &running("orders-lease")));
        assert!(!kept(&small, &running("default")));
        assert!(!kept(&small, &Observed::default()));
        assert!(kept(&medium, &Observed::default()));
    }
}
