//! The registry lists every standard op, sorted, each with a description,
//! CPU kernels, and metadata consistent with its kernels.

use simpleop::{OpForm, ParamKind, Registry};

/// Every op the standard library promises, under its MXNet name.
const STANDARD_OPS: &[&str] = &[
    // unary
    "abs",
    "sign",
    "round",
    "ceil",
    "floor",
    "trunc",
    "square",
    "sqrt",
    "rsqrt",
    "cbrt",
    "exp",
    "expm1",
    "log",
    "log1p",
    "log2",
    "log10",
    "sin",
    "cos",
    "tan",
    "arcsin",
    "arccos",
    "arctan",
    "sinh",
    "cosh",
    "tanh",
    "sigmoid",
    "relu",
    "softsign",
    "negative",
    "reciprocal",
    "erf",
    "gamma",
    "smooth_l1",
    "clip",
    "_copy",
    // stopping gradients
    "BlockGrad",
    "zeros_like",
    "ones_like",
    // with a scalar
    "_plus_scalar",
    "_minus_scalar",
    "_rminus_scalar",
    "_mul_scalar",
    "_div_scalar",
    "_rdiv_scalar",
    "_power_scalar",
    "_rpower_scalar",
    "_maximum_scalar",
    "_minimum_scalar",
    "_equal_scalar",
    "_greater_scalar",
    "_lesser_scalar",
    // binary
    "elemwise_add",
    "elemwise_sub",
    "elemwise_mul",
    "elemwise_div",
    "_power",
    "_maximum",
    "_minimum",
    "_hypot",
    "broadcast_add",
    "broadcast_sub",
    "broadcast_mul",
    "broadcast_div",
    "broadcast_power",
    "broadcast_maximum",
    "broadcast_minimum",
    "broadcast_equal",
    "broadcast_greater",
    "broadcast_lesser",
    // ternary
    "where",
    // reductions and broadcasting
    "sum",
    "mean",
    "max",
    "min",
    "prod",
    "norm",
    "argmax",
    "argmin",
    "broadcast_to",
    "broadcast_axis",
    // shape and matrix
    "Reshape",
    "reshape",
    "transpose",
    "expand_dims",
    "Flatten",
    "flatten",
    "slice_axis",
    "reverse",
    "flip",
    "dot",
    "batch_dot",
    "FullyConnected",
    // neural network
    "softmax",
    "log_softmax",
    "softmax_cross_entropy",
    // sampling
    "_random_uniform",
    "_random_normal",
    // layers (issue 34)
    "Activation",
    "LeakyReLU",
    "SoftmaxOutput",
    "Softmax",
    "LinearRegressionOutput",
    "LogisticRegressionOutput",
    "MAERegressionOutput",
    "InstanceNorm",
    "LayerNorm",
    // indexing, ordering, init
    "Embedding",
    "take",
    "pick",
    "choose_element_0index",
    "one_hot",
    "SwapAxis",
    "swapaxes",
    "sort",
    "argsort",
    "_zeros",
    "_ones",
    "_full",
    "identity",
    "stop_gradient",
    // optimizers
    "sgd_update",
    "sgd_mom_update",
    "adam_update",
];

#[test]
fn every_standard_op_is_registered_and_described() {
    simpleop_ops::link();
    let reg = Registry::global().unwrap();
    let missing: Vec<&str> = STANDARD_OPS
        .iter()
        .copied()
        .filter(|n| !reg.contains(n))
        .collect();
    assert!(missing.is_empty(), "not registered: {missing:?}");
    let names: Vec<&str> = reg.iter().map(|o| o.def.name).collect();
    assert!(
        names.windows(2).all(|w| w[0] < w[1]),
        "iteration is sorted and unique"
    );
    for op in reg.iter() {
        let d = op.def;
        assert!(
            !d.description.trim().is_empty(),
            "{} has no description",
            d.name
        );
        let k = op
            .kernels(simpleop::Device::Cpu)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(k.backward.is_some(), d.gradient.is_some(), "{}", d.name);
        if let ParamKind::Kwargs { fields, .. } = d.params {
            assert!(
                !fields().is_empty(),
                "{}: kwargs struct has no fields",
                d.name
            );
        }
        if d.form == OpForm::Blob {
            assert!(
                d.inplace.forward.is_none(),
                "{}: blob ops never alias",
                d.name
            );
        }
        let sig = d.signature();
        assert!(sig.starts_with(d.name), "{sig}");
        println!(
            "{sig}\n    {}",
            d.description.lines().next().unwrap_or_default()
        );
    }
}

#[test]
fn ops_without_gradient_are_the_documented_ones() {
    simpleop_ops::link();
    let reg = Registry::global().unwrap();
    let no_grad: Vec<&str> = reg
        .iter()
        .filter(|o| o.def.gradient.is_none())
        .map(|o| o.def.name)
        .collect();
    for name in &no_grad {
        assert!(
            [
                "gamma",
                "argmax",
                "argmin",
                "_random_uniform",
                "_random_normal",
                "_zeros",
                "_ones",
                "_full",
                "sgd_update",
                "sgd_mom_update",
                "adam_update"
            ]
            .contains(name),
            "{name} has no gradient"
        );
    }
}

/// Every differentiable op is named in a test file that runs the gradient
/// checker, so a new op cannot land without one.
#[test]
fn every_differentiable_op_is_gradient_checked() {
    simpleop_ops::link();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut named = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        if !text.contains("GradCheck::new(") {
            continue;
        }
        // Every string literal in the file; op names are among them.
        named.extend(text.split('"').skip(1).step_by(2).map(str::to_owned));
    }
    let unchecked: Vec<&str> = Registry::global()
        .unwrap()
        .iter()
        .filter(|o| o.def.gradient.is_some() && !named.contains(o.def.name))
        .map(|o| o.def.name)
        .collect();
    assert!(unchecked.is_empty(), "no gradient check for {unchecked:?}");
}
