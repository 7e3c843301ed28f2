//! The `simba` command-line tool: `simba status`, `simba watch`, `simba check`, `simba dashboard` (see
//! `simba --help` and the README's "Operations" section).

fn main() -> std::process::ExitCode {
    simba_cli::main()
}
