//! Runs a chain of elementwise tile kernels over cache-resident tiles:
//! the driver behind elementwise fusion in the symbolic executor.
//!
//! A [`TileProgram`] is a list of instructions over numbered tile *slots*.
//! Slot `i < inputs.len()` holds input `i`'s tile (converted from half types
//! and gathered when broadcast, as the single-op driver does). Each
//! instruction runs one op's [`TileFns`] entry point on slots, or stores a
//! slot into an output honouring its [`OpReqType`]. Values that only live
//! in slots never touch main memory.
//!
//! For half types every instruction's result is rounded to the storage type
//! before the next reads it, which is what the unfused executor does by
//! storing it: fused and unfused results are bitwise equal for all dtypes.
//!
//! One concern per file:
//! * [`program`]: the instructions, the program and its checks;
//! * [`entry`]: the entry points and their checks of the arrays;
//! * [`row_sink`]: row reductions fed from a slot;
//! * [`slots`]: how a program uses its slots, and which results go
//!   straight to an output or wait for the next tile;
//! * [`compile`]: the program's compiled code;
//! * [`typed`]: the run in one storage type, split over workers;
//! * [`range`]: a worker's range, whole or tile by tile;
//! * [`interp`]: one tile's instructions, interpreted or compiled;
//! * [`stores`]: where a tile's results go.

mod compile;
mod entry;
mod interp;
mod program;
mod range;
mod row_sink;
mod slots;
mod stores;
#[cfg(test)]
mod tests;
mod typed;

pub(crate) use entry::run_program_within;
pub use entry::{run_program, run_program_reducing};
pub use program::{TileInstr, TileProgram};
pub use row_sink::{RowSink, SUM_TAIL_MIN_ROW, row_sinks_enabled, set_row_sinks};
