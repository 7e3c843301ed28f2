//! An alert webhook's URL (rule R13): checked where `simba.toml` is read, used by the webhook's
//! delivery task (`webhook.rs`, feature `webhook`).

use std::fmt;

/// An alert webhook's URL: `http` or `https`, with a host. Its path and query often hold the
/// receiver's token (a chat webhook's URL is its credential), so `Display` and `Debug` show the
/// scheme and the host alone.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookUrl {
    text: String,
    #[cfg(feature = "webhook")]
    uri: hyper::Uri,
}

impl WebhookUrl {
    /// `text` as a webhook URL; `Err` says what is wrong and what to write.
    pub fn parse(text: &str) -> Result<Self, String> {
        const WRITE: &str = "write e.g. \"https://hooks.example.com/simba\"";
        let text = text.trim();
        let Some((scheme, rest)) = text.split_once("://") else {
            return Err(format!("not a URL: {WRITE}"));
        };
        if scheme != "http" && scheme != "https" {
            return Err(format!("the scheme `{scheme}` is not supported: use https (or http), {WRITE}"));
        }
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        if authority.is_empty() {
            return Err(format!("the URL has no host: {WRITE}"));
        }
        if authority.contains('@') {
            return Err("credentials in the URL's host part are not sent: put the token in the path or query the \
                        receiver gives you"
                .to_owned());
        }
        if text.contains(char::is_whitespace) {
            return Err(format!("the URL contains white space: {WRITE}"));
        }
        #[cfg(feature = "webhook")]
        let uri: hyper::Uri = text.parse().map_err(|e| format!("not a valid URL ({e}): {WRITE}"))?;
        Ok(WebhookUrl {
            text: text.to_owned(),
            #[cfg(feature = "webhook")]
            uri,
        })
    }

    /// The whole URL, path and query included (it may hold a token: do not log it).
    pub fn expose(&self) -> &str {
        &self.text
    }

    /// The parsed URL.
    #[cfg(feature = "webhook")]
    pub(crate) fn uri(&self) -> &hyper::Uri {
        &self.uri
    }

    /// Whether its host is this machine (a loopback name or address).
    pub fn is_local(&self) -> bool {
        let host = self.host();
        let host = host.trim_start_matches('[').trim_end_matches(']');
        host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }

    fn scheme(&self) -> &str {
        self.text.split_once("://").map_or("", |(s, _)| s)
    }

    fn host(&self) -> &str {
        let rest = self.text.split_once("://").map_or("", |(_, r)| r);
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        match authority.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or(""),
            None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
        }
    }
}

impl fmt::Display for WebhookUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}/…", self.scheme(), self.host())
    }
}

impl fmt::Debug for WebhookUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WebhookUrl({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// R13: a webhook URL is http(s) with a host; what is shown hides its path and query.
    #[test]
    fn r13_webhook_urls_are_checked_and_shown_without_their_token() {
        let u = WebhookUrl::parse("https://hooks.example.com:8443/services/T0KEN?x=1").expect("valid");
        assert_eq!(u.to_string(), "https://hooks.example.com/…");
        assert!(!format!("{u:?}").contains("T0KEN"));
        assert_eq!(u.expose(), "https://hooks.example.com:8443/services/T0KEN?x=1");
        assert!(!u.is_local());
        assert!(WebhookUrl::parse("http://127.0.0.1:9000/hook").expect("valid").is_local());
        assert!(WebhookUrl::parse("http://[::1]:9000/hook").expect("valid").is_local());
        for (bad, says) in [
            ("hooks.example.com/simba", "not a URL"),
            ("ftp://hooks.example.com/simba", "the scheme `ftp` is not supported"),
            ("https:///simba", "no host"),
            ("https://user:secret@hooks.example.com/", "credentials"),
            ("https://hooks.example.com/a b", "white space"),
        ] {
            let e = WebhookUrl::parse(bad).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
            assert!(!e.contains("secret"), "{e}");
        }
    }
}
