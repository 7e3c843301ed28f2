//! The `simba` command-line tool: `simba status`, `simba watch`, `simba check`, `simba dashboard` (see
//! `simba --help` and the README's "Operations" section).

fn main() -> std::process::ExitCode {
    // The tool is an application: it chooses the process's rustls provider (ring), which the
    // Redis and ZooKeeper drivers read for `rediss://` and `tls=true` (the library installs none).
    simba::backend::install_tls_provider();
    simba_cli::main()
}
