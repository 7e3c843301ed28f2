//! Lease-name validation (rule T1), the same rule on every backend.

use crate::Error;

/// The longest lease name, in characters.
pub const MAX_NAME_LEN: usize = 128;

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

/// Why `name` is not a valid lease name, or `None` when it is. Shared with the macros, which
/// check names at compile time.
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
