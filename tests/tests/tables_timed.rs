//! The timed table route (`kernel::table`, on by default): a table, once
//! built, is timed against computing, and whichever route wins is kept for
//! the op and type. A binary of its own: the other table tests turn the
//! timing off to reach the table loops on every machine.

use std::sync::atomic::{AtomicUsize, Ordering};

use simpleop::__private::engine::table::{
    TIMING_SAMPLE, half_table_timing_enabled, half_tables_enabled,
};
use simpleop::simple_op;
use simpleop::{Attrs, DType, NDArray, eager};
use simpleop_tests::half_bits::bits;

static CALLS: AtomicUsize = AtomicUsize::new(0);

#[simple_op(name = "_test_timed_tanh")]
mod timed_tanh {
    use super::{CALLS, Ordering};
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T) -> T {
        CALLS.fetch_add(1, Ordering::Relaxed);
        x.tanh()
    }
}

#[test]
fn the_timed_route_is_decided_once_and_keeps_the_computed_bits() {
    simpleop_ops::link();
    if !half_table_timing_enabled() || !half_tables_enabled() {
        eprintln!("tables or their timing turned off: nothing to check");
        return;
    }
    let n = 100_000;
    for dtype in [DType::F16, DType::BF16] {
        let x = NDArray::random_uniform([n], -5.0, 5.0, dtype, 11).unwrap();
        let want = bits(&eager::invoke("tanh", &[&x], &Attrs::new()).unwrap());
        let mut counts = Vec::new();
        for _ in 0..3 {
            let before = CALLS.load(Ordering::Relaxed);
            let y = eager::invoke("_test_timed_tanh", &[&x], &Attrs::new()).unwrap();
            counts.push(CALLS.load(Ordering::Relaxed) - before);
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
