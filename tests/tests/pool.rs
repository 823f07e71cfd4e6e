//! The storage pool: large eager outputs reuse released buffers, the bound
//! holds, and trimming frees everything. One test, because the pool is
//! process-wide.

use simpleop::{Attrs, DType, NDArray, eager, pool};

#[test]
fn large_outputs_are_reused_within_the_bound() {
    simpleop_ops::link();
    let n = 1 << 20; // 4 MB of f32: pooled
    let x = NDArray::random_uniform([n], -1.0, 1.0, DType::F32, 1).unwrap();
    pool::trim();
    let start = pool::stats();
    for _ in 0..5 {
        let y = eager::invoke("relu", &[&x], &Attrs::new()).unwrap();
        assert_eq!(y.shape().size(), n);
    }
    let s = pool::stats();
    assert!(s.hits >= start.hits + 4, "{start:?} -> {s:?}");
    assert!(s.cached_bytes >= n * 4 && s.cached_bytes <= s.limit);

    // Old bytes never show through: a fresh output is fully overwritten.
    let z = NDArray::zeros([n], DType::F32);
    assert!(z.to_vec::<f32>().unwrap().iter().all(|&v| v == 0.0));

    // The bound evicts the least recently released buffers.
    pool::set_limit(6 << 20);
    let a = NDArray::zeros([n], DType::F32);
    let b = NDArray::zeros([n], DType::F32);
    drop((a, b));
    let s = pool::stats();
    assert!(s.cached_bytes <= 6 << 20, "{s:?}");
    assert!(s.evictions > 0);

    pool::trim();
    assert_eq!(pool::stats().cached_bytes, 0);
    assert_eq!(pool::stats().cached_buffers, 0);
    pool::set_limit(pool::DEFAULT_LIMIT);
}

/// Apart from the test above (it asserts only what a concurrent test
/// cannot change): a request the allocator refuses is an error, and the
/// pool serves the next one as usual.
#[test]
fn refused_requests_are_errors_and_leave_the_pool_serving() {
    simpleop_ops::link();
    // 2^62 bytes: a pooled size class, but no allocator has it.
    let e = NDArray::try_zeros([1 << 40, 1 << 20], DType::F32).unwrap_err();
    assert!(
        matches!(&e, simpleop::Error::Alloc { bytes: Some(b), .. } if *b == 1 << 62),
        "{e}"
    );
    let x = NDArray::zeros([1, 1], DType::F32);
    let attrs = Attrs::new().with("shape", "(1073741824, 1073741824)");
    let e = eager::invoke("broadcast_to", &[&x], &attrs).unwrap_err();
    assert!(
        e.to_string().contains("op `broadcast_to`: cannot allocate"),
        "{e}"
    );
    let n = 1 << 18; // 1 MB of f32: pooled
    let y = NDArray::try_zeros([n], DType::F32).unwrap();
    assert!(y.to_vec::<f32>().unwrap().iter().all(|&v| v == 0.0));
    assert_eq!(y.size(), n);
}
