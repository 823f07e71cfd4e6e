//! What a fused program is: its instructions over numbered slots, the
//! checks every program passes before it runs, and the compute types
//! with tile entry points.

use smallvec::SmallVec;

use crate::kernel::{TileBackwardFn, TileFns, TileForwardFn};
use crate::{EnvArguments, Error, Float, OpReqType, Result};

/// One step of a [`TileProgram`].
#[derive(Clone, Debug)]
pub enum TileInstr<'a> {
    /// `slots[out] = op(slots[ins..])`.
    Forward {
        /// The op's tile entry points.
        fns: TileFns,
        /// The op's arguments.
        env: &'a EnvArguments,
        /// Input slots.
        ins: &'a [usize],
        /// Output slot (not one of `ins`).
        out: usize,
    },
    /// `slots[grads..] = op'(slots[dy], slots[y], slots[xs..])`; `None`
    /// reads zeros, as the single-op driver passes for values the
    /// gradient does not read.
    Backward {
        /// The op's tile entry points.
        fns: TileFns,
        /// The op's arguments.
        env: &'a EnvArguments,
        /// Slot of the output gradient.
        dy: usize,
        /// Slot of the forward output.
        y: Option<usize>,
        /// Slots of the forward inputs.
        xs: &'a [Option<usize>],
        /// One distinct slot per input gradient (scratch for unwanted ones).
        grads: &'a [usize],
    },
    /// Writes `slots[slot]` into `outputs[output]` per `req`.
    Store {
        /// The slot.
        slot: usize,
        /// The output.
        output: usize,
        /// How to write.
        req: OpReqType,
    },
}

/// A fused elementwise computation; see the module docs.
#[derive(Clone, Debug)]
pub struct TileProgram<'a> {
    /// Number of slots (at least the number of inputs).
    pub slots: usize,
    /// The instructions, run in order on every tile.
    pub instrs: Vec<TileInstr<'a>>,
    /// Work per element, in units of one cheap op (sum of the ops' costs).
    pub cost: usize,
    /// Compile the program where the CPU is covered (the executor's
    /// [`crate::symbol::BindConfig::codegen`]).
    pub codegen: bool,
}

/// Compute types with tile entry points.
pub(super) trait Compute: Float<Compute = Self> {
    /// Whether this is f32, the type code generation covers.
    const F32: bool;
    fn forward(f: &TileFns) -> TileForwardFn<Self>;
    fn backward(f: &TileFns) -> Option<TileBackwardFn<Self>>;
}
impl Compute for f32 {
    const F32: bool = true;
    fn forward(f: &TileFns) -> TileForwardFn<f32> {
        f.forward_f32
    }
    fn backward(f: &TileFns) -> Option<TileBackwardFn<f32>> {
        f.backward_f32
    }
}
impl Compute for f64 {
    const F32: bool = false;
    fn forward(f: &TileFns) -> TileForwardFn<f64> {
        f.forward_f64
    }
    fn backward(f: &TileFns) -> Option<TileBackwardFn<f64>> {
        f.backward_f64
    }
}

/// The most inputs a fused op may have (the kernels' own limit).
pub(super) const MAX_ARITY: usize = 8;

/// One entry per slot (or output), inline for the usual program sizes:
/// these are rebuilt on every call.
pub(super) type PerSlot<T> = SmallVec<[T; 16]>;

/// An invalid-argument error of the fused driver.
pub(super) fn bad(what: &str, msg: impl Into<String>) -> Error {
    Error::invalid("fused", what, msg)
}

impl TileProgram<'_> {
    /// Slot indices in range, written slots distinct from read ones, and
    /// the gradient entry points present.
    pub(super) fn check(&self, n_inputs: usize, n_outputs: usize) -> Result<()> {
        if self.slots < n_inputs {
            return Err(bad("slots", "fewer slots than inputs"));
        }
        let ok = |s: usize| s < self.slots;
        for ins in &self.instrs {
            let fine = match ins {
                TileInstr::Forward { ins, out, .. } => {
                    ok(*out) && ins.len() <= MAX_ARITY && ins.iter().all(|&i| ok(i) && i != *out)
                }
                TileInstr::Backward {
                    fns,
                    dy,
                    y,
                    xs,
                    grads,
                    ..
                } => {
                    if fns.backward_f32.is_none() || fns.backward_f64.is_none() {
                        return Err(bad("instrs", "a backward step of an op without gradient"));
                    }
                    let reads: SmallVec<[usize; 2 + MAX_ARITY]> = std::iter::once(*dy)
                        .chain(*y)
                        .chain(xs.iter().flatten().copied())
                        .collect();
                    grads.len() <= MAX_ARITY
                        && xs.len() <= MAX_ARITY
                        && reads.iter().all(|&s| ok(s))
                        && grads.iter().all(|&g| ok(g) && !reads.contains(&g))
                        && grads
                            .iter()
                            .enumerate()
                            .all(|(i, g)| !grads[..i].contains(g))
                }
                TileInstr::Store { slot, output, .. } => ok(*slot) && *output < n_outputs,
            };
            if !fine {
                return Err(bad(
                    "instrs",
                    "a slot or output index out of range, or a slot both read and written",
                ));
            }
        }
        Ok(())
    }
}
