//! `simba namespaces`: the namespaces present in a store, with what each
//! holds, as a table or JSON.

use std::io::Write;

use serde::Serialize;
use simba::backend::Backend;
use simba::backend::namespace::{NamespaceInfo, list};

use crate::json;
use crate::output::{Failure, emit};

/// How the default namespace is shown in the table.
const DEFAULT_LABEL: &str = "(default)";

/// Lists the namespaces of `backend` (connected without a namespace).
pub(super) async fn run(
    backend: &impl Backend,
    url: &simba::backend::BackendUrl,
    json: bool,
    out: &mut (dyn Write + Send),
) -> Result<u8, Failure> {
    let list = list(backend)
        .await
        .map_err(|e| Failure::unreachable(format!("cannot read the backend at {}: {}", url, super::chain(&e))))?;
    let text = if json { to_json(&list)? } else { to_table(&list) };
    emit(out, &text)
}

/// `simba namespaces --json`.
#[derive(Serialize)]
struct NamespacesJson<'a> {
    schema: u32,
    namespaces: Vec<NamespaceJson<'a>>,
}

#[derive(Serialize)]
struct NamespaceJson<'a> {
    /// `None` for the default namespace.
    namespace: Option<&'a str>,
    sessions: usize,
    leases: usize,
    groups: usize,
    jobs: usize,
}

fn to_json(list: &[NamespaceInfo]) -> Result<String, Failure> {
    let namespaces = list
        .iter()
        .map(|n| NamespaceJson {
            namespace: n.name.as_deref(),
            sessions: n.sessions,
            leases: n.leases,
            groups: n.groups,
            jobs: n.jobs,
        })
        .collect();
    json::pretty(&NamespacesJson { schema: json::SCHEMA, namespaces })
}

fn to_table(list: &[NamespaceInfo]) -> String {
    if list.is_empty() {
        return "no namespace holds anything yet: a namespace appears once one of its nodes opened a session or ran a \
                job\n"
            .to_owned();
    }
    let rows: Vec<[String; 5]> = list
        .iter()
        .map(|n| {
            [
                n.name.clone().unwrap_or_else(|| DEFAULT_LABEL.to_owned()),
                n.sessions.to_string(),
                n.leases.to_string(),
                n.groups.to_string(),
                n.jobs.to_string(),
            ]
        })
        .collect();
    let header = ["NAMESPACE", "SESSIONS", "LEASES", "GROUPS", "JOBS"];
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut s = String::new();
    let mut line = |cells: &[String]| {
        let mut l = String::new();
        for (c, w) in cells.iter().zip(&widths) {
            l.push_str(&format!("{c:<w$}  "));
        }
        s.push_str(l.trim_end());
        s.push('\n');
    };
    line(&header.map(str::to_owned));
    for r in &rows {
        line(r);
    }
    s
}
