use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use simba::job::{JobContext, PARTITIONED_JOBS, SCHEDULED_JOBS, StateNeed};
use simba::{State, Term, simba_partitioned, simba_scheduled};

#[derive(Clone)]
struct Db(Arc<AtomicU32>);

#[derive(Clone)]
struct Mailer;

// State after the context, destructured.
#[simba_scheduled(cron = "0 * * * * *", retry = 1)]
async fn counts(_term: &Term, _ctx: &JobContext, State(db): State<Db>) -> Result<(), std::io::Error> {
    db.0.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

// Two states, the context between them, a path to `State`.
#[simba_scheduled(fixed_rate = "1s")]
async fn mails(_term: &Term, _db: State<Db>, _ctx: &JobContext, _mailer: simba::State<Mailer>) {}

#[simba_partitioned(group = "g", partitions = 2)]
async fn per_partition(_term: &Term, _partition: u32, State(db): State<Db>) {
    db.0.fetch_add(1, Ordering::SeqCst);
}

fn main() {
    let needs = |name: &str| SCHEDULED_JOBS.iter().find(|j| j.name == name).expect("registered").needs;
    assert_eq!(needs("counts"), &[StateNeed::of::<Db>()]);
    assert_eq!(needs("mails"), &[StateNeed::of::<Db>(), StateNeed::of::<Mailer>()]);
    let part = PARTITIONED_JOBS.iter().find(|j| j.name == "per_partition").expect("registered");
    assert_eq!(part.needs, &[StateNeed::of::<Db>()]);
}
