//! What a configuration error says and where it points: the line of a key in the file or the
//! variable that set it ([`Origins`]), the context every check of one text shares ([`Cx`]) with
//! its error constructors, the masking of secrets in messages, and serde's "did you mean" hints.

use std::collections::BTreeMap;

use crate::{ConfigError, Error};

/// Where the keys of one configuration were set: `jobs.report.cron` -> line 7, or ->
/// `SIMBA_JOBS__REPORT__CRON`; a table (`jobs.report`) -> the line of its header.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Origins(BTreeMap<String, Origin>);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Origin {
    Line(usize),
    Env(String),
}

impl Origins {
    /// The keys and table headers of `text` with their 1-based lines; an environment override
    /// (`(key path, variable)`) replaces the line of its key.
    pub(super) fn of(text: &str, overridden: &[(String, String)]) -> Self {
        let mut map = BTreeMap::new();
        let mut section = String::new();
        for (i, line) in text.lines().enumerate() {
            let l = line.trim();
            if let Some(h) = l.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
                section = h.trim().replace(['"', ' '], "");
                map.entry(section.clone()).or_insert(Origin::Line(i + 1));
            } else if let Some((k, _)) = l.split_once('=') {
                let k = k.trim().trim_matches('"');
                if !section.is_empty() && !k.is_empty() && !k.starts_with('#') {
                    map.entry(format!("{section}.{k}")).or_insert(Origin::Line(i + 1));
                }
            }
        }
        for (path, var) in overridden {
            map.insert(path.clone(), Origin::Env(var.clone()));
        }
        Origins(map)
    }

    /// `e` with the line of `key` in the file, or the variable that set it, when known.
    pub(crate) fn locate(&self, e: ConfigError, key: &str) -> ConfigError {
        match self.0.get(key) {
            Some(Origin::Line(line)) => e.with_line(Some(*line)),
            Some(Origin::Env(var)) => e.with_env_var(var.as_str()),
            None => e,
        }
    }
}

/// What every check of one configuration text needs: the text (for line numbers), its name,
/// the secrets to mask in messages, and which keys the environment overrides.
pub(super) struct Cx<'a> {
    pub(super) text: &'a str,
    pub(super) source: &'a str,
    pub(super) secrets: Vec<(String, String)>,
    /// `(key path, variable)` of every override: `("session.lease_duration",
    /// "SIMBA_SESSION__LEASE_DURATION")`.
    pub(super) overridden: Vec<(String, String)>,
    /// Where each key was set (its line, or the variable of `overridden`): built once, used by
    /// every error about a key and kept in the [`RuntimeConfig`](super::RuntimeConfig).
    pub(super) origins: Origins,
}

impl Cx<'_> {
    /// A configuration error naming the source, with every secret masked; its reason says
    /// where (a TOML parser message, or one naming its key).
    pub(super) fn err(&self, msg: String) -> Error {
        ConfigError::new(msg).with_file(self.source).map_reason(|r| scrub(r, &self.secrets)).into()
    }

    /// The error for `key` of `[section]`, with the line it is on in the file, or the
    /// environment variable that set it; every secret masked.
    pub(super) fn key_err(&self, section: &str, key: &str, msg: String) -> Error {
        let path = format!("{section}.{key}");
        let e = ConfigError::at_key(&path, scrub(&msg, &self.secrets)).with_file(self.source);
        self.origins.locate(e, &path).into()
    }

    /// A TOML error in the file itself: its line (from the error's span) and the key on that
    /// line, as fields.
    pub(super) fn toml_err(&self, e: &toml::de::Error) -> Error {
        let line = e.span().map(|r| self.text.get(..r.start).unwrap_or_default().matches('\n').count() + 1);
        let key = line.and_then(|l| key_at(self.text, l));
        let mut c = ConfigError::new(scrub(&with_hint(&e.to_string()), &self.secrets)).with_file(self.source);
        if let Some(key) = key {
            c = c.with_key(key);
        }
        c.with_line(line).into()
    }

    /// A TOML error of the table once the environment overrides are applied (it has no line of
    /// the file): the key it names (toml ends its text with "in `session.drift`") as a field,
    /// with the variable that set it.
    pub(super) fn override_err(&self, e: &toml::de::Error, applied: &[&str]) -> Error {
        let text = e.to_string();
        let key = text.lines().rev().find_map(|l| l.strip_prefix("in `")?.strip_suffix('`')).map(str::to_owned);
        let mut c = ConfigError::new(scrub(
            &format!("after the environment overrides {}: {}", applied.join(", "), with_hint(&text)),
            &self.secrets,
        ))
        .with_file(self.source);
        if let Some((_, var)) = key.as_ref().and_then(|k| self.overridden.iter().find(|(p, _)| p == k)) {
            c = c.with_env_var(var.as_str());
        }
        match key {
            Some(k) => c.with_key(k).into(),
            None => c.into(),
        }
    }

    /// An error whose reason names its key (`at` was written into it): `key` as a field.
    pub(super) fn err_at(&self, key: &str, msg: String) -> Error {
        match self.err(msg) {
            Error::InvalidConfig(c) => c.with_key(key).into(),
            other => other,
        }
    }
}

/// The secret values `text` and `overrides` hold, each with what to show instead: values of
/// secret keys (`password = ...`, as written and as they appear once a quoted string is
/// parsed) by `***`, and URLs that hold a password or secret parameters by their redacted form.
pub(super) fn secrets_in(text: &str, overrides: &[(String, String)]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut add = |key: &str, value: &str| {
        let value = value.trim();
        let unquoted = value.trim_matches(|c| c == '"' || c == '\'');
        if crate::secret::is_secret_key(key) {
            // Masked whole, never redacted as a URL: a password such as `p@ss` on a broken line
            // would show as `***@ss` (found by the fuzz target `url_redaction`, issue 16).
            out.extend([value, unquoted].map(|s| (s.to_owned(), crate::secret::MASK.to_owned())));
        } else {
            // Any URL: what redaction removes is secret.
            let shown = crate::secret::redact_url(unquoted);
            if shown != unquoted {
                out.push((unquoted.to_owned(), shown));
            }
        }
    };
    for line in text.lines() {
        if let Some((k, v)) = line.split_once('=') {
            add(k.trim().trim_matches('"'), v);
        }
    }
    for (var, value) in overrides {
        add(var.rsplit("__").next().unwrap_or_default(), value);
    }
    out.retain(|(s, _)| !s.is_empty());
    // Longest first, so that a URL is masked before a part of it.
    out.sort_by_key(|(s, _)| std::cmp::Reverse(s.len()));
    out
}

/// `msg` with every secret replaced by what to show instead.
fn scrub(msg: &str, secrets: &[(String, String)]) -> String {
    let mut msg = msg.to_owned();
    for (s, shown) in secrets {
        msg = msg.replace(s.as_str(), shown);
    }
    msg
}

/// Adds "did you mean" to serde's unknown-field errors.
fn with_hint(msg: &str) -> String {
    let Some(rest) = msg.split("unknown field `").nth(1) else { return msg.to_owned() };
    let Some(field) = rest.split('`').next() else { return msg.to_owned() };
    let expected: Vec<&str> = msg.split("expected one of ").nth(1).map_or_else(Vec::new, |s| {
        s.split(',').map(|p| p.trim().trim_matches(|c| c == '`' || c == '\n' || c == ' ')).collect()
    });
    match crate::suggest::nearest(field, expected.iter().copied()) {
        Some(n) => format!("{}\nhint: did you mean `{n}`?", msg.trim_end()),
        None => msg.to_owned(),
    }
}

/// The key path on 1-based line `line` of `text`: `session.drift` for `drift = ...` under
/// `[session]`, or the table of a `[table]` header; `None` for a blank or comment line.
fn key_at(text: &str, line: usize) -> Option<String> {
    let mut current = String::new();
    for (i, l) in text.lines().enumerate().take(line) {
        let l = l.trim();
        if let Some(h) = l.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            current = h.trim().replace(['"', ' '], "");
            if i + 1 == line {
                return Some(current);
            }
        } else if i + 1 == line {
            let key = l
                .split('=')
                .next()
                .map(|k| k.trim().trim_matches('"'))
                .filter(|k| !k.is_empty() && !k.starts_with('#'))?;
            return Some(if current.is_empty() { key.to_owned() } else { format!("{current}.{key}") });
        }
    }
    None
}
