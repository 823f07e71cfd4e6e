//! The `simpleop-examples-cli` binary: the `simpleop` command with this
//! crate's ops registered.

use std::process::Command;

fn cli(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_simpleop-examples-cli"))
        .args(args)
        .output()
        .expect("the binary runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn lists_and_describes_our_ops() {
    let (ok, list, err) = cli(&["ops"]);
    assert!(ok, "{err}");
    for name in ["softplus", "scaled_tanh", "row_scale"] {
        assert!(list.contains(name), "`{name}` missing from:\n{list}");
    }
    let (ok, softplus, err) = cli(&["ops", "softplus"]);
    assert!(ok, "{err}");
    assert!(softplus.contains("softplus"), "{softplus}");
    let (ok, row_scale, err) = cli(&["ops", "row_scale"]);
    assert!(ok, "{err}");
    assert!(row_scale.contains("factor"), "{row_scale}");
}

#[test]
fn unknown_op_is_an_error_with_a_suggestion() {
    let (ok, _, err) = cli(&["ops", "softplu"]);
    assert!(!ok);
    assert!(err.contains("softplus"), "{err}");
}
