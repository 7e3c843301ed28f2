//! Value parsers the commands share.

/// An RFC 3339 instant.
pub(crate) fn instant(s: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&chrono::Utc))
        .map_err(|e| format!("{e}: give an RFC 3339 instant, e.g. 2027-01-01T00:00:00Z"))
}

/// An RFC 3339 instant, as unix milliseconds.
pub(crate) fn instant_ms(s: &str) -> Result<i64, String> {
    instant(s).map(|t| t.timestamp_millis())
}

/// The range and budget of a backfill, as `simba backfill` and `simba schedules backfill` take
/// them.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct BackfillRange {
    /// The range's first instant (RFC 3339, e.g. 2027-01-01T00:00:00Z).
    #[arg(long, value_name = "TIME", value_parser = instant)]
    from: chrono::DateTime<chrono::Utc>,
    /// The range's last instant, included (RFC 3339).
    #[arg(long, value_name = "TIME", value_parser = instant)]
    to: chrono::DateTime<chrono::Utc>,
    /// At most this many runs per second (e.g. 2, or 0.1 for one run every 10 s).
    #[arg(long, value_name = "RUNS_PER_SECOND", allow_hyphen_values = true)]
    rate: f64,
    /// Print the plan only; nothing is stored.
    #[arg(long)]
    dry_run: bool,
}

impl BackfillRange {
    /// The backfill asked by `who`, with `note`.
    pub(crate) fn ask(&self, who: String, note: Option<&String>) -> simba::admin::BackfillAsk {
        let mut ask = simba::admin::BackfillAsk::new(self.from, self.to, self.rate).by(who);
        if let Some(n) = note {
            ask = ask.with_note(n.clone());
        }
        if self.dry_run {
            ask = ask.dry_run();
        }
        ask
    }
}
