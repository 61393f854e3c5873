//! todo
use crate::operators::Operator;
pub fn document(_ops: &[Operator]) -> utoipa::openapi::OpenApi { utoipa::openapi::OpenApi::default() }
pub fn yaml(ops: &[Operator]) -> String { document(ops).to_yaml().unwrap() }
