//! Lease-name validation (rule T1), the same rule on every backend.

use crate::Error;

/// The longest lease name, in characters.
pub const MAX_NAME_LEN: usize = simba_rules::lease::MAX_NAME_LEN;

/// Checks that `name` is a valid lease name: 1 to 128 characters of `[A-Za-z0-9._:-]`, and
/// not `.` or `..` (rule T1). One name then means the same as a Redis key, a ZooKeeper path
/// and a SQL value.
///
/// ```
/// assert!(simba::validate_name("billing.3").is_ok());
/// assert!(simba::validate_name("no/slashes").is_err());
/// ```
pub fn validate_name(name: &str) -> Result<(), Error> {
    match name_problem(name) {
        None => Ok(()),
        Some(reason) => Err(Error::InvalidName { name: name.to_owned(), reason }),
    }
}

/// Why `name` is not a valid lease name, or `None` when it is. The rule lives in
/// `simba_rules::lease`, which the macros use too to check names at compile time.
pub fn name_problem(name: &str) -> Option<&'static str> {
    simba_rules::lease::name_problem(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// T1: the accepted alphabet and lengths.
    #[test]
    fn t1_valid_names() {
        for n in ["a", "report", "billing.3", "A-b_c:d.e", &"x".repeat(128), "..."] {
            assert!(validate_name(n).is_ok(), "{n:?} should be valid");
        }
    }

    /// T1: every way a name can be wrong is refused with a reason.
    #[test]
    fn t1_invalid_names() {
        for n in ["", ".", "..", "a/b", "a b", "é", "{x}", &"x".repeat(129), "a*"] {
            let err = validate_name(n).expect_err(n);
            let msg = err.to_string();
            assert!(msg.contains("lease name"), "{msg}");
        }
    }
}
