//! Compile-time tests of the macros live in `tests/ui.rs` and the cases in `ui/`.
