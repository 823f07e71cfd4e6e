//! Ops with several outputs, kwargs-dependent inputs and aux states in the
//! symbol API: output names and selection, JSON round trips with `[node,
//! index, 0]` entries, aux states listed apart and inferred from the data,
//! training mode, and outputs nothing reads.

use std::collections::HashMap;

use simpleop::symbol::{GradReq, Symbol};
use simpleop::{Attrs, DType, NDArray, Shape, eager};

fn link() {
    simpleop_ops::link();
}

fn split(x: &Symbol, n: usize) -> Symbol {
    let attrs = Attrs::new().with("num_outputs", n).with("axis", 1);
    Symbol::invoke_named("split", &[x], &attrs, Some("sp")).unwrap()
}

#[test]
fn a_split_shows_every_output_and_round_trips_through_json() {
    link();
    let x = Symbol::var("x");
    let s = split(&x, 3);
    assert_eq!(s.num_outputs(), 3);
    assert_eq!(s.list_outputs(), ["sp_output0", "sp_output1", "sp_output2"]);
    // Output 2 alone, through another op: the entry names index 2.
    let y = Symbol::invoke("relu", &[&s.output(2).unwrap()], &Attrs::new()).unwrap();
    let json = y.to_json();
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    let relu = &doc["nodes"][2];
    assert_eq!(relu["inputs"], serde_json::json!([[1, 2, 0]]));
    assert_eq!(doc["node_row_ptr"], serde_json::json!([0, 1, 4, 5]));
    let back = Symbol::from_json(&json).unwrap();
    assert_eq!(back.to_json(), json);
    let shapes = back
        .infer_shape(&HashMap::from([("x".to_string(), Shape::new([2, 6]))]))
        .unwrap();
    assert_eq!(shapes.output_shapes, [Some(Shape::new([2, 2]))]);
}

#[test]
fn json_refuses_an_output_index_past_the_op() {
    link();
    let s = split(&Symbol::var("x"), 2);
    let json = Symbol::group(&[s.output(1).unwrap()]).to_json();
    let mut doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    doc["heads"] = serde_json::json!([[1, 2, 0]]);
    let bad = doc.to_string();
    let err = Symbol::from_json(&bad).unwrap_err().to_string();
    assert!(err.contains("reads output 2 of `sp`, which has 2"), "{err}");
}

fn batch_norm(x: &Symbol, output_mean_var: bool) -> Symbol {
    let (g, b) = (Symbol::var("g"), Symbol::var("b"));
    let (m, v) = (Symbol::var("mm"), Symbol::var("mv"));
    let attrs = Attrs::new().with("fix_gamma", "False").with(
        "output_mean_var",
        if output_mean_var { "True" } else { "False" },
    );
    Symbol::invoke_named("BatchNorm", &[x, &g, &b, &m, &v], &attrs, Some("bn")).unwrap()
}

#[test]
fn batch_norm_lists_aux_states_apart_and_infers_them_from_the_data() {
    link();
    let bn = batch_norm(&Symbol::var("x"), false);
    assert_eq!(bn.list_arguments(), ["x", "g", "b"]);
    assert_eq!(bn.list_auxiliary_states(), ["mm", "mv"]);
    assert_eq!(bn.list_outputs(), ["bn_output"]);
    let shown = batch_norm(&Symbol::var("x"), true);
    assert_eq!(shown.list_outputs(), ["bn_output", "bn_mean", "bn_var"]);
    let known = HashMap::from([("x".to_string(), Shape::new([4, 3, 2]))]);
    let shapes = bn.infer_shape(&known).unwrap();
    assert!(shapes.is_complete());
    assert_eq!(shapes.argument_shapes[1], Some(Shape::new([3])));
    assert_eq!(shapes.aux, ["mm", "mv"]);
    assert_eq!(
        shapes.aux_shapes,
        [Some(Shape::new([3])), Some(Shape::new([3]))]
    );
    // simple_bind makes the aux states too; binding them as gradients is refused.
    let exe = bn
        .simple_bind(&known, &HashMap::new(), HashMap::new())
        .unwrap();
    assert_eq!(exe.aux_names(), ["mm", "mv"]);
    let reqs = HashMap::from([("mm".to_string(), GradReq::Write)]);
    let err = bn
        .simple_bind(&known, &HashMap::new(), reqs)
        .unwrap_err()
        .to_string();
    assert!(err.contains("mm"), "{err}");
}

#[test]
fn a_variable_cannot_be_both_an_argument_and_an_aux_state() {
    link();
    let x = Symbol::var("x");
    let (g, b, m) = (Symbol::var("g"), Symbol::var("b"), Symbol::var("m"));
    let bn = Symbol::invoke("BatchNorm", &[&x, &g, &b, &m, &g], &Attrs::new()).unwrap();
    let err = bn.infer_shape(&HashMap::new()).unwrap_err().to_string();
    assert!(err.contains("`g`") && err.contains("aux state"), "{err}");
    let bn = Symbol::invoke("BatchNorm", &[&x, &g, &b, &m, &m], &Attrs::new()).unwrap();
    let err = bn.infer_shape(&HashMap::new()).unwrap_err().to_string();
    assert!(err.contains("two aux states"), "{err}");
}

#[test]
fn dropout_drops_only_in_training_and_its_mask_is_reused_memory_in_inference() {
    link();
    let x = Symbol::var("x");
    let d = Symbol::invoke("Dropout", &[&x], &Attrs::new().with("p", 0.5)).unwrap();
    let y = Symbol::invoke("relu", &[&d], &Attrs::new()).unwrap();
    let data = NDArray::ones([64, 64], DType::F32);
    let bind = |req: GradReq| {
        let args = HashMap::from([("x".to_string(), data.clone())]);
        let grads = HashMap::from([("x".to_string(), NDArray::zeros([64, 64], DType::F32))]);
        let grads = if req == GradReq::Null {
            HashMap::new()
        } else {
            grads
        };
        let reqs = HashMap::from([("x".to_string(), req)]);
        y.bind(args, grads, reqs).unwrap()
    };
    let mut exe = bind(GradReq::Null);
    exe.forward(false).unwrap();
    assert!(
        exe.outputs()[0]
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .all(|&v| v == 1.0)
    );
    let inference = exe.memory_stats();
    let mut train = bind(GradReq::Write);
    train.forward(true).unwrap();
    let out = train.outputs()[0].to_vec::<f32>().unwrap();
    let kept = out.iter().filter(|&&v| v == 2.0).count();
    assert_eq!(kept + out.iter().filter(|&&v| v == 0.0).count(), out.len());
    assert!((1500..2600).contains(&kept), "{kept} of 4096 kept");
    train.backward(&[]).unwrap();
    // dx = mask: 2 where kept, 0 where dropped (relu passes 1 through).
    let grad = train.grad("x").unwrap().to_vec::<f32>().unwrap();
    assert_eq!(grad, out);
    // Inference keeps no mask: the unread mask's buffer is freed at once
    // and reused, so inference plans less than training, which keeps it.
    let training = train.memory_stats();
    assert!(
        inference.planned_bytes < training.planned_bytes,
        "{inference:?} vs {training:?}"
    );
    assert!(inference.planned_bytes <= 2 * 64 * 64 * 4, "{inference:?}");
}

#[test]
fn eager_calls_follow_the_training_mode() {
    link();
    let x = NDArray::ones([1000], DType::F32);
    let attrs = Attrs::new().with("p", 0.25);
    let y = eager::invoke_outputs_by_name("Dropout", &[&x], &mut [], &attrs).unwrap();
    assert_eq!(y[0].to_vec::<f32>().unwrap(), x.to_vec::<f32>().unwrap());
    let y = eager::train_mode(|| eager::invoke_outputs_by_name("Dropout", &[&x], &mut [], &attrs))
        .unwrap();
    let dropped = y[0]
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .filter(|&&v| v == 0.0)
        .count();
    assert!((150..350).contains(&dropped), "{dropped}");
    // The one-output call gives the visible output of an op whose others
    // are hidden, and refuses one that shows several.
    let y = eager::invoke("Dropout", &[&x], &attrs).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), x.to_vec::<f32>().unwrap());
    let two = Attrs::new().with("num_outputs", 2).with("axis", 0);
    let err = eager::invoke("split", &[&x], &two).unwrap_err().to_string();
    assert!(err.contains("invoke_outputs"), "{err}");
}

#[test]
fn variadic_ops_take_their_inputs_as_a_slice_on_both_front_ends() {
    link();
    use simpleop_ops::join::{ConcatParams, concat};
    let a = NDArray::from_vec(vec![1.0f32, 2.0], [1, 2]).unwrap();
    let b = NDArray::from_vec(vec![3.0f32, 4.0, 5.0, 6.0], [2, 2]).unwrap();
    let p = ConcatParams {
        num_args: 2,
        dim: 0,
    };
    let c = concat(&[&a, &b], p.clone()).unwrap();
    assert_eq!(c.to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let s = concat(&[&Symbol::var("a"), &Symbol::var("b")], p.clone()).unwrap();
    assert_eq!(s.list_arguments(), ["a", "b"]);
    // num_args must match the inputs given.
    let err = concat(&[&a], p).unwrap_err().to_string();
    assert!(
        err.contains("expected 2") || err.contains("2 inputs"),
        "{err}"
    );
}

#[test]
fn fully_connected_without_bias_takes_two_inputs_and_infers_its_weight() {
    link();
    let x = Symbol::var("x");
    let w = Symbol::var("w");
    let attrs = Attrs::new().with("num_hidden", 4).with("no_bias", "True");
    let fc = Symbol::invoke("FullyConnected", &[&x, &w], &attrs).unwrap();
    assert_eq!(fc.list_arguments(), ["x", "w"]);
    let known = HashMap::from([("x".to_string(), Shape::new([2, 3, 5]))]);
    let shapes = fc.infer_shape(&known).unwrap();
    assert_eq!(shapes.argument_shapes[1], Some(Shape::new([4, 15])));
    assert_eq!(shapes.output_shapes, [Some(Shape::new([2, 4]))]);
    let three = Symbol::invoke("FullyConnected", &[&x, &w, &x], &attrs);
    assert!(three.is_err());
}

/// rrelu draws one slope per element in `[lower_bound, upper_bound]` in
/// training, shows it as `mask`, and is reproducible from its seed; at
/// inference it uses their mean, which `mask` then holds.
#[test]
fn rrelu_draws_seeded_slopes_in_training_and_uses_their_mean_otherwise() {
    link();
    let x = NDArray::from_vec((0..400).map(|i| i as f32 - 300.0).collect(), [400]).unwrap();
    let attrs = Attrs::new()
        .with("act_type", "rrelu")
        .with("lower_bound", 0.1)
        .with("upper_bound", 0.3);
    let op = eager::lookup("LeakyReLU").unwrap().def;
    // A seed of its own: the global generator is shared by parallel tests.
    let env = (op.parse)(op, &attrs).unwrap().with_seed(5);
    let train = || eager::train_mode(|| eager::invoke_outputs(op, &[&x], &mut [], &env)).unwrap();
    let (a, b) = (train(), train());
    assert_eq!(a[1].to_vec::<f32>().unwrap(), b[1].to_vec::<f32>().unwrap());
    let (xs, ys, ms) = (
        x.to_vec::<f32>().unwrap(),
        a[0].to_vec::<f32>().unwrap(),
        a[1].to_vec::<f32>().unwrap(),
    );
    for ((x, y), m) in xs.iter().zip(&ys).zip(&ms) {
        assert!((0.1..=0.3).contains(m), "slope {m}");
        assert_eq!(*y, if *x > 0.0 { *x } else { x * m });
    }
    let spread =
        ms.iter().cloned().fold(f32::MIN, f32::max) - ms.iter().cloned().fold(f32::MAX, f32::min);
    assert!(spread > 0.15, "slopes barely vary: {spread}");
    let infer = eager::invoke_outputs_by_name("LeakyReLU", &[&x], &mut [], &attrs).unwrap();
    let mean = (0.1f32 + 0.3f32) / 2.0;
    for (x, y) in xs.iter().zip(infer[0].to_vec::<f32>().unwrap()) {
        assert_eq!(y, if *x > 0.0 { *x } else { x * mean });
    }
    assert!(infer[1].to_vec::<f32>().unwrap().iter().all(|&m| m == mean));
    // MXNet shows both outputs.
    let s = Symbol::invoke("LeakyReLU", &[&Symbol::var("x")], &attrs).unwrap();
    assert_eq!(s.list_outputs().len(), 2);
}

/// RNN's dropout between layers through the executor: a training pass
/// draws a mask (its hidden output), backward reads it; inference and
/// `p = 0` are the identity.
#[test]
fn rnn_dropout_applies_in_training_only_through_the_executor() {
    link();
    let v = |n: &str| Symbol::var(n);
    let rnn = |p: f64| {
        let attrs = Attrs::new()
            .with("mode", "rnn_tanh")
            .with("state_size", 8)
            .with("num_layers", 2)
            .with("p", p);
        Symbol::invoke("RNN", &[&v("data"), &v("w"), &v("s")], &attrs).unwrap()
    };
    // (T, N, I) = (3, 4, 2): 8·(2+8+2) + 8·(8+8+2) parameters.
    let params = 8 * 12 + 8 * 18;
    let args = || {
        HashMap::from([
            (
                "data".to_string(),
                NDArray::random_uniform(vec![3, 4, 2], -1.0, 1.0, DType::F32, 1).unwrap(),
            ),
            (
                "w".to_string(),
                NDArray::random_uniform(vec![params], -0.5, 0.5, DType::F32, 2).unwrap(),
            ),
            ("s".to_string(), NDArray::zeros([2, 4, 8], DType::F32)),
        ])
    };
    let run = |p: f64, train: bool| {
        let sym = rnn(p);
        assert_eq!(sym.list_outputs().len(), 1);
        let grads: HashMap<String, NDArray> = args()
            .into_iter()
            .map(|(k, a)| (k, NDArray::zeros(a.shape().clone(), DType::F32)))
            .collect();
        let reqs = args().into_keys().map(|k| (k, GradReq::Write)).collect();
        let mut exe = sym.bind(args(), grads, reqs).unwrap();
        exe.forward(train).unwrap();
        let out = exe.outputs()[0].to_vec::<f32>().unwrap();
        let dw = if train {
            exe.backward(&[NDArray::ones([3, 4, 8], DType::F32)])
                .unwrap();
            exe.grad("w").unwrap().to_vec::<f32>().unwrap()
        } else {
            Vec::new()
        };
        (out, dw)
    };
    let (plain, dw_plain) = run(0.0, true);
    assert_eq!(run(0.5, false).0, plain);
    let (dropped, dw) = run(0.5, true);
    assert_ne!(dropped, plain);
    assert!(dw.iter().all(|g| g.is_finite()));
    // Backward went through the mask: the parameters' gradient differs
    // from the plain pass's.
    assert_ne!(dw, dw_plain);
}

fn zeros(shape: &str) -> Symbol {
    Symbol::invoke("_zeros", &[], &Attrs::new().with("shape", shape)).unwrap()
}

/// A 0 in `_zeros`' `shape` is unknown when a consumer's inference
/// determines it, as MXNet reads it (Gluon's RNN begin states), and a
/// dimension of size 0 otherwise; known dimensions must agree.
#[test]
fn zeros_with_unknown_dimensions_take_them_from_their_consumer() {
    link();
    let x = Symbol::var("x");
    let known = HashMap::from([("x".to_string(), Shape::new([2, 3]))]);
    let sum = Symbol::invoke("elemwise_add", &[&zeros("(0, 3)"), &x], &Attrs::new()).unwrap();
    let shapes = sum.infer_shape(&known).unwrap();
    assert_eq!(shapes.output_shapes, [Some(Shape::new([2, 3]))]);
    let mut exec = sum
        .simple_bind(&known, &HashMap::new(), HashMap::new())
        .unwrap();
    exec.set_arg(
        "x",
        &NDArray::from_f64(&[1.0; 6], [2, 3], DType::F32).unwrap(),
    )
    .unwrap();
    exec.forward(false).unwrap();
    assert_eq!(exec.outputs()[0].to_f64_vec(), [1.0; 6]);

    // Any op without inputs: MXNet's samplers read `shape` the same way.
    let attrs = Attrs::new()
        .with("shape", "(0, 3)")
        .with("low", 2)
        .with("high", 3);
    let u = Symbol::invoke("_random_uniform", &[], &attrs).unwrap();
    let sum = Symbol::invoke("elemwise_add", &[&u, &x], &Attrs::new()).unwrap();
    let mut exec = sum
        .simple_bind(&known, &HashMap::new(), HashMap::new())
        .unwrap();
    exec.forward(false).unwrap();
    let out = exec.outputs()[0].to_f64_vec();
    assert!(
        out.len() == 6 && out.iter().all(|v| (2.0..3.0).contains(v)),
        "{out:?}"
    );

    // Nothing determines it: a dimension of size 0.
    let alone = zeros("(0, 3)").infer_shape(&HashMap::new()).unwrap();
    assert_eq!(alone.output_shapes, [Some(Shape::new([0, 3]))]);

    let clash = Symbol::invoke("elemwise_add", &[&zeros("(0, 4)"), &x], &Attrs::new()).unwrap();
    let err = clash.infer_shape(&known).unwrap_err().to_string();
    assert!(
        err.contains("(0, 4) (unknown dimensions are 0) conflicts with (2, 3)"),
        "{err}"
    );
    let rank = Symbol::invoke("elemwise_add", &[&zeros("(0,)"), &x], &Attrs::new()).unwrap();
    assert!(rank.infer_shape(&known).is_err());
}
