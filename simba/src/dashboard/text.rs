//! How the pages write values for people: durations (`4m05s`) and names in natural order
//! (`parts.2` before `parts.10`). Shared by the views and the pages.

use std::time::Duration;

/// `3.2s`, `42s`, `4m05s`, `2h10m`; `-` when unknown.
pub(crate) fn human(d: Option<Duration>) -> String {
    let Some(d) = d else { return "-".to_owned() };
    let s = d.as_secs();
    if s < 10 {
        format!("{:.1}s", d.as_secs_f64())
    } else if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    }
}

/// A sort key that puts `parts.2` before `parts.10`: the name without its trailing number,
/// then the number.
pub(crate) fn natural(name: &str) -> (&str, u64, &str) {
    let digits = name.len() - name.bytes().rev().take_while(u8::is_ascii_digit).count();
    match name[digits..].parse::<u64>() {
        Ok(n) => (&name[..digits], n, name),
        Err(_) => (name, 0, name),
    }
}

#[cfg(test)]
mod tests {
    use super::natural;

    #[test]
    fn leases_sort_naturally() {
        let mut names = vec!["parts.10", "tick", "parts.2", "parts.1", "a9", "a10", "parts."];
        names.sort_by_key(|n| natural(n));
        assert_eq!(names, vec!["a9", "a10", "parts.", "parts.1", "parts.2", "parts.10", "tick"]);
    }
}
