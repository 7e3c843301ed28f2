//! The `simba.toml` loader on any text, with environment overrides: it never panics, and its
//! errors name the file (and the line, for a TOML syntax error).
//!
//! Input: the file's text, then optionally a NUL byte and override lines `VAR=value`
//! (`SIMBA_` is put in front of a variable that lacks it, as `env_overrides` only passes
//! such variables).

#![no_main]

use libfuzzer_sys::fuzz_target;
use simba_fuzz::{check_loader, reads_special_files};

fuzz_target!(|data: &[u8]| {
    let Ok(input) = std::str::from_utf8(data) else { return };
    if reads_special_files(input) {
        return;
    }
    let (text, env) = input.split_once('\0').unwrap_or((input, ""));
    let overrides: Vec<(String, String)> = env
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| {
            let k = if k.starts_with("SIMBA_") { k.to_owned() } else { format!("SIMBA_{k}") };
            (k, v.to_owned())
        })
        .collect();
    check_loader(text, overrides);
});
