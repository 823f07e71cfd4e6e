//! Splitting a loop over the rayon pool in contiguous chunks, one per
//! thread, once the work pays for entering the pool.

use rayon::prelude::*;

use crate::engine::buffers::TILE;
use std::ops::Range;

use crate::engine::grain::{parallel_work, worth_splitting};

/// No thread gets less than this many elements.
pub const MIN_CHUNK: usize = 4 * TILE;

thread_local! {
    /// Set while this thread runs one chunk of a split loop.
    static IN_CHUNK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether a kernel may split its work over the rayon pool: not while
/// running one chunk of a loop that is already split (a fused step's slabs,
/// [`par_chunks_mut`]), where the other threads are busy with theirs.
pub fn may_split() -> bool {
    !IN_CHUNK.get()
}

/// Runs `f` as one chunk of a split loop (see [`may_split`]).
fn in_chunk<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            IN_CHUNK.set(self.0);
        }
    }
    let _restore = Restore(IN_CHUNK.replace(true));
    f()
}

/// Calls `f(start, chunk)` on `out` split into contiguous chunks, one per
/// thread, when the work (`out.len() × cost`, `cost` in units of one cheap
/// elementwise op per item) pays for entering the rayon pool and
/// [`may_split`]; otherwise `f(0, out)`. For blob-level
/// kernels whose output items are independent (a reduction's outputs, each
/// reading `cost` inputs), with the elementwise drivers' grain rule.
pub fn par_chunks_mut<T: Send>(out: &mut [T], cost: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    let n = out.len();
    let chunks = chunk_count(n, n.saturating_mul(cost.max(1)));
    if chunks < 2 || !may_split() {
        f(0, out);
        return;
    }
    let chunk = n.div_ceil(chunks);
    out.par_chunks_mut(chunk)
        .enumerate()
        .for_each(|(c, part)| in_chunk(|| f(c * chunk, part)));
}

/// Calls `f(start, parts)` over several outputs of `n` elements each,
/// split like [`for_each_chunk`] into disjoint contiguous chunks:
/// `parts[k]` is output `k`'s elements from `start` (`None` for an output
/// not written). For elementwise kernels with several outputs.
pub(crate) fn for_each_chunk_of<T: Send>(
    outs: Vec<Option<&mut [T]>>,
    n: usize,
    cost: usize,
    f: impl Fn(usize, Vec<Option<&mut [T]>>) + Sync,
) {
    let chunks = chunk_count(n / MIN_CHUNK, n.saturating_mul(cost.max(1)));
    if chunks < 2 || !may_split() {
        f(0, outs);
        return;
    }
    let chunk = n.div_ceil(chunks);
    let mut parts: Vec<Option<std::slice::ChunksMut<'_, T>>> = outs
        .into_iter()
        .map(|o| o.map(|s| s.chunks_mut(chunk)))
        .collect();
    let work: Vec<(usize, Vec<Option<&mut [T]>>)> = (0..n.div_ceil(chunk))
        .map(|c| {
            let next = parts
                .iter_mut()
                .map(|p| p.as_mut().and_then(Iterator::next));
            (c * chunk, next.collect())
        })
        .collect();
    work.into_par_iter()
        .for_each(|(start, parts)| in_chunk(|| f(start, parts)));
}

/// How many chunks to split `units` independent pieces of total `work`
/// into: one per thread, fewer when the work is small, and 1 when entering
/// the pool would not pay for itself.
fn chunk_count(units: usize, work: usize) -> usize {
    let threads = rayon::current_num_threads();
    if threads < 2 || units < 2 || !worth_splitting(work) {
        return 1;
    }
    threads.min(work / (parallel_work() / 2)).min(units)
}

/// Runs `f` over `0..n`, split into one contiguous chunk per thread when
/// `parallel` and the work (`n × cost`) pays for entering the pool; chunk
/// boundaries are multiples of `align`.
pub(crate) fn for_each_chunk(
    n: usize,
    cost: usize,
    parallel: bool,
    align: usize,
    f: impl Fn(Range<usize>) + Sync,
) {
    // Pieces of at least `MIN_CHUNK` elements; no grain is measured for
    // a loop that may not split anyway.
    let chunks = if parallel {
        chunk_count(n / MIN_CHUNK, n.saturating_mul(cost.max(1)))
    } else {
        1
    };
    if chunks < 2 {
        f(0..n);
        return;
    }
    let chunk = n.div_ceil(chunks).div_ceil(align) * align;
    (0..chunks).into_par_iter().for_each(|c| {
        let start = (c * chunk).min(n);
        let end = ((c + 1) * chunk).min(n);
        if start < end {
            in_chunk(|| f(start..end));
        }
    });
}

/// [`for_each_chunk`] for fallible work: every chunk runs, and the first
/// error (in completion order) is returned.
pub(crate) fn try_for_each_chunk<E: Send>(
    n: usize,
    cost: usize,
    parallel: bool,
    align: usize,
    f: impl Fn(Range<usize>) -> std::result::Result<(), E> + Sync,
) -> std::result::Result<(), E> {
    let failure: std::sync::Mutex<Option<E>> = std::sync::Mutex::new(None);
    for_each_chunk(n, cost, parallel, align, |range| {
        if let Err(e) = f(range)
            && let Ok(mut first) = failure.lock()
        {
            first.get_or_insert(e);
        }
    });
    match failure.into_inner() {
        Ok(Some(e)) => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::grain::{PARALLEL_WORK, set_parallel_work};

    #[test]
    fn par_chunks_mut_hands_out_every_item_once_with_its_index() {
        set_parallel_work(PARALLEL_WORK);
        for (n, cost) in [(300_000usize, 1usize), (5, 100_000), (3, 1), (0, 1)] {
            let mut out = vec![usize::MAX; n];
            let calls = std::sync::atomic::AtomicUsize::new(0);
            par_chunks_mut(&mut out, cost, |start, part| {
                calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                for (k, o) in part.iter_mut().enumerate() {
                    assert_eq!(*o, usize::MAX, "written twice");
                    *o = start + k;
                }
            });
            assert!(out.iter().enumerate().all(|(i, &o)| i == o), "n {n}");
            let split = calls.into_inner() > 1;
            let big = n * cost >= parallel_work() && n >= 2 && rayon::current_num_threads() > 1;
            assert_eq!(split, big, "n {n} cost {cost}");
        }
    }
}
