//! The cron parser and the time-zone lookup, once for every caller: the runtime's schedules
//! (code-defined jobs, `simba.toml` overrides) and the schedules stored as data
//! ([`schedules`](crate::schedules)) parse with the same settings as the macros check cron
//! strings at compile time (`simba_rules::cron`), so one expression means one thing everywhere.

use std::str::FromStr;

use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

/// The croner parser with the settings of `simba_rules::cron`, the ones the macros check
/// cron strings with at compile time.
fn cron_parser() -> CronParser {
    use simba_rules::cron::{Field, SECONDS, YEAR};
    let seconds = match SECONDS {
        Field::Required => Seconds::Required,
        Field::Optional => Seconds::Optional,
        Field::Disallowed => Seconds::Disallowed,
    };
    let year = match YEAR {
        Field::Required => Year::Required,
        Field::Optional => Year::Optional,
        Field::Disallowed => Year::Disallowed,
    };
    CronParser::builder().seconds(seconds).year(year).build()
}

/// Parses a 6-field cron expression with seconds (the macros use the same parser); the error
/// says what the expression should look like.
pub fn parse_cron(expr: &str) -> Result<Cron, String> {
    cron_parser().parse(expr).map_err(|e| {
        format!("invalid cron expression {expr:?} (6 fields with seconds first, e.g. \"0 */5 * * * *\"): {e}")
    })
}

/// Parses an IANA time zone name; the error names a valid one.
pub fn parse_time_zone(name: &str) -> Result<Tz, String> {
    Tz::from_str(name)
        .map_err(|_| format!("unknown time zone {name:?}: use an IANA name such as \"Europe/Berlin\" or \"UTC\""))
}
