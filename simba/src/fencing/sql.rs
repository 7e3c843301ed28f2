//! The SQL fencing recipe (rule F2): one conditional `UPDATE`; zero rows matched means a stale
//! holder. A retry with the same token counts as success.
//!
//! ```sql
//! -- once per resource:
//! INSERT INTO simba_fenced (id, fencing_token, value) VALUES (?, 0, '') -- ignoring duplicates
//! -- every write, as ONE statement:
//! UPDATE simba_fenced SET value = ?, fencing_token = ? WHERE id = ? AND fencing_token <= ?
//! ```
//!
//! The check and the write are one statement, so they are one atomic step: reading the highest
//! token first and writing after would let a stale holder pass the check and write after a
//! newer holder.

// The recipes create the table `simba_fenced` (`id`, `fencing_token`, `value`); your own
// tables only need a `fencing_token` column and the same `WHERE` clause.

macro_rules! sql_fence {
    ($name:ident, $pool:ty, $create:expr, $insert:expr, $update:expr, $select:expr, $doc:literal) => {
        #[doc = $doc]
        #[derive(Debug, Clone)]
        pub struct $name {
            pool: $pool,
        }

        impl $name {
            /// Uses `pool` and creates the table `simba_fenced` if it does not exist.
            pub async fn new(pool: $pool) -> Result<Self, crate::BoxError> {
                sqlx::query($create).execute(&pool).await?;
                Ok(Self { pool })
            }

            /// Writes `value` to resource `id` with `token`: `Ok(true)` when accepted (the token
            /// is not below the highest accepted, which it then becomes), `Ok(false)` when
            /// refused as stale.
            pub async fn write(&self, id: &str, token: u64, value: &str) -> Result<bool, crate::BoxError> {
                let token = i64::try_from(token)?;
                sqlx::query($insert).bind(id).execute(&self.pool).await?;
                let r = sqlx::query($update).bind(value).bind(token).bind(id).bind(token).execute(&self.pool).await?;
                Ok(r.rows_affected() == 1)
            }

            /// The highest accepted token and the value of resource `id`, if it was written.
            pub async fn read(&self, id: &str) -> Result<Option<(u64, String)>, crate::BoxError> {
                let row: Option<(i64, String)> = sqlx::query_as($select).bind(id).fetch_optional(&self.pool).await?;
                Ok(row.filter(|r| r.0 > 0).map(|(t, v)| (t as u64, v)))
            }
        }
    };
}

#[cfg(feature = "sqlite")]
sql_fence!(
    SqliteFence,
    sqlx::SqlitePool,
    "CREATE TABLE IF NOT EXISTS simba_fenced (id TEXT PRIMARY KEY, fencing_token INTEGER NOT NULL, value TEXT NOT NULL)",
    "INSERT OR IGNORE INTO simba_fenced (id, fencing_token, value) VALUES (?1, 0, '')",
    "UPDATE simba_fenced SET value = ?1, fencing_token = ?2 WHERE id = ?3 AND fencing_token <= ?4",
    "SELECT fencing_token, value FROM simba_fenced WHERE id = ?1",
    "The SQL recipe on SQLite."
);

#[cfg(feature = "postgres")]
sql_fence!(
    PostgresFence,
    sqlx::PgPool,
    "CREATE TABLE IF NOT EXISTS simba_fenced (id TEXT PRIMARY KEY, fencing_token BIGINT NOT NULL, value TEXT NOT NULL)",
    "INSERT INTO simba_fenced (id, fencing_token, value) VALUES ($1, 0, '') ON CONFLICT (id) DO NOTHING",
    "UPDATE simba_fenced SET value = $1, fencing_token = $2 WHERE id = $3 AND fencing_token <= $4",
    "SELECT fencing_token, value FROM simba_fenced WHERE id = $1",
    "The SQL recipe on PostgreSQL."
);

#[cfg(feature = "mysql")]
sql_fence!(
    MySqlFence,
    sqlx::MySqlPool,
    "CREATE TABLE IF NOT EXISTS simba_fenced (id VARCHAR(255) PRIMARY KEY, fencing_token BIGINT NOT NULL, value TEXT NOT NULL)",
    "INSERT IGNORE INTO simba_fenced (id, fencing_token, value) VALUES (?, 0, '')",
    // MySQL reports rows CHANGED unless the client sets CLIENT_FOUND_ROWS: then a retry with
    // an equal token and value would look stale. sqlx sets that flag, so `rows_affected()`
    // counts matched rows; the fencing kit checks "equal token accepted" on a real server.
    "UPDATE simba_fenced SET value = ?, fencing_token = ? WHERE id = ? AND fencing_token <= ?",
    "SELECT fencing_token, value FROM simba_fenced WHERE id = ?",
    "The SQL recipe on MySQL and MariaDB."
);
