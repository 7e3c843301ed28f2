//! Compile-time behaviour of `#[simba_scheduled]` and `#[simba_partitioned]` (rule J3): every
//! misuse in `ui/fail` is a compile error whose committed `.stderr` shows where it points;
//! every case in `ui/pass` compiles and checks what it registered.
//!
//! Regenerate the `.stderr` files with `TRYBUILD=overwrite cargo test -p simba-macros-ui`,
//! then read them.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("ui/pass/*.rs");
    t.compile_fail("ui/fail/*.rs");
}
