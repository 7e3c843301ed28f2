//! `SIMBA_<TABLE>__<KEY>` environment overrides: which variables are overrides, and how one
//! is written into the file's table before it is checked.

const SECTIONS: [&str; 8] = ["backend", "session", "jobs", "metrics", "dashboard", "history", "schedules", "alerts"];

/// `SIMBA_<TABLE>__<KEY>` variables (those with a double underscore); others such as
/// `SIMBA_CONFIG` are not overrides.
pub(crate) fn env_overrides() -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| k.starts_with("SIMBA_") && k.contains("__") && !k.starts_with("SIMBA_TEST_"))
        .collect();
    v.sort();
    v
}

pub(super) fn apply_override(table: &mut toml::Table, var: &str, value: &str) -> Result<(), String> {
    // Overrides come from `env_overrides` (prefixed names only), but `from_toml_str` takes any
    // list: a name without the prefix is an error, not a panic (found by the `config` fuzz
    // target).
    let Some(rest) = var.strip_prefix("SIMBA_") else {
        return Err(format!(
            "environment variable {var}: overrides are named SIMBA_<TABLE>__<KEY>, e.g. SIMBA_SESSION__LEASE_DURATION"
        ));
    };
    let path: Vec<String> = rest.split("__").map(|s| s.to_ascii_lowercase()).collect();
    if path.len() < 2 || path.iter().any(String::is_empty) {
        return Err(format!(
            "environment variable {var}: write SIMBA_<TABLE>__<KEY>, e.g. SIMBA_SESSION__LEASE_DURATION"
        ));
    }
    if !SECTIONS.contains(&path[0].as_str()) {
        let hint = crate::suggest::nearest(&path[0], SECTIONS)
            .map(|s| format!(" (did you mean SIMBA_{}__...?)", s.to_uppercase()));
        return Err(format!(
            "environment variable {var}: unknown table `{}`; tables are backend, session, jobs, metrics, dashboard, history, schedules and alerts{}",
            path[0],
            hint.unwrap_or_default()
        ));
    }
    // Numbers and booleans as TOML reads them; anything else is a string ("10s"). Secrets are
    // always strings (a numeric password is still a password).
    let secret = path.last().is_some_and(|k| crate::secret::is_secret_key(k));
    let parsed = if secret {
        None
    } else {
        toml::from_str::<toml::Table>(&format!("v = {value}")).ok().and_then(|mut t| t.remove("v"))
    };
    let v = match parsed {
        Some(v @ (toml::Value::Integer(_) | toml::Value::Float(_) | toml::Value::Boolean(_))) => v,
        _ => toml::Value::String(value.to_owned()),
    };
    let mut t = table;
    for key in &path[..path.len() - 1] {
        let entry = t.entry(key.clone()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        t = match entry {
            toml::Value::Table(inner) => inner,
            _ => return Err(format!("environment variable {var}: `{key}` is not a table")),
        };
    }
    if let Some(last) = path.last() {
        t.insert(last.clone(), v);
    }
    Ok(())
}

/// The key path each override sets, with its variable: `("session.lease_duration",
/// "SIMBA_SESSION__LEASE_DURATION")` (a name without the prefix sets none).
pub(super) fn overridden_keys(overrides: &[(String, String)]) -> Vec<(String, String)> {
    overrides
        .iter()
        .filter_map(|(var, _)| {
            let path = var.strip_prefix("SIMBA_")?.split("__").map(str::to_ascii_lowercase).collect::<Vec<_>>();
            Some((path.join("."), var.clone()))
        })
        .collect()
}
