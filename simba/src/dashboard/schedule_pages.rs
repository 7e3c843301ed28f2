//! The schedules pages' markup (maud: every interpolated value is HTML-escaped, ids, notes,
//! payloads and names alike): the listing with its search form and next-page link, a
//! schedule's page, and the pages that say why there is nothing to show. Their data is
//! `super::schedules`.

use std::time::Duration;

use maud::{Markup, html};

use super::pages::{encode, history_table, ms_clock, outcome_badge};
use super::schedules::{AUDIT, Detail, FIRES, ListParams, ListRow, Listing, PAGE_SIZE, Problem};
use crate::schedule_store::{Schedule, ScheduleSpec, job_name};

/// `schedules/ID` (relative to the page's `<base>`).
pub(crate) fn schedule_path(id: &str) -> String {
    format!("schedules/{}", encode(id))
}

/// The listing's link for `params` after `after` (the next page).
fn next_path(params: &ListParams, after: &str) -> String {
    let mut path = format!("schedules?after={}", encode(after));
    if let Some(p) = params.prefix() {
        path.push_str(&format!("&prefix={}", encode(p)));
    }
    if let Some(h) = params.handler() {
        path.push_str(&format!("&handler={}", encode(h)));
    }
    path
}

/// A schedule's when, as `simba schedules list` writes it (a period in words).
pub(crate) fn when_text(spec: &ScheduleSpec) -> String {
    match spec {
        ScheduleSpec::FixedRate { period_ms } => {
            format!("every {}", humantime::format_duration(Duration::from_millis(*period_ms)))
        }
        spec => spec.to_string(),
    }
}

/// Why a page has nothing to show, as its content.
pub(crate) fn problem(p: &Problem) -> Markup {
    html! {
        @match p {
            Problem::NoStore(why) => p.empty #no-schedules {
                "This backend keeps no schedules stored as data (" (why) "). "
                "Jobs defined in code are on the " a href="jobs" { "jobs page" } "."
            },
            Problem::Invalid(why) => div.error #refused role="alert" {
                strong { "Refused" } ": " span.error-text { (why) }
            },
            Problem::NotFound { id, nearest } => p.empty #unknown-schedule {
                "No schedule " code { (id) } " in this namespace."
                @if let Some(n) = nearest {
                    " Did you mean " a #nearest href=(schedule_path(n)) { code { (n) } } "?"
                }
                " " a href="schedules" { "All schedules" }
            },
            Problem::Failed(why) => div.error role="alert" {
                strong { "Cannot read the schedule store" } ": " span.error-text { (why) }
            },
        }
    }
}

/// The search form: id prefix and handler, as GET parameters of the listing.
fn search(params: &ListParams) -> Markup {
    html! {
        form.search #search method="get" action="schedules" {
            label { "id prefix " input type="search" name="prefix" value=(params.prefix().unwrap_or_default()); }
            " "
            label { "handler " input type="search" name="handler" value=(params.handler().unwrap_or_default()); }
            " "
            button type="submit" { "Search" }
            @if params.prefix().is_some() || params.handler().is_some() || params.after().is_some() {
                " " a href="schedules" { "clear" }
            }
        }
    }
}

/// `/schedules`: the search form and one page of schedules (or why there is none).
pub(crate) fn list_page(params: &ListParams, listing: &Result<Listing, Problem>) -> Markup {
    html! {
        @if let Err(Problem::NoStore(_)) = listing {} @else { (search(params)) }
        @match listing {
            Err(p) => (problem(p)),
            Ok(l) => {
                h2 {
                    "Schedules (" (l.rows.len())
                    @if l.next.is_some() { " on this page, " (PAGE_SIZE) " per page" }
                    @if let Some(a) = params.after() { ", after " code { (a) } }
                    ")"
                }
                table.grid.schedules {
                    thead {
                        tr {
                            th { "Id" } th { "Handler" } th { "When" } th { "Paused" } th.r { "Partition" }
                            th.r { "Revision" } th { "Last run" }
                        }
                    }
                    tbody #schedules {
                        @for row in &l.rows { (list_row(row)) }
                        @if l.rows.is_empty() { tr { td.empty colspan="7" { "No schedule matches." } } }
                    }
                }
                @if let Some(next) = &l.next {
                    p { a #next-page href=(next_path(params, next)) { "next page →" } }
                }
            }
        }
    }
}

fn list_row(row: &ListRow) -> Markup {
    let s = &row.schedule;
    html! {
        tr data-schedule=(s.id) data-paused=(s.paused) {
            td { a href=(schedule_path(&s.id)) { code { (s.id) } } }
            td { code { (s.handler) } }
            td { code { (when_text(&s.spec)) } }
            td { (paused(s)) }
            td.r.num { (s.partition) }
            td.r.num { (s.revision) }
            td {
                @match &row.last {
                    Some(r) => { (outcome_badge(r.outcome)) " " span.dim { (ms_clock(r.slot_ms)) } },
                    None => span.dim { "none yet" },
                }
            }
        }
    }
}

fn paused(s: &Schedule) -> Markup {
    html! {
        @if s.paused {
            span.badge.warn.paused { "paused" }
            @if let Some(n) = &s.pause_note { " " span.note { (n) } }
        } @else {
            span.dim { "no" }
        }
    }
}

/// `/schedules/{id}`: the definition, the actions (with actions on), the next fires, the
/// history of `schedule/<id>` and the audit trail.
pub(crate) fn detail_page(d: &Detail, actions: bool) -> Markup {
    let s = &d.schedule;
    html! {
        section.schedule data-schedule=(s.id) data-paused=(s.paused) {
            h2 { "Schedule " code { (s.id) } @if s.paused { " " span.badge.warn.paused { "paused" } } }
            (definition(s))
            @if actions { (buttons(s)) }
            h2 { "Next " (FIRES) " fires" }
            @match &d.fires {
                Ok(f) if f.is_empty() => p.empty { "No fire ahead." },
                Ok(f) => ol #fires { @for t in f { li.num { (ms_clock(*t)) } } },
                Err(e) => div.error role="alert" { span.error-text { (e) } },
            }
            h2 { "History of " code { (job_name(&s.id)) } " (newest first, last " (super::source::HISTORY) ")" }
            @match &d.history {
                Ok(records) => (history_table(records)),
                Err(e) => p.empty { (e) },
            }
            h2 { "Audit trail (newest first, last " (AUDIT) ")" }
            (audit(d))
        }
    }
}

fn definition(s: &Schedule) -> Markup {
    html! {
        table.grid.definition {
            tbody {
                tr { th { "Handler" } td { code { (s.handler) } } }
                tr { th { "When" } td { code { (when_text(&s.spec)) } } }
                tr { th { "Payload" } td { pre #payload { (s.payload) } } }
                tr { th { "Policies" } td { (s.policies.summary()) } }
                tr { th { "Paused" } td #paused { (paused(s)) } }
                tr { th { "Partition" } td.num { (s.partition) } }
                tr { th { "Revision" } td.num { (s.revision) } }
                tr { th { "Created" } td { (ms_clock(s.created_ms)) " by " span.who { (s.created_by) } } }
                tr { th { "Updated" } td { (ms_clock(s.updated_ms)) " by " span.who { (s.updated_by) } } }
            }
        }
    }
}

/// Pause (with the note typed beside it) or resume, and run now; `assets/app.js` posts them
/// with the token.
fn buttons(s: &Schedule) -> Markup {
    html! {
        p.actions {
            input #note type="text" maxlength="1024" placeholder="note for the audit trail (the pause's reason)";
            " "
            @if s.paused {
                button.act type="button" data-schedule=(s.id) data-action="resume" { "Resume" }
            } @else {
                button.act type="button" data-schedule=(s.id) data-action="pause" { "Pause" }
            }
            " "
            button.act type="button" data-schedule=(s.id) data-action="trigger" { "Run now" }
        }
    }
}

fn audit(d: &Detail) -> Markup {
    html! {
        @match &d.audit {
            Err(e) => div.error role="alert" { span.error-text { (e) } },
            Ok(records) => table.grid.audit {
                thead { tr { th { "When" } th { "Who" } th { "Action" } th { "Note" } } }
                tbody #audit {
                    @for r in records {
                        tr data-action=(r.action.as_str()) {
                            td.num { (ms_clock(r.at_ms)) }
                            td.who { (r.who) }
                            td { (r.action.as_str()) }
                            td.note { @if let Some(n) = &r.note { (n) } }
                        }
                    }
                    @if records.is_empty() { tr { td.empty colspan="4" { "No audit record." } } }
                }
            },
        }
    }
}
