//! The WebServer's lives: at most one wanted pod unavailable at a time,
//! and every wanted pod there and ready in the end.

use super::*;

proptest! {
    #![proptest_config(config())]

    #[test]
    fn webserver_lives(
        replicas in 0i64..5,
        seed in any::<u64>(),
        script in prop::collection::vec(prop_oneof![
            (0i64..6).prop_map(|n| Scripted::Spec("replicas", json!(n))),
            prop::sample::select(vec!["nginx:1.27", "nginx:1.28"]).prop_map(|i| Scripted::Spec("image", json!(i))),
            common_events(),
        ], 0..6),
    ) {
        let op = operator("webserver");
        let parent = web(replicas);
        let rule = |seen: &Seen<'_>| {
            // A pod still wanted is replaced (left out, so deleted) only
            // while every other wanted pod was there and ready: at most one
            // is unavailable at a time.
            let replicas = seen.before.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(0);
            let wanted = |name: &str| name.trim_start_matches("web-").parse::<i64>().is_ok_and(|i| i < replicas);
            for pod in deleted_by_the_loop(seen.step, "Pod").filter(|k| wanted(&k.name)) {
                // Replacing a pod that is down already costs nothing.
                let was_down = seen.sim.cluster.not_ready_pods.contains(&pod.name)
                    || seen.before_cluster.get(pod).is_none_or(|p| {
                        p.pointer("/status/conditions/0/status") != Some(&json!("True"))
                    });
                if was_down {
                    continue;
                }
                for other in (0..replicas).map(|i| format!("web-{i}")).filter(|n| *n != pod.name) {
                    let key = Key::new("v1", "Pod", "ns", &other);
                    // As the hook saw it: after the controllers' round of
                    // this step (the answer only deletes the replaced pod
                    // and creates missing ones, which show not ready).
                    let ready = seen.sim.cluster.get(&key).is_some_and(|p| {
                        p.pointer("/status/conditions/0/status") == Some(&json!("True"))
                    });
                    if !ready {
                        return Err(format!("{pod} replaced while {other} was not ready"));
                    }
                }
            }
            Ok(())
        };
        let result = live(&op, parent, seed, &script, |_| {}, rule, webserver_reached);
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }
}

/// The WebServer `web` of `replicas`.
fn web(replicas: i64) -> Value {
    fixtures::webserver("web")
        .namespace("ns")
        .spec("replicas", replicas)
        .json()
}

/// WebServer: `replicas` ready pods of the spec's image, and Ready.
fn webserver_reached(sim: &Simulation<'_>) -> Result<(), String> {
    let replicas = spec(sim, "replicas", &json!(0)).as_u64().unwrap_or(0);
    let image = spec(
        sim,
        "image",
        &json!(opshooks::operators::webserver::DEFAULT_IMAGE),
    )
    .clone();
    let pods: Vec<&Value> = sim
        .cluster
        .objects()
        .filter(|(k, _)| k.kind == "Pod")
        .map(|(_, o)| o)
        .collect();
    if pods.len() as u64 != replicas {
        return Err(format!("{} pods for {replicas} replicas", pods.len()));
    }
    for i in 0..replicas {
        let pod = object(sim, "v1", "Pod", &format!("web-{i}"))?;
        if !is_ready_pod(pod) || pod.pointer("/spec/containers/0/image") != Some(&image) {
            return Err(format!("web-{i} is not ready with image {image}: {pod}"));
        }
    }
    condition_true(sim, "Ready")
}

/// The restart event stops Metacontroller after that many writes of its
/// next sync: the rest of the answer and the status are never written.
#[test]
fn a_restart_loses_what_metacontroller_had_not_written() {
    let op = operator("webserver");
    let mut sim = Simulation::new(&op, web(3), start(), 0).unwrap();
    sim.apply(&Event::RestartMetacontroller(1)).unwrap();
    let step = sim.step();
    let created: Vec<&Key> = step
        .changes
        .iter()
        .filter(|c| c.verb == Verb::Created)
        .map(|c| &c.key)
        .collect();
    assert_eq!(created.len(), 1, "one write, then the restart: {created:?}");
    assert!(
        sim.parent().unwrap().get("status").is_none(),
        "no status written"
    );
    let step = sim.step();
    assert_eq!(
        step.changes
            .iter()
            .filter(|c| c.verb == Verb::Created)
            .count(),
        2,
        "the next sync writes the rest"
    );
    assert!(sim.parent().unwrap().get("status").is_some());
}

/// A hook outage in the middle of a rollout: the rollout finishes once
/// the hook is back.
#[test]
fn a_hook_outage_in_the_middle_of_a_rollout() {
    let rollout = [
        Scripted::Spec("image", json!("nginx:1.28")),
        Scripted::Soon(2),
        Scripted::HookDown(3),
    ];
    let result = live(
        &operator("webserver"),
        web(3),
        0,
        &rollout,
        |_| {},
        |_| Ok(()),
        webserver_reached,
    );
    assert!(
        result.is_ok(),
        "a hook outage in the middle of a rollout: {}",
        result.unwrap_err()
    );
}
