//! Exit codes, the error that carries one, and what the standard output can show.

use std::io::{IsTerminal, Write};

/// Everything went as asked (and, for `check`, every check passed).
pub const EXIT_OK: u8 = 0;
/// A check failed (`simba check`), or the operation was refused or failed: an unknown job, a
/// backend without a jobs store, output that could not be written.
pub const EXIT_FAILED: u8 = 1;
/// A usage error: bad arguments (clap's own code), an invalid configuration, a backend URL
/// that no backend of this build takes.
pub const EXIT_USAGE: u8 = 2;
/// The backend could not be reached, connected to or read within `--timeout`.
pub const EXIT_UNREACHABLE: u8 = 3;

/// Why a command stopped, with the exit code that tells it to scripts; the message goes to
/// stderr after `simba: `.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    pub(crate) code: u8,
    pub(crate) message: String,
}

impl Failure {
    /// The command line or the configuration is wrong ([`EXIT_USAGE`]).
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Failure { code: EXIT_USAGE, message: message.into() }
    }

    /// The backend did not answer, or answered with a failure ([`EXIT_UNREACHABLE`]).
    pub(crate) fn unreachable(message: impl Into<String>) -> Self {
        Failure { code: EXIT_UNREACHABLE, message: message.into() }
    }

    /// The operation was refused or failed after the backend answered ([`EXIT_FAILED`]).
    pub(crate) fn refused(message: impl Into<String>) -> Self {
        Failure { code: EXIT_FAILED, message: message.into() }
    }
}

/// What the standard output may carry beyond plain text. Both are off unless it is a
/// terminal: a pipe or a file gets no control codes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Styling {
    /// `watch` clears the screen before each refresh.
    pub redraw: bool,
    /// Help and usage errors are coloured (clap's styles).
    pub color: bool,
}

impl Styling {
    /// The styling for this process's stdout: redraw on a terminal whose `TERM` is not
    /// `dumb`; colour as well unless `NO_COLOR` is set to a non-empty value (no-color.org).
    pub fn detect() -> Self {
        let term = std::env::var_os("TERM");
        let no_color = std::env::var_os("NO_COLOR");
        Styling::for_terminal(
            std::io::stdout().is_terminal(),
            term.as_deref().and_then(|t| t.to_str()),
            no_color.as_deref().and_then(|v| v.to_str()),
        )
    }

    /// [`Styling::detect`] for given facts, so they can be tested without a terminal.
    pub fn for_terminal(is_terminal: bool, term: Option<&str>, no_color: Option<&str>) -> Self {
        let capable = is_terminal && term != Some("dumb");
        Styling { redraw: capable, color: capable && no_color.is_none_or(str::is_empty) }
    }
}

/// Writes `text` and flushes; a reader that went away (`simba jobs | head`) is no failure.
pub(crate) fn emit(out: &mut (dyn Write + Send), text: &str) -> Result<u8, Failure> {
    finish(out.write_all(text.as_bytes()).and_then(|()| out.flush()))
}

/// The outcome of writing the output: done, or a failure to report, except a closed pipe.
pub(crate) fn finish(written: std::io::Result<()>) -> Result<u8, Failure> {
    match written {
        Ok(()) => Ok(EXIT_OK),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(EXIT_OK),
        Err(e) => Err(Failure::refused(format!("cannot write the output: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::Styling;

    #[test]
    fn control_codes_only_on_a_terminal_and_colour_unless_no_color() {
        let plain = Styling { redraw: false, color: false };
        assert_eq!(Styling::for_terminal(false, Some("xterm"), None), plain);
        assert_eq!(Styling::for_terminal(true, Some("dumb"), None), plain);
        assert_eq!(Styling::for_terminal(true, Some("xterm"), None), Styling { redraw: true, color: true });
        assert_eq!(Styling::for_terminal(true, Some("xterm"), Some("1")), Styling { redraw: true, color: false });
        // An empty NO_COLOR does not count (no-color.org).
        assert_eq!(Styling::for_terminal(true, None, Some("")), Styling { redraw: true, color: true });
    }
}
