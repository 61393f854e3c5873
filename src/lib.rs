//! opshooks: Kubernetes operators as pure Metacontroller hooks.
//!
//! Metacontroller watches custom resources and their children, POSTs the
//! observed state to a hook, and applies the desired state the hook answers.
//! Every operator here is a pure, deterministic function from one to the
//! other; nothing in this crate talks to the Kubernetes API.
//!
//! The map:
//! - [`hook`]: Metacontroller's wire types, typed access to observed objects
//!   (observed pods as a small view), status conditions. No axum, no I/O.
//! - [`operator`]: what an operator is written against: `Operator`,
//!   `ControllerSpec`, `Context`, `HookError`, and Kubernetes' name rules
//!   (`operator::names`). Imports only `hook`.
//! - [`call`]: the one path from a request's bytes to an operator call to
//!   the answer's bytes (decode, refuse repeated keys and mis-keyed
//!   objects, check the parent's kind and names, run, refuse what the CRD
//!   refuses, serialize), shared by the server, `opshooks hook`, `render`
//!   and the simulator. No HTTP in it.
//! - [`operators`]: the registry (`all()`), `common` (shared labels,
//!   security contexts, child helpers), `validate`, `schema` (a parent
//!   checked against its CRD's schema and CEL rules, the one check every
//!   entry point applies), and one module per
//!   operator with its CRD types, `sync`/`finalize`/`customize` and child
//!   builders; `backup_job` (the dump Job shared by Backup and Database,
//!   the dumps' naming, the choice of a dump to restore) with
//!   `backup_job::verification` (proving dumps restore); `report` (the
//!   one definition of what our scripts write to their termination logs,
//!   and the hook's one reader of it).
//! - [`http`]: the listener (TLS, time limits, connection limits), the
//!   router around [`call`], admission (429), bearer-token
//!   auth, errors as `application/problem+json`, metrics and the OpenAPI
//!   document.
//! - [`manifests`]: the CRDs and CompositeControllers generated from the code.
//! - [`simulate`]: the loop offline: an operator stepped through a modelled
//!   cluster with Metacontroller's semantics, for `opshooks simulate` and
//!   the whole-life property tests; the events of `--then`, the report of
//!   each step, the request Metacontroller sends and how it applies the
//!   answer each in their own file, and [`simulate::cluster`], the object
//!   store with one file per modelled controller.
//! - [`cli`]: the `hook`, `openapi`, `manifests`, `simulate`, `render` and
//!   `report` subcommands.
//! - [`config`]: command-line flags, each also read from the environment.
//! - [`telemetry`]: logging set-up.
//! - [`fixtures`]: builders of observed objects, parents and hook requests
//!   for tests (the unit tests and `tests/` alike; nothing else calls it).

pub mod call;
pub mod cli;
pub mod config;
pub mod fixtures;
pub mod hook;
pub mod http;
pub mod manifests;
pub mod operator;
pub mod operators;
pub mod simulate;
pub mod telemetry;
