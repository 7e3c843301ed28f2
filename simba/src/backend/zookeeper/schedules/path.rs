//! Where the schedule store keeps things: names as path segments, and the paths.

use super::SCHEDULES;

/// `name` as one path segment: the lease-name alphabet (`[A-Za-z0-9._:-]`) as it is, every
/// other byte percent-escaped, and so the dots of a name of dots only (`.` and `..` are no
/// ZooKeeper segment); `~` for the empty name (the default space). `~` is never kept, so no
/// two names share a segment.
pub(super) fn segment(name: &str) -> String {
    if name.is_empty() {
        return "~".to_owned();
    }
    let dots_only = name.bytes().all(|b| b == b'.');
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'_' | b':' | b'-') || (b == b'.' && !dots_only) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The name of a [`segment`].
pub(super) fn unsegment(segment: &str) -> String {
    if segment == "~" {
        return String::new();
    }
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub(super) fn space_path(space: &str) -> String {
    format!("{SCHEDULES}/{}", segment(space))
}

pub(super) fn partition_path(space: &str, partition: u32) -> String {
    format!("{}/p/{partition}", space_path(space))
}

pub(super) fn schedule_path(space: &str, partition: u32, id: &str) -> String {
    format!("{}/{}", partition_path(space, partition), segment(id))
}

pub(super) fn audit_path(space: &str, seq: u64) -> String {
    format!("{}/audit/{seq:020}", space_path(space))
}

/// The bytes a child named `segment` takes in its parent's `getChildren` reply.
pub(super) fn listed_bytes(segment: &str) -> u64 {
    4 + segment.len() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ids (rule A1's alphabet) and namespace names are their own segments; anything else is
    /// escaped into one segment and read back; the default space is `~`.
    #[test]
    fn segments_round_trip() {
        for name in ["tenant-4711.report", "a:b_c", "Z", "...x"] {
            assert_eq!(segment(name), name);
        }
        // Percent-escapes, not rule ids.
        let escaped = [("é", "%C3%A9")]; // spec-check: ignore
        let cases = [("", "~"), ("~", "%7E"), (".", "%2E"), ("..", "%2E%2E"), ("a/b", "a%2Fb"), ("%", "%25")];
        for (name, seg) in cases.into_iter().chain(escaped) {
            assert_eq!(segment(name), seg);
            assert_eq!(unsegment(seg), name);
        }
        assert_eq!(audit_path("", 7), "/simba/schedules/~/audit/00000000000000000007");
        assert_eq!(schedule_path("billing", 3, "x"), "/simba/schedules/billing/p/3/x");
    }
}
