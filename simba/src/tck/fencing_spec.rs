//! `fencing_spec` (rule F3): a test kit for your own fenced resource.
//!
//! Implement [`FencedResource`] for a handle on one fresh resource, then call
//! [`fencing_spec`] with a factory. The kit checks that a higher token is accepted, a lower one
//! refused, an equal one accepted, and that under many concurrent writers with interleaved
//! tokens the check and the write behave as one atomic step (the results are checked against
//! the rules a linearizable fenced register must obey). A resource that reads the highest
//! token and writes in a separate step fails it.
//!
//! ```no_run
//! use simba::tck::fencing_spec::{FencedResource, fencing_spec};
//! use simba::{BoxError, FencedCell};
//!
//! struct Cell(FencedCell<String>);
//! impl FencedResource for Cell {
//!     async fn write(&self, token: u64, value: &str) -> Result<bool, BoxError> {
//!         Ok(self.0.write(token, value.to_owned()).is_ok())
//!     }
//!     async fn read(&self) -> Result<Option<(u64, String)>, BoxError> {
//!         let (t, v) = self.0.read();
//!         Ok((t > 0).then_some((t, v)))
//!     }
//! }
//! # async fn f() {
//! fencing_spec(|| async { Ok(Cell(FencedCell::new(String::new()))) }).await.expect("fenced");
//! # }
//! ```

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::seq::SliceRandom;

use crate::BoxError;

/// One fenced resource, as the kit drives it.
pub trait FencedResource: Send + Sync + 'static {
    /// Writes `value` with `token` in one atomic step: `Ok(true)` if accepted (the token is not
    /// below the highest accepted, which it then becomes), `Ok(false)` if refused as stale.
    fn write(&self, token: u64, value: &str) -> impl Future<Output = Result<bool, BoxError>> + Send;
    /// The highest accepted token and the value last accepted, or `None` before any write.
    fn read(&self) -> impl Future<Output = Result<Option<(u64, String)>, BoxError>> + Send;
}

/// Which check failed, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("fencing check `{check}` failed: {reason}")]
pub struct SpecFailure {
    /// The check.
    pub check: &'static str,
    /// What went wrong.
    pub reason: String,
}

/// What the kit checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecReport {
    /// The checks that passed.
    pub checks: Vec<&'static str>,
    /// Writes issued in all.
    pub writes: usize,
}

/// How long one call to the resource may take before the kit reports it.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
const WRITERS: usize = 16;
const WRITES_EACH: usize = 25;
const ROUNDS: usize = 4;

fn fail(check: &'static str, reason: impl Into<String>) -> SpecFailure {
    SpecFailure { check, reason: reason.into() }
}

async fn call<T>(
    check: &'static str,
    what: &str,
    f: impl Future<Output = Result<T, BoxError>>,
) -> Result<T, SpecFailure> {
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(fail(check, format!("{what} returned an error: {e}"))),
        Err(_) => Err(fail(check, format!("{what} did not answer within {CALL_TIMEOUT:?}"))),
    }
}

/// Runs every check, each on a fresh resource from `make`.
pub async fn fencing_spec<R, F, Fut>(make: F) -> Result<SpecReport, SpecFailure>
where
    R: FencedResource,
    F: Fn() -> Fut,
    Fut: Future<Output = Result<R, BoxError>>,
{
    let mut report = SpecReport { checks: Vec::new(), writes: 0 };

    let check = "higher token accepted, lower refused, equal accepted";
    let r = call(check, "creating a resource", make()).await?;
    for (token, value, want) in
        [(5, "a", true), (7, "b", true), (6, "stale", false), (7, "b", true), (7, "c", true), (3, "stale", false)]
    {
        let got = call(check, &format!("write(token {token})"), r.write(token, value)).await?;
        report.writes += 1;
        if got != want {
            return Err(fail(
                check,
                format!("write with token {token} was {} but must be {}", verdict(got), verdict(want)),
            ));
        }
    }
    match call(check, "read()", r.read()).await? {
        Some((7, v)) if v == "c" => {}
        other => {
            return Err(fail(
                check,
                format!("after the writes the resource holds {other:?}, expected token 7 with \"c\""),
            ));
        }
    }
    report.checks.push(check);

    let check = "concurrent writers: atomic check-and-write";
    for round in 0..ROUNDS {
        let r = Arc::new(call(check, "creating a resource", make()).await?);
        let ops = contend(check, Arc::clone(&r), round).await?;
        report.writes += ops.len();
        verify(check, &ops, call(check, "read()", r.read()).await?)?;
    }
    report.checks.push(check);
    Ok(report)
}

fn verdict(accepted: bool) -> &'static str {
    if accepted { "accepted" } else { "refused" }
}

/// One write as observed: logical invocation and return ticks, token, value, outcome.
#[derive(Debug, Clone)]
struct Op {
    inv: u64,
    ret: u64,
    token: u64,
    value: String,
    accepted: bool,
}

async fn contend<R: FencedResource>(check: &'static str, r: Arc<R>, round: usize) -> Result<Vec<Op>, SpecFailure> {
    let clock = Arc::new(AtomicU64::new(0));
    // Distinct tokens, shuffled and dealt to the writers (equal tokens, a holder's retry, are
    // checked one at a time by the first check).
    let mut tokens: Vec<u64> = (1..=(WRITERS * WRITES_EACH) as u64).collect();
    tokens.shuffle(&mut rand::rng());
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let mine: Vec<u64> = tokens[w * WRITES_EACH..(w + 1) * WRITES_EACH].to_vec();
        let (r, clock) = (Arc::clone(&r), Arc::clone(&clock));
        tasks.push(tokio::spawn(async move {
            let mut ops = Vec::new();
            for (i, token) in mine.into_iter().enumerate() {
                let value = format!("r{round}-w{w}-{i}-t{token}");
                let inv = clock.fetch_add(1, Ordering::SeqCst);
                let accepted = call(check, &format!("write(token {token})"), r.write(token, &value)).await?;
                let ret = clock.fetch_add(1, Ordering::SeqCst);
                ops.push(Op { inv, ret, token, value, accepted });
            }
            Ok::<_, SpecFailure>(ops)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        match t.await {
            Ok(Ok(ops)) => all.extend(ops),
            Ok(Err(e)) => return Err(e),
            Err(e) => return Err(fail(check, format!("a writer task failed (the resource panicked?): {e}"))),
        }
    }
    Ok(all)
}

/// The rules every linearizable fenced register obeys.
fn verify(check: &'static str, ops: &[Op], last: Option<(u64, String)>) -> Result<(), SpecFailure> {
    let accepted: Vec<&Op> = ops.iter().filter(|o| o.accepted).collect();
    let Some(max) = accepted.iter().map(|o| o.token).max() else {
        return Err(fail(check, "no write was accepted"));
    };
    // The final state is the highest accepted token, with a value written with it.
    match &last {
        Some((t, v)) if *t == max && accepted.iter().any(|o| o.token == max && o.value == *v) => {}
        other => {
            return Err(fail(
                check,
                format!(
                    "the resource ends at {other:?} but token {max} was accepted: a stale write overwrote a newer one"
                ),
            ));
        }
    }
    // A write accepted after another accepted write finished carries a token at least as high.
    let mut by_ret: Vec<&Op> = accepted.clone();
    by_ret.sort_by_key(|o| o.ret);
    let mut highest_done: Vec<(u64, u64)> = Vec::with_capacity(by_ret.len()); // (ret, max token so far)
    let mut m = 0;
    for o in &by_ret {
        m = m.max(o.token);
        highest_done.push((o.ret, m));
    }
    for o in &accepted {
        let before = highest_done.iter().take_while(|(ret, _)| *ret < o.inv).last().map_or(0, |x| x.1);
        if o.token < before {
            return Err(fail(
                check,
                format!(
                    "token {} was accepted after token {before} had been accepted: check and write are not one atomic step",
                    o.token
                ),
            ));
        }
    }
    // A refusal needs a higher token accepted (or in flight) before the refusal returned.
    for o in ops.iter().filter(|o| !o.accepted) {
        if !accepted.iter().any(|a| a.token > o.token && a.inv < o.ret) {
            return Err(fail(check, format!("token {} was refused though no higher token had been written", o.token)));
        }
    }
    Ok(())
}
