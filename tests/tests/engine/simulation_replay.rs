//! Bit-for-bit replay of the simulation (`simulation.rs`, docs/adr/0021). Compiled only with
//! `--cfg tokio_unstable`, the one build in which Tokio's own random choices (the first branch
//! `select!` polls, the slot a `watch` waiter takes) can be seeded; .cargo/config.toml sets it
//! for this repository's builds, so the test command runs it:
//! `cargo test -p simba-tests --test engine simulation_replay`.
//! It uses one client per name ([`Layout::PerName`]): with shared sessions the engine's
//! `HashMap` order still varies from run to run.

use simba_tests::sim::{Layout, Options, run};

/// Runs `seed` twice in `layout` and panics at the first entry where the traces differ.
fn assert_replays(seed: u64, layout: Layout) {
    let opts = Options { layout, ..Options::default() };
    let a = run(seed, opts);
    let b = run(seed, opts);
    let same = a.trace.len() == b.trace.len() && a.trace.iter().zip(&b.trace).all(|(x, y)| x == y);
    if !same {
        let at = a.trace.iter().zip(&b.trace).position(|(x, y)| x != y).unwrap_or(a.trace.len().min(b.trace.len()));
        panic!(
            "seed {seed} ({layout:?}) did not replay: traces of {} and {} entries differ from entry {at}:\n{:?}\n{:?}",
            a.trace.len(),
            b.trace.len(),
            a.trace.get(at),
            b.trace.get(at)
        );
    }
    assert!(a.trace.len() > 100, "seed {seed}: a trace of {} entries", a.trace.len());
}

/// A seed replays bit for bit: the same seed twice gives the same trace, every call, fault,
/// reply, term and action at the same virtual microsecond.
#[test]
fn sim_a_seed_replays_bit_for_bit() {
    for seed in 0..40 {
        assert_replays(seed, Layout::PerName);
    }
}

/// The same with one session per node holding several terms: the engine keeps its terms and
/// elections in name order and the in-memory store announces a closed session's releases in
/// name order, so no map's random order decides which of two terms goes first.
#[test]
fn sim_a_seed_with_shared_sessions_replays_bit_for_bit() {
    for seed in 0..40 {
        assert_replays(seed, Layout::Shared);
    }
}
