//! A worker's range: run whole by compiled code where nothing needs a
//! tile, else tile by tile, each tile's inputs loaded, its program run,
//! its row sink fed and its deferred stores handed to the next tile.

use std::ops::Range;

use smallvec::SmallVec;

use super::interp::{run_instrs, slot_view};
use super::program::{Compute, PerSlot, TileInstr, TileProgram};
use super::row_sink::{Rows, sum_rows_compiled};
use super::stores::{Outs, Pending};
use crate::Result;
use crate::engine::buffers::{DisjointMut, Src, TILE};
use crate::engine::half_io::TileIo;
use crate::engine::hints::StreamFence;
use crate::engine::jit;

/// The outputs, the slots computed straight into one, the outputs written
/// with streaming stores, the slots whose streamed store is deferred, and
/// this worker's rows of a row sink.
pub(super) struct Dsts<'a, 'b, S> {
    pub(super) dsts: &'a [DisjointMut<'b, S>],
    pub(super) direct: &'a [Option<usize>],
    pub(super) streamed: &'a [bool],
    pub(super) deferred: &'a [Option<usize>],
    /// Per slot, the output compiled code streams it to (see `run_typed`).
    pub(super) jit_streams: &'a [Option<usize>],
    pub(super) rows: Option<Rows<'b, S>>,
}

/// Runs `range` tile by tile through the program, in the worker's slots.
pub(super) fn run_range<'s, S>(
    (prog, compiled): (&TileProgram<'_>, Option<&jit::Compiled>),
    srcs: &[Src<'_, S>],
    mut outs: Dsts<'_, '_, S>,
    range: Range<usize>,
    slots: &mut [&'s mut [S::Compute]],
    zero: &[S::Compute],
    spares: SmallVec<[&'s mut [S::Compute]; 4]>,
) -> Result<()>
where
    S: TileIo,
    S::Compute: Compute,
{
    // Streamed stores are ordered before this chunk reports back.
    let _fence = outs.streamed.contains(&true).then_some(StreamFence);
    if let Some(code) = compiled
        && run_whole_range(prog, code, srcs, &mut outs, &range)
    {
        return Ok(());
    }
    run_tiles((prog, compiled), srcs, outs, range, slots, zero, spares)
}

/// Compiled code that reads only inputs lying in memory and writes only
/// outputs (or sums a row sink's values) needs no tiles at all: one
/// call covers the range (for a sink, one per tile's length of it,
/// split at row ends). False, having run nothing, when it cannot.
fn run_whole_range<S: TileIo>(
    prog: &TileProgram<'_>,
    code: &jit::Compiled,
    srcs: &[Src<'_, S>],
    outs: &mut Dsts<'_, '_, S>,
    range: &Range<usize>,
) -> bool {
    if outs.rows.is_some() && !code.accumulates() {
        return false;
    }
    let streams = (outs.direct, outs.jit_streams);
    let Some(ptrs) = whole_range::<S>(prog, code, srcs, outs.dsts, streams, range) else {
        return false;
    };
    // SAFETY: `S::Compute` is f32 (`compiled` exists only then); the
    // inputs are `range` of contiguous f32 inputs, only read; each
    // output pointer is this worker's disjoint `range` of a distinct
    // output, `range.len()` f32 long and used by nothing else during
    // the call, aligned where streamed; the CPU has AVX-512. `range`
    // starts on a row (workers' ranges are aligned to rows), and
    // `sum_rows_compiled` cuts it where accumulating code may stop.
    // Summing code calls once per row piece; with an output streamed,
    // it exists only for rows of whole 64-byte lines (`run_typed`), so
    // every piece starts on one.
    unsafe {
        match outs.rows.as_mut() {
            Some(rows) => sum_rows_compiled(code, (srcs, &ptrs), range, rows),
            None => code.run(&ptrs, range.len()),
        }
    };
    jit::count_compiled_range();
    if outs.rows.is_some() {
        jit::count_summed_range();
    }
    true
}

/// The tile loop of [`run_range`].
fn run_tiles<'s, S>(
    (prog, compiled): (&TileProgram<'_>, Option<&jit::Compiled>),
    srcs: &[Src<'_, S>],
    outs: Dsts<'_, '_, S>,
    range: Range<usize>,
    slots: &mut [&'s mut [S::Compute]],
    zero: &[S::Compute],
    mut spares: SmallVec<[&'s mut [S::Compute]; 4]>,
) -> Result<()>
where
    S: TileIo,
    S::Compute: Compute,
{
    let Dsts {
        dsts,
        direct,
        streamed,
        deferred,
        jit_streams,
        mut rows,
    } = outs;
    let (mut ran_compiled, mut summed_any) = (false, false);
    let mut pending: SmallVec<[Pending<'_, '_, S::Compute>; 4]> =
        SmallVec::with_capacity(spares.len());
    // Rounding buffer, needed only when the storage type is narrower.
    let narrow = std::mem::size_of::<S>() < std::mem::size_of::<S::Compute>();
    let mut half = if narrow {
        vec![S::zero(); TILE]
    } else {
        Vec::new()
    };
    let mut start = range.start;
    let mut tiles: SmallVec<[&mut [S]; 4]> = SmallVec::with_capacity(dsts.len());
    // Inputs already in the compute type are read where they lie.
    let mut ext: SmallVec<[Option<&[S::Compute]>; 8]> = smallvec::smallvec![None; srcs.len()];
    let mut ahead: SmallVec<[&[S]; 8]> = SmallVec::with_capacity(srcs.len());
    let summing = compiled.is_some_and(jit::Compiled::accumulates);
    while start < range.end {
        let len = TILE.min(range.end - start);
        let len = rows.as_ref().map_or(len, |r| r.tile_len(len, summing));
        tiles.clear();
        // SAFETY: each worker gets a disjoint `range`, tiles within it are
        // disjoint and used one at a time, and outputs never overlap each
        // other (checked in `run_program`).
        tiles.extend(dsts.iter().map(|d| unsafe { d.range(start..start + len) }));
        let next = (start + len)..(start + 2 * len).min(range.end);
        load_inputs(
            srcs,
            (slots, &mut ext, &mut ahead),
            &tiles,
            (start, len),
            next,
        );
        // Non-temporal stores need 64-byte aligned vectors; a tile that
        // is not (an output view off a cache line) is interpreted.
        let compiled = compiled.filter(|_| {
            jit_streams
                .iter()
                .flatten()
                .all(|&k| tiles[k].as_ptr().align_offset(64) == 0)
        });
        let r = run_instrs::<S>(
            (prog, compiled, rows.as_mut()),
            slots,
            &ext,
            zero,
            &mut half,
            len,
            Outs {
                tiles: &mut tiles,
                direct,
                streamed,
                ahead: &ahead,
                deferred,
                jit_streams,
                pending: &mut pending,
            },
        );
        if r.is_err() {
            // Earlier tiles' results still reach memory (and the fence).
            pending.iter_mut().for_each(|p| p.write(usize::MAX));
        }
        let ran = r?;
        ran_compiled |= ran;
        let summed = ran && compiled.is_some_and(jit::Compiled::accumulates);
        summed_any |= summed;
        if let Some(rows) = rows.as_mut().filter(|_| !summed) {
            rows.feed(slot_view(slots, &ext, rows.slot, len));
        }
        for mut p in pending.drain(..) {
            p.write(usize::MAX);
            spares.push(p.buf);
        }
        // Compiled code has streamed its own deferred results already.
        let by_code = if compiled.is_some() { jit_streams } else { &[] };
        defer_stores::<S>(
            (deferred, by_code),
            slots,
            &mut spares,
            &mut tiles,
            &mut pending,
        );
        start += len;
    }
    for mut p in pending {
        p.write(usize::MAX);
    }
    if ran_compiled {
        jit::count_compiled_range();
    }
    if summed_any {
        jit::count_summed_range();
    }
    Ok(())
}

/// Where a tile's inputs go: the slots they are filled into, the
/// contiguous inputs read in place, and the next tiles to ask for.
type InputSlots<'s, 't, 'a, S> = (
    &'s mut [&'t mut [<S as crate::Float>::Compute]],
    &'s mut [Option<&'a [<S as crate::Float>::Compute]>],
    &'s mut SmallVec<[&'a [S]; 8]>,
);

/// This tile (`start`, `len`) of every input: read where it lies when it
/// is contiguous in the compute type (`ext`), else filled into its slot;
/// each contiguous input's `next` tile goes to `ahead`, to be asked for
/// while the ops run.
#[inline(always)]
fn load_inputs<'a, S: TileIo>(
    srcs: &[Src<'a, S>],
    (slots, ext, ahead): InputSlots<'_, '_, 'a, S>,
    tiles: &[&mut [S]],
    (start, len): (usize, usize),
    next: Range<usize>,
) {
    ahead.clear();
    for ((src, slot), e) in srcs.iter().zip(slots.iter_mut()).zip(ext.iter_mut()) {
        if let Src::Contig(data) = src {
            ahead.push(&data[next.clone()]);
        }
        *e = src.contiguous(start, len).and_then(S::as_compute);
        if e.is_none() {
            src.fill(start, len, tiles, slot);
        }
    }
}

/// Hands each deferred slot's value to `pending`, to be streamed into
/// this tile of its output during the next tile, swapping a spare buffer
/// into the slot; skips the slots the compiled code streamed (`by_code`).
#[inline(always)]
fn defer_stores<'s, 'd, S: TileIo>(
    (deferred, by_code): (&[Option<usize>], &[Option<usize>]),
    slots: &mut [&'s mut [S::Compute]],
    spares: &mut SmallVec<[&'s mut [S::Compute]; 4]>,
    tiles: &mut [&'d mut [S]],
    pending: &mut SmallVec<[Pending<'s, 'd, S::Compute>; 4]>,
) {
    for (slot, output) in deferred.iter().enumerate() {
        if by_code.get(slot).is_some_and(Option::is_some) {
            continue;
        }
        if let Some(k) = *output {
            let spare = spares.pop().expect("one spare per deferred slot");
            let buf = std::mem::replace(&mut slots[slot], spare);
            let dst = S::as_compute_mut(std::mem::take(&mut tiles[k]))
                .expect("streamed outputs are in the compute type");
            pending.push(Pending { buf, dst, done: 0 });
        }
    }
}

/// Slot pointers for running compiled code over all of `range` at once,
/// when it reads only contiguous inputs of the compute type and writes only
/// results stored straight into distinct outputs (computed into them, or
/// streamed to 64-byte aligned ones), so that no store step is left.
pub(super) fn whole_range<S: TileIo>(
    prog: &TileProgram<'_>,
    code: &jit::Compiled,
    srcs: &[Src<'_, S>],
    dsts: &[DisjointMut<'_, S>],
    (direct, streams): (&[Option<usize>], &[Option<usize>]),
    range: &Range<usize>,
) -> Option<PerSlot<*mut f32>> {
    let goes_out = |s: usize| {
        direct
            .get(s)
            .copied()
            .flatten()
            .or(streams.get(s).copied().flatten())
    };
    for i in &prog.instrs {
        if let TileInstr::Store { slot, .. } = i {
            goes_out(*slot)?;
        }
    }
    let mut ptrs: PerSlot<*mut f32> = smallvec::smallvec![std::ptr::null_mut(); prog.slots];
    for &s in code.reads() {
        let Some(Src::Contig(data)) = srcs.get(s) else {
            return None;
        };
        ptrs[s] = S::as_compute(&data[range.clone()])?
            .as_ptr()
            .cast_mut()
            .cast();
    }
    let mut used: PerSlot<usize> = SmallVec::new();
    for &s in code.writes() {
        let k = goes_out(s)?;
        if used.contains(&k) {
            return None;
        }
        used.push(k);
        // SAFETY: workers get disjoint ranges of each output, and this is
        // the only view of this range of output `k` (outputs are distinct
        // and `k` is taken once).
        let out = S::as_compute_mut(unsafe { dsts.get(k)?.range(range.clone()) })?;
        if streams.get(s).is_some_and(Option::is_some) && out.as_ptr().align_offset(64) != 0 {
            return None;
        }
        ptrs[s] = out.as_mut_ptr().cast();
    }
    Some(ptrs)
}
