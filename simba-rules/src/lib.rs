//! The rules that `simba` (at run time) and `simba-macros` (at compile time) must apply the
//! same way, written once: the lease-name rule (T1), the cron parser settings (J1), the
//! misfire policy names (J1, J7), and the overlap names and policy checks (J11-J14). No
//! dependencies, so the proc-macro crate can use it too.

/// The lease-name rule (T1).
pub mod lease {
    /// The longest lease name, in characters.
    pub const MAX_NAME_LEN: usize = 128;

    /// Why `name` is not a valid lease name, or `None` when it is: 1 to 128 characters of
    /// `[A-Za-z0-9._:-]`, and not `.` or `..`. One name then means the same as a Redis key, a
    /// ZooKeeper path component and a SQL value.
    ///
    /// ```
    /// assert_eq!(simba_rules::lease::name_problem("billing.3"), None);
    /// assert!(simba_rules::lease::name_problem("no/slashes").is_some());
    /// ```
    pub fn name_problem(name: &str) -> Option<&'static str> {
        if name.is_empty() {
            return Some("a lease name needs 1 to 128 characters");
        }
        if name.chars().count() > MAX_NAME_LEN {
            return Some("a lease name has at most 128 characters");
        }
        if name == "." || name == ".." {
            return Some("`.` and `..` are not lease names (they are ZooKeeper path components)");
        }
        if !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')) {
            return Some("a lease name may only contain A-Z, a-z, 0-9, `.`, `_`, `:` and `-`");
        }
        None
    }
}

/// The cron parser settings (J1): both crates build their `croner` parser from these.
pub mod cron {
    /// Whether a field of a cron expression must, may or must not be present.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Field {
        /// The field must be present.
        Required,
        /// The field may be left out.
        Optional,
        /// The field must not be present.
        Disallowed,
    }

    /// The seconds field comes first and is required: 6 fields.
    pub const SECONDS: Field = Field::Required;
    /// No year field.
    pub const YEAR: Field = Field::Disallowed;
    /// How many fields an expression has under these settings.
    pub const FIELDS: usize = 6;
    /// An example expression, for error messages.
    pub const EXAMPLE: &str = "0 */5 * * * *";
}

/// The misfire policy names, as written in `misfire = "..."` and in `simba.toml`.
pub mod misfire {
    /// What to do with cron slots missed while the job could not run: the one misfire type
    /// of the workspace (`simba::job::Misfire` and `simba::schedule_store::Misfire` re-export
    /// it).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    #[non_exhaustive]
    pub enum Policy {
        /// Missed slots are skipped; the next slot runs on time (the default).
        #[default]
        Skip,
        /// The latest missed slot runs once, at once, then the job continues on time.
        RunOnce,
    }

    impl Policy {
        /// The policy's name, as `misfire = "..."` and `simba.toml` write it.
        pub const fn name(self) -> &'static str {
            match self {
                Policy::Skip => SKIP,
                Policy::RunOnce => RUN_ONCE,
            }
        }
    }

    /// The name of [`Policy::Skip`].
    pub const SKIP: &str = "skip";
    /// The name of [`Policy::RunOnce`].
    pub const RUN_ONCE: &str = "run_once";
    /// What an error lists as the valid names.
    pub const VALID: &str = "\"skip\" (the default), \"run_once\"";

    /// The policy named `name`, or `None`.
    ///
    /// ```
    /// use simba_rules::misfire::{Policy, parse};
    /// assert_eq!(parse("run_once"), Some(Policy::RunOnce));
    /// assert_eq!(parse("later"), None);
    /// ```
    pub fn parse(name: &str) -> Option<Policy> {
        match name {
            SKIP => Some(Policy::Skip),
            RUN_ONCE => Some(Policy::RunOnce),
            _ => None,
        }
    }
}

/// The overlap policy names (J11), as written in `overlap = "..."` and in `simba.toml`.
pub mod overlap {
    /// What a slot that comes due does while a run of the job is in flight.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Policy {
        /// It does not run (the default).
        Skip,
        /// At most one slot waits and starts when the runs in flight end.
        BufferOne,
        /// It starts beside the runs in flight.
        AllowAll,
        /// The runs in flight are cancelled, then it starts.
        CancelRunning,
    }

    /// What an error lists as the valid names.
    pub const VALID: &str = "\"skip\" (the default), \"buffer_one\", \"allow_all\", \"cancel_running\"";

    /// The policy named `name`, or `None`.
    ///
    /// ```
    /// use simba_rules::overlap::{Policy, parse};
    /// assert_eq!(parse("buffer_one"), Some(Policy::BufferOne));
    /// assert_eq!(parse("replace"), None);
    /// ```
    pub fn parse(name: &str) -> Option<Policy> {
        match name {
            "skip" => Some(Policy::Skip),
            "buffer_one" => Some(Policy::BufferOne),
            "allow_all" => Some(Policy::AllowAll),
            "cancel_running" => Some(Policy::CancelRunning),
            _ => None,
        }
    }
}

/// The checks of the slot policies (J11-J14) that both crates make: the macros at compile
/// time, the runtime on `simba.toml` and on jobs built by hand.
pub mod policies {
    /// Why a start jitter of `jitter_ms` is refused for a fixed rate of `period_ms`, or `None`:
    /// a jittered slot must start before the next slot's instant (J13).
    pub fn jitter_problem(jitter_ms: u128, period_ms: Option<u128>) -> Option<String> {
        let period = period_ms?;
        (jitter_ms >= period).then(|| {
            format!(
                "the start jitter ({jitter_ms} ms) must be shorter than the fixed rate ({period} ms): a slot never \
                 starts after the next one"
            )
        })
    }

    /// Why the bounds `start_ms` .. `end_ms` (unix milliseconds) are refused, or `None`.
    pub fn bounds_problem(start_ms: Option<i64>, end_ms: Option<i64>) -> Option<&'static str> {
        match (start_ms, end_ms) {
            (Some(s), Some(e)) if e < s => Some("the end bound is before the start bound: the job would never run"),
            _ => None,
        }
    }

    /// What an error says about a catch-up window beside a misfire policy that ignores it.
    pub const WINDOW_NEEDS_RUN_ONCE: &str = "a catch-up window bounds which missed slot `misfire = \"run_once\"` runs; \
         with `misfire = \"skip\"` every missed slot is recorded missed anyway: set misfire to run_once, or remove \
         the window";

    /// What an error says about a catch-up window on a fixed rate.
    pub const WINDOW_NEEDS_CRON: &str = "a catch-up window applies to cron slots missed between terms; a fixed \
         rate has no missed slots (its grid starts with each term): use cron, or remove the window";
}

#[cfg(test)]
mod tests {
    use super::*;

    /// T1: the accepted alphabet and lengths, and every way a name can be wrong.
    #[test]
    fn issue13_6_t1_lease_names() {
        for n in ["a", "report", "billing.3", "A-b_c:d.e", &"x".repeat(128), "..."] {
            assert_eq!(lease::name_problem(n), None, "{n:?} should be valid");
        }
        for n in ["", ".", "..", "a/b", "a b", "é", "{x}", &"x".repeat(129), "a*"] {
            assert!(lease::name_problem(n).is_some_and(|r| r.contains("lease name")), "{n:?} should be refused");
        }
    }

    /// J1: every misfire name parses to its policy.
    #[test]
    fn issue13_6_misfire_names() {
        assert_eq!(misfire::parse(misfire::SKIP), Some(misfire::Policy::Skip));
        assert_eq!(misfire::parse(misfire::RUN_ONCE), Some(misfire::Policy::RunOnce));
        assert_eq!(misfire::parse("Skip"), None);
        for p in [misfire::Policy::Skip, misfire::Policy::RunOnce] {
            assert_eq!(misfire::parse(p.name()), Some(p));
        }
    }

    /// J11, J13, J14: the overlap names and the checks both crates share.
    #[test]
    fn j11_j13_j14_policy_names_and_checks() {
        use overlap::{Policy, parse};
        let all = [Policy::Skip, Policy::BufferOne, Policy::AllowAll, Policy::CancelRunning];
        let names = ["skip", "buffer_one", "allow_all", "cancel_running"];
        for (p, n) in all.iter().zip(names) {
            assert_eq!(parse(n), Some(*p));
            assert!(overlap::VALID.contains(n));
        }
        assert_eq!(parse("Skip"), None);
        assert!(policies::jitter_problem(1000, Some(1000)).is_some_and(|m| m.contains("shorter than the fixed rate")));
        assert_eq!(policies::jitter_problem(999, Some(1000)), None);
        assert_eq!(policies::jitter_problem(5000, None), None, "cron: clamped at run time");
        assert!(policies::bounds_problem(Some(10), Some(9)).is_some());
        assert_eq!(policies::bounds_problem(Some(10), Some(10)), None);
        assert_eq!(policies::bounds_problem(None, Some(1)), None);
    }
}
