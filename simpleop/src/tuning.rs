//! One surface for the engine's process-wide settings.
//!
//! [`Tuning`] gathers what used to be a dozen getter/setter pairs: the
//! instruction set, memory hints, half-type tables, the defaults for code
//! generation and row sinks, the parallel grain and the pool bound. The
//! environment sets the first values (the variables are listed in
//! `docs/tuning.md`); [`Tuning::update`] changes them for the whole
//! process, and [`Tuning::scoped`] for as long as a guard lives, which is
//! how tests and benchmarks compare settings. Changes take turns: each
//! reads, changes and applies the settings while no other thread does. Code generation and row sinks are also
//! per executor: [`crate::symbol::BindConfig`] takes them, defaulting to
//! the values here.

use std::marker::PhantomData;
use std::sync::{Condvar, Mutex};
use std::thread::{self, ThreadId};

use crate::engine::{fused, grain, hints, isa, jit, table};
use crate::{Isa, Result, pool};

/// The engine's process-wide settings.
///
/// ```
/// use simpleop::{Isa, Tuning};
/// # fn main() -> simpleop::Result<()> {
/// let best = Tuning::current().isa;
/// {
///     let _guard = Tuning::scoped(|t| t.isa = Isa::Scalar)?; // scalar code here
///     assert_eq!(Tuning::current().isa, Isa::Scalar);
/// }
/// assert_eq!(Tuning::current().isa, best); // restored
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tuning {
    /// The instruction set the tile loops run (`SIMPLEOP_ISA` caps it).
    pub isa: Isa,
    /// Long loops ask for their next block ahead.
    pub prefetch: bool,
    /// Single-op loops prefetch too (off by default where the hardware
    /// prefetcher already keeps up).
    pub op_loop_prefetch: bool,
    /// Outputs past the last-level cache are written with streaming stores.
    pub stream_stores: bool,
    /// The last-level cache size those decisions use, in bytes.
    pub cache_bytes: usize,
    /// f16/bf16 ops whose result depends on one input read lookup tables.
    pub half_tables: bool,
    /// A table, once built, is timed against computing, and the faster
    /// route is kept.
    pub half_table_timing: bool,
    /// Fused programs compile to register-resident code where the CPU is
    /// covered (`SIMPLEOP_CODEGEN`); the default for
    /// [`crate::symbol::BindConfig::codegen`].
    pub codegen: bool,
    /// Row reductions read fused programs' tiles instead of a stored
    /// input; the default for [`crate::symbol::BindConfig::row_sinks`].
    pub row_sinks: bool,
    /// Work units at and above which a loop is split over the thread pool
    /// (`SIMPLEOP_PARALLEL_WORK`; measured at first use otherwise). Applied
    /// values are clamped to the engine's bounds, so 0 gives the least.
    pub parallel_work: usize,
    /// Bytes the storage pool may keep for reuse (`SIMPLEOP_POOL_BYTES`).
    pub pool_bytes: usize,
}

/// Whose turn it is to change the settings, and how many times over (a
/// thread may nest guards and changes), so that threads take turns.
static TURN: Mutex<(Option<ThreadId>, usize)> = Mutex::new((None, 0));
static TURN_FREE: Condvar = Condvar::new();

/// This thread's turn, until dropped (on this thread: it is not `Send`).
struct Turn(PhantomData<*const ()>);

fn turn() -> Turn {
    let me = thread::current().id();
    let mut held = TURN.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        match held.0 {
            None => *held = (Some(me), 1),
            Some(owner) if owner == me => held.1 += 1,
            Some(_) => {
                held = TURN_FREE.wait(held).unwrap_or_else(|e| e.into_inner());
                continue;
            }
        }
        return Turn(PhantomData);
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut held = TURN.lock().unwrap_or_else(|e| e.into_inner());
        held.1 -= 1;
        if held.1 == 0 {
            held.0 = None;
            TURN_FREE.notify_one();
        }
    }
}

impl Tuning {
    /// The settings in force now.
    pub fn current() -> Tuning {
        Tuning {
            isa: isa::active(),
            prefetch: hints::prefetch_enabled(),
            op_loop_prefetch: hints::op_loop_prefetch_enabled(),
            stream_stores: hints::stream_stores_enabled(),
            cache_bytes: hints::last_level_cache_bytes(),
            half_tables: table::half_tables_enabled(),
            half_table_timing: table::half_table_timing_enabled(),
            codegen: jit::codegen_enabled(),
            row_sinks: fused::row_sinks_enabled(),
            parallel_work: grain::parallel_work(),
            pool_bytes: pool::limit(),
        }
    }

    /// Makes these the settings of the whole process. Fails, changing
    /// nothing, when this CPU cannot run `isa`.
    pub fn apply(&self) -> Result<()> {
        let _turn = turn();
        self.apply_now()
    }

    /// Changes the settings of the whole process: `change` edits the
    /// current ones, which then apply. Fails, changing nothing, when this
    /// CPU cannot run the resulting `isa`.
    pub fn update(change: impl FnOnce(&mut Tuning)) -> Result<()> {
        let _turn = turn();
        Tuning::current().changed(change).apply_now()
    }

    /// As [`Tuning::update`] until the guard drops, which restores the
    /// previous settings. Guards from different threads take turns (a
    /// second one waits for the first to drop); on one thread they nest,
    /// and changes made while one is held are undone when it drops.
    pub fn scoped(change: impl FnOnce(&mut Tuning)) -> Result<TuningGuard> {
        let turn = turn();
        let before = Tuning::current();
        before.changed(change).apply_now()?;
        Ok(TuningGuard {
            before,
            _turn: turn,
        })
    }

    fn changed(mut self, change: impl FnOnce(&mut Tuning)) -> Tuning {
        change(&mut self);
        self
    }

    fn apply_now(&self) -> Result<()> {
        isa::set_active(self.isa)?;
        hints::set_prefetch(self.prefetch);
        hints::set_op_loop_prefetch(self.op_loop_prefetch);
        hints::set_stream_stores(self.stream_stores);
        hints::set_last_level_cache_bytes(self.cache_bytes);
        table::set_half_tables(self.half_tables);
        table::set_half_table_timing(self.half_table_timing);
        jit::set_codegen(self.codegen);
        fused::set_row_sinks(self.row_sinks);
        grain::set_parallel_work(self.parallel_work);
        if pool::limit() != self.pool_bytes {
            pool::set_limit(self.pool_bytes);
        }
        Ok(())
    }
}

/// Restores the settings that were in force before [`Tuning::scoped`].
#[must_use = "the settings are restored when the guard drops"]
pub struct TuningGuard {
    before: Tuning,
    _turn: Turn,
}

impl TuningGuard {
    /// Changes the settings again while the guard is held; the drop still
    /// restores those from before [`Tuning::scoped`].
    pub fn update(&mut self, change: impl FnOnce(&mut Tuning)) -> Result<()> {
        Tuning::current().changed(change).apply_now()
    }
}

impl std::fmt::Debug for TuningGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TuningGuard")
            .field("before", &self.before)
            .finish()
    }
}

impl Drop for TuningGuard {
    fn drop(&mut self) {
        // The saved ISA ran on this CPU, so restoring it cannot fail.
        let _ = self.before.apply_now();
    }
}
