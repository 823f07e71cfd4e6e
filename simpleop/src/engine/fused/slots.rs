//! How a program uses its slots, and what that allows: results computed
//! straight into an output, and streamed stores deferred to the next
//! tile.

use super::program::{PerSlot, TileInstr, TileProgram};
use crate::OpReqType;
use crate::engine::half_io::TileIo;

/// How a program uses each slot, and how many stores each output gets:
/// the facts `direct_slots` and `deferred_slots` decide on.
pub(super) struct SlotUses {
    /// Reads by ops (not by stores).
    reads: PerSlot<usize>,
    /// Writes by ops.
    pub(super) writes: PerSlot<usize>,
    /// Whether a forward step writes the slot.
    forward_out: PerSlot<bool>,
    /// Stores of the slot.
    stores: PerSlot<usize>,
    /// Stores into each output.
    into: PerSlot<usize>,
}

impl SlotUses {
    pub(super) fn of(prog: &TileProgram<'_>, n_outputs: usize) -> SlotUses {
        let mut u = SlotUses {
            reads: smallvec::smallvec![0; prog.slots],
            writes: smallvec::smallvec![0; prog.slots],
            forward_out: smallvec::smallvec![false; prog.slots],
            stores: smallvec::smallvec![0; prog.slots],
            into: smallvec::smallvec![0; n_outputs],
        };
        for ins in &prog.instrs {
            match ins {
                TileInstr::Forward { ins, out, .. } => {
                    ins.iter().for_each(|&i| u.reads[i] += 1);
                    u.writes[*out] += 1;
                    u.forward_out[*out] = true;
                }
                TileInstr::Backward {
                    dy, y, xs, grads, ..
                } => {
                    std::iter::once(*dy)
                        .chain(*y)
                        .chain(xs.iter().flatten().copied())
                        .for_each(|s| u.reads[s] += 1);
                    grads.iter().for_each(|&g| u.writes[g] += 1);
                }
                TileInstr::Store { slot, output, .. } => {
                    u.stores[*slot] += 1;
                    if let Some(n) = u.into.get_mut(*output) {
                        *n += 1;
                    }
                }
            }
        }
        u
    }
}

/// Per slot, the output a forward result may be computed straight into:
/// the storage type is the compute type, the slot is stored once with
/// `WriteTo`/`WriteInplace` (not into a `streamed` output) and read by no
/// op.
pub(super) fn direct_slots<S: TileIo>(
    prog: &TileProgram<'_>,
    uses: &SlotUses,
    n_inputs: usize,
    streamed: &[bool],
) -> PerSlot<Option<usize>> {
    let mut direct = smallvec::smallvec![None; prog.slots];
    if std::mem::size_of::<S>() != std::mem::size_of::<S::Compute>() {
        return direct;
    }
    for ins in &prog.instrs {
        if let TileInstr::Store { slot, output, req } = ins
            && *slot >= n_inputs
            && uses.forward_out[*slot]
            && uses.reads[*slot] == 0
            && uses.stores[*slot] == 1
            && matches!(req, OpReqType::WriteTo | OpReqType::WriteInplace)
            && !(*req == OpReqType::WriteTo && streamed.get(*output).copied().unwrap_or(false))
        {
            direct[*slot] = Some(*output);
        }
    }
    direct
}

/// Per slot, the streamed output whose store waits for the next tile: a
/// slot written by one op, read by none, and stored once, with `WriteTo`,
/// into a streamed output that no other store writes (a shared slot would
/// hold a later value by the end of the tile). It is
/// written out in slices between the next tile's ops, so that the writes
/// overlap the compute; stored at once, they stall the core after it.
pub(super) fn deferred_slots(
    prog: &TileProgram<'_>,
    uses: &SlotUses,
    n_inputs: usize,
    streamed: &[bool],
) -> PerSlot<Option<usize>> {
    let mut deferred = smallvec::smallvec![None; prog.slots];
    for ins in &prog.instrs {
        // An output stored into twice (a gradient summed over two paths)
        // must see the first store before the second adds to it.
        if let TileInstr::Store { slot, output, req } = ins
            && *slot >= n_inputs
            && uses.stores[*slot] == 1
            && uses.reads[*slot] + uses.writes[*slot] == 1
            && uses.into.get(*output) == Some(&1)
            && *req == OpReqType::WriteTo
            && streamed.get(*output).copied().unwrap_or(false)
        {
            deferred[*slot] = Some(*output);
        }
    }
    deferred
}
