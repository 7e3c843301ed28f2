//! The configuration's tests: the file, the overrides and the errors, through `from_toml_str`.

use super::*;

fn parse(text: &str) -> Result<RuntimeConfig, Error> {
    RuntimeConfig::from_toml_str(text, "simba.toml", Vec::new())
}

/// `examples/simba.toml` documents every key with its default: it parses, and the values
/// it shows are the defaults. The backend has none (J4): the file names the single-host trial.
#[test]
fn the_example_file_holds_the_defaults() {
    let c = parse(include_str!("../../../../examples/simba.toml")).expect("the example parses");
    let d = RuntimeConfig::default();
    assert_eq!(c.start_timeout, d.start_timeout);
    assert_eq!(c.session, d.session);
    assert_eq!(c.schedule_partitions, d.schedule_partitions);
    assert_eq!((c.backend_url.as_str(), d.backend_url.as_str()), ("sqlite://simba.db", ""));
}

/// B3: `remove_idle_leases_after` is a day by default, `"never"` turns the removal off, and
/// anything else that is not a duration is refused naming the key.
#[test]
fn b3_remove_idle_leases_after_is_a_duration_or_never() {
    let with =
        |v: &str| parse(&format!("[backend]\nurl = \"sqlite://x.db\"\n[session]\nremove_idle_leases_after = {v}\n"));
    let d = parse("[backend]\nurl = \"sqlite://x.db\"\n").expect("valid");
    assert_eq!(d.session.remove_idle_leases_after(), Some(crate::DEFAULT_REMOVE_IDLE_LEASES_AFTER));
    assert_eq!(with("\"never\"").expect("valid").session.remove_idle_leases_after(), None);
    assert_eq!(with("\"90s\"").expect("valid").session.remove_idle_leases_after(), Some(Duration::from_secs(90)));
    let e = with("\"soon\"").expect_err("not a duration").to_string();
    assert!(e.contains("remove_idle_leases_after") && e.contains("invalid duration"), "{e}");
}

/// J4: no file and no `SIMBA_BACKEND__URL` name no backend, and that is refused: the error
/// says what to create, the variables, and the line for a trial on SQLite. A file without
/// `[backend] url` is refused the same way, naming the file and the key.
#[test]
fn j4_no_backend_is_refused_with_what_to_write() {
    let c = RuntimeConfig::from_toml_str("", NO_FILE, Vec::new()).expect("no file");
    assert_eq!((c.backend_url.as_str(), c.session), ("", SimbaConfig::default()));
    let e = c.require_backend().expect_err("no backend");
    let Error::InvalidConfig(ce) = &e else { panic!("{e}") };
    assert_eq!((ce.file(), ce.key()), (None, Some("backend.url")), "{e}");
    let text = ce.to_string();
    assert!(text.starts_with("no backend configured: "), "{text}");
    for part in ["SIMBA_CONFIG", "./simba.toml", "SIMBA_BACKEND__URL", "[backend]", "url = \"sqlite://simba.db\""] {
        assert!(text.contains(part), "the message names {part}: {text}");
    }
    let e = parse("[session]\nlease_duration = \"15s\"\n").expect("valid").require_backend().expect_err("no url");
    let Error::InvalidConfig(ce) = &e else { panic!("{e}") };
    assert_eq!((ce.file(), ce.key()), (Some("simba.toml"), Some("backend.url")), "{e}");
    assert!(ce.to_string().starts_with("simba.toml: [backend] url: missing: "), "{e}");
    assert!(e.to_string().contains("url = \"sqlite://simba.db\""), "{e}");
    assert!(RuntimeConfig::default().require_backend().is_err());
}

/// J4: the backend named by `[backend] url` or by `SIMBA_BACKEND__URL` alone is enough.
#[test]
fn j4_a_url_from_the_file_or_the_environment_names_the_backend() {
    let c = parse("[backend]\nurl = \"sqlite://simba.db\"\n").expect("valid");
    assert_eq!(c.backend_url, "sqlite://simba.db");
    assert!(c.require_backend().is_ok());
    let over = vec![("SIMBA_BACKEND__URL".to_owned(), "postgres://db/simba".to_owned())];
    let c = RuntimeConfig::from_toml_str("", NO_FILE, over).expect("valid");
    assert_eq!(c.backend_url, "postgres://db/simba");
    assert!(c.require_backend().is_ok());
}

/// Credentials or TLS files without a URL are for a server the file does not name: an error
/// at `[backend] url`, naming the key that was set.
#[test]
fn backend_credentials_without_a_url_are_an_error() {
    for (text, key) in [
        ("[backend]\nuser = \"simba\"\n", "user"),
        ("[backend]\npassword_file = \"/run/secrets/db\"\n", "password_file"),
        ("[backend.tls]\nca_file = \"/etc/ca.pem\"\n", "tls"),
    ] {
        let e = parse(text).expect_err(text);
        let Error::InvalidConfig(ce) = &e else { panic!("{e}") };
        assert_eq!(ce.key(), Some("backend.url"), "{e}");
        assert!(ce.reason().contains(&format!("[backend] {key} is set")), "{e}");
    }
}

/// C2/J7: every table and key.
#[test]
fn c2_j7_full_file() {
    let c = parse(
        r#"
[backend]
url = "postgres://db/simba"

[session]
lease_duration = "9s"
renew_interval = "3s"
drift = 0.02
margin = "100ms"
retry_jitter = "1s"
min_backoff = "200ms"
remove_idle_leases_after = "2h"

[jobs.report]
cron = "0 */10 * * * *"
time_zone = "Europe/Berlin"
misfire = "run_once"

[jobs.billing]
partitions = 32
enabled = false

[jobs.tick]
fixed_rate = "250ms"
"#,
    )
    .expect("valid");
    assert_eq!(c.backend_url, "postgres://db/simba");
    assert_eq!(c.session.lease_duration(), Duration::from_secs(9));
    assert_eq!(c.session.drift(), 0.02);
    assert_eq!(c.session.min_backoff(), Duration::from_millis(200));
    assert_eq!(c.session.remove_idle_leases_after(), Some(Duration::from_secs(2 * 3600)));
    let r = &c.jobs["report"];
    assert_eq!(r.schedule, Some(Schedule::cron_in("0 */10 * * * *", "Europe/Berlin")));
    assert_eq!(r.misfire, Some(Misfire::RunOnce));
    assert_eq!(c.jobs["billing"].partitions, Some(32));
    assert_eq!(c.jobs["billing"].enabled, Some(false));
    assert_eq!(c.jobs["tick"].schedule, Some(Schedule::FixedRate(Duration::from_millis(250))));
}

/// C2: environment overrides, typed as TOML reads them.
#[test]
fn c2_env_overrides() {
    let c = RuntimeConfig::from_toml_str(
        "[session]\nlease_duration = \"15s\"\n",
        "simba.toml",
        vec![
            ("SIMBA_SESSION__LEASE_DURATION".into(), "10s".into()),
            ("SIMBA_SESSION__DRIFT".into(), "0.05".into()),
            ("SIMBA_JOBS__REPORT__ENABLED".into(), "false".into()),
            ("SIMBA_BACKEND__URL".into(), "memory://".into()),
        ],
    )
    .expect("valid");
    assert_eq!(c.session.lease_duration(), Duration::from_secs(10));
    assert_eq!(c.session.drift(), 0.05);
    assert_eq!(c.jobs["report"].enabled, Some(false));
    assert_eq!(c.backend_url, "memory://");
    let e = RuntimeConfig::from_toml_str("", "simba.toml", vec![("SIMBA_SESION__X".into(), "1".into())])
        .expect_err("bad table");
    assert!(e.to_string().contains("did you mean SIMBA_SESSION__"), "{e}");
    for short in ["", "SIMBA", "é", "SIMB\u{e9}_X"] {
        let e = RuntimeConfig::from_toml_str("", "simba.toml", vec![(short.into(), "1".into())])
            .expect_err("not an override name");
        assert!(e.to_string().contains("SIMBA_<TABLE>__<KEY>"), "{e}");
    }
}

/// ADR 0007: `[metrics] listen` is an address; nothing listens without it.
#[test]
fn metrics_listen() {
    assert_eq!(parse("").expect("empty").metrics_listen, None);
    let r = parse("[metrics]\nlisten = \"127.0.0.1:9464\"\n");
    if cfg!(feature = "prometheus") {
        assert_eq!(r.expect("valid").metrics_listen, Some(([127, 0, 0, 1], 9464).into()));
    } else {
        let e = r.expect_err("needs the feature").to_string();
        assert!(e.contains("cargo feature `prometheus`"), "{e}");
    }
    let e = parse("[metrics]\nlisten = \"localhost\"\n").expect_err("bad address").to_string();
    assert!(e.contains("line 2, [metrics] listen") && e.contains("127.0.0.1:9464"), "{e}");
    let e = parse("[metrics]\nlisen = \"127.0.0.1:1\"\n").expect_err("typo").to_string();
    assert!(e.contains("unknown field `lisen`") && e.contains("`listen`"), "{e}");
}

/// Rules O4, O5: `[metrics] lease_labels` and `idle_timeout`, their defaults, and bad values
/// with their line.
#[test]
fn o4_o5_lease_labels_and_idle_timeout_are_read() {
    use crate::metrics::{DEFAULT_IDLE_TIMEOUT, LeaseLabels, MetricsSettings};
    let d = parse("").expect("empty").metrics;
    assert_eq!(d, MetricsSettings::default());
    assert_eq!((d.lease_labels, d.idle_timeout), (LeaseLabels::Jobs, Some(DEFAULT_IDLE_TIMEOUT)));
    let m = parse("[metrics]\nlease_labels = \"all\"\nidle_timeout = \"10m\"\n").expect("valid").metrics;
    assert_eq!((m.lease_labels, m.idle_timeout), (LeaseLabels::All, Some(Duration::from_secs(600))));
    let m = parse("[metrics]\nlease_labels = \"none\"\nidle_timeout = \"off\"\n").expect("valid").metrics;
    assert_eq!((m.lease_labels, m.idle_timeout), (LeaseLabels::None, None));
    let e = parse("[metrics]\nlease_labels = \"some\"\n").expect_err("unknown").to_string();
    assert!(e.contains("line 2, [metrics] lease_labels") && e.contains("\"jobs\""), "{e}");
    let e = parse("[metrics]\n\nidle_timeout = \"0s\"\n").expect_err("zero").to_string();
    assert!(e.contains("line 3, [metrics] idle_timeout") && e.contains("\"off\""), "{e}");
    let e = parse("[metrics]\nidle_timeout = \"soon\"\n").expect_err("not a duration").to_string();
    assert!(e.contains("[metrics] idle_timeout") && e.contains("invalid duration"), "{e}");
}

/// `[jobs.NAME]` retry, backoff and timeout; bad values name file, line
/// and key.
#[test]
fn jobs_retry_backoff_timeout_keys() {
    let c = parse("[jobs.report]\nretry = 3\nbackoff = \"2s\"\ntimeout = \"30s\"\n").expect("valid");
    let r = &c.jobs["report"];
    assert_eq!((r.retry, r.backoff, r.timeout), (Some(3), Some(Duration::from_secs(2)), Some(Duration::from_secs(30))));
    let e = parse("[jobs.report]\nretry = 3\ntimeout = \"soon\"\n").expect_err("bad").to_string();
    assert!(e.contains("simba.toml") && e.contains("line 3, [jobs.report] timeout"), "{e}");
    let e = parse("[jobs.report]\nbackoff = \"0s\"\n").expect_err("zero").to_string();
    assert!(e.contains("line 2, [jobs.report] backoff") && e.contains("greater than zero"), "{e}");
    let e = parse("[jobs.report]\nretry = 1000\n").expect_err("many").to_string();
    assert!(e.contains("line 2, [jobs.report] retry") && e.contains("at most 100"), "{e}");
    let e = parse("[jobs.report]\nretry = -1\n").expect_err("negative").to_string();
    assert!(e.contains("retry"), "{e}");
}

/// Bad input: unknown keys name the nearest valid key, with the line.
#[test]
fn unknown_key_suggests() {
    let e = parse("[session]\nleese_duration = \"10s\"\n").expect_err("unknown key").to_string();
    assert!(e.contains("simba.toml"), "{e}");
    assert!(e.contains("leese_duration"), "{e}");
    assert!(e.contains("line 2"), "{e}");
    assert!(e.contains("did you mean `lease_duration`"), "{e}");
}

/// Bad input: wrong types and invalid values name the file, line and key.
#[test]
fn bad_values_name_file_line_key() {
    let e = parse("[session]\ndrift = \"high\"\n").expect_err("type").to_string();
    assert!(e.contains("simba.toml") && e.contains("line 2") && e.contains("drift"), "{e}");
    let e = parse("[session]\nlease_duration = \"soon\"\n").expect_err("duration").to_string();
    assert!(e.contains("line 2, [session] lease_duration"), "{e}");
    let e = parse("\n[jobs.report]\ncron = \"*/5 * * * *\"\n").expect_err("cron").to_string();
    assert!(e.contains("line 3, [jobs.report] cron") && e.contains("6 fields"), "{e}");
    let e = parse("[jobs.x]\ncron = \"* * * * * *\"\ntime_zone = \"Moon/Base\"\n").expect_err("tz").to_string();
    assert!(e.contains("[jobs.x] time_zone") && e.contains("IANA"), "{e}");
    let e = parse("[jobs.x]\npartitions = 0\n").expect_err("zero").to_string();
    assert!(e.contains("partitions must be at least 1"), "{e}");
    let e = parse("[session]\nlease_duration = \"10s\"\nrenew_interval = \"6s\"\n").expect_err("C1").to_string();
    assert!(e.contains("renew_interval * 2 <= lease_duration"), "{e}");
    let e = parse("[jobs.x]\ncron = \"* * * * * *\"\nfixed_rate = \"1s\"\n").expect_err("both").to_string();
    assert!(e.contains("not both"), "{e}");
    let e = parse("[jobs.x]\nmisfire = \"later\"\n").expect_err("misfire").to_string();
    assert!(e.contains("\"skip\" or \"run_once\""), "{e}");
}

/// `[backend] namespace` is read, overridden by
/// `SIMBA_BACKEND__NAMESPACE`, and a name that breaks the lease-name rules is refused
/// with the file, line and key, before any backend call (parsing makes none).
#[test]
fn issue12_6_backend_namespace_is_read_and_checked() {
    assert_eq!(parse("").expect("empty").namespace, None);
    let c = parse("[backend]\nurl = \"memory://\"\nnamespace = \"billing-svc\"\n").expect("valid");
    assert_eq!(c.namespace.as_ref().map(|n| n.as_str()), Some("billing-svc"));
    let c = RuntimeConfig::from_toml_str(
        "[backend]\nnamespace = \"billing-svc\"\n",
        "simba.toml",
        vec![("SIMBA_BACKEND__NAMESPACE".into(), "42".into())],
    )
    .expect("a numeric namespace from the environment");
    assert_eq!(c.namespace.as_ref().map(|n| n.as_str()), Some("42"));
    let e = parse("[backend]\nurl = \"memory://\"\nnamespace = \"billing/svc\"\n").expect_err("slash").to_string();
    assert!(
        e.contains("simba.toml: line 3, [backend] namespace: invalid namespace \"billing/svc\"")
            && e.contains("lease-name rules"),
        "{e}"
    );
    let e = parse("[backend]\nnamespace = 7.5\n").expect_err("float").to_string();
    assert!(e.contains("line 2, [backend] namespace: expected a string"), "{e}");
    let e = RuntimeConfig::from_toml_str("", "simba.toml", vec![("SIMBA_BACKEND__NAMESPACE".into(), "..".into())])
        .expect_err("dot dot")
        .to_string();
    assert!(e.contains("[backend] namespace: invalid namespace \"..\""), "{e}");
}

/// `[history] retention`: records kept per job; unset keeps the store's default; out of
/// range or not a number is an error naming the line and the range; the environment
/// overrides it.
#[test]
fn history_retention_is_read_and_checked() {
    assert_eq!(parse("").expect("empty").history_retention, None);
    let c = parse("[history]\nretention = 500\n").expect("valid");
    assert_eq!(c.history_retention, Some(500));
    for bad in ["0", "-3", "10001"] {
        let e = parse(&format!("[history]\nretention = {bad}\n")).expect_err(bad).to_string();
        assert!(e.contains("line 2, [history] retention") && e.contains("from 1 to 10000"), "{e}");
    }
    let e = parse("[history]\nretention = \"lots\"\n").expect_err("a string").to_string();
    assert!(e.contains("line 2") && e.contains("expected i64"), "{e}");
    let e = parse("[history]\nkeep = 5\n").expect_err("unknown key").to_string();
    assert!(e.contains("keep") && e.contains("retention"), "{e}");
    let over = vec![("SIMBA_HISTORY__RETENTION".to_owned(), "7".to_owned())];
    let c = RuntimeConfig::from_toml_str("[history]\nretention = 500\n", "simba.toml", over).expect("override");
    assert_eq!(c.history_retention, Some(7));
}

/// An error carries the file, line, key and reason as fields; a value
/// set by an environment variable names the variable instead of a line of the file.
#[test]
fn item13_6_errors_carry_file_line_key_and_reason() {
    let fields = |r: Result<RuntimeConfig, Error>| match r {
        Err(Error::InvalidConfig(c)) => c,
        other => panic!("not a configuration error: {other:?}"),
    };
    let c = fields(parse("[session]\nlease_duration = \"15s\"\n\n[jobs.report]\nretry = 3\ntimeout = \"soon\"\n"));
    assert_eq!(
        (c.file(), c.line(), c.key(), c.env_var()),
        (Some("simba.toml"), Some(6), Some("jobs.report.timeout"), None)
    );
    assert!(c.reason().starts_with("invalid duration \"soon\""), "{c}");
    assert_eq!(c.to_string(), format!("simba.toml: line 6, [jobs.report] timeout: {}", c.reason()));
    // The file sets the key too: the variable is what is wrong, not line 2.
    let over = vec![("SIMBA_SESSION__LEASE_DURATION".to_owned(), "soon".to_owned())];
    let c = fields(RuntimeConfig::from_toml_str("[session]\nlease_duration = \"15s\"\n", "/etc/app/simba.toml", over));
    assert_eq!(
        (c.file(), c.line(), c.key(), c.env_var()),
        (Some("/etc/app/simba.toml"), None, Some("session.lease_duration"), Some("SIMBA_SESSION__LEASE_DURATION"))
    );
    assert!(
        c.to_string().starts_with(
            "/etc/app/simba.toml: environment variable SIMBA_SESSION__LEASE_DURATION, [session] lease_duration: \
             invalid duration \"soon\""
        ),
        "{c}"
    );
    // A value of the wrong type from a variable: its key and the variable.
    let over = vec![("SIMBA_SESSION__DRIFT".to_owned(), "high".to_owned())];
    let c = fields(RuntimeConfig::from_toml_str("", "simba.toml", over));
    assert_eq!((c.line(), c.key(), c.env_var()), (None, Some("session.drift"), Some("SIMBA_SESSION__DRIFT")), "{c}");
    assert!(c.reason().starts_with("after the environment overrides SIMBA_SESSION__DRIFT: "), "{c}");
    // The TOML parser's errors: the line from its span, the key on that line.
    let c = fields(parse("[session]\n\ndrift = \"high\"\n"));
    assert_eq!((c.file(), c.line(), c.key()), (Some("simba.toml"), Some(3), Some("session.drift")), "{c}");
    assert!(c.reason().contains("expected f64"), "{c}");
    let c = fields(parse("[jobs.report]\ncron = \"0 * * * * *\"\ncrn = \"x\"\n"));
    assert_eq!((c.line(), c.key()), (Some(3), Some("jobs.report.crn")), "{c}");
    // A C1 error from the builder: its setting, at its line in [session].
    let c = fields(parse("[session]\nlease_duration = \"10s\"\nrenew_interval = \"6s\"\n"));
    assert_eq!((c.line(), c.key()), (Some(3), Some("session.renew_interval")), "{c}");
    assert!(c.reason().starts_with("renew_interval * 2 <= lease_duration"), "{c}");
    // A file that cannot be read: the path is the file.
    let missing = Path::new("/nonexistent-simba-dir/simba.toml");
    let c = fields(RuntimeConfig::load_file(missing));
    assert_eq!((c.file(), c.line(), c.key()), (Some("/nonexistent-simba-dir/simba.toml"), None, None));
    assert!(c.reason().starts_with("cannot read the file: "), "{c}");
    // Secrets stay masked in the reason, the field a program may log.
    let c =
        fields(parse("[backend]\nurl = \"postgres://u:hunter2@db/simba\"\npassword = \"x\"\npassword_file = \"/p\"\n"));
    assert_eq!((c.line(), c.key()), (Some(4), Some("backend.password_file")), "{c}");
    let c = fields(parse("[backend]\npassword = \"p@hunter2\n"));
    assert!(c.line() == Some(2) && !c.reason().contains("hunter2"), "{c}");
}

/// A password on a broken line (the TOML error quotes the line) is masked whole, also when
/// it holds an `@` (it was redacted as if a URL, showing `***@hunter2`; found by the fuzz
/// target `url_redaction`).
#[test]
fn a_password_on_a_broken_line_is_masked_whole() {
    for text in ["[backend]\npassword = \"p@hunter2\n", "[backend]\npassword = \"@s3cret\"dE/b?x\n"] {
        let e = parse(text).expect_err("syntax").to_string();
        assert!(e.contains("line 2") && !e.contains("hunter2") && !e.contains("s3cret"), "{e}");
    }
}

#[test]
fn start_timeout_is_read_and_checked() {
    assert_eq!(RuntimeConfig::default().start_timeout, DEFAULT_START_TIMEOUT);
    let c =
        RuntimeConfig::from_toml_str("[backend]\nstart_timeout = \"5m\"\n", "simba.toml", Vec::new()).expect("valid");
    assert_eq!(c.start_timeout, std::time::Duration::from_secs(300));
    let over = vec![("SIMBA_BACKEND__START_TIMEOUT".to_owned(), "2s".to_owned())];
    let c = RuntimeConfig::from_toml_str("", "simba.toml", over).expect("valid");
    assert_eq!(c.start_timeout, std::time::Duration::from_secs(2));
    let e = RuntimeConfig::from_toml_str("[backend]\nstart_timeout = \"soon\"\n", "simba.toml", Vec::new())
        .expect_err("not a duration")
        .to_string();
    assert!(e.contains("start_timeout") && e.contains("invalid duration \"soon\""), "{e}");
}

/// Rule B7: the listeners a configuration opens beyond loopback are named, with the fix;
/// loopback ones are not. (`[metrics] listen` needs the `prometheus` feature.)
#[test]
#[cfg(feature = "prometheus")]
fn b7_listeners_beyond_loopback_are_named() {
    let c = parse("[backend]\nurl = \"sqlite://x.db\"\n[metrics]\nlisten = \"127.0.0.1:9464\"\n[dashboard]\nlisten = \"0.0.0.0:9465\"\n")
        .expect("parses");
    let w = c.listener_warnings();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].starts_with("[dashboard] listen = 0.0.0.0:9465") && w[0].contains("TLS proxy"), "{w:?}");
    let c = parse("[backend]\nurl = \"sqlite://x.db\"\n[metrics]\nlisten = \"10.1.2.3:9464\"\n").expect("parses");
    assert_eq!(c.listener_warnings().len(), 1);
    assert!(parse("[backend]\nurl = \"sqlite://x.db\"\n").expect("parses").listener_warnings().is_empty());
}

/// J11-J14 keys of `[jobs.NAME]`: read (an instant as a string or a TOML date-time, also from
/// the environment), each bad value refused naming the file, line and key with what to write;
/// their combination with the job's schedule and misfire is the plan's check
/// (`j11_j14_contradictions_are_refused_by_the_plan`).
#[test]
fn j11_j14_policy_keys() {
    use crate::job::Overlap;
    let c = parse(
        "[jobs.report]\noverlap = \"cancel_running\"\ncatch_up_window = \"10m\"\njitter = \"30s\"\n\
         start = 2027-01-01T00:00:00Z\nend = \"2027-12-31T23:59:59+01:00\"\n",
    )
    .expect("valid");
    let r = &c.jobs["report"];
    assert_eq!(r.overlap, Some(Overlap::CancelRunning));
    assert_eq!((r.catch_up_window, r.jitter), (Some(Duration::from_secs(600)), Some(Duration::from_secs(30))));
    assert_eq!(r.start.map(|t| t.to_rfc3339()).as_deref(), Some("2027-01-01T00:00:00+00:00"));
    assert_eq!(r.end.map(|t| t.to_rfc3339()).as_deref(), Some("2027-12-31T22:59:59+00:00"));
    let c = RuntimeConfig::from_toml_str(
        "",
        "simba.toml",
        vec![
            ("SIMBA_JOBS__REPORT__OVERLAP".into(), "allow_all".into()),
            ("SIMBA_JOBS__REPORT__START".into(), "2027-01-01T00:00:00Z".into()),
        ],
    )
    .expect("from the environment");
    assert_eq!(c.jobs["report"].overlap, Some(Overlap::AllowAll));
    assert!(c.jobs["report"].start.is_some());
    for (text, key, says) in [
        ("overlap = \"replace\"", "overlap", "\"buffer_one\", \"allow_all\", \"cancel_running\""),
        ("catch_up_window = \"0s\"", "catch_up_window", "longer than zero"),
        ("jitter = \"soon\"", "jitter", "invalid duration"),
        ("start = \"2027-01-01 00:00\"", "start", "RFC 3339 instant with its offset"),
        ("start = 2027-01-01", "start", "RFC 3339 instant with its offset"),
        ("end = 42", "end", "expected an instant, found integer"),
        ("start = \"2027-06-01T00:00:00Z\"\nend = \"2027-01-01T00:00:00Z\"", "end", "end bound is before the start"),
    ] {
        let e = parse(&format!("[jobs.report]\n{text}\n")).expect_err(text).to_string();
        assert!(e.contains("simba.toml: line ") && e.contains(key) && e.contains(says), "{text}: {e}");
    }
    let e = parse("[jobs.report]\noverlapp = \"skip\"\n").expect_err("a typo").to_string();
    assert!(e.contains("line 2") && e.contains("unknown field `overlapp`") && e.contains("`overlap`"), "{e}");
}

/// A9: `[schedules] partitions` is read (default 64) and checked (1 to 4096), from the file or
/// `SIMBA_SCHEDULES__PARTITIONS`.
#[test]
fn a9_schedule_partitions_are_read_and_checked() {
    assert_eq!(parse("").expect("empty").schedule_partitions, 64);
    assert_eq!(parse("[schedules]\npartitions = 16\n").expect("valid").schedule_partitions, 16);
    let over = vec![("SIMBA_SCHEDULES__PARTITIONS".to_owned(), "8".to_owned())];
    assert_eq!(RuntimeConfig::from_toml_str("", NO_FILE, over).expect("valid").schedule_partitions, 8);
    for bad in ["0", "4097", "-1"] {
        let e = parse(&format!("[schedules]\npartitions = {bad}\n")).expect_err(bad);
        let Error::InvalidConfig(ce) = &e else { panic!("{e}") };
        assert_eq!(ce.key(), Some("schedules.partitions"), "{e}");
        assert!(e.to_string().contains("1 to 4096"), "{e}");
    }
}

/// R13: `[alerts]` is read and checked: a webhook URL that is not http(s) with a host, a
/// timeout of zero or not a duration is an error naming the line and what to write, and never
/// shows the URL (its path holds the receiver's token); the environment overrides it; without
/// the feature `webhook` a webhook is refused with the feature to enable.
#[test]
fn r13_alerts_are_read_and_checked() {
    let c = parse("").expect("empty");
    assert_eq!(
        (c.alerts.webhook.as_ref(), c.alerts.webhook_timeout, c.alerts.late_after),
        (None, DEFAULT_WEBHOOK_TIMEOUT, None)
    );
    let c = parse("[alerts]\nlate_after = \"30s\"\n").expect("late_after alone");
    assert_eq!(c.alerts.late_after, Some(Duration::from_secs(30)));
    let ok = "[alerts]\nwebhook = \"https://hooks.example.com/T0KEN\"\nwebhook_timeout = \"3s\"\n";
    if cfg!(feature = "webhook") {
        let c = parse(ok).expect("valid");
        assert_eq!(c.alerts.webhook.as_ref().map(|u| u.expose()), Some("https://hooks.example.com/T0KEN"));
        assert_eq!(c.alerts.webhook_timeout, Duration::from_secs(3));
        assert!(!format!("{c:?}").contains("T0KEN"), "Debug masks the URL");
        for (bad, says) in [("ftp://hooks.example.com/T0KEN", "scheme `ftp`"), ("T0KEN", "not a URL")] {
            let e = parse(&format!("[alerts]\nwebhook = \"{bad}\"\n")).expect_err(bad).to_string();
            assert!(e.contains("line 2, [alerts] webhook") && e.contains(says), "{e}");
            assert!(!e.contains("T0KEN"), "the error hides the URL: {e}");
        }
        let over = vec![("SIMBA_ALERTS__WEBHOOK".to_owned(), "http://127.0.0.1:9/other".to_owned())];
        let c = RuntimeConfig::from_toml_str(ok, "simba.toml", over).expect("override");
        assert_eq!(c.alerts.webhook.as_ref().map(|u| u.expose()), Some("http://127.0.0.1:9/other"));
    } else {
        let e = parse(ok).expect_err("no feature").to_string();
        assert!(e.contains("[alerts] webhook") && e.contains("feature `webhook`"), "{e}");
    }
    let e = parse("[alerts]\nwebhook_timeout = \"0s\"\n").expect_err("zero").to_string();
    assert!(e.contains("[alerts] webhook_timeout") && e.contains("10s"), "{e}");
    let e = parse("[alerts]\nlate_after = \"soon\"\n").expect_err("not a duration").to_string();
    assert!(e.contains("[alerts] late_after") && e.contains("invalid duration"), "{e}");
    let e = parse("[alerts]\nwebhook_ca_file = \"/nonexistent/ca.pem\"\n").expect_err("no file").to_string();
    assert!(e.contains("[alerts] webhook_ca_file") && e.contains("cannot read the CA file /nonexistent/ca.pem"), "{e}");
    let e = parse("[alerts]\nhook = \"x\"\n").expect_err("unknown key").to_string();
    assert!(e.contains("hook") && e.contains("webhook"), "{e}");
}
