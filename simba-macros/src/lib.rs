//! Attribute macros for simba (see the `simba` crate).
