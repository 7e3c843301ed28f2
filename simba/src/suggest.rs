//! "Did you mean ...?": the known name closest to a mistyped one, for error messages
//! (configuration keys, environment overrides, job names).

/// The candidate closest to `word` by edit distance, if it is close enough to be a typo: at
/// most a third of the longer name's length, and never less than 2 edits.
pub(crate) fn nearest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (strsim::levenshtein(word, c), c))
        .filter(|(d, c)| *d <= (word.chars().count().max(c.chars().count()) / 3).max(2))
        .min()
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::nearest;

    #[test]
    fn typos_find_their_name_and_nonsense_finds_none() {
        assert_eq!(nearest("reprot", ["report", "billing"]), Some("report"));
        assert_eq!(nearest("leese_duration", ["lease_duration", "renew_interval"]), Some("lease_duration"));
        assert_eq!(nearest("sesion", ["backend", "session"]), Some("session"));
        assert_eq!(nearest("zzzzzzzz", ["report"]), None);
        assert_eq!(nearest("x", ["backend"]), None);
    }
}
