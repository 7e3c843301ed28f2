//! The one place where the SQL dialects differ in the text of their statements: the
//! placeholders, the expression of the database's clock, the upsert that keeps an existing
//! row, and the statements a dialect writes its own way (collection of dead sessions,
//! release, close). Every statement is written once as a template and rendered for each
//! dialect when first used.
//!
//! Templates name their parameters `:1`, `:2`, ... (a parameter may appear several times) and
//! the database's clock `{now}`, in integer milliseconds since the Unix epoch (rule B2).
//! Rendering turns `:n` into `?n` (SQLite), `$n` (PostgreSQL) or `?` (MySQL, which binds by
//! position: the rendered statement remembers which argument each `?` takes).
//!
//! Each dialect's own SQL is in its folder as `.sql` files, included at compile time
//! (`include_str!`): single statements and stored routines one per file, schemas as scripts of
//! several statements that [`script`] splits. A file's text is sent as it is but for the
//! substitutions its Rust side names: `{now}` and `:n` by [`Stmt::render`], and the few
//! values a statement writes into its text (documented where the file is included).

use sqlx::{Arguments, Database, Encode, Type};

/// How a dialect writes a statement's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placeholders {
    /// `?1`, `?2` (SQLite) or `$1`, `$2` (PostgreSQL): one value may be used several times.
    #[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
    Numbered(char),
    /// `?`, bound once per use, in order (MySQL).
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    Positional,
}

/// A SQL dialect: the sqlx driver and what its statements write differently. The defaults
/// are the forms SQLite and MySQL share; PostgreSQL overrides the calls that notify
/// candidates of releases.
pub(crate) trait Dialect: Send + Sync + 'static {
    /// The sqlx driver.
    type Db: Database;

    /// The database's name, for messages ("SQLite").
    const NAME: &'static str;

    /// The database's clock in integer milliseconds since the Unix epoch, read when the
    /// expression is evaluated (B2; ADR 0002 says why not `now()` / `NOW(3)`).
    const NOW_MS: &'static str;

    /// How parameters are written.
    const PLACEHOLDERS: Placeholders;

    /// The end of an `INSERT INTO simba_member` that keeps an existing membership unchanged
    /// (its first `joined_at`) but still counts the row as affected, so that "affected no
    /// row" means "the session is not live".
    const KEEP_MEMBER: &'static str;

    /// What `open_session` runs before inserting the session (`:1` the grace period in
    /// ms): collects sessions dead for longer than the grace period, with their
    /// memberships, and clears their leases' holder (lease rows are kept: T3). Leases first,
    /// the lock order of acquisition.
    const COLLECT: &'static [&'static str] = &[
        "UPDATE simba_lease SET session_id = NULL WHERE session_id IN \
         (SELECT id FROM simba_session WHERE expires_at < {now} - :1)",
        "DELETE FROM simba_member WHERE session_id IN (SELECT id FROM simba_session WHERE expires_at < {now} - :1)",
        "DELETE FROM simba_session WHERE expires_at < {now} - :1",
    ];

    /// Frees lease `:1` only for session `:2` and token `:3`, the term that holds it (T7);
    /// affects one row when it did.
    const RELEASE: &'static str =
        "UPDATE simba_lease SET session_id = NULL WHERE name = :1 AND session_id = :2 AND token = :3";

    /// Closes session `:1` (S4): frees its leases, ends its memberships, deletes it; leases
    /// first (the lock order of acquisition). Several statements run in one transaction.
    const CLOSE: &'static [&'static str] = &[
        "UPDATE simba_lease SET session_id = NULL WHERE session_id = :1",
        "DELETE FROM simba_member WHERE session_id = :1",
        "DELETE FROM simba_session WHERE id = :1",
    ];

    /// [`Backend::remove_idle_leases`](crate::backend::Backend::remove_idle_leases), rule B3:
    /// the floor's row made if missing (committed on its own, before any removal, so that an
    /// insert's read of the floor always finds a row to wait on); then, in one transaction,
    /// the floor raised to the highest token among up to `:3` idle rows whose name starts with
    /// `:1` (idle: released, no slot ledger, not acquired for `:2` ms), and the idle rows with
    /// a token at most the floor deleted, at most `:3` of them. Whatever changed between the
    /// two, a deleted row's token is at most the floor, which the transaction holds locked; an
    /// insert of a new row reads the floor under a lock that waits for it (T3).
    const REMOVE_IDLE: [&'static str; 3];

    /// The statement that starts a transaction of several statements (`None`: the driver's
    /// `BEGIN`).
    const BEGIN: Option<&'static str> = None;

    /// Whether `open_session` runs its statements in one transaction (one write lock and one
    /// commit on SQLite) rather than one by one.
    const OPEN_IN_TRANSACTION: bool = false;

    /// Whether a broken connection makes the store close every idle pooled connection too
    /// (servers: a restart broke them all; not SQLite, whose in-memory database lives in its
    /// one connection).
    const DISCARD_IDLE: bool = true;

    /// The rows a statement affected.
    fn rows_affected(done: &<Self::Db as Database>::QueryResult) -> u64;

    /// The shared statements rendered for this dialect, once.
    fn statements() -> &'static Shared;

    /// `template` rendered for this dialect.
    fn render(template: &str) -> Stmt {
        Stmt::render(template, Self::NOW_MS, Self::PLACEHOLDERS)
    }
}

/// The statements of a schema script (a dialect's `schema.sql`, `jobs_schema.sql`), in order.
///
/// A statement ends with `;` at the end of a line; the comment lines (`--`) before a statement
/// are for the people who read the file or run it by hand, and are not sent. No statement of
/// a script may hold `;` at the end of one of its lines: routines, whose bodies do, are files of
/// their own.
pub(crate) fn script(text: &'static str) -> Vec<&'static str> {
    text.split(";\n")
        .map(|s| {
            let mut s = s.trim();
            while s.starts_with("--") {
                s = s.split_once('\n').map_or("", |(_, rest)| rest).trim_start();
            }
            s.trim_end_matches(';').trim_end()
        })
        .filter(|s| !s.is_empty())
        .collect()
}

/// One statement rendered for one dialect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stmt {
    text: String,
    /// For each placeholder of `text`, in order, the index of the argument it takes.
    order: Vec<usize>,
}

impl Stmt {
    /// Renders `template` with the clock expression `now` and the placeholders `style`.
    pub(crate) fn render(template: &str, now: &str, style: Placeholders) -> Stmt {
        let template = template.replace("{now}", now);
        let (mut text, mut order) = (String::with_capacity(template.len()), Vec::new());
        let mut rest = template.as_str();
        while let Some(at) = rest.find(':') {
            let digits = rest[at + 1..].bytes().take_while(u8::is_ascii_digit).count();
            // `::bigint` (a cast), `:=` (PL/pgSQL) and `'12:30'` (a time) are not parameters.
            let before = rest[..at].chars().next_back().or_else(|| text.chars().next_back());
            let is_param = digits > 0 && !before.is_some_and(|c| c == ':' || c.is_alphanumeric());
            let end = at + 1 + digits;
            match rest[at + 1..end].parse::<usize>() {
                Ok(n) if is_param && n > 0 => {
                    text.push_str(&rest[..at]);
                    match style {
                        Placeholders::Numbered(c) => {
                            text.push(c);
                            text.push_str(&n.to_string());
                            order.resize(order.len().max(n), 0);
                        }
                        Placeholders::Positional => {
                            text.push('?');
                            order.push(n - 1);
                        }
                    }
                }
                _ => text.push_str(&rest[..end]),
            }
            rest = &rest[end..];
        }
        text.push_str(rest);
        if let Placeholders::Numbered(_) = style {
            order = (0..order.len()).collect();
        }
        Stmt { text, order }
    }

    /// The statement's text, for the driver. Statements are rendered once per dialect, into
    /// statics.
    pub(crate) fn sql(&'static self) -> &'static str {
        &self.text
    }

    /// The statement's text.
    #[cfg(test)]
    fn text(&self) -> &str {
        &self.text
    }

    /// The driver's arguments for `params` (`params[0]` is `:1`).
    pub(crate) fn args<DB: Database>(&self, params: &[Param<'_>]) -> Result<DB::Arguments, sqlx::error::BoxDynError>
    where
        for<'a> &'a str: Encode<'a, DB> + Type<DB>,
        for<'a> i64: Encode<'a, DB> + Type<DB>,
    {
        let mut args = DB::Arguments::default();
        for &i in &self.order {
            match params.get(i) {
                Some(Param::Text(s)) => args.add(*s)?,
                Some(Param::Int(v)) => args.add(*v)?,
                None => return Err(format!("no argument :{} for {}", i + 1, self.text).into()),
            }
        }
        Ok(args)
    }
}

/// A statement's argument.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Param<'a> {
    /// A name or an id.
    Text(&'a str),
    /// A token, a slot, a time in milliseconds.
    Int(i64),
}

impl<'a> From<&'a str> for Param<'a> {
    fn from(s: &'a str) -> Self {
        Param::Text(s)
    }
}

impl From<i64> for Param<'_> {
    fn from(v: i64) -> Self {
        Param::Int(v)
    }
}

/// The statements every dialect runs, rendered for one.
#[derive(Debug)]
pub(crate) struct Shared {
    /// [`Dialect::COLLECT`].
    pub(crate) collect: Vec<Stmt>,
    /// `:1` id, `:2` ttl in ms: a new session, on the database's clock.
    pub(crate) insert_session: Stmt,
    /// [`Dialect::RELEASE`].
    pub(crate) release: Stmt,
    /// [`Dialect::CLOSE`].
    pub(crate) close: Vec<Stmt>,
    /// `:1` session id: its leases, by name; nothing for an expired session (its leases are
    /// free for others).
    pub(crate) owned: Stmt,
    /// `:1` name, `:2` session id, `:3` token, `:4` slot: one statement, so the holder
    /// check and the monotonic write of `last_slot` are atomic.
    pub(crate) claim_slot: Stmt,
    /// `:1` group, `:2` session id: joins only a live session; affects no row when the
    /// session is not live ([`Dialect::KEEP_MEMBER`]).
    pub(crate) join: Stmt,
    /// `:1` group, `:2` session id.
    pub(crate) leave: Stmt,
    /// `:1` group: the live members, by id. Members whose session expired are hidden
    /// (membership ends with the session); their rows are collected later. Ids are compared
    /// byte by byte on every dialect (ADR 0002), the order of [`SessionId`]'s `Ord`.
    ///
    /// [`SessionId`]: crate::backend::SessionId
    pub(crate) members: Stmt,
    /// [`Dialect::REMOVE_IDLE`].
    pub(crate) remove_idle: [Stmt; 3],
    /// The database's clock.
    pub(crate) now: Stmt,
    /// `:1` the database's clock: live sessions `(id, age, remaining)`, held leases
    /// `(name, holder, token, acquired_at)`, live memberships `(group, session)`.
    pub(crate) inspect: [Stmt; 3],
}

impl Shared {
    /// The shared statements rendered for `D`.
    pub(crate) fn new<D: Dialect>() -> Shared {
        let all = |templates: &[&str]| templates.iter().map(|t| D::render(t)).collect::<Vec<_>>();
        Shared {
            collect: all(D::COLLECT),
            insert_session: D::render(
                "INSERT INTO simba_session (id, expires_at, ttl_ms, created_at) \
                 SELECT :1, now_ms + :2, :2, now_ms FROM (SELECT {now} AS now_ms) clock",
            ),
            release: D::render(D::RELEASE),
            close: all(D::CLOSE),
            owned: D::render(
                "SELECT name, token FROM simba_lease WHERE session_id = :1 AND EXISTS \
                 (SELECT 1 FROM simba_session WHERE id = :1 AND expires_at > {now}) ORDER BY name",
            ),
            claim_slot: D::render(
                "UPDATE simba_lease SET last_slot = :4 WHERE name = :1 AND session_id = :2 AND token = :3 \
                 AND (last_slot IS NULL OR last_slot < :4) AND EXISTS \
                 (SELECT 1 FROM simba_session WHERE id = :2 AND expires_at > {now})",
            ),
            join: D::render(&format!(
                "INSERT INTO simba_member (group_name, session_id, joined_at) SELECT :1, id, {{now}} \
                 FROM simba_session WHERE id = :2 AND expires_at > {{now}} {}",
                D::KEEP_MEMBER
            )),
            leave: D::render("DELETE FROM simba_member WHERE group_name = :1 AND session_id = :2"),
            members: D::render(
                "SELECT m.session_id FROM simba_member m JOIN simba_session s ON s.id = m.session_id \
                 WHERE m.group_name = :1 AND s.expires_at > {now} ORDER BY m.session_id",
            ),
            remove_idle: D::REMOVE_IDLE.map(D::render),
            now: D::render("SELECT {now}"),
            inspect: [
                D::render("SELECT id, :1 - created_at, expires_at - :1 FROM simba_session WHERE expires_at > :1"),
                D::render(
                    "SELECT l.name, l.session_id, l.token, l.acquired_at FROM simba_lease l \
                     JOIN simba_session s ON s.id = l.session_id WHERE s.expires_at > :1",
                ),
                D::render(
                    "SELECT m.group_name, m.session_id FROM simba_member m \
                     JOIN simba_session s ON s.id = m.session_id WHERE s.expires_at > :1",
                ),
            ],
        }
    }
}

/// Begins a transaction on `pool` the dialect's way ([`Dialect::BEGIN`]), safe to cancel.
///
/// sqlx 0.9's `begin` is not, on PostgreSQL and MySQL: a future dropped while its `BEGIN` round
/// trip is in flight leaves the server session inside a transaction that nothing rolls back,
/// and the pool hands that connection out again, every statement on it failing with "current
/// transaction is aborted" until the server's idle-in-transaction timeout kills it (found by
/// the multi-process schedules test, where claims time out under load; a known sqlx defect). So
/// there the `BEGIN` runs in a task of its own: a caller that gives up drops a transaction
/// that did begin, which rolls back and returns its connection clean. SQLite's begin is safe
/// (sqlx rolls back a `BEGIN` dropped midway there) and its claims are the hot path: awaited
/// in place.
pub(crate) async fn begin<D: Dialect>(
    pool: &sqlx::Pool<D::Db>,
) -> Result<sqlx::Transaction<'static, D::Db>, sqlx::Error> {
    if let Some(statement) = D::BEGIN {
        return pool.begin_with(statement).await;
    }
    let pool = pool.clone();
    tokio::spawn(async move { pool.begin().await })
        .await
        .map_err(|e| sqlx::Error::Protocol(format!("the task that began the transaction failed: {e}")))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_placeholders_keep_their_numbers() {
        let s = Stmt::render("SELECT :1, :2 WHERE x = :1 AND t > {now}", "now()", Placeholders::Numbered('$'));
        assert_eq!(s.text(), "SELECT $1, $2 WHERE x = $1 AND t > now()");
        assert_eq!(s.order, vec![0, 1]);
        let s = Stmt::render("VALUES (:2, :1)", "n", Placeholders::Numbered('?'));
        assert_eq!((s.text(), s.order.as_slice()), ("VALUES (?2, ?1)", &[0, 1][..]));
    }

    #[test]
    fn positional_placeholders_bind_once_per_use() {
        let s =
            Stmt::render("SET a = :4 WHERE n = :1 AND s = :2 AND b < :4 AND id = :2", "n", Placeholders::Positional);
        assert_eq!(s.text(), "SET a = ? WHERE n = ? AND s = ? AND b < ? AND id = ?");
        assert_eq!(s.order, vec![3, 0, 1, 3, 1]);
    }

    #[test]
    fn scripts_split_at_line_ends_and_drop_comments() {
        let text = "-- a comment\n-- on two lines\nCREATE TABLE a (\n    x INT\n);\n\nCREATE INDEX i ON a (x);\n-- last\nINSERT INTO a VALUES (';');\n";
        assert_eq!(
            script(text),
            ["CREATE TABLE a (\n    x INT\n)", "CREATE INDEX i ON a (x)", "INSERT INTO a VALUES (';')"]
        );
    }

    #[test]
    fn casts_assignments_and_times_are_not_parameters() {
        let s = Stmt::render("SELECT x::bigint, '12:30', :1 INTO v; v := 1", "n", Placeholders::Positional);
        assert_eq!(s.text(), "SELECT x::bigint, '12:30', ? INTO v; v := 1");
        assert_eq!(s.order, vec![0]);
    }
}
