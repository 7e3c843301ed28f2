//! The conformance suite (B4) on the in-memory backend.

use simba::backend::memory::MemoryBackend;

// One store shared by the clients of a test, as one server is.
fn store() -> MemoryBackend {
    use std::sync::OnceLock;
    static STORE: OnceLock<MemoryBackend> = OnceLock::new();
    STORE.get_or_init(MemoryBackend::new).clone()
}

async fn make() -> MemoryBackend {
    store()
}

simba::conformance_suite!(
    make,
    simba::tck::conformance::Capabilities::NONE.with_release_broadcast().with_kept_lease_records()
);

/// Issue 12 item 6: the namespace concern on this backend.
mod namespaces {
    use super::*;

    simba::namespace_suite!(make);
}
