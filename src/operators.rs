//! The registry: every operator opshooks serves, in route order.
//!
//! Adding an operator: write `operators/<kind>.rs` with a `pub fn operator()`
//! and add one line to [`all`].

pub mod backup;
pub mod backup_job;
pub mod common;
pub mod database;
pub mod expansion;
pub mod memcached;
pub mod report;
pub mod resources;
pub mod schema;
pub mod validate;
pub mod webserver;

use crate::operator::Operator;

/// Every operator opshooks serves, in route order.
pub fn all() -> Vec<Operator> {
    vec![
        webserver::operator(),
        memcached::operator(),
        backup::operator(),
        database::operator(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operator_names_are_unique_route_segments() {
        let ops = all();
        let mut names: Vec<_> = ops.iter().map(|op| op.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), ops.len());
        for name in names {
            assert!(name.chars().all(|c| c.is_ascii_lowercase()), "{name}");
        }
    }
}
