//! Lookup tables for one-input kernels over f16/bf16 (`kernel::table`):
//! they return the compute path's bits, and they are what runs.
//!
//! A binary of its own: the instruction set stays the CPU's best here (a
//! table built under another set is not used, see `HalfTables::get`).

use std::sync::atomic::{AtomicUsize, Ordering};

use simpleop::__private::engine::table::TABLE_MIN_LEN;
use simpleop::simple_op;
use simpleop::{Attrs, DType, NDArray, OpReqType, bf16, eager, f16};
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

/// Where two bit vectors differ: (count, first index).
fn differ(a: &[u16], b: &[u16]) -> (usize, Option<usize>) {
    let first = a.iter().zip(b).position(|(x, y)| x != y);
    (a.iter().zip(b).filter(|(x, y)| x != y).count(), first)
}

#[test]
fn tables_return_the_compute_paths_bits_for_every_pattern() {
    simpleop_ops::link();
    // Read every table built, even where computing is faster.
    simpleop::__private::engine::table::set_half_table_timing(false);
    // The built-in one-input ops that call a transcendental (cheaper ones
    // compute; see `TABLE_MIN_COST`).
    let ops = [
        "sqrt", "rsqrt", "cbrt", "exp", "expm1", "log", "log1p", "log2", "log10", "sin", "cos",
        "tan", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh", "sigmoid", "erf", "gamma",
    ];
    simpleop::__private::engine::grain::set_parallel_work(
        simpleop::__private::engine::grain::PARALLEL_WORK,
    );
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
    // Read every table built, even where computing is faster.
    simpleop::__private::engine::table::set_half_table_timing(false);
    simpleop::__private::engine::grain::set_parallel_work(
        simpleop::__private::engine::grain::PARALLEL_WORK,
    );
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
    // Read every table built, even where computing is faster.
    simpleop::__private::engine::table::set_half_table_timing(false);
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
    simpleop::__private::engine::table::set_half_table_timing(false);
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
    let tabulates = simpleop::__private::engine::table::half_tables_enabled();
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
