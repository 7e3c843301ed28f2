//! The web dashboard (issue 14, ADR 0010): in a real browser (Debian's headless Chromium
//! over WebDriver: `bash scripts/browser.sh install`), and its configuration and command line.

mod browser;
mod cli;
mod harness;
mod jobs;
mod markup;
mod mount;
mod mounted;

/// Held by the browser tests: one Chromium at a time, and the node processes' timings are
/// not disturbed by another test's browser.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
