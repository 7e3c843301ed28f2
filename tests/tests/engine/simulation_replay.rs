//! Bit-for-bit replay of the simulation (`simulation.rs`, docs/adr/0021). Compiled only with
//! `--cfg tokio_unstable`, the one build in which Tokio's own random choices (the first branch
//! `select!` polls, the slot a `watch` waiter takes) can be seeded: run it with
//! `RUSTFLAGS="--cfg simba_mutants --cfg tokio_unstable" cargo test -p simba-tests --test engine simulation_replay`.
//! It uses one client per name ([`Layout::PerName`]): with shared sessions the engine's
//! `HashMap` order still varies from run to run.

use simba_tests::sim::{Layout, Options, run};

/// A seed replays bit for bit: the same seed twice gives the same trace, every call, fault,
/// reply, term and action at the same virtual microsecond.
#[test]
fn sim_a_seed_replays_bit_for_bit() {
    for seed in 0..40 {
        let opts = Options { layout: Layout::PerName, ..Options::default() };
        let a = run(seed, opts);
        let b = run(seed, opts);
        let same = a.trace.len() == b.trace.len() && a.trace.iter().zip(&b.trace).all(|(x, y)| x == y);
        if !same {
            let at = a.trace.iter().zip(&b.trace).position(|(x, y)| x != y).unwrap_or(a.trace.len().min(b.trace.len()));
            panic!(
                "seed {seed} did not replay: traces of {} and {} entries differ from entry {at}:\n{:?}\n{:?}",
                a.trace.len(),
                b.trace.len(),
                a.trace.get(at),
                b.trace.get(at)
            );
        }
        assert!(a.trace.len() > 100, "seed {seed}: a trace of {} entries", a.trace.len());
    }
}
