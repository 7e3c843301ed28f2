//! Fencing: the protected resource refuses stale holders (section F of the contract).
//!
//! A term's validity only hints when to start a step; it never proves that nobody else owns
//! the lease. Only the resource can refuse a stale holder: every write carries
//! [`Term::token`](crate::Term::token); the resource accepts it only if the token is not below
//! the highest it has accepted, and records it, in ONE atomic step. Equal tokens are accepted
//! (retries inside one term).
//!
//! Recipes: [`FencedCell`] (in process), [`SqliteFence`] / [`PostgresFence`] /
//! [`MySqlFence`] (one conditional `UPDATE`), [`RedisFence`] (one Lua script). Check your own
//! resource with the test kit `simba::tck::fencing_spec` (feature `tck`).

use std::sync::{Mutex, PoisonError};

#[cfg(feature = "redis")]
mod redis;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
mod sql;

#[cfg(feature = "redis")]
pub use self::redis::RedisFence;
#[cfg(feature = "mysql")]
pub use sql::MySqlFence;
#[cfg(feature = "postgres")]
pub use sql::PostgresFence;
#[cfg(feature = "sqlite")]
pub use sql::SqliteFence;

/// A write was refused because a higher token was accepted before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("stale fencing token {token}: the resource already accepted token {highest}; this holder's term has ended")]
pub struct StaleToken {
    /// The token the write carried.
    pub token: u64,
    /// The highest token the resource accepted.
    pub highest: u64,
}

/// An in-process fenced value: check and write under one lock (rule F2, third recipe).
///
/// ```
/// let cell = simba::FencedCell::new(0u32);
/// cell.write(7, 1)?;              // token 7 accepted
/// cell.write(7, 2)?;              // a retry in the same term: accepted
/// assert!(cell.write(6, 3).is_err()); // a stale holder: refused
/// assert_eq!(cell.read(), (7, 2));
/// # Ok::<(), simba::StaleToken>(())
/// ```
#[derive(Debug, Default)]
pub struct FencedCell<T> {
    inner: Mutex<(u64, T)>,
}

impl<T> FencedCell<T> {
    /// A cell holding `value`, having accepted no token.
    pub fn new(value: T) -> Self {
        FencedCell { inner: Mutex::new((0, value)) }
    }

    /// Replaces the value if `token` is not below the highest token accepted, and records it.
    pub fn write(&self, token: u64, value: T) -> Result<(), StaleToken> {
        self.update(token, |v| *v = value)
    }

    /// Applies `f` to the value under the same check as [`write`](FencedCell::write).
    pub fn update<R>(&self, token: u64, f: impl FnOnce(&mut T) -> R) -> Result<R, StaleToken> {
        let mut g = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if token < g.0 {
            return Err(StaleToken { token, highest: g.0 });
        }
        g.0 = token;
        Ok(f(&mut g.1))
    }

    /// The highest accepted token.
    pub fn highest_token(&self) -> u64 {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).0
    }
}

impl<T: Clone> FencedCell<T> {
    /// The highest accepted token and the value.
    pub fn read(&self) -> (u64, T) {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// F1: higher accepted, equal accepted, lower refused.
    #[test]
    fn f1_fenced_cell_rules() {
        let c = FencedCell::new(String::new());
        assert!(c.write(5, "a".into()).is_ok());
        assert!(c.write(5, "b".into()).is_ok());
        assert!(c.write(9, "c".into()).is_ok());
        assert_eq!(c.write(8, "d".into()), Err(StaleToken { token: 8, highest: 9 }));
        assert_eq!(c.read(), (9, "c".to_owned()));
    }

    /// F1: check and write are one atomic step under contention.
    #[test]
    fn f1_fenced_cell_atomic() {
        let c = std::sync::Arc::new(FencedCell::new(0u64));
        let handles: Vec<_> = (1..=8u64)
            .map(|t| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        let _ = c.write(t, t);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().expect("writer thread");
        }
        let (tok, val) = c.read();
        assert_eq!(tok, 8);
        assert_eq!(val, 8, "the value is always the one written with the highest token");
    }
}
