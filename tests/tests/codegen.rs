//! Code generation for fused programs (the engine's `jit`): every
//! op's lane computes what its kernel computes, bit for bit, and compiled
//! programs give the interpreter's results in every executor path (tails,
//! threads, streamed outputs, row sinks, dot heads).
//!
//! Executors bound with `BindConfig::codegen` on and off run side by side;
//! the compiled-range counters only grow, so concurrent tests cannot make
//! a check here pass or fail.

use std::collections::HashMap;

use simpleop::__private::engine::jit::{self, ACC_LANES, JitInstr, Lane, LaneOp, Summand};
use simpleop::symbol::{BindConfig, GradReq};
use simpleop::{Attrs, DType, Device, EnvArguments, NDArray, ParamKind, Registry, Symbol};

/// Whether this machine runs compiled code at all (for the active
/// instruction set: CI runs these tests with `SIMPLEOP_ISA=avx2` too).
fn generates() -> bool {
    jit::generates_on(simpleop::Tuning::current().isa)
}

/// Whether compiled code sums a row sink's values (on every set that
/// generates code: in registers on AVX-512, in memory on AVX2).
fn sums_in_registers() -> bool {
    generates()
}

/// Special values, then a sweep, then pseudo-random values of all sizes.
fn values(n: usize, seed: u32) -> Vec<f32> {
    let special = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        f32::NAN,
        -f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MIN_POSITIVE,
        -1e-40,
        1e-40,
        f32::MAX,
        f32::MIN,
        9.0,
        9.1,
        9.2,
        -9.1,
        1e-8,
        0.031,
        0.062,
        88.0,
        -104.0,
        // two whole vectors for AVX2's `exp`, whose results rescale by
        // adding n to the exponent field when all 8 lanes' n are in
        // [-125, 127]: n = -126 in the first takes the general way, the
        // second has the bounds' n and takes the short one
        -87.5,
        -87.3,
        -87.1,
        -86.9,
        -86.5,
        -80.0,
        0.3,
        1.0,
        88.3,
        88.0,
        -86.9,
        -86.95,
        87.9,
        50.0,
        -50.0,
        2.0,
    ];
    let mut v: Vec<f32> = special.to_vec();
    let mut s = seed.wrapping_mul(2_654_435_761).max(1);
    while v.len() < n {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        let k = v.len();
        v.push(if k.is_multiple_of(3) {
            (k as f32 - n as f32 / 2.0) * 0.013
        } else {
            // any finite bit pattern
            let x = f32::from_bits(s);
            if x.is_finite() {
                x
            } else {
                (s % 1000) as f32 - 500.0
            }
        });
    }
    v.truncate(n);
    v
}

fn same_bits(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

#[test]
fn every_lane_computes_what_its_kernel_computes() {
    if !generates() {
        return;
    }
    simpleop_ops::link();
    let registry = Registry::global().unwrap();
    let mut checked = Vec::new();
    for op in registry.iter() {
        let Some(tile) = op.kernels(Device::Cpu).unwrap().tile else {
            continue;
        };
        let Some(lane_fn) = tile.lane else {
            continue;
        };
        let envs = if matches!(op.def.params, ParamKind::Scalar) {
            vec![
                EnvArguments::scalar(0.5),
                EnvArguments::scalar(-1.25),
                EnvArguments::scalar(0.0),
                EnvArguments::scalar(1e-3),
            ]
        } else {
            vec![EnvArguments::none()]
        };
        for env in &envs {
            let lane = lane_fn(env).expect("a lane for these arguments");
            let arity = lane.op.arity();
            // odd length: full vectors and a masked tail
            let n = 1037;
            let ins: Vec<Vec<f32>> = (0..arity).map(|k| values(n, 7 + k as u32)).collect();
            let mut want = vec![0f32; n];
            let views: Vec<&[f32]> = ins.iter().map(|v| v.as_slice()).collect();
            (tile.forward_f32)(env, &views, &mut want).unwrap();
            let slots: Vec<usize> = (0..arity).collect();
            let program = [
                JitInstr::Op {
                    lane,
                    ins: &slots,
                    out: arity,
                },
                JitInstr::Keep {
                    slot: arity,
                    stream: false,
                },
            ];
            let code = jit::compile(&program, arity + 1).expect("compiles");
            let mut got = vec![f32::NAN; n];
            let mut ptrs: Vec<*mut f32> = ins.iter().map(|v| v.as_ptr().cast_mut()).collect();
            ptrs.push(got.as_mut_ptr());
            // SAFETY: one pointer per slot, each to `n` f32; the inputs
            // are only read, the output is written through this pointer
            // alone; compiled for the active set (`generates`).
            unsafe { code.run(&ptrs, n) };
            for j in 0..n {
                assert!(
                    same_bits(got[j], want[j]),
                    "{} ({env:?}) at {:?}: lane {:e}, kernel {:e}",
                    op.def.name,
                    ins.iter().map(|v| v[j]).collect::<Vec<_>>(),
                    got[j],
                    want[j]
                );
            }
        }
        checked.push(op.def.name);
    }
    for name in [
        "tanh",
        "exp",
        "sigmoid",
        "relu",
        "elemwise_add",
        "_mul_scalar",
        "where",
        "_lesser_scalar",
    ] {
        assert!(checked.contains(&name), "{name} has no lane: {checked:?}");
    }
}

#[test]
fn programs_that_do_not_fit_are_left_to_the_interpreter() {
    if !generates() {
        return;
    }
    let add = Lane {
        op: LaneOp::AddScalar,
        scalar: 1.0,
    };
    let mul = Lane {
        op: LaneOp::Mul,
        scalar: 0.0,
    };
    // 30 values live at once: more than the registers hold
    let ins: Vec<[usize; 1]> = vec![[0]; 30];
    let pairs: Vec<[usize; 2]> = (0..29).map(|k| [1 + k, 2 + k]).collect();
    let mut program: Vec<JitInstr<'_>> = (0..30)
        .map(|k| JitInstr::Op {
            lane: add,
            ins: &ins[k],
            out: 1 + k,
        })
        .collect();
    program.extend((0..29).map(|k| JitInstr::Op {
        lane: mul,
        ins: &pairs[k],
        out: 31 + k,
    }));
    assert!(jit::compile(&program, 60).is_none());
    // a slot overwritten, then kept: its final value is
    let program = [
        JitInstr::Op {
            lane: add,
            ins: &[0],
            out: 1,
        },
        JitInstr::Op {
            lane: add,
            ins: &[1],
            out: 1,
        },
        JitInstr::Keep {
            slot: 1,
            stream: false,
        },
    ];
    assert!(
        jit::compile(&program, 2).is_some(),
        "final values may be kept"
    );
    let program = [
        JitInstr::Op {
            lane: add,
            ins: &[0],
            out: 1,
        },
        JitInstr::Op {
            lane: add,
            ins: &[1],
            out: 2,
        },
        JitInstr::Keep {
            slot: 1,
            stream: false,
        },
        JitInstr::Op {
            lane: add,
            ins: &[2],
            out: 1,
        },
    ];
    // the keep reads slot 1's first value, which the last op replaces:
    // compiled code would store only the last one
    assert!(jit::compile(&program, 3).is_none());
    // wrong arity
    let program = [JitInstr::Op {
        lane: mul,
        ins: &[0],
        out: 1,
    }];
    assert!(jit::compile(&program, 2).is_none());
}

#[test]
fn accumulating_programs_add_each_lane_in_order_or_do_not_compile() {
    let sub = Lane {
        op: LaneOp::Sub,
        scalar: 0.0,
    };
    if !sums_in_registers() {
        let program = [
            JitInstr::Op {
                lane: sub,
                ins: &[0, 1],
                out: 2,
            },
            JitInstr::Accumulate {
                slot: 2,
                summand: Summand::Value,
            },
        ];
        assert!(jit::compile(&program, 3).is_none(), "sums only on AVX-512");
        return;
    }
    let sum = |slot, summand| JitInstr::Accumulate { slot, summand };
    let diff = JitInstr::Op {
        lane: sub,
        ins: &[0, 1],
        out: 2,
    };
    // an input's value, two sums, and a value the slot no longer holds
    assert!(jit::compile(&[diff.clone(), sum(0, Summand::Value)], 3).is_none());
    let twice = [diff.clone(), sum(2, Summand::Value), sum(2, Summand::Abs)];
    assert!(jit::compile(&twice, 3).is_none());
    let overwritten = [
        diff.clone(),
        sum(2, Summand::Value),
        JitInstr::Op {
            lane: sub,
            ins: &[1, 0],
            out: 2,
        },
    ];
    assert!(jit::compile(&overwritten, 3).is_none());
    // whole chunks, then a last partial one of 19 elements
    let n = 32 * 37 + 19;
    let x = values(n, 4);
    let y: Vec<f32> = (0..n).map(|i| (i % 23) as f32 * 0.25 - 3.0).collect();
    for summand in [Summand::Value, Summand::Abs, Summand::Square] {
        let kept = jit::compile(
            &[
                diff.clone(),
                sum(2, summand),
                JitInstr::Keep {
                    slot: 2,
                    stream: false,
                },
            ],
            3,
        )
        .expect("compiles");
        assert!(kept.accumulates());
        // sentinels past the end, which no masked lane may touch
        let mut d = vec![f32::NAN; n + 32];
        d[n..].fill(7.0);
        let ptrs = [x.as_ptr().cast_mut(), y.as_ptr().cast_mut(), d.as_mut_ptr()];
        // two calls, as two pieces of one row
        let mut sums = [0.5f64; ACC_LANES];
        // SAFETY: each slot points at `n` f32 (x and y only read, d only
        // written); the CPU has AVX-512 (`sums_in_registers`).
        unsafe {
            kept.run_accumulating(&ptrs, 32 * 20, &mut sums);
            let rest: Vec<*mut f32> = ptrs.iter().map(|p| p.add(32 * 20)).collect();
            kept.run_accumulating(&rest, n - 32 * 20, &mut sums);
        }
        assert!(
            d[n..].iter().all(|&v| v == 7.0),
            "{summand:?}: wrote past the end"
        );
        let mut want = [0.5f64; ACC_LANES];
        for (j, (a, b)) in x.iter().zip(&y).enumerate() {
            let v = f64::from(a - b);
            want[j % ACC_LANES] += match summand {
                Summand::Value => v,
                Summand::Abs => v.abs(),
                Summand::Square => v * v,
            };
            assert!(same_bits(d[j], a - b), "kept value {j}");
        }
        for (k, (g, w)) in sums.iter().zip(&want).enumerate() {
            assert!(
                g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                "{summand:?} sum {k}: {g:e} against {w:e}"
            );
        }
        // partial chunks alone: in the first vector, across both, all of
        // the first, and nothing; element j of each adds to sum j only
        for len in [5, 17, 16, 31, 0] {
            let mut sums = [0.25f64; ACC_LANES];
            // SAFETY: as above, `len` <= `n`.
            unsafe { kept.run_accumulating(&ptrs, len, &mut sums) };
            for (j, g) in sums.iter().enumerate() {
                let want = if j < len {
                    let v = f64::from(x[j] - y[j]);
                    0.25 + match summand {
                        Summand::Value => v,
                        Summand::Abs => v.abs(),
                        Summand::Square => v * v,
                    }
                } else {
                    0.25
                };
                assert!(
                    g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                    "{summand:?}, {len} elements, sum {j}: {g:e} against {want:e}"
                );
            }
        }
    }
}

fn s(v: f64) -> Attrs {
    Attrs::new().with("scalar", v)
}

/// chain6, the composed smooth_l1 and a DAG with a value used three times.
fn graphs() -> Vec<(&'static str, Symbol, usize)> {
    let x = Symbol::var("x");
    let y = Symbol::var("y");
    let a = Symbol::invoke("_mul_scalar", &[&x], &s(0.75)).unwrap();
    let b = Symbol::invoke("elemwise_sub", &[&a, &y], &Attrs::new()).unwrap();
    let c = Symbol::invoke("square", &[&b], &Attrs::new()).unwrap();
    let d = Symbol::invoke("_rminus_scalar", &[&c], &s(2.0)).unwrap();
    let e = Symbol::invoke("elemwise_mul", &[&d, &b], &Attrs::new()).unwrap();
    let f = Symbol::invoke("negative", &[&b], &Attrs::new()).unwrap();
    let g = Symbol::invoke("abs", &[&f], &Attrs::new()).unwrap();
    let dag = Symbol::invoke("elemwise_add", &[&e, &g], &Attrs::new()).unwrap();
    let h = Symbol::invoke("_mul_scalar", &[&x], &s(0.1)).unwrap();
    let h = Symbol::invoke("exp", &[&h], &Attrs::new()).unwrap();
    let h = Symbol::invoke("elemwise_sub", &[&h, &y], &Attrs::new()).unwrap();
    let gate = Symbol::invoke("sigmoid", &[&h], &Attrs::new()).unwrap();
    vec![
        ("gate", gate, 2),
        ("chain6", simpleop_cli::bench::chain6_symbol().unwrap(), 2),
        (
            "smooth_l1",
            simpleop_cli::bench::smooth_l1_symbol().unwrap(),
            1,
        ),
        ("dag", dag, 2),
    ]
}

fn run(
    graph: &Symbol,
    args: &[(&str, &NDArray)],
    codegen: bool,
    training: bool,
) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let a: HashMap<String, NDArray> = args
        .iter()
        .map(|(n, v)| ((*n).to_owned(), (*v).clone()))
        .collect();
    let mut grads = HashMap::new();
    let mut req = HashMap::new();
    if training {
        for (n, v) in args {
            grads.insert(
                (*n).to_owned(),
                NDArray::zeros(v.shape().clone(), DType::F32),
            );
            req.insert((*n).to_owned(), GradReq::Write);
        }
    }
    let mut exe = graph
        .bind_with(
            a,
            grads,
            req,
            BindConfig {
                codegen,
                ..BindConfig::default()
            },
        )
        .unwrap();
    exe.forward(training).unwrap();
    let outs = exe
        .outputs()
        .iter()
        .map(|o| o.to_vec::<f32>().unwrap())
        .collect();
    let mut gs = Vec::new();
    if training {
        let heads: Vec<NDArray> = exe
            .outputs()
            .iter()
            .map(|o| NDArray::ones(o.shape().clone(), DType::F32))
            .collect();
        exe.backward(&heads).unwrap();
        for (n, _) in args {
            gs.push(exe.grad(n).unwrap().to_vec::<f32>().unwrap());
        }
    }
    (outs, gs)
}

fn assert_same(what: &str, a: &[Vec<f32>], b: &[Vec<f32>]) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x.len(), y.len(), "{what}");
        for (j, (p, q)) in x.iter().zip(y).enumerate() {
            assert!(
                same_bits(*p, *q),
                "{what} at {j}: {p:e} compiled, {q:e} interpreted"
            );
        }
    }
}

#[test]
fn compiled_programs_give_the_interpreters_bits() {
    // streamed however large this machine's last-level cache is
    simpleop::Tuning::update(|t| t.cache_bytes = 0).unwrap();
    simpleop_ops::link();
    // tails, one tile, several tiles over threads, and an output past
    // the streaming threshold (8 MB), written with non-temporal stores
    for n in [1usize, 15, 16, 17, 1024, 1039, 70_001, 2_100_000] {
        let x = NDArray::from_vec(values(n, 1), [n]).unwrap();
        let y = NDArray::from_vec(values(n, 2), [n]).unwrap();
        for (name, graph, arity) in graphs() {
            let args: Vec<(&str, &NDArray)> = [("x", &x), ("y", &y)][..arity].to_vec();
            let (a, _) = run(&graph, &args, true, false);
            let (b, _) = run(&graph, &args, false, false);
            assert_same(&format!("{name}, {n} elements"), &a, &b);
            if n <= 1039 {
                let (a, ga) = run(&graph, &args, true, true);
                let (b, gb) = run(&graph, &args, false, true);
                assert_same(&format!("{name} training, {n}"), &a, &b);
                assert_same(&format!("{name} gradients, {n}"), &ga, &gb);
            }
        }
    }
}

#[test]
fn row_sinks_broadcasts_and_dot_heads_read_compiled_results() {
    // streamed however large this machine's last-level cache is
    simpleop::Tuning::update(|t| t.cache_bytes = 0).unwrap();
    simpleop_ops::link();
    let p = NDArray::random_uniform([300, 1000], -4.0, 4.0, DType::F32, 6).unwrap();
    let q = NDArray::random_uniform([300, 1000], -4.0, 4.0, DType::F32, 7).unwrap();
    let graph = simpleop_cli::bench::row_sq_dist_symbol().unwrap();
    let args = [("x", &p), ("y", &q)];
    // Compiled and interpreted programs give the same bits, so the count
    // of compiled runs tells which one ran.
    let compiled = |name: &str, before: u64| {
        if generates() {
            assert!(jit::compiled_ranges() > before, "{name}: not compiled");
        }
    };
    let before = jit::compiled_ranges();
    let (a, _) = run(&graph, &args, true, false);
    compiled("row_sq_dist", before);
    let (b, _) = run(&graph, &args, false, false);
    assert_same("row_sq_dist", &a, &b);

    // a broadcast operand, gathered into a slot per tile
    let x = NDArray::random_uniform([300, 1000], -3.0, 3.0, DType::F32, 4).unwrap();
    let row = NDArray::random_uniform([1, 1000], -1.0, 1.0, DType::F32, 5).unwrap();
    let t = Symbol::invoke("tanh", &[&Symbol::var("x")], &Attrs::new()).unwrap();
    let a = Symbol::invoke("broadcast_add", &[&t, &Symbol::var("b")], &Attrs::new()).unwrap();
    let graph = Symbol::invoke("relu", &[&a], &Attrs::new()).unwrap();
    let args = [("x", &x), ("b", &row)];
    let before = jit::compiled_ranges();
    let (a, _) = run(&graph, &args, true, false);
    compiled("broadcast", before);
    let (b, _) = run(&graph, &args, false, false);
    assert_same("broadcast", &a, &b);

    // rows summed by the compiled code in registers: rows shorter than,
    // as long as, and longer than a tile, rows that end inside one, and
    // rows with a last partial 32-element chunk (shorter than a chunk,
    // one longer, longer than a tile); every reducer, special values
    // included; from inputs in memory, and (a broadcast operand) from
    // tiles; and, summed by the reduction instead, the reduced value
    // also leaving as an output
    let summed = |name: &str, before: u64| {
        if sums_in_registers() {
            assert!(
                jit::summed_ranges() > before,
                "{name}: not summed in registers"
            );
        }
    };
    let reducers = [
        ("sum", Attrs::new().with("axis", 1)),
        ("mean", Attrs::new().with("axis", 1)),
        ("norm", Attrs::new().with("axis", 1).with("ord", 1)),
        ("norm", Attrs::new().with("axis", 1).with("ord", 2)),
    ];
    // (the last: two threads, and 8 MB of `tanh` streamed out beside)
    let shapes = [
        (97, 32),
        (40, 96),
        (9, 1024),
        (5, 3072),
        (2048, 1024),
        (300, 40),
        (64, 31),
        (100, 33),
        (7, 1000),
        (3, 5000),
        (4, 2079),
        (2048, 1000),
    ];
    for (k, (rows, len)) in shapes.into_iter().enumerate() {
        let n = rows * len;
        let x = NDArray::from_vec(values(n, 3), [rows, len]).unwrap();
        // mostly small values, so that most sums are finite
        let y: Vec<f32> = (0..n)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.07)
            .collect();
        let y = NDArray::from_vec(y, [rows, len]).unwrap();
        let b = NDArray::from_vec(values(len, 5), [1, len]).unwrap();
        let args = [("x", &x), ("y", &y)];
        let args_b = [("x", &x), ("y", &y), ("b", &b)];
        let d = Symbol::invoke(
            "elemwise_sub",
            &[&Symbol::var("x"), &Symbol::var("y")],
            &Attrs::new(),
        )
        .unwrap();
        // sigmoid on every other shape: it is 0.5 at 0, so a partial
        // chunk's lanes past the row, which load zeros, would change the
        // sums if the code added them
        let f = if k % 2 == 0 { "tanh" } else { "sigmoid" };
        let t = Symbol::invoke(f, &[&d], &Attrs::new()).unwrap();
        let tb = Symbol::invoke("broadcast_sub", &[&t, &Symbol::var("b")], &Attrs::new()).unwrap();
        for (op, attrs) in &reducers {
            let r = Symbol::invoke(op, &[&t], attrs).unwrap();
            let rb = Symbol::invoke(op, &[&tb], attrs).unwrap();
            let group = Symbol::group(&[r.clone(), t.clone()]);
            let graphs = [
                ("", r, &args[..], true),
                (" kept", group, &args[..], false),
                (" broadcast", rb, &args_b[..], true),
            ];
            for (how, graph, args, sunk) in graphs {
                let what = format!("{op} {attrs:?} of {f} over {rows} rows of {len}{how}");
                let (before, sums) = (jit::compiled_ranges(), jit::summed_ranges());
                let (a, _) = run(&graph, args, true, false);
                compiled(&what, before);
                // rows with a partial chunk are summed in registers only
                // when long enough to repay two calls a row
                let long =
                    len % 32 == 0 || len >= simpleop::__private::engine::fused::SUM_TAIL_MIN_ROW;
                if sunk && long {
                    summed(&what, sums);
                }
                let (b, _) = run(&graph, args, false, false);
                assert_same(&what, &a, &b);
            }
        }
    }

    let x = NDArray::random_uniform([200, 64], -1.0, 1.0, DType::F32, 1).unwrap();
    let w = NDArray::random_uniform([64, 300], -1.0, 1.0, DType::F32, 2).unwrap();
    let bias = NDArray::random_uniform([300], -1.0, 1.0, DType::F32, 3).unwrap();
    let graph = simpleop_cli::bench::dense_symbol().unwrap();
    let args = [("x", &x), ("w", &w), ("b", &bias)];
    let before = jit::compiled_ranges();
    let (a, _) = run(&graph, &args, true, false);
    compiled("dense", before);
    let (b, _) = run(&graph, &args, false, false);
    assert_same("dense", &a, &b);
}
