//! Integration tests, one crate so they build and link once:
//! golden fixtures, the router, properties, generated files, the binary.

mod integration {
    pub mod binary;
    pub mod generated;
    pub mod golden;
    pub mod lives;
    pub mod properties;
    pub mod router;
    pub mod server;
    pub mod support;
}
