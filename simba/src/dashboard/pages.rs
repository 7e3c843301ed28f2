//! The pages, rendered on the server with maud (every interpolated value is HTML-escaped).
//! A page is the layout around its `<main>`; the event stream sends `<main>`'s new content on
//! every refresh and the page's script patches it in place.

use std::time::{Duration, SystemTime};

use maud::{DOCTYPE, Markup, html};

use super::history::{Change, Held};
use super::jobs::{JobRow, JobsView, took};
use super::model::{Balance, Cluster, GroupView, Holder, Model, SessionRow, split_partitions};
use super::text::human;
use crate::backend::SessionId;
use crate::job_store::{Outcome, RunRecord};

/// A page of the dashboard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Page {
    Overview,
    Leases,
    Groups,
    Jobs,
    /// One job's history.
    Job(String),
}

impl Page {
    /// The pages in the navigation.
    pub(crate) const ALL: [Page; 4] = [Page::Overview, Page::Leases, Page::Groups, Page::Jobs];

    /// The page's name in `/events/{name}` (`job` for a job page).
    pub(crate) fn slug(&self) -> &'static str {
        match self {
            Page::Overview => "overview",
            Page::Leases => "leases",
            Page::Groups => "groups",
            Page::Jobs => "jobs",
            Page::Job(_) => "job",
        }
    }

    /// The page's link, relative to the page's `<base>` (the mount prefix): no link of a page
    /// starts with `/`, so the dashboard works under whatever prefix a service mounts it.
    pub(crate) fn path(&self) -> String {
        match self {
            Page::Overview => ".".to_owned(),
            Page::Leases => "leases".to_owned(),
            Page::Groups => "groups".to_owned(),
            Page::Jobs => "jobs".to_owned(),
            Page::Job(job) => job_path(job),
        }
    }

    /// The page's link in the navigation: [`Page::path`], but the overview's is the mount
    /// prefix itself (`/simba`), since a service's router reaches a nested router's root
    /// only without the trailing slash that `./` would resolve to.
    fn nav_link(&self, base: &str) -> String {
        match self {
            Page::Overview if base.is_empty() => "/".to_owned(),
            Page::Overview => base.to_owned(),
            p => p.path(),
        }
    }

    /// Where the page's event stream is, relative to the `<base>` as [`Page::path`].
    pub(crate) fn events(&self) -> String {
        match self {
            Page::Job(job) => format!("events/job/{}", encode(job)),
            p => format!("events/{}", p.slug()),
        }
    }

    fn title(&self) -> String {
        match self {
            Page::Overview => "Overview".to_owned(),
            Page::Leases => "Leases".to_owned(),
            Page::Groups => "Groups".to_owned(),
            Page::Jobs => "Jobs".to_owned(),
            Page::Job(job) => format!("Job {job}"),
        }
    }

    /// The page in the navigation that is highlighted for this one.
    fn tab(&self) -> Page {
        match self {
            Page::Job(_) => Page::Jobs,
            p => p.clone(),
        }
    }

    pub(crate) fn from_slug(s: &str) -> Option<Page> {
        Page::ALL.into_iter().find(|p| p.slug() == s)
    }
}

/// `jobs/NAME` (relative, as [`Page::path`]), the name percent-encoded (its `/` kept:
/// partitions are `g/i`, and the link resolves against the `<base>`, not the current page).
pub(crate) fn job_path(job: &str) -> String {
    format!("jobs/{}", encode(job))
}

/// Percent-encodes everything but unreserved characters and `/`.
pub(crate) fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/:".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// What the layout around a page's `<main>` needs: its title, its name, its event stream
/// (`None`: a page rendered per request, such as the schedules pages, which is not patched
/// live) and the navigation entry it highlights.
pub(crate) struct Frame {
    pub(crate) title: String,
    pub(crate) slug: &'static str,
    pub(crate) events: Option<String>,
    pub(crate) tab: Tab,
}

/// A navigation entry: a page of the model, or the schedules pages (read from the schedule
/// store on each request, `super::schedules`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tab {
    Page(Page),
    Schedules,
}

impl Frame {
    fn of(page: &Page) -> Frame {
        Frame { title: page.title(), slug: page.slug(), events: Some(page.events()), tab: Tab::Page(page.tab()) }
    }
}

/// The whole page. `base` is the path prefix the browser reaches the dashboard under (`""` at
/// the root, `"/simba"` when a service nests it there): the page's `<base>`, against which every
/// relative link, asset, event stream and action of the page resolves.
pub(crate) fn page(page: &Page, model: &Model, base: &str) -> Markup {
    layout(&Frame::of(page), model, base, main(page, model))
}

/// The layout around `content` (the `<main>` of the page `frame` describes).
pub(crate) fn layout(frame: &Frame, model: &Model, base: &str, content: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "simba · " (frame.title) }
                base href=(format!("{base}/"));
                link rel="icon" href="assets/icon.svg" type="image/svg+xml";
                link rel="stylesheet" href="assets/app.css";
                script src="assets/app.js" defer {}
            }
            body data-page=(frame.slug) data-events=[frame.events.as_deref()] {
                header.top {
                    span.brand { "simba" }
                    nav {
                        @for p in Page::ALL {
                            a.tab.active[frame.tab == Tab::Page(p.clone())] href=(p.nav_link(base)) { (p.title()) }
                        }
                        a.tab.active[frame.tab == Tab::Schedules] href="schedules" { "Schedules" }
                    }
                    span.backend title="the backend this dashboard reads" { (model.backend) }
                    @if model.actions {
                        input #token type="password" autocomplete="off" placeholder="action token"
                            title="the token of [dashboard] token_file; kept in this tab only (sessionStorage)";
                    }
                    span.mode title="POST actions" { @if model.actions { "actions on" } @else { "read-only" } }
                    @if frame.events.is_some() {
                        span #live .live.off title="live updates" { "connecting" }
                    } @else {
                        span #live .live.off title="this page is read from the store when loaded" { "reload to refresh" }
                    }
                }
                @if model.actions { div #flash role="status" hidden {} }
                main #main { (content) }
            }
        }
    }
}

/// The content of `<main>`.
pub(crate) fn main(page: &Page, model: &Model) -> Markup {
    html! {
        (status(model))
        @if let (Some(c), Some(jobs)) = (&model.cluster, &model.jobs) {
            @match page {
                Page::Overview => (overview(c)),
                Page::Leases => (leases(c)),
                Page::Groups => (groups(c)),
                Page::Jobs => (jobs_page(jobs, c, model)),
                Page::Job(job) => (job_page(job, jobs, c, model)),
            }
        } @else {
            p.empty { "No reading yet." }
        }
    }
}

fn status(model: &Model) -> Markup {
    let clock = match &model.cluster {
        Some(c) if c.store_clock => "times on the backend's clock",
        Some(_) => "times on this dashboard's clock (the backend does not tell its own)",
        None => "",
    };
    html! {
        div.status {
            @if let Some(at) = model.last_ok {
                span { "read " (ago(model.now, at)) " ago" }
                span.sep { "·" }
                span { (clock) }
            }
        }
        @if let Some(e) = &model.error {
            div.error role="alert" {
                strong { "Cannot read the backend" }
                " (showing the last reading): "
                span.error-text { (e) }
            }
        }
    }
}

fn overview(c: &Cluster) -> Markup {
    let balanced = c.groups.iter().filter(|g| g.balance == Balance::Balanced).count();
    html! {
        div.cards {
            div.card { div.num #count-sessions { (c.sessions.len()) } div.label { "sessions" } }
            div.card { div.num #count-leases { (c.leases.len()) } div.label { "leases held" } }
            div.card {
                div.num { (c.groups.len()) }
                div.label { "groups, " (balanced) " balanced" }
            }
        }
        h2 { "Sessions" }
        table.grid {
            thead { tr { th { "Session" } th { "Node" } th.r { "Age" } th.r { "Expires in" } th { "Leases held" } } }
            tbody #sessions {
                @for s in &c.sessions { (session_row(s, c)) }
                @if c.sessions.is_empty() { tr { td.empty colspan="5" { "No live session." } } }
            }
        }
        @if !c.groups.is_empty() {
            h2 { "Groups" }
            table.grid {
                thead { tr { th { "Group" } th.r { "Members" } th { "Partitions" } th { "State" } } }
                tbody {
                    @for g in &c.groups {
                        tr {
                            td { a href="groups" { code { (g.name) } } }
                            td.r { (g.members.len()) }
                            td { div.strip { @for cell in &g.cells { (cell_span(g, &cell.holder, cell.moved.is_some())) } } }
                            td { (balance_badge(g)) }
                        }
                    }
                }
            }
        }
        (feed(c, 8))
    }
}

fn session_row(s: &SessionRow, c: &Cluster) -> Markup {
    let (parts, plain) = split_partitions(&s.leases, &c.groups);
    html! {
        tr data-session=(s.id) {
            td { span class=(swatch(s.color)) {} " " (sid(&s.id, c)) }
            td {
                @match &s.node {
                    Some(n) => { @if n.this_node { span.badge.self_ { "this node" } " " } (n.label) },
                    None => span.dim title="the store does not record which node a session belongs to" { "-" },
                }
            }
            td.r.num { (human(s.age)) }
            td.r.num { (human(s.remaining)) }
            td {
                @for (g, n) in &parts { span.chip title={ (n) " partitions of " (g) } { (g) " ×" (n) } }
                @for l in &plain { span.chip { (l) } }
                @if s.leases.is_empty() { span.dim { "none" } }
            }
        }
    }
}

fn leases(c: &Cluster) -> Markup {
    html! {
        h2 { "Leases held (" (c.leases.len()) ")" }
        table.grid {
            thead { tr { th { "Lease" } th { "Holder" } th.r { "Token" } th.r { "Held for" } th { "Token history (observed, newest last)" } } }
            tbody #leases {
                @for l in &c.leases {
                    tr data-lease=(l.name) {
                        td { code { (l.name) } }
                        td { (holder(&l.holder, c)) }
                        td.r.num { (l.token) }
                        td.r.num { (human(l.held_for)) }
                        td.history {
                            @for e in &l.history {
                                @match &e.held {
                                    Some((t, s)) => span class={ "tok " (color_class(color_of(s, c))) } title={ (t) " held by " (s) ", seen " (clock(e.at)) @if e.initial { " (held when the dashboard started)" } } { (t) },
                                    None => span.tok.free title={ "free, seen " (clock(e.at)) } { "free" },
                                }
                            }
                        }
                    }
                }
                @if c.leases.is_empty() { tr { td.empty colspan="5" { "No lease is held." } } }
            }
        }
        (feed(c, 25))
    }
}

fn feed(c: &Cluster, n: usize) -> Markup {
    html! {
        h2 { "Recent changes" }
        @if c.feed.is_empty() {
            p.empty { "No lease changed hands since this dashboard started." }
        } @else {
            table.grid.feed {
                thead { tr { th.r { "When" } th { "Lease" } th { "From" } th { "To" } } }
                tbody {
                    @for ch in c.feed.iter().take(n) { (change_row(ch, c)) }
                }
            }
        }
    }
}

fn change_row(ch: &Change, c: &Cluster) -> Markup {
    let side = |h: &Option<Held>| {
        html! {
            @match h {
                Some((t, s)) => { (holder(s, c)) " " span.dim { "token " (t) } },
                None => span.dim { "free" },
            }
        }
    };
    html! {
        tr {
            td.r.num title=(clock(ch.at)) { (ago(c.observed_at, ch.at)) " ago" }
            td { code { (ch.lease) } }
            td { (side(&ch.from)) }
            td { (side(&ch.to)) }
        }
    }
}

fn groups(c: &Cluster) -> Markup {
    html! {
        @if c.groups.is_empty() { p.empty { "No group has a live member." } }
        @for g in &c.groups {
            section.group data-group=(g.name) data-members=(g.members.len()) data-partitions=(g.cells.len())
                data-balanced=(g.balance == Balance::Balanced) {
                h2 { code { (g.name) } " " (balance_badge(g)) }
                p.meta {
                    (plural(g.cells.len(), "partition")) " (highest seen + 1) · " (plural(g.members.len(), "member")) " · "
                    @let (min, max) = g.spread();
                    (min) "–" (max) " per member"
                }
                (partition_map(g, c))
                @let moves: Vec<(usize, &SessionId, SystemTime)> = g.cells.iter().enumerate()
                    .filter_map(|(i, cell)| cell.moved.as_ref().map(|(from, at)| (i, from, *at))).collect();
                @if !moves.is_empty() {
                    p.moves {
                        strong { "Moved in the last 10 s (partition: from → to): " }
                        @for (i, from, at) in moves {
                            span.move {
                                "#" (i) " "
                                (sid(from, c))
                                " → "
                                @match &g.cells[i].holder {
                                    Holder::Member(m) => (sid(&g.members[*m].id, c)),
                                    Holder::Other(s) => (sid(s, c)),
                                    Holder::Free => span.dim { "free" },
                                }
                                span.dim { " " (ago(c.observed_at, at)) " ago" }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn partition_map(g: &GroupView, c: &Cluster) -> Markup {
    let free: Vec<bool> = g.cells.iter().map(|x| !matches!(x.holder, Holder::Member(_))).collect();
    html! {
        div.mapwrap {
            table.map {
                thead {
                    tr {
                        th.who { "Member" } th.r { "Held" }
                        @for i in 0..g.cells.len() { th.p { (i) } }
                    }
                }
                tbody {
                    @for (m, member) in g.members.iter().enumerate() {
                        tr data-member=(member.id) {
                            th.who { span class=(swatch(member.color)) {} " " (sid(&member.id, c)) }
                            td.r.num { (member.held) }
                            @for cell in &g.cells {
                                @let mine = cell.holder == Holder::Member(m);
                                td class={ "p" @if mine { " on " (color_class(member.color)) } @if mine && cell.moved.is_some() { " moved" } } {}
                            }
                        }
                    }
                    @if free.iter().any(|f| *f) {
                        tr.unheld {
                            th.who { "free or with a non-member" }
                            td.r.num { (free.iter().filter(|f| **f).count()) }
                            @for cell in &g.cells {
                                @match &cell.holder {
                                    Holder::Free => td class={ "p free" @if cell.moved.is_some() { " moved" } } title="free" {},
                                    Holder::Other(s) => td.p.other title={ "held by " (s) ", not a member" } {},
                                    Holder::Member(_) => td.p {},
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn cell_span(g: &GroupView, h: &Holder, moved: bool) -> Markup {
    let class = match h {
        Holder::Member(m) => color_class(g.members[*m].color),
        Holder::Other(_) => "other".to_owned(),
        Holder::Free => "free".to_owned(),
    };
    html! { span class={ "c " (class) @if moved { " moved" } } {} }
}

fn balance_badge(g: &GroupView) -> Markup {
    html! {
        @match &g.balance {
            Balance::Balanced => span.badge.ok { "balanced" },
            Balance::Rebalancing { free, others } => span.badge.warn {
                "rebalancing: "
                @if *free > 0 { (free) " free" }
                @if *free > 0 && *others > 0 { ", " }
                @if *others > 0 { (others) " with non-members" }
            },
            Balance::Unbalanced { min, max } => span.badge.bad { "unbalanced: " (min) "–" (max) " per member" },
        }
    }
}

fn holder(s: &SessionId, c: &Cluster) -> Markup {
    html! { span class=(swatch(color_of(s, c))) {} " " (sid(s, c)) }
}

/// A session id shortened to its shortest distinct prefix (at least 8 characters), the full
/// id in its title.
fn sid(s: &SessionId, c: &Cluster) -> Markup {
    let n = distinct_prefix(c.sessions.iter().map(|x| x.id.as_str()));
    let short = prefix(s.as_str(), n.max(8));
    html! { code.sid title=(s) { (short) } }
}

fn color_of(s: &SessionId, c: &Cluster) -> usize {
    c.sessions.iter().find(|x| &x.id == s).map_or(usize::MAX, |x| x.color)
}

/// A small square in the colour of a session.
fn swatch(color: usize) -> String {
    format!("sw {}", color_class(color))
}

/// The palette class of a colour index (`mx`: a session not listed).
fn color_class(color: usize) -> String {
    if color == usize::MAX { "mx".to_owned() } else { format!("m{}", color % 8) }
}

fn prefix(id: &str, n: usize) -> &str {
    id.char_indices().nth(n).map_or(id, |(i, _)| &id[..i])
}

fn distinct_prefix<'a>(ids: impl Iterator<Item = &'a str> + Clone) -> usize {
    let longest = ids.clone().map(|id| id.chars().count()).max().unwrap_or(0);
    (8..longest)
        .find(|&n| {
            let mut seen = std::collections::HashSet::new();
            ids.clone().all(|id| seen.insert(prefix(id, n)))
        })
        .unwrap_or(longest)
}

/// `1 member`, `3 members`.
fn plural(n: usize, what: &str) -> String {
    if n == 1 { format!("1 {what}") } else { format!("{n} {what}s") }
}

fn ago(now: SystemTime, at: SystemTime) -> String {
    human(Some(now.duration_since(at).unwrap_or_default()))
}

/// `14:03:05 UTC`.
fn clock(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

fn no_store() -> Markup {
    html! {
        p.empty #no-store {
            "This backend keeps no job history: it was built "
            code { "without_job_store()" }
            "."
        }
    }
}

fn jobs_page(view: &JobsView, c: &Cluster, model: &Model) -> Markup {
    html! {
        @if let JobsView::NoStore = view { (no_store()) } @else {
            @if let JobsView::Failed(e, _) = view {
                div.error role="alert" { strong { "Cannot read the jobs store" } ": " span.error-text { (e) } }
            }
            h2 { "Jobs (" (view.rows().len()) ")" }
            table.grid.jobs {
                thead {
                    tr {
                        th { "Job" } th { "Schedule" } th { "Time zone" } th.r { "Next fire" } th { "Paused" }
                        th { "Holder" } th { "Last outcome" } th { "Last " (super::source::HISTORY) " slots (oldest left)" }
                        @if model.actions { th { "Actions" } }
                    }
                }
                tbody #jobs {
                    @for j in view.rows() {
                        tr data-job=(j.name) data-paused=(j.is_paused()) data-slots=(j.records.len()) {
                            td { a href=(job_path(&j.name)) { code { (j.name) } } }
                            td { @match &j.schedule { Some(s) => code { (s) }, None => span.dim title="not registered by the process serving this dashboard" { "-" } } }
                            td { @match &j.time_zone { Some(z) => (z), None => span.dim { "-" } } }
                            td.r.num { @match j.next_fire { Some(t) => span title=(clock(t)) { "in " (ago(t, c.observed_at)) }, None => span.dim { "-" } } }
                            td { (paused_badge(j)) }
                            td { (job_holder(j, c)) }
                            td { @match &j.last { Some(r) => (outcome_badge(r.outcome)), None if j.in_store => span.dim { "none yet" }, None => span.dim title="registered by the process serving this dashboard; the store has no record of it" { "not run yet" } } }
                            td { (bar(j)) }
                            @if model.actions { td.actions { (buttons(j)) } }
                        }
                    }
                    @if view.rows().is_empty() {
                        tr { td.empty colspan="9" { "No job recorded yet: a job appears once a node ran it, or once it was paused or triggered." } }
                    }
                }
            }
        }
    }
}

fn job_page(job: &str, view: &JobsView, c: &Cluster, model: &Model) -> Markup {
    let row = view.rows().iter().find(|j| j.name == job);
    html! {
        @if let JobsView::NoStore = view { (no_store()) } @else {
            @if let JobsView::Failed(e, _) = view {
                div.error role="alert" { strong { "Cannot read the jobs store" } ": " span.error-text { (e) } }
            }
            @match row {
                None => {
                    h2 { "Job " code { (job) } }
                    p.empty #unknown-job { "No job named " code { (job) } " is known to the store or registered here. "
                        a href="jobs" { "All jobs" } }
                }
                Some(j) => {
                    section.job data-job=(j.name) data-paused=(j.is_paused()) {
                        h2 { "Job " code { (j.name) } @if j.is_paused() { " " (paused_badge(j)) } }
                        p.meta {
                            "schedule " @match &j.schedule { Some(s) => code { (s) }, None => "-" }
                            @if let Some(z) = &j.time_zone { " (" (z) ")" }
                            " · next fire " @match j.next_fire { Some(t) => span title=(clock(t)) { "in " (ago(t, c.observed_at)) }, None => "-" }
                            " · holder " (job_holder(j, c))
                            @if let Some(t) = j.trigger_pending_ms { " · run requested at " (ms_clock(t)) }
                        }
                        @if model.actions { p.actions { (buttons(j)) } }
                        (bar(j))
                        h2 { "History (newest first, last " (super::source::HISTORY) ")" }
                        (history_table(&j.records))
                    }
                }
            }
        }
    }
}

/// A job's records, newest first, one row each (the job page's table; a schedule's page shows
/// the records of `schedule/<id>` with it).
pub(crate) fn history_table(records: &[RunRecord]) -> Markup {
    html! {
        table.grid.history {
            thead {
                tr {
                    th { "Slot" } th { "Kind" } th { "Outcome" } th.r { "Attempt" } th { "Node" }
                    th.r { "Token" } th.r { "Duration" } th { "Error" }
                }
            }
            tbody #records {
                @for r in records {
                    tr data-outcome=(r.outcome.as_str()) data-kind=(r.kind.as_str()) data-slot-ms=(r.slot_ms) {
                        td.num { (ms_clock(r.slot_ms)) }
                        td {
                            (r.kind.as_str())
                            @if let Some(k) = &r.request_key { " " span.dim title="request key" { (k) } }
                        }
                        td { (outcome_badge(r.outcome)) }
                        td.r.num { @if r.attempts > 1 { (r.attempt) "/" (r.attempts) } @else { (r.attempt) } }
                        td { @if r.node.is_empty() { span.dim { "-" } } @else { (r.node) } }
                        td.r.num { (r.token) }
                        td.r.num { (duration(took(r))) }
                        td.error-text { @if let Some(e) = &r.error { (e) } }
                    }
                }
                @if records.is_empty() { tr { td.empty colspan="8" { "No record yet." } } }
            }
        }
    }
}

fn paused_badge(j: &JobRow) -> Markup {
    html! {
        @if j.paused { span.badge.warn.paused { "paused" } }
        @else if j.group_paused { span.badge.warn.paused title="its group is paused" { "paused (group)" } }
        @else { span.dim { "no" } }
    }
}

fn job_holder(j: &JobRow, c: &Cluster) -> Markup {
    html! {
        @match &j.holder {
            Some((s, t)) => { (holder(s, c)) " " span.dim { "token " (t) } },
            None => span.dim { "-" },
        }
    }
}

pub(crate) fn outcome_badge(o: Outcome) -> Markup {
    html! { span class={ "oc o-" (o.as_str()) } { (o.as_str()) } }
}

/// The last slots, oldest left, one coloured cell each with its facts in the title.
fn bar(j: &JobRow) -> Markup {
    html! {
        div.bar {
            @for r in j.records.iter().rev() {
                span class={ "s o-" (r.outcome.as_str()) } data-outcome=(r.outcome.as_str()) data-slot-ms=(r.slot_ms)
                    title={ (ms_clock(r.slot_ms)) " · " (r.kind.as_str())
                        @if let Some(k) = &r.request_key { " " (k) }
                        " · " (r.outcome.as_str())
                        @if !r.node.is_empty() { " · " (r.node) }
                        @if r.token > 0 { " · token " (r.token) }
                        @if let Some(d) = took(r) { " · " (duration(Some(d))) }
                        @if let Some(e) = &r.error { " · " (e) } } {}
            }
        }
    }
}

fn buttons(j: &JobRow) -> Markup {
    html! {
        @if j.actionable {
            @if j.paused {
                button.act type="button" data-job=(j.name) data-action="resume" { "Resume" }
            } @else {
                button.act type="button" data-job=(j.name) data-action="pause" { "Pause" }
            }
            " "
            button.act type="button" data-job=(j.name) data-action="trigger" { "Run now" }
        } @else {
            span.dim title="act on the group" { "-" }
        }
    }
}

/// A unix-millisecond instant as `2026-12-01 17:03:05.250 UTC`.
pub(crate) fn ms_clock(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map_or_else(|| ms.to_string(), |t| t.format("%Y-%m-%d %H:%M:%S%.3f UTC").to_string())
}

/// A run's duration: `12ms` under a second, else as [`human`].
fn duration(d: Option<Duration>) -> String {
    match d {
        Some(d) if d < Duration::from_secs(1) => format!("{}ms", d.as_millis()),
        d => human(d),
    }
}
