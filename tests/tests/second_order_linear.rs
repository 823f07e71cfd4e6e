//! Second and higher derivatives through linear ops (`OpDef::linear`:
//! `transpose`, `Reshape`, `Concat`, `SliceChannel`, `sum`, ...): the
//! gradient of `_backward/L` is `L` itself on the gradients reaching it,
//! so these ops need no gradient composition, and `_backward/…/L` chains
//! differentiate to any order. Checked against central differences,
//! closed forms and the eager tape.

use std::collections::{BTreeSet, HashMap};

use simpleop::autograd::{self, GradOptions};
use simpleop::gradcheck::GradCheck;
use simpleop::{
    Attrs, DType, Device, Error, GradArgs, NDArray, OpCall, OpDef, OpReqType, Registry, RunContext,
    Shape, Symbol, TBlob, TBlobMut, eager,
};
use simpleop_tests::assert_close;

/// One call of a linear op: name, attributes, argument shapes.
type Case = (
    &'static str,
    &'static [(&'static str, &'static str)],
    &'static [&'static [usize]],
);

/// A call of every op the standard library declares linear.
const CASES: &[Case] = &[
    ("Reshape", &[("shape", "(3, -1)")], &[&[2, 3, 2]]),
    ("Reshape", &[("shape", "(0, -3)")], &[&[2, 3, 2]]),
    ("Flatten", &[], &[&[2, 3, 2]]),
    ("expand_dims", &[("axis", "1")], &[&[2, 3]]),
    ("transpose", &[], &[&[2, 3, 2]]),
    ("transpose", &[("axes", "(1, 0, 2)")], &[&[2, 3, 2]]),
    (
        "slice_axis",
        &[("axis", "1"), ("begin", "1"), ("end", "3")],
        &[&[2, 4]],
    ),
    ("SwapAxis", &[("dim1", "0"), ("dim2", "2")], &[&[2, 3, 2]]),
    ("reverse", &[("axis", "1")], &[&[2, 3]]),
    ("broadcast_to", &[("shape", "(2, 3)")], &[&[1, 3]]),
    (
        "broadcast_axis",
        &[("axis", "0"), ("size", "2")],
        &[&[1, 3]],
    ),
    ("sum", &[("axis", "1")], &[&[2, 3, 2]]),
    (
        "mean",
        &[("axis", "(0, 2)"), ("keepdims", "true")],
        &[&[2, 3, 2]],
    ),
    (
        "Concat",
        &[("num_args", "2"), ("dim", "1")],
        &[&[2, 3], &[2, 2]],
    ),
    (
        "SliceChannel",
        &[("num_outputs", "2"), ("axis", "1")],
        &[&[2, 4]],
    ),
    (
        "SliceChannel",
        &[
            ("num_outputs", "3"),
            ("axis", "0"),
            ("squeeze_axis", "true"),
        ],
        &[&[3, 2]],
    ),
    (
        "stack",
        &[("num_args", "2"), ("axis", "1")],
        &[&[2, 3], &[2, 3]],
    ),
    ("add_n", &[("num_args", "3")], &[&[2, 3], &[2, 3], &[2, 3]]),
    (
        "UpSampling",
        &[
            ("scale", "2"),
            ("sample_type", "nearest"),
            ("num_args", "1"),
        ],
        &[&[1, 2, 2, 2]],
    ),
    (
        "_rnn_param_concat",
        &[("num_args", "2"), ("dim", "0")],
        &[&[3], &[2]],
    ),
    ("_copy", &[], &[&[2, 3]]),
    ("negative", &[], &[&[2, 3]]),
    ("zeros_like", &[], &[&[2, 3]]),
    ("elemwise_add", &[], &[&[2, 3], &[2, 3]]),
    ("elemwise_sub", &[], &[&[2, 3], &[2, 3]]),
    ("broadcast_add", &[], &[&[2, 3], &[1, 3]]),
    ("broadcast_sub", &[], &[&[2, 1], &[1, 3]]),
    ("_mul_scalar", &[("scalar", "1.5")], &[&[2, 3]]),
    ("_div_scalar", &[("scalar", "-2.5")], &[&[2, 3]]),
];

fn attrs(kv: &[(&str, &str)]) -> Attrs {
    kv.iter().map(|(k, v)| (*k, *v)).collect()
}

fn def(name: &str) -> &'static OpDef {
    eager::lookup(name).unwrap().def
}

/// `op`'s output shapes for arguments of `shapes`.
fn output_shapes(op: &str, kv: &[(&str, &str)], shapes: &[&[usize]]) -> Vec<Vec<usize>> {
    let d = def(op);
    let env = (d.parse)(d, &attrs(kv)).unwrap();
    let shapes: Vec<Shape> = shapes.iter().map(|s| Shape::from(*s)).collect();
    let outs = d.output_shapes(&shapes, &env).unwrap();
    outs.iter().map(|s| s.dims().to_vec()).collect()
}

#[test]
fn every_linear_op_has_a_case_here() {
    simpleop_ops::link();
    let declared: BTreeSet<&str> = Registry::global()
        .unwrap()
        .iter()
        .filter(|o| o.def.linear)
        .map(|o| o.def.name)
        .collect();
    let covered: BTreeSet<&str> = CASES.iter().map(|c| c.0).collect();
    assert_eq!(declared, covered);
}

/// `_backward/L`'s gradient (the linear rule for blob ops; duals for the
/// elementwise ones) against central differences, every request.
#[test]
fn gradgradcheck_passes_for_every_linear_op() {
    simpleop_ops::link();
    for &(op, kv, shapes) in CASES {
        GradCheck::new(op)
            .attrs(attrs(kv))
            .shapes(shapes)
            .dtypes(&[DType::F64, DType::F32])
            .run_gradgrad()
            .unwrap_or_else(|e| panic!("{op} {kv:?}: {e}"));
    }
}

#[test]
fn gradgradcheck_of_linear_ops_runs_in_half_types_too() {
    simpleop_ops::link();
    for &(op, kv, shapes) in &CASES[..4] {
        GradCheck::new(op)
            .attrs(attrs(kv))
            .shapes(shapes)
            .range(-1.0, 1.0)
            .dtypes(&[DType::F16, DType::BF16])
            .run_gradgrad()
            .unwrap_or_else(|e| panic!("{op} {kv:?}: {e}"));
    }
}

/// With a head on output 0 only, the gradients reaching `_backward/L`'s
/// other outputs are missing: `L` runs on zeros there.
#[test]
fn gradgradcheck_with_some_gradients_missing() {
    simpleop_ops::link();
    for (op, kv, shapes) in [
        (
            "Concat",
            &[("num_args", "2"), ("dim", "0")][..],
            &[&[2, 3][..], &[1, 3]][..],
        ),
        ("stack", &[("num_args", "2"), ("axis", "0")], &[&[3], &[3]]),
        ("broadcast_add", &[], &[&[2, 3], &[1, 3]]),
    ] {
        // `run_gradgrad` on `_backward/L` itself checks `_backward/_backward/L`;
        // here `_backward/L`'s own backward is checked with one head.
        let mut a = attrs(kv);
        a.insert("forward_op", op);
        let outs = output_shapes(op, kv, shapes);
        let mut all: Vec<&[usize]> = outs.iter().map(Vec::as_slice).collect();
        all.extend_from_slice(shapes);
        GradCheck::new("_backward")
            .attrs(a)
            .shapes(&all)
            .heads(&[0])
            .dtypes(&[DType::F64])
            .run()
            .unwrap_or_else(|e| panic!("{op}: {e}"));
    }
}

/// Third order: `run_gradgrad` of `_backward/L` checks the gradient of
/// `_backward/_backward/L` (the rule applied to `_backward/L`, which is
/// linear in its output gradients and arguments together) against
/// central differences.
#[test]
fn gradgradcheck_of_the_backward_op_of_every_linear_op() {
    simpleop_ops::link();
    for &(op, kv, shapes) in CASES {
        let mut a = attrs(kv);
        a.insert("forward_op", op);
        let outs = output_shapes(op, kv, shapes);
        let mut all: Vec<&[usize]> = outs.iter().map(Vec::as_slice).collect();
        all.extend_from_slice(shapes);
        GradCheck::new("_backward")
            .attrs(a)
            .shapes(&all)
            .dtypes(&[DType::F64, DType::F32])
            .run_gradgrad()
            .unwrap_or_else(|e| panic!("_backward/{op} {kv:?}: {e}"));
    }
}

/// `_backward`'s backward kernel, called directly.
fn backward_kernel() -> simpleop::BackwardFn {
    eager::lookup("_backward")
        .unwrap()
        .kernels(Device::Cpu)
        .unwrap()
        .backward
        .unwrap()
}

/// Runs `_backward/op`'s backward on `inputs` (its inputs: output
/// gradients then arguments) with `weights` reaching its outputs, into
/// buffers of 100s under `req`; returns the buffers.
fn raw_second_order(
    op: &str,
    kv: &[(&str, &str)],
    inputs: &[(&[f64], &[usize])],
    weights: &[Option<(&[f64], &[usize])>],
    req: OpReqType,
) -> simpleop::Result<Vec<Vec<f64>>> {
    let d = def("_backward");
    let mut a = attrs(kv);
    a.insert("forward_op", op);
    let env = (d.parse)(d, &a)?;
    let ctx = RunContext::default();
    let call = OpCall {
        op: d,
        env: &env,
        ctx: &ctx,
    };
    let ins: Vec<TBlob<'_>> = inputs.iter().map(|&i| blob(i)).collect();
    let ws: Vec<Option<TBlob<'_>>> = weights.iter().map(|w| w.map(blob)).collect();
    let args = GradArgs {
        out_grad: ins[0].clone(),
        output: None,
        inputs: ins.iter().cloned().map(Some).collect(),
        out_grads: ws.into_iter().collect(),
        outputs: Default::default(),
    };
    let mut bufs: Vec<Vec<f64>> = inputs.iter().map(|(v, _)| vec![100.0; v.len()]).collect();
    {
        let mut grads: Vec<TBlobMut<'_>> = bufs
            .iter_mut()
            .zip(inputs)
            .map(|(b, (_, s))| TBlobMut::from_slice(&mut b[..], s.to_vec()).unwrap())
            .collect();
        let reqs = vec![req; inputs.len()];
        backward_kernel()(&call, &args, &mut grads, &reqs)?;
    }
    Ok(bufs)
}

fn blob<'a>((v, s): (&'a [f64], &[usize])) -> TBlob<'a> {
    TBlob::from_slice(v, s.to_vec()).unwrap()
}

/// `want` under `req`, over buffers of 100s.
fn requested(want: &[f64], req: OpReqType) -> Vec<f64> {
    match req {
        OpReqType::Null => vec![100.0; want.len()],
        OpReqType::AddTo => want.iter().map(|v| v + 100.0).collect(),
        _ => want.to_vec(),
    }
}

#[test]
fn the_linear_rule_honours_every_request() {
    simpleop_ops::link();
    // `_backward/transpose` on x (2, 3): inputs dy (3, 2), x; its gradient
    // with g (2, 3) reaching it: transpose(g) for dy, zero for x.
    let (dy, x) = ([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [7.0; 6]);
    let g = [0.5, -1.0, 2.0, -3.0, 4.0, 8.0];
    for req in OpReqType::ALL {
        let got = raw_second_order(
            "transpose",
            &[],
            &[(&dy, &[3, 2]), (&x, &[2, 3])],
            &[Some((&g, &[2, 3]))],
            req,
        )
        .unwrap();
        assert_eq!(
            got[0],
            requested(&[0.5, -3.0, -1.0, 4.0, 2.0, 8.0], req),
            "{req:?} dy"
        );
        assert_eq!(got[1], requested(&[0.0; 6], req), "{req:?} x");
    }
    // `_backward/Concat` of two (1, 2) arguments, no gradient reaching
    // the second: concat(g0, 0) for dy.
    let (dy, x0, x1) = ([1.0, 2.0, 3.0, 4.0], [5.0, 6.0], [7.0, 8.0]);
    for req in OpReqType::ALL {
        let got = raw_second_order(
            "Concat",
            &[("num_args", "2"), ("dim", "0")],
            &[(&dy, &[2, 2]), (&x0, &[1, 2]), (&x1, &[1, 2])],
            &[Some((&[-1.5, 2.5], &[1, 2])), None],
            req,
        )
        .unwrap();
        assert_eq!(got[0], requested(&[-1.5, 2.5, 0.0, 0.0], req), "{req:?} dy");
        assert_eq!(got[1], requested(&[0.0; 2], req), "{req:?} x0");
        assert_eq!(got[2], requested(&[0.0; 2], req), "{req:?} x1");
    }
    // `_backward/SliceChannel` (two outputs): g (2, 2) splits into the
    // two output gradients' gradients.
    for req in OpReqType::ALL {
        let got = raw_second_order(
            "SliceChannel",
            &[("num_outputs", "2"), ("axis", "1")],
            &[
                (&[1.0, 2.0], &[2, 1]),
                (&[3.0, 4.0], &[2, 1]),
                (&[0.0; 4], &[2, 2]),
            ],
            &[Some((&[1.0, 2.0, 3.0, 4.0], &[2, 2]))],
            req,
        )
        .unwrap();
        assert_eq!(got[0], requested(&[1.0, 3.0], req), "{req:?} dy0");
        assert_eq!(got[1], requested(&[2.0, 4.0], req), "{req:?} dy1");
        assert_eq!(got[2], requested(&[0.0; 4], req), "{req:?} x");
    }
}

#[test]
fn the_linear_rule_refuses_gradients_of_the_wrong_shape() {
    simpleop_ops::link();
    let (dy, x) = ([1.0; 6], [1.0; 6]);
    let r = raw_second_order(
        "transpose",
        &[],
        &[(&dy, &[3, 2]), (&x, &[2, 3])],
        &[Some((&[1.0; 6], &[3, 2]))],
        OpReqType::WriteTo,
    );
    let e = r.unwrap_err().to_string();
    assert!(e.contains("_backward") && e.contains("(2, 3)"), "{e}");
}

fn var(name: &str) -> Symbol {
    Symbol::var(name)
}

fn call(op: &str, inputs: &[&Symbol], kv: &[(&str, &str)]) -> Symbol {
    Symbol::invoke(op, inputs, &attrs(kv)).unwrap()
}

/// Binds `s` to those of `args` it takes, runs forward and returns every
/// output in f64.
fn eval(s: &Symbol, args: &[(&str, &NDArray)]) -> Vec<Vec<f64>> {
    let takes = s.list_arguments();
    let args: HashMap<String, NDArray> = args
        .iter()
        .filter(|(k, _)| takes.iter().any(|t| t == k))
        .map(|(k, v)| (k.to_string(), (*v).clone()))
        .collect();
    let mut exe = s.bind(args, HashMap::new(), HashMap::new()).unwrap();
    exe.forward(false).unwrap();
    exe.outputs().iter().map(NDArray::to_f64_vec).collect()
}

fn uniform(shape: &[usize], seed: u64) -> NDArray {
    NDArray::random_uniform(shape.to_vec(), -1.0, 1.0, DType::F64, seed).unwrap()
}

/// `a + eps·v`, in `a`'s shape.
fn shifted(a: &NDArray, v: &NDArray, eps: f64) -> NDArray {
    let s: Vec<f64> = a
        .to_f64_vec()
        .iter()
        .zip(v.to_f64_vec())
        .map(|(a, v)| a + eps * v)
        .collect();
    NDArray::from_f64(&s, a.shape().clone(), DType::F64).unwrap()
}

const RESHAPE: &[(&str, &str)] = &[("shape", "(5, 2, 3)")];
const TRANSPOSE: &[(&str, &str)] = &[("axes", "(0, 2, 1)")];
const SPLIT: &[(&str, &str)] = &[("num_outputs", "2"), ("axis", "1")];
const CONCAT: &[(&str, &str)] = &[("num_args", "2"), ("dim", "1")];

/// A perceptron whose input is reshaped, transposed and flattened, and
/// whose hidden layer is split and joined again:
/// `Σ (concat(σ(h₁), h₀)·w2 − t)²`, `(h₀, h₁) = split(tanh(x'·w1))`,
/// `x' = flatten(transpose(reshape(x)))`.
fn mlp_loss() -> Symbol {
    let (x, w1, w2, t) = (var("x"), var("w1"), var("w2"), var("t"));
    let xr = call("Reshape", &[&x], RESHAPE);
    let xf = call("Flatten", &[&call("transpose", &[&xr], TRANSPOSE)], &[]);
    let h = call("tanh", &[&call("dot", &[&xf, &w1], &[])], &[]);
    let parts = call("SliceChannel", &[&h], SPLIT);
    let (h0, h1) = (parts.output(0).unwrap(), parts.output(1).unwrap());
    let z = call("Concat", &[&call("sigmoid", &[&h1], &[]), &h0], CONCAT);
    let err = call("elemwise_sub", &[&call("dot", &[&z, &w2], &[]), &t], &[]);
    call("sum", &[&call("square", &[&err], &[])], &[])
}

const WRT: [&str; 3] = ["x", "w1", "w2"];

/// `Σ_k sum(g_k ⊙ v_k)` over the gradients `grads` and directions `v0..v2`.
fn directional(grads: &Symbol) -> Symbol {
    let term = |k: usize| {
        let v = var(&format!("v{k}"));
        call(
            "sum",
            &[&call("elemwise_mul", &[&grads.output(k).unwrap(), &v], &[])],
            &[],
        )
    };
    call(
        "elemwise_add",
        &[&call("elemwise_add", &[&term(0), &term(1)], &[]), &term(2)],
        &[],
    )
}

/// The MLP's point and direction: x, w1, w2, t, then v0..v2.
fn mlp_point() -> (Vec<NDArray>, Vec<NDArray>) {
    let at = vec![
        uniform(&[5, 6], 1),
        uniform(&[6, 4], 3),
        uniform(&[4, 2], 4),
        uniform(&[5, 2], 2),
    ];
    let dir = vec![
        uniform(&[5, 6], 5),
        uniform(&[6, 4], 6),
        uniform(&[4, 2], 7),
    ];
    (at, dir)
}

/// H·v of the MLP loss with respect to x, w1 and w2, from the graph.
fn graph_hvp(at: &[NDArray], dir: &[NDArray]) -> Vec<Vec<f64>> {
    let hv = directional(&mlp_loss().gradient(&WRT).unwrap())
        .gradient(&WRT)
        .unwrap();
    let names = ["x", "w1", "w2", "t", "v0", "v1", "v2"];
    let args: Vec<(&str, &NDArray)> = names.into_iter().zip(at.iter().chain(dir)).collect();
    eval(&hv, &args)
}

#[test]
fn hessian_vector_product_through_reshapes_splits_and_joins_matches_differences() {
    simpleop_ops::link();
    let (at, dir) = mlp_point();
    let got = graph_hvp(&at, &dir);
    let grads = mlp_loss().gradient(&WRT).unwrap();
    let eps = 1e-5;
    let gradient_at = |s: f64| {
        let moved: Vec<NDArray> = (0..3).map(|k| shifted(&at[k], &dir[k], s)).collect();
        eval(
            &grads,
            &[
                ("x", &moved[0]),
                ("w1", &moved[1]),
                ("w2", &moved[2]),
                ("t", &at[3]),
            ],
        )
    };
    let (plus, minus) = (gradient_at(eps), gradient_at(-eps));
    for k in 0..3 {
        let want: Vec<f64> = plus[k]
            .iter()
            .zip(&minus[k])
            .map(|(p, m)| (p - m) / (2.0 * eps))
            .collect();
        assert!(
            want.iter().any(|v| v.abs() > 1e-3),
            "H·v for {} is not trivial",
            WRT[k]
        );
        assert_close(&got[k], &want, 1e-6, &format!("H·v for {}", WRT[k]));
    }
}

/// The same loss on the eager tape.
fn eager_loss(x: &NDArray, w1: &NDArray, w2: &NDArray, t: &NDArray) -> simpleop::Result<NDArray> {
    let inv = |op: &str, ins: &[&NDArray], kv: &[(&str, &str)]| eager::invoke(op, ins, &attrs(kv));
    let xr = inv("Reshape", &[x], RESHAPE)?;
    let xf = inv("Flatten", &[&inv("transpose", &[&xr], TRANSPOSE)?], &[])?;
    let h = inv("tanh", &[&inv("dot", &[&xf, w1], &[])?], &[])?;
    let parts = eager::invoke_outputs_by_name("SliceChannel", &[&h], &mut [], &attrs(SPLIT))?;
    let z = inv(
        "Concat",
        &[&inv("sigmoid", &[&parts[1]], &[])?, &parts[0]],
        CONCAT,
    )?;
    let err = inv("elemwise_sub", &[&inv("dot", &[&z, w2], &[])?, t], &[])?;
    inv("sum", &[&inv("square", &[&err], &[])?], &[])
}

#[test]
fn the_eager_hessian_vector_product_equals_the_graphs_bit_for_bit() {
    simpleop_ops::link();
    let (mut at, dir) = mlp_point();
    for a in &mut at[..3] {
        a.attach_grad().unwrap();
    }
    let loss = autograd::record(|| eager_loss(&at[0], &at[1], &at[2], &at[3])).unwrap();
    let wrt: Vec<&NDArray> = at[..3].iter().collect();
    let options = GradOptions {
        create_graph: true,
        ..Default::default()
    };
    let g = autograd::grad_with(&[&loss], &wrt, &[], options).unwrap();
    let none = Attrs::new();
    let gv = autograd::record(|| -> simpleop::Result<NDArray> {
        let term = |k: usize| -> simpleop::Result<NDArray> {
            let m = eager::invoke("elemwise_mul", &[&g[k], &dir[k]], &none)?;
            eager::invoke("sum", &[&m], &none)
        };
        let ab = eager::invoke("elemwise_add", &[&term(0)?, &term(1)?], &none)?;
        eager::invoke("elemwise_add", &[&ab, &term(2)?], &none)
    })
    .unwrap();
    let hv = autograd::grad(&[&gv], &wrt, &[], false).unwrap();
    let want = graph_hvp(&at, &dir);
    for k in 0..3 {
        assert_eq!(hv[k].to_f64_vec(), want[k], "H·v for {}", WRT[k]);
    }
}

/// `L(x) = concat(transpose(reshape(x, (3, 2))), x)` along axis 0, for x
/// of shape (2, 3): a chain of linear ops, (2, 3) → (4, 3).
fn chain(x: &Symbol) -> Symbol {
    let r = call("Reshape", &[x], &[("shape", "(3, 2)")]);
    let t = call("transpose", &[&r], &[]);
    call("Concat", &[&t, x], &[("num_args", "2"), ("dim", "0")])
}

/// `L(v)` for v of shape (2, 3), flat.
fn chain_closed(v: &[f64]) -> Vec<f64> {
    // reshape (3, 2): r[i][j] = v[2i + j]; transpose: t[j][i] = r[i][j].
    let mut out: Vec<f64> = (0..2)
        .flat_map(|j| (0..3).map(move |i| (i, j)))
        .map(|(i, j)| v[2 * i + j])
        .collect();
    out.extend_from_slice(v);
    out
}

/// `Lᵀ(w)` for w of shape (4, 3), flat: the adjoint of [`chain_closed`].
fn chain_adjoint(w: &[f64]) -> Vec<f64> {
    let mut out = w[6..].to_vec();
    for j in 0..2 {
        for i in 0..3 {
            out[2 * i + j] += w[3 * j + i];
        }
    }
    out
}

/// Three nested gradients through linear ops, each seeded with a
/// variable of its own: `∇ₓ⟨u, L(x)⟩ = Lᵀu`, its gradient in `u` seeded
/// with `v` is `Lv`, and that one's in `v` seeded with `w` is `Lᵀw`. The
/// third graph is made of `_backward/_backward/_backward/…` nodes.
fn third_order_graph() -> (Symbol, Symbol) {
    let (x, u, v, w) = (var("x"), var("u"), var("v"), var("w"));
    let g1 = chain(&x).gradient_with(&["x"], &[&u]).unwrap();
    let g2 = g1.gradient_with(&["u"], &[&v]).unwrap();
    let g3 = g2.gradient_with(&["v"], &[&w]).unwrap();
    (g2, g3)
}

#[test]
fn three_nested_gradients_through_linear_ops_match_closed_forms() {
    simpleop_ops::link();
    let (g2, g3) = third_order_graph();
    let json = g3.to_json();
    // `forward_op` of a `_backward/_backward/_backward/Concat` node.
    assert!(json.contains("\"_backward/_backward/Concat\""), "{json}");
    let (x, u, v, w) = (
        uniform(&[2, 3], 41),
        uniform(&[4, 3], 42),
        uniform(&[2, 3], 43),
        uniform(&[4, 3], 44),
    );
    let args = [("x", &x), ("u", &u), ("v", &v), ("w", &w)];
    assert_eq!(eval(&g2, &args)[0], chain_closed(&v.to_f64_vec()));
    assert_eq!(eval(&g3, &args)[0], chain_adjoint(&w.to_f64_vec()));
}

/// A recorded `_backward/_backward/L` call differentiated on the tape
/// (the third-order step) equals the graph of the same call, and `Lᵀ`.
#[test]
fn an_eager_third_order_step_equals_the_graphs() {
    simpleop_ops::link();
    // `_backward/_backward/L` with L = `transpose` of a (2, 3) x: inputs
    // g (for dx, (2, 3)), dy (3, 2), x; outputs transpose(g) and zeros.
    let mut vals = [
        uniform(&[2, 3], 51),
        uniform(&[3, 2], 52),
        uniform(&[2, 3], 53),
    ];
    for a in &mut vals {
        a.attach_grad().unwrap();
    }
    let a = attrs(&[("forward_op", "_backward/transpose")]);
    let inputs: Vec<&NDArray> = vals.iter().collect();
    let d = def("_backward");
    let env = (d.parse)(d, &a).unwrap();
    let outs = autograd::record(|| eager::invoke_outputs(d, &inputs, &mut [], &env)).unwrap();
    let (w0, w1) = (uniform(&[3, 2], 54), uniform(&[2, 3], 55));
    let got = autograd::grad(&[&outs[0], &outs[1]], &inputs, &[&w0, &w1], false).unwrap();
    let names = ["g", "dy", "x"];
    let syms: Vec<Symbol> = names.iter().map(|n| var(n)).collect();
    let node = Symbol::invoke("_backward", &syms.iter().collect::<Vec<_>>(), &a).unwrap();
    let (sw0, sw1) = (var("w0"), var("w1"));
    let graph = node.gradient_with(&names, &[&sw0, &sw1]).unwrap();
    let mut args: Vec<(&str, &NDArray)> = names.into_iter().zip(&vals).collect();
    args.extend([("w0", &w0), ("w1", &w1)]);
    let want = eval(&graph, &args);
    for k in 0..3 {
        assert_eq!(got[k].to_f64_vec(), want[k], "{}", names[k]);
    }
    // d/dg ⟨w0, transpose(g)⟩ = transpose(w0); dy and x: zero.
    let w = w0.to_f64_vec();
    let t: Vec<f64> = (0..2)
        .flat_map(|i| (0..3).map(move |j| (i, j)))
        .map(|(i, j)| w[2 * j + i])
        .collect();
    assert_eq!(want[0], t);
    assert_eq!(want[1], vec![0.0; 6]);
    assert_eq!(want[2], vec![0.0; 6]);
}

/// d³/dx³ of `sum(3·reshape(x))` is zero: the third gradient graph of a
/// linear chain binds and runs. (Eagerly its first gradient does not
/// depend on `x` at all, so it is not recorded and has no gradient.)
#[test]
fn the_third_derivative_of_a_linear_chain_is_zero() {
    simpleop_ops::link();
    let x = var("x");
    let r = call("Reshape", &[&x], &[("shape", "(3, 2)")]);
    let y = call(
        "sum",
        &[&call("_mul_scalar", &[&r], &[("scalar", "3")])],
        &[],
    );
    let d1 = y.gradient(&["x"]).unwrap();
    let d3 = d1.gradient(&["x"]).unwrap().gradient(&["x"]).unwrap();
    let x0 = uniform(&[2, 3], 45);
    assert_eq!(eval(&d1, &[("x", &x0)])[0], vec![3.0; 6]);
    assert_eq!(eval(&d3, &[("x", &x0)])[0], vec![0.0; 6]);
}

#[test]
fn ops_neither_linear_nor_twice_differentiable_are_refused_by_name() {
    simpleop_ops::link();
    // `max`'s gradient reads its input and output, and it has no composition.
    let x = var("x");
    let g = call("max", &[&x], &[("axis", "1")])
        .gradient(&["x"])
        .unwrap();
    let e = g
        .gradient(&["x"])
        .expect_err("max's gradient has no gradient");
    assert!(matches!(&e, Error::Graph { .. }), "{e}");
    assert!(e.to_string().contains("`max`"), "{e}");
    // Eagerly, from the backward that needs it.
    let mut x0 = uniform(&[2, 3], 46);
    x0.attach_grad().unwrap();
    let y = autograd::record(|| eager::invoke("max", &[&x0], &attrs(&[("axis", "1")]))).unwrap();
    let options = GradOptions {
        create_graph: true,
        ..Default::default()
    };
    let d1 = autograd::grad_with(&[&y], &[&x0], &[], options).unwrap();
    let e = autograd::grad(&[&d1[0]], &[&x0], &[], false).unwrap_err();
    assert!(
        matches!(&e, Error::NoGradient { .. }) && e.to_string().contains("`max`"),
        "{e}"
    );
    // Third order of tanh: `_backward/tanh` is neither linear nor has a
    // gradient of its own; the message names it by its path.
    let t = call("tanh", &[&x], &[]);
    let d2 = t.gradient(&["x"]).unwrap().gradient(&["x"]).unwrap();
    let e = d2.gradient(&["x"]).unwrap_err();
    assert!(e.to_string().contains("`_backward/tanh`"), "{e}");
}

#[test]
fn an_op_declared_linear_whose_gradient_reads_values_is_refused() {
    simpleop_ops::link();
    for (op, reads) in [("elemwise_mul", "inputs"), ("tanh", "output")] {
        let bad: &'static OpDef = Box::leak(Box::new(OpDef {
            name: "_bad_linear",
            linear: true,
            ..*def(op)
        }));
        let e = Registry::new().register(bad).unwrap_err().to_string();
        assert!(
            e.contains("_bad_linear") && e.contains("linear") && e.contains(reads),
            "{e}"
        );
    }
    let ok: &'static OpDef = Box::leak(Box::new(OpDef {
        name: "_good_linear",
        ..*def("transpose")
    }));
    Registry::new().register(ok).unwrap();
}
