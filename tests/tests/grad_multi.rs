//! The gradient checker on issue 34's ops with several outputs,
//! kwargs-dependent inputs and aux states: every float dtype and every
//! `OpReqType` of the backward pass, against central differences of the
//! outputs that get a head gradient.

use simpleop::gradcheck::GradCheck;

fn check(c: GradCheck) {
    simpleop_ops::link();
    let report = c.run().unwrap_or_else(|e| panic!("{e}"));
    // Three requests per float dtype at least.
    assert!(report.rows.len() >= 12, "{report:?}");
    assert!(report.rows.iter().all(|r| r.2 <= 1.0), "{report:?}");
}

#[test]
fn concat_stack_and_add_n() {
    check(
        GradCheck::new("Concat")
            .attr("num_args", 3)
            .attr("dim", 1)
            .shapes(&[&[2, 1, 3], &[2, 2, 3], &[2, 3, 3]]),
    );
    check(
        GradCheck::new("stack")
            .attr("num_args", 2)
            .attr("axis", -1)
            .shapes(&[&[2, 3], &[2, 3]]),
    );
    check(
        GradCheck::new("add_n")
            .attr("num_args", 3)
            .shapes(&[&[3, 2], &[3, 2], &[3, 2]]),
    );
}

#[test]
fn split_with_a_head_on_every_output_and_on_one() {
    let split = || {
        GradCheck::new("SliceChannel")
            .attr("num_outputs", 3)
            .attr("axis", 0)
            .shapes(&[&[6, 2]])
    };
    check(split());
    // Outputs 0 and 2 unread: their pieces of the gradient are zero.
    check(split().heads(&[1]));
    check(
        GradCheck::new("SliceChannel")
            .attr("num_outputs", 2)
            .attr("squeeze_axis", "True")
            .shapes(&[&[3, 2, 2]]),
    );
}

#[test]
fn batch_norm_in_training_and_with_global_stats() {
    let bn = |attrs: &[(&str, &str)]| {
        let mut c = GradCheck::new("BatchNorm")
            .shapes(&[&[4, 3, 2], &[3], &[3]])
            .train()
            .heads(&[0]);
        for (k, v) in attrs {
            c = c.attr(k, v);
        }
        c
    };
    check(bn(&[("fix_gamma", "False")]));
    check(bn(&[("fix_gamma", "True")]));
    check(bn(&[("fix_gamma", "False"), ("use_global_stats", "True")]));
    let last = bn(&[("fix_gamma", "False"), ("axis", "-1"), ("eps", "0.01")]);
    check(last.shapes(&[&[4, 3, 2], &[2], &[2]]));
}

#[test]
fn dropout_in_training_and_topk_values() {
    check(GradCheck::new("Dropout").attr("p", 0.3).train().heads(&[0]));
    check(
        GradCheck::new("Dropout")
            .attr("p", 0.3)
            .attr("mode", "always")
            .heads(&[0]),
    );
    check(
        GradCheck::new("topk")
            .attr("k", 2)
            .attr("ret_typ", "value")
            .heads(&[0]),
    );
    check(
        GradCheck::new("topk")
            .attr("k", 2)
            .attr("axis", 0)
            .attr("ret_typ", "both")
            .heads(&[0]),
    );
}

#[test]
fn fully_connected_without_bias() {
    check(
        GradCheck::new("FullyConnected")
            .attr("num_hidden", 3)
            .attr("no_bias", "True")
            .shapes(&[&[2, 4], &[3, 4]]),
    );
}

#[test]
fn leaky_relu_prelu_rrelu_and_the_scalar_types() {
    let prelu = |shapes: &[&[usize]]| {
        GradCheck::new("LeakyReLU")
            .attr("act_type", "prelu")
            .shapes(shapes)
    };
    check(prelu(&[&[2, 3, 4], &[3]]));
    check(prelu(&[&[4, 3], &[1]]));
    check(prelu(&[&[5], &[5]]));
    check(
        GradCheck::new("LeakyReLU")
            .attr("act_type", "rrelu")
            .train()
            .heads(&[0]),
    );
    for act in ["leaky", "elu", "selu", "gelu"] {
        check(GradCheck::new("LeakyReLU").attr("act_type", act));
    }
}

/// MXNet 1.9.1's recorded gamma gradient in the case `graph/bn_prelu_bn`
/// is wrong (0.0787 where central differences give 0.704), so the
/// conformance test skips that case; here the graph's gradient of `alpha`
/// is checked against central differences of the graph itself, in f64.
#[test]
fn prelu_gamma_gradient_after_batch_norm() {
    use simpleop::NDArray;
    use simpleop::symbol::{GradReq, Symbol};
    use simpleop_cli::conformance;
    use std::collections::HashMap;
    simpleop_ops::link();
    let text = include_str!("../conformance/mxnet-multi.jsonl");
    let cases = conformance::parse_cases(text).unwrap();
    let case = cases
        .iter()
        .find(|c| c.name == "graph/bn_prelu_bn")
        .unwrap();
    let sym = Symbol::from_json(&case.symbol.to_string()).unwrap();
    let f64_array = |a: &conformance::ArrayData| {
        NDArray::from_vec(a.values().unwrap(), a.shape.clone()).unwrap()
    };
    let head = f64_array(&case.head_grads.as_ref().unwrap()[0]);
    let run = |alpha: &[f64], backward: bool| {
        let mut args: HashMap<String, NDArray> = case
            .inputs
            .iter()
            .chain(&case.aux)
            .map(|(k, v)| (k.clone(), f64_array(v)))
            .collect();
        args.insert(
            "alpha".into(),
            NDArray::from_vec(alpha.to_vec(), [2]).unwrap(),
        );
        let grads = HashMap::from([(
            "alpha".to_string(),
            NDArray::zeros([2], simpleop::DType::F64),
        )]);
        let reqs = HashMap::from([("alpha".to_string(), GradReq::Write)]);
        let mut exe = sym.bind(args, grads, reqs).unwrap();
        exe.forward(true).unwrap();
        let out = exe.outputs()[0].to_vec::<f64>().unwrap();
        let loss: f64 = out
            .iter()
            .zip(head.to_vec::<f64>().unwrap())
            .map(|(o, h)| o * h)
            .sum();
        if backward {
            exe.backward(std::slice::from_ref(&head)).unwrap();
            (loss, exe.grad("alpha").unwrap().to_vec::<f64>().unwrap())
        } else {
            (loss, Vec::new())
        }
    };
    let alpha = case.inputs["alpha"].values().unwrap();
    let (_, grad) = run(&alpha, true);
    for k in 0..2 {
        let (mut up, mut down) = (alpha.clone(), alpha.clone());
        let e = 1e-6;
        up[k] += e;
        down[k] -= e;
        let numeric = (run(&up, false).0 - run(&down, false).0) / (2.0 * e);
        assert!(
            (grad[k] - numeric).abs() <= 1e-6 * (1.0 + numeric.abs()),
            "alpha[{k}]: {} vs {numeric}",
            grad[k]
        );
    }
    // MXNet's value, for the record of the disagreement.
    let mxnet = case.expect.grads["alpha"].values().unwrap();
    assert!((grad[0] - mxnet[0]).abs() > 0.5, "{grad:?} vs {mxnet:?}");
}

/// RNN's gradients (back-propagation through time) for f32 and f64 and
/// every request, for every input and with heads on every shown output.
fn check_rnn(c: GradCheck) {
    simpleop_ops::link();
    let c = c
        .dtypes(&[simpleop::DType::F32, simpleop::DType::F64])
        .range(-1.0, 1.0);
    let report = c.run().unwrap_or_else(|e| panic!("{e}"));
    // Three requests per dtype at least.
    assert!(report.rows.len() >= 6, "{report:?}");
    assert!(report.rows.iter().all(|r| r.2 <= 1.0), "{report:?}");
}

fn rnn(mode: &str, layers: usize, bidirectional: bool) -> GradCheck {
    GradCheck::new("RNN")
        .attr("mode", mode)
        .attr("state_size", 2)
        .attr("num_layers", layers)
        .attr(
            "bidirectional",
            if bidirectional { "True" } else { "False" },
        )
}

#[test]
fn rnn_lstm_two_bidirectional_layers_with_state_heads() {
    // (T, N, I) = (3, 2, 2), H = 2: 2·8·(2+2+2) + 2·8·(4+2+2) parameters.
    let s: &[&[usize]] = &[&[3, 2, 2], &[224], &[4, 2, 2], &[4, 2, 2]];
    check_rnn(
        rnn("lstm", 2, true)
            .attr("state_outputs", "True")
            .shapes(s)
            .heads(&[0, 1, 2]),
    );
    // hy and cy only: `output` has no head gradient.
    check_rnn(
        rnn("lstm", 2, true)
            .attr("state_outputs", "True")
            .shapes(s)
            .heads(&[1, 2]),
    );
}

#[test]
fn rnn_gru_and_vanilla_cells() {
    check_rnn(
        rnn("gru", 1, true)
            .attr("state_outputs", "True")
            .shapes(&[&[3, 2, 2], &[72], &[2, 2, 2]])
            .heads(&[0, 1]),
    );
    check_rnn(
        rnn("gru", 2, false)
            .shapes(&[&[3, 2, 2], &[72], &[2, 2, 2]])
            .heads(&[0]),
    );
    for mode in ["rnn_tanh", "rnn_relu"] {
        check_rnn(
            rnn(mode, 2, false)
                .attr("state_outputs", "True")
                .shapes(&[&[3, 2, 2], &[24], &[2, 2, 2]])
                .heads(&[0, 1]),
        );
    }
}

#[test]
fn rnn_with_dropout_in_training() {
    // The mask is drawn with the check's seed: every forward pass of the
    // differences sees the same one, and backward reads it.
    check_rnn(
        rnn("lstm", 2, false)
            .attr("p", 0.4)
            .shapes(&[&[3, 2, 2], &[96], &[2, 2, 2], &[2, 2, 2]])
            .train()
            .heads(&[0]),
    );
}

#[test]
fn rnn_param_concat_gradients() {
    check(
        GradCheck::new("_rnn_param_concat")
            .attr("num_args", 3)
            .attr("dim", 0)
            .shapes(&[&[4], &[6], &[2]]),
    );
}

/// f16 and bf16 run through the same f64 computation, rounded once: they
/// agree with f32 to their precision.
#[test]
fn rnn_half_precision_agrees_with_f32() {
    simpleop_ops::link();
    use simpleop::{Attrs, DType, NDArray, eager};
    let attrs = Attrs::new()
        .with("mode", "gru")
        .with("state_size", 3)
        .with("num_layers", 2)
        .with("state_outputs", "True");
    // (T, N, I) = (4, 2, 3): 9·(3+3+2) + 9·(3+3+2) parameters.
    let inputs = [
        NDArray::random_uniform(vec![4, 2, 3], -1.0, 1.0, DType::F32, 1).unwrap(),
        NDArray::random_uniform(vec![144], -0.5, 0.5, DType::F32, 2).unwrap(),
        NDArray::random_uniform(vec![2, 2, 3], -0.5, 0.5, DType::F32, 3).unwrap(),
    ];
    let run = |dtype: DType| {
        let cast: Vec<NDArray> = inputs.iter().map(|a| a.astype(dtype)).collect();
        let refs: Vec<&NDArray> = cast.iter().collect();
        let outs = eager::invoke_outputs_by_name("RNN", &refs, &mut [], &attrs).unwrap();
        // Every output, hidden ones included: output, hy, (a GRU's
        // unused) cy, the mask.
        assert_eq!(outs.len(), 4);
        assert!(outs.iter().all(|o| o.dtype() == dtype));
        outs[..2]
            .iter()
            .map(NDArray::to_f64_vec)
            .collect::<Vec<_>>()
    };
    let want = run(DType::F32);
    for (dtype, tol) in [(DType::F16, 5e-3), (DType::BF16, 4e-2)] {
        for (got, want) in run(dtype).iter().zip(&want) {
            assert_eq!(got.len(), want.len());
            for (a, e) in got.iter().zip(want) {
                assert!((a - e).abs() <= tol, "{dtype}: {a} vs {e}");
            }
        }
    }
}
