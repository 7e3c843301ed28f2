//! A `#[cfg]` below the macro's attribute removes the registry entry with the function.

use simba::job::SCHEDULED_JOBS;
use simba::{Term, simba_scheduled};

#[simba_scheduled(fixed_rate = "1s")]
#[cfg(any())]
async fn never_compiled(_term: &Term) {}

#[simba_scheduled(fixed_rate = "1s")]
#[cfg(all())]
async fn always_compiled(_term: &Term) {}

fn main() {
    assert!(!SCHEDULED_JOBS.iter().any(|j| j.name == "never_compiled"));
    assert!(SCHEDULED_JOBS.iter().any(|j| j.name == "always_compiled"));
}
