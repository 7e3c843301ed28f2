//! `cargo run --example lock`: two nodes run their critical sections one at a time, each step
//! under a valid term, each section with a greater fencing token than the one before.

use std::process::Command;

mod common;
use common::example;

#[test]
fn the_nodes_take_turns_and_every_section_has_a_greater_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("lock.db").display());
    let out = Command::new(example("lock"))
        .env("SIMBA_BACKEND__URL", &url)
        .env("LOCK_ROUNDS", "3")
        .output()
        .expect("run the lock example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the example failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));

    // Each section: `holds`, three steps, `done`, all of one node and one token, never
    // interleaved with another node's lines; the tokens grow from section to section.
    let lines: Vec<&str> = stdout.lines().collect();
    let sections: Vec<&[&str]> = lines[..lines.len() - 1].chunks(5).collect();
    assert_eq!(sections.len(), 6, "{stdout}");
    let mut last_token = 0u64;
    let mut by_node = [0, 0];
    for section in sections {
        let (node, rest) =
            section[0].strip_prefix("node ").and_then(|l| l.split_once(": holds the lock (token ")).expect(section[0]);
        let token: u64 = rest.trim_end_matches(')').parse().expect("a token");
        assert!(token > last_token, "token {token} after {last_token}: {stdout}");
        last_token = token;
        by_node[usize::from(node == "b")] += 1;
        for (step, line) in (1..=3).zip(&section[1..4]) {
            assert_eq!(*line, format!("node {node}: step {step} of 3 (token {token})"), "{stdout}");
        }
        assert_eq!(section[4], format!("node {node}: done, releasing (token {token})"), "{stdout}");
    }
    assert_eq!(by_node, [3, 3], "{stdout}");
    assert_eq!(lines.last(), Some(&"all 6 sections ran, one at a time"), "{stdout}");
}
