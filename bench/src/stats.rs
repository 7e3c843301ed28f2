//! Small statistics helpers.

/// The `q` quantile (0..=1) of `v` by nearest rank; `NaN` when empty.
pub(crate) fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = (q * s.len() as f64).ceil() as usize;
    s[rank.clamp(1, s.len()) - 1]
}

/// The median of `v`.
pub(crate) fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 { s[n / 2] } else { (s[n / 2 - 1] + s[n / 2]) / 2.0 }
}

/// The largest value of `v`.
pub(crate) fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::NAN, f64::max)
}

/// A distribution summary: median, p90, p99, max, all in the unit of `v`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Summary {
    /// Number of samples.
    pub(crate) n: usize,
    /// Median.
    pub(crate) p50: f64,
    /// 90th percentile.
    pub(crate) p90: f64,
    /// 99th percentile.
    pub(crate) p99: f64,
    /// Maximum.
    pub(crate) max: f64,
}

/// Summarises `v`.
pub(crate) fn summary(v: &[f64]) -> Summary {
    Summary { n: v.len(), p50: median(v), p90: quantile(v, 0.9), p99: quantile(v, 0.99), max: max(v) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_by_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.99), 99.0);
        assert_eq!(quantile(&v, 1.0), 100.0);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(quantile(&[], 0.5).is_nan());
    }
}
