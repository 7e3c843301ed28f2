//! Security (issue 8, ADR 0008) against the private servers of `scripts/backends.sh`: TLS with
//! the right CA works and with the wrong CA fails saying the certificate is not trusted, on
//! PostgreSQL, MariaDB, Redis, ZooKeeper and etcd; credentials (PostgreSQL and MariaDB users, a
//! Redis ACL user, ZooKeeper digest, etcd users by password or client certificate) work and
//! wrong ones fail clearly; ZooKeeper lease nodes cannot be
//! deleted by a client without the credentials; and a known password never appears in any
//! output: `Debug`/`Display` of the configuration and errors, `tracing` fields, `snapshot()`.

#![allow(clippy::unwrap_used, clippy::print_stderr)]

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use simba::backend::zookeeper::zookeeper_client as zk;
use simba::runtime::redact;
use simba::tck::conformance::unique;
use simba::{Error, RuntimeConfig, Simba, SimbaConfig};
use simba_tests::server_url;

/// A wrong password, fed through every path that could print it.
const WRONG: &str = "Wr0ng-S3cret-4ny";

/// Everything any test in this binary logs, at every level, through `tracing`.
fn logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let writer = Arc::clone(&buf);
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || Tee(Arc::clone(&writer)))
            .finish();
        tracing::subscriber::set_global_default(subscriber).unwrap();
        buf
    })
    .clone()
}

struct Tee(Arc<Mutex<Vec<u8>>>);

impl Write for Tee {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The test password as written and as it appears percent-encoded in URLs.
fn password_forms(p: &str) -> Vec<String> {
    let encoded: String = p
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    vec![p.to_owned(), encoded]
}

#[track_caller]
fn assert_hidden(what: &str, text: &str, secrets: &[String]) {
    for s in secrets {
        assert!(!text.contains(s.as_str()), "{what} shows the secret {s:?}:\n{text}");
    }
}

/// Display, Debug and the source chain of an error.
fn everything(e: &Error) -> String {
    format!("{e:?}\n{}", simba_tests::error_chain(e))
}

async fn connect(url: &str) -> Result<Simba, Error> {
    // As an application does before connecting over TLS: the Redis and ZooKeeper drivers read
    // the process's rustls provider, and simba installs none (tests/tests/tls_provider/).
    simba::backend::install_tls_provider();
    Simba::connect(url, SimbaConfig::default()).await
}

/// Connects, takes and gives back a lock: the connection really works.
async fn works(url: &str) {
    let simba = connect(url).await.unwrap_or_else(|e| panic!("{}: {e:#?}", redact(url)));
    let guard = simba.lock(unique("sec")).acquire().await.unwrap();
    assert!(guard.term().is_valid());
    guard.release().await.unwrap();
    simba.close().await;
}

async fn fails(url: &str) -> String {
    match connect(url).await {
        Ok(s) => {
            s.close().await;
            panic!("{} connected but should not have", redact(url))
        }
        Err(e) => everything(&e),
    }
}

fn wrong_ca(url: &str) -> String {
    let (ca, wrong) = (std::env::var("SIMBA_TEST_TLS_CA").unwrap(), std::env::var("SIMBA_TEST_TLS_WRONG_CA").unwrap());
    assert!(url.contains(&ca), "{url} names {ca}");
    url.replace(&ca, &wrong)
}

fn with_password(url: &str, password: &str) -> String {
    let right = password_forms(&std::env::var("SIMBA_TEST_PASSWORD").unwrap())[1].clone();
    assert!(url.contains(&right), "the URL holds the test password");
    url.replace(&right, password)
}

/// Right CA: works. Wrong CA: "not trusted". Missing CA file: names it. Each error names the
/// server and no secret.
async fn tls_suite(var: &str, ca_param: &str) {
    let Some(url) = server_url(var) else { return };
    let _ = logs();
    works(&url).await;
    let e = fails(&wrong_ca(&url)).await;
    eprintln!("{var}, wrong CA: {}", e.lines().last().unwrap_or_default());
    assert!(e.contains("not trusted"), "{e}");
    assert!(e.contains("127.0.0.1"), "names the server: {e}");
    let ca = std::env::var("SIMBA_TEST_TLS_CA").unwrap();
    let missing = format!("{}/no-such-ca.pem", std::env::temp_dir().display());
    let e = fails(&url.replace(&ca, &missing)).await;
    eprintln!("{var}, missing CA: {}", e.lines().last().unwrap_or_default());
    assert!(e.contains("no-such-ca.pem") && e.contains("cannot read") && e.contains(ca_param), "{e}");
    // A file that is not a certificate.
    let not_pem = std::env::temp_dir().join(format!("{}.txt", unique("not-pem")));
    std::fs::write(&not_pem, "hello").unwrap();
    let e = fails(&url.replace(&ca, &not_pem.display().to_string())).await;
    assert!(e.contains("no PEM block") && e.contains(&not_pem.display().to_string()), "{e}");
    let _ = std::fs::remove_file(not_pem);
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_tls() {
    tls_suite("SIMBA_TEST_POSTGRES_TLS_URL", "sslrootcert").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mysql_tls() {
    tls_suite("SIMBA_TEST_MYSQL_TLS_URL", "ssl-ca").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn redis_tls() {
    tls_suite("SIMBA_TEST_REDIS_TLS_URL", "CA file").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn zookeeper_tls() {
    tls_suite("SIMBA_TEST_ZK_TLS_URL", "ca_file").await;
}

/// etcd over TLS with a client certificate, which is also the login (its common name is the
/// user `simba`, as the server runs with `--client-cert-auth`).
#[tokio::test(flavor = "multi_thread")]
async fn etcd_tls() {
    tls_suite("SIMBA_TEST_ETCD_TLS_URL", "ca_file").await;
}

/// The etcd TLS server asks for a client certificate: without one the handshake fails, and
/// the error says to give one; a certificate without its key is refused before connecting.
#[tokio::test(flavor = "multi_thread")]
async fn etcd_tls_needs_the_client_certificate() {
    let Some(url) = server_url("SIMBA_TEST_ETCD_TLS_URL") else { return };
    let without = url.split("&cert_file=").next().unwrap().to_owned();
    // With TLS 1.3 the refusal can come before or after the client's first request: every
    // attempt must say the same.
    for _ in 0..20 {
        let e = fails(&without).await;
        assert!(
            e.contains("without a client certificate") && e.contains("cert_file") && e.contains("127.0.0.1"),
            "{e}"
        );
    }
    let e = fails(&without).await;
    eprintln!("etcd, no client certificate: {}", e.lines().last().unwrap_or_default());
    let dir = std::env::var("SIMBA_TEST_TLS_DIR").unwrap();
    let e = fails(&format!("{without}&cert_file={dir}/client.pem")).await;
    assert!(e.contains("key_file"), "{e}");
}

/// TLS with a client certificate (PostgreSQL asks for none, but the files are read and sent).
#[tokio::test(flavor = "multi_thread")]
async fn redis_tls_client_certificate() {
    let Some(url) = server_url("SIMBA_TEST_REDIS_TLS_URL") else { return };
    let dir = std::env::var("SIMBA_TEST_TLS_DIR").unwrap();
    works(&format!("{url}&cert_file={dir}/client.pem&key_file={dir}/client.key")).await;
    let e = fails(&format!("{url}&cert_file={dir}/client.pem")).await;
    assert!(e.contains("key_file"), "{e}");
}

/// Right credentials work; a wrong password fails as a configuration error naming the server
/// and never the password.
async fn auth_suite(var: &str) {
    let Some(url) = server_url(var) else { return };
    let _ = logs();
    works(&url).await;
    let e = fails(&with_password(&url, WRONG)).await;
    eprintln!("{var}, wrong password: {}", e.lines().last().unwrap_or_default());
    assert!(e.contains("127.0.0.1"), "names the server: {e}");
    assert!(e.contains("Misconfigured"), "a configuration error: {e}");
    assert_hidden("the error", &e, &password_forms(WRONG));
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_password() {
    auth_suite("SIMBA_TEST_POSTGRES_AUTH_URL").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mysql_password() {
    auth_suite("SIMBA_TEST_MYSQL_AUTH_URL").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn redis_acl_user() {
    auth_suite("SIMBA_TEST_REDIS_AUTH_URL").await;
}

/// etcd users: the right password works, a wrong one is refused, and no credentials at all
/// on a server with authentication on says what to add.
#[tokio::test(flavor = "multi_thread")]
async fn etcd_password() {
    auth_suite("SIMBA_TEST_ETCD_AUTH_URL").await;
    let Some(url) = server_url("SIMBA_TEST_ETCD_AUTH_URL") else { return };
    let anonymous = format!("etcd://{}", url.rsplit_once('@').unwrap().1);
    let e = fails(&anonymous).await;
    assert!(e.contains("authentication enabled") && e.contains("user:password@"), "{e}");
}

/// ZooKeeper digest auth: lease nodes carry "all for this user, read for anyone", so a client
/// without the credentials can read a lease but not delete it; a client with a wrong password
/// (another digest identity) cannot use the chroot.
#[tokio::test(flavor = "multi_thread")]
async fn zookeeper_digest_acl() {
    let Some(url) = server_url("SIMBA_TEST_ZK_AUTH_URL") else { return };
    let _ = logs();
    let chroot = format!("/{}", unique("sec"));
    let url = format!("{url}{chroot}");
    let simba = connect(&url).await.unwrap();
    let lease = unique("lease");
    let guard = simba.lock(lease.clone()).acquire().await.unwrap();

    let hosts = url.rsplit_once('@').unwrap().1.split('/').next().unwrap().to_owned();
    let other = zk::Client::connector().with_session_timeout(Duration::from_secs(10)).connect(&hosts).await.unwrap();
    let node = format!("{chroot}/simba/leases/{lease}");
    assert!(other.check_stat(&node).await.unwrap().is_some(), "others may read the lease");
    assert_eq!(other.delete(&node, None).await, Err(zk::Error::NoAuth), "others may not delete the lease");
    let forged = other
        .create(
            &format!("{chroot}/simba/leases/{}", unique("forged")),
            b"",
            &zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all()),
        )
        .await;
    assert_eq!(forged.map(|_| ()), Err(zk::Error::NoAuth), "others may not create a lease");
    assert!(guard.term().is_valid());

    let e = fails(&with_password(&url, WRONG)).await;
    eprintln!("zookeeper, wrong password: {}", e.lines().last().unwrap_or_default());
    assert!(e.contains("not authorized") && e.contains(&chroot), "{e}");
    assert_hidden("the error", &e, &password_forms(WRONG));
    guard.release().await.unwrap();
    simba.close().await;
}

/// The redaction test: the test password, given in a URL, in `SIMBA_BACKEND__PASSWORD` and in
/// a `password_file`, never appears in `Debug` of the configuration, in errors, in the logs
/// (every level), in `snapshot()`, in the `simba` CLI's tables and `--json` (with the right and
/// the wrong password) or in `/metrics` and `/healthz`, including when connecting fails.
#[tokio::test(flavor = "multi_thread")]
async fn secrets_never_leak() {
    let logs = logs();
    let mut secrets = password_forms(WRONG);
    if let Ok(right) = std::env::var("SIMBA_TEST_PASSWORD") {
        secrets.extend(password_forms(&right));
    }
    let dir = tempfile::tempdir().unwrap();

    // Configuration: URL, environment override, password file; Debug of each.
    let file = dir.path().join("pw");
    std::fs::write(&file, format!("{WRONG}\n")).unwrap();
    let in_url = format!("[backend]\nurl = \"postgres://u:{WRONG}@127.0.0.1:1/db?sslpassword={WRONG}\"\n");
    let c = RuntimeConfig::from_toml_str(&in_url, "simba.toml", Vec::new()).unwrap();
    assert_hidden("Debug of a config with the password in the URL", &format!("{c:?}"), &secrets);
    let c = RuntimeConfig::from_toml_str(
        "[backend]\nurl = \"redis://127.0.0.1:1\"\nuser = \"simba\"\n",
        "simba.toml",
        vec![("SIMBA_BACKEND__PASSWORD".into(), WRONG.into())],
    )
    .unwrap();
    assert!(c.backend_url.contains("simba:"), "the password reaches the URL");
    assert_hidden("Debug of a config with SIMBA_BACKEND__PASSWORD", &format!("{c:?}"), &secrets);
    let c = RuntimeConfig::from_toml_str(
        &format!("[backend]\nurl = \"mysql://127.0.0.1:1/db\"\npassword_file = \"{}\"\n", file.display()),
        "simba.toml",
        Vec::new(),
    )
    .unwrap();
    assert_hidden("Debug of a config with a password_file", &format!("{c:?}"), &secrets);
    // Bad configurations that quote the password.
    for (text, env) in [
        (format!("[backend]\npassword = {WRONG}\n"), vec![]),
        (format!("[backend]\npassword = \"{WRONG}\"\npassword_file = \"/x\"\n"), vec![]),
        (format!("[backend]\nurl = \"sqlite://x.db\"\npassword = \"{WRONG}\"\n"), vec![]),
        (format!("[backend]\nurl = \"postgres://u:{WRONG}@h/db\"\nurl2 = 1\n"), vec![]),
        (
            String::new(),
            vec![
                ("SIMBA_BACKEND__PASSWORD".to_owned(), "4711".to_owned()),
                ("SIMBA_BACKEND__PASWORD".to_owned(), WRONG.to_owned()),
            ],
        ),
    ] {
        let e = RuntimeConfig::from_toml_str(&text, "simba.toml", env).unwrap_err();
        assert_hidden("a configuration error", &everything(&e), &secrets);
    }
    let e = RuntimeConfig::from_toml_str(
        "[backend]\nurl = \"postgres://h/db\"\npassword_file = \"/nonexistent/pw\"\n",
        "simba.toml",
        Vec::new(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("/nonexistent/pw") && e.contains("password_file"), "{e}");

    // Connecting with wrong credentials through the runtime, on every server backend that
    // takes a password: errors, their Debug, and every log line.
    let mut checked = 0;
    for var in [
        "SIMBA_TEST_POSTGRES_AUTH_URL",
        "SIMBA_TEST_MYSQL_AUTH_URL",
        "SIMBA_TEST_REDIS_AUTH_URL",
        "SIMBA_TEST_ETCD_AUTH_URL",
    ] {
        let Some(url) = server_url(var) else { continue };
        let bad = with_password(&url, WRONG);
        let config =
            RuntimeConfig::from_toml_str(&format!("[backend]\nurl = \"{bad}\"\n"), "simba.toml", Vec::new()).unwrap();
        let e = simba::Runtime::builder().config(config.clone()).without_registry().start().await.unwrap_err();
        assert_hidden(var, &everything(&e), &secrets);
        assert_hidden(var, &format!("{config:?}"), &secrets);
        // And with the right password: the running client's Debug and snapshot.
        let good =
            RuntimeConfig::from_toml_str(&format!("[backend]\nurl = \"{url}\"\n"), "simba.toml", Vec::new()).unwrap();
        let running = simba::Runtime::builder().config(good.clone()).without_registry().start().await.unwrap();
        let lock = running.simba().lock(unique("sec")).acquire().await.unwrap();
        let shown = format!("{:?}\n{:?}\n{good:?}", running.simba(), running.simba().snapshot());
        assert_hidden(var, &shown, &secrets);
        // The metrics endpoint of a runtime whose configuration holds the password (the
        // recorder is process-wide: the first backend only).
        if checked == 0 {
            let toml = format!("[backend]\nurl = \"{url}\"\n[metrics]\nlisten = \"127.0.0.1:0\"\n");
            let with_metrics = RuntimeConfig::from_toml_str(&toml, "simba.toml", Vec::new()).unwrap();
            let metered = simba::Runtime::builder().config(with_metrics).without_registry().start().await.unwrap();
            let addr = metered.metrics_addr().expect("[metrics] listen starts the endpoint");
            let held = metered.simba().lock(unique("sec-metrics")).acquire().await.unwrap();
            for path in ["/metrics", "/healthz"] {
                assert_hidden(&format!("{var} {path}"), &http_get(addr, path).await, &secrets);
            }
            held.release().await.unwrap();
            metered.shutdown().await;
        }
        lock.release().await.unwrap();
        running.shutdown().await;
        // The command-line tool, tables and JSON, with the right and the wrong password.
        for (u, sub) in [(&url, "status"), (&bad, "status"), (&url, "check"), (&bad, "check")] {
            for json in [false, true] {
                let mut argv = vec!["simba", "--timeout", "3s", "--backend", u.as_str(), sub];
                if json {
                    argv.push("--json");
                }
                let (mut out, mut err) = (Vec::new(), Vec::new());
                let code = simba_cli::run(argv, &mut out, &mut err).await;
                let shown = format!("{}{}", String::from_utf8_lossy(&out), String::from_utf8_lossy(&err));
                assert!(!shown.is_empty(), "simba {sub} printed nothing (exit {code})");
                assert_hidden(&format!("{var}: simba {sub} (json: {json}, exit {code})"), &shown, &secrets);
            }
        }
        checked += 1;
    }
    let text = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    assert!(checked == 0 || text.contains("cannot connect to the backend"), "the failures were logged:\n{text}");
    assert_hidden("the logs", &text, &secrets);
    eprintln!("secrets_never_leak: {checked} backends, {} bytes of logs checked", text.len());
}

/// The body (and status line) of `GET path` on `addr`.
async fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").as_bytes()).await.unwrap();
    let mut reply = String::new();
    conn.read_to_string(&mut reply).await.unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "GET {path}: {reply}");
    reply
}

/// `simba.toml` end to end: `[backend] user` + `password_file` + `[backend.tls] ca_file`
/// reach the real server (TLS and credentials together); then the password from
/// `SIMBA_BACKEND__PASSWORD` with the wrong CA from `SIMBA_BACKEND__TLS__CA_FILE` fails as
/// "not trusted", without the password.
async fn config_suite(var: &str, user: &str, chroot: &str) {
    let Some(tls_url) = server_url(var) else { return };
    simba::backend::install_tls_provider();
    let _ = logs();
    let (ca, wrong) = (std::env::var("SIMBA_TEST_TLS_CA").unwrap(), std::env::var("SIMBA_TEST_TLS_WRONG_CA").unwrap());
    let password = std::env::var("SIMBA_TEST_PASSWORD").unwrap();
    let base = tls_url.split('?').next().unwrap().replacen("postgres@", "", 1).replacen("root@", "", 1);
    let base = format!("{base}{chroot}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("password");
    std::fs::write(&file, format!("{password}\n")).unwrap();
    let text = format!(
        "[backend]\nurl = \"{base}\"\nuser = \"{user}\"\npassword_file = \"{}\"\n\n[backend.tls]\nca_file = \"{ca}\"\n",
        file.display()
    );
    let config = RuntimeConfig::from_toml_str(&text, "simba.toml", Vec::new()).unwrap();
    let running = simba::Runtime::builder()
        .config(config)
        .without_registry()
        .start()
        .await
        .unwrap_or_else(|e| panic!("{var} through simba.toml: {}", everything(&e)));
    let lock = running.simba().lock(unique("sec")).acquire().await.unwrap();
    lock.release().await.unwrap();
    running.shutdown().await;

    let config = RuntimeConfig::from_toml_str(
        &format!("[backend]\nurl = \"{base}\"\nuser = \"{user}\"\n"),
        "simba.toml",
        vec![("SIMBA_BACKEND__PASSWORD".into(), password.clone()), ("SIMBA_BACKEND__TLS__CA_FILE".into(), wrong)],
    )
    .unwrap();
    let e = everything(&simba::Runtime::builder().config(config).without_registry().start().await.unwrap_err());
    eprintln!("{var} via simba.toml, wrong CA: {}", e.lines().last().unwrap_or_default());
    assert!(e.contains("not trusted"), "{e}");
    assert_hidden("the error", &e, &password_forms(&password));
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_config_tls_and_password() {
    config_suite("SIMBA_TEST_POSTGRES_TLS_URL", "simba_pw", "").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mysql_config_tls_and_password() {
    config_suite("SIMBA_TEST_MYSQL_TLS_URL", "simba_pw", "").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn redis_config_tls_and_acl_user() {
    config_suite("SIMBA_TEST_REDIS_TLS_URL", "simba", "").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn zookeeper_config_tls_and_digest() {
    config_suite("SIMBA_TEST_ZK_TLS_URL", "simba", &format!("/{}", unique("sec"))).await;
}

/// etcd through `simba.toml`: `[backend] user` + `password_file` with `[backend.tls]` (CA,
/// client certificate and key: the TLS server asks for one) reach the real server; then the
/// wrong CA from `SIMBA_BACKEND__TLS__CA_FILE` fails as "not trusted", without the password.
#[tokio::test(flavor = "multi_thread")]
async fn etcd_config_tls_and_password() {
    let Some(tls_url) = server_url("SIMBA_TEST_ETCD_TLS_URL") else { return };
    let _ = logs();
    let (ca, wrong) = (std::env::var("SIMBA_TEST_TLS_CA").unwrap(), std::env::var("SIMBA_TEST_TLS_WRONG_CA").unwrap());
    let dir = std::env::var("SIMBA_TEST_TLS_DIR").unwrap();
    let password = std::env::var("SIMBA_TEST_PASSWORD").unwrap();
    let base = tls_url.split('?').next().unwrap();
    let files = tempfile::tempdir().unwrap();
    let file = files.path().join("password");
    std::fs::write(&file, format!("{password}\n")).unwrap();
    let tls = format!(
        "[backend.tls]\nca_file = \"{ca}\"\ncert_file = \"{dir}/client.pem\"\nkey_file = \"{dir}/client.key\"\n"
    );
    let text =
        format!("[backend]\nurl = \"{base}\"\nuser = \"simba\"\npassword_file = \"{}\"\n\n{tls}", file.display());
    let config = RuntimeConfig::from_toml_str(&text, "simba.toml", Vec::new()).unwrap();
    assert!(config.backend_url.contains("tls=true"), "{}", redact(&config.backend_url));
    let running = simba::Runtime::builder()
        .config(config)
        .without_registry()
        .start()
        .await
        .unwrap_or_else(|e| panic!("etcd through simba.toml: {}", everything(&e)));
    let lock = running.simba().lock(unique("sec")).acquire().await.unwrap();
    lock.release().await.unwrap();
    running.shutdown().await;

    let text = format!("[backend]\nurl = \"{base}\"\nuser = \"simba\"\n\n{tls}");
    let env = vec![("SIMBA_BACKEND__PASSWORD".into(), password.clone()), ("SIMBA_BACKEND__TLS__CA_FILE".into(), wrong)];
    let config = RuntimeConfig::from_toml_str(&text, "simba.toml", env).unwrap();
    let e = everything(&simba::Runtime::builder().config(config).without_registry().start().await.unwrap_err());
    eprintln!("etcd via simba.toml, wrong CA: {}", e.lines().last().unwrap_or_default());
    assert!(e.contains("not trusted"), "{e}");
    assert_hidden("the error", &e, &password_forms(&password));
}
