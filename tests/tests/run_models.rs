//! `simpleop run` and weights: Gluon exports made by MXNet 1.9.1
//! (`tests/data/models`: an MLP from `gen_dense.py`, and an MLP with
//! BatchNorm and Dropout, a Concat/split model and a transformer-style
//! block from `gen_models.py`, an LSTM and a GRU from `gen_rnn_model.py`)
//! load with their `.params` and match MXNet's output, every parameter's
//! gradient and the moving statistics; a graph built here round-trips its
//! weights through `.params` and safetensors and `simpleop run` agrees
//! with the executor bitwise.

use simpleop_tests::assert_close;
use std::path::{Path, PathBuf};

use simpleop::symbol::Symbol;
use simpleop::{Attrs, DType, NDArray};

const MODELS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/models");

fn run(args: &[&str]) -> String {
    simpleop_ops::link();
    let mut out = Vec::new();
    let argv = std::iter::once("simpleop").chain(args.iter().copied());
    let code = simpleop_cli::run(argv, &mut out).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(code, 0);
    String::from_utf8(out).unwrap()
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("run-models")
        .join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn floats(v: &serde_json::Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

#[test]
fn gluon_mlp_export_runs_and_matches_mxnet() {
    inference_matches("mlp");
}

#[test]
fn gluon_mlp_export_trains_with_mxnet_gradients() {
    // MXNet's gradients are of sum(output · head); the executor is bound
    // here directly so that head can be given.
    training_matches("mlp");
}

/// `relu(FullyConnected(x, w, b))` with weights saved here.
fn dense_relu() -> (Symbol, Vec<(String, NDArray)>, NDArray) {
    simpleop_ops::link();
    let (x, w, b) = (Symbol::var("x"), Symbol::var("w"), Symbol::var("b"));
    let fc = Symbol::invoke(
        "FullyConnected",
        &[&x, &w, &b],
        &Attrs::new().with("num_hidden", 5),
    )
    .unwrap();
    let y = Symbol::invoke("relu", &[&fc], &Attrs::new()).unwrap();
    let weights = vec![
        (
            "arg:w".to_string(),
            NDArray::random_uniform(vec![5, 6], -1.0, 1.0, DType::F32, 1).unwrap(),
        ),
        (
            "arg:b".to_string(),
            NDArray::random_uniform(vec![5], -1.0, 1.0, DType::F32, 2).unwrap(),
        ),
    ];
    let input = NDArray::random_uniform(vec![3, 6], -1.0, 1.0, DType::F32, 3).unwrap();
    (y, weights, input)
}

/// [`dense_relu`] written into `dir` as `simpleop run` reads it: the
/// symbol JSON, the input `.npy` and the `.params` file.
fn write_dense_relu(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let (sym, weights, x) = dense_relu();
    let symbol = dir.join("model-symbol.json");
    std::fs::write(&symbol, sym.to_json()).unwrap();
    let input = dir.join("x.npy");
    x.save_npy(&input).unwrap();
    let params = dir.join("model-0000.params");
    NDArray::save_params(&params, &weights).unwrap();
    (symbol, input, params)
}

#[test]
fn run_agrees_with_the_eager_ops_bitwise_from_params_and_safetensors() {
    let (_, weights, x) = dense_relu();
    let dir = temp_dir("dense");
    let (symbol, input, params) = write_dense_relu(&dir);
    let bare: Vec<(String, NDArray)> = weights
        .iter()
        .map(|(n, a)| (n.trim_start_matches("arg:").to_string(), a.clone()))
        .collect();
    let safetensors = dir.join("model.safetensors");
    NDArray::save_safetensors(&safetensors, &bare).unwrap();
    let fc = simpleop::eager::invoke(
        "FullyConnected",
        &[&x, &weights[0].1, &weights[1].1],
        &Attrs::new().with("num_hidden", 5),
    )
    .unwrap();
    let want = simpleop::eager::invoke("relu", &[&fc], &Attrs::new()).unwrap();
    for file in [&params, &safetensors] {
        let out = dir.join("y.npy");
        let input = format!("x={}", input.display());
        run(&[
            "run",
            symbol.to_str().unwrap(),
            "--params",
            file.to_str().unwrap(),
            "--input",
            &input,
            "-o",
            out.to_str().unwrap(),
        ]);
        let y = NDArray::load_npy(&out).unwrap();
        assert_eq!(
            y.to_vec::<f32>().unwrap(),
            want.to_vec::<f32>().unwrap(),
            "{}",
            file.display()
        );
    }
}

#[test]
fn run_trains_and_reports_json() {
    let dir = temp_dir("train");
    let (symbol, input, params) = write_dense_relu(&dir);
    let out = dir.join("y.npy");
    let input = format!("x={}", input.display());
    let printed = run(&[
        "run",
        symbol.to_str().unwrap(),
        "--params",
        params.to_str().unwrap(),
        "--input",
        &input,
        "--train",
        "--json",
        "-o",
        out.to_str().unwrap(),
    ]);
    let summary: serde_json::Value = serde_json::from_str(printed.trim()).unwrap();
    assert_eq!(summary["train"], true);
    assert_eq!(summary["outputs"], serde_json::json!([[3, 5]]));
    assert!(summary["forward_ms"].as_f64().unwrap() >= 0.0);
    assert!(summary["backward_ms"].as_f64().unwrap() >= 0.0);
    assert!(summary["memory"]["planned_bytes"].as_u64().unwrap() > 0);
    let files: Vec<&str> = summary["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert_eq!(files.len(), 4, "{files:?}"); // the output and x, w, b gradients
    // The bias gradient of sum(relu(fc)) counts the rows where each unit is active.
    let y = NDArray::load_npy(&out).unwrap().to_vec::<f32>().unwrap();
    let gb = NDArray::load_npy(dir.join("y-grad-b.npy"))
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    for (j, g) in gb.iter().enumerate() {
        let active = (0..3).filter(|r| y[r * 5 + j] > 0.0).count();
        assert_eq!(*g, active as f32, "unit {j}");
    }
}

#[test]
fn run_errors_name_what_is_wrong() {
    simpleop_ops::link();
    let (sym, weights, x) = dense_relu();
    let dir = temp_dir("errors");
    let symbol = dir.join("model-symbol.json");
    std::fs::write(&symbol, sym.to_json()).unwrap();
    let input = dir.join("x.npy");
    x.save_npy(&input).unwrap();
    let params = dir.join("short.params");
    NDArray::save_params(&params, &weights[..1]).unwrap();
    let err = |args: &[&str]| {
        let argv = std::iter::once("simpleop").chain(args.iter().copied());
        simpleop_cli::run(argv, &mut Vec::new())
            .unwrap_err()
            .to_string()
    };
    let s = symbol.to_str().unwrap();
    let xin = format!("x={}", input.display());
    // the bias is missing from the weights
    let e = err(&[
        "run",
        s,
        "--params",
        params.to_str().unwrap(),
        "--input",
        &xin,
    ]);
    assert!(e.contains('b') && e.contains("missing"), "{e}");
    // an input that is no argument
    let e = err(&["run", s, "--input", &format!("nope={}", input.display())]);
    assert!(e.contains("nope") && e.contains("no argument"), "{e}");
    // a weight file that is not one
    let bad = dir.join("bad.params");
    std::fs::write(&bad, b"not a params file").unwrap();
    let e = err(&["run", s, "--params", bad.to_str().unwrap(), "--input", &xin]);
    assert!(e.contains("bad.params"), "{e}");
}

/// MXNet's expectations for export `name` (`tests/conformance/gen_models.py`).
fn expect_of(name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(Path::new(MODELS).join(format!("{name}-expect.json")));
    serde_json::from_str(&text.unwrap()).unwrap()
}

/// `simpleop run` on export `name` matches MXNet's inference output.
fn inference_matches(name: &str) {
    let dir = temp_dir(name);
    let out = dir.join("y.npy");
    let (symbol, params) = (
        format!("{MODELS}/{name}-symbol.json"),
        format!("{MODELS}/{name}-0000.params"),
    );
    let input = format!("data={MODELS}/{name}-input.npy");
    run(&[
        "run",
        &symbol,
        "--params",
        &params,
        "--input",
        &input,
        "-o",
        out.to_str().unwrap(),
    ]);
    let expect = expect_of(name);
    let y = NDArray::load_npy(&out).unwrap();
    let shape: Vec<usize> = floats(&expect["output_shape"])
        .iter()
        .map(|&d| d as usize)
        .collect();
    assert_eq!(y.shape().dims(), shape.as_slice(), "{name}");
    assert_close(&y.to_f64_vec(), &floats(&expect["output"]), 1e-5, name);
}

/// Export `name` bound from the data shape alone (every weight and aux
/// shape is inferred), with its `.params` loaded: arguments and aux
/// states.
fn bind_export(name: &str) -> (simpleop::symbol::Executor, NDArray) {
    simpleop_ops::link();
    let text = std::fs::read_to_string(format!("{MODELS}/{name}-symbol.json")).unwrap();
    let sym = Symbol::from_json(&text).unwrap();
    let x = NDArray::load_npy(format!("{MODELS}/{name}-input.npy")).unwrap();
    let shapes = std::collections::HashMap::from([("data".to_string(), x.shape().clone())]);
    let reqs = sym
        .list_arguments()
        .into_iter()
        .filter(|a| a != "data")
        .map(|a| (a, simpleop::symbol::GradReq::Write))
        .collect();
    let mut exec = sym.simple_bind(&shapes, &Default::default(), reqs).unwrap();
    let weights = NDArray::load_params(format!("{MODELS}/{name}-0000.params")).unwrap();
    let options = simpleop::params::LoadOptions {
        inputs: &["data"],
        ..Default::default()
    };
    exec.load_params(&weights, &options).unwrap();
    exec.set_arg("data", &x).unwrap();
    (exec, x)
}

/// A training step on export `name` gives MXNet's gradient of
/// `sum(output · head)` for every parameter; with `aux_passes`, the
/// BatchNorm moving statistics after that many steps match too.
fn training_matches(name: &str) {
    let expect = expect_of(name);
    let (mut exec, _) = bind_export(name);
    let out_shape = exec.outputs()[0].shape().clone();
    let head = NDArray::from_f64(&floats(&expect["head"]), out_shape, DType::F32).unwrap();
    let passes = expect["aux_passes"].as_u64().unwrap_or(1).max(1);
    for pass in 0..passes {
        exec.forward(true).unwrap();
        if pass == 0 && !expect["train_output"].is_null() {
            let y = exec.outputs()[0].to_f64_vec();
            assert_close(&y, &floats(&expect["train_output"]), 1e-4, "train_output");
        }
        exec.backward(std::slice::from_ref(&head)).unwrap();
        if pass == 0 {
            let grads = expect["grads"].as_object().unwrap();
            assert!(!grads.is_empty());
            for (arg, want) in grads {
                let got = exec
                    .grad(arg)
                    .unwrap_or_else(|| panic!("{name}: no gradient for {arg}"));
                assert_close(&got.to_f64_vec(), &floats(want), 1e-4, arg);
            }
        }
    }
    if let Some(aux) = expect["aux_after_train"].as_object() {
        assert_eq!(exec.aux_names().len(), aux.len(), "{name}: aux states");
        for (k, want) in aux {
            let got = exec
                .aux(k)
                .unwrap_or_else(|| panic!("{name}: no aux state {k}"));
            assert_close(&got.to_f64_vec(), &floats(want), 1e-5, k);
        }
    }
}

#[test]
fn gluon_batchnorm_dropout_mlp_matches_mxnet() {
    // Dropout 0.5 is the identity in inference; training is checked on
    // the same net with p = 0 (MXNet's mask cannot be reproduced).
    inference_matches("bnmlp");
    inference_matches("bnmlp0");
    training_matches("bnmlp0");
}

#[test]
fn gluon_concat_split_model_matches_mxnet() {
    inference_matches("concatsplit");
    training_matches("concatsplit");
}

#[test]
fn gluon_transformer_block_matches_mxnet() {
    inference_matches("tblock");
    training_matches("tblock");
}

#[test]
fn a_bound_export_lists_aux_states_apart_and_saves_them() {
    let (exec, _) = bind_export("bnmlp");
    let aux = exec.aux_names().to_vec();
    assert_eq!(
        aux,
        [
            "bnmlp_batchnorm0_running_mean",
            "bnmlp_batchnorm0_running_var"
        ]
    );
    assert!(exec.arg_names().iter().all(|a| !aux.contains(a)));
    let params = exec.params(&["data"]);
    let names: Vec<&str> = params.iter().map(|(n, _)| n.as_str()).collect();
    assert!(
        names.contains(&"aux:bnmlp_batchnorm0_running_var"),
        "{names:?}"
    );
    // The file's aux values were loaded, not left at zero.
    let saved = NDArray::load_params(format!("{MODELS}/bnmlp-0000.params")).unwrap();
    let (_, want) = saved
        .iter()
        .find(|(n, _)| n == "aux:bnmlp_batchnorm0_running_var")
        .unwrap();
    let got = exec.aux("bnmlp_batchnorm0_running_var").unwrap();
    assert_eq!(got.to_f64_vec(), want.to_f64_vec());
}

#[test]
fn simpleop_graph_binds_a_gluon_export_from_the_data_shape_alone() {
    let dir = temp_dir("graph");
    let dot = dir.join("bnmlp.dot");
    let symbol = format!("{MODELS}/bnmlp-symbol.json");
    let args = ["graph", &symbol, "--shape", "data=4,6", "--train", "-o"];
    run(&[&args[..], &[dot.to_str().unwrap()]].concat());
    let text = std::fs::read_to_string(&dot).unwrap();
    // The weight and the aux states' shapes came from the data's.
    assert!(
        text.contains("bnmlp_dense0_weight\\n(8, 6) float32"),
        "{text}"
    );
    assert!(
        text.contains("bnmlp_batchnorm0_running_var\\n(8,) float32\\n[aux state]"),
        "{text}"
    );
}

/// The Gluon recurrent exports of `tests/conformance/gen_rnn_model.py`:
/// Reshape and `_rnn_param_concat` pack their weights into `RNN`'s
/// parameters. Bound from the data's shape alone (the packed length and
/// the states' shapes are inferred), each matches MXNet's output and final
/// states in inference, and the gradient of every parameter and input in
/// training; `weights` counts the weight and bias variables. An export
/// made without `input_size` (`from_weights`) leaves its i2h weight's
/// shape unknown (`(9, 0)`): it binds with the weights' shapes given too,
/// as `simpleop run --params` gives them.
fn recurrent_export_matches(name: &str, weights: usize, from_weights: bool) {
    simpleop_ops::link();
    let expect = expect_of(name);
    let text = std::fs::read_to_string(format!("{MODELS}/{name}-symbol.json")).unwrap();
    let sym = Symbol::from_json(&text).unwrap();
    let given = expect["inputs"].as_object().unwrap();
    let names: Vec<&str> = given.keys().map(String::as_str).collect();
    let inputs: Vec<NDArray> = given
        .values()
        .map(|v| {
            let shape: Vec<usize> = floats(&v["shape"]).iter().map(|&d| d as usize).collect();
            NDArray::from_f64(&floats(&v["data"]), shape, DType::F32).unwrap()
        })
        .collect();
    let mut shapes =
        std::collections::HashMap::from([("data0".to_string(), inputs[0].shape().clone())]);
    let reqs = || {
        sym.list_arguments()
            .into_iter()
            .map(|a| (a, simpleop::symbol::GradReq::Write))
            .collect()
    };
    let saved = NDArray::load_params(format!("{MODELS}/{name}-0000.params")).unwrap();
    assert_eq!(saved.len(), weights, "{name}");
    if from_weights {
        let err = sym
            .simple_bind(&shapes, &Default::default(), reqs())
            .map(|_| ())
            .unwrap_err();
        assert!(err.to_string().contains("i2h_weight"), "{err}");
        for (n, a) in &saved {
            shapes.insert(n.trim_start_matches("arg:").to_string(), a.shape().clone());
        }
    }
    let mut exec = sym
        .simple_bind(&shapes, &Default::default(), reqs())
        .unwrap();
    let options = simpleop::params::LoadOptions {
        inputs: &names,
        ..Default::default()
    };
    exec.load_params(&saved, &options).unwrap();
    for (n, x) in names.iter().zip(&inputs) {
        exec.set_arg(n, x).unwrap();
    }
    exec.forward(false).unwrap();
    let outputs = expect["outputs"].as_array().unwrap();
    assert_eq!(exec.outputs().len(), outputs.len(), "{name}");
    for (k, want) in outputs.iter().enumerate() {
        let got = exec.outputs()[k].to_f64_vec();
        assert_close(&got, &floats(want), 1e-5, &format!("{name}: output {k}"));
    }
    let heads: Vec<NDArray> = expect["heads"]
        .as_array()
        .unwrap()
        .iter()
        .zip(exec.outputs())
        .map(|(h, o)| NDArray::from_f64(&floats(h), o.shape().clone(), DType::F32).unwrap())
        .collect();
    exec.forward(true).unwrap();
    exec.backward(&heads).unwrap();
    let grads = expect["grads"].as_object().unwrap();
    assert_eq!(grads.len(), weights + names.len(), "{name}");
    for (arg, want) in grads {
        let got = exec
            .grad(arg)
            .unwrap_or_else(|| panic!("{name}: no gradient for {arg}"));
        assert_close(&got.to_f64_vec(), &floats(want), 1e-4, arg);
    }
}

/// `rnn.LSTM`, 2 layers, bidirectional: 16 weights and biases; inputs
/// data, h0 and c0; outputs output, hy and cy.
#[test]
fn gluon_lstm_export_matches_mxnet_in_inference_and_training() {
    recurrent_export_matches("lstm2", 16, false);
}

/// `rnn.GRU`, 1 layer, made without `input_size`: 4 weights and biases;
/// inputs data and h0; outputs output and hy.
#[test]
fn gluon_gru_export_matches_mxnet_in_inference_and_training() {
    recurrent_export_matches("gru1", 4, true);
}

/// `rnn.LSTM` called on a Symbol without states: Gluon makes them with
/// `_zeros` of shape `(1, 0, 3)`, whose 0 (the batch size) RNN's shape
/// inference fills from the data. Inputs data0 only; output the output.
#[test]
fn gluon_lstm_with_zeros_begin_states_binds_from_the_data_and_matches_mxnet() {
    recurrent_export_matches("lstmz", 4, false);
}

/// The Gluon CNN exports of `tests/conformance/gen_cnn_models.py`: a
/// LeNet (Convolution, Pooling, FullyConnected), a ResNet-v1-style net
/// (BatchNorm, residual adds, a strided 1×1 downsample, global pooling)
/// and a MobileNet-v1-style one (depthwise and pointwise convolutions).
/// Each runs through `simpleop run` to MXNet's inference output, and a
/// training step gives MXNet's gradient for every parameter and, after
/// the recorded number of steps, its BatchNorm moving statistics.
#[test]
fn gluon_cnn_exports_match_mxnet_in_inference_and_training() {
    for name in ["lenet", "resnet_tiny", "mobilenet_tiny"] {
        inference_matches(name);
        training_matches(name);
    }
}
