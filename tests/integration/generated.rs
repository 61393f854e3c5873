//! Drift tests: the committed openapi.yaml and metacontroller/ manifests are
//! exactly what the code generates, and every hook URL in a manifest is a
//! real route. `OPSHOOKS_BLESS=1 cargo test` regenerates them.

use opshooks::hook::Hook;
use opshooks::manifests::{self, ControllerOptions};
use opshooks::operators;
use serde_json::Value;

use super::support::{assert_matches_file, blessing, root};

#[test]
fn openapi_yaml_is_current() {
    let generated = opshooks::http::openapi::yaml(&operators::all());
    assert_matches_file(&root().join("openapi.yaml"), &generated);
}

#[test]
fn metacontroller_manifests_are_current() {
    let dir = root().join("metacontroller");
    if blessing() {
        std::fs::create_dir_all(&dir).unwrap();
    }
    let files = manifests::files(&operators::all(), &ControllerOptions::default());
    for (name, text) in &files {
        assert_matches_file(&dir.join(name), text);
    }
    // No stale file is left behind by a removed operator.
    let mut committed: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    committed.sort();
    let mut want: Vec<_> = files
        .iter()
        .map(|(n, _)| n.to_string_lossy().into_owned())
        .collect();
    want.sort();
    assert_eq!(committed, want);
}

#[test]
fn every_hook_url_in_the_manifests_is_a_real_route() {
    let ops = operators::all();
    let dir = root().join("metacontroller");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        let object: Value = yaml_serde::from_str(&text).unwrap();
        if object["kind"] != "CompositeController" {
            continue;
        }
        for (hook_name, hook) in object["spec"]["hooks"].as_object().unwrap() {
            let url = hook["webhook"]["url"].as_str().unwrap();
            let path = url.strip_prefix(manifests::DEFAULT_BASE_URL).unwrap();
            let mut parts = path.trim_start_matches('/').split('/');
            let (op_name, route_hook) = (parts.next().unwrap(), parts.next().unwrap());
            assert_eq!(route_hook, hook_name, "{url}");
            let op = ops
                .iter()
                .find(|op| op.name == op_name)
                .unwrap_or_else(|| panic!("{url}: no operator"));
            let hook = Hook::parse(route_hook).unwrap();
            assert!(op.hooks().any(|h| h == hook), "{url}: no such hook");
            let resource = object["spec"]["parentResource"]["resource"]
                .as_str()
                .unwrap();
            assert_eq!(resource, op.plural());
            checked += 1;
        }
    }
    assert!(checked >= ops.len(), "only {checked} hook URLs found");
}

#[test]
fn crds_are_structural_with_status_and_validation() {
    for op in operators::all() {
        let crd = serde_json::to_value(op.crd()).unwrap();
        let version = &crd["spec"]["versions"][0];
        assert_eq!(crd["spec"]["group"], "opshooks.io");
        assert_eq!(version["name"], "v1alpha1");
        assert!(version["subresources"]["status"].is_object(), "{}", op.name);
        assert!(
            !crd["spec"]["names"]["shortNames"]
                .as_array()
                .unwrap()
                .is_empty()
        );
        assert!(
            version["additionalPrinterColumns"]
                .as_array()
                .unwrap()
                .len()
                >= 2
        );
        let schema = &version["schema"]["openAPIV3Schema"];
        assert_eq!(schema["type"], "object");
        assert!(schema["properties"]["spec"]["required"].is_array());
    }
}

#[test]
fn chart_generated_files_are_current() {
    let chart = root().join("charts/opshooks");
    for (name, text) in manifests::chart_files(&operators::all()) {
        if blessing() {
            std::fs::create_dir_all(chart.join(&name).parent().unwrap()).unwrap();
        }
        assert_matches_file(&chart.join(name), &text);
    }
}

#[test]
fn chart_crds_are_the_metacontroller_crds() {
    for op in operators::all() {
        let name = format!("{}-crd.yaml", op.name);
        let chart =
            std::fs::read_to_string(root().join("charts/opshooks/crds").join(&name)).unwrap();
        let plain = std::fs::read_to_string(root().join("metacontroller").join(&name)).unwrap();
        assert!(
            chart == plain,
            "charts/opshooks/crds/{name} differs from metacontroller/{name}"
        );
    }
}

#[test]
fn chart_values_switch_every_operator() {
    let values: Value = yaml_serde::from_str(
        &std::fs::read_to_string(root().join("charts/opshooks/values.yaml")).unwrap(),
    )
    .unwrap();
    for op in operators::all() {
        assert_eq!(
            values["operators"][op.name]["enabled"],
            Value::Bool(true),
            "values.yaml lacks operators.{}.enabled",
            op.name
        );
    }
}

/// kube-state-metrics reads a metric from a path in the parent; a path
/// the CRD's schema does not have yields no series and no error, and an
/// alert on it never fires. Every `path` (a metric's, or one of its
/// `labelsFromPath`, relative to the metric's) must be in the schema of
/// its kind, through arrays (`conditions`' items) too.
#[test]
fn kube_state_metrics_paths_are_in_the_crds() {
    let text =
        std::fs::read_to_string(root().join("charts/opshooks/files/kube-state-metrics.yaml"))
            .unwrap();
    let config: Value = yaml_serde::from_str(&text).unwrap();
    let crds: Vec<Value> = operators::all()
        .iter()
        .map(|op| serde_json::to_value(op.crd()).unwrap())
        .collect();
    let path_of = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect()
    };
    let mut checked = 0;
    for resource in config["spec"]["resources"].as_array().unwrap() {
        let kind = resource["groupVersionKind"]["kind"].as_str().unwrap();
        let crd = crds
            .iter()
            .find(|c| c["spec"]["names"]["kind"] == kind)
            .unwrap_or_else(|| panic!("no CRD of kind {kind}"));
        let version = &resource["groupVersionKind"]["version"];
        let root_schema = &crd["spec"]["versions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == *version)
            .unwrap_or_else(|| panic!("{kind}: no CRD version {version}"))["schema"]["openAPIV3Schema"];
        let resolve = |from: &Value, path: &[String]| -> Option<Value> {
            let mut at = from.clone();
            for key in path {
                if at["type"] == "array" {
                    at = at["items"].clone();
                }
                // metadata is the API server's, not in the CRD's schema.
                if key == "metadata" && at == *root_schema {
                    return Some(Value::Null);
                }
                at = at["properties"].get(key)?.clone();
            }
            Some(if at["type"] == "array" {
                at["items"].clone()
            } else {
                at
            })
        };
        for metric in resource["metrics"].as_array().unwrap() {
            let name = metric["name"].as_str().unwrap();
            let each = &metric["each"];
            // Its body is under the type's name, first letter lowered.
            let ty = each["type"].as_str().unwrap();
            let body = &each[format!("{}{}", ty[..1].to_lowercase(), &ty[1..])];
            assert!(body.is_object(), "{kind} {name}: no {ty} body");
            let at = match body.get("path") {
                Some(p) => resolve(root_schema, &path_of(p))
                    .unwrap_or_else(|| panic!("{kind} {name}: path {p} is not in the CRD")),
                None => root_schema.clone(),
            };
            checked += 1;
            for (label, p) in body["labelsFromPath"].as_object().into_iter().flatten() {
                resolve(&at, &path_of(p)).unwrap_or_else(|| {
                    panic!("{kind} {name}: label {label}'s path {p} is not in the CRD")
                });
                checked += 1;
            }
        }
    }
    assert!(checked > 20, "only {checked} paths checked");
}
