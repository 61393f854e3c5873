// The manifest's lints are for the product. Here a panic is the failure
// report (unwrap says where), and test modules are private by nature.
#![allow(clippy::unwrap_used, unreachable_pub, missing_docs)]

//! Integration tests, one crate so they build and link once:
//! golden fixtures, the router, properties, generated files, the binary.

mod integration {
    pub mod binary;
    pub mod escaping;
    pub mod generated;
    pub mod golden;
    pub mod house;
    pub mod lives;
    pub mod properties;
    pub mod quoting;
    pub mod readme;
    pub mod router;
    pub mod server;

    pub mod support;
}
