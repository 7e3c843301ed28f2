//! Which macro is being expanded: shared by the option parser (`args`) and the signature
//! checks (`signature`), which do not depend on each other's files for it.

/// Which macro is being expanded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Scheduled,
    Partitioned,
    Handler,
}
