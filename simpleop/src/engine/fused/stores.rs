//! Where a tile's results go: this tile of every output, `Store` steps,
//! and streamed stores deferred to the next tile.

use crate::OpReqType;
use crate::engine::buffers::store;
use crate::engine::half_io::TileIo;
use crate::engine::hints::stream_copy;

/// A tile's streamed result on its way out during the next tile: `buf`
/// holds it (a slot's buffer, swapped out), `dst` is where it goes, and
/// `done` elements are written.
pub(super) struct Pending<'s, 'd, C> {
    pub(super) buf: &'s mut [C],
    pub(super) dst: &'d mut [C],
    pub(super) done: usize,
}

impl<C: Copy + bytemuck::Pod> Pending<'_, '_, C> {
    /// Streams at least the next `part` elements (all of them for
    /// `usize::MAX`), ending on a cache line of `dst` so that no line is
    /// written partly by one slice and partly by the next.
    pub(super) fn write(&mut self, part: usize) {
        let line = (64 / std::mem::size_of::<C>()).max(1);
        let head = self.dst.as_ptr().align_offset(64).min(self.dst.len());
        let mut to = self.done.saturating_add(part);
        if to > head && to < self.dst.len() {
            to = head + (to - head).next_multiple_of(line);
        }
        let to = to.min(self.dst.len());
        stream_copy(&mut self.dst[self.done..to], &self.buf[self.done..to]);
        self.done = to;
    }
}

/// This tile of every output, and the slots computed straight into one.
pub(super) struct Outs<'a, 'b, 'c, 'd, S: TileIo> {
    pub(super) tiles: &'a mut [&'b mut [S]],
    pub(super) direct: &'a [Option<usize>],
    /// Per output, whether its `WriteTo` stores stream (see `run_typed`).
    pub(super) streamed: &'a [bool],
    /// The next tile of each contiguous input, asked for in slices spread
    /// over the instructions, so that memory streams while the ops
    /// compute (with prefetching off, a fused chain is slower).
    pub(super) ahead: &'a [&'b [S]],
    /// Per slot, the output its store is deferred to (see `deferred_slots`).
    pub(super) deferred: &'a [Option<usize>],
    /// Per slot, the output compiled code streams it to.
    pub(super) jit_streams: &'a [Option<usize>],
    /// The previous tile's deferred results, written out in slices spread
    /// over the instructions as `ahead` is read.
    pub(super) pending: &'a mut [Pending<'c, 'd, S::Compute>],
}

impl<S: TileIo> Outs<'_, '_, '_, '_, S> {
    /// No outputs at all: the dry run's.
    pub(super) fn none() -> Self {
        Outs {
            tiles: &mut [],
            direct: &[],
            streamed: &[],
            ahead: &[],
            deferred: &[],
            jit_streams: &[],
            pending: &mut [],
        }
    }

    /// The output tile a forward result in `slot` is computed straight
    /// into (`WriteTo`, same type): no copy through the cache.
    #[inline(always)]
    pub(super) fn direct_tile(&mut self, slot: usize) -> Option<&mut [S::Compute]> {
        match self.direct.get(slot) {
            Some(Some(k)) if !self.tiles.is_empty() => S::as_compute_mut(&mut *self.tiles[*k]),
            _ => None,
        }
    }

    /// The output tile compiled code writes `slot` to: the one it is
    /// computed straight into or streamed to.
    #[inline(always)]
    pub(super) fn compiled_tile(&mut self, slot: usize) -> Option<&mut [S::Compute]> {
        match (self.direct.get(slot), self.jit_streams.get(slot)) {
            (Some(Some(k)), _) | (_, Some(Some(k))) => S::as_compute_mut(&mut *self.tiles[*k]),
            _ => None,
        }
    }

    /// A `Store` step: `value` (the slot's) into this tile of `output`
    /// per `req`, unless the value went there directly or its store is
    /// deferred.
    #[inline(always)]
    pub(super) fn store(
        &mut self,
        (slot, output, req): (usize, usize, OpReqType),
        value: &[S::Compute],
    ) {
        if self.tiles.is_empty()
            || self.direct.get(slot).is_some_and(Option::is_some)
            || self.deferred.get(slot).is_some_and(Option::is_some)
        {
            return;
        }
        let stream =
            req == OpReqType::WriteTo && self.streamed.get(output).copied().unwrap_or(false);
        match S::as_compute_mut(&mut *self.tiles[output]) {
            Some(dst) if stream => stream_copy(dst, value),
            _ => store(&mut *self.tiles[output], value, req),
        }
    }
}
