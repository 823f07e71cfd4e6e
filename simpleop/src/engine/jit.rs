//! Register-resident code for fused elementwise programs.
//!
//! The tile interpreter ([`super::fused`]) runs a fused group op by op over
//! L1-resident tiles, so every op pays a load and a store per vector and a
//! call per tile: for `chain6` that is two thirds of its time in cache.
//! Where every op of a program declares a [`LaneOp`] (its semantics in
//! terms this module can emit: `#[simple_op(lanes = ...)]`), the program is
//! compiled instead to one loop that keeps intermediate values in vector
//! registers: per 16 elements it loads the inputs, runs all the ops and
//! stores only what leaves the program. Today that is x86-64 Linux with
//! AVX-512 or AVX2 ([`Isa::Avx512`](super::simd::Isa::Avx512),
//! [`Isa::Avx2`](super::simd::Isa::Avx2)) and f32 storage; everything else
//! runs the interpreter.
//!
//! Each lane emits the operations its op's scalar kernel performs in the
//! FMA tile loops (the same roundings, NaN and signed-zero behaviour), so
//! results are bitwise the interpreter's (any NaN for a NaN); `tests/tests/codegen.rs` checks
//! every registered op's lane against its kernel over special values and
//! sweeps, and fused programs with and without code generation.
//!
//! A program feeding a row reduction ([`super::rows`]) can also sum a
//! slot's values in registers ([`JitInstr::Accumulate`]): each vector is
//! widened to f64 and added to the running sums its elements belong to,
//! in the order [`super::rows::RowAcc`] fixes, so the sums are bitwise
//! the ones the reduction computes from stored values (AVX-512 keeps the
//! sums in registers, AVX2 in memory: it has too few registers).
//!
//! A compiled program is cached by its instructions (ops, scalars, slots),
//! so a graph run many times compiles once; the cache holds at most
//! [`CACHE_LIMIT`] programs and is emptied when full.

use std::sync::{Arc, Mutex};

use rustc_hash::FxHashMap;
use smallvec::SmallVec;

use crate::engine::isa::Isa;
use crate::engine::switch::Switch;

pub use crate::engine::lanes::{Lane, LaneOp};
pub use crate::engine::rows::Summand;
pub use program::{ACC_LANES, JitInstr};

mod program;

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod x86;

/// A compiled program; see the module docs.
pub struct Compiled {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    code: x86::JitCode,
    /// Number of slot pointers [`Compiled::run`] reads.
    slots: usize,
    /// Whether the program has a [`JitInstr::Accumulate`].
    accumulates: bool,
}

impl std::fmt::Debug for Compiled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compiled")
            .field("slots", &self.slots)
            .field("accumulates", &self.accumulates)
            .finish()
    }
}

impl Compiled {
    /// The slots the code reads (their values at the start).
    pub fn reads(&self) -> &[usize] {
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        return &self.code.reads;
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
        &[]
    }

    /// The slots the code writes (each once per element).
    pub fn writes(&self) -> &[usize] {
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        return &self.code.writes;
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
        &[]
    }

    /// Whether the program accumulates ([`JitInstr::Accumulate`]): then
    /// it runs with [`Compiled::run_accumulating`] only.
    pub fn accumulates(&self) -> bool {
        self.accumulates
    }

    /// Runs the program over `len` elements: `ptrs[s]` is where slot `s`
    /// lives for this call.
    ///
    /// # Safety
    /// `ptrs` has an entry per slot; every slot the program reads
    /// ([`Compiled::reads`]) points at `len` readable f32 and every slot
    /// it writes ([`Compiled::writes`]) at `len` writable ones, which no
    /// other live reference covers and no read slot overlaps; a slot kept
    /// with `stream` is 64-byte aligned (`vmovntps` faults otherwise); the
    /// CPU has the instruction set the program was compiled for (the
    /// active one at [`compile`]).
    pub unsafe fn run(&self, ptrs: &[*mut f32], len: usize) {
        assert!(ptrs.len() >= self.slots, "one pointer per slot");
        assert!(!self.accumulates, "an accumulating program needs its sums");
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        // SAFETY: the caller's contract, the pointer count checked above;
        // the code touches no sums.
        unsafe {
            self.code.run(ptrs, len, std::ptr::null_mut())
        }
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
        let _ = len;
    }

    /// Runs an accumulating program over `len` elements: the summand of
    /// element `j` of the accumulated slot is added to
    /// `sums[j % ACC_LANES]`, in element order, as
    /// [`crate::kernel::rows::RowAcc`] adds a row's chunks (a last
    /// partial chunk too: its sums past `len % ACC_LANES` stay as they
    /// are).
    ///
    /// # Safety
    /// As for [`Compiled::run`].
    pub unsafe fn run_accumulating(
        &self,
        ptrs: &[*mut f32],
        len: usize,
        sums: &mut [f64; ACC_LANES],
    ) {
        assert!(ptrs.len() >= self.slots, "one pointer per slot");
        assert!(self.accumulates, "a program that accumulates");
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        // SAFETY: the caller's contract, the pointer count checked above;
        // `sums` is the 32 f64 the code loads and stores.
        unsafe {
            self.code.run(ptrs, len, sums.as_mut_ptr())
        }
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
        let _ = (len, sums);
    }
}

static COMPILED_RANGES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many workers' shares of fused calls ran compiled code (at least one
/// tile of it) since the process started: how tests tell a compiled
/// program from an interpreted one, which give the same bits.
pub fn compiled_ranges() -> u64 {
    COMPILED_RANGES.load(std::sync::atomic::Ordering::Relaxed)
}

/// Counts one share for [`compiled_ranges`] (once per worker and call, not
/// per tile: the counter is shared).
pub(crate) fn count_compiled_range() {
    COMPILED_RANGES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

static SUMMED_RANGES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many workers' shares of fused calls summed a row sink's values in
/// registers ([`JitInstr::Accumulate`]) rather than storing them for the
/// sink: as [`compiled_ranges`], for the tests.
pub fn summed_ranges() -> u64 {
    SUMMED_RANGES.load(std::sync::atomic::Ordering::Relaxed)
}

/// Counts one share for [`summed_ranges`].
pub(crate) fn count_summed_range() {
    SUMMED_RANGES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// Programs kept compiled at most; see the module docs.
pub const CACHE_LIMIT: usize = 256;

type Cache = FxHashMap<Vec<u64>, Option<Arc<Compiled>>>;
static CACHE: Mutex<Option<Cache>> = Mutex::new(None);

/// The cache key: built on the stack, since it is looked up per run.
fn key(instrs: &[JitInstr<'_>], n_slots: usize, isa: Isa) -> SmallVec<[u64; 64]> {
    let mut k = SmallVec::new();
    k.push(n_slots as u64);
    k.push(isa as u64);
    for i in instrs {
        match i {
            JitInstr::Op { lane, ins, out } => {
                k.push((lane.op as u64) << 32 | u64::from(lane.scalar.to_bits()));
                k.push(ins.len() as u64);
                k.extend(ins.iter().map(|&s| s as u64));
                k.push(*out as u64);
            }
            JitInstr::Keep { slot, stream } => {
                k.push(u64::MAX - 2 * *slot as u64 - u64::from(*stream));
            }
            JitInstr::Accumulate { slot, summand } => {
                k.push(u64::MAX / 2 - 4 * *slot as u64 - *summand as u64);
            }
        }
    }
    k
}

/// The compiled form of `instrs` over `n_slots` slots for the active
/// instruction set (cached), or `None` where code generation is
/// unsupported there or the program does not fit (more live values than
/// registers): the caller interprets it then. The caller decides whether
/// to generate code at all (`BindConfig::codegen`).
pub fn compile(instrs: &[JitInstr<'_>], n_slots: usize) -> Option<Arc<Compiled>> {
    let isa = crate::engine::isa::active();
    if !generates_on(isa) {
        return None;
    }
    let k = key(instrs, n_slots, isa);
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    let cache = cache.get_or_insert_with(FxHashMap::default);
    if let Some(c) = cache.get(k.as_slice()) {
        return c.clone();
    }
    if cache.len() >= CACHE_LIMIT {
        cache.clear();
    }
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    let backend = match isa {
        Isa::Avx512 => x86::Backend::Avx512,
        _ => x86::Backend::Avx2,
    };
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    let c = x86::compile(instrs, n_slots, backend).map(|code| {
        Arc::new(Compiled {
            code,
            slots: n_slots,
            accumulates: instrs
                .iter()
                .any(|i| matches!(i, JitInstr::Accumulate { .. })),
        })
    });
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    let c = None;
    cache.insert(k.to_vec(), c.clone());
    c
}

/// Whether programs compile for `isa` here: AVX-512 or AVX2 on x86-64
/// Linux (other sets and targets interpret).
pub fn generates_on(isa: Isa) -> bool {
    cfg!(all(target_arch = "x86_64", target_os = "linux")) && matches!(isa, Isa::Avx512 | Isa::Avx2)
}

static CODEGEN: Switch = Switch::from_env(crate::environment::Var::Codegen);

/// Whether fused programs are compiled to register-resident code where
/// they can be (on unless `SIMPLEOP_CODEGEN=0` at the first use, or
/// [`set_codegen`]).
pub fn codegen_enabled() -> bool {
    CODEGEN.get()
}

/// Turns code generation on or off for later runs, which is how the
/// benchmark and the tests compare it with the interpreter.
pub fn set_codegen(on: bool) {
    CODEGEN.set(on);
}
