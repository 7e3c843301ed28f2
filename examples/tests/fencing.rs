//! `cargo run --example fencing`: the table takes the writes of each term's holder and refuses
//! the late write of a holder whose term ended (rule F2 on the application's own sqlx table).

use std::process::Command;

use sqlx::sqlite::{SqliteConnectOptions, SqlitePool};

mod common;

#[tokio::test]
async fn the_table_refuses_the_late_write_of_an_ended_term() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out =
        Command::new(common::example("fencing")).env("FENCING_DIR", dir.path()).output().expect("run the example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the example failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));

    let token = |prefix: &str| -> u64 {
        let line =
            stdout.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no `{prefix}` line: {stdout}"));
        line[prefix.len()..].split(':').next().and_then(|t| t.trim().parse().ok()).expect("a token")
    };
    let (a, b) = (token("node a: deposit 10 with token "), token("node b: deposit 10 with token "));
    assert!(b > a, "b's term has the greater token: {stdout}");
    let expected = [
        format!("node a: deposit 10 with token {a}: accepted"),
        format!("node b: deposit 10 with token {b}: accepted"),
        format!("node a: late deposit 10 with token {a}: refused: a greater token wrote before"),
        format!("account acme: balance 20, fencing_token {b}"),
    ];
    assert_eq!(stdout.lines().collect::<Vec<_>>(), expected, "{stdout}");

    // The table itself, read apart from the example: b's token, two deposits, not three.
    let db = SqlitePool::connect_with(SqliteConnectOptions::new().filename(dir.path().join("accounts.db")))
        .await
        .expect("open the example's database");
    let row: (i64, i64) = sqlx::query_as("SELECT balance, fencing_token FROM accounts WHERE id = 'acme'")
        .fetch_one(&db)
        .await
        .expect("the account");
    assert_eq!(row, (20, i64::try_from(b).expect("a small token")));
}
