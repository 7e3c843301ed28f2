//! Backend URLs and redaction: for any scheme, user, password, host, path and query, a
//! password given never appears in any output: not in `redact`'s output, and not in the
//! loader's errors, its `Debug` or the redacted URL of the configuration it loads, wherever the
//! password is given (the URL's userinfo raw or percent-encoded, a secret query parameter,
//! `[backend] password`, `SIMBA_BACKEND__PASSWORD`) and whether the URL comes from the file or
//! from `SIMBA_BACKEND__URL`, with a well-formed file or one broken around the password.
//!
//! Backends parse their URLs in private functions reached only through `connect`, which then
//! dials the network: the loader (which merges `[backend]` credentials into the URL) is the
//! pure parser here.
//!
//! The password may occur by chance in the rest of the input (a password `127` and a host
//! `127.0.0.1`): an output must show it no more often than the output for the same input with
//! another password (an empty one for `redact`; for the loader one of the same shape, as the
//! loader masks the password's text wherever it occurs in a message).

#![no_main]

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use simba::RuntimeConfig;
use simba::runtime::redact;
use simba_fuzz::{SOURCE, percent_encode, reads_special_files, toml_basic};

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Scheme {
    Postgres,
    Postgresql,
    Mysql,
    Mariadb,
    Redis,
    Rediss,
    Zk,
    Etcd,
    Sqlite,
    Memory,
}

impl Scheme {
    fn name(self) -> &'static str {
        match self {
            Scheme::Postgres => "postgres",
            Scheme::Postgresql => "postgresql",
            Scheme::Mysql => "mysql",
            Scheme::Mariadb => "mariadb",
            Scheme::Redis => "redis",
            Scheme::Rediss => "rediss",
            Scheme::Zk => "zk",
            Scheme::Etcd => "etcd",
            Scheme::Sqlite => "sqlite",
            Scheme::Memory => "memory",
        }
    }
}

/// Query parameters whose value is a secret.
const SECRET_KEYS: &[&str] = &[
    "password",
    "sslpassword",
    "Password",
    "passwd",
    "pwd",
    "pass",
    "auth",
    "token",
    "secret",
    "client_secret",
    "apikey",
    "api_key",
    "access_token",
    "credential",
    "digest",
    "userinfo",
];

/// Where the password is given.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Place {
    /// `scheme://user:PASSWORD@host`, raw or percent-encoded.
    Userinfo { raw: bool },
    /// `?KEY=PASSWORD` (percent-encoded), KEY a secret parameter, at position `at`.
    Query { key: u8, at: u8 },
    /// `[backend] password = "PASSWORD"`.
    File,
    /// `SIMBA_BACKEND__PASSWORD=PASSWORD`.
    Env,
}

/// How the file around the password may be broken (so that the loader's error messages, some
/// of which quote the offending line, are reached).
#[derive(Arbitrary, Debug, Clone)]
enum Breakage {
    None,
    /// Text after the URL's value on its line (a TOML syntax error, or a comment).
    AfterUrl(String),
    /// Text after the password's value on its line (`[backend] password` only).
    AfterPassword(String),
    /// An extra line in `[backend]`.
    Line(String),
    /// A bad value in a later section.
    BadSession,
    /// A `[backend.tls]` table (which does not apply to every scheme).
    Tls,
    /// The same key twice.
    DuplicateUrl,
}

#[derive(Arbitrary, Debug)]
struct Input {
    scheme: Scheme,
    user: String,
    password: String,
    host: String,
    path: String,
    query: Vec<(String, String)>,
    fragment: Option<String>,
    place: Place,
    /// `[backend] user = "..."`.
    file_user: Option<String>,
    /// The URL from `SIMBA_BACKEND__URL` instead of the file.
    url_from_env: bool,
    /// TOML literal strings (`'...'`) where possible.
    literal: bool,
    breakage: Breakage,
}

fn toml_string(s: &str, literal: bool) -> String {
    if literal && !s.contains(['\'', '\n', '\r']) && !s.chars().any(char::is_control) {
        format!("'{s}'")
    } else {
        toml_basic(s)
    }
}

impl Input {
    /// The URL, with `password` where `place` puts it into the URL.
    fn url(&self, password: &str) -> String {
        let user = percent_encode(&self.user);
        let userinfo = match self.place {
            Place::Userinfo { raw: true } => format!("{user}:{password}@"),
            Place::Userinfo { raw: false } => format!("{user}:{}@", percent_encode(password)),
            _ if user.is_empty() => String::new(),
            _ => format!("{user}@"),
        };
        let host: String = self
            .host
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'))
            .collect();
        let path: String = self.path.chars().filter(|c| !matches!(c, '?' | '#')).collect();
        let path = if path.is_empty() || path.starts_with('/') { path } else { format!("/{path}") };
        let mut params: Vec<String> = self
            .query
            .iter()
            .map(|(k, v)| {
                let k: String = k.chars().filter(|c| !matches!(c, '&' | '=' | '#')).collect();
                format!("{k}={}", percent_encode(v))
            })
            .collect();
        if let Place::Query { key, at } = self.place {
            let key = SECRET_KEYS[usize::from(key) % SECRET_KEYS.len()];
            let at = usize::from(at) % (params.len() + 1);
            params.insert(at, format!("{key}={}", percent_encode(password)));
        }
        let query = if params.is_empty() { String::new() } else { format!("?{}", params.join("&")) };
        let fragment = self.fragment.as_deref().map(|f| format!("#{f}")).unwrap_or_default();
        format!("{}://{userinfo}{host}{path}{query}{fragment}", self.scheme.name())
    }

    /// The file and the overrides, with `password` where `place` puts it.
    fn config(&self, password: &str) -> (String, Vec<(String, String)>) {
        let url = self.url(password);
        let mut overrides = Vec::new();
        let mut text = String::from("[backend]\n");
        let mut url_line = format!("url = {}", toml_string(&url, self.literal));
        if let Breakage::AfterUrl(s) = &self.breakage {
            url_line.push_str(s);
        }
        if self.url_from_env {
            overrides.push(("SIMBA_BACKEND__URL".to_owned(), url));
        } else {
            text.push_str(&url_line);
            text.push('\n');
            if let Breakage::DuplicateUrl = self.breakage {
                text.push_str(&url_line);
                text.push('\n');
            }
        }
        if let Some(u) = &self.file_user {
            text.push_str(&format!("user = {}\n", toml_string(u, self.literal)));
        }
        match self.place {
            Place::File => {
                text.push_str(&format!("password = {}", toml_string(password, self.literal)));
                if let Breakage::AfterPassword(s) = &self.breakage {
                    text.push_str(s);
                }
                text.push('\n');
            }
            Place::Env => overrides.push(("SIMBA_BACKEND__PASSWORD".to_owned(), password.to_owned())),
            _ => {}
        }
        match &self.breakage {
            Breakage::Line(s) => {
                text.push_str(s);
                text.push('\n');
            }
            Breakage::BadSession => text.push_str("[session]\nlease_duration = \"soon\"\n"),
            Breakage::Tls => text.push_str("[backend.tls]\nca_file = \"/nonexistent/ca.pem\"\n"),
            _ => {}
        }
        (text, overrides)
    }
}

/// Everything the loader lets a user see for this file and these overrides.
fn loader_output(text: &str, overrides: Vec<(String, String)>) -> String {
    match RuntimeConfig::from_toml_str(text, SOURCE, overrides) {
        Err(e) => format!("{e}\n{e:?}"),
        Ok(cfg) => format!("{cfg:?}\n{}", redact(&cfg.backend_url)),
    }
}

/// `out` shows `password` (in any of its written forms) more often than `without` does.
fn shows(out: &str, without: &str, forms: &[&str]) -> Option<String> {
    forms
        .iter()
        .filter(|f| !f.is_empty())
        .find(|f| out.matches(**f).count() > without.matches(**f).count())
        .map(|f| (*f).to_owned())
}

/// A password of the same shape as `password` (its ASCII letters and digits replaced by a
/// letter it does not hold, the rest kept, so that the URL and the file parse the same way),
/// that masking cannot confuse with it; `None` if it has no letter or digit to replace.
fn stand_in(password: &str) -> Option<String> {
    let filler = ['Q', 'Z', 'X', 'J', 'K', 'V', 'W', 'Y'].into_iter().find(|c| !password.contains(*c))?;
    password
        .contains(|c: char| c.is_ascii_alphanumeric())
        .then(|| password.chars().map(|c| if c.is_ascii_alphanumeric() { filler } else { c }).collect())
}

fuzz_target!(|input: Input| {
    let password = input.password.as_str();
    // An empty password is not given; one with `*` may be made by the mask itself (`***`).
    if password.is_empty() || password.contains('*') {
        return;
    }
    let encoded = percent_encode(password);
    let in_toml = toml_string(password, input.literal);
    let in_toml = in_toml.get(1..in_toml.len() - 1).unwrap_or_default();
    let forms = [password, encoded.as_str(), in_toml];

    // `redact` on the URL itself.
    if matches!(input.place, Place::Userinfo { .. } | Place::Query { .. }) {
        let url = input.url(password);
        let without = input.url("");
        let out = redact(&url);
        if let Some(form) = shows(&out, &without, &forms) {
            panic!("redact({url:?}) = {out:?} shows the password as {form:?}");
        }
    }

    // The loader: its errors, `Debug` and redacted URL.
    let (text, overrides) = input.config(password);
    if reads_special_files(&text) {
        return;
    }
    let Some(other) = stand_in(password) else { return };
    let (text_without, overrides_without) = input.config(&other);
    let out = loader_output(&text, overrides.clone());
    let without = loader_output(&text_without, overrides_without);
    if let Some(form) = shows(&out, &without, &forms) {
        panic!(
            "the loader shows the password as {form:?}\n--- file:\n{text}\n--- overrides: {overrides:?}\n--- output:\n{out}\n--- without the password:\n{without}"
        );
    }
});
