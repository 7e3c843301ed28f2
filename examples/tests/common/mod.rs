//! What the example tests share.

use std::path::{Path, PathBuf};

/// An example's binary, beside this test's (`target/<profile>/examples/`): `cargo test`
/// builds the package's examples with its tests.
pub(crate) fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let profile = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>");
    let bin = profile.join("examples").join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.exists(),
        "{} is missing: run `cargo test -p simba-examples` (which builds it) or `cargo build --example {name}`",
        bin.display()
    );
    bin
}
