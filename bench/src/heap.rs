//! The benchmark binary's allocator: the system's, counting (`stats_alloc`), so that a
//! measure can tell what its data keeps (P14's node heap per schedule) apart from what the
//! allocator keeps from the system (RSS). A few relaxed atomic adds per allocation.

use std::alloc::System;

use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

/// The system allocator, counting; the binary's global allocator.
#[global_allocator]
static ALLOC: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// The bytes allocated and not freed now (the sizes asked for, not the allocator's overhead).
pub(crate) fn live() -> u64 {
    let s = ALLOC.stats();
    // A reallocation's growth is counted in `bytes_allocated`, its shrinking in
    // `bytes_deallocated` (`bytes_reallocated` is their net, already included).
    u64::try_from(s.bytes_allocated.saturating_sub(s.bytes_deallocated)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_count_follows_what_is_kept() {
        let before = super::live();
        let kept = vec![1u8; 1 << 20];
        let during = super::live();
        drop(kept);
        // Other tests allocate at the same time: the megabyte dominates.
        assert!(during >= before + (1 << 20) - (64 << 10), "{before} -> {during}");
    }
}
