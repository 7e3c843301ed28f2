//! The `service` example's own test (its `tests` module), compiled here with the example's
//! code as a module: the example target itself stays a program, which `replicas.rs` starts.
#![cfg(feature = "dashboard")]

#[path = "../service.rs"]
#[allow(dead_code)] // The example's `main` is not called here; its test module is what runs.
mod service;
