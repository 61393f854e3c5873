//! Properties over arbitrary specs and observed states: exact pod counts
//! with valid unique names, determinism, and no input that panics.

use std::collections::{BTreeMap, BTreeSet};

use opshooks::hook::Hook;
use opshooks::operators::validate::is_dns_label;
use opshooks::operators::{self, Operator};
use proptest::prelude::*;
use serde_json::{Value, json};

use super::support::ctx;

fn webserver() -> Operator {
    operators::all()
        .into_iter()
        .find(|op| op.name == "webserver")
        .unwrap()
}

fn observed_pod(name: &str, index: u32, phase: &str, ready: bool) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{name}-{index}"), "namespace": "ns"},
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]},
    })
}

fn phase() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["Pending", "Running", "Succeeded", "Failed", "Unknown"])
}

prop_compose! {
    fn observed_state()(
        name in "[a-z]([a-z0-9-]{0,57}[a-z0-9])?",
        replicas in 0i64..=1000,
        pods in prop::collection::btree_map(0u32..1100, (phase(), any::<bool>()), 0..40),
        v2 in any::<bool>(),
    ) -> (String, i64, BTreeMap<u32, (&'static str, bool)>, bool) {
        (name, replicas, pods, v2)
    }
}

fn request(
    name: &str,
    replicas: i64,
    pods: &BTreeMap<u32, (&'static str, bool)>,
    v2: bool,
) -> Value {
    let children: serde_json::Map<String, Value> = pods
        .iter()
        .map(|(index, (phase, ready))| {
            let key = if v2 {
                format!("ns/{name}-{index}")
            } else {
                format!("{name}-{index}")
            };
            (key, observed_pod(name, *index, phase, *ready))
        })
        .collect();
    json!({
        "parent": {"apiVersion": "opshooks.io/v1alpha1", "kind": "WebServer",
                   "metadata": {"name": name, "namespace": "ns", "generation": 1},
                   "spec": {"replicas": replicas}},
        "children": {"Pod.v1": children},
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn answer_has_exactly_replicas_pods_with_valid_unique_names((name, replicas, pods, v2) in observed_state()) {
        let op = webserver();
        let body = request(&name, replicas, &pods, v2).to_string();
        let call = op.call(Hook::Sync, body.as_bytes(), &ctx()).unwrap();
        let answer = call.result.expect("valid specs are answered");
        let again = op.call(Hook::Sync, body.as_bytes(), &ctx()).unwrap().result.unwrap();
        prop_assert_eq!(&answer.body, &again.body, "same input, same bytes");

        let response: Value = serde_json::from_slice(&answer.body).unwrap();
        let children = response["children"].as_array().unwrap();
        prop_assert_eq!(children.len() as i64, replicas);
        let names: BTreeSet<String> = children
            .iter()
            .map(|c| c["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        prop_assert_eq!(names.len() as i64, replicas, "names are unique");
        let want: BTreeSet<String> = (0..replicas).map(|i| format!("{name}-{i}")).collect();
        prop_assert_eq!(&names, &want, "scaling keeps the lowest indices");
        for n in &names {
            prop_assert!(is_dns_label(n), "{} is not a DNS-1123 label", n);
        }
        for child in children {
            prop_assert_eq!(child["kind"].as_str(), Some("Pod"));
            prop_assert_eq!(child["metadata"]["labels"]["app.kubernetes.io/instance"].as_str(), Some(name.as_str()));
        }

        let counted = pods.values().filter(|(phase, _)| matches!(*phase, "Running" | "Pending")).count();
        let ready = pods.values().filter(|(_, ready)| *ready).count();
        prop_assert_eq!(response["status"]["count"].as_u64(), Some(counted as u64));
        prop_assert_eq!(response["status"]["readyReplicas"].as_u64(), Some(ready as u64));
        let all_ready = (0..replicas as u32).all(|i| pods.get(&i).is_some_and(|(_, r)| *r));
        prop_assert_eq!(
            response["status"]["conditions"][0]["status"].as_str(),
            Some(if all_ready { "True" } else { "False" })
        );
    }

    #[test]
    fn any_json_parent_is_answered_or_refused_never_a_panic(spec in arbitrary_json(), name in any::<Option<String>>()) {
        let op = webserver();
        let body = json!({"parent": {"metadata": {"name": name}, "spec": spec}, "children": {"Pod.v1": {}}}).to_string();
        let call = op.call(Hook::Sync, body.as_bytes(), &ctx()).unwrap();
        if let Ok(answer) = call.result {
            let response: Value = serde_json::from_slice(&answer.body).unwrap();
            let replicas = spec["replicas"].as_i64().unwrap();
            prop_assert_eq!(response["children"].as_array().unwrap().len() as i64, replicas);
        }
    }

    #[test]
    fn any_bytes_are_refused_without_a_panic(body in prop::collection::vec(any::<u8>(), 0..512)) {
        let call = webserver().call(Hook::Sync, &body, &ctx()).unwrap();
        // Random bytes are almost never a valid request; when they are, fine.
        if let Err(err) = call.result {
            prop_assert!(!err.to_string().is_empty());
        }
    }
}

fn arbitrary_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-5i64..1100).prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,20}".prop_map(Value::from),
    ];
    let value = leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map(
                prop::sample::select(vec!["replicas", "image", "port", "x"]).prop_map(String::from),
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    // Often a plausible spec, sometimes anything at all.
    prop_oneof![
        (
            -5i64..1100,
            prop::option::of(".{0,12}"),
            prop::option::of(-2i64..70000)
        )
            .prop_map(|(r, image, port)| {
                let mut spec = json!({"replicas": r});
                if let Some(image) = image {
                    spec["image"] = image.into();
                }
                if let Some(port) = port {
                    spec["port"] = port.into();
                }
                spec
            }),
        value,
    ]
}
