//! The memory planner: buffer reuse and in-place writes cut memory, and
//! never change a result. Planned and unplanned executors of random graphs
//! agree bit for bit, forward and backward.

use std::collections::HashMap;

use std::cell::Cell;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use simpleop::symbol::{BindConfig, Executor, GradReq, MemoryStats, Symbol};
use simpleop::{Attrs, DType, NDArray, OpDef, ParamKind, Pattern, Registry, Shape};
use simpleop_tests::random_graphs::{Recipe, bits, build, fixed_runner, graph_ops, recipe, run};

fn map<V>(items: Vec<(&str, V)>) -> HashMap<String, V> {
    items.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// Unary ops that may write their output over their input.
fn inplace_unary_ops() -> Vec<&'static OpDef> {
    Registry::global()
        .unwrap()
        .iter()
        .map(|o| o.def)
        .filter(|d| {
            d.num_inputs() == 1
                && d.inplace.forward.is_some()
                && matches!(d.params, ParamKind::None)
                && d.mutate_inputs.is_empty()
        })
        .collect()
}

/// In-place unary ops that keep values finite on `[0.1, 0.9]`.
const CHAIN: [&str; 6] = ["relu", "tanh", "sigmoid", "exp", "negative", "cbrt"];

#[test]
fn a_chain_of_inplace_unary_ops_needs_at_most_two_buffers() {
    simpleop_ops::link();
    let inplace: Vec<&str> = inplace_unary_ops().iter().map(|d| d.name).collect();
    for name in CHAIN {
        assert!(
            inplace.contains(&name),
            "{name} is not an in-place unary op"
        );
    }
    for n in [1, 2, 3, 5, 10, 40] {
        let x = Symbol::var("x");
        let mut y = x.clone();
        for i in 0..n {
            let name = CHAIN[i % CHAIN.len()];
            y = Symbol::invoke(name, &[&y], &Attrs::new()).unwrap();
        }
        let xv = NDArray::random_uniform([1000], 0.1, 0.9, DType::F32, 1).unwrap();
        // The planner alone: fusion would keep the whole chain in cache.
        let no_fusion = BindConfig {
            fusion: false,
            ..BindConfig::default()
        };
        let mut exe = y
            .bind_with(
                map(vec![("x", xv.clone())]),
                HashMap::new(),
                HashMap::new(),
                no_fusion,
            )
            .unwrap();
        let stats = exe.inference_memory_stats();
        assert!(stats.buffers <= 2, "chain of {n}: {stats:?}");
        // Every op after the first (which must not overwrite the argument)
        // and before the last (which writes the output array) is in place.
        assert_eq!(
            stats.inplace_writes,
            n.saturating_sub(2),
            "chain of {n}: {stats:?}"
        );
        assert_eq!(stats.planned_bytes, 4000 * stats.buffers);
        assert_eq!(stats.unplanned_bytes, 4000 * n);
        // ... and computes what the eager chain computes.
        exe.forward(false).unwrap();
        let mut want = xv.clone();
        for i in 0..n {
            let name = CHAIN[i % CHAIN.len()];
            want = simpleop::eager::invoke(name, &[&want], &Attrs::new()).unwrap();
        }
        assert_eq!(exe.outputs()[0], want);
        // Fused, only the output is materialised.
        let mut fused = y
            .bind(map(vec![("x", xv.clone())]), HashMap::new(), HashMap::new())
            .unwrap();
        let stats = fused.inference_memory_stats();
        assert_eq!(stats.fused_values, n - 1, "chain of {n}: {stats:?}");
        assert_eq!(stats.fused_bytes, 4000 * (n - 1));
        assert_eq!(stats.buffers, 1);
        fused.forward(false).unwrap();
        assert_eq!(fused.outputs()[0], want);
    }
}

/// The `graph/mlp_loss` case's graph bound for training at `batch` rows.
fn mlp_executor(batch: usize, hidden: usize, planning: bool) -> Executor {
    let line = include_str!("../conformance/mxnet-ops.jsonl")
        .lines()
        .find(|l| l.contains("\"graph/mlp_loss\""))
        .unwrap();
    let case: serde_json::Value = serde_json::from_str(line).unwrap();
    let sym = Symbol::from_json(&case["symbol"].to_string()).unwrap();
    let shapes: HashMap<String, Shape> = [
        ("x", vec![batch, 64]),
        ("w1", vec![64, hidden]),
        ("b1", vec![hidden]),
        ("w2", vec![hidden, 10]),
        ("b2", vec![10]),
        ("label", vec![batch]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), Shape::new(v)))
    .collect();
    let reqs: HashMap<String, GradReq> = ["x", "w1", "b1", "w2", "b2"]
        .into_iter()
        .map(|k| (k.to_owned(), GradReq::Write))
        .chain([("label".to_owned(), GradReq::Null)])
        .collect();
    let mut args = HashMap::new();
    let mut grads = HashMap::new();
    for (k, s) in &shapes {
        let a = if k == "label" {
            let v: Vec<f64> = (0..batch).map(|j| (j % 10) as f64).collect();
            NDArray::from_f64(&v, s.clone(), DType::F32).unwrap()
        } else {
            let seed = k.bytes().map(u64::from).sum();
            NDArray::random_normal(s.clone(), 0.0, 0.3, DType::F32, seed).unwrap()
        };
        if reqs[k] == GradReq::Write {
            grads.insert(k.clone(), NDArray::zeros(s.clone(), DType::F32));
        }
        args.insert(k.clone(), a);
    }
    let config = BindConfig {
        memory_planning: planning,
        fusion: false,
        ..BindConfig::default()
    };
    sym.bind_with(args, grads, reqs, config).unwrap()
}

#[test]
fn training_the_mlp_graph_plans_at_most_half_the_memory() {
    simpleop_ops::link();
    for (batch, hidden) in [(6, 16), (64, 128), (256, 512)] {
        let mut planned = mlp_executor(batch, hidden, true);
        let stats = planned.memory_stats();
        println!("mlp_loss batch {batch} hidden {hidden}: {stats:?}");
        assert!(
            2 * stats.planned_bytes <= stats.unplanned_bytes,
            "batch {batch} hidden {hidden}: {stats:?}"
        );
        assert!(stats.inplace_writes >= 2, "{stats:?}");
        // Planning changes nothing in the results.
        let mut unplanned = mlp_executor(batch, hidden, false);
        let none = unplanned.memory_stats();
        assert_eq!(none.planned_bytes, none.unplanned_bytes);
        assert_eq!(none.inplace_writes, 0);
        for exe in [&mut planned, &mut unplanned] {
            exe.forward(true).unwrap();
            exe.backward(&[]).unwrap();
        }
        assert_eq!(planned.outputs(), unplanned.outputs());
        for k in ["x", "w1", "b1", "w2", "b2"] {
            assert_eq!(planned.grad(k), unplanned.grad(k), "{k}");
        }
    }
}

// ---------------------------------------------------------------------------
// Random graphs
// ---------------------------------------------------------------------------

/// Same-shape elementwise ops with a gradient: what random graphs draw from.
/// Runs one recipe planned and unplanned; returns the planned stats.
fn planned_matches_unplanned(
    r: &Recipe,
    ops: &[&'static OpDef],
) -> Result<MemoryStats, TestCaseError> {
    let b = build(r, ops, false);
    let planned = BindConfig {
        fusion: false,
        ..BindConfig::default()
    };
    let unplanned = BindConfig {
        memory_planning: false,
        ..planned
    };
    let (out_p, grad_p, exe_p) = run(r, &b, planned);
    let (out_u, grad_u, exe_u) = run(r, &b, unplanned);
    prop_assert_eq!(out_p.len(), out_u.len());
    for (p, u) in out_p.iter().zip(&out_u) {
        prop_assert_eq!(bits(p), bits(u));
    }
    for (p, u) in grad_p.iter().zip(&grad_u) {
        prop_assert_eq!(p.as_ref().map(bits), u.as_ref().map(bits));
    }
    let (sp, su) = (exe_p.memory_stats(), exe_u.memory_stats());
    prop_assert!(sp.planned_bytes <= su.planned_bytes, "{:?} vs {:?}", sp, su);
    prop_assert_eq!(sp.unplanned_bytes, su.unplanned_bytes);
    Ok(sp)
}

#[test]
fn planned_and_unplanned_agree_bit_for_bit_on_1000_random_graphs() {
    simpleop_ops::link();
    let ops = graph_ops();
    assert!(ops.len() >= 40, "{} ops to draw from", ops.len());
    let mut runner = fixed_runner();
    let (graphs, inplace, reused) = (Cell::new(0), Cell::new(0), Cell::new(0));
    runner
        .run(&recipe(), |r| {
            let stats = planned_matches_unplanned(&r, &ops)?;
            graphs.set(graphs.get() + 1);
            inplace.set(inplace.get() + usize::from(stats.inplace_writes > 0));
            reused.set(reused.get() + usize::from(stats.planned_bytes < stats.unplanned_bytes));
            Ok(())
        })
        .unwrap();
    // The property ran on 1,000 graphs, and the planner did real work on
    // many of them (so the property is not vacuous).
    assert!(graphs.get() >= 1000);
    assert!(
        inplace.get() >= 200,
        "{} graphs with in-place writes",
        inplace.get()
    );
    assert!(reused.get() >= 300, "{} graphs with reuse", reused.get());
}

/// Runs one recipe with fusion on and off; returns the fused stats and
/// whether a group holds a reduction.
fn fused_matches_unfused(
    r: &Recipe,
    ops: &[&'static OpDef],
) -> Result<(MemoryStats, bool), TestCaseError> {
    let b = build(r, ops, true);
    let on = BindConfig::default();
    let off = BindConfig {
        fusion: false,
        ..on
    };
    let (out_f, grad_f, exe_f) = run(r, &b, on);
    let (out_u, grad_u, exe_u) = run(r, &b, off);
    // Half types are rounded after every fused op, so all dtypes match
    // bit for bit (the same kernels run on the same values).
    for (f, u) in out_f.iter().zip(&out_u) {
        prop_assert_eq!(bits(f), bits(u));
    }
    for (f, u) in grad_f.iter().zip(&grad_u) {
        prop_assert_eq!(f.as_ref().map(bits), u.as_ref().map(bits));
    }
    prop_assert!(exe_u.fusion_groups().is_empty());
    let (sf, su) = (exe_f.memory_stats(), exe_u.memory_stats());
    prop_assert_eq!(su.fused_values, 0);
    prop_assert_eq!(sf.unplanned_bytes, su.unplanned_bytes);
    // (Planned bytes may grow slightly: a fused step takes no in-place
    // option, which matters in tiny training graphs.)
    let into_reduction = exe_f
        .fusion_groups()
        .iter()
        .any(|g| g.pattern == Pattern::Reduction);
    Ok((sf, into_reduction))
}

#[test]
fn fused_and_unfused_agree_bit_for_bit_on_1000_random_graphs() {
    simpleop_ops::link();
    let ops = graph_ops();
    let mut runner = fixed_runner();
    let (fused, values, reduced) = (Cell::new(0), Cell::new(0), Cell::new(0));
    runner
        .run(&recipe(), |r| {
            let (s, into_reduction) = fused_matches_unfused(&r, &ops)?;
            fused.set(fused.get() + usize::from(s.fused_values > 0));
            values.set(values.get() + s.fused_values);
            reduced.set(reduced.get() + usize::from(into_reduction));
            Ok(())
        })
        .unwrap();
    // Fusion must actually happen on a good share of the graphs, and
    // group elementwise ops with a reduction on many (whether a group's
    // reduction then runs slab by slab is asserted in tests/fusion.rs).
    assert!(fused.get() > 300, "{} graphs fused", fused.get());
    assert!(
        reduced.get() > 100,
        "{} graphs grouped with a reduction",
        reduced.get()
    );
    eprintln!(
        "{} of 1000 graphs fused ({} grouped with a reduction), {} values fused away",
        fused.get(),
        reduced.get(),
        values.get()
    );
}
