//! The session machine (rules S1-S5, D1-D5): when to open the client's one session, when to
//! renew it, what a reply does to the local deadline, and when the session ends.
//!
//! The shell calls one method per event (a clock wake-up, a backend reply, shutdown) with the
//! current instant and executes the [`Command`]s it returns, in order. Between events it
//! waits for the earliest of [`SessionMachine::next_wakeup`], the reply of the call in
//! flight, and shutdown. At most one backend call of the machine is in flight at a time: the
//! open, or the keep-alive (the one renewal slot).

use std::time::Duration;

use super::mutants::{Mutant, active};
use super::{Moment, RevokeReason, SessionStatus, Timing};

/// What the shell does with a session that ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Close {
    /// Close it on the backend in the background: the backend may still list it, and closing
    /// hands its leases to others now rather than at its expiry.
    Background,
    /// Close it and wait for the answer (bounded): the client is shutting down (S4).
    Await,
    /// Nothing: the backend said it expired.
    No,
}

/// What the machine asks the shell to do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command<T> {
    /// Publish the session's state (S5).
    Status(SessionStatus),
    /// Ask the backend for a session of `lease`, giving up after `timeout`; answer with
    /// [`SessionMachine::opened`] or [`SessionMachine::open_failed`].
    OpenSession {
        /// The lifetime to ask for (`lease_duration`).
        lease: Duration,
        /// When to give up (D2; no session yet, so `renew_interval`).
        timeout: Duration,
    },
    /// Opening failed: report it; the next try comes after `retry_in`.
    OpenFailed {
        /// What failed.
        error: String,
        /// When the next open is sent.
        retry_in: Duration,
    },
    /// The backend granted a session too short to use (its local validity is already over):
    /// close it in the background and open another after `retry_in`, so a backend that grants
    /// less than the margin is not asked again in a loop.
    DiscardGrant {
        /// What the backend granted.
        granted: Duration,
        /// When the next open is sent.
        retry_in: Duration,
    },
    /// A session is live: publish it with its local deadline (D1) and renewal period (D4).
    BeginSession {
        /// The machine's count of sessions begun, this one included.
        epoch: u64,
        /// What the backend granted.
        granted: Duration,
        /// The local deadline.
        deadline: T,
        /// The renewal period; every D2 timeout of the session follows it.
        period: Duration,
    },
    /// The backend granted less than `lease_duration`, too little for two renewals: the
    /// session renews every `period` (D4). Once per session.
    Shortened {
        /// What the backend granted.
        granted: Duration,
        /// The shortened period.
        period: Duration,
    },
    /// Send one keep-alive for the live session with the digest of its terms (S1); give up
    /// after `timeout` (D2); answer with [`SessionMachine::renewed`],
    /// [`SessionMachine::expired`] or [`SessionMachine::renew_failed`].
    KeepAlive {
        /// When to give up: the current period, cut at the deadline (D2).
        timeout: Duration,
    },
    /// A renewal moved the local deadline (D1) and set the period (D4).
    Extend {
        /// The new deadline (never earlier than the last).
        deadline: T,
        /// The renewal period.
        period: Duration,
    },
    /// A renewal failed; the next is sent after `retry_in` (D5).
    RenewalFailed {
        /// What failed.
        error: String,
        /// When the next keep-alive is sent.
        retry_in: Duration,
    },
    /// The first failed renewal of a run of them: the session is suspended.
    Suspended {
        /// What failed.
        error: String,
    },
    /// A renewal succeeded after failed ones.
    Resumed,
    /// The keep-alive's digest did not match the backend's: ask what the session owns,
    /// revoke terms taken over and release orphans (T6, K4).
    Reconcile,
    /// The live session ended: freeze its deadline, revoke every term it held with `reason`
    /// (T6), drop any call in flight for it, and close it as `close` says.
    EndSession {
        /// The session's epoch.
        epoch: u64,
        /// Why it ended.
        reason: RevokeReason,
        /// What to do about it on the backend.
        close: Close,
    },
    /// The client is closed: publish it and stop.
    Exit,
}

/// A backend call of the machine's in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call<T> {
    /// When the request was sent: the base of the D1 deadline its reply gives.
    pub sent_at: T,
}

/// A live (or suspended) session, as the machine holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Live<T> {
    /// The machine's count of sessions begun, this one included.
    pub epoch: u64,
    /// The local deadline (D1); it only moves forward (D3).
    pub deadline: T,
    /// The renewal period (D4); every D2 timeout of the session follows it.
    pub period: Duration,
    /// When the next keep-alive is due (while none is in flight).
    pub next: T,
    /// The keep-alive in flight, if any (one renewal slot).
    pub call: Option<Call<T>>,
    /// Whether the last renewal failed (S5).
    pub suspended: bool,
    /// Whether this session reported a shortened grant (D4: once per session).
    pub shortened_reported: bool,
}

/// Where the machine is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase<T> {
    /// Not started.
    Idle,
    /// Opening: the open in flight, or the instant of the next try.
    Opening {
        /// The open in flight, if any.
        call: Option<Call<T>>,
        /// When the next open is sent, while none is in flight.
        retry_at: Option<T>,
    },
    /// A session is live or suspended.
    Live(Live<T>),
    /// The client was closed.
    Closed,
}

/// Everything a [`SessionMachine`] holds besides its [`Timing`], as plain values
/// ([`SessionMachine::parts`], [`SessionMachine::from_parts`]). A driver that keeps its own
/// compact state, such as the model checker of rule V1 (ADR 0006), rebuilds the machine from
/// it, feeds it one event and reads the result back, so that the engine's own machine makes
/// the decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionParts<T> {
    /// Where the machine is.
    pub phase: Phase<T>,
    /// The delay before the next open after a failed or unusable one.
    pub open_backoff: Duration,
    /// The machine's count of sessions begun.
    pub epoch: u64,
}

/// The session machine of one client.
#[derive(Debug, Clone)]
pub struct SessionMachine<T> {
    timing: Timing,
    phase: Phase<T>,
    /// The delay before the next open after a failed or unusable one: doubles from
    /// `min_backoff` to `renew_interval`, back to `min_backoff` once a session is live.
    open_backoff: Duration,
    epoch: u64,
}

impl<T: Moment> SessionMachine<T> {
    /// A machine that has not started.
    pub fn new(timing: Timing) -> Self {
        SessionMachine { open_backoff: timing.config.min_backoff, timing, phase: Phase::Idle, epoch: 0 }
    }

    /// A machine rebuilt from `parts` (see [`SessionParts`]): it behaves exactly as the machine
    /// [`parts`](Self::parts) was taken from.
    pub fn from_parts(timing: Timing, parts: SessionParts<T>) -> Self {
        SessionMachine { timing, phase: parts.phase, open_backoff: parts.open_backoff, epoch: parts.epoch }
    }

    /// The machine's state as plain values (see [`SessionParts`]).
    pub fn parts(&self) -> SessionParts<T> {
        SessionParts { phase: self.phase, open_backoff: self.open_backoff, epoch: self.epoch }
    }

    /// Starts: the first open is sent now.
    pub fn start(&mut self, now: T) -> Vec<Command<T>> {
        match self.phase {
            Phase::Idle => self.send_open(now),
            _ => Vec::new(),
        }
    }

    /// The earliest instant at which [`tick`](Self::tick) has something to do, if any: the
    /// next open, the next keep-alive, or the local deadline. While a call is in flight only
    /// the deadline (the call's own timeout, cut at the deadline by D2, ends it otherwise).
    pub fn next_wakeup(&self) -> Option<T> {
        match &self.phase {
            Phase::Opening { retry_at, .. } => *retry_at,
            Phase::Live(l) if l.call.is_some() => Some(l.deadline),
            Phase::Live(l) => Some(l.deadline.min(l.next)),
            Phase::Idle | Phase::Closed => None,
        }
    }

    /// The local deadline of the live session (D1), if one is live or suspended.
    pub fn deadline(&self) -> Option<T> {
        match &self.phase {
            Phase::Live(l) => Some(l.deadline),
            _ => None,
        }
    }

    /// The renewal period of the live session (D4), if one is live or suspended.
    pub fn period(&self) -> Option<Duration> {
        match &self.phase {
            Phase::Live(l) => Some(l.period),
            _ => None,
        }
    }

    /// The clock reached `now`: ends the session whose deadline passed (D3: nothing can
    /// revive it), sends the keep-alive that is due, or the open whose backoff is over.
    pub fn tick(&mut self, now: T) -> Vec<Command<T>> {
        match &mut self.phase {
            Phase::Opening { call: None, retry_at: Some(at) } if now >= *at => self.send_open(now),
            Phase::Live(l) if now >= l.deadline => self.lost(now, RevokeReason::DeadlinePassed),
            Phase::Live(l) if l.call.is_none() && now >= l.next => {
                l.call = Some(Call { sent_at: now });
                vec![Command::KeepAlive { timeout: super::call_timeout(l.period, now, l.deadline) }]
            }
            _ => Vec::new(),
        }
    }

    /// The open sent at `sent_at` was answered at `now` with a session of `granted` (as the
    /// backend measured it). The session is live if its local deadline
    /// `sent_at + granted * (1 - drift) - margin` (D1) is still ahead; otherwise the grant is
    /// discarded and the next open waits for the backoff.
    pub fn opened(&mut self, now: T, granted: Duration) -> Vec<Command<T>> {
        let Phase::Opening { call: Some(call), .. } = self.phase else { return Vec::new() };
        let deadline = self.timing.deadline(d1_base(call, now), granted);
        if deadline <= now {
            let retry_in = self.open_backoff;
            self.wait_to_open(now);
            return vec![Command::DiscardGrant { granted, retry_in }];
        }
        self.open_backoff = self.timing.config.min_backoff;
        self.epoch += 1;
        let plan = self.timing.renew_plan(granted);
        self.phase = Phase::Live(Live {
            epoch: self.epoch,
            deadline,
            period: plan.period,
            next: call.sent_at + plan.period,
            call: None,
            suspended: false,
            shortened_reported: plan.shortened,
        });
        let mut out = vec![Command::BeginSession { epoch: self.epoch, granted, deadline, period: plan.period }];
        if plan.shortened {
            out.push(Command::Shortened { granted, period: plan.period });
        }
        out
    }

    /// The open in flight failed (an error or no answer within its timeout); the next one
    /// waits for the backoff.
    pub fn open_failed(&mut self, now: T, error: String) -> Vec<Command<T>> {
        if !matches!(self.phase, Phase::Opening { call: Some(_), .. }) {
            return Vec::new();
        }
        let retry_in = self.open_backoff;
        self.wait_to_open(now);
        vec![Command::OpenFailed { error, retry_in }]
    }

    /// The keep-alive in flight was answered at `now`: the session lives `remaining` more on
    /// the backend's clock. D1 from the keep-alive's `sent_at`; D3: refused once the deadline
    /// passed; D4: the period follows the grant; a digest mismatch asks for a reconcile.
    pub fn renewed(&mut self, now: T, remaining: Duration, digest_matches: bool) -> Vec<Command<T>> {
        let Phase::Live(l) = &mut self.phase else { return Vec::new() };
        let Some(call) = l.call.take() else { return Vec::new() };
        let Some(deadline) = advance_deadline(l.deadline, self.timing.deadline(d1_base(call, now), remaining), now)
        else {
            return self.lost(now, RevokeReason::DeadlinePassed);
        };
        let plan = self.timing.renew_plan(remaining);
        l.deadline = deadline;
        l.period = plan.period;
        l.next = call.sent_at + plan.period;
        let mut out = vec![Command::Extend { deadline: l.deadline, period: l.period }];
        if plan.shortened && !l.shortened_reported {
            l.shortened_reported = true;
            out.push(Command::Shortened { granted: remaining, period: l.period });
        }
        if l.suspended {
            l.suspended = false;
            out.push(Command::Resumed);
            out.push(Command::Status(SessionStatus::Live));
        }
        if !digest_matches {
            out.push(Command::Reconcile);
        }
        out
    }

    /// The keep-alive in flight was answered: the session expired on the backend (S3). Its
    /// terms end and a new session is opened at once.
    pub fn expired(&mut self, now: T) -> Vec<Command<T>> {
        match &self.phase {
            Phase::Live(l) if l.call.is_some() => self.lost(now, RevokeReason::SessionExpired),
            _ => Vec::new(),
        }
    }

    /// The keep-alive in flight failed (an error or no answer within its timeout): retry
    /// after `clamp(remaining / 2, min_backoff, renew_interval)` (D5); the first failure of a
    /// run suspends the session (S5).
    pub fn renew_failed(&mut self, now: T, error: String) -> Vec<Command<T>> {
        let Phase::Live(l) = &mut self.phase else { return Vec::new() };
        if l.call.take().is_none() {
            return Vec::new();
        }
        if now >= l.deadline {
            return self.lost(now, RevokeReason::DeadlinePassed);
        }
        let retry_in = self.timing.backoff(now, l.deadline);
        l.next = now + retry_in;
        let mut out = vec![Command::RenewalFailed { error: error.clone(), retry_in }];
        if !l.suspended {
            l.suspended = true;
            out.push(Command::Status(SessionStatus::Suspended));
            out.push(Command::Suspended { error });
        }
        out
    }

    /// The client shuts down: the live session ends with `Stopped` and is closed (S4); an
    /// open in flight is given up.
    pub fn shutdown(&mut self, _now: T) -> Vec<Command<T>> {
        let out = match self.phase {
            Phase::Live(l) => {
                vec![
                    Command::EndSession { epoch: l.epoch, reason: RevokeReason::Stopped, close: Close::Await },
                    Command::Exit,
                ]
            }
            Phase::Closed => return Vec::new(),
            Phase::Idle | Phase::Opening { .. } => vec![Command::Exit],
        };
        self.phase = Phase::Closed;
        out
    }

    /// The live session was lost at `now`: it ends (its terms with it) and the next open is
    /// sent at once.
    fn lost(&mut self, now: T, reason: RevokeReason) -> Vec<Command<T>> {
        let Phase::Live(l) = self.phase else { return Vec::new() };
        let close = if reason == RevokeReason::SessionExpired { Close::No } else { Close::Background };
        let mut out = vec![Command::EndSession { epoch: l.epoch, reason, close }];
        out.extend(self.send_open(now));
        out
    }

    fn send_open(&mut self, now: T) -> Vec<Command<T>> {
        self.phase = Phase::Opening { call: Some(Call { sent_at: now }), retry_at: None };
        vec![
            Command::Status(SessionStatus::Opening),
            Command::OpenSession {
                lease: self.timing.config.lease_duration,
                timeout: self.timing.config.renew_interval,
            },
        ]
    }

    fn wait_to_open(&mut self, now: T) {
        self.phase = Phase::Opening { call: None, retry_at: Some(now + self.open_backoff) };
        self.open_backoff = self.timing.config.next_open_backoff(self.open_backoff);
    }
}

/// D3, the one place it is decided: the local deadline `current` after a renewal that gives
/// `new`, answered at `now`. `None` once `current` has passed (a late reply never revives the
/// session); otherwise the later of the two (the deadline never moves back). The machine
/// applies it to its own deadline, and the engine's session cell, the copy of that deadline
/// which terms read, applies it again when it publishes the machine's `Extend` against the
/// readers' clock.
pub fn advance_deadline<T: Moment>(current: T, new: T, now: T) -> Option<T> {
    (now < current).then(|| current.max(new))
}

/// D1: the base instant of a reply's deadline is when its request was sent, never when the
/// reply arrived (`now`), so a slow reply only shortens the deadline.
fn d1_base<T: Moment>(call: Call<T>, now: T) -> T {
    if active(Mutant::DeadlineFromArrival) { now } else { call.sent_at }
}

#[cfg(test)]
mod tests {
    //! Each rule on the exact commands the machine returns. Instants are a fixed base plus
    //! milliseconds; the default configuration: lease 15 s, renew every 5 s, drift 0.01,
    //! margin 50 ms, min_backoff 100 ms.
    use std::time::Instant;

    use super::*;
    use crate::TimingConfig;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    struct At(Instant);

    impl At {
        fn t(&self, n: u64) -> Instant {
            self.0 + ms(n)
        }
    }

    fn machine() -> (SessionMachine<Instant>, At) {
        (SessionMachine::new(Timing::new(TimingConfig::default())), At(Instant::now()))
    }

    fn open_cmds() -> Vec<Command<Instant>> {
        vec![
            Command::Status(SessionStatus::Opening),
            Command::OpenSession { lease: Duration::from_secs(15), timeout: Duration::from_secs(5) },
        ]
    }

    /// A machine with a live session opened at 0 (sent at 0, answered at 10 ms, 15 s granted).
    fn live() -> (SessionMachine<Instant>, At) {
        let (mut m, at) = machine();
        assert_eq!(m.start(at.t(0)), open_cmds());
        m.opened(at.t(10), Duration::from_secs(15));
        (m, at)
    }

    /// S1, D1: the open is sent at once; the grant's deadline counts from when the open was
    /// SENT (15 s * 0.99 - 50 ms = 14.8 s); the first keep-alive is due one period after it.
    #[test]
    fn s1_d1_open_then_begin_with_the_deadline_from_sent_at() {
        let (mut m, at) = machine();
        assert_eq!(m.start(at.t(0)), open_cmds());
        assert_eq!(m.next_wakeup(), None, "an open in flight waits for its reply");
        assert_eq!(
            m.opened(at.t(900), Duration::from_secs(15)),
            vec![Command::BeginSession {
                epoch: 1,
                granted: Duration::from_secs(15),
                deadline: at.t(14_800),
                period: Duration::from_secs(5)
            }]
        );
        assert_eq!(m.next_wakeup(), Some(at.t(5_000)));
        assert_eq!(m.tick(at.t(4_999)), vec![]);
        assert_eq!(m.tick(at.t(5_000)), vec![Command::KeepAlive { timeout: Duration::from_secs(5) }]);
        assert_eq!(m.tick(at.t(5_001)), vec![], "S1: one keep-alive in flight at a time");
    }

    /// D1, S1: a renewal's deadline counts from the keep-alive's send time, however late the
    /// reply; the next keep-alive is due one period after that send.
    #[test]
    fn d1_renewal_counts_from_the_keep_alive_sent_at() {
        let (mut m, at) = live();
        m.tick(at.t(5_000));
        assert_eq!(
            m.renewed(at.t(7_000), Duration::from_secs(15), true),
            vec![Command::Extend { deadline: at.t(19_800), period: Duration::from_secs(5) }]
        );
        assert_eq!(m.next_wakeup(), Some(at.t(10_000)));
    }

    /// D1: drift shortens the validity by `drift` of the grant.
    #[test]
    fn d1_drift_shortens_the_deadline() {
        let cfg = TimingConfig { drift: 0.1, ..TimingConfig::default() };
        let mut m = SessionMachine::new(Timing::new(cfg));
        let at = At(Instant::now());
        m.start(at.t(0));
        let begin = m.opened(at.t(1), Duration::from_secs(15));
        assert!(matches!(begin[0], Command::BeginSession { deadline, .. } if deadline == at.t(13_450)));
    }

    /// D2: the keep-alive's timeout is the current period, cut at the deadline; under D4 the
    /// shortened period.
    #[test]
    fn d2_keep_alive_timeout_is_the_current_period_cut_at_the_deadline() {
        let (mut m, at) = live();
        m.tick(at.t(5_000));
        assert_eq!(
            m.renew_failed(at.t(10_000), "down".into())[0],
            Command::RenewalFailed { error: "down".into(), retry_in: ms(2_400) }
        );
        // Next send at 12.4 s; the deadline is 14.8 s: the timeout is cut to 2.4 s.
        assert_eq!(m.tick(at.t(12_400)), vec![Command::KeepAlive { timeout: ms(2_400) }]);
        // D4: a 3 s grant shortens the period to a third of its validity (2.92 s / 3).
        let (mut m, at) = machine();
        m.start(at.t(0));
        m.opened(at.t(1), Duration::from_secs(3));
        let period = ms(2_920) / 3;
        assert_eq!(m.period(), Some(period));
        assert_eq!(m.tick(at.t(0) + period), vec![Command::KeepAlive { timeout: period }]);
    }

    /// D3: a reply that arrives once the deadline passed does not extend it: the session ends
    /// with `DeadlinePassed`, closed in the background, and a new one is opened at once.
    #[test]
    fn d3_late_reply_ends_the_session() {
        let (mut m, at) = live();
        m.tick(at.t(5_000));
        let mut expected =
            vec![Command::EndSession { epoch: 1, reason: RevokeReason::DeadlinePassed, close: Close::Background }];
        expected.extend(open_cmds());
        assert_eq!(m.renewed(at.t(14_800), Duration::from_secs(15), true), expected);
        assert_eq!(m.deadline(), None);
        assert_eq!(
            m.renewed(at.t(14_900), Duration::from_secs(15), true),
            vec![],
            "no call of that session is in flight"
        );
    }

    /// D3: the deadline passing while the keep-alive is in flight ends the session at the
    /// deadline itself, not when the call times out.
    #[test]
    fn d3_deadline_ends_the_session_while_a_call_is_in_flight() {
        let (mut m, at) = live();
        m.tick(at.t(5_000));
        assert_eq!(m.next_wakeup(), Some(at.t(14_800)));
        assert_eq!(m.tick(at.t(14_799)), vec![]);
        let out = m.tick(at.t(14_800));
        assert_eq!(
            out[0],
            Command::EndSession { epoch: 1, reason: RevokeReason::DeadlinePassed, close: Close::Background }
        );
        assert_eq!(out[1..], open_cmds()[..]);
    }

    /// D3: a renewal never moves the deadline backwards (a reply to an older send).
    #[test]
    fn d3_deadline_never_moves_back() {
        let (mut m, at) = live();
        m.tick(at.t(5_000));
        let out = m.renewed(at.t(5_010), Duration::from_secs(2), true);
        assert_eq!(out[0], Command::Extend { deadline: at.t(14_800), period: ms(1_930) / 3 });
    }

    /// D3 on its own: a renewal answered before the deadline keeps the later deadline; one
    /// answered at or after it is refused, whatever it gives.
    #[test]
    fn d3_advance_deadline_moves_forward_only_while_live() {
        let at = At(Instant::now());
        assert_eq!(advance_deadline(at.t(10_000), at.t(12_000), at.t(9_999)), Some(at.t(12_000)));
        assert_eq!(advance_deadline(at.t(10_000), at.t(8_000), at.t(9_999)), Some(at.t(10_000)));
        assert_eq!(advance_deadline(at.t(10_000), at.t(12_000), at.t(10_000)), None);
        assert_eq!(advance_deadline(at.t(10_000), at.t(12_000), at.t(11_000)), None);
    }

    /// D4: a grant too short for two renewals renews every third of its local validity and is
    /// reported once per session, not at every renewal; a full grant restores the period.
    #[test]
    fn d4_shortened_grant_is_reported_once_per_session() {
        let (mut m, at) = machine();
        m.start(at.t(0));
        let p = ms(5_890) / 3;
        assert_eq!(
            m.opened(at.t(1), Duration::from_secs(6)),
            vec![
                Command::BeginSession { epoch: 1, granted: Duration::from_secs(6), deadline: at.t(5_890), period: p },
                Command::Shortened { granted: Duration::from_secs(6), period: p },
            ]
        );
        m.tick(at.t(0) + p);
        assert_eq!(
            m.renewed(at.t(0) + p, Duration::from_secs(6), true),
            vec![Command::Extend { deadline: at.t(0) + p + ms(5_890), period: p }]
        );
        // Expired: the next session reports again.
        m.tick(at.t(0) + p * 2);
        m.expired(at.t(0) + p * 2);
        let out = m.opened(at.t(0) + p * 2, Duration::from_secs(6));
        assert!(matches!(out[..], [Command::BeginSession { epoch: 2, .. }, Command::Shortened { .. }]));
    }

    /// D5: a failed renewal retries after `clamp(remaining / 2, min_backoff, renew_interval)`;
    /// the first failure suspends the session (S5), the next do not again; a success resumes.
    #[test]
    fn d5_backoff_and_s5_suspended_then_live() {
        let (mut m, at) = live();
        m.tick(at.t(5_000));
        assert_eq!(
            m.renew_failed(at.t(5_000), "refused".into()),
            vec![
                Command::RenewalFailed { error: "refused".into(), retry_in: ms(4_900) },
                Command::Status(SessionStatus::Suspended),
                Command::Suspended { error: "refused".into() },
            ]
        );
        assert_eq!(m.next_wakeup(), Some(at.t(9_900)));
        m.tick(at.t(9_900));
        assert_eq!(
            m.renew_failed(at.t(14_700), "refused".into()),
            vec![Command::RenewalFailed { error: "refused".into(), retry_in: ms(100) }]
        );
        m.tick(at.t(14_700) + ms(99));
        assert_eq!(m.tick(at.t(14_800)).len(), 3, "not yet sent: the backoff ends after the deadline");
        let (mut m, at) = live();
        m.tick(at.t(5_000));
        m.renew_failed(at.t(5_000), "x".into());
        m.tick(at.t(9_900));
        assert_eq!(
            m.renewed(at.t(9_950), Duration::from_secs(15), true),
            vec![
                Command::Extend { deadline: at.t(24_700), period: Duration::from_secs(5) },
                Command::Resumed,
                Command::Status(SessionStatus::Live),
            ]
        );
    }

    /// S3: a session the backend says expired ends with `SessionExpired`, is not closed (it
    /// cannot come back), and a new one (a new epoch) is opened at once.
    #[test]
    fn s3_expired_session_is_replaced_by_a_new_one() {
        let (mut m, at) = live();
        m.tick(at.t(5_000));
        let mut expected =
            vec![Command::EndSession { epoch: 1, reason: RevokeReason::SessionExpired, close: Close::No }];
        expected.extend(open_cmds());
        assert_eq!(m.expired(at.t(5_010)), expected);
        assert!(matches!(m.opened(at.t(5_020), Duration::from_secs(15))[0], Command::BeginSession { epoch: 2, .. }));
    }

    /// S4: shutdown ends the live session with `Stopped`, closes it and waits for the close;
    /// while opening, it gives the open up. Nothing happens after.
    #[test]
    fn s4_shutdown_closes_the_session() {
        let (mut m, at) = live();
        assert_eq!(
            m.shutdown(at.t(1_000)),
            vec![Command::EndSession { epoch: 1, reason: RevokeReason::Stopped, close: Close::Await }, Command::Exit]
        );
        assert_eq!(m.next_wakeup(), None);
        assert_eq!(m.tick(at.t(20_000)), vec![]);
        assert_eq!(m.shutdown(at.t(20_000)), vec![]);
        let (mut m, at) = machine();
        m.start(at.t(0));
        assert_eq!(m.shutdown(at.t(1)), vec![Command::Exit]);
        assert_eq!(m.opened(at.t(2), Duration::from_secs(15)), vec![], "a late open is not used");
    }

    /// A grant too short to use is discarded and the next open waits for a
    /// backoff that doubles up to `renew_interval`, never a loop without a wait; a failed open
    /// backs off the same way; a usable grant resets the backoff.
    #[test]
    fn unusable_grant_and_failed_open_back_off() {
        let (mut m, at) = machine();
        m.start(at.t(0));
        assert_eq!(m.opened(at.t(5), ms(40)), vec![Command::DiscardGrant { granted: ms(40), retry_in: ms(100) }]);
        assert_eq!(m.next_wakeup(), Some(at.t(105)));
        assert_eq!(m.tick(at.t(104)), vec![]);
        assert_eq!(m.tick(at.t(105)), open_cmds());
        assert_eq!(
            m.open_failed(at.t(200), "no answer".into()),
            vec![Command::OpenFailed { error: "no answer".into(), retry_in: ms(200) }]
        );
        for retry in [400, 800, 1_600, 3_200, 5_000, 5_000] {
            let due = m.next_wakeup().expect("a retry is due");
            assert!(m.tick(due).len() == 2);
            assert_eq!(
                m.open_failed(due, "x".into()),
                vec![Command::OpenFailed { error: "x".into(), retry_in: ms(retry) }]
            );
        }
        let due = m.next_wakeup().expect("a retry is due");
        m.tick(due);
        m.opened(due, Duration::from_secs(15));
        m.tick(due + Duration::from_secs(5));
        m.expired(due + Duration::from_secs(5));
        assert_eq!(
            m.open_failed(due + Duration::from_secs(5), "x".into())[0],
            Command::OpenFailed { error: "x".into(), retry_in: ms(100) }
        );
    }

    /// D1, D3, D4 through `parts`/`from_parts`: a machine rebuilt from its parts in the middle
    /// of a session (a keep-alive in flight) gives exactly the commands and the parts the
    /// original gives, as the model checker relies on; one rebuilt from hand-made parts
    /// counts the deadline from the given `sent_at`.
    #[test]
    fn d1_machine_rebuilt_from_its_parts_decides_the_same() {
        let (mut m, at) = live();
        m.tick(at.t(5_000));
        let mut rebuilt = SessionMachine::from_parts(Timing::new(TimingConfig::default()), m.parts());
        assert_eq!(rebuilt.parts(), m.parts());
        let expected = vec![Command::Extend { deadline: at.t(19_800), period: Duration::from_secs(5) }];
        assert_eq!(m.renewed(at.t(7_000), Duration::from_secs(15), true), expected);
        assert_eq!(rebuilt.renewed(at.t(7_000), Duration::from_secs(15), true), expected);
        assert_eq!(rebuilt.parts(), m.parts());
        assert_eq!(rebuilt.next_wakeup(), Some(at.t(10_000)));

        let opening = SessionParts {
            phase: Phase::Opening { call: Some(Call { sent_at: at.t(100) }), retry_at: None },
            open_backoff: ms(100),
            epoch: 3,
        };
        let mut m = SessionMachine::from_parts(Timing::new(TimingConfig::default()), opening);
        assert_eq!(
            m.opened(at.t(2_000), Duration::from_secs(15)),
            vec![Command::BeginSession {
                epoch: 4,
                granted: Duration::from_secs(15),
                deadline: at.t(14_900),
                period: Duration::from_secs(5)
            }]
        );
        let Phase::Live(l) = m.parts().phase else { panic!("live after the open: {:?}", m.parts()) };
        assert_eq!((l.next, l.call, l.suspended), (at.t(5_100), None, false));
    }

    /// D1: the mutant the model checker must catch (`DeadlineFromArrival`) counts the deadline
    /// from the reply's arrival, on an open and on a renewal, and only inside `with`.
    #[cfg(simba_mutants)]
    #[test]
    fn d1_mutant_deadline_from_arrival_counts_from_the_reply() {
        use crate::mutants::{Mutant, with};
        let arrival = Some(Mutant::DeadlineFromArrival);
        let (mut m, at) = machine();
        m.start(at.t(0));
        let begin = with(arrival, || m.opened(at.t(900), Duration::from_secs(15)));
        assert!(matches!(begin[0], Command::BeginSession { deadline, .. } if deadline == at.t(15_700)), "{begin:?}");
        m.tick(at.t(5_000));
        assert_eq!(
            with(arrival, || m.renewed(at.t(7_000), Duration::from_secs(15), true)),
            vec![Command::Extend { deadline: at.t(21_800), period: Duration::from_secs(5) }]
        );
        assert_eq!(m.next_wakeup(), Some(at.t(10_000)), "the next keep-alive still counts from sent_at");
        let (mut m, at) = machine();
        m.start(at.t(0));
        let begin = with(Some(Mutant::IgnoreDrift), || m.opened(at.t(900), Duration::from_secs(15)));
        assert!(matches!(begin[0], Command::BeginSession { deadline, .. } if deadline == at.t(14_950)), "{begin:?}");
    }

    /// A digest mismatch asks for a reconcile after the deadline moved (T6, K4).
    #[test]
    fn digest_mismatch_reconciles() {
        let (mut m, at) = live();
        m.tick(at.t(5_000));
        assert_eq!(
            m.renewed(at.t(5_001), Duration::from_secs(15), false),
            vec![Command::Extend { deadline: at.t(19_800), period: Duration::from_secs(5) }, Command::Reconcile]
        );
    }
}
