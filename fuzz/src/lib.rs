//! The invariants the fuzz targets check, shared by the targets (the same ones
//! `tests/tests/props/main.rs` checks with proptest in the normal test command). A violated
//! invariant panics: that is how libFuzzer reports a crash and saves its input.

use simba::RuntimeConfig;

/// The name the loader is told the text comes from; every error must name it.
pub const SOURCE: &str = "simba.toml";

/// Paths whose reading never ends or blocks (`password_file = "/dev/zero"`, a TLS file in
/// `/proc`): inputs naming them test the file system, not the loader, so they are skipped.
pub fn reads_special_files(text: &str) -> bool {
    ["/dev", "/proc", "/sys", "\\u", "\\U"].iter().any(|p| text.contains(p))
}

/// The loader never panics; an error names the file and, for a TOML syntax error, the line
/// (unless a secret of the file was masked as `***` inside the message, which then may hide
/// them, by design). A loaded configuration formats with `Debug`.
pub fn check_loader(text: &str, overrides: Vec<(String, String)>) {
    let only_file = overrides.is_empty();
    match RuntimeConfig::from_toml_str(text, SOURCE, overrides) {
        Err(e) => {
            let msg = e.to_string();
            if !msg.contains("***") {
                assert!(msg.contains(&format!("{SOURCE}: ")), "the error does not name the file: {msg}");
                if only_file && simba_toml_syntax_error(text) {
                    assert!(msg.contains("line "), "a syntax error does not name its line: {msg}");
                }
            }
        }
        Ok(cfg) => {
            let _ = format!("{cfg:?}");
            let _ = simba::runtime::redact(&cfg.backend_url);
        }
    }
}

/// Whether `text` is not TOML at all (the loader must then name the line).
fn simba_toml_syntax_error(text: &str) -> bool {
    toml::from_str::<toml::Table>(text).is_err()
}

/// Percent-encodes `s` as a URL's userinfo or query value.
pub fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// `s` as a TOML basic string (`"..."` with escapes), as a user would write it.
pub fn toml_basic(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The rule T1 model: 1 to 128 characters of `[A-Za-z0-9._:-]`, not `.` or `..`.
pub fn t1(name: &str) -> bool {
    let n = name.chars().count();
    (1..=128).contains(&n)
        && name != "."
        && name != ".."
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'))
}
