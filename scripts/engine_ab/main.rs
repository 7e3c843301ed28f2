//! The engine's own cost of one `lock(name).acquire()` + `release()` on the in-memory backend
//! (no server, no network), or on the store of `SIMBA_AB_URL` (Redis or PostgreSQL): cycles
//! per second and process CPU per cycle, over 5 timed repetitions of 2 s after one to warm up.
//! Built twice by `scripts/engine-ab.sh`, against two revisions of `simba`, to tell an engine
//! change from the noise of a server benchmark (P2).

use std::time::{Duration, Instant};

use simba::backend::memory::MemoryBackend;
use simba::{Simba, SimbaConfig};

/// User + system CPU of this process, in clock ticks (`/proc/self/stat` fields 14 and 15).
fn cpu_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let fields: Vec<&str> = stat.get(stat.rfind(')')? + 2..)?.split(' ').collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let label = std::env::args().nth(1).unwrap_or_default();
    let config = SimbaConfig::builder()
        .lease_duration(Duration::from_secs(15))
        .renew_interval(Duration::from_secs(5))
        .build()?;
    let simba = match std::env::var("SIMBA_AB_URL") {
        Ok(url) => Simba::connect(&url, config).await?,
        Err(_) => Simba::new(MemoryBackend::new(), config)?,
    };
    for rep in 0..6 {
        let (start, cpu) = (Instant::now(), cpu_ticks().ok_or("no /proc/self/stat")?);
        let mut cycles = 0u64;
        while start.elapsed() < Duration::from_secs(2) {
            let guard = simba.lock("engine-ab.serial").acquire().await?;
            guard.release().await?;
            cycles += 1;
        }
        let secs = start.elapsed().as_secs_f64();
        // 100 clock ticks a second on Linux: 10,000 us a tick.
        let cpu_us = (cpu_ticks().ok_or("no /proc/self/stat")? - cpu) as f64 * 10_000.0 / cycles as f64;
        if rep > 0 {
            println!("{label} {:.0} {cpu_us:.1}", cycles as f64 / secs);
        }
    }
    Ok(())
}
