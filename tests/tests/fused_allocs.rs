//! A fused forward's per-call bookkeeping stays off the heap: with a `Vec`
//! for every per-call list, a six-op fused forward made 35 allocator calls,
//! a third of its profile on 16 elements.
//!
//! Its own test binary, with one test, because it counts the process's
//! allocations.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use simpleop::symbol::BindConfig;
use simpleop::{DType, NDArray, bench};

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; the
// counter is a relaxed atomic and allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
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
    let mut exe = bench::chain6_symbol()
        .unwrap()
        .bind_with(args, HashMap::new(), HashMap::new(), config)
        .unwrap();
    assert_eq!(exe.fusion_groups().len(), 1, "chain6 is one fused group");
    exe.forward(false).unwrap();
    let before = ALLOCS.load(Relaxed);
    let calls = 20;
    for _ in 0..calls {
        exe.forward(false).unwrap();
    }
    let per_call = (ALLOCS.load(Relaxed) - before) as f64 / calls as f64;
    // 35 before the per-call lists went inline; 3 now (the program's
    // instruction list among them).
    assert!(per_call <= 4.0, "{per_call} allocations per fused forward");
}
