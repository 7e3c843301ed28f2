use simba::job::SCHEDULED_JOBS;
use simba::{Term, simba_scheduled};

#[simba_scheduled(fixed_rate = "10s")]
async fn returns_unit(_term: &Term) {}

#[simba_scheduled(fixed_rate = "10s")]
async fn returns_explicit_unit(_term: &Term) -> () {}

#[simba_scheduled(fixed_rate = "10s")]
async fn returns_anyhow(term: &Term) -> anyhow::Result<()> {
    term.ensure_valid(std::time::Duration::from_secs(1))?;
    Ok(())
}

#[simba_scheduled(fixed_rate = "10s")]
async fn returns_value(_term: &Term) -> Result<u64, simba::Error> {
    Ok(7)
}

fn main() {
    for name in ["returns_unit", "returns_explicit_unit", "returns_anyhow", "returns_value"] {
        assert!(SCHEDULED_JOBS.iter().any(|j| j.name == name), "{name}");
    }
}
