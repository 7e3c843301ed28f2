//! The `[dashboard]` table of `simba.toml` (compiled with or without the `dashboard`
//! feature, so that a configuration asking for it without the feature gets a clear error):
//!
//! ```toml
//! [dashboard]
//! listen = "127.0.0.1:9465"                 # an IP address and a port; nothing listens without it
//! actions = true                            # POST actions (default: false, read-only)
//! token_file = "/etc/simba/dashboard.token" # required with actions = true
//! allowed_hosts = ["simba.example.com"]     # Host names accepted besides IP literals and localhost
//!                                           # (SIMBA_DASHBOARD__ALLOWED_HOSTS=a.example.com,b.example.com)
//! ```
//!
//! `allowed_hosts` is for an ingress or a proxy that passes its own host name: by default only
//! an IP literal or `localhost` is accepted in the `Host` header, so that a hostile site whose
//! name resolves to this address (DNS rebinding) cannot read the pages (rule O3).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The shortest token `token_file` may hold: 16 characters (e.g. `openssl rand -hex 16` gives 32).
pub const MIN_TOKEN_LEN: usize = 16;

/// The `[dashboard]` table as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DashboardTable {
    listen: Option<Listen>,
    actions: Option<bool>,
    token_file: Option<PathBuf>,
    allowed_hosts: Option<Hosts>,
}

/// `allowed_hosts` as written: a list in the file, or one text of comma-separated names from
/// an environment override (`SIMBA_DASHBOARD__ALLOWED_HOSTS=a.example.com,b.example.com`),
/// which arrives as a string.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Hosts {
    List(Vec<String>),
    Text(String),
}

impl Hosts {
    fn names(self) -> Vec<String> {
        match self {
            Hosts::List(names) => names,
            Hosts::Text(text) => text.split(',').map(|n| n.trim().to_owned()).collect(),
        }
    }
}

/// `listen` as written: a port alone (`listen = 9465`, or `SIMBA_DASHBOARD__LISTEN=9465`)
/// is read too, to be refused with a clear message rather than a type error.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Listen {
    Text(String),
    Port(i64),
}

/// Where and how the dashboard is served (ADR 0010): from `[dashboard]` in `simba.toml`, or
/// built with [`DashboardConfig::new`] and [`DashboardConfig::with_actions`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DashboardConfig {
    /// The address to listen on: always an explicit IP address and port.
    pub listen: SocketAddr,
    /// The token that authorises actions (`POST`), when `actions = true`; `None`: read-only.
    pub actions: Option<ActionToken>,
    /// Host names accepted in the `Host` header besides IP literals and `localhost` (lowercase,
    /// without port); empty by default, which refuses every name (DNS rebinding).
    pub allowed_hosts: Vec<String>,
}

impl DashboardConfig {
    /// A read-only dashboard on `listen`.
    pub fn new(listen: SocketAddr) -> Self {
        DashboardConfig { listen, actions: None, allowed_hosts: Vec::new() }
    }

    /// The same, also accepting these host names (an ingress's); each is checked as
    /// `[dashboard] allowed_hosts` is.
    pub fn with_allowed_hosts<I: IntoIterator<Item = S>, S: AsRef<str>>(mut self, hosts: I) -> Result<Self, String> {
        self.allowed_hosts = hosts.into_iter().map(|h| check_host(h.as_ref())).collect::<Result<_, _>>()?;
        Ok(self)
    }

    /// The same, with actions enabled and authorised by `token`.
    #[must_use]
    pub fn with_actions(mut self, token: ActionToken) -> Self {
        self.actions = Some(token);
        self
    }
}

/// The secret that a request must carry (header `Authorization: Bearer TOKEN`) for the
/// dashboard to act. Its `Debug` output masks it.
#[derive(Clone, PartialEq, Eq)]
pub struct ActionToken(String);

impl ActionToken {
    /// A token from its text: at least [`MIN_TOKEN_LEN`] visible ASCII characters, no spaces.
    pub fn new(token: impl Into<String>) -> Result<Self, String> {
        let token = token.into();
        if token.len() < MIN_TOKEN_LEN {
            return Err(format!(
                "the token is {} characters long: use at least {MIN_TOKEN_LEN} (e.g. `openssl rand -hex 16`)",
                token.len()
            ));
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("the token holds spaces or non-ASCII characters: use visible ASCII only (e.g. hex)".into());
        }
        Ok(ActionToken(token))
    }

    /// Reads a token file: the token on its first line (a final newline is ignored).
    pub fn read_file(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            format!("cannot read {}: {e} (give a readable file that holds only the token)", path.display())
        })?;
        let token = text.strip_suffix('\n').map(|t| t.strip_suffix('\r').unwrap_or(t)).unwrap_or(&text);
        ActionToken::new(token).map_err(|m| format!("{}: {m}", path.display()))
    }

    #[cfg_attr(not(feature = "dashboard"), allow(dead_code))]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl std::fmt::Debug for ActionToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ActionToken(***)")
    }
}

/// Checks one allowed host name: a DNS name (letters, digits, `-`, `.`), without scheme, port,
/// path or wildcard, returned lowercase.
pub(crate) fn check_host(name: &str) -> Result<String, String> {
    let host = name.trim();
    let hint = if host.is_empty() {
        "an empty name: write a host name such as \"simba.example.com\""
    } else if host.contains("://") || host.contains('/') {
        "write the host name alone, without scheme or path (e.g. \"simba.example.com\")"
    } else if host.contains(':') {
        "write the host name without a port (any port is accepted; IP literals always are)"
    } else if host.contains('*') {
        "wildcards are not accepted: list each host name"
    } else if !host.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.') {
        "a host name holds only letters, digits, `-` and `.`"
    } else {
        return Ok(host.to_ascii_lowercase());
    };
    Err(format!("allowed host {name:?}: {hint}"))
}

/// Parses a listen address: an IP address and a port (`127.0.0.1:9465`, `[::1]:9465`). A bare
/// port or a host name is refused, so that the operator says which interface is exposed.
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    let s = s.trim();
    if let Ok(addr) = s.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let hint = if s.parse::<u16>().is_ok() || s.strip_prefix(':').is_some_and(|p| p.parse::<u16>().is_ok()) {
        format!(
            "a bare port is not enough: say which interface to listen on, e.g. \"127.0.0.1:{}\" (this machine only)",
            s.trim_start_matches(':')
        )
    } else if s.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()) {
        "write an IP address, not a host name, e.g. \"127.0.0.1:9465\" or \"[::1]:9465\"".to_owned()
    } else {
        "write an IP address and a port, e.g. \"127.0.0.1:9465\"".to_owned()
    };
    Err(format!("invalid address {s:?}: {hint}"))
}

/// Checks the table. An error names the key of `[dashboard]` at fault (`listen`, `actions`,
/// `token_file`) and the reason, so that the caller reports it with the key's line in the file
/// or the environment variable that set it.
pub(crate) fn resolve(table: DashboardTable) -> Result<Option<DashboardConfig>, (&'static str, String)> {
    let Some(listen) = table.listen else {
        if table.actions.is_some() || table.token_file.is_some() || table.allowed_hosts.is_some() {
            let key = if table.actions.is_some() {
                "actions"
            } else if table.token_file.is_some() {
                "token_file"
            } else {
                "allowed_hosts"
            };
            return Err((
                key,
                "the dashboard is off without [dashboard] listen (add listen = \"127.0.0.1:9465\", or remove it)"
                    .into(),
            ));
        }
        return Ok(None);
    };
    let listen = match listen {
        Listen::Text(s) => s,
        Listen::Port(p) => p.to_string(),
    };
    let listen = parse_listen(&listen).map_err(|m| ("listen", m))?;
    if !cfg!(feature = "dashboard") {
        return Err((
            "listen",
            "serving the dashboard needs simba's cargo feature `dashboard` (or remove [dashboard])".into(),
        ));
    }
    let hosts = table.allowed_hosts.map(Hosts::names).unwrap_or_default();
    let config = DashboardConfig::new(listen).with_allowed_hosts(&hosts).map_err(|m| ("allowed_hosts", m))?;
    match (table.actions.unwrap_or(false), table.token_file) {
        (false, None) => Ok(Some(config)),
        (false, Some(_)) => {
            Err(("token_file", "a token is only used with actions = true (add it, or remove token_file)".into()))
        }
        (true, None) => Err((
            "actions",
            "actions need a token: set token_file to a file that holds one (e.g. `openssl rand -hex 16 > \
             dashboard.token`)"
                .into(),
        )),
        (true, Some(path)) => {
            let token = ActionToken::read_file(&path).map_err(|m| ("token_file", m))?;
            Ok(Some(config.with_actions(token)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(listen: Option<&str>, actions: Option<bool>, token_file: Option<&Path>) -> DashboardTable {
        DashboardTable {
            listen: listen.map(|l| Listen::Text(l.to_owned())),
            actions,
            token_file: token_file.map(Path::to_path_buf),
            allowed_hosts: None,
        }
    }

    /// The table checked, an error written as the runtime's configuration writes it.
    fn check(t: DashboardTable) -> Result<Option<DashboardConfig>, String> {
        resolve(t).map_err(|(key, reason)| format!("[dashboard] {key}: {reason}"))
    }

    #[test]
    fn listen_is_an_explicit_address() {
        assert_eq!(parse_listen("127.0.0.1:9465"), Ok(([127, 0, 0, 1], 9465).into()));
        assert_eq!(parse_listen("[::1]:9465").map(|a| a.port()), Ok(9465));
        let e = parse_listen("9465").expect_err("bare port");
        assert!(e.contains("bare port") && e.contains("\"127.0.0.1:9465\""), "{e}");
        let e = parse_listen(":9465").expect_err("colon port");
        assert!(e.contains("bare port") && e.contains("\"127.0.0.1:9465\""), "{e}");
        let e = parse_listen("localhost:9465").expect_err("host name");
        assert!(e.contains("not a host name"), "{e}");
        let e = parse_listen("nonsense").expect_err("nonsense");
        assert!(e.contains("IP address and a port"), "{e}");
    }

    #[test]
    fn nothing_listens_unless_configured() {
        assert_eq!(check(table(None, None, None)), Ok(None));
        let port = DashboardTable { listen: Some(Listen::Port(9465)), ..DashboardTable::default() };
        let e = check(port).expect_err("a number");
        assert!(e.contains("[dashboard] listen") && e.contains("bare port"), "{e}");
        let e = check(table(None, Some(true), None)).expect_err("actions without listen");
        assert!(e.contains("[dashboard] actions") && e.contains("listen"), "{e}");
    }

    #[test]
    fn actions_need_a_token_file() {
        if !cfg!(feature = "dashboard") {
            let e = check(table(Some("127.0.0.1:1"), None, None)).expect_err("feature");
            assert!(e.contains("cargo feature `dashboard`"), "{e}");
            return;
        }
        let c = check(table(Some("127.0.0.1:1"), None, None)).expect("read-only").expect("on");
        assert_eq!(c.actions, None);
        let e = check(table(Some("127.0.0.1:1"), Some(true), None)).expect_err("no token");
        assert!(e.contains("[dashboard] actions: actions need a token"), "{e}");
        let dir = std::env::temp_dir().join(format!("simba-dash-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let short = dir.join("short");
        std::fs::write(&short, "abc\n").expect("write");
        let e = check(table(Some("127.0.0.1:1"), Some(true), Some(&short))).expect_err("short");
        assert!(e.contains("[dashboard] token_file") && e.contains("at least 16"), "{e}");
        let good = dir.join("good");
        std::fs::write(&good, "0123456789abcdef0123\n").expect("write");
        let c = check(table(Some("127.0.0.1:1"), Some(true), Some(&good))).expect("ok").expect("on");
        assert_eq!(c.actions.as_ref().map(ActionToken::as_bytes), Some(&b"0123456789abcdef0123"[..]));
        assert_eq!(format!("{:?}", c.actions), "Some(ActionToken(***))");
        let e = check(table(Some("127.0.0.1:1"), Some(false), Some(&good))).expect_err("unused");
        assert!(e.contains("only used with actions = true"), "{e}");
        let e = check(table(Some("127.0.0.1:1"), Some(true), Some(&dir.join("missing")))).expect_err("gone");
        assert!(e.contains("cannot read") && e.contains("missing"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn o3_allowed_hosts_are_plain_names() {
        assert_eq!(check_host(" Simba.Example.com "), Ok("simba.example.com".to_owned()));
        for (bad, says) in [
            ("", "empty"),
            ("https://simba.example.com", "without scheme"),
            ("simba.example.com:443", "without a port"),
            ("*.example.com", "wildcards"),
            ("simba example", "only letters"),
        ] {
            let e = check_host(bad).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
        if cfg!(feature = "dashboard") {
            let mut t = table(Some("127.0.0.1:1"), None, None);
            t.allowed_hosts = Some(Hosts::List(vec!["simba.example.com".into()]));
            let c = check(t).expect("ok").expect("on");
            assert_eq!(c.allowed_hosts, ["simba.example.com"]);
            let mut t = table(Some("127.0.0.1:1"), None, None);
            t.allowed_hosts = Some(Hosts::Text("a.example.com, B.example.com".into()));
            let c = check(t).expect("an environment override").expect("on");
            assert_eq!(c.allowed_hosts, ["a.example.com", "b.example.com"]);
            let mut t = table(Some("127.0.0.1:1"), None, None);
            t.allowed_hosts = Some(Hosts::List(vec!["simba.example.com:80".into()]));
            let e = check(t).expect_err("port");
            assert!(e.starts_with("[dashboard] allowed_hosts: ") && e.contains("without a port"), "{e}");
        }
        let mut t = table(None, None, None);
        t.allowed_hosts = Some(Hosts::List(vec!["simba.example.com".into()]));
        let e = check(t).expect_err("no listen");
        assert!(e.contains("[dashboard] allowed_hosts") && e.contains("listen"), "{e}");
    }
}
