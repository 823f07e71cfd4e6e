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
