//! Any string is a lease name exactly when rule T1 says so (1 to 128 characters of
//! `[A-Za-z0-9._:-]`, not `.` or `..`), and a refusal quotes the name and gives a reason.

#![no_main]

use libfuzzer_sys::fuzz_target;
use simba_fuzz::t1;

fuzz_target!(|data: &[u8]| {
    let name = String::from_utf8_lossy(data);
    let result = simba::validate_name(&name);
    assert_eq!(result.is_ok(), t1(&name), "{name:?}: {result:?}");
    assert_eq!(simba::name_problem(&name).is_none(), result.is_ok(), "{name:?}");
    if let Err(e) = result {
        let msg = e.to_string();
        assert!(msg.contains(&format!("{name:?}")), "the refusal does not quote the name: {msg}");
        assert!(msg.contains("lease name"), "{msg}");
    }
});
