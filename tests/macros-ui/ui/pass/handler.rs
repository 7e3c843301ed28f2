use simba::job::{HANDLERS, StateNeed};
use simba::{JobContext, State, Term, simba_handler};

#[derive(Clone)]
struct Db;

// The name is the function's; the payload a JSON number.
#[simba_handler]
async fn plain(_term: &Term, _payload: u64) {}

// Another name; the payload, then the context and the state, a `Result`.
#[simba_handler(name = "report.v2")]
async fn report(_term: &Term, tenants: Vec<u64>, _ctx: &JobContext, State(_db): State<Db>) -> Result<(), std::io::Error> {
    let _ = tenants;
    Ok(())
}

// A schedule without a payload (`null`) reaches a `()` one.
#[simba_handler]
async fn no_payload(_term: &Term, (): ()) {}

fn main() {
    let find = |name: &str| HANDLERS.iter().find(|h| h.name == name).expect("registered");
    assert!(find("plain").needs.is_empty());
    assert_eq!(find("report.v2").needs, &[StateNeed::of::<Db>()]);
    let _ = find("no_payload");
}
