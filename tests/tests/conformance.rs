//! Every MXNet 1.9.1 conformance case passes on every path: the executor
//! with and without memory planning, and op by op through the NDArray API
//! with its own reverse-mode pass, and recorded by the eager tape
//! (`autograd`); forward outputs and, where the case asks,
//! gradients with each argument's `grad_req`.

use simpleop_cli::conformance::{self, Path};

const CASES: &str = include_str!("../conformance/mxnet-ops.jsonl");

/// The executor with and without memory planning, the NDArray API with
/// the runner's own reverse pass, and the eager tape.
const EVERY_PATH: [Path; 4] = [
    Path::Executor {
        memory_planning: true,
    },
    Path::Executor {
        memory_planning: false,
    },
    Path::Eager,
    Path::Tape,
];

#[test]
fn every_case_matches_mxnet_on_every_path() {
    simpleop_ops::link();
    let cases = conformance::parse_cases(CASES).expect("case file parses");
    assert_eq!(cases.len(), 141);
    let report = conformance::check_paths(&cases, &EVERY_PATH);
    let failures: Vec<String> = report.failures.iter().map(ToString::to_string).collect();
    assert!(report.ok(), "{}", failures.join("\n"));
    assert_eq!(report.summary(), "141 passed, 0 failed");
}

/// Cases `tests/conformance/gen_extra.py` made with MXNet 1.9.1 for
/// behaviours users tripped over (`clip` with NaN and with its bounds the
/// wrong way round, `where`, the comparisons `a > b`, `a >= b`, `x != 0.5`
/// ... emit, `where(a > b, a, b)`, NaN through `relu`, `maximum` and
/// `minimum` in every form, alone and fused), every unary op and the
/// scalar, binary, broadcasting, softmax and reduction ops at infinities,
/// signed zeros, NaN, tiny and huge values, and the selections (`argmax`, the comparisons,
/// `where`) with NaN and ties.
#[test]
fn extra_cases_match_mxnet_on_every_path() {
    simpleop_ops::link();
    let extra = include_str!("../conformance/mxnet-extra.jsonl");
    let cases = conformance::parse_cases(extra).expect("case file parses");
    assert_eq!(cases.len(), 151);
    let report = conformance::check_paths(&cases, &EVERY_PATH);
    let failures: Vec<String> = report.failures.iter().map(ToString::to_string).collect();
    assert!(report.ok(), "{}", failures.join("\n"));
}

/// `FullyConnected` cases `tests/conformance/gen_dense.py` made with MXNet
/// 1.9.1: flattened and not, float64, `add` requests, a relu after it
/// (fused onto the product), and no gradient for the data.
#[test]
fn dense_cases_match_mxnet_on_every_path() {
    simpleop_ops::link();
    let cases = include_str!("../conformance/mxnet-dense.jsonl");
    let cases = conformance::parse_cases(cases).expect("case file parses");
    assert_eq!(cases.len(), 6);
    let report = conformance::check_paths(&cases, &EVERY_PATH);
    let failures: Vec<String> = report.failures.iter().map(ToString::to_string).collect();
    assert!(report.ok(), "{}", failures.join("\n"));
}

/// Cases `tests/conformance/gen_layers.py` made with MXNet 1.9.1 for the
/// layer, loss-head, indexing, init and ordering ops of issue 34
/// (`Activation`, `LeakyReLU`, `SoftmaxOutput`, the regression outputs,
/// `Embedding`, `take`, `pick`, `one_hot`, `SwapAxis`, `_zeros`, `_ones`,
/// `_full`, `sort`, `argsort`, `InstanceNorm`, `LayerNorm`), alone, with
/// float64 and float16 where MXNet has them, and in small graphs.
#[test]
fn layer_cases_match_mxnet_on_every_path() {
    simpleop_ops::link();
    let layers = include_str!("../conformance/mxnet-layers.jsonl");
    let cases = conformance::parse_cases(layers).expect("case file parses");
    assert_eq!(cases.len(), 105);
    let report = conformance::check_paths(&cases, &EVERY_PATH);
    let failures: Vec<String> = report.failures.iter().map(ToString::to_string).collect();
    assert!(report.ok(), "{}", failures.join("\n"));
    assert_eq!(report.summary(), "105 passed, 0 failed");
}

#[test]
fn a_wrong_expectation_fails_with_the_worst_element() {
    simpleop_ops::link();
    let mut cases = conformance::parse_cases(CASES).unwrap();
    let case = cases.iter_mut().find(|c| c.name == "graph/chain6").unwrap();
    let out = &mut case.expect.outputs[0];
    let v = out.data[2].as_f64().unwrap();
    out.data[2] = (v + 0.5).into();
    out.data[5] = (out.data[5].as_f64().unwrap() + 1e-3).into();
    for path in [
        Path::Executor {
            memory_planning: true,
        },
        Path::Eager,
    ] {
        let err = conformance::run(case, path).unwrap_err();
        assert!(err.starts_with("output 0: element 2: got"), "{path}: {err}");
    }
    // A dtype that differs is a mismatch even when the values agree.
    let case = cases.iter_mut().find(|c| c.name == "relu/float32").unwrap();
    case.expect.outputs[0].dtype = "float64".into();
    let err = conformance::run(case, Path::Eager).unwrap_err();
    assert!(err.contains("dtype float32 != float64"), "{err}");
}

#[test]
fn malformed_case_files_are_errors_naming_the_line() {
    let err = conformance::parse_cases("\n{\"name\": 1}\n").unwrap_err();
    assert!(err.to_string().contains("line 2"), "{err}");
}

/// Issue 34's multi-output, variadic and aux-state ops: SliceChannel,
/// Concat, stack, add_n, BatchNorm (its moving statistics after a
/// training step), Dropout, topk, LayerNorm's statistics, FullyConnected
/// without bias, LeakyReLU's prelu, on every path.
#[test]
fn multi_output_cases_match_mxnet_on_every_path() {
    simpleop_ops::link();
    let text = include_str!("../conformance/mxnet-multi.jsonl");
    let cases = conformance::parse_cases(text).expect("case file parses");
    let runnable: Vec<_> = cases
        .into_iter()
        // MXNet updates the moving statistics in backward; simpleop in the
        // training forward (see ops/src/batch_norm.rs). MXNet's gamma
        // gradient of prelu in bn_prelu_bn is wrong (gen_multi.py's notes;
        // `prelu_gamma_gradient_after_batch_norm` checks simpleop's).
        .filter(|c| {
            !["BatchNorm/train_forward_only", "graph/bn_prelu_bn"].contains(&c.name.as_str())
        })
        .collect();
    assert_eq!(runnable.len(), 118);
    let report = conformance::check_paths(&runnable, &EVERY_PATH);
    let failures: Vec<String> = report.failures.iter().map(ToString::to_string).collect();
    assert!(report.ok(), "{}", failures.join("\n"));
}

/// `RNN` (lstm, gru, rnn_tanh, rnn_relu; 1 and 2 layers, bidirectional,
/// state_outputs, float64, head gradients on the final states only, `add`
/// and `null` requests, dropout at inference) and `_rnn_param_concat`
/// feeding it as Gluon's exports do, made by `gen_rnn.py` with MXNet
/// 1.9.1, on every path.
#[test]
fn rnn_cases_match_mxnet_on_every_path() {
    simpleop_ops::link();
    every_case_passes(include_str!("../conformance/mxnet-rnn.jsonl"), 25);
}

/// `Pooling` (max, avg, sum, lp; every convention, global, padding counted
/// or not, 1-D to 3-D, ties), `UpSampling` (nearest) and `Pad` (each mode)
/// cases `tests/conformance/gen_pool.py` made with MXNet 1.9.1, on every
/// path.
#[test]
fn pool_cases_match_mxnet_on_every_path() {
    simpleop_ops::link();
    // 36 of Pooling, 7 of UpSampling, 9 of Pad and a graph of the three.
    every_case_passes(include_str!("../conformance/mxnet-pool.jsonl"), 53);
}

#[test]
fn conv_cases_match_mxnet_on_every_path() {
    simpleop_ops::link();
    // 67 of Convolution, 48 of Deconvolution and 6 graphs (BatchNorm,
    // Pooling, residual adds).
    every_case_passes(include_str!("../conformance/mxnet-conv.jsonl"), 121);
}

/// Every case of the file `text` (`count` of them) matches MXNet on every
/// path.
fn every_case_passes(text: &str, count: usize) {
    let cases = conformance::parse_cases(text).expect("case file parses");
    assert_eq!(cases.len(), count);
    let report = conformance::check_paths(&cases, &EVERY_PATH);
    let failures: Vec<String> = report.failures.iter().map(ToString::to_string).collect();
    assert!(report.ok(), "{}", failures.join("\n"));
    assert_eq!(report.summary(), format!("{count} passed, 0 failed"));
}

/// The eager tape's outputs and gradients equal the executor's (without
/// fusion: the same kernels in the same order) bit for bit, on every case
/// of every file.
#[test]
fn the_eager_tape_equals_the_executor_bit_for_bit_on_every_case() {
    simpleop_ops::link();
    let files = [
        CASES,
        include_str!("../conformance/mxnet-extra.jsonl"),
        include_str!("../conformance/mxnet-dense.jsonl"),
        include_str!("../conformance/mxnet-layers.jsonl"),
        include_str!("../conformance/mxnet-multi.jsonl"),
        include_str!("../conformance/mxnet-rnn.jsonl"),
        include_str!("../conformance/mxnet-pool.jsonl"),
        include_str!("../conformance/mxnet-conv.jsonl"),
    ];
    let (mut compared, mut failures) = (0, Vec::new());
    for text in files {
        for case in conformance::parse_cases(text).expect("case file parses") {
            match conformance::tape_matches_executor_bitwise(&case) {
                Ok(()) => compared += 1,
                Err(e) => failures.push(format!("{}: {e}", case.name)),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(compared > 600, "{compared} cases");
}
