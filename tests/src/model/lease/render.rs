//! Counterexamples printed as readable traces, with absolute clock readings.

use std::fmt::Write as _;

use super::{LeaseModel, Log, Perm};
use crate::model::config::{Invariant, RateMode, Schedule};
use crate::model::explore::Counterexample;
use crate::model::state::*;

impl LeaseModel {
    /// Renders a counterexample as a readable trace, with absolute clock readings.
    pub fn render(&self, cex: &Counterexample<State, Action, Invariant>) -> String {
        let mut out = String::new();
        match self.cfg.mutant {
            Some(m) => {
                let _ = writeln!(out, "rules: mutant {m:?}");
            }
            None => {
                let _ = writeln!(out, "rules: correct");
            }
        }
        if self.cfg.rate_mode == RateMode::Fixed {
            let r = cex.initial.rates;
            let _ = writeln!(out, "clock rates per real tick: backend {}, n0 {}, n1 {}", r[0], r[1], r[2]);
        }
        let _ = writeln!(
            out,
            "lease {} (backend units), drift {}/{}, margin {}, renew_interval {}: node validity = {} node units",
            self.cfg.lease,
            self.cfg.drift.0,
            self.cfg.drift.1,
            self.cfg.margin,
            self.cfg.renew_interval,
            self.validity(self.cfg.lease)
        );
        if self.cfg.schedule == Schedule::Timers {
            let _ = writeln!(out, "  0. t=0 [B=0 n0=0 n1=0] n0 and n1: send open-session (sent at 0)");
        }
        let mut log = Log { clocks: [0; 3], now: 0, lines: Some(Vec::new()) };
        // The trace's actions apply to representatives (see `symmetric`); `s` is the state as
        // it really evolves, and `perm` takes it to the representative the next action was
        // chosen in (each symmetry is its own inverse).
        let mut s = cex.initial;
        let mut perm = Perm::default();
        for (k, a) in cex.actions.iter().enumerate() {
            log.lines = Some(Vec::new());
            let a = Self::permute_action(*a, perm);
            let (next, _) = self.apply_raw(&s, a, &mut log).expect("a replayed action is enabled");
            perm = self.symmetry_of(&next);
            let c = log.clocks;
            let head = format!("{:>3}. t={} [B={} n0={} n1={}]", k + 1, log.now, c[0], c[1], c[2]);
            let lines = log.lines.take().unwrap_or_default();
            for (j, l) in lines.iter().enumerate() {
                if j == 0 {
                    let _ = writeln!(out, "{head} {l}");
                } else {
                    let _ = writeln!(out, "{:width$} {l}", "", width = head.len());
                }
            }
            s = next;
        }
        let _ = writeln!(out, "state: {}", self.describe(&s, &log.clocks));
        let _ = writeln!(out, "VIOLATED {:?}: {}", cex.violation.invariant, cex.violation.detail);
        out
    }

    /// A one-line summary of `s`, with absolute readings.
    fn describe(&self, s: &State, c: &[i64; 3]) -> String {
        let mut d = String::new();
        for (i, node) in s.nodes.iter().enumerate() {
            let _ = write!(d, "n{i}: ");
            match node.session {
                Some(ss) => {
                    let _ = write!(d, "s{} deadline n{i}={}", ss.sid, Log::node_at(c, i, ss.deadline));
                }
                None => d.push_str("no session"),
            }
            for n in 0..self.cfg.names {
                if node.terms[n] != 0 {
                    let _ = write!(d, ", term {}#{}", name_of(n as u8), node.terms[n]);
                }
            }
            d.push_str("; ");
        }
        d.push_str("backend:");
        if s.sessions.is_empty() {
            d.push_str(" no live session");
        }
        for (sid, e) in &s.sessions {
            let _ = write!(d, " s{sid} expires at B={}", c[0] + i64::from(*e));
        }
        for (n, l) in s.leases.iter().enumerate().take(self.cfg.names) {
            if l.holder == 0 {
                let _ = write!(d, ", lease {} free (last token {})", name_of(n as u8), l.token);
            } else {
                let _ = write!(d, ", lease {} held by s{} with token {}", name_of(n as u8), l.holder, l.token);
            }
        }
        d
    }
}
