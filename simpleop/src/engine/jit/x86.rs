//! The x86-64 code generator behind [`super::compile`]: the planning,
//! the constant pool, the loop skeleton and the executable mapping, shared
//! by the two instruction-set backends (`avx512.rs`: 16 lanes, 32 zmm
//! registers, mask registers; `avx2.rs`: 8 lanes, 16 ymm registers, masks
//! in vectors). A backend gives the planner its register budget and
//! emits one vector's steps, a whole loop included.
//!
//! The generated function is `extern "sysv64" fn(ptrs, pool, len, sums)`:
//! `ptrs[s]` is where slot `s` lives, `pool` the program's constants, `len`
//! the element count, `sums` the 32 running f64 sums of an accumulating
//! program (untouched otherwise). It reads and writes `ptrs[s][0..len]`
//! only (the last partial vector, or an accumulating program's last
//! partial 32-element chunk, under masks, which suppress faults on masked
//! lanes), `sums` and the pool, so its memory safety rests on the loop
//! bounds below and on the caller's pointers.

use crate::engine::jit::program::JitInstr;
use crate::engine::lanes::Lane;
use crate::engine::rows::Summand;

mod avx2;
mod avx512;
mod emit;

use emit::{Regs, Step};

/// The instruction set a program is compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Backend {
    Avx512,
    Avx2,
}

/// Assigns registers: inputs load at first use, results stay in registers
/// until their last reader, and values that leave the program (read by
/// nothing later in it, or kept) are stored right after they are made.
/// `None` when the program does not fit the registers or reads a slot it
/// also overwrites before (the interpreter handles those).
fn plan(instrs: &[JitInstr<'_>], n_slots: usize, regs: Regs) -> Option<Vec<Step>> {
    let values = Values::of(instrs, n_slots)?;
    // Keeps run after the ops, so they must read final values (the
    // interpreter's store would have read an earlier one).
    if values
        .kept
        .iter()
        .map(|k| k.0)
        .chain(values.accumulated.map(|a| a.0))
        .any(|v| !values.final_value.contains(&Some(v)))
    {
        return None;
    }
    values.allocate(regs)
}

/// One op of a [`Values`] program.
struct ValueOp {
    lane: Lane,
    /// The values it reads.
    reads: Vec<usize>,
    /// Its result's value.
    value: usize,
    /// The slot its result goes to.
    slot: usize,
}

/// A program in numbered values: each slot's initial value read, and each
/// op's result, is a value of its own.
struct Values {
    ops: Vec<ValueOp>,
    /// Per slot, the value of its initial content, where an op reads it.
    loaded: Vec<Option<usize>>,
    /// Per slot, the value it holds after the program (`None`: its
    /// initial content).
    final_value: Vec<Option<usize>>,
    /// The values kept, and whether each is streamed.
    kept: Vec<(usize, bool)>,
    /// The value accumulated, and what of it.
    accumulated: Option<(usize, Summand)>,
    n_values: usize,
}

impl Values {
    /// Numbers the values of `instrs`; `None` for a slot out of range, an
    /// op of the wrong arity, or an accumulation that is not the only one
    /// or not of an op's result.
    fn of(instrs: &[JitInstr<'_>], n_slots: usize) -> Option<Values> {
        let mut v = Values {
            ops: Vec::new(),
            loaded: vec![None; n_slots],
            // per slot, the value it holds at each point
            final_value: vec![None; n_slots],
            kept: Vec::new(),
            accumulated: None,
            n_values: 0,
        };
        for ins in instrs {
            match ins {
                JitInstr::Op { lane, ins, out } => {
                    if ins.len() != lane.op.arity()
                        || *out >= n_slots
                        || ins.iter().any(|&s| s >= n_slots)
                    {
                        return None;
                    }
                    let reads = ins.iter().map(|&s| v.read(s)).collect();
                    let value = v.new_value();
                    v.final_value[*out] = Some(value);
                    v.ops.push(ValueOp {
                        lane: *lane,
                        reads,
                        value,
                        slot: *out,
                    });
                }
                JitInstr::Keep { slot, stream } => {
                    if let Some(value) = *v.final_value.get(*slot)? {
                        v.kept.push((value, *stream));
                    }
                }
                JitInstr::Accumulate { slot, summand } => {
                    // one per program, of a value an op made
                    let (None, Some(Some(value))) = (v.accumulated, v.final_value.get(*slot))
                    else {
                        return None;
                    };
                    v.accumulated = Some((*value, *summand));
                }
            }
        }
        Some(v)
    }

    fn new_value(&mut self) -> usize {
        self.n_values += 1;
        self.n_values - 1
    }

    /// The value slot `s` holds now: an initial value is loaded once per
    /// vector.
    fn read(&mut self, s: usize) -> usize {
        match self.final_value[s] {
            Some(v) => v,
            None => match self.loaded[s] {
                Some(v) => v,
                None => {
                    let v = self.new_value();
                    self.loaded[s] = Some(v);
                    v
                }
            },
        }
    }

    /// The last reader of each value (op index), for freeing registers.
    fn last_readers(&self) -> Vec<Option<usize>> {
        let mut last = vec![None; self.n_values];
        for (k, op) in self.ops.iter().enumerate() {
            for &r in &op.reads {
                last[r] = Some(k);
            }
        }
        last
    }

    /// The steps, registers assigned; `None` when they run out.
    fn allocate(&self, regs: Regs) -> Option<Vec<Step>> {
        let last = self.last_readers();
        // A result leaves the program when it is a slot's final value and
        // either kept or read by nothing (a reader outside, e.g. a row sink,
        // unless the program accumulates it for the sink).
        let summed = |v: usize| self.accumulated.filter(|a| a.0 == v).map(|a| a.1);
        let leaves = |v: usize| {
            self.final_value.contains(&Some(v))
                && (self.kept.iter().any(|k| k.0 == v)
                    || (last[v].is_none() && summed(v).is_none()))
        };
        let streamed = |v: usize| self.kept.iter().any(|&(k, stream)| k == v && stream);
        // A slot's initial value is loaded at its first use, before any write
        // to the slot (after one, the slot holds that value, not its initial).
        let mut steps = Vec::new();
        let mut reg_of = vec![usize::MAX; self.n_values];
        let regs = match self.accumulated {
            Some(_) => regs.with_sums?,
            None => regs.values,
        };
        let mut free: Vec<usize> = (0..regs).rev().collect();
        for (k, op) in self.ops.iter().enumerate() {
            let mut in_regs = Vec::new();
            for &r in &op.reads {
                if reg_of[r] == usize::MAX {
                    // an initial value: find its slot
                    let s = self.loaded.iter().position(|l| *l == Some(r))?;
                    let reg = free.pop()?;
                    reg_of[r] = reg;
                    steps.push(Step::Load { slot: s, reg });
                }
                in_regs.push(reg_of[r]);
            }
            let out_reg = free.pop()?;
            reg_of[op.value] = out_reg;
            steps.push(Step::Op {
                lane: op.lane,
                ins: in_regs,
                out: out_reg,
            });
            for &r in &op.reads {
                if last[r] == Some(k) && !free.contains(&reg_of[r]) {
                    free.push(reg_of[r]);
                }
            }
            if leaves(op.value) {
                steps.push(Step::Store {
                    slot: op.slot,
                    reg: out_reg,
                    stream: streamed(op.value),
                });
            }
            if let Some(summand) = summed(op.value) {
                steps.push(Step::Accumulate {
                    reg: out_reg,
                    summand,
                });
            }
            if last[op.value].is_none() {
                free.push(out_reg);
            }
        }
        Some(steps)
    }
}

/// Executable memory holding one compiled program, and its constants.
pub(super) struct JitCode {
    code: *mut u8,
    size: usize,
    pool: Vec<f32>,
    /// Slots the code loads from.
    pub(super) reads: Vec<usize>,
    /// Slots the code stores to.
    pub(super) writes: Vec<usize>,
}

// SAFETY: the code is immutable after construction and reentrant (it uses
// only registers and the memory its caller passes).
unsafe impl Send for JitCode {}
// SAFETY: as above.
unsafe impl Sync for JitCode {}

impl Drop for JitCode {
    fn drop(&mut self) {
        // SAFETY: `code` is the mapping of `size` bytes made in `compile`.
        unsafe { libc::munmap(self.code.cast(), self.size) };
    }
}

type Entry = unsafe extern "sysv64" fn(*const *mut f32, *const f32, usize, *mut f64);

impl JitCode {
    /// Runs the program over `len` elements.
    ///
    /// # Safety
    /// As for [`super::Compiled::run`], which also checks that `ptrs` has
    /// an entry per slot.
    /// `sums`: the 32 running sums of an accumulating program (null for
    /// the others).
    pub(super) unsafe fn run(&self, ptrs: &[*mut f32], len: usize, sums: *mut f64) {
        // SAFETY: `code` holds a function with this signature (`compile`);
        // the caller's contract covers the memory it touches.
        unsafe {
            let f: Entry = std::mem::transmute(self.code);
            f(ptrs.as_ptr(), self.pool.as_ptr(), len, sums)
        }
    }
}

/// Compiles `instrs` over `n_slots` slots, or `None` when some part is not
/// supported (the caller runs the interpreter).
pub(super) fn compile(instrs: &[JitInstr<'_>], n_slots: usize, isa: Backend) -> Option<JitCode> {
    let regs = match isa {
        Backend::Avx512 => avx512::REGS,
        Backend::Avx2 => avx2::REGS,
    };
    let steps = plan(instrs, n_slots, regs)?;
    let (mut reads, mut writes) = (Vec::new(), Vec::new());
    for st in &steps {
        match st {
            Step::Load { slot, .. } => reads.push(*slot),
            Step::Store { slot, .. } => writes.push(*slot),
            Step::Op { .. } | Step::Accumulate { .. } => {}
        }
    }
    let assembled = match isa {
        Backend::Avx512 => avx512::assemble(&steps),
        Backend::Avx2 => avx2::assemble(&steps),
    };
    let (bytes, pool) = assembled.ok()?;
    let size = bytes.len().next_multiple_of(4096);
    // SAFETY: a fresh private anonymous mapping; checked for failure.
    let code = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if code == libc::MAP_FAILED {
        return None;
    }
    let code = code.cast::<u8>();
    // SAFETY: `bytes` fits the mapping; then it becomes read + execute.
    let ok = unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), code, bytes.len());
        libc::mprotect(code.cast(), size, libc::PROT_READ | libc::PROT_EXEC) == 0
    };
    let jit = JitCode {
        code,
        size,
        pool: pool.bits.iter().map(|&b| f32::from_bits(b)).collect(),
        reads,
        writes,
    };
    ok.then_some(jit)
}
