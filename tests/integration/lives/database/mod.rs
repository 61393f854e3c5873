//! The Database's lives: random specs (every field a user sets) and
//! events, with its data-safety rules (`rules.rs`) checked after every
//! step; the scripted lives that pinned a finding are in `scripted.rs`.

mod rules;
mod scripted;

use super::*;
use rules::*;

/// The Database `orders` every Database life starts from, backed up.
fn orders(version: &str, size: &str, policy: &str) -> Value {
    fixtures::orders()
        .namespace("ns")
        .spec("version", version)
        .spec("size", size)
        .spec("deletionPolicy", policy)
        .spec(
            "backup",
            json!({"enabled": true, "schedule": "0 2 * * *", "destination": {"s3Bucket": "backups"}}),
        )
        .json()
}

/// The random lives, as two tests of half the lives each, so that the
/// two run side by side on two cores: the longest of the integration
/// tests otherwise ran alone on one for the last minutes. Each replays the
/// regressions file's seeds (both draw alike).
macro_rules! database_lives {
    ($($name:ident),*) => { proptest! {
    #![proptest_config(super::super::support::proptest_config(128))]
    $(
    #[test]
    fn $name(
        bootstrap in any::<bool>(),
        version in 14u32..18,
        size in prop::sample::select(vec!["small", "medium", "large"]),
        policy in prop::sample::select(vec!["Snapshot", "Retain", "Delete"]),
        delay in prop::option::of(prop::sample::select(vec![0u32, 10, 30, 60])),
        first_postgresql in prop::option::of(prop::sample::select(postgresql())),
        placement in prop::option::of(placement()),
        newer in newer_fields(),
        seed in any::<u64>(),
        script in prop::collection::vec(prop_oneof![
            1 => (14u32..=18).prop_map(|v| Scripted::Spec("version", json!(v.to_string()))),
            1 => prop::sample::select(vec!["small", "medium", "large"]).prop_map(|s| Scripted::Spec("size", json!(s))),
            1 => prop::sample::select(vec!["Snapshot", "Retain", "Delete"]).prop_map(|p| Scripted::Spec("deletionPolicy", json!(p))),
            1 => prop::sample::select(vec!["orders-snapshot", "orders-init", "orders-pre-upgrade-18", "orders-upgrade-18", "orders-pre-upgrade-17", "orders-upgrade-17",
                                      "orders-pre-upgrade-16", "orders-upgrade-16", "orders-restore", "orders-promote-*",
                                      "orders-grow-*"])
                .prop_map(|j| Scripted::FailJob(j.to_string())),
            1 => Just(Scripted::ReleaseVolumes),
            3 => (1u32..10).prop_map(Scripted::KillPrimaryFor),
            1 => (0usize..3).prop_map(Scripted::StandbyNotReady),
            1 => (0usize..3).prop_map(Scripted::LoseVolume),
            1 => Just(Scripted::FailJob("orders-promote-*".to_string())),
            2 => prop::sample::select(vec!["pg/postgres@sha256:01", "pg/postgres@sha256:02"])
                .prop_map(|i| Scripted::Spec("imageName", json!(i))),
            1 => prop::sample::select(resources()).prop_map(|r| Scripted::Spec("resources", r)),
            2 => prop::sample::select(postgresql()).prop_map(|p| Scripted::Spec("postgresql", p)),
            1 => placement().prop_map(|(affinity, _, _)| Scripted::Spec("affinity", affinity)),
            1 => any::<bool>().prop_map(|on| Scripted::Spec("enablePDB", json!(on))),
            1 => prop::sample::select(vec!["2Gi", "3Gi"]).prop_map(|g| Scripted::Spec("storage.size", json!(g))),
            4 => common_events(),
        ], 0..7),
        // Last, so that the regressions file's seeds give their lives as
        // before: a bootstrap from a WAL archive instead of a dump.
        from_archive in any::<bool>(),
    ) {
        let op = operator("database");
        let mut parent = orders(&version.to_string(), size, policy);
        if let Some((affinity, spread, pdb)) = placement {
            parent["spec"]["affinity"] = affinity;
            if let Some(spread) = spread {
                parent["spec"]["topologySpreadConstraints"] = spread;
            }
            if let Some(pdb) = pdb {
                parent["spec"]["enablePDB"] = json!(pdb);
            }
        }
        match (bootstrap, from_archive) {
            (true, false) => parent["spec"]["bootstrap"] = json!({"database": "orders"}),
            // A point-in-time recovery needs the archiver that fetches.
            (true, true) => {
                parent["spec"]["bootstrap"] =
                    json!({"archive": {"folder": format!("orders-old-uid-pg{version}")}});
                parent["spec"]["backup"]["archive"] = json!({"timeoutSeconds": 60});
            }
            (false, _) => {}
        }
        if let Some(delay) = delay {
            parent["spec"]["failover"] = json!({"delay": delay});
        }
        if let Some(pg) = first_postgresql {
            parent["spec"]["postgresql"] = pg;
        }
        for (path, value) in newer {
            // The CRD refuses a small synchronous Database: none is made.
            if path == "replication" && size == "small" {
                continue;
            }
            let mut at = &mut parent["spec"];
            for key in path.split('/') {
                at = &mut at[key];
            }
            *at = value;
        }
        let history = History::default();
        let primaries = Primaries::default();
        let rule = |seen: &Seen<'_>| {
            database_rule(seen)?;
            placement_rule(seen.sim)?;
            restore_rule(seen, &history)?;
            rollout_rule(seen)?;
            base_backup_rule(seen)?;
            failover_rule(seen, &primaries)
        };
        // The CRD refuses a small synchronous Database, made or changed
        // so; a life applies its events unchecked, so that change is left
        // out (the hook's own refusal of it is the golden
        // invalid-synchronous-small's).
        let synchronous = parent["spec"]["replication"] == "synchronous";
        let script: Vec<Scripted> = script
            .into_iter()
            .filter(|e| !(synchronous && matches!(e, Scripted::Spec("size", v) if v == "small")))
            .collect();
        let result = live(&op, parent, seed, &script, |_| {}, rule, database_reached);
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }
    )*
    } };
}

database_lives!(database_lives, database_lives_second_half);

/// Any subset of the spec's newer fields, each as (path under `spec`,
/// value): synchronous replication (with standbys), a standby lag bound, TLS from a Secret, the
/// exporter, names of the application's database and user, pull Secrets,
/// the resize image, scheduled verification of the backups and the WAL
/// archive.
fn newer_fields() -> impl Strategy<Value = Vec<(&'static str, Value)>> {
    let fields = vec![
        ("replication", json!("synchronous")),
        ("failover/maxStandbyLag", json!("64Mi")),
        ("tls", json!({"secretName": "orders-tls"})),
        ("monitoring", json!({"enabled": true})),
        ("databaseName", json!("shop")),
        ("user", json!("shop")),
        ("imagePullSecrets", json!([{"name": "registry"}])),
        ("storage/resizeImage", json!("pg/resize:1")),
        ("backup/verify", json!({"schedule": "0 4 * * 0"})),
        // With the base backups' verification and retention: the CronJob
        // orders-verify-base is kept, with deletion and rollouts (the
        // model runs no pod for a Job, so no proof is ever seen).
        (
            "backup/archive",
            json!({"timeoutSeconds": 30, "verifySchedule": "0 5 * * 0", "retentionDays": 14}),
        ),
    ];
    prop::sample::subsequence(fields.clone(), 0..=fields.len())
}

/// A Database's placement settings: `spec.affinity`, and maybe
/// `spec.topologySpreadConstraints` and `spec.enablePDB`.
fn placement() -> impl Strategy<Value = (Value, Option<Value>, Option<bool>)> {
    (
        prop::option::of(any::<bool>()),
        prop::option::of(prop::sample::select(vec!["preferred", "required"])),
        prop::option::of(prop::sample::select(vec![
            "kubernetes.io/hostname",
            "topology.kubernetes.io/zone",
        ])),
        prop::option::of(prop::sample::select(vec![
            json!([]),
            json!([{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "DoNotSchedule", "minDomains": 2}]),
        ])),
        prop::option::of(any::<bool>()),
        any::<bool>(),
    )
        .prop_map(|(enable, kind, key, spread, pdb, dedicated)| {
            let mut affinity = json!({});
            if let Some(enable) = enable {
                affinity["enablePodAntiAffinity"] = json!(enable);
            }
            if let Some(kind) = kind {
                affinity["podAntiAffinityType"] = json!(kind);
            }
            if let Some(key) = key {
                affinity["topologyKey"] = json!(key);
            }
            if dedicated {
                affinity["nodeSelector"] = json!({"pool": "databases"});
                affinity["tolerations"] =
                    json!([{"key": "dedicated", "value": "databases", "effect": "NoSchedule"}]);
            }
            (affinity, spread, pdb)
        })
}

/// Placement: the instances' anti-affinity and spread select exactly the
/// StatefulSet's pods, as its anti-affinity type says; a
/// PodDisruptionBudget, when there is one, selects them too and lets one
/// go at a time; and while the Database lives (not deleting, every sync
/// answered) there is one exactly when the size asks for two or more
/// instances and `enablePDB` is not false.
fn placement_rule(sim: &Simulation<'_>) -> Result<(), String> {
    let sts = sim
        .cluster
        .get(&Key::new("apps/v1", "StatefulSet", "ns", "orders"));
    let pdb = sim.cluster.get(&Key::new(
        "policy/v1",
        "PodDisruptionBudget",
        "ns",
        "orders",
    ));
    let Some(sts) = sts else {
        return Ok(());
    };
    let selector = sts.pointer("/spec/selector/matchLabels");
    let template = sts.pointer("/spec/template/spec").unwrap_or(&Value::Null);
    let anti = template.pointer("/affinity/podAntiAffinity");
    let terms = [
        "/requiredDuringSchedulingIgnoredDuringExecution/0/labelSelector/matchLabels",
        "/preferredDuringSchedulingIgnoredDuringExecution/0/podAffinityTerm/labelSelector/matchLabels",
    ];
    if let Some(anti) = anti
        && !terms.iter().any(|t| anti.pointer(t) == selector)
    {
        return Err(format!(
            "the anti-affinity {anti} does not select the StatefulSet's pods {selector:?}"
        ));
    }
    for c in template["topologySpreadConstraints"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if c.pointer("/labelSelector/matchLabels") != selector {
            return Err(format!("the spread {c} does not select the instances"));
        }
    }
    if let Some(pdb) = pdb
        && (pdb.pointer("/spec/selector/matchLabels") != selector
            || pdb.pointer("/spec/maxUnavailable") != Some(&json!(1)))
    {
        return Err(format!(
            "the PodDisruptionBudget {pdb} is not maxUnavailable 1 over the instances"
        ));
    }
    Ok(())
}

/// What the settled Database's placement must be: the anti-affinity of
/// the type the spec asks, and a PodDisruptionBudget exactly when there
/// are two or more instances and `enablePDB` is not false.
fn placement_reached(sim: &Simulation<'_>) -> Result<(), String> {
    let sts = object(sim, "apps/v1", "StatefulSet", "orders")?;
    let anti = sts.pointer("/spec/template/spec/affinity/podAntiAffinity");
    let on = json!(true);
    let enabled = spec(sim, "affinity/enablePodAntiAffinity", &on) == &on;
    let preferred = json!("preferred");
    let kind = spec(sim, "affinity/podAntiAffinityType", &preferred);
    let field = if kind == &json!("required") {
        "requiredDuringSchedulingIgnoredDuringExecution"
    } else {
        "preferredDuringSchedulingIgnoredDuringExecution"
    };
    if enabled != anti.is_some_and(|a| a.get(field).is_some()) {
        return Err(format!(
            "the pod anti-affinity is {anti:?}; the spec asks {kind}, enabled: {enabled}"
        ));
    }
    let small = json!("small");
    let instances = match spec(sim, "size", &small).as_str() {
        Some("medium") => 2,
        Some("large") => 3,
        _ => 1,
    };
    let want = instances >= 2 && spec(sim, "enablePDB", &on) != &json!(false);
    let has = object(sim, "policy/v1", "PodDisruptionBudget", "orders").is_ok();
    if want != has {
        return Err(format!(
            "{instances} instances, enablePDB {}: a PodDisruptionBudget: {has}",
            spec(sim, "enablePDB", &Value::Null)
        ));
    }
    Ok(())
}

/// Database: Running at `spec.version`, its Services there and the
/// initial configuration done.
fn database_reached(sim: &Simulation<'_>) -> Result<(), String> {
    let status = status(sim);
    let version = spec(sim, "version", &Value::Null);
    if status["phase"] != "Running" || &status["version"] != version {
        return Err(format!(
            "phase {} at version {}, asked {version}",
            status["phase"], status["version"]
        ));
    }
    for service in ["orders", "orders-headless", "orders-ro"] {
        object(sim, "v1", "Service", service)?;
    }
    condition_true(sim, "Initialized")?;
    if !spec(sim, "bootstrap", &Value::Null).is_null() {
        restored(sim)?;
    }
    condition_true(sim, "Ready")?;
    primary_reached(sim)?;
    settings_reached(sim)?;
    placement_reached(sim)?;
    storage_reached(sim)?;
    archive_reached(sim)?;
    images_reached(sim)
}

/// With `spec.backup.archive`, settled: a scheduled base backup is asked
/// for, of a ready standby when there is one, else of the primary.
fn archive_reached(sim: &Simulation<'_>) -> Result<(), String> {
    if spec(sim, "backup/archive", &Value::Null).is_null() {
        return Ok(());
    }
    let primary = role(&sim.cluster)
        .map(|(pod, _)| pod)
        .ok_or("no role ConfigMap")?;
    let asked = base_backups_asked(&sim.cluster);
    let Some((_, pod, _)) = asked
        .iter()
        .find(|(name, _, _)| name.starts_with("scheduled-"))
    else {
        return Err(format!("no scheduled base backup asked for: {asked:?}"));
    };
    let standbys = ready_standbys(&sim.cluster, &primary);
    let fits = if standbys.is_empty() {
        *pod == primary
    } else {
        standbys.contains(pod)
    };
    if !fits {
        return Err(format!(
            "base backup asked of {pod}; primary {primary}, ready standbys {standbys:?}"
        ));
    }
    Ok(())
}

/// Every instance's claim holds at least `spec.storage.size` (a size the
/// lives write as `<n>Gi`), and the grow Job, Role, RoleBinding and
/// ServiceAccount are gone.
fn storage_reached(sim: &Simulation<'_>) -> Result<(), String> {
    let gib = |v: &Value| v.as_str()?.strip_suffix("Gi")?.parse::<u32>().ok();
    let wanted =
        gib(spec(sim, "storage/size", &Value::Null)).ok_or("spec.storage.size is not <n>Gi")?;
    for pod in instances(&sim.cluster) {
        let claim = object(sim, "v1", "PersistentVolumeClaim", &format!("data-{pod}"))?;
        let has = gib(&claim["status"]["capacity"]["storage"]);
        if has.is_none_or(|has| has < wanted) {
            return Err(format!(
                "claim data-{pod} holds {has:?} Gi, the spec asks {wanted}Gi"
            ));
        }
    }
    let left: Vec<String> = sim
        .cluster
        .objects()
        .filter(|(k, _)| k.name.starts_with("orders-grow"))
        .map(|(k, _)| k.to_string())
        .collect();
    if left.is_empty() {
        Ok(())
    } else {
        Err(format!("grow objects left: {left:?}"))
    }
}

/// `spec.resources` a life may set: Null drops them (back to the size's).
fn resources() -> Vec<Value> {
    vec![
        Value::Null,
        json!({"requests": {"cpu": "250m", "memory": "1Gi"}, "limits": {"memory": "1Gi"}}),
        json!({"requests": {"cpu": "1", "memory": "3Gi"}}),
    ]
}

/// `spec.postgresql` a life may set: parameters that go up and down
/// (max_connections, whose decrease is held while standbys run), others
/// that change freely, and pg_hba lines.
fn postgresql() -> Vec<Value> {
    vec![
        Value::Null,
        json!({"parameters": {"max_connections": "200", "work_mem": "8MB"}}),
        json!({"parameters": {"max_connections": "300"}, "pgHba": ["host all all 10.0.0.0/8 scram-sha-256"]}),
        json!({"parameters": {"max_connections": "50", "max_worker_processes": "4"}}),
        json!({"pgHba": ["host all all 0.0.0.0/0 reject"]}),
    ]
}

/// Every instance runs what `spec.resources` and `spec.postgresql` ask:
/// the resources, a `-c name=value` for each parameter, and the
/// pg_hba.conf's mount and TLS; a parameter an instance does not run
/// is one the `ParametersApplied` condition says is held.
fn settings_reached(sim: &Simulation<'_>) -> Result<(), String> {
    let resources = spec(sim, "resources", &Value::Null);
    let parameters = spec(sim, "postgresql/parameters", &Value::Null);
    let hba = spec(sim, "postgresql/pgHba", &Value::Null);
    let applied = sim
        .parent()
        .and_then(|p| condition(p, "ParametersApplied"))
        .cloned()
        .unwrap_or_default();
    for pod in instances(&sim.cluster) {
        let container = object(sim, "v1", "Pod", &pod)?
            .pointer("/spec/containers/0")
            .cloned()
            .unwrap_or_default();
        if !resources.is_null() && &container["resources"] != resources {
            return Err(format!(
                "{pod} runs with {}, the spec asks {resources}",
                container["resources"]
            ));
        }
        let command: Vec<&str> = container["command"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for (name, value) in parameters.as_object().into_iter().flatten() {
            let arg = format!("{name}={}", value.as_str().unwrap_or_default());
            let held = applied["status"] == "False"
                && applied["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(&format!("{name} stays at")));
            if !command.contains(&arg.as_str()) && !held {
                return Err(format!(
                    "{pod} does not run -c {arg}, and ParametersApplied does not say it is held: {applied}"
                ));
            }
        }
        // Every instance reads the operator's pg_hba.conf (TLS only over
        // TCP, then the spec's lines) and serves TLS, lines or not.
        let reads_hba = command.iter().any(|a| a.starts_with("hba_file="));
        let serves_tls = command.contains(&"ssl=on");
        if !reads_hba || !serves_tls {
            return Err(format!(
                "{pod} reads hba_file: {reads_hba}, serves TLS: {serves_tls}, the spec's pgHba: {hba}"
            ));
        }
    }
    Ok(())
}

/// Every instance runs the image the spec asks for, and no rollout is
/// reported under way.
fn images_reached(sim: &Simulation<'_>) -> Result<(), String> {
    let version = spec(sim, "version", &Value::Null)
        .as_str()
        .unwrap_or_default();
    let official = json!(format!("postgres:{version}"));
    let want = spec(sim, "imageName", &official);
    for pod in instances(&sim.cluster) {
        let object = object(sim, "v1", "Pod", &pod)?;
        let image = object
            .pointer("/spec/containers/0/image")
            .unwrap_or(&Value::Null);
        if image != want {
            return Err(format!("{pod} runs {image}, the spec asks {want}"));
        }
    }
    match condition(sim.parent().unwrap_or(&Value::Null), "Upgrading") {
        Some(c) if c["status"] == "True" => Err(format!("Upgrading: {}", c["message"])),
        _ => Ok(()),
    }
}

/// A settled Database has one primary, ready and serving: the role
/// ConfigMap names it, the status reports it with no change under way,
/// and the read-write Service selects it.
fn primary_reached(sim: &Simulation<'_>) -> Result<(), String> {
    let (primary, epoch) = role(&sim.cluster).ok_or("no role ConfigMap says who is primary")?;
    let status = status(sim);
    if status["currentPrimary"] != json!(primary) || status["primaryEpoch"] != json!(epoch) {
        return Err(format!(
            "the role ConfigMap names {primary} at epoch {epoch}, the status {} at {}",
            status["currentPrimary"], status["primaryEpoch"]
        ));
    }
    if !status["targetPrimary"].is_null() {
        return Err(format!("still changing to {}", status["targetPrimary"]));
    }
    if !is_ready_pod(object(sim, "v1", "Pod", &primary)?) {
        return Err(format!("the primary {primary} is not ready"));
    }
    match read_write_pod(&sim.cluster)? {
        Some(pod) if pod == primary => Ok(()),
        other => Err(format!(
            "the read-write Service selects {other:?}, not {primary}"
        )),
    }
}

/// With `spec.bootstrap`: restored, and the dump recorded; or, over
/// retained volumes, their data served and nothing restored.
fn restored(sim: &Simulation<'_>) -> Result<(), String> {
    let status = status(sim);
    let reason = condition(sim.parent().unwrap_or(&Value::Null), "Restored")
        .map(|c| c["reason"].clone())
        .unwrap_or(Value::Null);
    match reason.as_str() {
        Some("Restored") if status["restoredFrom"].is_object() => Ok(()),
        Some("RetainedVolumes") => Ok(()),
        _ => Err(format!(
            "not restored: Restored {reason}, restoredFrom {}",
            status["restoredFrom"]
        )),
    }
}
