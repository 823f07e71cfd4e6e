//! Concurrency stress: threads running eager calls, executors (planned and
//! fused), the storage pool (with its bound changed and trimmed under
//! them) and the JIT cache at once. Every result must equal, bit for bit,
//! what one thread computed alone before the storm. Bounded by a count of
//! rounds, not by time; `SIMPLEOP_STRESS_ROUNDS` makes it longer.
//! `.ci/valgrind` runs it under memcheck and DRD with few rounds.

use std::collections::HashMap;
use std::sync::Barrier;

use simpleop::symbol::{BindConfig, GradReq, Symbol};
use simpleop::{Attrs, DType, NDArray, Shape, eager, pool};

fn rounds() -> usize {
    std::env::var("SIMPLEOP_STRESS_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
}

/// `sum(tanh(x) * y + exp(-x))`-like graph: fusable elementwise ops, a
/// broadcast and a reduction.
fn graph() -> Symbol {
    let (x, y) = (Symbol::var("x"), Symbol::var("y"));
    let none = Attrs::new();
    let t = Symbol::invoke("tanh", &[&x], &none).unwrap();
    let m = Symbol::invoke("broadcast_mul", &[&t, &y], &none).unwrap();
    let n = Symbol::invoke("negative", &[&x], &none).unwrap();
    let e = Symbol::invoke("exp", &[&n], &none).unwrap();
    let s = Symbol::invoke("elemwise_add", &[&m, &e], &none).unwrap();
    Symbol::invoke("sum", &[&s], &Attrs::from([("axis", "1")])).unwrap()
}

/// The executor's output and both gradients.
fn run_graph(sym: &Symbol, x: &NDArray, y: &NDArray, fusion: bool) -> Vec<Vec<u64>> {
    let args = HashMap::from([("x".to_string(), x.clone()), ("y".to_string(), y.clone())]);
    let grads = HashMap::from([
        (
            "x".to_string(),
            NDArray::zeros(x.shape().clone(), x.dtype()),
        ),
        (
            "y".to_string(),
            NDArray::zeros(y.shape().clone(), y.dtype()),
        ),
    ]);
    let reqs = HashMap::from([
        ("x".to_string(), GradReq::Write),
        ("y".to_string(), GradReq::Write),
    ]);
    let config = BindConfig {
        fusion,
        ..Default::default()
    };
    let mut exe = sym.bind_with(args, grads, reqs, config).unwrap();
    exe.forward(true).unwrap();
    let ones = NDArray::ones(exe.outputs()[0].shape().clone(), x.dtype());
    exe.backward(&[ones]).unwrap();
    [
        &exe.outputs()[0],
        exe.grad("x").unwrap(),
        exe.grad("y").unwrap(),
    ]
    .iter()
    .map(|a| bits(a))
    .collect()
}

/// Eager calls of several kinds: fresh output, into an output with each
/// request, in place.
fn run_eager(x: &NDArray, y: &NDArray) -> Vec<Vec<u64>> {
    let none = Attrs::new();
    let a = eager::invoke("sigmoid", &[x], &none).unwrap();
    let b = eager::invoke("broadcast_add", &[&a, y], &none).unwrap();
    let mut c = b.clone();
    eager::invoke_inplace_by_name("relu", &mut c, &[], &none).unwrap();
    let mut d = b.deep_copy();
    eager::invoke_into_by_name("square", &[&a], &none, &mut d, simpleop::OpReqType::AddTo).unwrap();
    let e = eager::invoke("softmax", &[&d], &none).unwrap();
    [a, b, c, d, e].iter().map(bits).collect()
}

fn bits(a: &NDArray) -> Vec<u64> {
    a.to_f64_vec().into_iter().map(f64::to_bits).collect()
}

#[test]
fn threads_sharing_the_pool_and_the_jit_cache_agree_with_one_thread() {
    simpleop_ops::link();
    let sym = graph();
    // Big enough to use the pool (64 KiB and more) and several tiles.
    let shapes = [
        (Shape::new([64, 300]), Shape::new([1, 300])),
        (Shape::new([3, 5]), Shape::new([3, 1])),
    ];
    let inputs: Vec<(NDArray, NDArray)> = shapes
        .iter()
        .enumerate()
        .flat_map(|(i, (sx, sy))| {
            [DType::F32, DType::F64].map(|dt| {
                let x = NDArray::random_uniform(sx.clone(), -2.0, 2.0, dt, i as u64).unwrap();
                let y = NDArray::random_uniform(sy.clone(), -2.0, 2.0, dt, 9 + i as u64).unwrap();
                (x, y)
            })
        })
        .collect();
    let want: Vec<_> = inputs
        .iter()
        .map(|(x, y)| {
            (
                run_graph(&sym, x, y, false),
                run_graph(&sym, x, y, true),
                run_eager(x, y),
            )
        })
        .collect();
    let threads = 4;
    let barrier = Barrier::new(threads);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (sym, inputs, want, barrier) = (&sym, &inputs, &want, &barrier);
            s.spawn(move || {
                barrier.wait();
                for r in 0..rounds() {
                    let k = (r + t) % inputs.len();
                    let (x, y) = &inputs[k];
                    let (planned, fused, eager) = &want[k];
                    assert_eq!(
                        &run_graph(sym, x, y, false),
                        planned,
                        "thread {t} round {r}"
                    );
                    assert_eq!(&run_graph(sym, x, y, true), fused, "thread {t} round {r}");
                    assert_eq!(&run_eager(x, y), eager, "thread {t} round {r}");
                    // One thread moves the pool's bound and empties it while
                    // the others take and give buffers.
                    if t == 0 && r % 4 == 0 {
                        pool::set_limit(if r % 8 == 0 {
                            1 << 20
                        } else {
                            pool::DEFAULT_LIMIT
                        });
                        pool::trim();
                    }
                }
            });
        }
    });
    pool::set_limit(pool::DEFAULT_LIMIT);
    let s = pool::stats();
    assert!(s.cached_bytes <= s.limit, "{s:?}");
}
