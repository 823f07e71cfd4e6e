//! The instructions of a fused program to compile.

pub use crate::engine::lanes::Lane;
use crate::engine::rows::Summand;

/// Running f64 sums per row chunk: element `p` of a row goes to sum
/// `p % ACC_LANES`, the order `crate::kernel::rows` fixes.
pub const ACC_LANES: usize = crate::engine::rows::LANES;

/// One instruction of a program to compile.
#[derive(Clone, Debug)]
pub enum JitInstr<'a> {
    /// `slots[out] = lane(slots[ins..])`.
    Op {
        /// The operation.
        lane: Lane,
        /// Input slots.
        ins: &'a [usize],
        /// Output slot.
        out: usize,
    },
    /// A read of `slot` after the ops (a store, or a reader outside the
    /// program): its last value must reach memory.
    Keep {
        /// The slot.
        slot: usize,
        /// Write it with non-temporal stores (an output past the caches,
        /// whose every full vector is 64-byte aligned; the caller fences).
        stream: bool,
    },
    /// After the ops, adds `summand(slot)` of every element to the running
    /// sums `Compiled::run_accumulating` is given (the slot is stored
    /// only if also kept): how a row reduction fed by the program sums its
    /// input in registers. At most one per program, of a value an op
    /// makes; other programs do not compile.
    Accumulate {
        /// The slot (an op's result).
        slot: usize,
        /// What is added.
        summand: Summand,
    },
}
