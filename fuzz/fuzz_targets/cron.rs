//! Cron strings with time zones. Any string: the cron and zone parsers return, and an error
//! quotes the input. A parsed cron in a parsed zone: its next slot after an instant is later,
//! on a whole second, and matches the expression. A cron of literal second and minute
//! (`S M * * * *`) in a zone with DST or an odd offset: the next slot is on second `S` and
//! comes within three hours (one hour plus Antarctica/Troll's two-hour shift).

#![no_main]

use chrono::{DateTime, TimeZone, Timelike, Utc};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use simba::job::{parse_cron, parse_time_zone};

const ZONES: &[&str] = &[
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "America/Sao_Paulo",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "Asia/Kolkata",
    "Africa/Casablanca",
    "Antarctica/Troll",
    "America/St_Johns",
    "Europe/Dublin",
    "Pacific/Apia",
];

/// 1970 to 2100, so that every instant has a successor chrono can represent.
const SPAN: i64 = 4_102_444_800;

#[derive(Arbitrary, Debug)]
enum Input {
    /// Any cron string and zone name.
    Free { expr: String, zone: String, at: i64 },
    /// Any cron string in a known zone.
    Zoned { expr: String, zone: u8, at: i64 },
    /// `S M * * * *` in a known zone.
    Hourly { sec: u8, min: u8, zone: u8, at: i64 },
}

fn instant(at: i64) -> DateTime<Utc> {
    match Utc.timestamp_opt(at.rem_euclid(SPAN), 0) {
        chrono::LocalResult::Single(t) => t,
        _ => panic!("{at} is in range"),
    }
}

fn next_slot(expr: &str, zone: &str, at: i64) {
    let cron = match parse_cron(expr) {
        Ok(c) => Some(c),
        Err(e) => {
            assert!(e.contains(&format!("{expr:?}")), "the cron error does not quote {expr:?}: {e}");
            None
        }
    };
    let tz = match parse_time_zone(zone) {
        Ok(z) => Some(z),
        Err(e) => {
            assert!(e.contains(&format!("{zone:?}")), "the zone error does not quote {zone:?}: {e}");
            None
        }
    };
    let (Some(cron), Some(tz)) = (cron, tz) else { return };
    let start = instant(at);
    // An expression may have no slot at all (`0 0 0 30 2 *`): an error, not a panic.
    let Ok(next) = cron.find_next_occurrence(&start.with_timezone(&tz), false) else { return };
    let next_utc = next.with_timezone(&Utc);
    assert!(next_utc > start, "{expr:?} in {zone}: {next_utc} is not after {start}");
    assert_eq!(next.nanosecond(), 0, "{expr:?} in {zone}: {next} is not on a second");
    assert!(
        matches!(cron.is_time_matching(&next), Ok(true)),
        "{expr:?} in {zone}: the next slot {next} does not match the expression"
    );
}

fuzz_target!(|input: Input| {
    match input {
        Input::Free { expr, zone, at } => next_slot(&expr, &zone, at),
        Input::Zoned { expr, zone, at } => next_slot(&expr, ZONES[usize::from(zone) % ZONES.len()], at),
        Input::Hourly { sec, min, zone, at } => {
            let (sec, min) = (u32::from(sec) % 60, u32::from(min) % 60);
            let zone = ZONES[usize::from(zone) % ZONES.len()];
            let expr = format!("{sec} {min} * * * *");
            let cron = match parse_cron(&expr) {
                Ok(c) => c,
                Err(e) => panic!("{expr:?} does not parse: {e}"),
            };
            let tz = match parse_time_zone(zone) {
                Ok(z) => z,
                Err(e) => panic!("{zone} does not parse: {e}"),
            };
            let start = instant(at);
            let next = match cron.find_next_occurrence(&start.with_timezone(&tz), false) {
                Ok(n) => n.with_timezone(&Utc),
                Err(e) => panic!("{expr} in {zone} after {start}: {e}"),
            };
            assert!(next > start, "{expr} in {zone}: {next} is not after {start}");
            assert_eq!(next.second(), sec, "{expr} in {zone} after {start}: {next}");
            assert!(next - start <= chrono::Duration::hours(3), "{expr} in {zone}: {next} after {start}");
        }
    }
});
