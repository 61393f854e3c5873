//! The Memcached's lives: its Deployment and Service live as long as it.

use super::*;

proptest! {
    #![proptest_config(config())]

    #[test]
    fn memcached_lives(
        size in 0i64..4,
        seed in any::<u64>(),
        script in prop::collection::vec(prop_oneof![
            (0i64..5).prop_map(|n| Scripted::Spec("size", json!(n))),
            Just(Scripted::Spec("memoryLimit", json!("64Mi"))),
            common_events(),
        ], 0..6),
    ) {
        let op = operator("memcached");
        let parent = fixtures::memcached("cache").namespace("ns").spec("size", size).json();
        let rule = |seen: &Seen<'_>| {
            for kind in ["Deployment", "Service"] {
                if let Some(key) = deleted_by_the_loop(seen.step, kind).next()
                    && !is_deleting(seen.before)
                {
                    return Err(format!("{key} deleted while the Memcached lives"));
                }
            }
            Ok(())
        };
        let result = live(&op, parent, seed, &script, |_| {}, rule, memcached_reached);
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }
}

/// Memcached: its Deployment at `size`, and `status.nodes` its pods.
fn memcached_reached(sim: &Simulation<'_>) -> Result<(), String> {
    let size = spec(sim, "size", &json!(0)).clone();
    let deployment = object(sim, "apps/v1", "Deployment", "cache")?;
    if deployment.pointer("/spec/replicas") != Some(&size) {
        return Err(format!(
            "the Deployment runs {} replicas, not {size}",
            deployment["spec"]["replicas"]
        ));
    }
    let pods: Vec<String> = sim
        .cluster
        .objects()
        .filter(|(k, _)| k.kind == "Pod")
        .map(|(k, _)| k.name.clone())
        .collect();
    let nodes = status(sim)["nodes"].clone();
    if nodes != json!(pods) {
        return Err(format!("status.nodes is {nodes}, the pods are {pods:?}"));
    }
    condition_true(sim, "Ready")
}
