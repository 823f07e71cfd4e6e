//! Lookup tables for one-input kernels over f16/bf16: they return the
//! compute path's bits, they are what runs, each instruction set builds
//! and reads its own table, and the timed route keeps the faster of
//! reading and computing.
//!
//! Every test holds a `Tuning` guard: they change process-wide settings
//! (timing, the instruction set), so they take turns.

use std::sync::atomic::{AtomicUsize, Ordering};

use simpleop::__private::engine::table::{TABLE_MIN_LEN, TIMING_SAMPLE};
use simpleop::simple_op;
use simpleop::{Attrs, DType, Isa, NDArray, OpReqType, Tuning, TuningGuard, bf16, eager, f16};
use simpleop_tests::half_bits::{bits, computed, from_bits};

/// Every bit pattern of a 16-bit type, `copies` times, the i-th copy
/// rotated by `i * 7919` so that neighbours differ between copies.
fn patterns(dtype: DType, copies: usize) -> NDArray {
    let bits: Vec<u16> = (0..copies)
        .flat_map(|c| (0..=u16::MAX).map(move |b| b.wrapping_add((c * 7919) as u16)))
        .collect();
    from_bits(dtype, &bits)
}

fn to_f64(dtype: DType, b: u16) -> f64 {
    match dtype {
        DType::F16 => f16::from_bits(b).to_f64(),
        _ => bf16::from_bits(b).to_f64(),
    }
}

/// Reads every table built, even where computing is faster, and splits
/// loops at the least grain, until the guard drops.
fn tables_always_read() -> TuningGuard {
    Tuning::scoped(|t| {
        t.half_table_timing = false;
        t.parallel_work = 0;
    })
    .unwrap()
}

/// Where two bit vectors differ: (count, first index).
fn differ(a: &[u16], b: &[u16]) -> (usize, Option<usize>) {
    let first = a.iter().zip(b).position(|(x, y)| x != y);
    (a.iter().zip(b).filter(|(x, y)| x != y).count(), first)
}

#[test]
fn tables_return_the_compute_paths_bits_for_every_pattern() {
    simpleop_ops::link();
    let _tuning = tables_always_read();
    // The built-in one-input ops that call a transcendental (cheaper ones
    // compute; see `TABLE_MIN_COST`).
    let ops = [
        "sqrt", "rsqrt", "cbrt", "exp", "expm1", "log", "log1p", "log2", "log10", "sin", "cos",
        "tan", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh", "sigmoid", "erf", "gamma",
    ];
    for dtype in [DType::F16, DType::BF16] {
        // three copies: 196,608 elements, split over threads
        let x = patterns(dtype, 3);
        for op in ops {
            let want = computed(op, &x);
            // a fresh output, an existing one, and in place
            let fresh = bits(&eager::invoke(op, &[&x], &Attrs::new()).unwrap());
            assert_eq!(differ(&fresh, &want), (0, None), "{op} {dtype} fresh");
            let mut out = NDArray::full([x.size()], 7.0, dtype);
            eager::invoke_into_by_name(op, &[&x], &Attrs::new(), &mut out, OpReqType::WriteTo)
                .unwrap();
            assert_eq!(differ(&bits(&out), &want), (0, None), "{op} {dtype} write");
            let mut inplace = x.deep_copy();
            eager::invoke_inplace_by_name(op, &mut inplace, &[], &Attrs::new()).unwrap();
            assert_eq!(
                differ(&bits(&inplace), &want),
                (0, None),
                "{op} {dtype} in place"
            );
            // AddTo and Null never read the table; they still come out right
            let mut acc = NDArray::zeros([x.size()], dtype);
            eager::invoke_into_by_name(op, &[&x], &Attrs::new(), &mut acc, OpReqType::AddTo)
                .unwrap();
            // 0 + v rounds back to v, except that -0 becomes +0 and a NaN
            // may change payload
            let same_value = |a: u16, b: u16| {
                let (a, b) = (to_f64(dtype, a), to_f64(dtype, b));
                a == b || (a.is_nan() && b.is_nan())
            };
            let bad = bits(&acc)
                .iter()
                .zip(&want)
                .filter(|(a, b)| !same_value(**a, **b))
                .count();
            assert_eq!(bad, 0, "{op} {dtype} add");
            let mut null = NDArray::full([x.size()], 3.0, dtype);
            eager::invoke_into_by_name(op, &[&x], &Attrs::new(), &mut null, OpReqType::Null)
                .unwrap();
            assert!(
                null.to_f64_vec().iter().all(|&v| v == 3.0),
                "{op} {dtype} null"
            );
        }
    }
}

#[test]
fn tables_handle_every_tail_length() {
    simpleop_ops::link();
    let _tuning = tables_always_read();
    for dtype in [DType::F16, DType::BF16] {
        let x = patterns(dtype, 2);
        let all = bits(&x);
        let want = computed("tanh", &x);
        // lengths past the threshold with several remainders mod 32, split
        // over threads (odd addresses: the unit test in `kernel::table`)
        for (start, len) in [(1, TABLE_MIN_LEN), (3, TABLE_MIN_LEN + 31), (17, 70_001)] {
            let piece = from_bits(dtype, &all[start..start + len]);
            let got = bits(&eager::invoke("tanh", &[&piece], &Attrs::new()).unwrap());
            assert_eq!(
                differ(&got, &want[start..start + len]),
                (0, None),
                "{dtype} {start}+{len}"
            );
        }
    }
}

static CALLS: AtomicUsize = AtomicUsize::new(0);

/// e^x that counts its evaluations (a test-only side effect: a kernel is
/// meant to be a pure function, which is what lets the executor tabulate
/// it).
#[simple_op(name = "_test_counted_exp")]
mod counted_exp {
    use super::{CALLS, Ordering};
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T) -> T {
        CALLS.fetch_add(1, Ordering::Relaxed);
        x.exp()
    }
}

/// `x · s`, which depends on a scalar: never tabulated.
#[simple_op(name = "_test_counted_scale", scalar)]
mod counted_scale {
    use super::{CALLS, Ordering};
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T, s: T) -> T {
        CALLS.fetch_add(1, Ordering::Relaxed);
        (x * s).exp()
    }
}

/// The same e^x, declared `impure`: never tabulated.
#[simple_op(name = "_test_counted_impure", impure)]
mod counted_impure {
    use super::{CALLS, Ordering};
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T) -> T {
        CALLS.fetch_add(1, Ordering::Relaxed);
        x.exp()
    }
}

/// Breaks the contract: panics on NaN, which the table build passes it.
#[simple_op(name = "_test_panics_on_nan")]
mod panics_on_nan {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T) -> T {
        assert!(!x.is_nan(), "NaN input");
        x.exp()
    }
}

#[test]
fn a_kernel_that_panics_in_the_build_computes_instead() {
    simpleop_ops::link();
    let _tuning = tables_always_read();
    for dtype in [DType::F16, DType::BF16] {
        let x = NDArray::random_uniform([100_000], -3.0, 3.0, dtype, 8).unwrap();
        // twice: the first call's build panics (caught), the second must
        // not try again
        for _ in 0..2 {
            let got = eager::invoke("_test_panics_on_nan", &[&x], &Attrs::new()).unwrap();
            let want = eager::invoke("exp", &[&x], &Attrs::new()).unwrap();
            assert_eq!(bits(&got), bits(&want), "{dtype}");
        }
    }
}

#[test]
fn a_user_kernel_is_tabulated_once_per_half_type() {
    let _tuning = tables_always_read();
    // The only test in this binary that reads CALLS.
    let n = 100_000;
    let count = |op: &str, dtype: DType, len: usize, attrs: &Attrs| {
        let x = NDArray::random_uniform([len], -3.0, 3.0, dtype, 5).unwrap();
        let before = CALLS.load(Ordering::Relaxed);
        let y = eager::invoke(op, &[&x], attrs).unwrap();
        assert_eq!(y.size(), len);
        CALLS.load(Ordering::Relaxed) - before
    };
    let none = Attrs::new();
    let tabulates = Tuning::current().half_tables;
    for dtype in [DType::F16, DType::BF16] {
        let first = count("_test_counted_exp", dtype, n, &none);
        let second = count("_test_counted_exp", dtype, n, &none);
        if tabulates {
            // the first call builds the table (one evaluation per
            // pattern); the second only reads it
            assert_eq!((first, second), (65_536, 0), "{dtype}");
        } else {
            assert_eq!((first, second), (n, n), "{dtype}");
        }
        // a short call computes
        assert_eq!(count("_test_counted_exp", dtype, 1000, &none), 1000);
        // a kernel with a scalar computes, and so does an impure one
        let s = Attrs::from([("scalar", "0.5")]);
        assert_eq!(count("_test_counted_scale", dtype, n, &s), n, "{dtype}");
        assert_eq!(count("_test_counted_impure", dtype, n, &none), n, "{dtype}");
    }
    // f32 and f64 compute
    for dtype in [DType::F32, DType::F64] {
        assert_eq!(count("_test_counted_exp", dtype, n, &none), n, "{dtype}");
    }
}

static ISA_CALLS: AtomicUsize = AtomicUsize::new(0);

/// e^x counting its evaluations, for the per-set tables test alone.
#[simple_op(name = "_test_isa_counted_exp")]
mod isa_counted_exp {
    use super::{ISA_CALLS, Ordering};
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T) -> T {
        ISA_CALLS.fetch_add(1, Ordering::Relaxed);
        x.exp()
    }
}

#[test]
fn each_instruction_set_builds_and_reads_its_own_table() {
    // The plain and FMA forms of the vector math differ in the last bit,
    // which can survive rounding to f16/bf16: a table built under one set
    // must not serve another, and switching back must find the first
    // set's table still there (the benchmark's `--isa avx512,avx2`).
    simpleop_ops::link();
    let mut tuning = tables_always_read();
    let best = Tuning::current().isa;
    if best == Isa::Scalar {
        eprintln!("only the scalar instruction set here: nothing to switch between");
        return;
    }
    let ops = ["exp", "log", "tanh", "sigmoid", "erf", "sin"];
    let evaluations = |x: &NDArray| {
        let before = ISA_CALLS.load(Ordering::Relaxed);
        let y = eager::invoke("_test_isa_counted_exp", &[x], &Attrs::new()).unwrap();
        (ISA_CALLS.load(Ordering::Relaxed) - before, bits(&y))
    };
    for dtype in [DType::F16, DType::BF16] {
        let all: Vec<u16> = (0..=u16::MAX).collect();
        let x = from_bits(dtype, &all);
        // build every table under the best set
        tuning.update(|t| t.isa = best).unwrap();
        for op in ops {
            eager::invoke(op, &[&x], &Attrs::new()).unwrap();
        }
        let (built, best_bits) = evaluations(&x);
        assert_eq!(built, 65_536, "{dtype}: one evaluation per pattern");
        tuning.update(|t| t.isa = Isa::Scalar).unwrap();
        for op in ops {
            let got = bits(&eager::invoke(op, &[&x], &Attrs::new()).unwrap());
            let want = computed(op, &x);
            let differ = got.iter().zip(&want).filter(|(a, b)| a != b).count();
            assert_eq!(differ, 0, "{op} {dtype}: the scalar build's bits");
        }
        // the scalar set builds its own table, then reads it
        assert_eq!(evaluations(&x).0, 65_536, "{dtype}: the scalar table");
        assert_eq!(evaluations(&x).0, 0, "{dtype}: the scalar table, read");
        // and the best set still reads the table it built
        tuning.update(|t| t.isa = best).unwrap();
        let (again, again_bits) = evaluations(&x);
        assert_eq!(again, 0, "{dtype}: the best set's table, kept");
        assert_eq!(again_bits, best_bits, "{dtype}: the best set's bits");
    }
}

static TIMED_CALLS: AtomicUsize = AtomicUsize::new(0);

#[simple_op(name = "_test_timed_tanh")]
mod timed_tanh {
    use super::{Ordering, TIMED_CALLS};
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T) -> T {
        TIMED_CALLS.fetch_add(1, Ordering::Relaxed);
        x.tanh()
    }
}

#[test]
fn the_timed_route_is_decided_once_and_keeps_the_computed_bits() {
    simpleop_ops::link();
    let _tuning = Tuning::scoped(|t| {
        t.half_tables = true;
        t.half_table_timing = true;
    })
    .unwrap();
    let n = 100_000;
    for dtype in [DType::F16, DType::BF16] {
        let x = NDArray::random_uniform([n], -5.0, 5.0, dtype, 11).unwrap();
        let want = bits(&eager::invoke("tanh", &[&x], &Attrs::new()).unwrap());
        let mut counts = Vec::new();
        for _ in 0..3 {
            let before = TIMED_CALLS.load(Ordering::Relaxed);
            let y = eager::invoke("_test_timed_tanh", &[&x], &Attrs::new()).unwrap();
            counts.push(TIMED_CALLS.load(Ordering::Relaxed) - before);
            assert_eq!(bits(&y), want, "{dtype}");
        }
        // The first call builds (every pattern), times the computing route
        // (five runs over the sample) and then runs the call by the
        // winner: the table (no more calls) or computing (n calls).
        let route = counts[1];
        assert!(route == 0 || route == n, "{dtype}: {counts:?}");
        assert_eq!(counts[0], 65_536 + 5 * TIMING_SAMPLE + route, "{dtype}");
        assert_eq!(counts[2], route, "{dtype}: decided once");
    }
}
