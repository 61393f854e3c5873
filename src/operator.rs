//! What an operator is written against: [`Operator`] (its resource, its
//! CompositeController and its hooks), [`Context`] (time and randomness,
//! passed in), and [`HookError`] (why a call has no answer). It knows the
//! hook wire types of [`crate::hook`] and nothing above: no HTTP, no
//! operator. The bytes around a call live in `call`.

pub mod names;

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::jiff::Timestamp;
use kube::CustomResourceExt;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::hook::{
    CustomizeRequest, CustomizeResponse, DecodeError, Hook, SyncRequest, SyncResponse,
};

/// How many random bytes a hook call gets.
pub const ENTROPY: usize = 96;

/// What a hook call may use besides the request: everything that is not a
/// pure function of the observed state.
#[derive(Clone, Debug)]
pub struct Context {
    /// The current time, for condition transition times and schedules.
    pub now: Timestamp,
    /// Fresh random bytes, for secrets generated once (never read from the
    /// system inside an operator, so tests can fix them).
    pub entropy: [u8; ENTROPY],
}

impl Context {
    /// A fixed context for unit tests: a known time, all-zero randomness.
    #[cfg(test)]
    pub(crate) fn fixed() -> Self {
        Context {
            now: "2026-03-04T05:06:07Z".parse().expect("a valid time"),
            entropy: [0; ENTROPY],
        }
    }

    /// A context at `now` whose random bytes are fixed by `seed` for call
    /// number `call` (splitmix64): what `--seed` means to both `opshooks
    /// hook` (call 1) and `opshooks simulate` (call N at step N).
    pub fn seeded(now: Timestamp, seed: u64, call: u32) -> Self {
        let mut entropy = [0u8; ENTROPY];
        let base = seed ^ (u64::from(call) << 32);
        for (i, byte) in entropy.iter_mut().enumerate() {
            let mut z = base.wrapping_add((i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            *byte = (z ^ (z >> 31)) as u8;
        }
        Context { now, entropy }
    }

    /// A context at `now` with fresh random bytes from the operating system.
    pub fn fresh(now: Timestamp) -> Result<Self, getrandom::Error> {
        let mut entropy = [0u8; ENTROPY];
        getrandom::fill(&mut entropy)?;
        Ok(Context { now, entropy })
    }
}

/// Why a hook call has no answer. Never answered with a 200.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum HookError {
    /// The request body could not be decoded.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// The parent's spec is invalid for the operator.
    #[error(transparent)]
    Invalid(#[from] InvalidSpec),
    /// The observed state leaves a decision that could lose data open: the
    /// operator answers nothing, so Metacontroller changes nothing, and the
    /// message says what to check.
    #[error("{0}")]
    Unsafe(String),
}

/// A parent spec that the operator cannot act on. Answered with 422.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InvalidSpec {
    /// The JSON path of the field, `spec.replicas`.
    pub field: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl InvalidSpec {
    /// A problem with one field.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        InvalidSpec {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// The pure function behind a composite `sync` or `finalize` hook.
pub type SyncFn<P, S = serde_json::Value> =
    fn(&SyncRequest<P>, &Context) -> Result<SyncResponse<S>, HookError>;
/// The pure function behind a `customize` hook.
pub type CustomizeFn<P> =
    fn(&CustomizeRequest<P>, &Context) -> Result<CustomizeResponse, HookError>;

/// One child type of a CompositeController and how Metacontroller updates it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildResource {
    /// `v1` or `group/version`.
    pub api_version: &'static str,
    /// Plural resource name.
    pub resource: &'static str,
    /// Metacontroller's update method for existing children of this type.
    pub update_method: &'static str,
    /// Conditions a child must show before a rolling update moves on.
    pub status_checks: Vec<(&'static str, &'static str)>,
    /// Why this update method, for the manifest's reader.
    #[serde(skip)]
    pub why: &'static str,
    /// The chart value (under `operators.<name>`) that declares this type,
    /// for a type whose CRD may not be installed: Metacontroller's
    /// controller stops when one of its child types is unknown. Such a type
    /// is left out of the plain manifests.
    #[serde(skip)]
    pub only_with: Option<&'static str>,
}

impl ChildResource {
    /// A child type with no status checks: its API version, plural
    /// resource, update method and why that method.
    pub fn new(
        api_version: &'static str,
        resource: &'static str,
        update_method: &'static str,
        why: &'static str,
    ) -> Self {
        ChildResource {
            api_version,
            resource,
            update_method,
            status_checks: Vec::new(),
            why,
            only_with: None,
        }
    }

    /// Declared only where the chart value `operators.<name>.<value>` is
    /// true.
    pub fn only_with(self, value: &'static str) -> Self {
        ChildResource {
            only_with: Some(value),
            ..self
        }
    }
}

/// How an operator's CompositeController is set up.
#[derive(Clone, Debug)]
pub struct ControllerSpec {
    /// Child types, in manifest order.
    pub children: Vec<ChildResource>,
    /// Let Metacontroller label children with the parent's uid instead of
    /// reading a selector from the parent's spec.
    pub generate_selector: bool,
    /// Periodic resync, for operators whose status depends on time.
    pub resync_period_seconds: Option<i32>,
}

/// One operator: its resource, its controller and its hooks.
pub struct Operator {
    /// The route segment, `webserver`.
    pub name: &'static str,
    /// The parent's kind, `WebServer`.
    pub kind: String,
    /// How its CompositeController is set up.
    pub controller: ControllerSpec,
    /// What a user reads in the README table: the children it manages.
    pub children_summary: &'static str,
    api_version: String,
    plural: String,
    /// Builds the parent's CRD; only manifests and documents need its
    /// schema, so a server never spends the memory.
    crd: fn() -> CustomResourceDefinition,
    hooks: BTreeMap<Hook, Erased>,
}

impl Operator {
    /// An operator for the custom resource `P`, with no hooks yet.
    pub fn new<P: CustomResourceExt>(
        name: &'static str,
        controller: ControllerSpec,
        children_summary: &'static str,
    ) -> Self {
        let resource = P::api_resource();
        Operator {
            name,
            kind: resource.kind,
            controller,
            children_summary,
            api_version: resource.api_version,
            plural: resource.plural,
            crd: P::crd,
            hooks: BTreeMap::new(),
        }
    }

    /// Adds the `sync` hook.
    pub fn sync<P: DeserializeOwned + 'static, S: Serialize + 'static>(
        self,
        f: SyncFn<P, S>,
    ) -> Self {
        self.composite(Hook::Sync, f)
    }

    /// Adds the `finalize` hook.
    pub fn finalize<P: DeserializeOwned + 'static, S: Serialize + 'static>(
        self,
        f: SyncFn<P, S>,
    ) -> Self {
        self.composite(Hook::Finalize, f)
    }

    /// Adds the `customize` hook.
    pub fn customize<P: DeserializeOwned + 'static>(mut self, f: CustomizeFn<P>) -> Self {
        let erased = move |req: CustomizeRequest, ctx: &Context| f(&req.typed::<P>()?, ctx);
        self.hooks
            .insert(Hook::Customize, Erased::Customize(Box::new(erased)));
        self
    }

    fn composite<P: DeserializeOwned + 'static, S: Serialize + 'static>(
        mut self,
        hook: Hook,
        f: SyncFn<P, S>,
    ) -> Self {
        let erased = move |req: SyncRequest, ctx: &Context| {
            f(&req.typed::<P>()?, ctx).map(SyncResponse::into_untyped)
        };
        self.hooks.insert(hook, Erased::Composite(Box::new(erased)));
        self
    }

    /// The hooks this operator answers, in route order.
    pub fn hooks(&self) -> impl Iterator<Item = Hook> + '_ {
        self.hooks.keys().copied()
    }

    /// The function behind `hook`, with the parent still untyped; `None`
    /// when this operator has no such hook.
    pub fn hook(&self, hook: Hook) -> Option<&Erased> {
        self.hooks.get(&hook)
    }

    /// The plural resource name of the parent, `webservers`.
    pub fn plural(&self) -> &str {
        &self.plural
    }

    /// The parent's CRD, generated from its Rust types.
    pub fn crd(&self) -> CustomResourceDefinition {
        (self.crd)()
    }

    /// The parent's `group/version`.
    pub fn api_version(&self) -> &str {
        &self.api_version
    }
}

/// A composite hook with the parent still untyped.
pub type ErasedSync =
    Box<dyn Fn(SyncRequest, &Context) -> Result<SyncResponse, HookError> + Send + Sync>;
/// A customize hook with the parent still untyped.
pub type ErasedCustomize =
    Box<dyn Fn(CustomizeRequest, &Context) -> Result<CustomizeResponse, HookError> + Send + Sync>;

/// An operator's hook with the parent's type erased: it decodes the parent
/// into the operator's resource, then runs the operator's pure function.
pub enum Erased {
    /// A `sync` or `finalize` hook.
    Composite(ErasedSync),
    /// A `customize` hook.
    Customize(ErasedCustomize),
}
