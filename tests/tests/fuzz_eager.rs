//! Random eager calls: every registered op, with random arities, shapes
//! (empty, scalar, broadcastable, mismatched, huge), dtypes, attributes
//! (the op's own keys with good and bad values), requests and call forms
//! (fresh output, into an output, in place, with states, backward). Each
//! call must return `Ok` or `Err`; a panic fails the test and prints the
//! call so it can be replayed.
//!
//! A short run is part of `cargo test`; the environment of
//! `simpleop_tests::fuzz` (`SIMPLEOP_FUZZ_CASES`, `_SEED`, `_TRACE`) sets a
//! long one.

use std::fmt::Write as _;

use simpleop::op::ParamKind;
use simpleop::{Attrs, DType, NDArray, OpDef, OpReqType, Registry, Shape, eager};
use simpleop_tests::fuzz::{self, Rng};

const VALUES: &[&str] = &[
    "0",
    "1",
    "-1",
    "2",
    "3",
    "-2",
    "0.5",
    "-0.0",
    "1e308",
    "-1e308",
    "nan",
    "inf",
    "-inf",
    "true",
    "false",
    "True",
    "None",
    "",
    "x",
    "()",
    "(1,)",
    "(2, 3)",
    "(-1,)",
    "(0,)",
    "(3, -1)",
    "(0, -4, 1, -1)",
    "(-3, 2)",
    "(-2,)",
    "(1, 1, 1, 1, 1, 1, 1, 1)",
    "(1073741824, 1073741824)",
    "(4294967296, 4294967296)",
    "(18446744073709551615,)",
    "[1, 2]",
    "float16",
    "float32",
    "float64",
    "bfloat16",
    "int32",
    "uint8",
    "int8",
    "9223372036854775807",
    "-9223372036854775808",
    "1e12",
];

fn random_shape(g: &mut Rng) -> Shape {
    let rank = g.below(5);
    Shape::new((0..rank).map(|_| g.below(5)).collect::<Vec<_>>())
}

/// `base` with some axes set to 1, or dropped from the front.
fn broadcast_variant(g: &mut Rng, base: &Shape) -> Shape {
    let mut dims: Vec<usize> = base.dims().to_vec();
    for d in dims.iter_mut() {
        if g.chance(30) {
            *d = 1;
        }
    }
    let drop = g
        .below(dims.len() + 1)
        .min(if g.chance(30) { dims.len() } else { 0 });
    Shape::new(dims[drop..].to_vec())
}

fn random_array(g: &mut Rng, shape: Shape, dtype: DType) -> NDArray {
    let n = shape.size();
    let special = [
        0.0,
        -0.0,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        1e-40,
        65504.0,
        1e300,
    ];
    let v: Vec<f64> = (0..n)
        .map(|_| {
            if g.chance(10) {
                *g.pick(&special)
            } else {
                (g.below(2001) as f64 - 1000.0) / 250.0
            }
        })
        .collect();
    NDArray::from_f64(&v, shape, dtype).unwrap()
}

fn random_attrs(g: &mut Rng, op: &OpDef, log: &mut String) -> Attrs {
    let mut keys: Vec<&str> = match op.params {
        ParamKind::None => vec![],
        ParamKind::Scalar => vec!["scalar"],
        ParamKind::Kwargs { fields, .. } => fields().to_vec(),
    };
    if g.chance(10) {
        keys.push(*g.pick(&["axis", "shape", "bogus", "__shape__"]));
    }
    let mut attrs = Attrs::new();
    for k in keys {
        if g.chance(60) {
            let v = *g.pick(VALUES);
            let _ = write!(log, " {k}={v:?}");
            attrs.insert(k, v);
        }
    }
    attrs
}

/// One random call; `Ok(true)` when simpleop answered `Err`.
fn one_call(g: &mut Rng, ops: &[&'static OpDef], log: &mut String) -> bool {
    let op = *g.pick(ops);
    let arity = match (op.num_inputs(), g.below(20)) {
        (n, 0) => n + 1,
        (n, 1) if n > 0 => n - 1,
        (n, _) => n,
    };
    let dtype = *g.pick(&[
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::I32,
    ]);
    let base = random_shape(g);
    let shapes: Vec<Shape> = (0..arity)
        .map(|_| match g.below(10) {
            0 => random_shape(g),
            1..=3 => broadcast_variant(g, &base),
            _ => base.clone(),
        })
        .collect();
    let _ = write!(log, "{} {dtype} {shapes:?}", op.name);
    let inputs: Vec<NDArray> = shapes
        .iter()
        .map(|s| random_array(g, s.clone(), dtype))
        .collect();
    let refs: Vec<&NDArray> = inputs.iter().collect();
    let attrs = random_attrs(g, op, log);
    let mut errs = 0;
    let mut calls = 0;
    let mut note = |r: simpleop::Result<()>| {
        calls += 1;
        errs += usize::from(r.is_err());
    };
    let out = eager::invoke(op.name, &refs, &attrs);
    // Follow-up calls make arrays of the output's shape: keep them small.
    let out = out.and_then(|o| {
        if o.shape().size() > 1 << 16 {
            Err(simpleop::Error::invalid(
                op.name,
                "out",
                "too big to follow up",
            ))
        } else {
            Ok(o)
        }
    });
    note(out.as_ref().map(|_| ()).map_err(Clone::clone));
    let req = *g.pick(&[
        OpReqType::Null,
        OpReqType::WriteTo,
        OpReqType::WriteInplace,
        OpReqType::AddTo,
    ]);
    let _ = write!(log, " req={req:?}");
    let mut into = match (&out, g.chance(80)) {
        (Ok(o), true) => random_array(g, o.shape().clone(), o.dtype()),
        _ => {
            let shape = random_shape(g);
            random_array(g, shape, dtype)
        }
    };
    note(eager::invoke_into_by_name(
        op.name, &refs, &attrs, &mut into, req,
    ));
    if let Some((first, rest)) = refs.split_first() {
        let mut target = (*first).clone();
        note(eager::invoke_inplace_by_name(
            op.name,
            &mut target,
            rest,
            &attrs,
        ));
    }
    if !op.mutate_inputs.is_empty() {
        let mut states: Vec<NDArray> = inputs.clone();
        let mut state_refs: Vec<&mut NDArray> =
            states.iter_mut().take(op.mutate_inputs.len()).collect();
        let others: Vec<&NDArray> = refs.iter().skip(op.mutate_inputs.len()).copied().collect();
        note(eager::invoke_mut(op.name, &others, &mut state_refs, &attrs).map(|_| ()));
    }
    if let (Ok(o), Some(_)) = (&out, op.gradient) {
        let env = (op.parse)(op, &attrs);
        if let Ok(env) = env {
            let dy = random_array(g, o.shape().clone(), o.dtype());
            let mut grads: Vec<NDArray> = inputs
                .iter()
                .map(|x| random_array(g, x.shape().clone(), x.dtype()))
                .collect();
            let reqs: Vec<OpReqType> = (0..arity)
                .map(|_| *g.pick(&[OpReqType::Null, OpReqType::WriteTo, OpReqType::AddTo]))
                .collect();
            let output = g.chance(90).then_some(o);
            let _ = write!(log, " backward reqs={reqs:?} output={}", output.is_some());
            note(eager::invoke_backward(
                op, &env, &dy, output, &refs, &mut grads, &reqs,
            ));
        }
    }
    errs == calls
}

#[test]
fn random_eager_calls_give_ok_or_err_never_a_panic() {
    simpleop_ops::link();
    let registry = Registry::global().unwrap();
    let mut ops: Vec<&'static OpDef> = registry.iter().map(|r| r.def).collect();
    ops.sort_by_key(|o| o.name);
    // What the call being run did so far, shown if it panics.
    let log = std::cell::RefCell::new(String::new());
    fuzz::run(
        "eager",
        fuzz::cases(50_000),
        |_, rng| rng.clone(),
        |_| log.borrow().clone(),
        |rng| {
            let mut log = log.borrow_mut();
            log.clear();
            Ok(one_call(&mut rng.clone(), &ops, &mut log))
        },
    );
}
