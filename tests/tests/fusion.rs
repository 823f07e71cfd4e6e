//! Elementwise fusion: TVM's FuseOps grouping rules, seen through
//! `Executor::fusion_groups`, and fused results against unfused ones.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;

use simpleop::symbol::{BindConfig, Executor, GradReq, Symbol};
use simpleop::{Attrs, DType, NDArray, Pattern, Shape};

fn op(name: &str, node: &str, inputs: &[&Symbol]) -> Symbol {
    op_with(name, node, inputs, Attrs::new())
}

fn op_with(name: &str, node: &str, inputs: &[&Symbol], attrs: Attrs) -> Symbol {
    Symbol::invoke_named(name, inputs, &attrs, Some(node)).unwrap()
}

/// Binds `sym` with random arguments of the given shapes (all asking for a
/// gradient when `train`), fusion on or off.
fn bind(
    sym: &Symbol,
    shapes: &[(&str, &[usize])],
    dtype: DType,
    fusion: bool,
    train: bool,
) -> Executor {
    let mut args = HashMap::new();
    let mut grads = HashMap::new();
    let mut reqs = HashMap::new();
    for (i, (name, dims)) in shapes.iter().enumerate() {
        let shape = Shape::new(dims.to_vec());
        let a = NDArray::random_uniform(shape.clone(), 0.1, 1.5, dtype, 7 + i as u64).unwrap();
        args.insert(name.to_string(), a);
        if train {
            grads.insert(name.to_string(), NDArray::zeros(shape, dtype));
            reqs.insert(name.to_string(), GradReq::Write);
        }
    }
    let config = BindConfig {
        fusion,
        ..BindConfig::default()
    };
    sym.bind_with(args, grads, reqs, config).unwrap()
}

fn groups(exe: &Executor) -> Vec<(Pattern, Vec<String>)> {
    exe.fusion_groups()
        .iter()
        .map(|g| (g.pattern, g.nodes.iter().map(|(n, _)| n.clone()).collect()))
        .collect()
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn bits(a: &NDArray) -> Vec<u64> {
    a.to_f64_vec().into_iter().map(f64::to_bits).collect()
}

/// `tanh(relu(exp(x)))`, the nodes named `a`, `b`, `c`.
fn exp_relu_tanh() -> Symbol {
    let x = Symbol::var("x");
    let a = op("exp", "a", &[&x]);
    let b = op("relu", "b", &[&a]);
    op("tanh", "c", &[&b])
}

/// Fused and unfused agree bit for bit: inference, then forward and
/// backward in training.
fn check_same(sym: &Symbol, shapes: &[(&str, &[usize])], dtype: DType) {
    let train = dtype.is_float();
    let mut on = bind(sym, shapes, dtype, true, train);
    let mut off = bind(sym, shapes, dtype, false, train);
    for exe in [&mut on, &mut off] {
        exe.forward(false).unwrap();
    }
    for (a, b) in on.outputs().iter().zip(off.outputs()) {
        assert_eq!(bits(a), bits(b), "inference");
    }
    for exe in [&mut on, &mut off] {
        exe.forward(train).unwrap();
        if train {
            exe.backward(&[]).unwrap();
        }
    }
    for (a, b) in on.outputs().iter().zip(off.outputs()) {
        assert_eq!(bits(a), bits(b));
    }
    for (name, _) in shapes {
        assert_eq!(
            on.grad(name).map(bits),
            off.grad(name).map(bits),
            "gradient of {name}"
        );
    }
}

/// Fused against unfused within `tol` (relative), inference and training:
/// for groups headed by a `dot`, whose per-slab products round as `gemm`
/// does for that many rows.
fn check_close(sym: &Symbol, shapes: &[(&str, &[usize])], dtype: DType, tol: f64) {
    let mut on = bind(sym, shapes, dtype, true, true);
    let mut off = bind(sym, shapes, dtype, false, true);
    let close = |a: &NDArray, b: &NDArray, what: &str| {
        for (x, y) in a.to_f64_vec().iter().zip(b.to_f64_vec()) {
            assert!(
                (x - y).abs() <= tol * y.abs().max(1.0),
                "{what}: {x} vs {y}"
            );
        }
    };
    for exe in [&mut on, &mut off] {
        exe.forward(true).unwrap();
        exe.backward(&[]).unwrap();
    }
    for (a, b) in on.outputs().iter().zip(off.outputs()) {
        close(a, b, "output");
    }
    for (name, _) in shapes {
        close(on.grad(name).unwrap(), off.grad(name).unwrap(), name);
    }
}

#[test]
fn a_chain_is_one_group_and_fusion_can_be_turned_off() {
    simpleop_ops::link();
    let c = exp_relu_tanh();
    let shapes: &[(&str, &[usize])] = &[("x", &[4, 5])];
    let exe = bind(&c, shapes, DType::F32, true, false);
    assert_eq!(
        groups(&exe),
        [(Pattern::Elementwise, names(&["a", "b", "c"]))]
    );
    let s = exe.inference_memory_stats();
    assert_eq!((s.fused_values, s.fused_bytes), (2, 2 * 20 * 4));
    let dot = exe.to_dot();
    assert!(dot.contains("subgraph cluster_0"), "{dot}");
    assert!(dot.contains("fused, no buffer"), "{dot}");
    let off = bind(&c, shapes, DType::F32, false, false);
    assert!(off.fusion_groups().is_empty());
    assert_eq!(off.inference_memory_stats().fused_values, 0);
    assert!(!off.to_dot().contains("cluster"));
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        check_same(&c, shapes, dtype);
    }
}

#[test]
fn a_diamond_fuses_into_its_post_dominator() {
    simpleop_ops::link();
    let x = Symbol::var("x");
    let a = op("exp", "a", &[&x]);
    let b = op("relu", "b", &[&a]);
    let c = op("sigmoid", "c", &[&a]);
    let d = op("elemwise_add", "d", &[&b, &c]);
    let shapes: &[(&str, &[usize])] = &[("x", &[3, 7])];
    let exe = bind(&d, shapes, DType::F32, true, false);
    assert_eq!(
        groups(&exe),
        [(Pattern::Elementwise, names(&["a", "b", "c", "d"]))]
    );
    assert_eq!(exe.inference_memory_stats().fused_values, 3);
    check_same(&d, shapes, DType::F32);
    check_same(&d, shapes, DType::BF16);
}

#[test]
fn a_node_with_consumers_but_no_common_post_dominator_stays_apart() {
    simpleop_ops::link();
    let x = Symbol::var("x");
    let a = op("exp", "a", &[&x]);
    let b = op("relu", "b", &[&a]);
    let c = op("tanh", "c", &[&a]);
    let c2 = op("negative", "c2", &[&c]);
    // Two outputs: `a` is post-dominated only by the graph's end.
    let both = Symbol::group(&[b.clone(), c2.clone()]);
    let shapes: &[(&str, &[usize])] = &[("x", &[10])];
    let exe = bind(&both, shapes, DType::F32, true, false);
    assert_eq!(groups(&exe), [(Pattern::Elementwise, names(&["c", "c2"]))]);
    check_same(&both, shapes, DType::F32);
    // An output is materialised and not fused into its consumers.
    let heads = Symbol::group(&[a.clone(), b.clone()]);
    let exe = bind(&heads, shapes, DType::F32, true, false);
    assert!(groups(&exe).is_empty(), "{:?}", groups(&exe));
}

#[test]
fn elementwise_ops_fuse_into_a_reduction_but_not_out_of_it() {
    simpleop_ops::link();
    let x = Symbol::var("x");
    let y = Symbol::var("y");
    let a = op("exp", "a", &[&x]);
    let m = op("elemwise_mul", "m", &[&a, &y]);
    let s = op_with("sum", "s", &[&m], Attrs::new().with("axis", 1));
    let r = op("relu", "r", &[&s]);
    let t = op("tanh", "t", &[&r]);
    let shapes: &[(&str, &[usize])] = &[("x", &[4, 6]), ("y", &[4, 6])];
    let exe = bind(&t, shapes, DType::F32, true, false);
    assert_eq!(
        groups(&exe),
        [
            (Pattern::Reduction, names(&["a", "m", "s"])),
            (Pattern::Elementwise, names(&["r", "t"]))
        ]
    );
    check_same(&t, shapes, DType::F32);
    check_same(&t, shapes, DType::F64);
}

/// `reduce(exp(x) * y + b)` with a row vector `b` broadcast along axis 0.
fn reduce_of_product(reduce: &str, attrs: Attrs) -> Symbol {
    let x = Symbol::var("x");
    let y = Symbol::var("y");
    let b = Symbol::var("b");
    let a = op("exp", "a", &[&x]);
    let m = op("elemwise_mul", "m", &[&a, &y]);
    let p = op("broadcast_add", "p", &[&m, &b]);
    op_with(reduce, "s", &[&p], attrs)
}

#[test]
fn a_reduction_that_keeps_axis_0_runs_slab_by_slab_behind_its_inputs() {
    simpleop_ops::link();
    // 600 rows of 1,000: several slabs, split between threads.
    let shapes: &[(&str, &[usize])] = &[("x", &[600, 1000]), ("y", &[600, 1000]), ("b", &[1000])];
    let cases = [
        ("sum", Attrs::new().with("axis", 1), 3),
        (
            "mean",
            Attrs::new().with("axis", -1).with("keepdims", true),
            3,
        ),
        ("max", Attrs::new().with("axis", 1), 3),
        // Axis 0 reduced: the product is materialised, as before.
        ("sum", Attrs::new().with("axis", 0), 2),
        ("sum", Attrs::new(), 2),
    ];
    for (reduce, attrs, fused_values) in cases {
        let sym = reduce_of_product(reduce, attrs.clone());
        let exe = bind(&sym, shapes, DType::F32, true, false);
        assert_eq!(
            exe.inference_memory_stats().fused_values,
            fused_values,
            "{reduce} {attrs:?}: values kept out of memory"
        );
        for dtype in [DType::F32, DType::F64, DType::F16] {
            check_same(&sym, shapes, dtype);
        }
    }
    // Three dimensions, a column broadcast along axis 1, and a reduction
    // over the two inner axes.
    let x = Symbol::var("x");
    let c = Symbol::var("c");
    let q = op("broadcast_mul", "q", &[&x, &c]);
    let t = op("tanh", "t", &[&q]);
    let s = op_with("sum", "s", &[&t], Attrs::new().with("axis", "(1, 2)"));
    let shapes: &[(&str, &[usize])] = &[("x", &[300, 40, 50]), ("c", &[300, 1, 50])];
    let exe = bind(&s, shapes, DType::F32, true, false);
    assert_eq!(exe.inference_memory_stats().fused_values, 2);
    check_same(&s, shapes, DType::F32);
    // A program output besides the reduction's input (an intermediate
    // that is also a graph output), bf16, a (1, C) operand, argmax, and
    // rows so long that every slab is one row.
    let x = Symbol::var("x");
    let b = Symbol::var("b");
    let a = op("exp", "a", &[&x]);
    let p = op("broadcast_mul", "p", &[&a, &b]);
    let m = op_with("argmax", "m", &[&p], Attrs::new().with("axis", 1));
    let both = Symbol::group(&[m, a]);
    for (rows, cols) in [(300, 700), (5, 200_000)] {
        let shapes: &[(&str, &[usize])] = &[("x", &[rows, cols]), ("b", &[1, cols])];
        let exe = bind(&both, shapes, DType::F32, true, false);
        assert_eq!(
            exe.inference_memory_stats().fused_values,
            1,
            "{rows}x{cols}"
        );
        for dtype in [DType::F32, DType::BF16] {
            check_same(&both, shapes, dtype);
        }
    }
    // Empty rows: nothing to slab, and the result is still the unfused one.
    let s = op_with(
        "sum",
        "s",
        &[&op("exp", "e", &[&Symbol::var("x")])],
        Attrs::new().with("axis", 1),
    );
    let shapes: &[(&str, &[usize])] = &[("x", &[4, 0])];
    check_same(&s, shapes, DType::F32);
}

#[test]
fn a_summing_reduction_over_trailing_axes_eats_its_programs_tiles() {
    simpleop_ops::link();
    // Split between threads whenever there are two rows to split.
    simpleop::Tuning::update(|t| t.parallel_work = 0).unwrap();
    let x = Symbol::var("x");
    let y = Symbol::var("y");
    let d = op("elemwise_sub", "d", &[&x, &y]);
    let q = op("square", "q", &[&d]);
    let reductions = [
        ("sum", Attrs::new().with("axis", 1)),
        ("mean", Attrs::new().with("axis", -1).with("keepdims", true)),
        ("norm", Attrs::new().with("axis", 1).with("ord", 1)),
        ("norm", Attrs::new().with("axis", 1)),
    ];
    // Rows shorter than, equal to and longer than the 32 running sums and
    // the 1,024-element tile, so that rows start and end anywhere in a
    // tile and in a lane.
    let sizes: [(usize, usize); 8] = [
        (5000, 1),
        (3000, 7),
        (1000, 31),
        (1000, 32),
        (1000, 33),
        (300, 1000),
        (100, 1024),
        (40, 5000),
    ];
    for (reduce, attrs) in &reductions {
        let s = op_with(reduce, "s", &[&q], attrs.clone());
        for (rows, cols) in sizes {
            let shapes: &[(&str, &[usize])] = &[("x", &[rows, cols]), ("y", &[rows, cols])];
            for dtype in [DType::F32, DType::F64] {
                check_same(&s, shapes, dtype);
            }
        }
    }
    // The slab route, which row sinks replace for these reductions, still
    // agrees (the switch is global: other tests running meanwhile take
    // either route, and both give the same bits).
    {
        // restored when dropped, after a panic too
        let _slabs = simpleop::Tuning::scoped(|t| t.row_sinks = false).unwrap();
        let s = op_with("sum", "s", &[&q], Attrs::new().with("axis", 1));
        for (rows, cols) in [(1000, 33), (300, 1000)] {
            let shapes: &[(&str, &[usize])] = &[("x", &[rows, cols]), ("y", &[rows, cols])];
            check_same(&s, shapes, DType::F32);
        }
    }
    // The difference also a graph output (the program keeps an output
    // besides the reduction's input), and two reduced inner axes.
    let s = op_with("sum", "s", &[&q], Attrs::new().with("axis", "(1, 2)"));
    let both = Symbol::group(&[d.clone(), s]);
    let shapes: &[(&str, &[usize])] = &[("x", &[70, 30, 33]), ("y", &[70, 30, 33])];
    for dtype in [DType::F32, DType::F64] {
        check_same(&both, shapes, dtype);
    }
}

#[test]
fn elementwise_consumers_fuse_onto_dot_and_two_complex_ops_never_merge() {
    simpleop_ops::link();
    let a = Symbol::var("a");
    let b = Symbol::var("b");
    let c = Symbol::var("c");
    let pa = op("relu", "pa", &[&a]);
    let d = op("dot", "d", &[&pa, &b]);
    let e = op("elemwise_add", "e", &[&d, &c]);
    let f = op("sigmoid", "f", &[&e]);
    let s = op("sum", "s", &[&f]);
    let shapes: &[(&str, &[usize])] = &[("a", &[3, 4]), ("b", &[4, 5]), ("c", &[3, 5])];
    let exe = bind(&s, shapes, DType::F32, true, false);
    // `pa` does not fuse into dot's input; dot's group does not fuse into
    // the reduction.
    assert_eq!(
        groups(&exe),
        [(Pattern::OutElemwiseFusable, names(&["d", "e", "f"]))]
    );
    check_same(&s, shapes, DType::F32);
    // dot feeding dot through an elementwise op: the second dot is not a
    // sink elementwise ops fuse into.
    let d2 = op(
        "dot",
        "d2",
        &[&op("tanh", "t", &[&d]), &op("transpose", "bt", &[&b])],
    );
    let shapes: &[(&str, &[usize])] = &[("a", &[3, 4]), ("b", &[4, 5])];
    let exe = bind(&d2, shapes, DType::F32, true, false);
    assert_eq!(
        groups(&exe),
        [(Pattern::OutElemwiseFusable, names(&["d", "t"]))]
    );
    check_same(&d2, shapes, DType::F64);
}

#[test]
fn a_dot_runs_slab_by_slab_ahead_of_its_elementwise_consumers() {
    // streamed however large this machine's last-level cache is
    simpleop::Tuning::update(|t| t.cache_bytes = 0).unwrap();
    simpleop_ops::link();
    // `relu(dot(a, w) + b)`: 600 rows of 700 outputs (two slabs, split
    // between threads), a row vector `b` broadcast along axis 0.
    let a = Symbol::var("a");
    let w = Symbol::var("w");
    let b = Symbol::var("b");
    let d = op("dot", "d", &[&a, &w]);
    let p = op("broadcast_add", "p", &[&d, &b]);
    let r = op("relu", "r", &[&p]);
    let shapes: &[(&str, &[usize])] = &[("a", &[600, 300]), ("w", &[300, 700]), ("b", &[700])];
    let exe = bind(&r, shapes, DType::F32, true, false);
    assert_eq!(
        groups(&exe),
        [(Pattern::OutElemwiseFusable, names(&["d", "p", "r"]))]
    );
    // The product and the sum never reach memory.
    let stats = exe.inference_memory_stats();
    assert_eq!(
        (stats.fused_values, stats.fused_bytes),
        (2, 2 * 600 * 700 * 4)
    );
    assert!(exe.to_dot().contains("fused, no buffer"));
    for dtype in [DType::F32, DType::F64, DType::F16] {
        check_same(&r, shapes, dtype);
    }
    // Training: relu's gradient reads its output, not the product, so the
    // product stays out of memory there too.
    let train = bind(&r, shapes, DType::F32, true, true);
    assert!(train.memory_stats().fused_values >= 1);
    // One elementwise consumer is enough, and `dot` of a 3-d operand
    // (flattened to rows) slabs over its axis 0.
    let t = op("tanh", "t", &[&d]);
    let cases: [&[(&str, &[usize])]; 3] = [
        &[("a", &[5, 8]), ("w", &[8, 3])],
        &[("a", &[4, 3, 8]), ("w", &[8, 6])],
        // A row longer than a slab: not slabbed, still correct.
        &[("a", &[2, 3]), ("w", &[3, 300_000])],
    ];
    for shapes in cases {
        let exe = bind(&t, shapes, DType::F32, true, false);
        let slabbed = shapes[1].1[1] < 300_000;
        assert_eq!(
            exe.inference_memory_stats().fused_values,
            usize::from(slabbed),
            "{shapes:?}"
        );
        check_same(&t, shapes, DType::F32);
    }
    // `transpose_a` mixes rows, and a product also read elsewhere must be
    // stored: both run unfused ahead of the program.
    let dt = op_with(
        "dot",
        "dt",
        &[&a, &w],
        Attrs::new().with("transpose_a", true),
    );
    let tt = op("tanh", "tt", &[&dt]);
    let shapes_t: &[(&str, &[usize])] = &[("a", &[8, 5]), ("w", &[8, 3])];
    let exe = bind(&tt, shapes_t, DType::F32, true, false);
    assert_eq!(exe.inference_memory_stats().fused_values, 0);
    check_same(&tt, shapes_t, DType::F64);
    let both = Symbol::group(&[t.clone(), d.clone()]);
    let shapes: &[(&str, &[usize])] = &[("a", &[5, 8]), ("w", &[8, 3])];
    let exe = bind(&both, shapes, DType::F32, true, false);
    assert_eq!(exe.inference_memory_stats().fused_values, 0);
    check_same(&both, shapes, DType::F32);
    // Shapes where a slab's row count makes `gemm` block the sum
    // differently from the whole product (a last slab of 64 rows with k
    // = 1,000; a last slab of one row): close, not bitwise, and the same
    // bits on any number of threads, because slabs start at fixed rows.
    type Shapes<'a> = &'a [(&'a str, &'a [usize])];
    let cases: [(Shapes, DType, f64); 4] = [
        (
            &[("a", &[8320, 1000]), ("w", &[1000, 64])],
            DType::F32,
            1e-5,
        ),
        // An output of 9.8 MB: each slab of it is streamed (the whole
        // array decides), and the last slab is partial.
        (&[("a", &[4100, 64]), ("w", &[64, 600])], DType::F32, 1e-5),
        (
            &[("a", &[4160, 1000]), ("w", &[1000, 64])],
            DType::F32,
            1e-5,
        ),
        (&[("a", &[8194, 100]), ("w", &[100, 64])], DType::F16, 2e-2),
    ];
    for (shapes, dtype, tol) in cases {
        check_close(&t, shapes, dtype, tol);
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                let mut exe = bind(&t, shapes, dtype, true, false);
                exe.forward(false).unwrap();
                bits(&exe.outputs()[0])
            })
        };
        let one = run(1);
        for threads in [2, 3] {
            assert!(
                one == run(threads),
                "{shapes:?}: 1 thread against {threads}"
            );
        }
    }
    // A product whose gradient-side reader is a member's gradient
    // (`square` reads its input) is kept for the backward pass.
    let sq = op("square", "sq", &[&d]);
    let train = bind(&sq, shapes, DType::F32, true, true);
    assert_eq!(train.memory_stats().fused_values, 0);
    check_same(&sq, shapes, DType::F64);
}

#[test]
fn broadcast_operands_are_gathered_and_shape_changes_break_groups() {
    simpleop_ops::link();
    let x = Symbol::var("x");
    let b = Symbol::var("b");
    let eb = op("exp", "eb", &[&b]);
    let s = op("broadcast_add", "s", &[&x, &eb]);
    let r = op("relu", "r", &[&s]);
    let t = op_with("_mul_scalar", "t", &[&r], Attrs::new().with("scalar", 0.5));
    let shapes: &[(&str, &[usize])] = &[("x", &[5, 3]), ("b", &[1, 3])];
    let exe = bind(&t, shapes, DType::F32, true, false);
    assert_eq!(
        groups(&exe),
        [(Pattern::Broadcast, names(&["s", "r", "t"]))]
    );
    for dtype in [DType::F32, DType::F16] {
        check_same(&t, shapes, dtype);
    }
}

#[test]
fn gradient_chains_fuse_and_match_unfused() {
    simpleop_ops::link();
    // The chain6 graph of the benchmark.
    let x = Symbol::var("x");
    let y = Symbol::var("y");
    let scalar = |v: f64| Attrs::new().with("scalar", v);
    let c = op_with("_mul_scalar", "c1", &[&x], scalar(0.5));
    let c = op_with("_plus_scalar", "c2", &[&c], scalar(1.0));
    let c = op("relu", "c3", &[&c]);
    let c = op("tanh", "c4", &[&c]);
    let c = op("elemwise_mul", "c5", &[&c, &y]);
    let c = op("elemwise_add", "c6", &[&c, &x]);
    let shapes: &[(&str, &[usize])] = &[("x", &[3000]), ("y", &[3000])];
    let train = bind(&c, shapes, DType::F32, true, true);
    let off = bind(&c, shapes, DType::F32, false, true);
    assert_eq!(groups(&train).len(), 1);
    // Training keeps what the gradients read, yet some gradients stay in
    // cache.
    let (s_on, s_off) = (train.memory_stats(), off.memory_stats());
    assert!(s_on.fused_values > 0, "{s_on:?}");
    assert!(
        s_on.planned_bytes < s_off.planned_bytes,
        "{s_on:?} vs {s_off:?}"
    );
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        check_same(&c, shapes, dtype);
    }
    simpleop::Tuning::update(|t| t.parallel_work = 0).unwrap();
    // Large enough to split over threads.
    let big: &[(&str, &[usize])] = &[("x", &[300_000]), ("y", &[300_000])];
    check_same(&c, big, DType::F32);
    check_same(&c, big, DType::BF16);
}

#[test]
fn outputs_past_the_caches_are_streamed_and_match_unfused() {
    // streamed however large this machine's last-level cache is
    simpleop::Tuning::update(|t| t.cache_bytes = 0).unwrap();
    simpleop_ops::link();
    // Outputs (and gradients) of 8 MiB and more are written with streaming
    // stores; 2^21 + 123 elements also leave a tail that is not a line.
    let x = Symbol::var("x");
    let y = Symbol::var("y");
    let c = op_with("_mul_scalar", "s1", &[&x], Attrs::new().with("scalar", 0.5));
    let c = op("tanh", "s2", &[&c]);
    let c = op("elemwise_mul", "s3", &[&c, &y]);
    let c = op("elemwise_add", "s4", &[&c, &x]);
    let n = (1 << 21) + 123;
    let shapes: &[(&str, &[usize])] = &[("x", &[n]), ("y", &[n])];
    check_same(&c, shapes, DType::F32);
    check_same(&c, shapes, DType::F64);
    // Several streamed outputs: `s2` and `s4` are also read by later ops in
    // the program (stored at once), `s5` only stored (written out during
    // the next tile).
    let s2 = op(
        "tanh",
        "t2",
        &[&op_with(
            "_mul_scalar",
            "t1",
            &[&x],
            Attrs::new().with("scalar", 0.5),
        )],
    );
    let s4 = op(
        "elemwise_add",
        "t4",
        &[&op("elemwise_mul", "t3", &[&s2, &y]), &x],
    );
    let s5 = op("square", "t5", &[&s4]);
    let g = Symbol::group(&[s2, s4, s5]);
    check_same(&g, shapes, DType::F32);
    // In training, values kept for the gradients are stored and also read
    // by later ops, whose results may take their slots (the unit test in
    // `kernel::fused` checks such stores are never deferred).
    let a = op("tanh", "u1", &[&x]);
    let e = op("exp", "u2", &[&a]);
    let neg = op_with(
        "_mul_scalar",
        "u3",
        &[&e],
        Attrs::new().with("scalar", -1.0),
    );
    let b = op("square", "u4", &[&neg]);
    check_same(&b, &[("x", &[n])], DType::F32);
    // `AddTo` gradients are read first, so they never stream: accumulate
    // twice, fused and not.
    let mut runs = Vec::new();
    for fusion in [true, false] {
        let mut args = HashMap::new();
        let mut grads = HashMap::new();
        let mut reqs = HashMap::new();
        for (i, name) in ["x", "y"].into_iter().enumerate() {
            let a = NDArray::random_uniform([n], -1.0, 1.0, DType::F32, 3 + i as u64).unwrap();
            args.insert(name.to_string(), a);
            grads.insert(name.to_string(), NDArray::ones([n], DType::F32));
            reqs.insert(name.to_string(), GradReq::Add);
        }
        let config = BindConfig {
            fusion,
            ..BindConfig::default()
        };
        let mut exe = c.bind_with(args, grads, reqs, config).unwrap();
        for _ in 0..2 {
            exe.forward(true).unwrap();
            exe.backward(&[]).unwrap();
        }
        runs.push((
            bits(&exe.outputs()[0]),
            bits(exe.grad("x").unwrap()),
            bits(exe.grad("y").unwrap()),
        ));
    }
    assert!(
        runs[0] == runs[1],
        "AddTo gradients differ fused and unfused"
    );
}

#[test]
fn gradient_chains_are_listed_and_drawn() {
    simpleop_ops::link();
    let c = exp_relu_tanh();
    let shapes: &[(&str, &[usize])] = &[("x", &[4, 5])];
    let exe = bind(&c, shapes, DType::F32, true, true);
    let back: Vec<Vec<String>> = exe
        .backward_fusion_groups()
        .iter()
        .map(|g| g.nodes.iter().map(|(n, _)| n.clone()).collect())
        .collect();
    // the gradient runs from the output back to the input
    assert_eq!(back, [names(&["c", "b", "a"])]);
    let dot = exe.to_dot();
    assert!(dot.contains("subgraph cluster_backward_0"), "{dot}");
    assert!(dot.contains("b0_0 [label=\"dc\""), "{dot}");
    assert!(dot.contains("b0_1 -> b0_2;"), "{dot}");
    // inference-only executors and fusion off have none
    assert!(
        bind(&c, shapes, DType::F32, true, false)
            .backward_fusion_groups()
            .is_empty()
    );
    let off = bind(&c, shapes, DType::F32, false, true);
    assert!(off.backward_fusion_groups().is_empty());
    assert!(!off.to_dot().contains("cluster"));
}

#[test]
fn the_benchmark_graphs_fuse_whole_and_compute_what_they_claim() {
    simpleop_ops::link();
    let x = NDArray::random_uniform([5000], -3.0, 3.0, DType::F32, 11).unwrap();
    let y = NDArray::random_uniform([5000], -3.0, 3.0, DType::F32, 12).unwrap();
    let bind_one = |s: &Symbol, args: Vec<(&str, &NDArray)>| {
        let args = args
            .into_iter()
            .map(|(n, a)| (n.to_owned(), a.clone()))
            .collect();
        s.bind(args, HashMap::new(), HashMap::new()).unwrap()
    };
    let sl1 = simpleop_cli::bench::smooth_l1_symbol().unwrap();
    let mut exe = bind_one(&sl1, vec![("x", &x)]);
    assert_eq!(exe.fusion_groups().len(), 1);
    assert_eq!(exe.fusion_groups()[0].nodes.len(), 6);
    exe.forward(false).unwrap();
    let want = simpleop::eager::invoke("smooth_l1", &[&x], &Attrs::new().with("scalar", 1.0))
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    for (g, w) in exe.outputs()[0].to_vec::<f32>().unwrap().iter().zip(&want) {
        assert!((g - w).abs() <= 1e-6 * w.abs().max(1.0), "{g} vs {w}");
    }
    let chain = simpleop_cli::bench::chain6_symbol().unwrap();
    let mut exe = bind_one(&chain, vec![("x", &x), ("y", &y)]);
    assert_eq!(exe.fusion_groups()[0].nodes.len(), 6);
    assert_eq!(exe.inference_memory_stats().fused_values, 5);
    exe.forward(false).unwrap();
    let (xv, yv) = (x.to_vec::<f32>().unwrap(), y.to_vec::<f32>().unwrap());
    for ((g, a), b) in exe.outputs()[0]
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .zip(&xv)
        .zip(&yv)
    {
        let w = (a * 0.5 + 1.0).max(0.0).tanh() * b + a;
        assert!((g - w).abs() <= 1e-5 * w.abs().max(1.0), "{g} vs {w}");
    }
    // The dense layer: 700 rows (two slabs of 256 rows), against a plain
    // loop in f64.
    let (rows, k, cols) = (700, 64, 1024);
    let xd = NDArray::random_uniform([rows, k], -1.0, 1.0, DType::F32, 13).unwrap();
    let wd = NDArray::random_uniform([k, cols], -1.0, 1.0, DType::F32, 14).unwrap();
    let bd = NDArray::random_uniform([cols], -1.0, 1.0, DType::F32, 15).unwrap();
    let dense = simpleop_cli::bench::dense_symbol().unwrap();
    let mut exe = bind_one(&dense, vec![("x", &xd), ("w", &wd), ("b", &bd)]);
    assert_eq!(exe.fusion_groups()[0].nodes.len(), 3);
    assert_eq!(exe.inference_memory_stats().fused_values, 2);
    exe.forward(false).unwrap();
    let (xv, wv, bv) = (xd.to_f64_vec(), wd.to_f64_vec(), bd.to_f64_vec());
    let got = exe.outputs()[0].to_f64_vec();
    for i in 0..rows {
        for j in 0..cols {
            let dot: f64 = (0..k).map(|t| xv[i * k + t] * wv[t * cols + j]).sum();
            let w = (dot + bv[j]).max(0.0);
            let g = got[i * cols + j];
            assert!(
                (g - w).abs() <= 1e-5 * w.abs().max(1.0),
                "({i}, {j}): {g} vs {w}"
            );
        }
    }
}

/// Counts this thread's allocations, so that tests running beside the one
/// that reads the count do not change it.
struct Counting;

thread_local! {
    static ALLOCS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn count_one() {
    // `try_with`: a thread being torn down still allocates, uncounted.
    let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
}

fn allocations_here() -> usize {
    ALLOCS.with(std::cell::Cell::get)
}

// SAFETY: forwards every call to the system allocator unchanged; the
// counter is a const-initialised thread-local `Cell` without a destructor,
// so counting allocates nothing and cannot re-enter the allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// A fused forward's per-call bookkeeping stays off the heap (a `Vec` for
/// every per-call list made 35 allocator calls per call, a third of its
/// profile on 16 elements).
#[test]
fn a_fused_forward_allocates_at_most_a_few_times() {
    simpleop_ops::link();
    let x = NDArray::random_uniform([16], -4.0, 4.0, DType::F32, 1).unwrap();
    let y = NDArray::random_uniform([16], -4.0, 4.0, DType::F32, 2).unwrap();
    let args = HashMap::from([("x".to_string(), x), ("y".to_string(), y)]);
    let config = BindConfig {
        fusion: true,
        ..BindConfig::default()
    };
    let mut exe = simpleop_cli::bench::chain6_symbol()
        .unwrap()
        .bind_with(args, HashMap::new(), HashMap::new(), config)
        .unwrap();
    assert_eq!(exe.fusion_groups().len(), 1, "chain6 is one fused group");
    exe.forward(false).unwrap();
    let before = allocations_here();
    let calls = 20;
    for _ in 0..calls {
        exe.forward(false).unwrap();
    }
    let per_call = (allocations_here() - before) as f64 / calls as f64;
    // 35 before the per-call lists went inline; 3 now (the program's
    // instruction list among them).
    assert!(per_call <= 4.0, "{per_call} allocations per fused forward");
}

/// `last(op(exp(x)))` computed eagerly, `op` with `attrs`: what the graphs
/// `exp → op → last` of the simple-form tests must give, bit for bit.
fn eager_around(x: &NDArray, op: &str, attrs: &Attrs, last: &str) -> NDArray {
    let e = simpleop::eager::invoke("exp", &[x], &Attrs::new()).unwrap();
    let e = simpleop::eager::invoke(op, &[&e], attrs).unwrap();
    simpleop::eager::invoke(last, &[&e], &Attrs::new()).unwrap()
}

/// `LeakyReLU` is a general op (prelu's `gamma`, rrelu's `mask`), but its
/// scalar types run as the elementwise `_LeakyReLU_simple` and so fuse with
/// their neighbours; prelu stays a step of its own. Fused, unfused and
/// eager agree.
#[test]
fn leaky_relu_fuses_for_its_scalar_types_only() {
    simpleop_ops::link();
    let x = Symbol::var("x");
    let a = op("exp", "a", &[&x]);
    for act in ["leaky", "elu", "selu", "gelu"] {
        let attrs = Attrs::new().with("act_type", act);
        let b = op_with("LeakyReLU", "b", &[&a], attrs.clone());
        let c = op("tanh", "c", &[&b]);
        let shapes: &[(&str, &[usize])] = &[("x", &[3, 7])];
        let exe = bind(&c, shapes, DType::F32, true, false);
        assert_eq!(
            groups(&exe),
            [(Pattern::Elementwise, names(&["a", "b", "c"]))],
            "{act}"
        );
        check_same(&c, shapes, DType::F32);
        let mut exe = exe;
        exe.forward(false).unwrap();
        let want = eager_around(exe.arg("x").unwrap(), "LeakyReLU", &attrs, "tanh");
        assert_eq!(bits(&exe.outputs()[0]), bits(&want), "{act}");
    }
    let g = Symbol::var("g");
    let attrs = Attrs::new().with("act_type", "prelu");
    let b = op_with("LeakyReLU", "b", &[&a, &g], attrs);
    let c = op("tanh", "c", &[&b]);
    let exe = bind(&c, &[("x", &[3, 7]), ("g", &[7])], DType::F32, true, false);
    assert!(
        groups(&exe)
            .iter()
            .all(|(_, nodes)| !nodes.contains(&"b".to_string()))
    );
}

/// `Activation` runs in graphs as the op its `act_type` names (its simple
/// form), which fuses and vectorises: the same bits as the eager
/// `Activation` kernel, for every type, and one group with its neighbours
/// (`softrelu`, which has no such op, fuses as `Activation` itself).
#[test]
fn activation_runs_as_the_op_it_names_with_the_same_bits() {
    for act in ["relu", "sigmoid", "tanh", "softsign", "softrelu"] {
        for dtype in [DType::F32, DType::F64] {
            let x = Symbol::var("x");
            let a = op("exp", "a", &[&x]);
            let attrs = Attrs::new().with("act_type", act);
            let b = op_with("Activation", "b", &[&a], attrs.clone());
            let c = op("negative", "c", &[&b]);
            let shapes: &[(&str, &[usize])] = &[("x", &[3, 50])];
            let mut exe = bind(&c, shapes, dtype, true, false);
            assert_eq!(groups(&exe)[0].1, names(&["a", "b", "c"]), "{act}");
            exe.forward(false).unwrap();
            let want = eager_around(exe.arg("x").unwrap(), "Activation", &attrs, "negative");
            assert_eq!(bits(&exe.outputs()[0]), bits(&want), "{act} {dtype}");
            check_same(&c, shapes, dtype);
        }
    }
}
