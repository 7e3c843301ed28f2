//! The test command itself (`scripts/test.sh`), run for real with stand-ins for what it drives:
//! a `cargo` first on `PATH` that only records its calls (but hands `cargo metadata` to the real
//! one, which picks the lanes' targets), and servers and browser scripts that print a harmless
//! export for each step, or fail the one step asked to fail. Each run takes a second or a few.
//!
//! The stand-ins come in through `SIMBA_TEST_BACKENDS_SCRIPT` and `SIMBA_TEST_BROWSER_SCRIPT`,
//! and the fault lane's log and report go to a temporary directory (`SIMBA_TEST_OUT_DIR`): the
//! test command runs this test too, and must find its own `target/fault-lane.log` untouched.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A hung test command fails the test instead of blocking the suite.
const TIMEOUT: Duration = Duration::from_secs(120);

/// Held while one test writes its stand-ins and starts the test command: a child the other test
/// forks while a stand-in is still open for writing would hold it open, and running that
/// stand-in would then fail with "Text file busy".
static SPAWNING: Mutex<()> = Mutex::new(());

/// What a run of the test command did.
struct Run {
    status: ExitStatus,
    /// The stand-in cargo's calls, in order: everything but `cargo metadata`.
    cargo: Vec<CargoCall>,
    /// The stand-in servers and browser scripts' calls, in order: `install`, `start`,
    /// `start-replicated`, `others start` (the other lane's set), `browser install`, `stop`, ...
    steps: Vec<String>,
    /// The test command's stdout and stderr, for the failure messages.
    output: String,
}

/// One call of the stand-in cargo.
#[derive(Debug)]
struct CargoCall {
    /// `CI` in the call's environment, `<unset>` when it had none.
    ci: String,
    /// Its arguments, joined by spaces (`test --workspace --all-features --no-run`).
    args: String,
}

impl CargoCall {
    /// `cargo test ...`: a build of the tests or a run of them.
    fn is_test(&self) -> bool {
        self.args.split(' ').next() == Some("test")
    }

    fn has(&self, flag: &str) -> bool {
        self.args.split(' ').any(|a| a == flag)
    }
}

/// Issue 35, item 4: the test command fails when a server does not start, and sets CI=true
/// itself. Here one step that starts something fails (each in turn: the servers, the replicated
/// stores, the other lane's servers, the browser): the command must stop there, before any test
/// runs (a failed substitution inside `eval "$(...)"` went unnoticed by `set -e`, and every
/// backend test then skipped and passed).
#[test]
fn a_server_that_does_not_start_stops_the_test_command() {
    for step in ["start", "start-replicated", "others start", "browser install"] {
        let run = run_test_command(Some(step));
        let report = describe(&run);
        assert!(!run.status.success(), "the test command passed although `{step}` failed\n{report}");
        assert!(run.steps.iter().any(|s| s == step), "`{step}` was never run\n{report}");
        // It got as far as the servers: every test target was built (so the failure is the
        // step's, not an earlier one's) ...
        assert!(
            run.cargo.iter().any(|c| c.is_test() && c.has("--no-run")),
            "`{step}` failed: the test targets were not built before it\n{report}"
        );
        // ... and ran none.
        let ran: Vec<&CargoCall> = run.cargo.iter().filter(|c| c.is_test() && !c.has("--no-run")).collect();
        assert!(ran.is_empty(), "tests ran although `{step}` failed: {ran:?}\n{report}");
    }
}

/// Issue 35, item 4: the test command fails when a server does not start, and sets CI=true
/// itself. Here every server starts and `CI` is not in the environment: both lanes' test runs
/// (the fault lane's `--test faults`, the other lane's targets, the doc tests) see `CI=true`,
/// so a backend test whose server is missing fails instead of printing SKIPPED.
#[test]
fn the_test_command_runs_every_test_with_ci_set() {
    let run = run_test_command(None);
    let report = describe(&run);
    assert!(run.status.success(), "the test command failed with stand-ins that all succeed\n{report}");
    let faults = |c: &CargoCall| c.args.ends_with("--test faults");
    let doc = |c: &CargoCall| c.has("--doc");
    let others = |c: &CargoCall| c.has("--lib") && !faults(c) && !doc(c);
    for (lane, picks) in [
        ("the fault lane's run (--test faults)", &faults as &dyn Fn(&CargoCall) -> bool),
        ("the other lane's targets (--lib ...)", &others),
        ("the other lane's doc tests (--doc)", &doc),
    ] {
        let calls: Vec<&CargoCall> =
            run.cargo.iter().filter(|c| c.is_test() && !c.has("--no-run") && picks(c)).collect();
        assert_eq!(calls.len(), 1, "{lane}: expected one cargo test call, got {calls:?}\n{report}");
        assert_eq!(calls[0].ci, "true", "{lane} ran without CI=true: {:?}\n{report}", calls[0]);
    }
}

/// Runs the repository's `scripts/test.sh` with the stand-ins, `failing` (a step as `Run::steps`
/// names it) failing, and neither `CI` nor the servers' own variables in its environment (the
/// test command runs this test with the other lane's servers exported).
fn run_test_command(failing: Option<&str>) -> Run {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace above tests/").to_path_buf();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let spawning = SPAWNING.lock().unwrap_or_else(PoisonError::into_inner);
    let stubs = Stubs::write(dir.path(), failing);
    let output_path = dir.path().join("output.txt");
    let output = fs::File::create(&output_path).expect("the output file");
    // Our PATH, behind the stand-in cargo: bash, python3, nice and tail are the real ones.
    let path = std::env::join_paths(
        std::iter::once(stubs.bin.clone()).chain(std::env::var_os("PATH").iter().flat_map(std::env::split_paths)),
    )
    .expect("a PATH");
    let mut child = Command::new("bash")
        .arg(repo.join("scripts/test.sh"))
        .env("PATH", path)
        .env_remove("CI")
        .env_remove("SIMBA_BACKENDS_DIR")
        .env_remove("SIMBA_BACKENDS_PORT_OFFSET")
        .env("SIMBA_TEST_BACKENDS_SCRIPT", &stubs.backends)
        .env("SIMBA_TEST_BROWSER_SCRIPT", &stubs.browser)
        .env("SIMBA_TEST_OUT_DIR", dir.path().join("out"))
        .stdin(Stdio::null())
        .stdout(output.try_clone().expect("the output file, twice"))
        .stderr(output)
        // Its own process group, so that a timeout kills the lanes' subshells with it.
        .process_group(0)
        .spawn()
        .expect("bash scripts/test.sh");
    drop(spawning);
    let status = wait_or_kill(&mut child, &output_path);
    Run {
        status,
        cargo: read_lines(&stubs.cargo_log)
            .iter()
            .map(|line| {
                let (ci, args) = line.split_once('\t').expect("CI<TAB>args");
                CargoCall { ci: ci.to_owned(), args: args.to_owned() }
            })
            .collect(),
        steps: read_lines(&stubs.steps_log),
        output: fs::read_to_string(&output_path).unwrap_or_default(),
    }
}

/// Waits for the test command; after `TIMEOUT` kills its process group and fails.
fn wait_or_kill(child: &mut std::process::Child, output: &Path) -> ExitStatus {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(status) = child.try_wait().expect("the test command's status") {
            return status;
        }
        if Instant::now() >= deadline {
            let pid = i32::try_from(child.id()).expect("a pid that fits a pid_t");
            let group = rustix::process::Pid::from_raw(pid).expect("a pid");
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
            let _ = child.wait();
            let out = fs::read_to_string(output).unwrap_or_default();
            panic!("the test command ran for more than {TIMEOUT:?}; killed\n{out}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The stand-ins, written into a temporary directory, and the logs they append to.
struct Stubs {
    /// The directory put first on PATH, holding `cargo`.
    bin: PathBuf,
    backends: PathBuf,
    browser: PathBuf,
    cargo_log: PathBuf,
    steps_log: PathBuf,
}

impl Stubs {
    fn write(dir: &Path, failing: Option<&str>) -> Self {
        let bin = dir.join("bin");
        fs::create_dir(&bin).expect("the stand-ins' bin directory");
        let (cargo_log, steps_log) = (dir.join("cargo.log"), dir.join("steps.log"));
        // The real cargo (cargo sets CARGO for the tests it runs): test.sh reads its targets from
        // `cargo metadata`, so that call must answer for the real workspace.
        let real_cargo = std::env::var_os("CARGO").map_or_else(|| PathBuf::from(env!("CARGO")), PathBuf::from);
        let cargo = format!(
            "#!/usr/bin/env bash\n\
             if [[ ${{1-}} == metadata ]]; then exec {} \"$@\"; fi\n\
             printf '%s\\t%s\\n' \"${{CI-<unset>}}\" \"$*\" >>{}\n",
            quote(&real_cargo),
            quote(&cargo_log)
        );
        // A failing step prints nothing, as backends.sh does when a server does not come up. The
        // other lane's set is the one test.sh starts with SIMBA_BACKENDS_DIR (.backends-others).
        let fail = failing.map(|step| format!("'{step}') exit 1 ;;\n")).unwrap_or_default();
        let steps = quote(&steps_log);
        let script = |prefix: &str| {
            format!(
                "step=\"{prefix}$*\"\n\
                 [[ -z ${{SIMBA_BACKENDS_DIR-}} ]] || step=\"others $step\"\n\
                 printf '%s\\n' \"$step\" >>{steps}\n\
                 case $step in\n\
                 {fail}\
                 install | stop | 'others stop') ;;\n\
                 start | start-replicated | 'others start' | 'browser install') echo 'export SIMBA_TEST_STUB=1' ;;\n\
                 *) echo \"stand-in script: unexpected step $step\" >&2; exit 2 ;;\n\
                 esac\n"
            )
        };
        let stubs =
            Stubs { backends: dir.join("backends.sh"), browser: dir.join("browser.sh"), bin, cargo_log, steps_log };
        let cargo_path = stubs.bin.join("cargo");
        fs::write(&cargo_path, cargo).expect("the stand-in cargo");
        fs::set_permissions(&cargo_path, fs::Permissions::from_mode(0o755)).expect("cargo executable");
        fs::write(&stubs.backends, script("")).expect("the stand-in backends.sh");
        fs::write(&stubs.browser, script("browser ")).expect("the stand-in browser.sh");
        stubs
    }
}

/// `path` in single quotes for bash.
fn quote(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}

/// A log's lines; none when the stand-in was never called.
fn read_lines(path: &Path) -> Vec<String> {
    fs::read_to_string(path).map(|s| s.lines().map(str::to_owned).collect()).unwrap_or_default()
}

/// The run, for a failure message: status, the calls, the output.
fn describe(run: &Run) -> String {
    let cargo: Vec<String> = run.cargo.iter().map(|c| format!("  CI={} cargo {}", c.ci, c.args)).collect();
    format!(
        "status: {}\ncargo calls:\n{}\nsteps: {:?}\noutput:\n{}",
        run.status,
        cargo.join("\n"),
        run.steps,
        run.output
    )
}
