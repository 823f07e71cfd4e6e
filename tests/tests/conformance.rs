//! Every single-op MXNet conformance case whose op is registered passes
//! when evaluated eagerly; ops of this issue must all be covered.

use simpleop_tests::{load_cases, run_single_op};

const CASES: &str = include_str!("../conformance/mxnet-ops.jsonl");

#[test]
fn single_op_cases_match_mxnet() {
    simpleop_ops::link();
    let cases = load_cases(CASES).expect("case file parses");
    assert_eq!(cases.len(), 141);
    let registry = simpleop::Registry::global().unwrap();
    let mut passed = Vec::new();
    let mut failed = Vec::new();
    for case in &cases {
        let Some(node) = case.single_op() else {
            continue;
        };
        if !registry.contains(&node.op) {
            continue;
        }
        match run_single_op(case) {
            Ok(()) => passed.push(case.name.clone()),
            Err(e) => failed.push(format!("{}: {e}", case.name)),
        }
    }
    println!("{} passed, {} failed", passed.len(), failed.len());
    assert!(failed.is_empty(), "failing cases:\n{}", failed.join("\n"));
    // The ops this issue implements, each with at least one case.
    for op in [
        "smooth_l1",
        "relu",
        "elemwise_add",
        "elemwise_mul",
        "broadcast_add",
        "broadcast_mul",
        "_mul_scalar",
        "clip",
        "elemwise_sub",
        "elemwise_div",
        "broadcast_sub",
        "broadcast_div",
        "_plus_scalar",
        "_minus_scalar",
        "_rminus_scalar",
        "_div_scalar",
        "_rdiv_scalar",
        "negative",
    ] {
        assert!(
            passed.iter().any(|n| n.split('/').next() == Some(op)),
            "no passing case for {op}"
        );
    }
    assert!(passed.len() >= 41, "only {} cases ran", passed.len());
}
