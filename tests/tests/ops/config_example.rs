//! `examples/simba.toml` lists every configuration key the runtime reads, and no key it does
//! not read. The keys the code reads are not copied here: they are asked of the parser itself.
//! Every table of `simba.toml` refuses unknown keys, and serde's refusal names the keys the
//! table expects, so probing each table with a key that cannot exist walks the whole tree
//! (a table whose keys are names, `[jobs.NAME]`, is found by probing one level deeper). A key
//! added to the code fails this test until the example documents it.

use std::collections::BTreeSet;

use simba::{Error, RuntimeConfig};

/// A key no table has.
const PROBE: &str = "zz_not_a_key";

/// The example file, as shipped.
const EXAMPLE: &str = include_str!("../../../examples/simba.toml");

/// The keys the table at `path` (dotted; empty for the top level) expects, or `None` when
/// `path` is not a table of named keys (a value, or a table of names).
fn table_keys(path: &str) -> Option<Vec<String>> {
    let text = if path.is_empty() { format!("{PROBE} = 1\n") } else { format!("[{path}]\n{PROBE} = 1\n") };
    let message = match RuntimeConfig::from_toml_str(&text, "probe.toml", Vec::new()) {
        Ok(_) => return None,
        Err(Error::InvalidConfig(e)) => e.reason().to_owned(),
        Err(other) => panic!("probing [{path}] failed otherwise: {other}"),
    };
    let (_, expected) = message.split_once(&format!("unknown field `{PROBE}`, expected "))?;
    let expected = expected.split("hint:").next().unwrap_or_default();
    if expected.starts_with("there are no fields") {
        return Some(Vec::new());
    }
    let keys: Vec<String> = expected.split('`').skip(1).step_by(2).map(str::to_owned).collect();
    assert!(!keys.is_empty(), "cannot read the keys of [{path}] from {message:?}");
    Some(keys)
}

/// Every key path the code reads, below `path`: `backend.tls.ca_file`, `jobs.*.cron`, ...
fn code_keys(path: &str, out: &mut BTreeSet<String>) {
    let keys = table_keys(path).unwrap_or_else(|| panic!("[{path}] is not a table"));
    for key in keys {
        let child = if path.is_empty() { key } else { format!("{path}.{key}") };
        if table_keys(&child).is_some() {
            code_keys(&child, out);
        } else if table_keys(&format!("{child}.zz_name")).is_some() {
            // A table of names (`[jobs.NAME]`): every name has the same keys.
            code_keys(&format!("{child}.zz_name"), out);
        } else {
            out.insert(child.replace(".zz_name.", ".*."));
        }
    }
}

/// Every key path the example lists, set or commented out (`# listen = "..."` documents a key
/// whose default is unset), with `[jobs.report]` and the others as `jobs.*`.
fn example_keys(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut table = String::new();
    for line in text.lines() {
        let line = line.trim().trim_start_matches('#').trim();
        if let Some(header) = line.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            table = header.trim().to_owned();
            continue;
        }
        let Some((key, value)) = line.split_once('=') else { continue };
        let (key, value) = (key.trim(), value.trim());
        let is_key = !key.is_empty() && key.chars().all(|c| c.is_ascii_lowercase() || c == '_');
        let is_value = value.starts_with(['"', '-', '['])
            || value.starts_with(|c: char| c.is_ascii_digit())
            || value.starts_with("true")
            || value.starts_with("false");
        if is_key && is_value && !table.is_empty() {
            let table = match table.strip_prefix("jobs.") {
                Some(_) => "jobs.*",
                None => table.as_str(),
            };
            out.insert(format!("{table}.{key}"));
        }
    }
    out
}

#[test]
fn the_example_configuration_lists_every_key_the_code_reads() {
    let mut code = BTreeSet::new();
    code_keys("", &mut code);
    // The probe found the tree (a broken probe would find nothing and blame the example).
    for known in ["backend.url", "backend.tls.ca_file", "session.lease_duration", "jobs.*.cron", "history.retention"] {
        assert!(code.contains(known), "the probe did not find `{known}` among {code:?}");
    }
    let example = example_keys(EXAMPLE);
    let missing: Vec<&String> = code.difference(&example).collect();
    let unknown: Vec<&String> = example.difference(&code).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "examples/simba.toml must list every key the code reads, with its default or commented out: missing \
         {missing:?}; unknown to the code {unknown:?}"
    );
}

/// The parser of the example's keys reads what it should (so that the test above compares
/// what the file says).
#[test]
fn the_example_key_reader_reads_set_and_commented_keys() {
    let keys = example_keys(
        "# comment = prose, not a key\n[backend]\nurl = \"x\"\n# user = \"u\"\n[jobs.a]\nretry = 0\n[jobs.b]\n\
         enabled = true\n# [dashboard]\n# listen = \"127.0.0.1:1\"\n",
    );
    let want = ["backend.url", "backend.user", "jobs.*.retry", "jobs.*.enabled", "dashboard.listen"];
    assert_eq!(keys, want.into_iter().map(str::to_owned).collect());
}
