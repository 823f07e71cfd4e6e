//! The run in one storage type: a dry run, the decisions of how each
//! slot's value leaves the program, the compiled code, and the workers.

use std::sync::Arc;

use smallvec::SmallVec;

use super::compile::code_for;
use super::interp::run_instrs;
use super::program::{Compute, PerSlot, TileProgram};
use super::range::{Dsts, run_range};
use super::row_sink::{RowSink, Rows};
use super::slots::{SlotUses, deferred_slots, direct_slots};
use super::stores::Outs;
use crate::engine::buffers::{DisjointMut, Src, TILE, with_buffers};
use crate::engine::chunks::try_for_each_chunk;
use crate::engine::drivers::source_for;
use crate::engine::half_io::TileIo;
use crate::engine::hints::streams_past_caches;
use crate::engine::jit;
use crate::{Float, Result, Shape, TBlob, TBlobMut};

/// How each slot's value leaves the program (see [`Dsts`]), and the
/// compiled code, if any.
struct Plan {
    streamed: SmallVec<[bool; 4]>,
    direct: PerSlot<Option<usize>>,
    deferred: PerSlot<Option<usize>>,
    jit_streams: PerSlot<Option<usize>>,
    compiled: Option<Arc<jit::Compiled>>,
}

pub(super) fn run_typed<S>(
    prog: &TileProgram<'_>,
    inputs: &[TBlob<'_>],
    aliases: &[Option<usize>],
    (outputs, sink): (&mut [TBlobMut<'_>], Option<RowSink<'_>>),
    shape: &Shape,
    parallel: bool,
    whole: &[usize],
) -> Result<()>
where
    S: TileIo,
    S::Compute: Compute,
{
    dry_run::<S>(prog)?;
    let srcs = inputs
        .iter()
        .zip(aliases)
        .map(|(x, &a)| source_for::<S>(x, a, shape))
        .collect::<Result<SmallVec<[_; 4]>>>()?;
    let mut dsts: SmallVec<[_; 4]> = SmallVec::with_capacity(outputs.len());
    for o in outputs.iter_mut() {
        dsts.push(DisjointMut::new(o.as_slice_mut::<S>()?));
    }
    let plan = plan::<S>(prog, inputs.len(), dsts.len(), sink.as_ref(), whole);
    // Rows of the sink end inside one worker's range.
    let (sink, mut sink_blob) = match sink {
        Some(k) => (Some((k.slot, k.reduction)), Some(k.dst)),
        None => (None, None),
    };
    let sink_dst = match sink_blob.as_mut() {
        Some(d) => Some(DisjointMut::new(d.as_slice_mut::<S>()?)),
        None => None,
    };
    let sink = sink.zip(sink_dst.as_ref());
    let align = sink.map_or(TILE, |((_, r), _)| r.len);
    try_for_each_chunk(shape.size(), prog.cost, parallel, align, |range| {
        let rows = sink.map(|((slot, reduction), dst)| {
            let rows = range.start / reduction.len..range.end / reduction.len;
            // SAFETY: workers get disjoint ranges that start and end on
            // row boundaries (`align`), so their rows are disjoint.
            Rows::new(slot, unsafe { dst.range(rows) }, reduction)
        });
        run_worker::<S>(prog, &srcs, &dsts, &plan, rows, range)
    })
}

/// A one-element dry run surfaces kernel errors (arity, bad arguments)
/// before anything is written.
fn dry_run<S>(prog: &TileProgram<'_>) -> Result<()>
where
    S: TileIo,
    S::Compute: Compute,
{
    let mut cells: SmallVec<[S::Compute; 16]> =
        smallvec::smallvec![<S::Compute as Float>::zero(); prog.slots];
    let mut slots: SmallVec<[&mut [S::Compute]; 16]> = cells.chunks_mut(1).collect();
    let zero = [<S::Compute as Float>::zero(); 1];
    run_instrs::<S>(
        (prog, None, None),
        &mut slots,
        &[],
        &zero,
        &mut [],
        1,
        Outs::none(),
    )?;
    Ok(())
}

/// Decides how each slot's value leaves the program, over outputs of
/// `whole` elements each, and compiles it where it can.
fn plan<S>(
    prog: &TileProgram<'_>,
    n_inputs: usize,
    n_outputs: usize,
    sink: Option<&RowSink<'_>>,
    whole: &[usize],
) -> Plan
where
    S: TileIo,
    S::Compute: Compute,
{
    let streamed = streamed_outputs::<S>(n_inputs, whole);
    let uses = SlotUses::of(prog, n_outputs);
    let mut direct = direct_slots::<S>(prog, &uses, n_inputs, &streamed);
    // The sink reads its slot after the tile's instructions: it must hold
    // the value, not have had it computed straight into an output.
    if let Some(k) = sink {
        direct[k.slot] = None;
    }
    let deferred = deferred_slots(prog, &uses, n_inputs, &streamed);
    // Compiled code streams a deferred result straight to its output (the
    // sink's slot excepted: the sink reads it from the slot after the tile).
    let mut jit_streams = deferred.clone();
    if let Some(k) = sink {
        jit_streams[k.slot] = None;
    }
    let compiled = code_for::<S>(prog, n_inputs, sink, &jit_streams);
    Plan {
        streamed,
        direct,
        deferred,
        jit_streams,
        compiled,
    }
}

/// Per output of `whole` elements, whether it is streamed to memory:
/// outputs far larger than the caches, written whole (not added to), are,
/// since a plain store first reads each line it writes, which slows a
/// fused chain down.
fn streamed_outputs<S: TileIo>(n_inputs: usize, whole: &[usize]) -> SmallVec<[bool; 4]> {
    let same_type = std::mem::size_of::<S>() == std::mem::size_of::<S::Compute>();
    // What the program touches, taking each input as large as the
    // largest output (slabs see only part of the arrays).
    let largest = whole.iter().copied().max().unwrap_or(0) * std::mem::size_of::<S>();
    let touched = largest * n_inputs + whole.iter().sum::<usize>() * std::mem::size_of::<S>();
    whole
        .iter()
        .map(|&n| same_type && streams_past_caches(n * std::mem::size_of::<S>(), touched))
        .collect()
}

/// One worker: its slots, zero tile and spare buffers, then its range.
fn run_worker<S>(
    prog: &TileProgram<'_>,
    srcs: &[Src<'_, S>],
    dsts: &[DisjointMut<'_, S>],
    plan: &Plan,
    rows: Option<Rows<'_, S>>,
    range: std::ops::Range<usize>,
) -> Result<()>
where
    S: TileIo,
    S::Compute: Compute,
{
    let spares = plan.deferred.iter().flatten().count();
    // Slots and the zero tile start on cache lines (see `Buffers`).
    with_buffers::<S::Compute, _>(prog.slots + 1 + spares, TILE, |mut b| {
        let mut slots: SmallVec<[&mut [S::Compute]; 16]> =
            (0..prog.slots).map(|_| b.next()).collect();
        let zero = b.next();
        zero.fill(<S::Compute as Float>::zero());
        let spares = (0..spares).map(|_| b.next()).collect();
        let outs = Dsts {
            dsts,
            direct: &plan.direct,
            streamed: &plan.streamed,
            deferred: &plan.deferred,
            jit_streams: &plan.jit_streams,
            rows,
        };
        run_range::<S>(
            (prog, plan.compiled.as_deref()),
            srcs,
            outs,
            range,
            &mut slots,
            zero,
            spares,
        )
    })
}
