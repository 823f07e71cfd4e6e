//! The register-resident code of a program (see [`jit`]), where every
//! step has a lane form and the CPU is one the generator covers.

use std::sync::Arc;

use smallvec::SmallVec;

use super::program::{Compute, TileInstr, TileProgram};
use super::row_sink::{RowSink, SUM_TAIL_MIN_ROW};
use crate::engine::half_io::TileIo;
use crate::engine::isa::active;
use crate::engine::jit;
use crate::engine::rows::LANES as ROW_LANES;

/// The compiled code for a run in storage type `S` (f32 only), given the
/// slots it streams out (`streams`, per slot) and the row sink, if any.
///
/// The sink's rows are summed by the compiled code, in registers (the
/// tiles then end on chunk boundaries of rows, see `RowAcc::summable`);
/// from the slot, after the tile, for programs that cannot sum (an input
/// slot sunk, or no registers left for the sums), for short rows with a
/// partial last chunk (see [`SUM_TAIL_MIN_ROW`]), and for rows whose ends
/// are off a cache line when an output streams (each row's call would
/// start there, and streaming stores need 64-byte lines).
pub(super) fn code_for<S>(
    prog: &TileProgram<'_>,
    n_inputs: usize,
    sink: Option<&RowSink<'_>>,
    streams: &[Option<usize>],
) -> Option<Arc<jit::Compiled>>
where
    S: TileIo,
    S::Compute: Compute,
{
    let same_storage = std::mem::size_of::<S>() == std::mem::size_of::<S::Compute>();
    if !(S::Compute::F32 && same_storage) {
        return None;
    }
    let any_streams = streams.iter().any(Option::is_some);
    let sunk = sink.map(|k| {
        let len = k.reduction.len;
        let whole = len.is_multiple_of(ROW_LANES);
        let ragged = len >= SUM_TAIL_MIN_ROW && (!any_streams || len.is_multiple_of(16));
        let summand =
            (k.slot >= n_inputs && (whole || ragged)).then(|| k.reduction.reducer.summand());
        (k.slot, summand)
    });
    compiled(prog, n_inputs, sunk, streams).or_else(|| match sunk {
        Some((slot, Some(_))) => compiled(prog, n_inputs, Some((slot, None)), streams),
        _ => None,
    })
}

/// The program's compiled code, if it has one; `sink`: the slot a row sink
/// reads, and what to sum of it when the code is to sum it in registers
/// (else the code stores it for the sink).
fn compiled(
    prog: &TileProgram<'_>,
    n_inputs: usize,
    sink: Option<(usize, Option<jit::Summand>)>,
    streams: &[Option<usize>],
) -> Option<Arc<jit::Compiled>> {
    if !jit::generates_on(active()) || !prog.codegen {
        return None;
    }
    let mut instrs: SmallVec<[jit::JitInstr<'_>; 16]> = SmallVec::new();
    for i in &prog.instrs {
        instrs.push(match i {
            // an input slot may be read where it lies: never write one
            TileInstr::Forward { fns, env, ins, out } if *out >= n_inputs => jit::JitInstr::Op {
                lane: (fns.lane?)(env)?,
                ins,
                out: *out,
            },
            TileInstr::Store { slot, .. } => jit::JitInstr::Keep {
                slot: *slot,
                stream: streams.get(*slot).is_some_and(Option::is_some),
            },
            _ => return None,
        });
    }
    instrs.extend(sink.map(|(slot, summand)| match summand {
        Some(summand) => jit::JitInstr::Accumulate { slot, summand },
        None => jit::JitInstr::Keep {
            slot,
            stream: false,
        },
    }));
    jit::compile(&instrs, prog.slots)
}
