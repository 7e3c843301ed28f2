//! Fencing the application's own table. A lock tells a node when to work; only the resource can
//! refuse a node whose term ended while its write was on the way (a GC pause, a slow network, a
//! stopped VM). So every write to `accounts` carries the term's fencing token, and the table
//! takes it only if no greater token wrote before: `... WHERE fencing_token <= ?`, the check and
//! the write in ONE statement.
//!
//! ```text
//! cargo run --example fencing        # the store and the application's database in ./ (SQLite)
//! ```
//!
//! Node a takes the lock and deposits; its next deposit is delayed past the end of its term;
//! node b takes the lock with a greater token and deposits; a's late write arrives and the
//! table refuses it. `FENCING_DIR` puts both files elsewhere. `simba::fencing::SqliteFence`
//! (and `PostgresFence`, `MySqlFence`, `RedisFence`) is this recipe ready-made, for a table of
//! its own.
#![allow(clippy::print_stdout)] // an example prints what it does

use std::path::PathBuf;

use simba::{Simba, SimbaConfig};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool};

const ACCOUNT: &str = "acme";

/// The application's database: one account row with the highest token that wrote to it.
async fn open_accounts(dir: &std::path::Path) -> anyhow::Result<SqlitePool> {
    let options = SqliteConnectOptions::new().filename(dir.join("accounts.db")).create_if_missing(true);
    let db = SqlitePool::connect_with(options).await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS accounts (
             id TEXT PRIMARY KEY,
             balance INTEGER NOT NULL,
             fencing_token INTEGER NOT NULL DEFAULT 0
         )",
    )
    .execute(&db)
    .await?;
    sqlx::query("INSERT OR IGNORE INTO accounts (id, balance) VALUES (?1, 0)").bind(ACCOUNT).execute(&db).await?;
    Ok(db)
}

/// Deposits `amount` with `token`: `true` when the table took it, `false` when a greater token
/// wrote before (a stale holder). One statement: checking first and writing after would let a
/// stale holder pass the check, then write after the new holder.
async fn deposit(db: &SqlitePool, token: u64, amount: i64) -> anyhow::Result<bool> {
    let token = i64::try_from(token)?; // SQLite integers are signed; tokens stay far below 2^63
    let done = sqlx::query(
        "UPDATE accounts SET balance = balance + ?1, fencing_token = ?2 WHERE id = ?3 AND fencing_token <= ?2",
    )
    .bind(amount)
    .bind(token)
    .bind(ACCOUNT)
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

async fn print_account(db: &SqlitePool) -> anyhow::Result<()> {
    let (balance, token): (i64, i64) =
        sqlx::query_as("SELECT balance, fencing_token FROM accounts WHERE id = ?1").bind(ACCOUNT).fetch_one(db).await?;
    println!("account {ACCOUNT}: balance {balance}, fencing_token {token}");
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let dir = std::env::var_os("FENCING_DIR").map_or_else(|| PathBuf::from("."), PathBuf::from);
    let db = open_accounts(&dir).await?;
    let store = format!("sqlite://{}", dir.join("simba-fencing.db").display());
    // Two clients, two sessions: to the store they are two nodes.
    let a = Simba::connect(&store, SimbaConfig::default()).await?;
    let b = Simba::connect(&store, SimbaConfig::default()).await?;

    let guard = a.lock("accounts").acquire().await?;
    let token_a = guard.term().token();
    let accepted = deposit(&db, token_a, 10).await?;
    println!("node a: deposit 10 with token {token_a}: {}", if accepted { "accepted" } else { "refused" });
    // a's next write is delayed until after its term ended: here a hands the lock over
    // before sending it; a paused process would lose it by expiry instead.
    guard.release().await?;

    let guard = b.lock("accounts").acquire().await?;
    let token_b = guard.term().token();
    let accepted = deposit(&db, token_b, 10).await?;
    println!("node b: deposit 10 with token {token_b}: {}", if accepted { "accepted" } else { "refused" });

    let accepted = deposit(&db, token_a, 10).await?;
    println!(
        "node a: late deposit 10 with token {token_a}: {}",
        if accepted { "accepted (the table is not fenced!)" } else { "refused: a greater token wrote before" }
    );
    guard.release().await?;
    print_account(&db).await?;
    a.close().await;
    b.close().await;
    Ok(())
}
