//! Test utilities.
