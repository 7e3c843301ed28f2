//! Handlers: the code a schedule stored as data runs (ADR 0020). A schedule is data (an id, a
//! spec, a JSON payload, the handler's name); its handler is code, registered like a job: by
//! `#[simba_handler]` at link time in [`HANDLERS`], or by hand with
//! [`RuntimeBuilder::handler`](crate::RuntimeBuilder::handler).

use std::borrow::Cow;
use std::sync::Arc;

use super::registry::{JobFn, JobFuture};
use super::state::StateNeed;
use crate::{BoxError, Term};

/// A handler's body: called once per run with the partition's term and the schedule's
/// payload (its JSON text, which the body deserialises: the macro's wrapper into the
/// function's payload type).
pub type HandlerRun = JobFn<dyn Fn(Term, Arc<str>) -> JobFuture + Send + Sync>;

impl HandlerRun {
    /// The body `f`, a function or a non-capturing closure in a `const` or `static`.
    pub const fn from_static(f: &'static (dyn Fn(Term, Arc<str>) -> JobFuture + Send + Sync)) -> Self {
        JobFn::from_static_body(f)
    }

    /// The body `f`, a closure that may capture.
    pub fn from_closure(f: impl Fn(Term, Arc<str>) -> JobFuture + Send + Sync + 'static) -> Self {
        JobFn::from_shared_body(Arc::new(f))
    }
}

/// The code behind schedules stored as data: a name (the lease-name rule; what a schedule's
/// `handler` names) and a body. What `#[simba_handler]` generates, and what a user can write
/// by hand ([`Handler::new`] in a `static`, [`Handler::from_closure`] at runtime).
///
/// ```
/// use std::sync::Arc;
/// use simba::Term;
/// use simba::job::{Handler, JobFuture, job_future};
///
/// fn send_report(term: Term, payload: Arc<str>) -> JobFuture {
///     job_future(async move {
///         let tenant: u64 = serde_json::from_str(&payload)?;
///         term.ensure_valid(std::time::Duration::from_millis(100))?;
///         let _ = tenant;
///         Ok::<(), simba::BoxError>(())
///     })
/// }
///
/// static SEND_REPORT: Handler = Handler::new("send_report", &send_report);
/// assert_eq!(SEND_REPORT.name, "send_report");
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Handler {
    /// The name schedules refer to (the function's name for the macro).
    pub name: Cow<'static, str>,
    /// One run.
    pub run: HandlerRun,
    /// The application's state it takes ([`State<T>`](crate::State) parameters): the runtime
    /// refuses to start when one was not given.
    pub needs: &'static [StateNeed],
}

impl Handler {
    /// A handler named `name` running `run`; `const`, so it can be a `static` registry entry.
    pub const fn new(name: &'static str, run: &'static (dyn Fn(Term, Arc<str>) -> JobFuture + Send + Sync)) -> Self {
        Handler { name: Cow::Borrowed(name), run: HandlerRun::from_static(run), needs: &[] }
    }

    /// A handler with an owned name running the closure `run` (one added at runtime).
    pub fn from_closure(
        name: impl Into<Cow<'static, str>>,
        run: impl Fn(Term, Arc<str>) -> JobFuture + Send + Sync + 'static,
    ) -> Self {
        Handler { name: name.into(), run: HandlerRun::from_closure(run), needs: &[] }
    }

    /// Takes the application's state types `needs` (the runtime checks them at start).
    pub const fn with_needs(mut self, needs: &'static [StateNeed]) -> Self {
        self.needs = needs;
        self
    }
}

/// Every handler linked into the binary (`#[simba_handler]`).
#[linkme::distributed_slice]
pub static HANDLERS: [Handler];

/// The payload of handler `handler`'s run, deserialised from the schedule's JSON text into
/// `T`: the error says which handler and type, so the run is recorded `failed` with it (the
/// schedule stays; a payload that no longer fits the handler's type after a code change is
/// fixed by editing the schedule).
pub(crate) fn decode_payload<T: serde::de::DeserializeOwned>(payload: &str, handler: &str) -> Result<T, BoxError> {
    serde_json::from_str(payload).map_err(|e| {
        format!(
            "the schedule's payload does not deserialise into handler `{handler}`'s payload type `{}`: {e}",
            std::any::type_name::<T>()
        )
        .into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a13_a_payload_that_does_not_fit_names_the_handler_and_the_type() {
        #[derive(Debug, serde::Deserialize)]
        struct Report {
            #[allow(dead_code)]
            tenant: u64,
        }
        assert!(decode_payload::<Report>(r#"{"tenant": 4711}"#, "send_report").is_ok());
        let e = decode_payload::<Report>(r#"{"tenant": "x"}"#, "send_report").expect_err("a string");
        let text = e.to_string();
        assert!(text.contains("send_report") && text.contains("Report") && text.contains("expected u64"), "{text}");
    }
}
