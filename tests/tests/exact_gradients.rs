//! The exact gradient check over every elementwise op of the standard
//! library with a written gradient: each hand-written gradient against the
//! dual-number derivative of its own forward, in every float dtype, at
//! kinks, branch boundaries, ±0, ±inf and NaN. Every disagreement must be
//! one documented below (and at the op), and every documented one must
//! still occur.

use simpleop::gradcheck::{Disagreement, ExactCheck};
use simpleop::{DType, Device, ParamKind, Registry, simple_op};

/// |x| with a gradient that is wrong at one point: 1 at 0, where the
/// forward's derivative (`sign`) is 0.
#[simple_op(name = "_exact_wrong_abs")]
mod wrong_abs {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T) -> T {
        x.abs()
    }
    pub fn backward<T: Float>(dy: OutGrad<T>, x: In0<T>) -> T {
        if *x < T::zero() {
            -*dy
        } else if *x >= T::zero() {
            *dy
        } else {
            T::zero() // NaN
        }
    }
}

/// A documented way a written gradient departs from the derivative of its
/// forward: the ops, where, and why.
struct Known {
    ops: &'static [&'static str],
    at: fn(&Disagreement) -> bool,
    why: &'static str,
}

fn has_nan(d: &Disagreement) -> bool {
    d.inputs.iter().any(|v| v.is_nan())
}

const KNOWN: [Known; 9] = [
    Known {
        ops: &["BlockGrad"],
        at: |_| true,
        why: "stops the gradient by definition; the forward is the identity",
    },
    Known {
        ops: &["relu", "Activation"],
        at: has_nan,
        why: "passes NaN on where the output is NaN, as MXNet does (`Activation` with `act_type=relu` is relu)",
    },
    Known {
        ops: &[
            "_maximum",
            "_minimum",
            "broadcast_maximum",
            "broadcast_minimum",
        ],
        at: |d| has_nan(d) || d.inputs[0] == d.inputs[1],
        why: "MXNet's gradient: to `a` on ties (`a >= b`), where the forward returns `b`; to neither input where one is NaN",
    },
    Known {
        ops: &["_maximum_scalar", "_minimum_scalar"],
        at: |d| has_nan(d) || d.inputs[0] == 1.5,
        why: "as `_maximum`: to `x` on ties with the scalar, to nothing at NaN",
    },
    Known {
        ops: &["_power", "broadcast_power"],
        at: |d| {
            (d.input == 0 && d.inputs[1] == 0.0)
                || (d.input == 1 && d.inputs[0] == 0.0 && d.inputs[1] > 0.0)
        },
        why: "MXNet's `b · a^(b-1)` is NaN at b = 0 where `a^(b-1)` is not finite, and its `y · ln a` NaN at a = 0; but a^0 is flat in a, and 0^b (b > 0) flat in b",
    },
    Known {
        ops: &["_hypot"],
        at: |d| d.dtype == DType::BF16 && d.inputs.iter().all(|v| v.abs() < 1e-38),
        why: "in bf16 the gradient reads the output rounded to a subnormal with few bits (a/y = 1 for √2·a)",
    },
    Known {
        ops: &["Activation"],
        at: |d| d.dtype == DType::F64 && d.inputs[0] > 20.0 && d.inputs[0] < 40.0,
        why: "softrelu's forward is `x` above 20, so its derivative is 1; MXNet's gradient is the smooth function's, 1 - e^-y, within rounding of 1 in f32 only",
    },
    Known {
        ops: &["_rpower_scalar"],
        at: |d| d.dtype == DType::F16 && d.written.is_infinite(),
        why: "the gradient reads the output, stored in f16 as inf where s^x passes 65504 before the gradient does",
    },
    Known {
        ops: &["softsign"],
        at: |d| d.inputs[0].is_infinite(),
        why: "the forward x / (1 + |x|) is NaN at ±inf; the written gradient takes its limit, 0",
    },
];

/// The attributes an op needs, besides a scalar of 1.5.
fn attrs_for(name: &str) -> Vec<Vec<(&'static str, &'static str)>> {
    match name {
        "Activation" => ["relu", "sigmoid", "tanh", "softrelu", "softsign"]
            .iter()
            .map(|a| vec![("act_type", *a)])
            .collect(),
        "clip" => vec![vec![("a_min", "-1"), ("a_max", "1")]],
        _ => vec![Vec::new()],
    }
}

#[test]
fn every_written_gradient_matches_the_derivative_of_its_forward_or_is_documented() {
    simpleop_ops::link();
    let mut checked = 0;
    let mut unexplained = Vec::new();
    let mut seen = [false; KNOWN.len()];
    for entry in Registry::global().unwrap().iter() {
        let op = entry.def;
        let duals = entry.kernels(Device::Cpu).unwrap().derivative;
        if duals.is_none() || op.gradient.is_none() || op.name.starts_with("_exact_") {
            continue;
        }
        for attrs in attrs_for(op.name) {
            let mut check = ExactCheck::new(op.name);
            if matches!(op.params, ParamKind::Scalar) {
                check = check.attr("scalar", 1.5);
            }
            for (k, v) in &attrs {
                check = check.attr(k, v);
            }
            let report = check.run().unwrap_or_else(|e| panic!("{}: {e}", op.name));
            checked += 1;
            for d in &report.disagreements {
                let known = KNOWN
                    .iter()
                    .position(|k| k.ops.contains(&op.name) && (k.at)(d));
                match known {
                    Some(i) => seen[i] = true,
                    None => unexplained.push(format!("{} {attrs:?}: {d:?}", op.name)),
                }
            }
        }
    }
    assert!(checked >= 60, "only {checked} ops checked");
    assert!(
        unexplained.is_empty(),
        "{} undocumented disagreement(s):\n{}",
        unexplained.len(),
        unexplained.join("\n")
    );
    for (k, seen) in KNOWN.iter().zip(seen) {
        assert!(seen, "documented but not found: {:?} ({})", k.ops, k.why);
    }
}

#[test]
fn the_exact_check_finds_a_wrong_gradient_at_the_point_where_it_is_wrong() {
    simpleop_ops::link();
    let r = ExactCheck::new("_exact_wrong_abs").run().unwrap();
    // at ±0 (the points bisected around the kink round to it too), in
    // each of the four dtypes, and nowhere else
    for dtype in DType::FLOATS {
        assert!(r.disagreements.iter().any(|d| d.dtype == dtype), "{dtype}");
    }
    for d in &r.disagreements {
        assert_eq!(
            (d.inputs[0], d.written, d.derived),
            (0.0, 2.0, 0.0),
            "{d:?}"
        );
    }
    // `smooth_l1` at its turning points 1/σ² agrees; a σ of 2 puts them at
    // ±0.25, which the check visits.
    let r = ExactCheck::new("smooth_l1")
        .attr("scalar", 2.0)
        .run()
        .unwrap();
    assert!(r.disagreements.is_empty(), "{}", r.summary());
    assert!(r.points > 300);
    // An op the checker cannot run on duals, and one without a gradient.
    assert!(ExactCheck::new("dot").run().is_err());
    assert!(ExactCheck::new("_random_uniform").run().is_err());
    // A documented disagreement is reported as such.
    let r = ExactCheck::new("relu").dtypes(&[DType::F32]).run().unwrap();
    assert_eq!(r.disagreements.len(), 1, "{}", r.summary());
    assert!(r.disagreements[0].inputs[0].is_nan() && r.disagreements[0].written.is_nan());
    assert_eq!(r.disagreements[0].derived, 2.0);
    assert!(r.check().is_err());
}
