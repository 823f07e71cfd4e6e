//! Hostile-input probes of ops with several outputs, kwargs-dependent
//! arguments, aux states and training mode: JSON, binding, eager calls,
//! the new ops, and the executor. Every call must return `Ok` or `Err`,
//! never panic or hang.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use simpleop::gradcheck::GradCheck;
use simpleop::params::LoadOptions;
use simpleop::symbol::{GradReq, Symbol};
use simpleop::{Attrs, DType, EnvArguments, NDArray, OpDef, OpReqType, Shape, eager};

fn link() {
    simpleop_ops::link();
}

fn op_env(name: &str, attrs: &Attrs) -> (&'static OpDef, EnvArguments) {
    link();
    let e = eager::lookup(name).unwrap();
    (e.def, (e.def.parse)(e.def, attrs).unwrap())
}

/// Runs `f` on a thread; a panic is re-raised, and not finishing within
/// `secs` fails as a hang.
fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::panic::catch_unwind(AssertUnwindSafe(f)));
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(Ok(v)) => v,
        Ok(Err(p)) => std::panic::resume_unwind(p),
        Err(_) => panic!("hang: did not finish within {secs} s"),
    }
}

fn f32s(v: &[f32], shape: &[usize]) -> NDArray {
    NDArray::from_vec(v.to_vec(), Shape::new(shape.to_vec())).unwrap()
}

fn bn_symbol(attrs: &Attrs) -> Symbol {
    link();
    let v = |n: &str| Symbol::var(n);
    Symbol::invoke_named(
        "BatchNorm",
        &[&v("x"), &v("g"), &v("b"), &v("mm"), &v("mv")],
        attrs,
        Some("bn"),
    )
    .unwrap()
}

fn json_of(s: &Symbol) -> serde_json::Value {
    serde_json::from_str(&s.to_json()).unwrap()
}

// ---------------------------------------------------------------- JSON

#[test]
fn json_aux_misuse_is_an_error() {
    let bn = bn_symbol(&Attrs::new());
    let doc = json_of(&bn);
    // nodes: x g b mm mv bn; feed mv's slot from relu(x) (an op output).
    let mut d = doc.clone();
    let nodes = d["nodes"].as_array_mut().unwrap();
    let bn_node = nodes.pop().unwrap();
    nodes.push(serde_json::json!({"op": "relu", "name": "r", "inputs": [[0, 0, 0]]}));
    let mut bn_node = bn_node;
    bn_node["inputs"][4] = serde_json::json!([5, 0, 0]);
    nodes.push(bn_node);
    d["heads"] = serde_json::json!([[6, 0, 0]]);
    let err = Symbol::from_json(&d.to_string()).unwrap_err().to_string();
    assert!(err.contains("aux"), "{err}");
    // The same variable as an argument and an aux state; in both aux slots.
    for (slot, src) in [(4usize, 1usize), (4, 3), (3, 0)] {
        let mut d = doc.clone();
        d["nodes"][5]["inputs"][slot] = serde_json::json!([src, 0, 0]);
        assert!(
            Symbol::from_json(&d.to_string()).is_err(),
            "slot {slot} <- {src}"
        );
    }
    // A hidden output of one BatchNorm as the aux state of another.
    let mut d = doc.clone();
    let nodes = d["nodes"].as_array_mut().unwrap();
    nodes.push(serde_json::json!({"op": "BatchNorm", "name": "bn2",
        "inputs": [[5, 0, 0], [1, 0, 0], [2, 0, 0], [5, 1, 0], [5, 2, 0]]}));
    d["heads"] = serde_json::json!([[6, 0, 0]]);
    assert!(Symbol::from_json(&d.to_string()).is_err());
    // Fewer or more inputs than 5.
    for n in [0usize, 3, 4, 6] {
        let mut d = doc.clone();
        let inputs: Vec<_> = (0..n).map(|i| serde_json::json!([i % 5, 0, 0])).collect();
        d["nodes"][5]["inputs"] = serde_json::json!(inputs);
        assert!(Symbol::from_json(&d.to_string()).is_err(), "{n} inputs");
    }
}

#[test]
fn json_count_attributes_out_of_range_are_errors() {
    link();
    let x = Symbol::var("x");
    let s = Symbol::invoke_named(
        "split",
        &[&x],
        &Attrs::new().with("num_outputs", 2),
        Some("sp"),
    )
    .unwrap();
    let doc = json_of(&s);
    for n in [
        "1000000000000000000",
        "18446744073709551615",
        "0",
        "-1",
        "1e18",
        "nan",
        "",
    ] {
        let mut d = doc.clone();
        d["nodes"][1]["attrs"]["num_outputs"] = serde_json::json!(n);
        d["heads"] = serde_json::json!([[1, 0, 0]]);
        let shapes = HashMap::from([("x".to_string(), Shape::new([2, 4]))]);
        let r = within(20, move || {
            Symbol::from_json(&d.to_string()).and_then(|s| s.infer_shape(&shapes).map(|_| ()))
        });
        assert!(r.is_err(), "num_outputs = {n:?}");
    }
    let c = Symbol::invoke_named(
        "Concat",
        &[&Symbol::var("a"), &Symbol::var("b")],
        &Attrs::new().with("num_args", 2).with("dim", 0),
        Some("cc"),
    )
    .unwrap();
    let doc = json_of(&c);
    for n in ["1000000000000000000", "0", "-1", "1", "3", "65537"] {
        let mut d = doc.clone();
        d["nodes"][2]["attrs"]["num_args"] = serde_json::json!(n);
        let shapes = HashMap::from([
            ("a".to_string(), Shape::new([2])),
            ("b".to_string(), Shape::new([2])),
        ]);
        let r = within(20, move || {
            Symbol::from_json(&d.to_string()).and_then(|s| s.infer_shape(&shapes).map(|_| ()))
        });
        assert!(r.is_err(), "num_args = {n:?}");
    }
    // num_args = 0 with no inputs at all.
    let mut d = doc.clone();
    d["nodes"] = serde_json::json!([{"op": "Concat", "name": "cc", "attrs": {"num_args": "0"}, "inputs": []}]);
    d["arg_nodes"] = serde_json::json!([]);
    d["heads"] = serde_json::json!([[0, 0, 0]]);
    let r = Symbol::from_json(&d.to_string()).and_then(|s| {
        s.simple_bind(&HashMap::new(), &HashMap::new(), HashMap::new())
            .map(|_| ())
    });
    assert!(r.is_err());
}

/// Hangs: list_outputs calls op.output_names (all 65536 names) once per head
/// (simpleop/src/symbol/api.rs:196): quadratic; num_outputs = 1e18 is
/// accepted by Symbol::invoke and clamped to 65536 outputs.
#[test]
fn list_outputs_of_a_wide_split_is_not_quadratic() {
    link();
    let x = Symbol::var("x");
    let attrs = Attrs::new().with("num_outputs", "1000000000000000000");
    let s = Symbol::invoke("split", &[&x], &attrs).unwrap();
    assert_eq!(s.num_outputs(), 65536);
    let n = within(20, move || s.list_outputs().len());
    assert_eq!(n, 65536);
}

/// Hangs: Executor::output(name) builds every output name per head the same
/// way (simpleop/src/symbol/executor/accessors.rs:326).
#[test]
fn executor_output_by_name_of_a_wide_split_is_not_quadratic() {
    link();
    let x = Symbol::var("x");
    let s = Symbol::invoke_named(
        "split",
        &[&x],
        &Attrs::new().with("num_outputs", 65536).with("axis", 0),
        Some("sp"),
    )
    .unwrap();
    let shapes = HashMap::from([("x".to_string(), Shape::new([65536]))]);
    let exe = s
        .simple_bind(&shapes, &HashMap::new(), HashMap::new())
        .unwrap();
    let found = within(20, move || exe.output("sp_output65535").is_some());
    assert!(found);
}

/// Graph::check_unique_arguments (simpleop/src/symbol/graph.rs:145) runs
/// `self.aux.contains(&src)` for every argument input: O(inputs x aux
/// states). from_json of 2.5k/20k/40k stacked BatchNorms took
/// 75 ms / 1.0 s / 3.5 s; a 100k stack takes far longer than the 5 s
/// deep_graphs.rs allows a 50k chain.
#[test]
fn a_deep_batch_norm_stack_infers_in_linear_time() {
    link();
    let n = 100_000;
    let mut s = Symbol::var("x");
    for i in 0..n {
        let v = |k: &str| Symbol::var(&format!("{k}{i}"));
        s = Symbol::invoke(
            "BatchNorm",
            &[&s, &v("g"), &v("b"), &v("mm"), &v("mv")],
            &Attrs::new(),
        )
        .unwrap();
    }
    let known = HashMap::from([("x".to_string(), Shape::new([2, 3]))]);
    let took = within(120, move || {
        let t = Instant::now();
        let shapes = s.infer_shape(&known).unwrap();
        assert_eq!(shapes.aux.len(), 2 * n);
        t.elapsed()
    });
    assert!(took < Duration::from_secs(5), "{n} BatchNorms: {took:?}");
}

// ------------------------------------------------------------- binding

fn bn_args(c: usize, mm: NDArray, mv: NDArray) -> HashMap<String, NDArray> {
    HashMap::from([
        ("x".to_string(), NDArray::ones([2, c], DType::F32)),
        ("g".to_string(), NDArray::ones([c], DType::F32)),
        ("b".to_string(), NDArray::zeros([c], DType::F32)),
        ("mm".to_string(), mm),
        ("mv".to_string(), mv),
    ])
}

#[test]
fn binding_aux_states_of_the_wrong_shape_or_dtype_is_an_error() {
    let bn = bn_symbol(&Attrs::new());
    for (mm, mv) in [
        (
            NDArray::zeros([4], DType::F32),
            NDArray::ones([3], DType::F32),
        ),
        (
            NDArray::zeros([3, 1], DType::F32),
            NDArray::ones([3], DType::F32),
        ),
        (
            NDArray::zeros([], DType::F32),
            NDArray::ones([3], DType::F32),
        ),
        (
            NDArray::zeros([3], DType::F64),
            NDArray::ones([3], DType::F32),
        ),
        (
            NDArray::zeros([3], DType::I32),
            NDArray::ones([3], DType::F32),
        ),
    ] {
        let what = format!("{} {}", mm.shape(), mm.dtype());
        let r = bn.bind(bn_args(3, mm, mv), HashMap::new(), HashMap::new());
        let r = r.and_then(|mut e| {
            e.forward(true)?;
            e.forward(false)
        });
        assert!(r.is_err(), "mm {what}");
    }
    // Missing, and passed as gradients / grad_req.
    let mut args = bn_args(
        3,
        NDArray::zeros([3], DType::F32),
        NDArray::ones([3], DType::F32),
    );
    args.remove("mv");
    assert!(bn.bind(args, HashMap::new(), HashMap::new()).is_err());
    let args = || {
        bn_args(
            3,
            NDArray::zeros([3], DType::F32),
            NDArray::ones([3], DType::F32),
        )
    };
    let grads = HashMap::from([("mm".to_string(), NDArray::zeros([3], DType::F32))]);
    assert!(bn.bind(args(), grads, HashMap::new()).is_err());
    let reqs = HashMap::from([("mv".to_string(), GradReq::Write)]);
    assert!(bn.bind(args(), HashMap::new(), reqs).is_err());
    let reqs = HashMap::from([("mv".to_string(), GradReq::Null)]);
    assert!(bn.bind(args(), HashMap::new(), reqs).is_err());
}

#[test]
fn set_aux_and_load_params_check_names_and_shapes() {
    let bn = bn_symbol(&Attrs::new());
    let args = bn_args(
        3,
        NDArray::zeros([3], DType::F32),
        NDArray::ones([3], DType::F32),
    );
    let mut exe = bn.bind(args, HashMap::new(), HashMap::new()).unwrap();
    assert!(exe.set_aux("mm", &NDArray::zeros([4], DType::F32)).is_err());
    assert!(exe.set_aux("mm", &NDArray::zeros([3], DType::F16)).is_err());
    assert!(exe.set_aux("g", &NDArray::zeros([3], DType::F32)).is_err());
    assert!(exe.set_arg("mm", &NDArray::zeros([3], DType::F32)).is_err());
    let opts = LoadOptions {
        allow_missing: true,
        ..Default::default()
    };
    let z = NDArray::zeros([3], DType::F32);
    // An argument under aux:, an aux state of the wrong shape.
    assert!(exe.load_params(&[("aux:g", z.clone())], &opts).is_err());
    assert!(
        exe.load_params(&[("aux:mm", NDArray::zeros([2], DType::F32))], &opts)
            .is_err()
    );
    // The executor updates its own copy of a set aux state, not the caller's.
    let mine = NDArray::zeros([3], DType::F32);
    exe.set_aux("mm", &mine).unwrap();
    exe.forward(true).unwrap();
    assert_eq!(mine.to_vec::<f32>().unwrap(), [0.0; 3]);
    assert_ne!(exe.aux("mm").unwrap().to_vec::<f32>().unwrap(), [0.0; 3]);
    assert!(!exe.to_dot().is_empty() && !bn.to_dot().is_empty());
    // `arg:` names an argument only, as in MXNet.
    assert!(exe.load_params(&[("arg:mm", z.clone())], &opts).is_err());
    // Given twice, once as arg: and once as aux:.
    assert!(
        exe.load_params(&[("arg:mm", z.clone()), ("aux:mm", z.clone())], &opts)
            .is_err()
    );
}

// --------------------------------------------------------------- eager

fn bn_eager(
    x: &NDArray,
    aux: &mut [&mut NDArray],
    attrs: &Attrs,
) -> simpleop::Result<Vec<NDArray>> {
    link();
    let c = x.shape().dims().get(1).copied().unwrap_or(1);
    let g = NDArray::ones([c], x.dtype());
    let b = NDArray::zeros([c], x.dtype());
    eager::invoke_outputs_by_name("BatchNorm", &[x, &g, &b], aux, attrs)
}

#[test]
fn eager_aux_states_of_the_wrong_count_shape_or_dtype_are_errors() {
    link();
    let x = NDArray::ones([2, 3], DType::F32);
    let a = Attrs::new();
    let mut m = NDArray::zeros([3], DType::F32);
    let mut v = NDArray::ones([3], DType::F32);
    assert!(bn_eager(&x, &mut [], &a).is_err());
    assert!(bn_eager(&x, &mut [&mut m], &a).is_err());
    let mut w = NDArray::ones([3], DType::F32);
    assert!(bn_eager(&x, &mut [&mut m, &mut v, &mut w], &a).is_err());
    for bad in [
        NDArray::zeros([4], DType::F32),
        NDArray::zeros([], DType::F32),
        NDArray::zeros([3], DType::F64),
        NDArray::zeros([3], DType::U8),
    ] {
        let mut bad = bad;
        for train in [false, true] {
            let _g = eager::TrainingGuard::new(train);
            let r = bn_eager(&x, &mut [&mut m, &mut bad], &a);
            assert!(
                r.is_err(),
                "mv {} {} train={train}",
                bad.shape(),
                bad.dtype()
            );
        }
    }
    // Aux states among the inputs instead.
    let g = NDArray::ones([3], DType::F32);
    let r = eager::invoke_outputs_by_name("BatchNorm", &[&x, &g, &g, &m, &v], &mut [], &a);
    assert!(r.is_err());
    // An aux state sharing storage with an input is copied before the update.
    let mut shared = g.clone();
    let mut v2 = NDArray::ones([3], DType::F32);
    let xs = f32s(&[1.0, 2.0, 3.0, 5.0, 6.0, 7.0], &[2, 3]);
    eager::train_mode(|| {
        eager::invoke_outputs_by_name(
            "BatchNorm",
            &[&xs, &g, &NDArray::zeros([3], DType::F32)],
            &mut [&mut shared, &mut v2],
            &a,
        )
    })
    .unwrap();
    assert_eq!(g.to_vec::<f32>().unwrap(), [1.0, 1.0, 1.0]);
    assert_ne!(shared.to_vec::<f32>().unwrap(), [1.0, 1.0, 1.0]);
}

/// Ops that show several outputs or have aux states (Dropout and topk's
/// `value` hide theirs, and `eager::invoke` runs them: `multi_output.rs`).
#[test]
fn single_output_entry_points_refuse_ops_with_several_outputs() {
    link();
    let x = NDArray::ones([2, 4], DType::F32);
    let g = NDArray::ones([4], DType::F32);
    for (name, attrs, inputs) in [
        ("split", Attrs::new().with("num_outputs", 2), vec![&x]),
        ("topk", Attrs::new().with("ret_typ", "both"), vec![&x]),
        (
            "BatchNorm",
            Attrs::new().with("axis", 1),
            vec![&x, &g, &g, &g, &g],
        ),
    ] {
        assert!(eager::invoke(name, &inputs, &attrs).is_err(), "{name}");
        let mut out = NDArray::zeros([2, 4], DType::F32);
        assert!(
            eager::invoke_into_by_name(name, &inputs, &attrs, &mut out, OpReqType::WriteTo)
                .is_err(),
            "{name}"
        );
        let (op, env) = op_env(name, &attrs);
        let dy = NDArray::ones([2, 4], DType::F32);
        let mut grads: Vec<NDArray> = inputs.iter().map(|a| (*a).clone()).collect();
        let reqs = vec![OpReqType::WriteTo; inputs.len()];
        let r = eager::invoke_backward(op, &env, &dy, Some(&dy), &inputs, &mut grads, &reqs);
        assert!(r.is_err(), "{name}");
    }
}

/// Wrong message: two gradient buffers for three arguments gives "expected 3
/// input(s), got 3" (`got: inputs.len()`, simpleop/src/eager/outputs.rs:211).
#[test]
fn backward_outputs_arity_error_names_the_wrong_count() {
    let (op, env) = op_env("BatchNorm", &Attrs::new());
    let x = NDArray::ones([2, 3], DType::F32);
    let c = NDArray::ones([3], DType::F32);
    let dy = NDArray::ones([2, 3], DType::F32);
    let mut grads = vec![x.clone(), c.clone()];
    let err = eager::invoke_backward_outputs(
        op,
        &env,
        &[Some(&dy), None, None],
        &[&dy, &c, &c],
        &[&x, &c, &c],
        &mut grads,
        &[OpReqType::WriteTo; 3],
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("got 2"), "{err}");
}

fn backward_outputs(
    name: &str,
    attrs: &Attrs,
    out_grads: &[Option<&NDArray>],
    outputs: &[&NDArray],
    inputs: &[&NDArray],
    grads: &mut [NDArray],
) -> simpleop::Result<()> {
    let (op, env) = op_env(name, attrs);
    let reqs = vec![OpReqType::WriteTo; grads.len()];
    eager::invoke_backward_outputs(op, &env, out_grads, outputs, inputs, grads, &reqs)
}

// invoke_backward_outputs checks no shapes (unlike invoke_backward, which
// checks out_grad, output and every gradient against inference); the new
// backward kernels index by the gradients' or the inputs' shapes and panic.

/// Panics: range end index 2 out of range for slice of length 1 (ops/src/join.rs:46, Block::join).
#[test]
fn backward_outputs_split_with_a_short_out_grad_is_an_error() {
    let x = NDArray::ones([2, 4], DType::F32);
    let short = NDArray::ones([1], DType::F32);
    let ok = NDArray::ones([2, 2], DType::F32);
    let mut grads = vec![NDArray::zeros([2, 4], DType::F32)];
    let attrs = Attrs::new().with("num_outputs", 2).with("axis", 1);
    let r = backward_outputs(
        "split",
        &attrs,
        &[Some(&ok), Some(&short)],
        &[],
        &[&x],
        &mut grads,
    );
    assert!(r.is_err());
}

/// Panics: range end index 4 out of range for slice of length 3 (ops/src/join.rs:54, Block::part).
#[test]
fn backward_outputs_concat_with_a_short_out_grad_is_an_error() {
    let a = NDArray::ones([2, 2], DType::F32);
    let short = NDArray::ones([3], DType::F32);
    let mut grads = vec![
        NDArray::zeros([2, 2], DType::F32),
        NDArray::zeros([2, 2], DType::F32),
    ];
    let attrs = Attrs::new().with("num_args", 2).with("dim", 0);
    let r = backward_outputs(
        "Concat",
        &attrs,
        &[Some(&short)],
        &[],
        &[&a, &a],
        &mut grads,
    );
    assert!(r.is_err());
}

/// Panics: range end index 4 out of range for slice of length 2 (ops/src/join.rs:54, Block::part).
#[test]
fn backward_outputs_add_n_with_short_gradients_is_an_error() {
    let a = NDArray::ones([4], DType::F32);
    let dy = NDArray::ones([4], DType::F32);
    let mut grads = vec![
        NDArray::zeros([4], DType::F32),
        NDArray::zeros([2], DType::F32),
    ];
    let attrs = Attrs::new().with("num_args", 2);
    let r = backward_outputs("add_n", &attrs, &[Some(&dy)], &[], &[&a, &a], &mut grads);
    assert!(r.is_err());
}

/// Wrong result: stack's gradient cuts dy by dy's own shape: a (2,) dy for
/// two (3,) inputs returns Ok with gradients [1, 7, 7] (7 = stale).
#[test]
fn backward_outputs_stack_with_a_short_out_grad_is_an_error() {
    let a = NDArray::ones([3], DType::F32);
    let short = NDArray::ones([2], DType::F32);
    let mut grads = vec![
        NDArray::full([3], 7.0, DType::F32),
        NDArray::full([3], 7.0, DType::F32),
    ];
    let attrs = Attrs::new().with("num_args", 2);
    let r = backward_outputs("stack", &attrs, &[Some(&short)], &[], &[&a, &a], &mut grads);
    assert!(
        r.is_err(),
        "Ok, gradients {:?} {:?}",
        grads[0].to_f64_vec(),
        grads[1].to_f64_vec()
    );
}

/// Panics: index out of bounds at ops/src/batch_norm.rs:331 (dy), 329 (mean), 340 (gamma), 349 (dx).
#[test]
fn backward_outputs_batch_norm_with_short_arrays_is_an_error() {
    let x = NDArray::ones([2, 3], DType::F32);
    let c = NDArray::ones([3], DType::F32);
    let short_c = NDArray::ones([1], DType::F32);
    let short_x = NDArray::ones([2], DType::F32);
    let attrs = Attrs::new().with("fix_gamma", "False");
    // (what is short, out_grads, outputs, inputs, which gradient is short)
    type Case<'a> = (
        &'a str,
        [&'a NDArray; 3],
        [&'a NDArray; 3],
        [&'a NDArray; 3],
        usize,
    );
    let cases: Vec<Case<'_>> = vec![
        ("dy", [&short_x, &c, &c], [&x, &c, &c], [&x, &c, &c], 2),
        ("mean", [&x, &c, &c], [&x, &short_c, &c], [&x, &c, &c], 2),
        ("gamma", [&x, &c, &c], [&x, &c, &c], [&x, &short_c, &c], 2),
        ("dx", [&x, &c, &c], [&x, &c, &c], [&x, &c, &c], 0),
    ];
    let mut failures = Vec::new();
    for (what, dys, ys, xs, short_grad) in cases {
        let mut grads = vec![x.clone(), c.clone(), c.clone()];
        if short_grad == 0 {
            grads[0] = NDArray::zeros([1], DType::F32);
        }
        let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
            backward_outputs(
                "BatchNorm",
                &attrs,
                &[Some(dys[0]), Some(dys[1]), Some(dys[2])],
                &ys,
                &xs,
                &mut grads,
            )
        }));
        match r {
            Ok(Ok(())) => failures.push(format!("short {what}: Ok")),
            Ok(Err(_)) => {}
            Err(p) => failures.push(format!(
                "short {what}: panicked: {}",
                p.downcast_ref::<String>().cloned().unwrap_or_default()
            )),
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Panics: index out of bounds: the len is 4 but the index is 1000000000 (ops/src/ordering.rs:518).
#[test]
fn backward_outputs_topk_with_indices_out_of_range_is_an_error() {
    let x = f32s(&[3.0, 1.0, 2.0, 0.0], &[4]);
    let attrs = Attrs::new().with("ret_typ", "value").with("k", 2);
    let dy = NDArray::ones([2], DType::F32);
    let vals = f32s(&[3.0, 2.0], &[2]);
    let bad_ix = f32s(&[0.0, 1e9], &[2]);
    let mut grads = vec![NDArray::zeros([4], DType::F32)];
    let r = backward_outputs(
        "topk",
        &attrs,
        &[Some(&dy), None],
        &[&vals, &bad_ix],
        &[&x],
        &mut grads,
    );
    assert!(r.is_err());
}

/// Panics: index out of bounds: the len is 4 but the index is 7 (ops/src/ordering.rs:518).
#[test]
fn backward_outputs_topk_with_a_long_out_grad_is_an_error() {
    let x = f32s(&[3.0, 1.0, 2.0, 0.0], &[4]);
    let attrs = Attrs::new().with("ret_typ", "value").with("k", 2);
    let long = NDArray::ones([8], DType::F32);
    let vals = f32s(&[3.0, 2.0], &[2]);
    let ix = f32s(&[0.0, 2.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0], &[8]);
    let mut grads = vec![NDArray::zeros([4], DType::F32)];
    let r = backward_outputs(
        "topk",
        &attrs,
        &[Some(&long), None],
        &[&vals, &ix],
        &[&x],
        &mut grads,
    );
    assert!(r.is_err());
}

/// Wrong result: topk's value gradient reads the indices output; without it
/// (outputs = []) it returns Ok with a zero gradient (ops/src/ordering.rs:512).
#[test]
fn backward_outputs_topk_without_its_outputs_is_an_error() {
    let x = f32s(&[3.0, 1.0, 2.0, 0.0], &[4]);
    let attrs = Attrs::new().with("ret_typ", "value").with("k", 2);
    let dy = NDArray::ones([2], DType::F32);
    let mut grads = vec![NDArray::full([4], 7.0, DType::F32)];
    let r = backward_outputs("topk", &attrs, &[Some(&dy), None], &[], &[&x], &mut grads);
    assert!(
        r.is_err(),
        "Ok, gradient {:?}",
        grads[0].to_vec::<f32>().unwrap()
    );
}

/// Wrong result: Dropout's gradient zips dy, mask and dx (ops/src/batch_norm.rs:539):
/// a (2,) dy for (4,) data returns Ok with dx = [2, 2, 7, 7] (7 = stale).
#[test]
fn backward_outputs_dropout_with_mismatched_shapes_is_an_error() {
    let x = NDArray::ones([4], DType::F32);
    let mask = NDArray::full([4], 2.0, DType::F32);
    let short = NDArray::ones([2], DType::F32);
    let mut grads = vec![NDArray::full([4], 7.0, DType::F32)];
    let r = backward_outputs(
        "Dropout",
        &Attrs::new(),
        &[Some(&short), None],
        &[&x, &mask],
        &[&x],
        &mut grads,
    );
    assert!(
        r.is_err(),
        "Ok, gradient {:?}",
        grads[0].to_vec::<f32>().unwrap()
    );
}

// ----------------------------------------------------------------- ops

/// Wrong result: a training step on an empty batch (N = 0) divides by zero
/// (ops/src/batch_norm.rs:251-254) and returns Ok with NaN moving statistics.
#[test]
fn batch_norm_on_an_empty_batch_does_not_poison_the_moving_statistics() {
    link();
    let x = NDArray::zeros([0, 3], DType::F32);
    let mut m = NDArray::zeros([3], DType::F32);
    let mut v = NDArray::ones([3], DType::F32);
    let r = eager::train_mode(|| bn_eager(&x, &mut [&mut m, &mut v], &Attrs::new()));
    if r.is_ok() {
        let (mm, mv) = (m.to_vec::<f32>().unwrap(), v.to_vec::<f32>().unwrap());
        assert!(
            mm.iter().chain(&mv).all(|x| x.is_finite()),
            "Ok, moving_mean {mm:?}, moving_var {mv:?}"
        );
    }
}

// Zero-element arrays with huge nominal dimensions (as tests/huge_shapes.rs
// expects of every op): the outer loops run once per outer index.

const BIG: usize = 1 << 40;

/// Hangs: Block::part loops 2^40 times over empty blocks (ops/src/join.rs:52).
#[test]
fn split_of_an_empty_array_with_a_huge_outer_size_finishes() {
    link();
    let r = within(10, || {
        let x = NDArray::zeros([BIG, 2, 0], DType::F32);
        let a = Attrs::new().with("num_outputs", 2).with("axis", 1);
        eager::invoke_outputs_by_name("split", &[&x], &mut [], &a).map(|y| y.len())
    });
    assert_eq!(r.unwrap(), 2);
}

/// Hangs: Block::join loops 2^40 times over empty blocks (ops/src/join.rs:44).
#[test]
fn concat_of_empty_arrays_with_a_huge_outer_size_finishes() {
    link();
    let r = within(10, || {
        let x = NDArray::zeros([BIG, 1, 0], DType::F32);
        let a = Attrs::new().with("num_args", 2).with("dim", 1);
        eager::invoke("Concat", &[&x, &x], &a).map(|y| y.shape().clone())
    });
    assert_eq!(r.unwrap().dims(), [BIG, 2, 0]);
}

/// Hangs: Block::join loops 2^40 times over empty blocks (ops/src/join.rs:44).
#[test]
fn stack_of_empty_arrays_with_a_huge_outer_size_finishes() {
    link();
    let r = within(10, || {
        let x = NDArray::zeros([BIG, 0], DType::F32);
        let a = Attrs::new().with("num_args", 2).with("axis", 1);
        eager::invoke("stack", &[&x, &x], &a).map(|y| y.shape().clone())
    });
    assert_eq!(r.unwrap().dims(), [BIG, 2, 0]);
}

/// Hangs: Channels::each loops 2^40 times per channel (ops/src/batch_norm.rs:95).
#[test]
fn batch_norm_of_an_empty_array_with_a_huge_outer_size_finishes() {
    link();
    let r = within(10, || {
        let x = NDArray::zeros([BIG, 2, 0], DType::F32);
        let (mut m, mut v) = (
            NDArray::zeros([2], DType::F32),
            NDArray::ones([2], DType::F32),
        );
        bn_eager(&x, &mut [&mut m, &mut v], &Attrs::new()).map(|y| y.len())
    });
    assert!(r.is_ok() || r.is_err());
}

/// Panics: attempt to multiply with overflow (the mask draw count, ops/src/batch_norm.rs:495).
#[test]
fn dropout_of_an_empty_array_with_huge_dimensions_does_not_overflow() {
    link();
    let r = within(10, || {
        let x = NDArray::zeros([BIG, BIG, 0], DType::F32);
        eager::train_mode(|| {
            eager::invoke_outputs_by_name("Dropout", &[&x], &mut [], &Attrs::new())
        })
        .map(|y| y.len())
    });
    assert_eq!(r.unwrap(), 2);
}

/// Hangs: for_each_sorted visits 2^40 empty lanes (ops/src/ordering.rs:113).
#[test]
fn topk_of_an_empty_array_with_a_huge_outer_size_finishes() {
    link();
    let r = within(10, || {
        let x = NDArray::zeros([BIG, 0], DType::F32);
        let a = Attrs::new().with("k", 0).with("ret_typ", "value");
        eager::invoke_outputs_by_name("topk", &[&x], &mut [], &a).map(|y| y.len())
    });
    assert!(r.is_ok() || r.is_err());
}

// ------------------------------------------------------------ executor

#[test]
fn heads_on_hidden_outputs_and_aux_states_train_without_panics() {
    let bn = bn_symbol(&Attrs::new().with("fix_gamma", "False"));
    let mut doc = json_of(&bn);
    // Heads: the hidden mean and var, and the aux variable mm.
    doc["heads"] = serde_json::json!([[5, 1, 0], [5, 2, 0], [3, 0, 0], [5, 0, 0]]);
    let s = Symbol::from_json(&doc.to_string()).unwrap();
    assert_eq!(s.list_outputs(), ["bn_mean", "bn_var", "mm", "bn_output"]);
    let xs = f32s(&[1.0, 2.0, 3.0, 5.0, 6.0, 7.0], &[2, 3]);
    let mut args = bn_args(
        3,
        NDArray::zeros([3], DType::F32),
        NDArray::ones([3], DType::F32),
    );
    args.insert("x".into(), xs);
    let grads = HashMap::from([
        ("x".to_string(), NDArray::zeros([2, 3], DType::F32)),
        ("g".to_string(), NDArray::zeros([3], DType::F32)),
    ]);
    let reqs = HashMap::from([
        ("x".to_string(), GradReq::Write),
        ("g".to_string(), GradReq::Add),
    ]);
    let mut exe = s.bind(args, grads, reqs).unwrap();
    assert!(exe.backward(&[]).is_err());
    exe.forward(false).unwrap();
    assert!(exe.backward(&[]).is_err());
    for _ in 0..2 {
        exe.forward(true).unwrap();
        // The aux head shows the updated moving mean.
        let mm = exe.outputs()[2].to_vec::<f32>().unwrap();
        assert_eq!(mm, exe.aux("mm").unwrap().to_vec::<f32>().unwrap());
        exe.backward(&[]).unwrap();
        let heads: Vec<NDArray> = exe
            .outputs()
            .iter()
            .map(|o| NDArray::ones(o.shape().clone(), o.dtype()))
            .collect();
        exe.backward(&heads).unwrap();
        assert!(exe.backward(&heads[..3]).is_err());
        let mut wrong = heads.clone();
        wrong[2] = NDArray::ones([4], DType::F32);
        assert!(exe.backward(&wrong).is_err());
    }
    // Dropout with only its mask as the head.
    link();
    let d =
        Symbol::invoke_named("Dropout", &[&Symbol::var("x")], &Attrs::new(), Some("d")).unwrap();
    let mut doc = json_of(&d);
    doc["heads"] = serde_json::json!([[1, 1, 0]]);
    let s = Symbol::from_json(&doc.to_string()).unwrap();
    let args = HashMap::from([("x".to_string(), NDArray::ones([8], DType::F32))]);
    let grads = HashMap::from([("x".to_string(), NDArray::zeros([8], DType::F32))]);
    let reqs = HashMap::from([("x".to_string(), GradReq::Write)]);
    let mut exe = s.bind(args, grads, reqs).unwrap();
    exe.forward(false).unwrap();
    exe.forward(true).unwrap();
    exe.backward(&[]).unwrap();
}

/// BatchNorm's training forward updates its moving statistics; a later
/// node then fails on an attribute only its kernel checks (Dropout's p = 2
/// is accepted by Symbol::invoke and bind). forward returns Err, but the
/// aux states have already moved: a partial write.
#[test]
fn a_failed_training_forward_leaves_the_aux_states_alone() {
    let bn = bn_symbol(&Attrs::new());
    let d = Symbol::invoke("Dropout", &[&bn], &Attrs::new().with("p", 2)).unwrap();
    let args = bn_args(
        3,
        NDArray::zeros([3], DType::F32),
        NDArray::ones([3], DType::F32),
    );
    if let Ok(mut exe) = d.bind(args, HashMap::new(), HashMap::new()) {
        assert!(exe.forward(true).is_err());
        let mm = exe.aux("mm").unwrap().to_vec::<f32>().unwrap();
        assert_eq!(mm, [0.0; 3], "moving_mean changed by a failed forward");
    }
}

// ---------------------------------------------------------- gradcheck

/// Panics: attempt to add with overflow, `self.seed + 50 + i` (simpleop/src/gradcheck/general.rs:51).
#[test]
fn gradcheck_of_batch_norm_with_a_large_seed() {
    link();
    let r = GradCheck::new("BatchNorm")
        .shapes(&[&[2, 3], &[3], &[3]])
        .dtypes(&[DType::F64])
        .seed(u64::MAX - 10)
        .heads(&[0])
        .run();
    assert!(r.is_ok() || r.is_err());
}

#[test]
fn leaky_relu_refuses_bad_gamma_bounds_and_arity() {
    link();
    let x = f32s(&[1.0, -2.0, 3.0, -4.0, 5.0, -6.0], &[2, 3]);
    let prelu = Attrs::new().with("act_type", "prelu");
    let call = |inputs: &[&NDArray], attrs: &Attrs| {
        eager::invoke_outputs_by_name("LeakyReLU", inputs, &mut [], attrs)
            .unwrap_err()
            .to_string()
    };
    let err = call(&[&x, &f32s(&[0.1, 0.2], &[2])], &prelu);
    assert!(err.contains("gamma") && err.contains("(3,)"), "{err}");
    let err = call(&[&x, &f32s(&[0.1; 3], &[1, 3])], &prelu);
    assert!(err.contains("gamma"), "{err}");
    let err = call(&[&x], &prelu);
    assert!(err.contains("LeakyReLU"), "{err}");
    let g64 = NDArray::from_vec(vec![0.1f64; 3], [3]).unwrap();
    let err = call(&[&x, &g64], &prelu);
    assert!(err.contains("gamma"), "{err}");
    let bounds = Attrs::new()
        .with("act_type", "rrelu")
        .with("lower_bound", 0.5)
        .with("upper_bound", 0.1);
    let err = call(&[&x], &bounds);
    assert!(err.contains("lower_bound"), "{err}");
    let nan = Attrs::new()
        .with("act_type", "rrelu")
        .with("upper_bound", "nan");
    assert!(call(&[&x], &nan).contains("lower_bound"));
    let err = eager::invoke("_LeakyReLU_simple", &[&x], &prelu)
        .unwrap_err()
        .to_string();
    assert!(err.contains("gamma"), "{err}");
    // 1-D data: gamma cannot be inferred, and binding says which is unknown.
    let s = Symbol::invoke("LeakyReLU", &[&Symbol::var("x"), &Symbol::var("g")], &prelu).unwrap();
    let known = HashMap::from([("x".to_string(), Shape::new(vec![4]))]);
    let err = s
        .simple_bind(&known, &HashMap::new(), HashMap::new())
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("`g`"), "{err}");
}

// ---------------------------------------------------------------- RNN

fn rnn_attrs(mode: &str, h: usize) -> Attrs {
    Attrs::new()
        .with("mode", mode)
        .with("state_size", h)
        .with("num_layers", 1)
}

/// Data (3, 2, 2) with parameters, state and (lstm) state_cell of the
/// right shapes for `mode` with state_size 2, one layer.
fn rnn_inputs(mode: &str) -> Vec<NDArray> {
    let g = match mode {
        "lstm" => 4,
        "gru" => 3,
        _ => 1,
    };
    let mut v = vec![
        NDArray::ones([3, 2, 2], DType::F32),
        NDArray::ones([g * 2 * 6], DType::F32),
        NDArray::zeros([1, 2, 2], DType::F32),
    ];
    if mode == "lstm" {
        v.push(NDArray::zeros([1, 2, 2], DType::F32));
    }
    v
}

fn rnn_eager(inputs: &[NDArray], attrs: &Attrs) -> simpleop::Result<Vec<NDArray>> {
    link();
    let refs: Vec<&NDArray> = inputs.iter().collect();
    eager::invoke_outputs_by_name("RNN", &refs, &mut [], attrs)
}

fn rnn_err(inputs: &[NDArray], attrs: &Attrs) -> String {
    let a = attrs.clone();
    let inputs = inputs.to_vec();
    within(20, move || rnn_eager(&inputs, &a))
        .expect_err("expected an error")
        .to_string()
}

#[test]
fn rnn_well_formed_call_runs() {
    for mode in ["lstm", "gru", "rnn_tanh", "rnn_relu"] {
        let a = rnn_attrs(mode, 2).with("state_outputs", "True");
        let outs = rnn_eager(&rnn_inputs(mode), &a).unwrap();
        assert_eq!(outs[0].shape().dims(), [3, 2, 2], "{mode}");
    }
}

#[test]
fn rnn_bad_kwargs_are_errors_naming_them() {
    let x = rnn_inputs("lstm");
    let base = rnn_attrs("lstm", 2);
    for (key, value) in [
        ("mode", "lstmx"),
        ("state_size", "0"),
        ("num_layers", "0"),
        ("p", "1.0"),
        ("p", "-0.5"),
        ("projection_size", "2"),
        ("lstm_state_clip_min", "-1.0"),
        ("lstm_state_clip_max", "1.0"),
    ] {
        // An unknown mode has no state_cell argument.
        let args = if key == "mode" { &x[..3] } else { &x[..] };
        let e = rnn_err(args, &base.clone().with(key, value));
        assert!(e.contains("RNN") && e.contains(key), "{key}={value}: {e}");
    }
    // use_sequence_length adds an argument, and is refused by name.
    let mut with_len = x.clone();
    with_len.push(NDArray::ones([2], DType::F32));
    let e = rnn_err(&with_len, &base.clone().with("use_sequence_length", "True"));
    assert!(e.contains("use_sequence_length"), "{e}");
    // Required kwargs.
    let missing = Attrs::new().with("mode", "lstm").with("num_layers", 1);
    assert!(rnn_eager(&x, &missing).is_err());
    let e = rnn_err(&x, &base.clone().with("state_size", "abc"));
    assert!(e.contains("state_size"), "{e}");
}

#[test]
fn rnn_wrong_shapes_and_dtypes_are_errors() {
    let a = rnn_attrs("lstm", 2);
    let good = rnn_inputs("lstm");
    let with = |k: usize, v: NDArray| {
        let mut x = good.clone();
        x[k] = v;
        x
    };
    let cases = [
        (with(1, NDArray::ones([47], DType::F32)), "parameters"),
        (with(1, NDArray::ones([4, 12], DType::F32)), "parameters"),
        (with(2, NDArray::zeros([1, 3, 2], DType::F32)), "state"),
        (with(3, NDArray::zeros([2, 2, 2], DType::F32)), "state_cell"),
        (with(0, NDArray::ones([3, 2], DType::F32)), "data"),
        (with(0, NDArray::ones([3, 0, 2], DType::F32)), "data"),
        (with(0, NDArray::ones([0, 2, 2], DType::F32)), "data"),
        (with(1, NDArray::ones([48], DType::F64)), "parameters"),
        (with(0, NDArray::ones([3, 2, 2], DType::I32)), "data"),
    ];
    for (x, arg) in cases {
        let e = rnn_err(&x, &a);
        assert!(e.contains("RNN") && e.contains(arg), "{arg}: {e}");
    }
    // One input short, one too many.
    assert!(rnn_eager(&good[..3], &a).is_err());
    let mut extra = good.clone();
    extra.push(NDArray::ones([1], DType::F32));
    assert!(rnn_eager(&extra, &a).is_err());
    // A GRU has no state_cell.
    assert!(rnn_eager(&good, &rnn_attrs("gru", 2)).is_err());
}

#[test]
fn rnn_huge_sizes_are_errors_not_aborts() {
    let x = rnn_inputs("lstm");
    for h in [1usize << 31, 1 << 40, usize::MAX / 2, usize::MAX] {
        let e = rnn_err(&x, &rnn_attrs("lstm", h));
        assert!(e.contains("RNN"), "state_size {h}: {e}");
    }
    // Layer counts whose parameter total fits in usize or not: an error
    // at once, with no loop over the layers.
    for layers in [1usize << 40, usize::MAX] {
        let e = rnn_err(&x, &rnn_attrs("lstm", 2).with("num_layers", layers));
        assert!(e.contains("RNN"), "{e}");
    }
    // A vanilla RNN's state_size just past half of usize: two directions
    // overflow the layer width.
    let tanh = rnn_attrs("rnn_tanh", usize::MAX / 2 + 1)
        .with("bidirectional", "True")
        .with("num_layers", 2);
    let e = rnn_err(&x[..3], &tanh);
    assert!(e.contains("RNN"), "{e}");
    // Shape inference of a symbol with a huge state_size.
    link();
    let v = |n: &str| Symbol::var(n);
    for h in [1usize << 40, usize::MAX / 3] {
        let s = Symbol::invoke(
            "RNN",
            &[&v("data"), &v("p"), &v("s"), &v("c")],
            &rnn_attrs("lstm", h),
        )
        .unwrap();
        let known = HashMap::from([("data".to_string(), Shape::from([3, 2, 2]))]);
        let r = within(20, move || s.infer_shape(&known).map(|_| ()));
        assert!(r.is_err(), "state_size {h}");
    }
}

/// A state_size whose parameter count fits in usize but not in memory:
/// binding from the data's shape alone infers that length and refuses to
/// allocate it.
#[test]
fn rnn_binding_a_huge_state_size_is_an_error() {
    link();
    let v = |n: &str| Symbol::var(n);
    let s = Symbol::invoke(
        "RNN",
        &[&v("data"), &v("p"), &v("s"), &v("c")],
        &rnn_attrs("lstm", 1 << 24),
    )
    .unwrap();
    let shapes = HashMap::from([("data".to_string(), Shape::from([3, 2, 2]))]);
    let r = within(20, move || {
        s.simple_bind(&shapes, &HashMap::new(), HashMap::new())
            .map(|_| ())
    });
    assert!(r.is_err());
}

#[test]
fn rnn_backward_with_wrong_arrays_is_an_error() {
    let a = rnn_attrs("lstm", 2).with("state_outputs", "True");
    let x = rnn_inputs("lstm");
    let outs = rnn_eager(&x, &a).unwrap();
    let inputs: Vec<&NDArray> = x.iter().collect();
    let hidden = NDArray::zeros([0], DType::F32);
    let ys = [&outs[0], &outs[1], &outs[2], &hidden];
    let good_grads = || x.to_vec();
    // Well formed: fine.
    let dy = NDArray::ones([3, 2, 2], DType::F32);
    backward_outputs(
        "RNN",
        &a,
        &[Some(&dy), None, None, None],
        &ys,
        &inputs,
        &mut good_grads(),
    )
    .unwrap();
    // A head gradient of the wrong shape.
    let bad = NDArray::ones([3, 2], DType::F32);
    let e = backward_outputs(
        "RNN",
        &a,
        &[Some(&bad), None, None, None],
        &ys,
        &inputs,
        &mut good_grads(),
    );
    assert!(e.is_err());
    let e = backward_outputs(
        "RNN",
        &a,
        &[None, Some(&bad), None, None],
        &ys,
        &inputs,
        &mut good_grads(),
    );
    assert!(e.is_err());
    // A gradient buffer of the wrong size; too few buffers.
    let mut grads = good_grads();
    grads[1] = NDArray::zeros([5], DType::F32);
    let e = backward_outputs(
        "RNN",
        &a,
        &[Some(&dy), None, None, None],
        &ys,
        &inputs,
        &mut grads,
    );
    assert!(e.is_err());
    let mut short = good_grads();
    short.pop();
    let e = backward_outputs(
        "RNN",
        &a,
        &[Some(&dy), None, None, None],
        &ys,
        &inputs,
        &mut short,
    );
    assert!(e.is_err());
    // Too few outputs.
    let e = backward_outputs(
        "RNN",
        &a,
        &[Some(&dy), None],
        &ys[..2],
        &inputs,
        &mut good_grads(),
    );
    assert!(e.is_err());
}

/// The completion behind `check_against_data` indexes every input slot:
/// fewer shapes than the call takes must not panic.
#[test]
fn check_against_data_with_too_few_shapes_does_not_panic() {
    for (name, attrs) in [
        ("LeakyReLU", Attrs::new().with("act_type", "prelu")),
        ("BatchNorm", Attrs::new()),
        (
            "Embedding",
            Attrs::new().with("input_dim", 4).with("output_dim", 2),
        ),
    ] {
        let (op, env) = op_env(name, &attrs);
        let data = Some(Shape::new(vec![2, 3]));
        let _ = op.check_against_data(&[data], &env);
    }
}
