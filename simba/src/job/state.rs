//! Application state for jobs: the values a service hands the runtime once
//! ([`RuntimeBuilder::state`](crate::RuntimeBuilder::state)) and a job takes as a typed
//! parameter, [`State<T>`], in the manner of axum's `State` and apalis's `Data`. No global, no
//! `OnceLock`: a job that needs a database pool declares it, and the runtime refuses to start
//! when a job needs a type nobody provided.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

/// A value of the application's state, as a job parameter: `State(pool): State<PgPool>`.
///
/// The runtime clones the value it was given
/// ([`RuntimeBuilder::state`](crate::RuntimeBuilder::state)) into each run, so `T` is cheap
/// to clone (a pool, an `Arc` of the application's own struct).
///
/// ```
/// use simba::{State, Term};
///
/// #[derive(Clone)]
/// struct Mailer { from: &'static str }
///
/// #[simba::simba_scheduled(cron = "0 0 9 * * MON")]
/// async fn weekly_report(term: &Term, State(mailer): State<Mailer>) -> Result<(), simba::Error> {
///     term.ensure_valid(std::time::Duration::from_secs(1))?;
///     let _ = mailer.from;
///     Ok(())
/// }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct State<T>(pub T);

impl<T> Deref for State<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> DerefMut for State<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

/// One type of state a job needs: what the macros record for each [`State<T>`] parameter,
/// so the runtime can check before any job starts that every needed type was provided.
#[derive(Clone, Copy)]
pub struct StateNeed {
    id: fn() -> TypeId,
    name: fn() -> &'static str,
}

impl StateNeed {
    /// The need of a `State<T>` parameter.
    pub const fn of<T: Clone + Send + Sync + 'static>() -> StateNeed {
        StateNeed { id: TypeId::of::<T>, name: std::any::type_name::<T> }
    }

    /// The needed type's name, as the compiler spells it.
    pub fn type_name(&self) -> &'static str {
        (self.name)()
    }

    fn id(&self) -> TypeId {
        (self.id)()
    }
}

impl fmt::Debug for StateNeed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("StateNeed").field(&self.type_name()).finish()
    }
}

impl PartialEq for StateNeed {
    fn eq(&self, other: &Self) -> bool {
        self.id() == other.id()
    }
}

impl Eq for StateNeed {}

/// The application's state values, one per type (a type map).
#[derive(Clone, Default)]
pub(crate) struct StateMap {
    values: HashMap<TypeId, (Arc<dyn Any + Send + Sync>, &'static str)>,
    /// Types given twice: refused when the runtime starts (which value would a job get?).
    twice: Vec<&'static str>,
}

impl StateMap {
    /// Adds `value` as the state of type `T`.
    pub(crate) fn insert<T: Clone + Send + Sync + 'static>(&mut self, value: T) {
        let name = std::any::type_name::<T>();
        if self.values.insert(TypeId::of::<T>(), (Arc::new(value), name)).is_some() {
            self.twice.push(name);
        }
    }

    /// A clone of the state of type `T`, if it was given.
    pub(crate) fn get<T: Clone + 'static>(&self) -> Option<T> {
        self.values.get(&TypeId::of::<T>()).and_then(|(v, _)| v.downcast_ref::<T>()).cloned()
    }

    /// Whether every type `job` needs was given; the error says which one is missing, for
    /// which job, and how to give it. Also refuses a type given twice.
    pub(crate) fn check(&self, job: &str, needs: &[StateNeed]) -> Result<(), String> {
        if let Some(name) = self.twice.first() {
            return Err(format!(
                "the state of type `{name}` was given twice: give each type once (wrap two values of one type in \
                 a struct of your own)"
            ));
        }
        match needs.iter().find(|n| !self.values.contains_key(&n.id())) {
            None => Ok(()),
            Some(missing) => Err(format!(
                "job `{job}` takes `State<{0}>`, but no state of type `{0}` was given: pass it to the runtime \
                 with `Runtime::builder().state(value)` (or `TestKit::builder().state(value)` in tests)",
                missing.type_name()
            )),
        }
    }

    /// The names of the types given, for logs.
    pub(crate) fn type_names(&self) -> Vec<&'static str> {
        let mut names: Vec<_> = self.values.values().map(|(_, n)| *n).collect();
        names.sort_unstable();
        names
    }
}

impl fmt::Debug for StateMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.type_names()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, PartialEq)]
    struct Db(u32);

    #[test]
    fn a_given_type_is_found_and_cloned() {
        let mut map = StateMap::default();
        map.insert(Db(7));
        assert_eq!(map.get::<Db>(), Some(Db(7)));
        assert_eq!(map.get::<String>(), None);
        assert_eq!(map.check("report", &[StateNeed::of::<Db>()]), Ok(()));
    }

    #[test]
    fn a_missing_type_names_the_job_the_type_and_the_fix() {
        let map = StateMap::default();
        let err = map.check("report", &[StateNeed::of::<Db>()]).expect_err("no Db given");
        assert!(err.contains("job `report` takes `State<"), "{err}");
        assert!(err.contains("::Db`"), "{err}");
        assert!(err.contains("Runtime::builder().state(value)"), "{err}");
    }

    #[test]
    fn a_type_given_twice_is_refused() {
        let mut map = StateMap::default();
        map.insert(Db(1));
        map.insert(Db(2));
        let err = map.check("report", &[]).expect_err("Db given twice");
        assert!(err.contains("was given twice"), "{err}");
    }

    #[test]
    fn needs_compare_by_type() {
        assert_eq!(StateNeed::of::<Db>(), StateNeed::of::<Db>());
        assert_ne!(StateNeed::of::<Db>(), StateNeed::of::<String>());
        assert!(format!("{:?}", StateNeed::of::<Db>()).contains("Db"));
    }
}
