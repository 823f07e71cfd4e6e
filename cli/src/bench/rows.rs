//! The rows, one function per family, in the order they are printed.

use std::hint::black_box;

use simpleop::symbol::{BindConfig, Executor};
use simpleop::{Attrs, DType, Isa, NDArray, OpReqType, Result, Tuning, autograd, eager};

use super::graphs::{
    bind_inference, chain6_symbol, dense_symbol, interpreted_config, row_sq_dist_symbol,
    smooth_l1_symbol, unfused_config,
};
use super::stream::{stream_copy, stream_read2, stream_triad};
use super::timing::{Bench, Call, time_ms, time_paired};

/// The unary rows: op name and its string attributes.
const UNARY: [(&str, &[(&str, &str)]); 6] = [
    ("relu", &[]),
    ("exp", &[]),
    ("tanh", &[]),
    ("sigmoid", &[]),
    ("log", &[]),
    ("smooth_l1", &[("scalar", "1.0")]),
];

/// The large arrays the rows share, and the outputs they write.
struct Data {
    /// Positive inputs (for `log`).
    x: NDArray,
    /// Inputs of both signs.
    x_signed: NDArray,
    y: NDArray,
    out: NDArray,
    /// Where the baselines' calls write, so that a pair's two calls need
    /// not share an output.
    out_base: NDArray,
    /// `x` and `y` as plain vectors, for the STREAM baselines.
    src: Vec<f32>,
    src2: Vec<f32>,
    dst: Vec<f32>,
}

impl Data {
    fn new(n: usize) -> Result<Self> {
        let x = NDArray::random_uniform([n], 0.05, 4.0, DType::F32, 1)?;
        let x_signed = NDArray::random_uniform([n], -4.0, 4.0, DType::F32, 2)?;
        let y = NDArray::random_uniform([n], -4.0, 4.0, DType::F32, 3)?;
        Ok(Data {
            src: x.to_vec::<f32>()?,
            src2: y.to_vec::<f32>()?,
            dst: vec![0.0f32; n],
            out: NDArray::zeros([n], DType::F32),
            out_base: NDArray::zeros([n], DType::F32),
            x,
            x_signed,
            y,
        })
    }
}

/// Runs every row the linked ops allow.
pub(super) fn all(b: &mut Bench) -> Result<()> {
    let mut d = Data::new(b.opts.elements)?;
    stream(b, &mut d)?;
    for (op, attrs) in UNARY {
        unary(b, &mut d, op, &Attrs::from_iter(attrs.iter().copied()))?;
    }
    binary(b, &mut d)?;
    for dtype in [DType::F16, DType::BF16] {
        half(b, &mut d, dtype)?;
    }
    chain_eager(b, &mut d)?;
    if eager::lookup("where").is_ok() {
        chain_fused(b, &mut d)?;
        smooth_l1_composed(b, &mut d)?;
        row_sq_dist(b, &mut d)?;
    }
    super::autodiff::rows(b, &d.x_signed, &d.y, &d.x)?;
    if eager::lookup("dot").is_ok() {
        dot(b)?;
        if eager::lookup("broadcast_add").is_ok() {
            dense(b)?;
        }
    }
    tiny(b)
}

/// `op(input)` into `out`.
fn into(op: &str, input: &NDArray, attrs: &Attrs, out: &mut NDArray) -> Result<()> {
    eager::invoke_into_by_name(op, &[input], attrs, out, OpReqType::WriteTo)
}

/// `elemwise_add(x, y)` into `out`.
fn add_into(x: &NDArray, y: &NDArray, out: &mut NDArray) -> Result<()> {
    eager::invoke_into_by_name(
        "elemwise_add",
        &[x, y],
        &Attrs::new(),
        out,
        OpReqType::WriteTo,
    )
}

/// The baselines over the same bytes.
fn stream(b: &mut Bench, d: &mut Data) -> Result<()> {
    b.time("stream/copy", || stream_copy(&mut d.dst, &d.src))?;
    b.time("stream/triad", || stream_triad(&mut d.dst, &d.src, &d.src2))?;
    b.time("stream/read2", || stream_read2(&d.src, &d.src2))?;
    Ok(())
}

fn unary(b: &mut Bench, d: &mut Data, op: &str, attrs: &Attrs) -> Result<()> {
    // log needs positive inputs; the others see both signs.
    let input = if op == "log" { &d.x } else { &d.x_signed };
    let out_row = format!("{op}/f32/out");
    if op == "relu" {
        b.pair(&out_row, "stream/copy", |c| match c {
            Call::Base => stream_copy(&mut d.dst, &d.src),
            Call::Row => into(op, input, attrs, &mut d.out),
        })?;
    } else {
        b.pair(&out_row, "relu/f32/out", |c| match c {
            Call::Base => into("relu", &d.x_signed, &Attrs::new(), &mut d.out_base),
            Call::Row => into(op, input, attrs, &mut d.out),
        })?;
    }
    b.pair(&format!("{op}/f32/fresh"), &out_row, |c| match c {
        Call::Base => into(op, input, attrs, &mut d.out),
        Call::Row => {
            black_box(eager::invoke(op, &[input], attrs)?);
            Ok(())
        }
    })?;
    if matches!(op, "relu" | "exp" | "tanh") {
        b.pair_switched_off(
            &format!("{op}/f32/no-prefetch"),
            &out_row,
            |t, on| t.prefetch = on,
            || into(op, input, attrs, &mut d.out),
        )?;
    }
    if matches!(op, "relu" | "smooth_l1") {
        let vectorised = Tuning::current().isa;
        b.pair(&format!("{op}/f32/scalar-isa"), &out_row, |c| {
            let isa = if c == Call::Row {
                Isa::Scalar
            } else {
                vectorised
            };
            let _isa = Tuning::scoped(|t| t.isa = isa)?;
            into(op, input, attrs, &mut d.out)
        })?;
    }
    if matches!(op, "exp" | "tanh" | "sigmoid" | "log") {
        in_cache(b, d, op, attrs)?;
    }
    Ok(())
}

/// Elements of the `in-cache` rows' array: 4 MB of f32, which with its
/// output stays in a server's last-level cache; smaller arrays measured
/// the per-call dispatch more than the op (16 calls make the row here).
const IN_CACHE: usize = 1 << 20;

/// `<op>/f32/in-cache`: the row's element count computed in calls over
/// an array that stays in the caches, against relu's memory-bound time:
/// the op's compute time alone, which bounds its `out` row from below.
fn in_cache(b: &mut Bench, d: &mut Data, op: &str, attrs: &Attrs) -> Result<()> {
    let lo = if op == "log" { 0.05 } else { -4.0 };
    let x = NDArray::random_uniform([IN_CACHE], lo, 4.0, DType::F32, 9)?;
    let mut out = NDArray::zeros([IN_CACHE], DType::F32);
    let calls = (b.opts.elements / IN_CACHE).max(1);
    b.pair(&format!("{op}/f32/in-cache"), "relu/f32/out", |c| match c {
        Call::Base => into("relu", &d.x_signed, &Attrs::new(), &mut d.out_base),
        Call::Row => (0..calls).try_for_each(|_| into(op, &x, attrs, &mut out)),
    })?;
    Ok(())
}

fn binary(b: &mut Bench, d: &mut Data) -> Result<()> {
    b.pair("elemwise_add/f32/out", "stream/triad", |c| match c {
        Call::Base => stream_triad(&mut d.dst, &d.src, &d.src2),
        Call::Row => add_into(&d.x, &d.y, &mut d.out),
    })?;
    b.pair(
        "elemwise_add/f32/fresh",
        "elemwise_add/f32/out",
        |c| match c {
            Call::Base => add_into(&d.x, &d.y, &mut d.out),
            Call::Row => {
                black_box(eager::invoke("elemwise_add", &[&d.x, &d.y], &Attrs::new())?);
                Ok(())
            }
        },
    )?;
    Ok(())
}

/// Half types: half the bytes of the f32 rows.
fn half(b: &mut Bench, d: &mut Data, dtype: DType) -> Result<()> {
    let signed = d.x_signed.astype(dtype);
    let positive = d.x.astype(dtype);
    let mut out = NDArray::zeros([d.x.size()], dtype);
    for (op, attrs) in UNARY {
        let attrs = Attrs::from_iter(attrs.iter().copied());
        let (input, input32) = if op == "log" {
            (&positive, &d.x)
        } else {
            (&signed, &d.x_signed)
        };
        let row = format!("{op}/{}/out", dtype.name());
        b.pair(&row, &format!("{op}/f32/out"), |c| match c {
            Call::Base => into(op, input32, &attrs, &mut d.out),
            Call::Row => into(op, input, &attrs, &mut out),
        })?;
        if op == "tanh" {
            b.pair_switched_off(
                &format!("{op}/{}/computed", dtype.name()),
                &row,
                |t, on| t.half_tables = on,
                || into(op, input, &attrs, &mut out),
            )?;
        }
    }
    Ok(())
}

/// Six elementwise ops, eagerly (each a pass over memory).
fn chain_eager(b: &mut Bench, d: &mut Data) -> Result<()> {
    let chain = |x: &NDArray, y: &NDArray| -> Result<NDArray> {
        let s = |v: &str| Attrs::from([("scalar", v)]);
        let a = eager::invoke("_mul_scalar", &[x], &s("0.5"))?;
        let a = eager::invoke("_plus_scalar", &[&a], &s("1.0"))?;
        let a = eager::invoke("relu", &[&a], &Attrs::new())?;
        let a = eager::invoke("tanh", &[&a], &Attrs::new())?;
        let a = eager::invoke("elemwise_mul", &[&a, y], &Attrs::new())?;
        eager::invoke("elemwise_add", &[&a, x], &Attrs::new())
    };
    b.pair("chain6/eager", "elemwise_add/f32/out", |c| match c {
        Call::Base => add_into(&d.x, &d.y, &mut d.out_base),
        Call::Row => {
            black_box(chain(&d.x_signed, &d.y)?);
            Ok(())
        }
    })?;
    Ok(())
}

/// `row` timed against `base`, both executors' forward passes.
fn pair_executors(
    b: &mut Bench,
    row: &str,
    baseline: &str,
    base: &mut Executor,
    exe: &mut Executor,
) -> Result<()> {
    b.pair(row, baseline, |c| match c {
        Call::Base => base.forward(false),
        Call::Row => exe.forward(false),
    })?;
    Ok(())
}

/// The eager chain as a graph, fused (one pass) and unfused.
fn chain_fused(b: &mut Bench, d: &mut Data) -> Result<()> {
    let graph = chain6_symbol()?;
    let args = [("x", &d.x_signed), ("y", &d.y)];
    let mut fused = bind_inference(&graph, &args, BindConfig::default())?;
    let mut unfused = bind_inference(&graph, &args, unfused_config())?;
    let mut interpreted = bind_inference(&graph, &args, interpreted_config())?;
    b.pair("chain6/fused", "elemwise_add/f32/out", |c| match c {
        Call::Base => add_into(&d.x, &d.y, &mut d.out_base),
        Call::Row => fused.forward(false),
    })?;
    b.pair("chain6/fused/bandwidth", "stream/triad", |c| match c {
        Call::Base => stream_triad(&mut d.dst, &d.src, &d.src2),
        Call::Row => fused.forward(false),
    })?;
    b.pair_switched_off(
        "chain6/fused/cached-stores",
        "chain6/fused",
        |t, on| t.stream_stores = on,
        || fused.forward(false),
    )?;
    let row = "chain6/fused/interpreted";
    pair_executors(b, row, "chain6/fused", &mut fused, &mut interpreted)?;
    pair_executors(
        b,
        "chain6/unfused",
        "chain6/fused",
        &mut fused,
        &mut unfused,
    )
}

/// `smooth_l1` from six primitive ops, against the registered op.
fn smooth_l1_composed(b: &mut Bench, d: &mut Data) -> Result<()> {
    let composed = smooth_l1_symbol()?;
    let args = [("x", &d.x_signed)];
    let mut fused = bind_inference(&composed, &args, BindConfig::default())?;
    let mut interpreted = bind_inference(&composed, &args, interpreted_config())?;
    let attrs = Attrs::from([("scalar", "1.0")]);
    b.pair(
        "smooth_l1/composed-fused",
        "smooth_l1/f32/out",
        |c| match c {
            Call::Base => into("smooth_l1", &d.x_signed, &attrs, &mut d.out_base),
            Call::Row => fused.forward(false),
        },
    )?;
    let row = "smooth_l1/composed-interpreted";
    pair_executors(
        b,
        row,
        "smooth_l1/composed-fused",
        &mut fused,
        &mut interpreted,
    )
}

/// A row-wise reduction fed by elementwise ops.
fn row_sq_dist(b: &mut Bench, d: &mut Data) -> Result<()> {
    let cols = 1024;
    let rows = (b.opts.elements / cols).max(1);
    let p = NDArray::random_uniform([rows, cols], -4.0, 4.0, DType::F32, 6)?;
    let q = NDArray::random_uniform([rows, cols], -4.0, 4.0, DType::F32, 7)?;
    let graph = row_sq_dist_symbol()?;
    let args = [("x", &p), ("y", &q)];
    let mut fused = bind_inference(&graph, &args, BindConfig::default())?;
    let mut unfused = bind_inference(&graph, &args, unfused_config())?;
    let slabs_config = BindConfig {
        row_sinks: false,
        ..BindConfig::default()
    };
    let mut slabs = bind_inference(&graph, &args, slabs_config)?;
    b.pair("row_sq_dist/fused", "elemwise_add/f32/out", |c| match c {
        Call::Base => add_into(&d.x, &d.y, &mut d.out_base),
        Call::Row => fused.forward(false),
    })?;
    let (pv, qv) = (p.to_vec::<f32>()?, q.to_vec::<f32>()?);
    b.pair("row_sq_dist/fused/bandwidth", "stream/read2", |c| match c {
        Call::Base => stream_read2(&pv, &qv),
        Call::Row => fused.forward(false),
    })?;
    let base = "row_sq_dist/fused";
    pair_executors(b, "row_sq_dist/fused-slabs", base, &mut fused, &mut slabs)?;
    pair_executors(b, "row_sq_dist/unfused", base, &mut fused, &mut unfused)
}

/// A 1024² matrix product.
fn dot(b: &mut Bench) -> Result<()> {
    let a = NDArray::random_uniform([1024, 1024], -1.0, 1.0, DType::F32, 4)?;
    let c = NDArray::random_uniform([1024, 1024], -1.0, 1.0, DType::F32, 5)?;
    let mut o = NDArray::zeros([1024, 1024], DType::F32);
    b.time("dot/1024/f32", || {
        eager::invoke_into_by_name("dot", &[&a, &c], &Attrs::new(), &mut o, OpReqType::WriteTo)
    })?;
    Ok(())
}

/// A dense layer whose output is as large as the other rows' arrays and
/// whose product is cheap (64 multiply-adds per element), so that a pass
/// over memory is visible next to it.
fn dense(b: &mut Bench) -> Result<()> {
    let (k, cols) = (64, 1024);
    let rows = (b.opts.elements / cols).max(1);
    let x = NDArray::random_uniform([rows, k], -1.0, 1.0, DType::F32, 8)?;
    let w = NDArray::random_uniform([k, cols], -1.0, 1.0, DType::F32, 9)?;
    let bias = NDArray::random_uniform([cols], -1.0, 1.0, DType::F32, 10)?;
    let mut o = NDArray::zeros([rows, cols], DType::F32);
    let mut dot =
        || eager::invoke_into_by_name("dot", &[&x, &w], &Attrs::new(), &mut o, OpReqType::WriteTo);
    b.time("dense/dot", &mut dot)?;
    let graph = dense_symbol()?;
    let args = [("x", &x), ("w", &w), ("b", &bias)];
    let mut fused = bind_inference(&graph, &args, BindConfig::default())?;
    let mut unfused = bind_inference(&graph, &args, unfused_config())?;
    b.pair("dense/fused", "dense/dot", |c| match c {
        Call::Base => dot(),
        Call::Row => fused.forward(false),
    })?;
    pair_executors(b, "dense/unfused", "dense/fused", &mut fused, &mut unfused)
}

/// Dispatch overhead on one element: µs per call, over many calls.
fn tiny(b: &mut Bench) -> Result<()> {
    let one = NDArray::from_vec(vec![0.5f32], [1])?;
    let relu = eager::lookup("relu")?.def;
    let env = simpleop::EnvArguments::none();
    let calls = if b.opts.reps > 5 { 200_000 } else { 50_000 };
    let typed = || -> Result<()> {
        for _ in 0..calls {
            black_box(eager::invoke_with(relu, &[black_box(&one)], &env)?);
        }
        Ok(())
    };
    let by_name = || -> Result<()> {
        for _ in 0..calls {
            black_box(eager::invoke("relu", &[black_box(&one)], &Attrs::new())?);
        }
        Ok(())
    };
    let typed_ms = time_ms(b.opts.reps, typed)?;
    b.push("tiny/relu/typed", typed_ms / calls as f64, None, None);
    against_typed(b, "tiny/relu/by-name", calls, typed, by_name)?;
    tiny_recorded(b, relu, calls, typed)
}

/// Times `row` (`calls` calls) against `typed` in alternating pairs and
/// records µs per call as `name`, with its ratio to `tiny/relu/typed`.
fn against_typed(
    b: &mut Bench,
    name: &str,
    calls: usize,
    typed: impl Fn() -> Result<()>,
    row: impl Fn() -> Result<()>,
) -> Result<()> {
    let (ms, ratio) = time_paired(b.opts.reps, |c| match c {
        Call::Base => typed(),
        Call::Row => row(),
    })?;
    b.push(
        name,
        ms / calls as f64,
        Some("tiny/relu/typed"),
        Some(ratio),
    );
    Ok(())
}

/// One recorded `relu` on a one-element variable and its backward, per
/// call, against the unrecorded call; then per call of a recorded chain
/// of eight with one backward.
fn tiny_recorded(
    b: &mut Bench,
    relu: &'static simpleop::OpDef,
    calls: usize,
    typed: impl Fn() -> Result<()>,
) -> Result<()> {
    let mut x = NDArray::from_vec(vec![0.5f32], [1])?;
    x.attach_grad()?;
    let env = simpleop::EnvArguments::none();
    let recorded = || -> Result<()> {
        for _ in 0..calls {
            let y = autograd::record(|| eager::invoke_with(relu, &[black_box(&x)], &env))?;
            y.backward()?;
        }
        black_box(x.grad());
        Ok(())
    };
    against_typed(b, "tiny/relu/recorded", calls, &typed, recorded)?;
    // A pass's fixed costs (the head's ones, the walk, the variable's
    // buffer) shared by eight recorded calls: the cost per op of a chain.
    let chain = || -> Result<()> {
        for _ in 0..calls / CHAIN {
            let y = autograd::record(|| -> Result<NDArray> {
                let mut y = eager::invoke_with(relu, &[black_box(&x)], &env)?;
                for _ in 1..CHAIN {
                    y = eager::invoke_with(relu, &[&y], &env)?;
                }
                Ok(y)
            })?;
            y.backward()?;
        }
        black_box(x.grad());
        Ok(())
    };
    against_typed(b, "tiny/relu/recorded-chain8", calls, typed, chain)
}

/// Recorded calls per backward in `tiny/relu/recorded-chain8`.
const CHAIN: usize = 8;
