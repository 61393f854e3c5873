//! The OpenAPI document of every route, generated from the code: hook routes
//! from the route table, the hook bodies from the wire types of
//! [`crate::hook`] (derived `ToSchema`, with each operator's parent, status
//! and observed objects filled in), each operator's parent and status
//! schemas from the same Rust types that generate its CRD, and the error
//! body from [`Problem`]. `openapi.yaml` at the repository root is this document; a
//! test fails when the two differ.

use serde_json::{Value, json};
use utoipa::openapi::path::{HttpMethod, Operation, PathItem};
use utoipa::openapi::request_body::RequestBody;
use utoipa::openapi::schema::{Components, Schema};
use utoipa::openapi::{Content, Info, OpenApi, Paths, Ref, RefOr, Required, Response, Tag};
use utoipa::{PartialSchema, ToSchema};

use super::Problem;
use super::error::PROBLEM_JSON;
use crate::hook::{
    CustomizeRequest, CustomizeResponse, Hook, RelatedResourceRule, SyncRequest, SyncResponse,
};
use crate::operator::Operator;

/// The OpenAPI document for `operators`.
pub fn document(operators: &[Operator]) -> OpenApi {
    let mut components = shared_components();
    let mut paths = Paths::new();
    for op in operators {
        add_operator(op, &mut components, &mut paths);
    }
    for (path, description, media) in HEALTH_ROUTES {
        add_plain(&mut paths, path, "health", description, media);
    }
    let mut doc = OpenApi::new(info(), paths);
    doc.components = Some(components);
    doc.tags = Some(tags(operators));
    doc
}

/// The schemas every operator's routes refer to: the error body, any
/// Kubernetes object, the observed objects and the customize hook's.
fn shared_components() -> Components {
    let mut components = Components::new();
    components
        .schemas
        .insert(Problem::name().into_owned(), Problem::schema());
    components
        .schemas
        .insert("KubernetesObject".into(), schema(kubernetes_object()));
    components
        .schemas
        .insert("ObservedObjects".into(), schema(observed_objects()));
    components.schemas.insert(
        "RelatedResourceRule".into(),
        schema(related_resource_rule()),
    );
    components
        .schemas
        .insert("CustomizeResponse".into(), schema(customize_response()));
    components
}

/// The GET routes beside the hooks: path, description and media type.
const HEALTH_ROUTES: [(&str, &str, &str); 4] = [
    (
        "/healthz",
        "Liveness: 200 while the process serves.",
        "text/plain",
    ),
    (
        "/readyz",
        "Readiness: 200 while serving, 503 once draining for shutdown.",
        "text/plain",
    ),
    (
        "/metrics",
        "Prometheus metrics: opshooks_hook_requests_total and opshooks_hook_duration_seconds by operator, hook and outcome, every series present (at zero) from the first scrape. Needs the bearer token when --metrics-auth is set.",
        "text/plain",
    ),
    ("/openapi.json", "This document.", "application/json"),
];

/// The document's title, version and the one promise every hook keeps.
fn info() -> Info {
    Info::builder()
        .title("opshooks")
        .version(env!("CARGO_PKG_VERSION"))
        .description(Some(
            "Kubernetes operators as Metacontroller hooks. Every hook answers 200 with the desired state, \
             or an application/problem+json error whose detail names the field to fix; a failure is never a 200.",
        ))
        .build()
}

/// One tag per operator, naming what it makes, and one for the rest.
fn tags(operators: &[Operator]) -> Vec<Tag> {
    operators
        .iter()
        .map(|op| {
            Tag::builder()
                .name(op.name)
                .description(Some(format!(
                    "The {} operator: {}.",
                    op.kind, op.children_summary
                )))
                .build()
        })
        .chain([Tag::builder()
            .name("health")
            .description(Some("Probes, metrics and this document."))
            .build()])
        .collect()
}

/// The document as YAML, as committed in `openapi.yaml`.
pub fn yaml(operators: &[Operator]) -> String {
    document(operators)
        .to_yaml()
        .expect("the OpenAPI document serializes")
}

fn add_operator(op: &Operator, components: &mut Components, paths: &mut Paths) {
    add_schemas(op, components);
    for hook in op.hooks() {
        paths.paths.insert(
            format!("/{}/{}", op.name, hook),
            PathItem::new(HttpMethod::Post, hook_operation(op, hook)),
        );
    }
}

/// The operator's parent, status and the hook bodies about it.
fn add_schemas(op: &Operator, components: &mut Components) {
    let kind = &op.kind;
    let crd = op.crd();
    let root = crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .map(|s| serde_json::to_value(s).expect("schemas serialize"))
        .unwrap_or_else(|| json!({"type": "object"}));
    let status = root
        .pointer("/properties/status")
        .cloned()
        .unwrap_or_else(|| json!({"type": "object"}));
    let mut parent = root;
    parent["properties"]["apiVersion"] = json!({"type": "string", "enum": [op.api_version()]});
    parent["properties"]["kind"] = json!({"type": "string", "enum": [kind]});
    parent["properties"]["metadata"] = json!({"$ref": "#/components/schemas/ObjectMeta"});
    parent["required"] = json!(["metadata", "spec"]);
    components.schemas.insert(kind.clone(), schema(parent));
    components
        .schemas
        .insert(format!("{kind}Status"), schema(status));
    components
        .schemas
        .insert("ObjectMeta".into(), schema(object_meta()));
    let parent_ref = json!({"$ref": format!("#/components/schemas/{kind}")});
    let observed = json!({"$ref": "#/components/schemas/ObservedObjects"});
    let mut sync_request = wire::<SyncRequest>(&[
        ("parent", parent_ref.clone()),
        ("children", observed.clone()),
        ("related", observed),
    ]);
    sync_request["description"] = json!(format!(
        "A CompositeController sync or finalize call for a {kind}."
    ));
    components
        .schemas
        .insert(format!("{kind}SyncRequest"), schema(sync_request));
    let mut sync_response = wire::<SyncResponse>(&[
        (
            "status",
            json!({"$ref": format!("#/components/schemas/{kind}Status")}),
        ),
        (
            "children",
            json!({"type": "array", "items": {"$ref": "#/components/schemas/KubernetesObject"}}),
        ),
    ]);
    // Metacontroller decodes answers strictly: no field beyond these.
    sync_response["additionalProperties"] = json!(false);
    components
        .schemas
        .insert(format!("{kind}SyncResponse"), schema(sync_response));
    let customize_request = wire::<CustomizeRequest>(&[("parent", parent_ref)]);
    components
        .schemas
        .insert(format!("{kind}CustomizeRequest"), schema(customize_request));
}

/// One hook route: its request and answer bodies and every status code.
fn hook_operation(op: &Operator, hook: Hook) -> Operation {
    let (request, response, summary) = hook_bodies(&op.kind, hook);
    let mut operation = Operation::builder()
        .tag(op.name)
        .operation_id(Some(format!("{}_{}", op.name, hook)))
        .summary(Some(summary))
        .request_body(Some(
            RequestBody::builder()
                .required(Some(Required::True))
                .content(
                    "application/json",
                    Content::new(Some(Ref::from_schema_name(request))),
                )
                .build(),
        ))
        .response(
            "200",
            Response::builder()
                .description("The answer Metacontroller applies.")
                .content(
                    "application/json",
                    Content::new(Some(Ref::from_schema_name(response))),
                ),
        );
    for (status, description) in REFUSALS {
        operation = operation.response(status, problem(description));
    }
    operation.build()
}

/// A hook's request and response schema names and its summary.
fn hook_bodies(kind: &str, hook: Hook) -> (String, String, String) {
    match hook {
        Hook::Sync => (
            format!("{kind}SyncRequest"),
            format!("{kind}SyncResponse"),
            format!("Desired children and observed status of a {kind}."),
        ),
        Hook::Finalize => (
            format!("{kind}SyncRequest"),
            format!("{kind}SyncResponse"),
            format!("Clean-up before a {kind} is deleted; finalized once nothing is left."),
        ),
        Hook::Customize => (
            format!("{kind}CustomizeRequest"),
            "CustomizeResponse".to_string(),
            format!("Which related objects Metacontroller sends with each {kind} sync."),
        ),
    }
}

/// Every refusal a hook route can answer, by status, in the document's
/// order.
const REFUSALS: [(&str, &str); 12] = [
    ("400", "The body is not JSON or lacks a required field."),
    (
        "401",
        "--auth-token-file is set and the request has no Authorization: Bearer header with that token; the answer carries WWW-Authenticate.",
    ),
    ("404", "No such operator or hook."),
    ("405", "Hooks take POST only."),
    ("408", "The body did not arrive in time."),
    ("413", "The body is over --max-body-bytes."),
    (
        "409",
        "The observed state leaves a decision that could lose data open; nothing is changed and detail says what to check.",
    ),
    ("415", "The body is not sent as application/json."),
    (
        "422",
        "The parent's spec is invalid; detail names the field and the fix.",
    ),
    (
        "429",
        "Every place for a hook call (--max-concurrent-hooks computing, --max-queued-hooks waiting) is taken; the answer carries Retry-After, after which Metacontroller retries.",
    ),
    ("500", "A bug in opshooks."),
    (
        "503",
        "The answer took longer than --request-timeout-seconds, or no worker was free before that deadline.",
    ),
];

fn problem(description: &str) -> Response {
    Response::builder()
        .description(description)
        .content(
            PROBLEM_JSON,
            Content::new(Some(Ref::from_schema_name(Problem::name()))),
        )
        .build()
}

fn add_plain(paths: &mut Paths, path: &str, tag: &str, description: &str, media: &str) {
    let operation = Operation::builder()
        .tag(tag)
        .operation_id(Some(path.trim_start_matches('/').replace('.', "_")))
        .summary(Some(description))
        .response(
            "200",
            Response::builder()
                .description(description)
                .content(media, Content::new(Some(RefOr::T(schema_object(media))))),
        )
        .build();
    paths
        .paths
        .insert(path.to_string(), PathItem::new(HttpMethod::Get, operation));
}

fn schema_object(media: &str) -> Schema {
    match schema(if media == "application/json" {
        json!({"type": "object"})
    } else {
        json!({"type": "string"})
    }) {
        RefOr::T(schema) => schema,
        RefOr::Ref(_) => unreachable!("inline schemas are not references"),
    }
}

/// Converts a JSON Schema (Kubernetes' OpenAPI v3 dialect) into utoipa's
/// model: `nullable` becomes a `null` type, as OpenAPI 3.1 spells it, and
/// `x-kubernetes-int-or-string` (a quantity) the types integer and string.
/// The schema of a hook wire type as derived from `hook.rs`, with the
/// operator-specific properties (the parent, its status, the observed
/// objects) replaced by references.
fn wire<T: PartialSchema>(properties: &[(&str, Value)]) -> Value {
    let mut value = serde_json::to_value(T::schema()).expect("schemas serialize");
    for (name, schema) in properties {
        value["properties"][*name] = schema.clone();
    }
    value
}

fn schema(mut value: Value) -> RefOr<Schema> {
    to_openapi_31(&mut value);
    serde_json::from_value(value).expect("generated schemas are valid")
}

fn to_openapi_31(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if map.remove("nullable") == Some(Value::Bool(true))
                && let Some(Value::String(t)) = map.get("type").cloned()
            {
                map.insert("type".into(), json!([t, "null"]));
            }
            if map.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
                && !map.contains_key("type")
            {
                map.insert("type".into(), json!(["integer", "string"]));
            }
            map.values_mut().for_each(to_openapi_31);
        }
        Value::Array(items) => items.iter_mut().for_each(to_openapi_31),
        _ => {}
    }
}

fn object_meta() -> Value {
    json!({
        "type": "object",
        "description": "Kubernetes object metadata; only the fields operators read are listed.",
        "properties": {
            "name": {"type": "string"},
            "namespace": {"type": "string"},
            "uid": {"type": "string"},
            "generation": {"type": "integer", "format": "int64"},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
            "creationTimestamp": {"type": "string", "format": "date-time"},
            "deletionTimestamp": {"type": "string", "format": "date-time"},
        },
    })
}

fn kubernetes_object() -> Value {
    json!({
        "type": "object",
        "description": "A whole Kubernetes object with only the fields opshooks owns.",
        "required": ["apiVersion", "kind", "metadata"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"$ref": "#/components/schemas/ObjectMeta"},
        },
        "additionalProperties": true,
    })
}

fn observed_objects() -> Value {
    json!({
        "type": "object",
        "description": "Observed objects keyed by `<Kind>.<apiVersion>` (Pod.v1, StatefulSet.apps/v1), then by `name` (hook version v1) or `namespace/name` (v2).",
        "additionalProperties": {
            "type": "object",
            "additionalProperties": {"$ref": "#/components/schemas/KubernetesObject"},
        },
    })
}

fn label_selector() -> Value {
    json!({
        "type": "object",
        "properties": {
            "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
            "matchExpressions": {"type": "array", "items": {
                "type": "object",
                "required": ["key", "operator"],
                "properties": {
                    "key": {"type": "string"},
                    "operator": {"type": "string", "enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                    "values": {"type": "array", "items": {"type": "string"}},
                },
            }},
        },
    })
}

fn related_resource_rule() -> Value {
    let mut rule = wire::<RelatedResourceRule>(&[
        ("labelSelector", label_selector()),
        ("namespaceSelector", label_selector()),
    ]);
    rule["additionalProperties"] = json!(false);
    rule
}

fn customize_response() -> Value {
    let mut response = wire::<CustomizeResponse>(&[(
        "relatedResources",
        json!({"type": "array", "items": {"$ref": "#/components/schemas/RelatedResourceRule"}}),
    )]);
    // Metacontroller decodes answers strictly: no field beyond these.
    response["additionalProperties"] = json!(false);
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operators;

    #[test]
    fn every_route_and_schema_reference_resolves() {
        let doc = serde_json::to_value(document(&operators::all())).unwrap();
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        let mut refs = Vec::new();
        collect_refs(&doc, &mut refs);
        assert!(!refs.is_empty());
        for r in refs {
            let name = r.trim_start_matches("#/components/schemas/");
            assert!(schemas.contains_key(name), "dangling {r}");
        }
        for op in operators::all() {
            for hook in op.hooks() {
                let path = format!("/{}/{}", op.name, hook);
                assert!(doc["paths"][&path]["post"].is_object(), "{path}");
            }
        }
    }

    #[test]
    fn parent_schemas_keep_their_validation() {
        let doc = serde_json::to_value(document(&operators::all())).unwrap();
        let replicas = &doc["components"]["schemas"]["WebServer"]["properties"]["spec"]["properties"]
            ["replicas"];
        assert_eq!(replicas["minimum"].as_f64(), Some(0.0));
        assert_eq!(replicas["maximum"].as_f64(), Some(1000.0));
        let status = &doc["components"]["schemas"]["WebServerStatus"];
        assert_eq!(status["type"], json!(["object", "null"]));
    }

    fn collect_refs(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                if let Some(Value::String(r)) = map.get("$ref") {
                    out.push(r.clone());
                }
                map.values().for_each(|v| collect_refs(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| collect_refs(v, out)),
            _ => {}
        }
    }
}
