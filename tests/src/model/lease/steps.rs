//! The transitions of the lease model: a tick of real time, a node reading a reply, the
//! backend processing a request.

use std::collections::HashSet;

use simba_core::attempt::{AttemptSlot, answers_current_attempt};
use simba_core::ledger::{self, HeldTerm, ReleasedTokens, Verdict, judge_win};
use simba_core::session::{Call as CoreCall, Command, Live, Phase};

use super::{LeaseModel, Log, slot_of};
use crate::model::bag::Bag;
use crate::model::clock::{NodeTime, duration};
use crate::model::config::{Invariant, MAX_NAMES, MAX_SESSIONS, Mutant, NODES};
use crate::model::explore::Violation;
use crate::model::state::*;

impl LeaseModel {
    /// One real tick with clock rates `r`.
    pub(super) fn tick(
        &self,
        s: &mut State,
        r: [i16; 3],
        keep: Straggle,
        log: &mut Log,
    ) -> Option<Violation<Invariant>> {
        let mut violation = None;
        // Durable session over the open interval (now, now + 1): the backend session may expire
        // strictly inside it while the node still believes it live.
        for (i, node) in s.nodes.iter().enumerate() {
            if let Some(ss) = node.session
                && ss.deadline > 0
                && let Some(e) = s.expiry(ss.sid)
            {
                let (rb, rn) = (i32::from(r[0]), i32::from(r[1 + i]));
                let (e, d) = (i32::from(e), i32::from(ss.deadline));
                if e < rb && e * rn < d * rb {
                    violation.get_or_insert_with(|| Violation {
                        invariant: Invariant::DurableSession,
                        detail: format!(
                            "between instants, the backend expires s{} after {e}/{rb} of the tick while n{i} \
                             believes it live for {d}/{rn} of the tick",
                            ss.sid
                        ),
                    });
                }
            }
        }
        if log.on() {
            log.now += 1;
            for (k, c) in log.clocks.iter_mut().enumerate() {
                *c += i64::from(r[k]);
            }
        }
        log.note(|_| format!("one tick passes: backend clock +{}, n0 clock +{}, n1 clock +{}", r[0], r[1], r[2]));
        // Backend sessions expire.
        for (_, e) in &mut s.sessions {
            *e -= r[0];
        }
        let mut dead: Bag<u8, { MAX_SESSIONS as usize }> = Bag::default();
        for (sid, e) in s.sessions.iter() {
            if *e <= 0 {
                dead.push(*sid);
            }
        }
        if !dead.is_empty() {
            s.sessions.retain(|(_, e)| *e > 0);
            for l in &mut s.leases {
                if dead.contains(&l.holder) {
                    l.holder = 0;
                }
            }
            log.note(|_| format!("backend: session(s) {dead:?} expired on the backend clock"));
        }
        // Messages age; one older than max_delay is lost, and so is every one not chosen to
        // straggle across this tick boundary.
        let paused = [s.nodes[0].paused > 0, s.nodes[1].paused > 0];
        let max_delay = self.cfg.max_delay;
        let mut kept_one = false;
        let before = s.net.len();
        s.net.retain_mut(|m| {
            if !m.body.is_request() && paused[usize::from(m.node)] {
                return true;
            }
            let survives = match keep {
                Straggle::All => true,
                Straggle::None => false,
                Straggle::One(k) if !kept_one && *m == k => {
                    kept_one = true;
                    true
                }
                Straggle::One(_) => false,
            };
            m.age += 1;
            survives && m.age <= max_delay
        });
        let lost = before - s.net.len();
        if let Straggle::One(m) = keep {
            log.note(|_| format!("network: {m} stays in flight across the tick"));
        }
        if lost > 0 {
            log.note(|_| format!("network: {lost} message(s) in flight lost"));
        }
        // Node clocks, pauses and timers.
        let floor = self.sent_floor();
        for i in 0..NODES {
            let rn = r[1 + i];
            let node = &mut s.nodes[i];
            node.paused = node.paused.saturating_sub(1);
            let dec = |call: &mut Call| {
                call.sent = (call.sent - rn).max(floor);
                call.expires = (call.expires - rn).max(0);
            };
            if let Some(c) = &mut node.opening {
                dec(c);
            }
            for e in &mut node.elect {
                if let EPhase::Waiting(t) | EPhase::CoolingDown(t) = &mut e.phase {
                    *t = (*t - rn).max(0);
                }
                e.abort_at = (e.abort_at - rn).max(0);
            }
            if let Some(ss) = &mut node.session {
                ss.deadline = (ss.deadline - rn).max(0);
                ss.renew_at = (ss.renew_at - rn).max(0);
                if let Some(c) = &mut ss.ka {
                    dec(c);
                }
            }
            for a in node.attempts.iter_mut().flatten() {
                a.expires = (a.expires - rn).max(0);
            }
            if node.paused > 0 {
                continue;
            }
            // Timers fire (a paused node's fire when it resumes).
            if node.session.is_some_and(|ss| ss.deadline == 0) {
                self.end_session(s, i, "DeadlinePassed", log);
            }
            let node = &mut s.nodes[i];
            if let Some(ss) = &mut node.session
                && ss.ka.is_some_and(|c| c.expires == 0)
            {
                ss.ka = None;
                ss.ka_held = [0; MAX_NAMES];
                ss.renew_at = (ss.deadline / 2).clamp(1, self.cfg.renew_interval);
                self.drop_calls(s, i, |m| {
                    matches!(m.body, Body::KeepAlive { .. } | Body::Alive { .. } | Body::Expired)
                });
                log.note(|_| format!("n{i}: keep-alive timed out (D2)"));
            }
            let node = &mut s.nodes[i];
            if node.opening.is_some_and(|c| c.expires == 0) {
                node.opening = None;
                self.drop_calls(s, i, |m| matches!(m.body, Body::Open | Body::Opened { .. }));
                log.note(|_| format!("n{i}: open-session timed out (D2)"));
            }
            let v = self.attempt_timers(s, i, log);
            violation = violation.or(v);
        }
        violation
    }

    /// The timers of node `i`'s elections at a tick: an acquisition's D2 timeout (the machine
    /// is told the current attempt ended; an abandoned one only frees its K3 slot), and a
    /// handover that waits for the task aborting it at the term's deadline (H5).
    fn attempt_timers(&self, s: &mut State, i: usize, log: &mut Log) -> Option<Violation<Invariant>> {
        let mut violation = None;
        for n in 0..self.cfg.names {
            let node = &mut s.nodes[i];
            if let Some(a) = node.attempts[n].filter(|a| a.expires == 0) {
                node.attempts[n] = None;
                let name = n as u8;
                self.drop_calls(
                    s,
                    i,
                    |m| matches!(m.body, Body::Acquire { name: x, .. } | Body::AcqReply { name: x, .. } if x == name),
                );
                log.note(|_| format!("n{i}: acquire {} timed out (D2); its reply will be ignored", name_of(name)));
                if !a.detached {
                    let v = self.feed(s, i, n, &|m| m.attempt_ended(NodeTime::NOW, false, || 0.0), log);
                    violation = violation.or(v);
                }
            }
            let e = s.nodes[i].elect[n];
            if e.task && e.abort_at == 0 && matches!(e.phase, EPhase::HandingOver(_)) {
                log.note(|_| format!("n{i}: the term's deadline passed: task of {} aborted (H5)", name_of(n as u8)));
                violation = violation.or(self.resume(s, i, n, log));
            }
        }
        violation
    }

    /// Node `i` reads reply `m` (already removed from the network).
    pub(super) fn node_receives(&self, s: &mut State, i: usize, m: Msg, log: &mut Log) -> Option<Violation<Invariant>> {
        match m.body {
            Body::Opened { sid, remaining } => {
                let Some(call) = s.nodes[i].opening.filter(|_| m.fate == Fate::Live) else {
                    log.note(|_| format!("n{i}: ignores a stale Opened(s{sid})"));
                    return None;
                };
                s.nodes[i].opening = None;
                // The engine's session machine decides (D1: the deadline counts from the open's
                // `sent_at`; a grant too short to use is discarded), rebuilt with this open in
                // flight and fed the reply now.
                let mut machine = self.machine(Phase::Opening { call: Some(sent_at(call.sent)), retry_at: None });
                let out = self.in_core(|| machine.opened(NodeTime::NOW, duration(remaining)));
                let begun = match (out.first(), machine.parts().phase) {
                    (Some(Command::BeginSession { deadline, period, .. }), Phase::Live(live)) => {
                        Some((deadline.units_up(), self.renew_at(live.next, *period)))
                    }
                    _ => None,
                };
                log.note(|c| {
                    format!(
                        "n{i}: reads Opened(s{sid}, remaining {remaining}) for the open sent at n{i}={}: validity {}, \
                         deadline n{i}={} (D1, by the engine's SessionMachine)",
                        Log::node_at(c, i, call.sent),
                        self.validity(remaining),
                        begun.map_or_else(|| "none".to_owned(), |(d, _)| Log::node_at(c, i, d).to_string())
                    )
                });
                match begun {
                    Some((deadline, renew_at)) => {
                        s.nodes[i].session = Some(Sess {
                            sid,
                            deadline,
                            ka: None,
                            ka_held: [0; MAX_NAMES],
                            renew_at,
                            released: [0; MAX_NAMES],
                            acked: [false; MAX_NAMES],
                        });
                        // K2: a new session ends every election's wait.
                        for n in 0..self.cfg.names {
                            self.feed(s, i, n, &|m| m.nudge(NodeTime::NOW), log);
                        }
                    }
                    None => {
                        s.net.push(Msg { node: i as u8, body: Body::Close { sid }, fate: Fate::Live, age: 0 });
                        log.note(|_| format!("n{i}: granted too little time; close(s{sid}) sent"));
                    }
                }
                None
            }
            Body::Alive { remaining, owned } => {
                let Some(ss) = s.nodes[i].session.filter(|ss| ss.ka.is_some() && m.fate == Fate::Live) else {
                    log.note(|_| format!("n{i}: ignores a stale keep-alive reply"));
                    return None;
                };
                let call = ss.ka.expect("checked above");
                // The engine's session machine decides (D1 from the keep-alive's `sent_at`, D3:
                // never after the deadline passed, never backwards; a digest mismatch asks for
                // a reconcile), rebuilt with this session and its keep-alive in flight.
                let mut machine = self.machine(Phase::Live(Live {
                    epoch: 1,
                    deadline: NodeTime::at(ss.deadline),
                    period: duration(self.cfg.renew_interval),
                    next: NodeTime::at(ss.renew_at),
                    call: Some(sent_at(call.sent)),
                    suspended: false,
                    shortened_reported: false,
                }));
                let out = self.in_core(|| machine.renewed(NodeTime::NOW, duration(remaining), owned.is_none()));
                let (Some(Command::Extend { deadline, period }), Phase::Live(live)) =
                    (out.first(), machine.parts().phase)
                else {
                    // D3: a late reply never revives a passed deadline.
                    self.end_session(s, i, "DeadlinePassed", log);
                    return None;
                };
                let d = deadline.units_up();
                log.note(|c| {
                    format!(
                        "n{i}: reads Alive(remaining {remaining}) for the keep-alive sent at n{i}={}: validity {}, \
                         deadline n{i}={} (was n{i}={}; D1, by the engine's SessionMachine)",
                        Log::node_at(c, i, call.sent),
                        self.validity(remaining),
                        Log::node_at(c, i, d),
                        Log::node_at(c, i, ss.deadline),
                    )
                });
                if let Some(ss) = &mut s.nodes[i].session {
                    ss.ka = None;
                    ss.ka_held = [0; MAX_NAMES];
                    ss.deadline = d;
                    ss.renew_at = self.renew_at(live.next, *period);
                }
                if let Some(owned) = owned.filter(|_| out.contains(&Command::Reconcile)) {
                    self.reconcile(s, i, ss.sid, ss.ka_held, owned, log);
                }
                None
            }
            Body::Expired => {
                if m.fate != Fate::Live || s.nodes[i].session.is_none_or(|ss| ss.ka.is_none()) {
                    return None;
                }
                log.note(|_| format!("n{i}: reads Expired"));
                self.end_session(s, i, "SessionExpired", log);
                None
            }
            Body::AcqReply { sid, name, result } => self.acq_reply(s, i, m.fate, sid, name, result, log),
            Body::ReleaseAck { sid, name, token } => {
                self.release_acked(s, i, sid, name, token, log);
                None
            }
            _ => None,
        }
    }

    /// A release was acknowledged ([`Config::release_acks`]): the backend no longer holds the
    /// lease for `sid` with `token`, so no acquisition sent from now on can be answered with
    /// a token at or below it (T3). The session's released-token record of the name is
    /// forgotten, unless an acquisition of the name is in flight: the backend may have
    /// answered it, with the released token, before it applied the release; then the record
    /// is forgotten when that attempt ends (in `canon`).
    ///
    /// [`Config::release_acks`]: crate::model::Config::release_acks
    fn release_acked(&self, s: &mut State, i: usize, sid: u8, name: u8, token: u8, log: &mut Log) {
        let n = usize::from(name);
        let in_flight = s.nodes[i].attempts[n].is_some();
        let Some(ss) = s.nodes[i].session.as_mut().filter(|ss| ss.sid == sid) else { return };
        if ss.released[n] == 0 || ss.released[n] > token {
            return;
        }
        // The engine's own K4 record decides (`simba_core::ledger::ReleasedTokens`).
        let key = name_key(name);
        let mut record = released_record(ss, n, key);
        self.in_core(|| record.release_acknowledged(key, u64::from(token), in_flight));
        ss.released[n] = u8::try_from(record.max_released(key)).expect("tokens fit in u8");
        ss.acked[n] = record.acknowledged(key);
        if ss.released[n] != 0 {
            log.note(|_| {
                format!(
                    "n{i}: release of {}#{token} acknowledged; record kept until the attempt in flight ends",
                    name_of(name)
                )
            });
        } else {
            log.note(|_| {
                format!("n{i}: release of {}#{token} acknowledged; released-token record forgotten", name_of(name))
            });
        }
    }

    /// A digest mismatch: held terms the backend no longer lists are taken over; leases it
    /// lists that no term or attempt knows are orphans, released with their token. The
    /// snapshot was taken when the backend processed the keep-alive, so it only speaks about
    /// the terms the keep-alive's digest (`held`) covered: a term adopted since is not judged.
    fn reconcile(
        &self,
        s: &mut State,
        i: usize,
        sid: u8,
        held: [u8; MAX_NAMES],
        owned: [u8; MAX_NAMES],
        log: &mut Log,
    ) {
        // The engine's own rule decides (`simba_core::ledger::reconcile`), on the model's
        // compact state: the terms the keep-alive's digest covered, the terms now, the
        // backend's listing, and what the node holds or acquires before anything is revoked.
        let names = 0..self.cfg.names;
        let node = s.nodes[i];
        let asked: HashSet<(&str, u64)> =
            names.clone().filter(|&n| held[n] != 0).map(|n| (name_key(n as u8), u64::from(held[n]))).collect();
        let terms: Vec<HeldTerm<'static>> = names
            .clone()
            .filter(|&n| node.terms[n] != 0)
            .map(|n| HeldTerm {
                name: name_key(n as u8),
                token: u64::from(node.terms[n]),
                revoked: node.elect[n].revoked,
            })
            .collect();
        let listed: Vec<(String, u64)> = names
            .clone()
            .filter(|&n| owned[n] != 0)
            .map(|n| (name_key(n as u8).to_owned(), u64::from(owned[n])))
            .collect();
        let index = |name: &str| names.clone().find(|&n| name_key(n as u8) == name);
        let known = |name: &str| index(name).is_some_and(|n| node.terms[n] != 0 || node.attempts[n].is_some());
        let judged = self.in_core(|| ledger::reconcile(&asked, &terms, &listed, known));
        for name in judged.taken {
            let Some(n) = index(name) else { continue };
            let t = s.nodes[i].terms[n];
            log.note(|_| format!("n{i}: term {}#{t} revoked (TakenOver)", name_of(n as u8)));
            self.term_lost(s, i, n, simba_core::RevokeReason::TakenOver, log);
        }
        for (name, token) in judged.orphans {
            let Some(n) = index(&name) else { continue };
            let token = u8::try_from(token).expect("tokens fit in u8");
            self.release_won(s, i, (sid, n as u8, token), "orphan listed by the backend", log);
        }
    }

    /// Node `i` reads the reply of an acquisition of `name` for session `sid`, whose call
    /// had `fate` on the node's side. The engine's own rules decide (K4): whether the reply
    /// answers the current attempt (`simba_core::attempt::answers_current_attempt`: awaited,
    /// and sent for the session live now), and then whether its win becomes a term of that
    /// session (`simba_core::ledger::judge_win`). A win that does not is released, unless the
    /// node gave the call up (the engine never sees that reply).
    #[allow(clippy::too_many_arguments)]
    fn acq_reply(
        &self,
        s: &mut State,
        i: usize,
        fate: Fate,
        sid: u8,
        name: u8,
        result: AcqResult,
        log: &mut Log,
    ) -> Option<Violation<Invariant>> {
        let n = usize::from(name);
        log.note(|_| format!("n{i}: reads acquire reply {result:?} for {} (s{sid}, {fate:?})", name_of(name)));
        // The attempt the reply belongs to ends (K3).
        match fate {
            Fate::Live => {
                s.nodes[i].attempts[n] = None;
            }
            Fate::Detached => {
                // The abandoned attempt's reply frees its K3 slot, if it still holds it (with
                // the core's `AbandonFreesSlot` switched on, the slot was freed at the
                // step-down and may hold a newer attempt now).
                let mut slot = slot_of(s.nodes[i].attempts[n]);
                if slot == AttemptSlot::Abandoned {
                    slot.finished();
                    s.nodes[i].attempts[n] = None;
                }
            }
            Fate::Dropped => {}
        }
        let AcqResult::Won(t) = result else {
            return self.attempt_ended(s, i, n, fate, false, log);
        };
        let session = s.nodes[i].session;
        let of_current = session.is_some_and(|ss| ss.sid == sid);
        let answers = self.in_core(|| answers_current_attempt(fate == Fate::Live, of_current));
        let adoptable = answers
            && s.nodes[i].terms[n] == 0
            && session.is_some_and(|ss| {
                self.in_core(|| {
                    judge_win(u64::from(t), ss.deadline > 0, false, u64::from(ss.released[n])) == Verdict::Adopt
                })
            });
        if adoptable {
            if fate != Fate::Live || !of_current {
                log.note(|_| format!("n{i}: adopts a reply that does not answer its current attempt (K4 broken)"));
            }
            let v = self.adopt(s, i, name, t, log);
            return v.or(self.attempt_ended(s, i, n, fate, true, log));
        }
        match fate {
            Fate::Live => self.release_won(s, i, (sid, name, t), "not adoptable (K4)", log),
            Fate::Detached => self.release_won(s, i, (sid, name, t), "late win of an abandoned attempt (K4)", log),
            Fate::Dropped => {}
        }
        self.attempt_ended(s, i, n, fate, false, log)
    }

    /// The election's current attempt ended (its reply, `fate` `Live`): the machine is told
    /// whether it adopted a term (K1, K4); an abandoned or given-up attempt's reply tells it
    /// nothing.
    fn attempt_ended(
        &self,
        s: &mut State,
        i: usize,
        n: usize,
        fate: Fate,
        adopted: bool,
        log: &mut Log,
    ) -> Option<Violation<Invariant>> {
        if fate != Fate::Live {
            return None;
        }
        self.feed(s, i, n, &|m| m.attempt_ended(NodeTime::NOW, adopted, || 0.0), log)
    }

    /// The backend processes request `m` (already removed). `None` when a bound forbids it.
    pub(super) fn backend_receives(
        &self,
        s: &mut State,
        m: Msg,
        log: &mut Log,
    ) -> Option<Option<Violation<Invariant>>> {
        let i = m.node;
        let lease = self.cfg.lease;
        match m.body {
            Body::Open => {
                if s.next_sid >= self.cfg.max_sessions {
                    return None;
                }
                s.next_sid += 1;
                let sid = s.next_sid;
                s.sessions.push((sid, lease));
                log.note(|c| {
                    format!("backend: opens s{sid} for n{i}, expires at B={}; replies Opened", c[0] + i64::from(lease))
                });
                self.push_reply(s, i, Body::Opened { sid, remaining: lease }, m.fate);
            }
            Body::KeepAlive { sid, held } => {
                if let Some(e) = s.sessions.iter_mut().find(|(x, _)| *x == sid) {
                    e.1 = lease;
                    let mut owned = [0; MAX_NAMES];
                    for (n, l) in s.leases.iter().enumerate().take(self.cfg.names) {
                        if l.holder == sid {
                            owned[n] = l.token;
                        }
                    }
                    let owned = (owned != held).then_some(owned);
                    let names = self.cfg.names;
                    log.note(|c| {
                        format!(
                            "backend: renews s{sid} (from n{i}), expires at B={}; replies Alive(remaining {lease}){}",
                            c[0] + i64::from(lease),
                            owned.map_or(String::new(), |o| format!(", digest differs, owned {:?}", &o[..names]))
                        )
                    });
                    self.push_reply(s, i, Body::Alive { remaining: lease, owned }, m.fate);
                } else {
                    log.note(|_| format!("backend: keep-alive of s{sid} (from n{i}): expired; replies Expired"));
                    self.push_reply(s, i, Body::Expired, m.fate);
                }
            }
            Body::Acquire { sid, name } => {
                let n = usize::from(name);
                let mut granted_violation = None;
                let result = if s.expiry(sid).is_none() {
                    AcqResult::Expired
                } else if s.leases[n].holder == sid {
                    AcqResult::Won(s.leases[n].token)
                } else if s.leases[n].holder == 0 {
                    if s.leases[n].token >= self.cfg.max_tokens {
                        return None;
                    }
                    s.leases[n].token += 1;
                    s.leases[n].holder = sid;
                    let t = s.leases[n].token;
                    if t <= s.granted[n] {
                        granted_violation = Some(Violation {
                            invariant: Invariant::TokenMonotonicity,
                            detail: format!(
                                "the backend granted token {t} of {} after token {}",
                                name_of(name),
                                s.granted[n]
                            ),
                        });
                    }
                    s.granted[n] = s.granted[n].max(t);
                    AcqResult::Won(t)
                } else {
                    AcqResult::Held
                };
                log.note(|_| format!("backend: acquire {} for s{sid} (from n{i}): {result:?}", name_of(name)));
                self.push_reply(s, i, Body::AcqReply { sid, name, result }, m.fate);
                if granted_violation.is_some() {
                    return Some(granted_violation);
                }
            }
            Body::Release { sid, name, token } => {
                let l = &mut s.leases[usize::from(name)];
                let frees = l.holder == sid && (token == l.token || self.is(Mutant::ReleaseWithoutToken));
                let current = *l;
                if frees {
                    l.holder = 0;
                }
                if self.cfg.release_acks {
                    self.push_reply(s, i, Body::ReleaseAck { sid, name, token }, m.fate);
                }
                log.note(|_| {
                    format!(
                        "backend: release({}, s{sid}, token {token}) (from n{i}); record is s{}#{}: {}",
                        name_of(name),
                        current.holder,
                        current.token,
                        if frees { "freed" } else { "no-op" }
                    )
                });
            }
            Body::Close { sid } => {
                s.sessions.retain(|(x, _)| *x != sid);
                for l in &mut s.leases {
                    if l.holder == sid {
                        l.holder = 0;
                    }
                }
                log.note(|_| format!("backend: closes s{sid} (from n{i}); its leases are free"));
            }
            _ => return None,
        }
        Some(None)
    }
}

/// The lease name of model name `n` as the engine's ledger keys it.
fn name_key(n: u8) -> &'static str {
    ["a", "b", "c", "d"][usize::from(n)]
}

/// The engine's K4 record of name `n` as the model's session holds it.
fn released_record(ss: &Sess, n: usize, key: &str) -> ReleasedTokens {
    let mut record = ReleasedTokens::default();
    if ss.released[n] != 0 {
        record.note_released(key, u64::from(ss.released[n]));
        if ss.acked[n] {
            record.release_acknowledged(key, u64::from(ss.released[n]), true);
        }
    }
    record
}

/// A call the node sent at `sent` (relative to its clock now), as the engine's machine holds it.
fn sent_at(sent: i16) -> CoreCall<NodeTime> {
    CoreCall { sent_at: NodeTime::at(sent) }
}

impl LeaseModel {
    /// When the next keep-alive is due, in whole units from now, from the machine's `next`:
    /// rounded down (the model's timer already fires at the last whole instant before its due
    /// time) and not in the past. The model's backend always grants `lease_duration`, so the
    /// period is `renew_interval` (D4 never shortens it here) and `next` is a whole unit.
    ///
    /// # Panics
    ///
    /// If the machine's period is another: the model's timers (D2) assume `renew_interval`.
    fn renew_at(&self, next: NodeTime, period: std::time::Duration) -> i16 {
        assert_eq!(
            period,
            duration(self.cfg.renew_interval),
            "the model renews every renew_interval (its backend always grants lease_duration)"
        );
        next.units_down().max(0)
    }
}
