//! The jobs store's claim rule (ADR 0012): what a claim of a job's slot or of its pending
//! run-now request answers, and what the store writes, decided from the rows the store read
//! in the claim's atomic step. One pure function, [`decide`], is the rule: the in-memory,
//! SQLite, ZooKeeper and etcd stores call it; the PostgreSQL function, the MySQL procedure and
//! the Redis script write the same steps in their own languages and name it as their
//! reference; every store runs the same conformance suite (`simba::tck::jobs`).
//!
//! The fence is not here: whether the claiming session holds the lease with its token is
//! checked by the store itself in the same atomic step (it answers `NotHolder` before or
//! instead of these writes). After the fence, in this order (`JobStore::claim_run`, steps
//! 2 to 4):
//!
//! 1. A scheduled or caught-up slot is already claimed unless it is after the job's ledger
//!    (`last_slot`) and the lease's last claimed slot (what `Backend::claim_slot` writes):
//!    monotonic, whatever the nodes' clocks say. A run-now claim is already claimed (there is
//!    nothing to take) unless a request is pending: the job's own, or for a partition `g/i`
//!    one of its group `g` that this partition has not taken. When both are pending, one
//!    claim takes both, at the later of their times: each asked for one run of this job name
//!    now, and this one run answers both (no second manual run follows).
//! 2. Paused (the job or its group): a scheduled slot is still consumed (the ledger and the
//!    lease move, so it is not reported missed later; no record), a run-now request stays
//!    pending (nothing is written).
//! 3. Otherwise claimed: the ledger and the lease move (scheduled), or the requests are taken
//!    (run now: the control version moves, since a pending request went away), and the store
//!    writes the `running` record at the answer's slot.

/// One job name's control row, as every store keeps it (plain values; a store maps its own
/// columns, hash fields or encoded text onto these).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ControlRow {
    /// Whether this name itself is paused.
    pub paused: bool,
    /// The slot ledger: the latest scheduled or caught-up slot claimed, unix milliseconds.
    pub last_slot: Option<i64>,
    /// How many run-now requests were made for this name (the newest request's id).
    pub trigger_id: i64,
    /// The slot of the newest request ([`trigger_slot`]), unix milliseconds.
    pub trigger_ms: Option<i64>,
    /// The id of the newest request of this name a claim took.
    pub taken_id: i64,
    /// For a partition `g/i`: the id of the newest request of its group `g` it took.
    pub group_taken_id: i64,
}

impl ControlRow {
    /// The slot of this name's own request that no claim has taken yet.
    pub fn pending(&self) -> Option<i64> {
        if self.trigger_id > self.taken_id { self.trigger_ms } else { None }
    }

    /// The slot of a request of `group` (this partition's group's row) that this partition
    /// has not taken yet.
    pub fn group_pending(&self, group: &ControlRow) -> Option<i64> {
        if group.trigger_id > self.group_taken_id { group.trigger_ms } else { None }
    }

    /// A new run-now request at `at_ms`: its slot is [`trigger_slot`]; returns its id
    /// (strictly increasing per name).
    pub fn request(&mut self, at_ms: i64) -> i64 {
        self.trigger_ms = Some(trigger_slot(self.trigger_ms, self.pending().is_some(), at_ms));
        self.trigger_id += 1;
        self.trigger_id
    }

    /// Pauses (`true`) or resumes: `(changed, was paused)`.
    pub fn set_paused(&mut self, paused: bool) -> (bool, bool) {
        let was = self.paused;
        self.paused = paused;
        (was != paused, was)
    }
}

/// The manual slot of a new run-now request at `at_ms`, given the name's last request slot
/// `prev` and whether that request is still `pending`: pending requests collapse into one run
/// at the newest time; after a request was taken, the next one gets a later slot than it even
/// within the same millisecond (or with a clock that stepped back), since the slot names the
/// run's record.
pub fn trigger_slot(prev: Option<i64>, pending: bool, at_ms: i64) -> i64 {
    match prev {
        Some(p) if pending => p.max(at_ms),
        Some(p) => p.saturating_add(1).max(at_ms),
        None => at_ms,
    }
}

/// What a claim asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// A scheduled or caught-up slot at this instant, unix milliseconds (the rule treats
    /// both alike).
    Slot(i64),
    /// The pending run-now request of the job or its group (the slot is the request's).
    RunNow,
    /// A slot of a schedule stored as data (ADR 0020, rule A5), at this instant, unix
    /// milliseconds, claimed under its partition's lease and token. The schedule's own ledger
    /// (`own.last_slot`, the control row of `schedule/<id>`) is the only ledger: the
    /// partition's lease carries many schedules, so its last slot is neither read nor
    /// written. Pause as for [`Ask::Slot`]: `own.paused` is the schedule's pause (the store
    /// reads it where it keeps it), and the group's row is the row of `schedule`, which pauses
    /// every schedule.
    ScheduleSlot(i64),
}

/// What the claim answers (after the store's fence let it through).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The slot or a later one was claimed before, or no run-now request is pending.
    AlreadyClaimed,
    /// The job or its group is paused: nothing runs and no record is written.
    Paused,
    /// The slot is this term's: the store writes the `running` record at `slot_ms` (for a
    /// run-now claim, the request's slot).
    Claimed {
        /// The claimed slot, unix milliseconds.
        slot_ms: i64,
    },
}

/// What the store writes besides the `running` record of an [`Answer::Claimed`], in the
/// claim's atomic step, under its fence.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Writes {
    /// The job's control row as it becomes; `None`: unchanged. (The group's row is never
    /// written by a claim: what a partition took of it is kept in its own row.)
    pub own: Option<ControlRow>,
    /// The lease's last claimed slot becomes this; `None`: unchanged.
    pub lease_slot: Option<i64>,
    /// A run-now request was taken: the control version moves.
    pub bump_version: bool,
}

impl Writes {
    /// Whether there is nothing to write (the store answers without its write step).
    pub fn is_empty(&self) -> bool {
        *self == Writes::default()
    }
}

/// The answer of a claim and the writes it makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// What the claim answers.
    pub answer: Answer,
    /// What the store writes (plus the `running` record when the answer is `Claimed`).
    pub writes: Writes,
}

impl Decision {
    fn nothing(answer: Answer) -> Self {
        Decision { answer, writes: Writes::default() }
    }
}

/// The claim rule (see the module's documentation): a claim asking `ask` for a job whose
/// control row is `own`, whose group's row is `group` (`None` when the job is no partition,
/// or its group has no row), on a lease whose last claimed slot is `lease_slot`.
pub fn decide(ask: Ask, own: &ControlRow, group: Option<&ControlRow>, lease_slot: Option<i64>) -> Decision {
    let paused = own.paused || group.is_some_and(|g| g.paused);
    match ask {
        Ask::Slot(slot_ms) => slot(slot_ms, own, own.last_slot.max(lease_slot), Some(slot_ms), paused),
        Ask::ScheduleSlot(slot_ms) => slot(slot_ms, own, own.last_slot, None, paused),
        Ask::RunNow => {
            let from_group = group.and_then(|g| own.group_pending(g));
            let Some(slot_ms) = own.pending().max(from_group) else {
                return Decision::nothing(Answer::AlreadyClaimed);
            };
            if paused {
                return Decision::nothing(Answer::Paused);
            }
            let group_taken_id = group.map_or(own.group_taken_id, |g| own.group_taken_id.max(g.trigger_id));
            let taken = ControlRow { taken_id: own.trigger_id, group_taken_id, ..*own };
            Decision {
                answer: Answer::Claimed { slot_ms },
                writes: Writes { own: Some(taken), lease_slot: None, bump_version: true },
            }
        }
    }
}

/// A scheduled slot at `slot_ms` against the ledger `last`: already claimed at or before it;
/// otherwise the job's ledger moves (and the lease's last slot to `lease_write`), claimed or,
/// when paused, consumed without a run.
fn slot(slot_ms: i64, own: &ControlRow, last: Option<i64>, lease_write: Option<i64>, paused: bool) -> Decision {
    if last.is_some_and(|last| last >= slot_ms) {
        return Decision::nothing(Answer::AlreadyClaimed);
    }
    let writes = Writes {
        own: Some(ControlRow { last_slot: Some(slot_ms), ..*own }),
        lease_slot: lease_write,
        bump_version: false,
    };
    let answer = if paused { Answer::Paused } else { Answer::Claimed { slot_ms } };
    Decision { answer, writes }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: i64 = 1_780_000_000_000;

    fn row() -> ControlRow {
        ControlRow::default()
    }

    /// A row with requests `1..=trigger_id`, the newest at `trigger_ms`, `taken_id` of them taken.
    fn requested(trigger_id: i64, trigger_ms: i64, taken_id: i64) -> ControlRow {
        ControlRow { trigger_id, trigger_ms: Some(trigger_ms), taken_id, ..row() }
    }

    fn claimed(slot_ms: i64, own: ControlRow, lease_slot: Option<i64>, bump_version: bool) -> Decision {
        Decision { answer: Answer::Claimed { slot_ms }, writes: Writes { own: Some(own), lease_slot, bump_version } }
    }

    fn nothing(answer: Answer) -> Decision {
        Decision { answer, writes: Writes::default() }
    }

    /// A scheduled slot after the ledger and the lease is claimed: both move to it, nothing
    /// else in the row changes, the control version stays.
    #[test]
    fn slot_after_the_ledger_and_the_lease_is_claimed() {
        let own = ControlRow { last_slot: Some(T - 1000), ..requested(2, T - 5, 1) };
        assert_eq!(
            decide(Ask::Slot(T), &own, None, Some(T - 2000)),
            claimed(T, ControlRow { last_slot: Some(T), ..own }, Some(T), false)
        );
        assert_eq!(
            decide(Ask::Slot(T), &row(), None, None),
            claimed(T, ControlRow { last_slot: Some(T), ..row() }, Some(T), false)
        );
    }

    /// Monotonic: a slot at or before the job's ledger, or at or before the lease's last slot
    /// (written by `claim_slot`, e.g. by an older build), is already claimed; nothing is written.
    #[test]
    fn slot_at_or_before_the_ledger_or_the_lease_is_already_claimed() {
        let ledger = ControlRow { last_slot: Some(T), ..row() };
        assert_eq!(decide(Ask::Slot(T), &ledger, None, None), nothing(Answer::AlreadyClaimed));
        assert_eq!(decide(Ask::Slot(T - 1), &ledger, None, None), nothing(Answer::AlreadyClaimed));
        assert_eq!(decide(Ask::Slot(T), &row(), None, Some(T)), nothing(Answer::AlreadyClaimed), "the lease's slot");
        assert_eq!(
            decide(Ask::Slot(T), &ledger, None, Some(T - 9)),
            nothing(Answer::AlreadyClaimed),
            "the later of both"
        );
        assert_eq!(
            decide(Ask::Slot(T), &ControlRow { last_slot: Some(T - 9), ..row() }, None, Some(T + 1)),
            nothing(Answer::AlreadyClaimed),
            "the lease ahead of the ledger"
        );
        let paused = ControlRow { paused: true, ..ledger };
        assert_eq!(decide(Ask::Slot(T), &paused, None, None), nothing(Answer::AlreadyClaimed), "before pause");
    }

    /// Paused (the job or its group): a scheduled slot is still consumed (ledger and lease
    /// move) but answers `Paused`, so no record is written.
    #[test]
    fn paused_slot_is_consumed() {
        let own = ControlRow { paused: true, ..row() };
        assert_eq!(
            decide(Ask::Slot(T), &own, None, None),
            Decision {
                answer: Answer::Paused,
                writes: Writes {
                    own: Some(ControlRow { last_slot: Some(T), ..own }),
                    lease_slot: Some(T),
                    bump_version: false
                },
            }
        );
        let group = ControlRow { paused: true, ..row() };
        assert_eq!(
            decide(Ask::Slot(T), &row(), Some(&group), Some(T - 1)),
            Decision {
                answer: Answer::Paused,
                writes: Writes {
                    own: Some(ControlRow { last_slot: Some(T), ..row() }),
                    lease_slot: Some(T),
                    bump_version: false
                },
            },
            "the group's pause"
        );
    }

    /// A scheduled claim leaves run-now requests alone, own and the group's.
    #[test]
    fn slot_leaves_requests_pending() {
        let own = ControlRow { group_taken_id: 1, ..requested(3, T - 7, 2) };
        let group = requested(2, T - 3, 0);
        let d = decide(Ask::Slot(T), &own, Some(&group), None);
        assert_eq!(d, claimed(T, ControlRow { last_slot: Some(T), ..own }, Some(T), false));
        let after = d.writes.own.unwrap_or_default();
        assert_eq!((after.pending(), after.group_pending(&group)), (Some(T - 7), Some(T - 3)));
    }

    /// Run now without a pending request (none made, all taken, the group's taken by this
    /// partition) is already claimed; nothing is written.
    #[test]
    fn run_now_without_a_pending_request_is_already_claimed() {
        assert_eq!(decide(Ask::RunNow, &row(), None, None), nothing(Answer::AlreadyClaimed));
        assert_eq!(decide(Ask::RunNow, &requested(2, T, 2), None, None), nothing(Answer::AlreadyClaimed));
        let own = ControlRow { group_taken_id: 4, ..requested(1, T, 1) };
        assert_eq!(decide(Ask::RunNow, &own, Some(&requested(4, T + 5, 0)), None), nothing(Answer::AlreadyClaimed));
        let paused = ControlRow { paused: true, ..row() };
        assert_eq!(decide(Ask::RunNow, &paused, None, None), nothing(Answer::AlreadyClaimed), "pending before pause");
    }

    /// The job's own request: taken at its slot (`taken_id` catches up with `trigger_id`),
    /// the control version moves, the ledger and the lease stay.
    #[test]
    fn run_now_takes_the_own_request() {
        let own = ControlRow { last_slot: Some(T - 60_000), ..requested(3, T + 20, 1) };
        assert_eq!(
            decide(Ask::RunNow, &own, None, Some(T - 60_000)),
            claimed(T + 20, ControlRow { taken_id: 3, ..own }, None, true)
        );
        // A partition's own request while its group has none pending: the group's id stays.
        let own = ControlRow { group_taken_id: 2, ..requested(1, T, 0) };
        assert_eq!(
            decide(Ask::RunNow, &own, Some(&requested(2, T - 100, 0)), None),
            claimed(T, ControlRow { taken_id: 1, ..own }, None, true)
        );
    }

    /// The group's request, for a partition that has not taken it: taken by this partition
    /// only (its own row records the group's id), at the group request's slot.
    #[test]
    fn run_now_takes_the_groups_request() {
        let group = requested(2, T + 5, 0);
        let own = ControlRow { group_taken_id: 1, ..row() };
        assert_eq!(
            decide(Ask::RunNow, &own, Some(&group), None),
            claimed(T + 5, ControlRow { group_taken_id: 2, ..own }, None, true)
        );
    }

    /// The job's own and its group's requests both pending: ONE claim takes both, at the
    /// later slot, so no second manual run follows.
    #[test]
    fn run_now_takes_own_and_group_requests_in_one_claim() {
        let own = requested(1, T + 10, 0);
        let group = requested(1, T + 30, 0);
        let d = decide(Ask::RunNow, &own, Some(&group), None);
        assert_eq!(d, claimed(T + 30, ControlRow { taken_id: 1, group_taken_id: 1, ..own }, None, true));
        let after = d.writes.own.unwrap_or_default();
        assert_eq!(decide(Ask::RunNow, &after, Some(&group), None), nothing(Answer::AlreadyClaimed), "no second run");
        // The own request the later one.
        let own = requested(5, T + 90, 4);
        assert_eq!(
            decide(Ask::RunNow, &own, Some(&group), None),
            claimed(T + 90, ControlRow { taken_id: 5, group_taken_id: 1, ..own }, None, true)
        );
    }

    /// Paused (the job or its group): a run-now request stays pending; nothing is written.
    #[test]
    fn paused_run_now_stays_pending() {
        let own = ControlRow { paused: true, ..requested(1, T, 0) };
        assert_eq!(decide(Ask::RunNow, &own, None, None), nothing(Answer::Paused));
        let group = ControlRow { paused: true, ..requested(1, T + 1, 0) };
        assert_eq!(decide(Ask::RunNow, &requested(1, T, 0), Some(&group), None), nothing(Answer::Paused));
        assert_eq!(decide(Ask::RunNow, &row(), Some(&group), None), nothing(Answer::Paused), "the group's request");
    }

    /// Requests: ids increase; pending ones collapse at the newest time; one made after a
    /// take gets a later slot than the taken one, even in the same millisecond or with a
    /// clock that stepped back.
    #[test]
    fn requests_collapse_while_pending_and_stay_distinct_once_taken() {
        let mut c = row();
        assert_eq!((c.request(T + 20), c.request(T + 10)), (1, 2));
        assert_eq!(c.pending(), Some(T + 20), "collapsed at the newest time");
        c.taken_id = c.trigger_id;
        assert_eq!(c.pending(), None);
        assert_eq!(c.request(T + 20), 3);
        assert_eq!(c.pending(), Some(T + 21), "a later slot than the taken one");
        c.taken_id = 3;
        c.request(T - 5);
        assert_eq!(c.pending(), Some(T + 22), "a clock that stepped back");
        assert_eq!(trigger_slot(None, false, T), T);
        assert_eq!(trigger_slot(Some(i64::MAX), false, T), i64::MAX);
        assert_eq!(c.set_paused(true), (true, false));
        assert_eq!(c.set_paused(true), (false, true));
        assert_eq!(c.set_paused(false), (true, true));
    }

    /// A5: a schedule's slot is checked against the schedule's own ledger only: the
    /// partition lease's last slot (other schedules of the partition, or `claim_slot`) neither
    /// refuses it nor moves; the ledger moves; pause (the schedule's or `schedule`'s) consumes it.
    #[test]
    fn a5_schedule_slot_uses_the_schedules_own_ledger() {
        let own = ControlRow { last_slot: Some(T - 1000), ..requested(1, T - 5, 0) };
        assert_eq!(
            decide(Ask::ScheduleSlot(T), &own, None, Some(T + 60_000)),
            claimed(T, ControlRow { last_slot: Some(T), ..own }, None, false),
            "a later slot of another schedule on the partition's lease does not refuse it"
        );
        assert_eq!(
            decide(Ask::ScheduleSlot(T), &row(), None, None),
            claimed(T, ControlRow { last_slot: Some(T), ..row() }, None, false),
            "a schedule's first slot"
        );
        let ledger = ControlRow { last_slot: Some(T), ..row() };
        assert_eq!(decide(Ask::ScheduleSlot(T), &ledger, None, None), nothing(Answer::AlreadyClaimed));
        assert_eq!(decide(Ask::ScheduleSlot(T - 1), &ledger, None, Some(T - 9)), nothing(Answer::AlreadyClaimed));
        let paused = ControlRow { paused: true, ..row() };
        let consumed = Decision {
            answer: Answer::Paused,
            writes: Writes {
                own: Some(ControlRow { last_slot: Some(T), ..paused }),
                lease_slot: None,
                bump_version: false,
            },
        };
        assert_eq!(decide(Ask::ScheduleSlot(T), &paused, None, None), consumed);
        let all_paused = ControlRow { paused: true, ..row() };
        assert_eq!(
            decide(Ask::ScheduleSlot(T), &row(), Some(&all_paused), None).answer,
            Answer::Paused,
            "`schedule` paused pauses every schedule"
        );
        let after = decide(Ask::ScheduleSlot(T), &own, None, None).writes.own.unwrap_or_default();
        assert_eq!(after.pending(), Some(T - 5), "a run-now request stays pending");
    }
}
