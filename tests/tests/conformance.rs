//! Every single-op MXNet 1.9.1 conformance case passes when evaluated
//! eagerly: forward outputs and, where the case asks, gradients with each
//! argument's `grad_req`. (Multi-op graphs run in the symbolic executor.)

use simpleop_tests::{load_cases, run_single_op};

const CASES: &str = include_str!("../conformance/mxnet-ops.jsonl");

#[test]
fn every_single_op_case_matches_mxnet() {
    simpleop_ops::link();
    let cases = load_cases(CASES).expect("case file parses");
    assert_eq!(cases.len(), 141);
    let mut passed = 0;
    let mut failed = Vec::new();
    for case in cases.iter().filter(|c| c.single_op().is_some()) {
        match run_single_op(case) {
            Ok(()) => passed += 1,
            Err(e) => failed.push(format!("{}: {e}", case.name)),
        }
    }
    println!("{passed} passed, {} failed", failed.len());
    assert!(failed.is_empty(), "failing cases:\n{}", failed.join("\n"));
    assert_eq!(passed, 135, "every single-op case ran");
}
