//! The Kubernetes-style probes (rule O1), answered alike by the metrics listener
//! (`[metrics] listen`) and the dashboard's router: `/livez` says the process serves,
//! `/readyz` says the session is live, `/healthz` is kept as an alias of `/readyz`.
//!
//! Liveness must not depend on the store: a liveness probe that failed whenever the database
//! blinked would make Kubernetes restart every pod at once, and the restarted pods would only
//! open new sessions on the same unreachable store. Readiness may: a pod whose session is not
//! live holds no term, and taking it out of a Service's endpoints is what readiness is for.

use crate::SessionStatus;

/// Every probe path, as a 404 lists them.
pub(crate) const PATHS: [&str; 3] = ["/livez", "/readyz", "/healthz"];

/// A probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Probe {
    /// `/livez`: the process answers.
    Live,
    /// `/readyz` (and its alias `/healthz`): the session is live.
    Ready,
}

impl Probe {
    /// The probe served at `path`, if any (the dashboard's router routes each path itself).
    #[cfg_attr(not(feature = "prometheus"), allow(dead_code))]
    pub(crate) fn at(path: &str) -> Option<Probe> {
        match path {
            "/livez" => Some(Probe::Live),
            "/readyz" | "/healthz" => Some(Probe::Ready),
            _ => None,
        }
    }
}

/// A probe's answer: whether it passes (200, else 503) and its body, one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Answer {
    pub(crate) ok: bool,
    pub(crate) body: String,
}

/// The answer of `probe` for a client whose session is `status`.
pub(crate) fn answer(probe: Probe, status: SessionStatus) -> Answer {
    match probe {
        // Serving this request is the whole test: nothing here may consult the store.
        Probe::Live => Answer { ok: true, body: "alive\n".to_owned() },
        Probe::Ready => ready(status),
    }
}

/// `/readyz`: 200 `live` while the session is live, else 503 with what is wrong.
pub(crate) fn ready(status: SessionStatus) -> Answer {
    let why = match status {
        SessionStatus::Live => return Answer { ok: true, body: "live\n".to_owned() },
        SessionStatus::Opening => "not ready: opening: no live session with the store yet",
        SessionStatus::Suspended => {
            "not ready: suspended: the last renewal failed (is the store reachable?); terms are held until the \
             deadline"
        }
        SessionStatus::Closed => "not ready: closed: the client is shutting down",
        _ => "not ready: the session is not live",
    };
    Answer { ok: false, body: format!("{why}\n") }
}

/// The 404 body for a path that is no probe: it names them.
pub(crate) fn not_found(path: &str, others: &str) -> String {
    format!(
        "no such path {path}: the probes are {} (/livez: the process serves; /readyz: the session is live; \
         /healthz: the same as /readyz){others}\n",
        PATHS.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn o1_liveness_never_depends_on_the_session() {
        for s in [SessionStatus::Opening, SessionStatus::Live, SessionStatus::Suspended, SessionStatus::Closed] {
            assert_eq!(answer(Probe::Live, s), Answer { ok: true, body: "alive\n".into() }, "{s:?}");
            let ready = answer(Probe::Ready, s);
            assert_eq!(ready.ok, s == SessionStatus::Live, "{s:?}");
            let label = format!("{s:?}").to_lowercase();
            assert!(ready.body.contains(&label) && ready.body.ends_with('\n'), "{s:?}: {}", ready.body);
        }
        assert_eq!(Probe::at("/healthz"), Probe::at("/readyz"));
        assert_eq!(Probe::at("/livez"), Some(Probe::Live));
        assert_eq!(Probe::at("/live"), None);
        let text = not_found("/live", "");
        assert!(PATHS.iter().all(|p| text.contains(p)), "{text}");
    }
}
