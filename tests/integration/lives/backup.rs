//! The Backup's lives: its CronJob lives as long as it, whether its
//! target comes first, goes or comes back.

use super::*;

proptest! {
    #![proptest_config(config())]

    #[test]
    fn backup_lives(
        seed in any::<u64>(),
        target_first in any::<bool>(),
        script in prop::collection::vec(prop_oneof![
            Just(Scripted::Spec("schedule", json!("30 3 * * *"))),
            Just(Scripted::Spec("suspend", json!(true))),
            Just(Scripted::Spec("suspend", json!(false))),
            Just(Scripted::DeleteTarget),
            Just(Scripted::RecreateTarget),
            Just(Scripted::RunCronJob),
            common_events(),
        ], 0..6),
    ) {
        let op = operator("backup");
        let parent = fixtures::backup("nightly").namespace("ns")
            .spec("schedule", "0 2 * * *")
            .spec("target", json!({"kind": "StatefulSet", "name": "db"}))
            .spec("destination", json!({"s3Bucket": "backups"}))
            .json();
        let setup = |sim: &mut Simulation<'_>| {
            if target_first {
                sim.cluster.create(target(), Actor::User);
            }
        };
        let rule = |seen: &Seen<'_>| {
            // The CronJob (and the backups it runs) goes only with the Backup.
            if let Some(key) = deleted_by_the_loop(seen.step, "CronJob").next()
                && !is_deleting(seen.before)
            {
                return Err(format!("{key} deleted while the Backup lives"));
            }
            Ok(())
        };
        let result = live(&op, parent, seed, &script, setup, rule, backup_reached);
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }
}

/// The Backup's target: a PostgreSQL StatefulSet whose password is in a Secret.
pub(super) fn target() -> Value {
    let password = json!({"secretKeyRef": {"name": "db", "key": "password"}});
    fixtures::statefulset("db")
        .namespace("ns")
        .set("/spec/serviceName", json!("db"))
        .replicas(1)
        .set("/spec/selector", json!({"matchLabels": {"app": "db"}}))
        .set("/spec/template/metadata/labels", json!({"app": "db"}))
        .containers(json!([{"name": "postgres", "image": "postgres:16",
            "ports": [{"containerPort": 5432}],
            "env": [{"name": "POSTGRES_PASSWORD", "valueFrom": password}]}]))
        .json()
}

/// Backup: a CronJob with the spec's schedule, suspended exactly when
/// asked or while the target is gone.
fn backup_reached(sim: &Simulation<'_>) -> Result<(), String> {
    let target_gone = sim
        .cluster
        .get(&Key::new("apps/v1", "StatefulSet", "ns", "db"))
        .is_none();
    let Ok(cron) = object(sim, "batch/v1", "CronJob", "nightly-backup") else {
        // A target never seen leaves nothing to build the job from: the
        // status must say the target is missing.
        let says_so = sim
            .parent()
            .and_then(|p| condition(p, "TargetFound"))
            .is_some_and(|c| c["status"] == "False");
        return match target_gone && says_so {
            true => Ok(()),
            false => Err(format!("no CronJob: {}", status(sim))),
        };
    };
    let schedule = spec(sim, "schedule", &Value::Null);
    if &cron["spec"]["schedule"] != schedule {
        return Err(format!(
            "the CronJob runs on {}, the spec says {schedule}",
            cron["spec"]["schedule"]
        ));
    }
    let target_gone = sim
        .cluster
        .get(&Key::new("apps/v1", "StatefulSet", "ns", "db"))
        .is_none();
    let suspend = spec(sim, "suspend", &json!(false)) == &json!(true) || target_gone;
    if cron["spec"]["suspend"] != json!(suspend) {
        return Err(format!(
            "the CronJob's suspend is {}, not {suspend}",
            cron["spec"]["suspend"]
        ));
    }
    Ok(())
}
