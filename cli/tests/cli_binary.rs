//! The `simpleop` binary itself: `simpleop check` on the MXNet 1.9.1 cases
//! passes all 141 through the executor and the NDArray API (the issue's
//! acceptance command, run by `cargo test --workspace`).

use std::process::Command;

#[test]
fn simpleop_check_passes_all_mxnet_cases() {
    let cases = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/conformance/mxnet-ops.jsonl"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_simpleop"))
        .args(["check", cases])
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        stdout.lines().last(),
        Some("141 passed, 0 failed"),
        "{stdout}"
    );
    assert!(out.status.success());
}

#[test]
fn simpleop_ops_exits_cleanly_and_bad_names_exit_2() {
    let ok = Command::new(env!("CARGO_BIN_EXE_simpleop"))
        .args(["ops", "dot"])
        .output()
        .unwrap();
    assert!(ok.status.success());
    assert!(
        String::from_utf8(ok.stdout)
            .unwrap()
            .contains("transpose_a")
    );
    let bad = Command::new(env!("CARGO_BIN_EXE_simpleop"))
        .args(["ops", "nope_not_an_op"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        String::from_utf8(bad.stderr)
            .unwrap()
            .contains("unknown op")
    );
}
