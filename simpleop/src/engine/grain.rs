//! When splitting a loop over the rayon pool pays for itself.
//!
//! A call from outside the pool hands its work to sleeping workers and
//! waits for them, and what that costs varies by an order of magnitude
//! between machines (it is slow where waking a parked thread is slow, as
//! on many VMs). One fixed grain is therefore badly wrong on some machine:
//! split too eagerly, small ops run slower than on one thread (see
//! bench/RESULTS.md). So the grain is measured: the first time
//! a loop asks, the cost of entering the pool is timed, and a loop is split
//! when what splitting saves (half its time on one thread, with 2 threads)
//! exceeds that cost.
//!
//! Splitting never changes results (every split loop computes each output
//! exactly as the serial loop does), so the measurement can only change
//! speed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The least work (elements × [`crate::OpDef::cost`], in units of one
/// cheap elementwise op) that is ever split: what a pool entry of 3.3 µs
/// pays for. The threshold in use is [`parallel_work`].
pub const PARALLEL_WORK: usize = 1 << 17;

/// The most work ever kept on one thread, whatever the measurement.
pub const PARALLEL_WORK_MAX: usize = 1 << 23;

/// About what one unit of work takes on one core, in ns (a cheap op on
/// cache-resident f32 with 512-bit vectors).
const UNIT_NS: f64 = 0.05;

/// The grain in use; 0 until measured or set.
static GRAIN: AtomicUsize = AtomicUsize::new(0);

/// Work at and above which a loop is split over the pool: `PARALLEL_WORK`
/// ≤ it ≤ [`PARALLEL_WORK_MAX`]. [`set_parallel_work`], or
/// `SIMPLEOP_PARALLEL_WORK=<units>` at the first call, fixes it; otherwise
/// the first call from outside the pool measures it (five pool entries
/// after 300 µs pauses: about 2 ms, once), and calls from the pool's own
/// threads use [`PARALLEL_WORK`] until that has happened (a program that
/// only calls from inside `ThreadPool::install` keeps that least grain
/// unless it sets one).
pub fn parallel_work() -> usize {
    match GRAIN.load(Ordering::Relaxed) {
        0 if rayon::current_thread_index().is_some() => {
            // Entering from a worker is a cheap `join`; measuring it here
            // would say nothing about calls from outside.
            PARALLEL_WORK
        }
        0 => {
            let fixed = crate::environment::count(crate::environment::Var::ParallelWork);
            let w = fixed.map_or_else(|| from_entry_cost(pool_entry_cost()), clamp);
            // A value set meanwhile wins over this measurement.
            match GRAIN.compare_exchange(0, w, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => w,
                Err(set) => set,
            }
        }
        w => w,
    }
}

/// Whether `work` units are worth splitting: at least the least grain
/// (below it nothing is measured) and at least `parallel_work`.
pub fn worth_splitting(work: usize) -> bool {
    work >= PARALLEL_WORK && work >= parallel_work()
}

/// Fixes the grain (clamped to `PARALLEL_WORK..=PARALLEL_WORK_MAX`) for
/// every later call, instead of measuring it: for benchmarks that compare
/// machines, and for tests that must see loops split.
pub fn set_parallel_work(units: usize) {
    GRAIN.store(clamp(units), Ordering::Relaxed);
}

fn clamp(units: usize) -> usize {
    units.clamp(PARALLEL_WORK, PARALLEL_WORK_MAX)
}

/// The threshold for a pool entry costing `entry`: half the work's time
/// on one thread must exceed it.
fn from_entry_cost(entry: Duration) -> usize {
    clamp((2.0 * entry.as_nanos() as f64 / UNIT_NS) as usize)
}

/// The median time of handing two empty jobs to the pool from this
/// thread (not one of its workers) after the workers have gone to sleep,
/// as they have between eager calls a program makes.
fn pool_entry_cost() -> Duration {
    if rayon::current_num_threads() < 2 {
        return Duration::ZERO;
    }
    let mut t: Vec<Duration> = (0..5)
        .map(|_| {
            std::thread::sleep(Duration::from_micros(300));
            let start = Instant::now();
            rayon::join(|| std::hint::black_box(0), || std::hint::black_box(1));
            start.elapsed()
        })
        .collect();
    t.sort();
    t[t.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threshold_follows_the_entry_cost_within_its_bounds() {
        assert_eq!(from_entry_cost(Duration::ZERO), PARALLEL_WORK);
        assert_eq!(from_entry_cost(Duration::from_micros(2)), PARALLEL_WORK);
        // 4 µs: 2 × 4000 / 0.05 = 160,000 units.
        assert_eq!(from_entry_cost(Duration::from_micros(4)), 160_000);
        assert_eq!(from_entry_cost(Duration::from_micros(50)), 2_000_000);
        assert_eq!(from_entry_cost(Duration::from_secs(1)), PARALLEL_WORK_MAX);
        // Other tests in this binary may set it meanwhile.
        for _ in 0..2 {
            let w = parallel_work();
            assert!((PARALLEL_WORK..=PARALLEL_WORK_MAX).contains(&w), "{w}");
        }
        assert_eq!(clamp(1), PARALLEL_WORK);
        assert_eq!(clamp(usize::MAX), PARALLEL_WORK_MAX);
    }
}
