//! Pooled, 64-byte aligned storage for [`crate::NDArray`].
//!
//! A fresh large output costs many times the op that fills it in page
//! faults, because the system allocator returns large blocks to the
//! kernel on free and maps new zero pages on the next allocation.
//! The pool keeps released buffers of at least [`MIN_POOLED_BYTES`] and
//! hands them out again, by size class, so a steady eager loop touches
//! memory that is already mapped. Mid-sized buffers go straight to the
//! allocator, which already recycles them cheaply. The smallest arrays'
//! storage (up to [`SMALL_CACHED_LINES`] lines) is kept whole per thread,
//! reference-counted box included, up to [`SMALL_CACHED_PER_SIZE`] of each
//! size, because two allocations cost more than a one-element op.
//!
//! **Bound and trim policy.** The pool holds at most [`limit`] bytes
//! (default [`DEFAULT_LIMIT`], or `SIMPLEOP_POOL_BYTES` read at first
//! use; [`set_limit`] changes it and trims to it). A buffer released while
//! the pool is full evicts the least recently released buffers until it
//! fits, or is freed itself if it alone exceeds the limit. [`trim`] frees
//! everything held. Size classes are spaced 1/8 of a power of two apart,
//! so a buffer is at most 12.5 % larger than asked.

use crate::environment::{self, Var};
use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

/// One cache line; storage is a vector of these so it is 64-byte aligned.
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(64))]
pub(crate) struct Line(pub(crate) [u8; 64]);

/// Buffers smaller than this bypass the pool.
pub const MIN_POOLED_BYTES: usize = 64 * 1024;
/// The default bound on the bytes the pool holds.
pub const DEFAULT_LIMIT: usize = 1 << 30;

const LINE: usize = 64;

/// Buffers of at most this many 64-byte lines are recycled per thread.
pub const SMALL_CACHED_LINES: usize = 8;
/// How many small buffers of each size a thread keeps.
pub const SMALL_CACHED_PER_SIZE: usize = 32;

thread_local! {
    /// Spare small array storage, whole (the `Arc` box included, so a
    /// one-element op allocates nothing); entry `i` holds `i + 1` lines.
    static SMALL: RefCell<[Vec<Arc<Buffer>>; SMALL_CACHED_LINES]> =
        const { RefCell::new([const { Vec::new() }; SMALL_CACHED_LINES]) };
}

/// A 64-byte aligned byte buffer from the pool, returned to it on drop.
pub(crate) struct Buffer {
    lines: Vec<Line>,
    bytes: usize,
}

impl Buffer {
    /// A buffer of zeros, or, unless `zeroed`, of unspecified contents (old
    /// bytes from the pool) for outputs that are about to be overwritten.
    /// `None` when the memory cannot be had.
    pub(crate) fn new(bytes: usize, zeroed: bool) -> Option<Self> {
        let mut lines = take(bytes.div_ceil(LINE), zeroed)?;
        poison_unless(zeroed, &mut lines);
        Some(Buffer { lines, bytes })
    }
    pub(crate) fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.lines)[..self.bytes]
    }
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.lines)[..self.bytes]
    }
}

impl Buffer {
    /// A copy, or `None` when the memory cannot be had.
    pub(crate) fn try_clone(&self) -> Option<Self> {
        let mut b = Self::new(self.bytes, false)?;
        b.bytes_mut().copy_from_slice(self.bytes());
        Some(b)
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        give(std::mem::take(&mut self.lines));
    }
}

/// Storage for `bytes` bytes, zeroed or (unless `zeroed`) with old
/// contents: a spare of this thread's when one of the size is kept.
pub(crate) fn shared(bytes: usize, zeroed: bool) -> Option<Arc<Buffer>> {
    let lines = bytes.div_ceil(LINE);
    if (1..=SMALL_CACHED_LINES).contains(&lines)
        && let Some(mut spare) = SMALL
            .try_with(|s| s.borrow_mut()[lines - 1].pop())
            .ok()
            .flatten()
        && let Some(buf) = Arc::get_mut(&mut spare)
    {
        buf.bytes = bytes;
        if zeroed {
            buf.lines.fill(Line([0; LINE]));
        }
        poison_unless(zeroed, &mut buf.lines);
        return Some(spare);
    }
    Buffer::new(bytes, zeroed).map(Arc::new)
}

/// Lets go of an array's storage: unshared small storage is kept as a
/// spare of this thread's, up to [`SMALL_CACHED_PER_SIZE`] per size.
pub(crate) fn release(mut storage: Arc<Buffer>) {
    let lines = storage.lines.len();
    if (1..=SMALL_CACHED_LINES).contains(&lines) && Arc::get_mut(&mut storage).is_some() {
        let _ = SMALL.try_with(move |s| {
            let list = &mut s.borrow_mut()[lines - 1];
            if list.len() < SMALL_CACHED_PER_SIZE {
                list.push(storage);
            }
        });
    }
}

/// What the pool holds and how it has been used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Bytes held for reuse now.
    pub cached_bytes: usize,
    /// Buffers held for reuse now.
    pub cached_buffers: usize,
    /// The bound on `cached_bytes`.
    pub limit: usize,
    /// Requests served from the pool.
    pub hits: u64,
    /// Requests of pooled size that had to allocate.
    pub misses: u64,
    /// Released buffers freed to respect the limit (their own or older ones).
    pub evictions: u64,
}

struct Pool {
    /// Free buffers by size class (in lines), most recently released last.
    free: BTreeMap<usize, Vec<Vec<Line>>>,
    /// The class of each held buffer, in release order, oldest first.
    order: VecDeque<usize>,
    stats: PoolStats,
}

static POOL: Mutex<Option<Pool>> = Mutex::new(None);

fn with_pool<R>(f: impl FnOnce(&mut Pool) -> R) -> R {
    // A panic while holding the lock cannot leave the pool inconsistent in a
    // way that matters (at worst a buffer is lost), so poisoning is ignored.
    let mut guard = POOL.lock().unwrap_or_else(|p| p.into_inner());
    let pool = guard.get_or_insert_with(|| Pool {
        free: BTreeMap::new(),
        order: VecDeque::new(),
        stats: PoolStats {
            limit: environment::count(Var::PoolBytes).unwrap_or(DEFAULT_LIMIT),
            ..PoolStats::default()
        },
    });
    f(pool)
}

/// The size class (in lines) that serves a request of `lines` lines.
fn class_of(lines: usize) -> usize {
    if lines <= 8 {
        return lines;
    }
    let shift = usize::BITS - 1 - lines.leading_zeros() - 3;
    let step = 1usize << shift;
    lines.div_ceil(step) * step
}

impl Pool {
    fn evict_oldest(&mut self) -> bool {
        while let Some(class) = self.order.pop_front() {
            // Each entry of `order` matches one buffer in `free[class]`;
            // the oldest buffer of a class is at the front of its vector.
            if let Some(list) = self.free.get_mut(&class)
                && !list.is_empty()
            {
                let buf = list.remove(0);
                if list.is_empty() {
                    self.free.remove(&class);
                }
                self.stats.cached_bytes -= buf.len() * LINE;
                self.stats.cached_buffers -= 1;
                self.stats.evictions += 1;
                return true;
            }
        }
        false
    }

    fn trim_to(&mut self, limit: usize) {
        while self.stats.cached_bytes > limit && self.evict_oldest() {}
    }
}

/// A buffer of at least `lines` lines: zeros when `zeroed`, otherwise
/// unspecified (but initialised: old data or zeros); `None` when the
/// memory cannot be had.
pub(crate) fn take(lines: usize, zeroed: bool) -> Option<Vec<Line>> {
    if lines < MIN_POOLED_BYTES / LINE {
        return fresh(lines);
    }
    let class = class_of(lines);
    let reused = with_pool(|p| {
        let list = p.free.get_mut(&class)?;
        let buf = list.pop()?;
        if list.is_empty() {
            p.free.remove(&class);
        }
        // Drop the newest `order` entry of this class (the one just taken).
        if let Some(pos) = p.order.iter().rposition(|&c| c == class) {
            p.order.remove(pos);
        }
        p.stats.cached_bytes -= buf.len() * LINE;
        p.stats.cached_buffers -= 1;
        p.stats.hits += 1;
        Some(buf)
    });
    match reused {
        Some(mut buf) => {
            if zeroed {
                buf.fill(Line([0; LINE]));
            }
            Some(buf)
        }
        None => {
            with_pool(|p| p.stats.misses += 1);
            fresh(class)
        }
    }
}

/// A new buffer of `lines` zeroed lines, or `None` when the allocator
/// refuses (or the size overflows). Zeroed by the allocator, so large ones
/// come as untouched zero pages (calloc maps them), and they ask the kernel
/// for 2 MB pages before the first touch: the page faults then map 512
/// times fewer pages, and streaming kernels later miss the TLB once per
/// 2 MB instead of once per 4 KB.
fn fresh(lines: usize) -> Option<Vec<Line>> {
    if lines == 0 {
        return Some(Vec::new());
    }
    let layout = std::alloc::Layout::array::<Line>(lines).ok()?;
    // SAFETY: `layout` has a non-zero size (`lines > 0`, a line is 64 bytes).
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<Line>();
    if ptr.is_null() {
        return None;
    }
    if layout.size() >= HUGE_PAGE_MIN_BYTES && huge_pages_enabled() {
        advise_huge_pages(ptr.cast(), layout.size());
    }
    // SAFETY: `ptr` is a live, zeroed allocation of `layout` from the
    // global allocator, so it holds `lines` initialised lines (a line is
    // plain bytes); the vector then owns it with the same layout (capacity
    // `lines` of `Line`), so it frees it correctly.
    Some(unsafe { Vec::from_raw_parts(ptr, lines, lines) })
}

/// Whether large new buffers ask for huge pages (on unless
/// `SIMPLEOP_HUGE_PAGES=0` at the first use).
fn huge_pages_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| environment::flag(Var::HugePages).unwrap_or(true))
}

/// `madvise(MADV_HUGEPAGE)` over the whole pages of `ptr..ptr + bytes`:
/// advice only, so failure (a kernel without transparent huge pages) is
/// harmless and ignored.
fn advise_huge_pages(ptr: *mut u8, bytes: usize) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: `sysconf` only reads a system constant.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .ok()
            .filter(|&p| p > 0)
            .unwrap_or(4096);
        let start = ptr as usize;
        let from = start.next_multiple_of(page);
        let to = (start + bytes) / page * page;
        if to > from {
            // SAFETY: `from..to` is page-aligned and inside the caller's
            // allocation; MADV_HUGEPAGE changes how the kernel backs those
            // pages, never their contents or their mapping.
            unsafe {
                libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (ptr, bytes);
}

/// Buffers of at least this size ask for huge pages (see `fresh`): glibc
/// maps every request this large on its own (its mmap threshold grows to
/// 32 MiB at most), so the advice never lands on heap memory that smaller
/// allocations reuse later.
pub const HUGE_PAGE_MIN_BYTES: usize = 32 << 20;

/// Gives a buffer back for reuse (or frees it, per the trim policy).
pub(crate) fn give(buf: Vec<Line>) {
    let bytes = buf.len() * LINE;
    if bytes < MIN_POOLED_BYTES || class_of(buf.len()) != buf.len() {
        return;
    }
    with_pool(|p| {
        if bytes > p.stats.limit {
            p.stats.evictions += 1;
            return;
        }
        p.trim_to(p.stats.limit - bytes);
        p.order.push_back(buf.len());
        p.stats.cached_bytes += bytes;
        p.stats.cached_buffers += 1;
        p.free.entry(buf.len()).or_default().push(buf);
    });
}

/// The pool's current statistics.
pub fn stats() -> PoolStats {
    with_pool(|p| p.stats)
}

/// The bound on the bytes the pool holds.
pub fn limit() -> usize {
    with_pool(|p| p.stats.limit)
}

/// Sets the bound and frees the least recently released buffers until
/// the pool is within it. A limit of 0 disables pooling.
pub fn set_limit(bytes: usize) {
    with_pool(|p| {
        p.stats.limit = bytes;
        p.trim_to(bytes);
    });
}

/// Frees every buffer the pool holds, and the calling thread's small ones.
pub fn trim() {
    with_pool(|p| p.trim_to(0));
    let _ = SMALL.try_with(|s| s.borrow_mut().iter_mut().for_each(Vec::clear));
}

static POISON: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Turns poisoning on (`true`) or off for this process: storage handed
/// out for overwriting (`WriteTo` outputs) is filled with `0xff` bytes
/// instead of holding old data, which is NaN in every float dtype. A
/// kernel that skips elements then shows NaN there, and fails a check that
/// would pass by luck on zeros or old data. Costs one fill per output.
/// `SIMPLEOP_POISON=1` turns it on at start.
pub fn set_poison(on: bool) {
    POISON.store(usize::from(on), std::sync::atomic::Ordering::Relaxed);
}

/// Whether poisoning is on (see [`set_poison`]).
pub fn poison() -> bool {
    static FROM_ENV: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let env = *FROM_ENV.get_or_init(|| environment::text(Var::Poison).is_some_and(|v| v == "1"));
    env || POISON.load(std::sync::atomic::Ordering::Relaxed) > 0
}

/// Poisoning for as long as the guard lives; guards nest.
pub struct PoisonGuard(());

impl PoisonGuard {
    /// Turns poisoning on until the guard is dropped.
    pub fn hold() -> PoisonGuard {
        POISON.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        PoisonGuard(())
    }
}

impl Drop for PoisonGuard {
    fn drop(&mut self) {
        let _ = POISON.fetch_update(
            std::sync::atomic::Ordering::Relaxed,
            std::sync::atomic::Ordering::Relaxed,
            |n| n.checked_sub(1),
        );
    }
}

/// Fills storage for overwriting with `0xff` when poisoning is on.
fn poison_unless(zeroed: bool, lines: &mut [Line]) {
    if !zeroed && poison() {
        lines.fill(Line([0xff; LINE]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_storage_is_reused_per_thread_and_zeroed_on_request() {
        let mut a = shared(3 * LINE - 5, false).unwrap();
        Arc::get_mut(&mut a).unwrap().bytes_mut()[5] = 7;
        let ptr = a.bytes().as_ptr();
        release(a);
        let b = shared(3 * LINE, true).unwrap();
        assert_eq!(b.bytes().as_ptr(), ptr, "the same buffer comes back");
        assert_eq!(b.bytes().len(), 3 * LINE, "with the new length");
        assert!(b.bytes().iter().all(|&x| x == 0));
        // shared storage is not kept: another handle still reads it
        let other = Arc::clone(&b);
        release(b);
        assert_eq!(SMALL.with(|s| s.borrow()[2].len()), 0);
        release(other);
        assert_eq!(SMALL.with(|s| s.borrow()[2].len()), 1);
        // bounded: past the per-size limit, storage goes back to the allocator
        let many: Vec<_> = (0..SMALL_CACHED_PER_SIZE + 5)
            .map(|_| shared(1, false).unwrap())
            .collect();
        many.into_iter().for_each(release);
        assert_eq!(SMALL.with(|s| s.borrow()[0].len()), SMALL_CACHED_PER_SIZE);
        trim();
        assert_eq!(SMALL.with(|s| s.borrow()[0].len()), 0);
    }

    #[test]
    fn large_fresh_buffers_are_zeroed_and_back_their_whole_length() {
        // Past the huge-page threshold, and not a whole number of pages.
        let lines = (HUGE_PAGE_MIN_BYTES + 3 * 4096 + 2 * LINE) / LINE;
        let mut buf = fresh(lines).unwrap();
        assert_eq!(buf.len(), lines);
        assert!(buf.iter().all(|l| l.0 == [0; LINE]));
        let last = buf.len() - 1;
        buf[last].0[LINE - 1] = 9;
        buf[0].0[0] = 1;
        assert_eq!((buf[0].0[0], buf[last].0[LINE - 1]), (1, 9));
        // freed through the global allocator (valgrind checks that the
        // allocation and the free match)
        drop(buf);
        assert!(fresh(3).unwrap().iter().all(|l| l.0 == [0; LINE]));
    }

    #[test]
    fn sizes_past_the_address_space_or_the_allocator_are_none() {
        assert!(Buffer::new(usize::MAX, true).is_none());
        assert!(Buffer::new(usize::MAX / 2, false).is_none());
        // Representable, but far beyond any machine: the allocator says no.
        assert!(Buffer::new(1 << 60, true).is_none());
        assert!(shared(1 << 60, false).is_none());
        assert_eq!(Buffer::new(0, true).map(|b| b.bytes().len()), Some(0));
    }

    #[test]
    fn classes_cover_requests_with_bounded_waste() {
        for lines in 1..100_000 {
            let c = class_of(lines);
            assert!(c >= lines);
            assert!(c as f64 <= lines as f64 * 1.125 + 1.0, "{lines} -> {c}");
            assert_eq!(class_of(c), c, "classes are fixed points");
        }
    }
}
