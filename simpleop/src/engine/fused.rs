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

use std::borrow::Cow;
use std::ops::Range;

use smallvec::SmallVec;

use crate::engine::buffers::{DisjointMut, Src, TILE, store, with_buffers};
use crate::engine::chunks::try_for_each_chunk;
use crate::engine::drivers::{DstInfo, alias_of, source_for};
use crate::engine::half_io::TileIo;
use crate::engine::hints::{
    StreamFence, prefetch, prefetch_l2, prefetch_op_loop, stream_copy, streams_past_caches,
};
use crate::engine::isa::{Isa, active};
use crate::engine::jit;
use crate::engine::rows::{LANES as ROW_LANES, RowAcc, RowReduction};
use crate::engine::switch::Switch;
use crate::kernel::{TileBackwardFn, TileFns, TileForwardFn};
use crate::{
    DType, EnvArguments, Error, Float, OpReqType, Result, Shape, TBlob, TBlobMut, dispatch_float,
};

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
trait Compute: Float<Compute = Self> {
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
const MAX_ARITY: usize = 8;

/// Programs costing at least this per element (an op that calls a
/// transcendental, `sqrt` or `recip`: `OpDef::cost` counts 10 for each)
/// ask for the next tile's inputs into L2, not L1: costly programs (as
/// `chain6`, with a tanh) run faster with L2 prefetches, while cheaper
/// ones (as the composed `smooth_l1`, six cheap ops) are faster with L1
/// ones.
const L2_PREFETCH_MIN_COST: usize = 11;

/// Programs this cheap (two cheap ops, as `row_sq_dist`'s subtract and
/// square) stream memory like one op, and prefetch as single-op loops do
/// ([`crate::kernel::simd::op_loop_prefetch_enabled`]): where single-op
/// loops are faster without prefetches, so are these programs, while
/// costlier programs (`chain6`, composed `smooth_l1`) are slower without.
const ONE_OP_PREFETCH_MAX_COST: usize = 2;

fn bad(what: &str, msg: impl Into<String>) -> Error {
    Error::invalid("fused", what, msg)
}

impl TileProgram<'_> {
    /// Slot indices in range, written slots distinct from read ones, and
    /// the gradient entry points present.
    fn check(&self, n_inputs: usize, n_outputs: usize) -> Result<()> {
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

/// Runs `prog` over every element of `outputs[0]`'s shape. All arrays share
/// one float dtype; outputs share one shape; inputs broadcast to it and may
/// be exactly an output's buffer (each tile is read before it is written).
/// Every check happens before the first write.
pub fn run_program(
    prog: &TileProgram<'_>,
    inputs: &[TBlob<'_>],
    outputs: &mut [TBlobMut<'_>],
    parallel: bool,
) -> Result<()> {
    run_program_within(prog, inputs, outputs, parallel, &[])
}

/// [`run_program`] over part of larger arrays (a slab of rows): output `k`
/// is one piece of an array of `whole[k]` elements (its own length when
/// `whole` is shorter), which decides whether it is written with streaming
/// stores: a slab of a huge output leaves the caches as surely as the
/// whole output does.
pub(crate) fn run_program_within(
    prog: &TileProgram<'_>,
    inputs: &[TBlob<'_>],
    outputs: &mut [TBlobMut<'_>],
    parallel: bool,
    whole: &[usize],
) -> Result<()> {
    let Some(first) = outputs.first() else {
        return Ok(());
    };
    let (dtype, shape) = (first.dtype(), first.shape().clone());
    run_over(
        prog,
        inputs,
        outputs,
        None,
        (dtype, &shape),
        parallel,
        whole,
    )
}

static ROW_SINKS: Switch = Switch::on();

/// Whether the symbolic executor feeds reductions that declare a row
/// form straight from their fused program's tiles ([`RowSink`]; on unless
/// `SIMPLEOP_ROW_SINKS=0` at the first use, or [`set_row_sinks`]); off,
/// they read slab buffers the program writes.
pub fn row_sinks_enabled() -> bool {
    ROW_SINKS.get()
}

/// Turns row sinks on or off for later runs, which is how the benchmark
/// shows what they buy.
pub fn set_row_sinks(on: bool) {
    ROW_SINKS.set(on);
}

/// A row reduction fed by a program's slot, tile by tile, so that the
/// reduction's input never reaches memory: `dst[r]` is the reduction of
/// the slot's values at flat indices `r·len .. (r+1)·len` of the
/// iteration space.
pub struct RowSink<'a> {
    /// The slot whose values are reduced.
    pub slot: usize,
    /// What is reduced, per row.
    pub reduction: RowReduction,
    /// The reduction's output: one element per row, of the program's dtype.
    pub dst: TBlobMut<'a>,
}

/// [`run_program`] over an iteration space of `shape` whose values in
/// `sink.slot` are reduced row by row into `sink.dst` (f32 and f64 only:
/// a half-type value would be rounded to its storage type before the
/// reduction read it). `outputs`, which may be empty, have that shape;
/// threads split at row boundaries.
pub fn run_program_reducing(
    prog: &TileProgram<'_>,
    inputs: &[TBlob<'_>],
    outputs: &mut [TBlobMut<'_>],
    sink: RowSink<'_>,
    shape: &Shape,
    parallel: bool,
) -> Result<()> {
    let dtype = sink.dst.dtype();
    if !matches!(dtype, DType::F32 | DType::F64) {
        return Err(bad("sink", format!("float32 or float64, got {dtype}")));
    }
    let len = sink.reduction.len;
    if len == 0 || sink.dst.len().checked_mul(len) != Some(shape.size()) {
        return Err(bad(
            "sink",
            format!(
                "{} rows of {len} elements covering {shape}, got {}",
                sink.dst.len(),
                sink.dst.shape()
            ),
        ));
    }
    let dst_bytes = sink.dst.byte_range();
    let overlapping = inputs.iter().map(|x| x.byte_range());
    if overlapping
        .chain(outputs.iter().map(|o| o.byte_range()))
        .any(|r| crate::blob::overlaps(&r, &dst_bytes))
    {
        return Err(bad(
            "sink",
            "the reduction's output overlaps an input or output",
        ));
    }
    run_over(
        prog,
        inputs,
        outputs,
        Some(sink),
        (dtype, shape),
        parallel,
        &[],
    )
}

/// The checks and dispatch behind [`run_program_within`] and
/// [`run_program_reducing`], over an iteration space of `shape`.
fn run_over(
    prog: &TileProgram<'_>,
    inputs: &[TBlob<'_>],
    outputs: &mut [TBlobMut<'_>],
    sink: Option<RowSink<'_>>,
    (dtype, shape): (DType, &Shape),
    parallel: bool,
    whole: &[usize],
) -> Result<()> {
    if !dtype.is_float() {
        return Err(bad("outputs", format!("a float dtype, got {dtype}")));
    }
    prog.check(inputs.len(), outputs.len())?;
    // A sink reads a value: an input's, or one an instruction writes
    // (checked once the program's slot indices are known to be in range).
    if let Some(k) = &sink
        && (k.slot >= prog.slots
            || !(k.slot < inputs.len() || SlotUses::of(prog, outputs.len()).writes[k.slot] > 0))
    {
        return Err(bad(
            "sink",
            "a slot that is an input or that an instruction writes",
        ));
    }
    for (k, o) in outputs.iter().enumerate() {
        if o.dtype() != dtype || o.shape() != shape {
            return Err(bad("outputs", format!("output {k} is not {shape} {dtype}")));
        }
        for p in &outputs[..k] {
            if crate::blob::overlaps(&o.byte_range(), &p.byte_range()) {
                return Err(bad("outputs", "two outputs overlap"));
            }
        }
    }
    let names: SmallVec<[Cow<'static, str>; 4]> = (0..outputs.len()).map(output_name).collect();
    let dst_info: SmallVec<[DstInfo<'_>; 4]> = outputs
        .iter()
        .zip(&names)
        .map(|(o, n)| (n.as_ref(), o.byte_range(), o.shape(), true))
        .collect();
    let mut aliases: SmallVec<[Option<usize>; 4]> = SmallVec::with_capacity(inputs.len());
    for (i, x) in inputs.iter().enumerate() {
        if x.dtype() != dtype || !x.shape().broadcasts_to(shape) {
            return Err(bad(
                "inputs",
                format!(
                    "input {i} is {} {}, expected {dtype} broadcasting to {shape}",
                    x.shape(),
                    x.dtype()
                ),
            ));
        }
        aliases.push(alias_of("fused", "input", x, &dst_info)?);
    }
    drop(dst_info);
    let whole: SmallVec<[usize; 4]> = outputs
        .iter()
        .enumerate()
        .map(|(k, o)| whole.get(k).copied().unwrap_or(0).max(o.shape().size()))
        .collect();
    dispatch_float!(dtype, S => run_typed::<S>(prog, inputs, &aliases, (outputs, sink), shape, parallel, &whole),
        _ => unreachable!("checked float above"))
}

/// `output{k}`, for errors naming an output; the common ones without
/// allocating, since this runs on every call.
fn output_name(k: usize) -> Cow<'static, str> {
    const NAMES: [&str; 8] = [
        "output0", "output1", "output2", "output3", "output4", "output5", "output6", "output7",
    ];
    NAMES
        .get(k)
        .map_or_else(|| Cow::Owned(format!("output{k}")), |&n| Cow::Borrowed(n))
}

/// Rows whose length is not a multiple of `ROW_LANES` are summed in
/// registers only from this length: each costs two compiled calls (its
/// chunks, then its partial last chunk into zeroed sums), where storing
/// the values for the sink costs one call per tile, which short rows do
/// not repay; longer rows gain, the more the longer they are.
pub const SUM_TAIL_MIN_ROW: usize = 512;

/// A worker's part of a [`RowSink`]: its rows of the output and the row
/// in progress.
struct Rows<'a, S> {
    slot: usize,
    dst: &'a mut [S],
    /// The row being fed (an index into `dst`).
    next: usize,
    acc: RowAcc,
}

impl<S: Float> Rows<'_, S> {
    /// Feeds a tile's values of the sink slot, finishing the rows it ends.
    fn feed(&mut self, values: &[S::Compute]) {
        self.by_row_piece(values.len(), |acc, piece| acc.feed(&values[piece]));
    }

    /// Runs accumulating compiled code over a tile of `len` elements, a
    /// row piece at a time, its sums being the rows' own: the row sums
    /// the tile's values in registers, with the bits [`Rows::feed`] gives.
    ///
    /// # Safety
    /// As for [`jit::Compiled::run_accumulating`] over the whole tile
    /// (`ptrs` covering `len` elements). The tile starts on a chunk
    /// boundary of a row and ends on one or at a row's end (else
    /// `RowAcc::feed_sums` panics, before any call).
    unsafe fn run_compiled(&mut self, code: &jit::Compiled, ptrs: &[*mut f32], len: usize) {
        self.by_row_piece(len, |acc, piece| {
            acc.feed_sums(piece.len(), |sums, part| {
                // unread slots' pointers may be null: offset without a claim
                let at: PerSlot<*mut f32> = ptrs
                    .iter()
                    .map(|p| p.wrapping_add(piece.start + part.start))
                    .collect();
                // SAFETY: the caller's contract for the tile, of which this
                // is the part `part` of `piece`.
                unsafe { code.run_accumulating(&at, part.len(), sums) }
            });
        });
    }

    /// As [`Rows::tile_len`] for summing code, but whole rows when at
    /// least one fits in `len` (each costs two calls then, one for its
    /// chunks and one for its last partial chunk, where a tile ending
    /// inside a row adds a third; a tile's worth of calls is also where
    /// the inputs are asked for ahead, so it stays near `len`).
    fn whole_rows(&self, len: usize) -> usize {
        let row = self.acc.remaining();
        if row == self.acc.row_len() && row <= len {
            len - len % row
        } else {
            self.acc.summable(len)
        }
    }

    /// The length of the next tile, at most `len`: one that ends on a
    /// chunk boundary of a row or at a row's end when compiled code is to
    /// sum it ([`RowAcc::summable`]), else `len`.
    fn tile_len(&self, len: usize, summed: bool) -> usize {
        if summed { self.acc.summable(len) } else { len }
    }

    /// Splits a tile of `len` elements at row ends, hands each piece (as
    /// a range of the tile) to `feed` with the row it belongs to, and
    /// finishes the rows that end.
    fn by_row_piece(&mut self, len: usize, mut feed: impl FnMut(&mut RowAcc, Range<usize>)) {
        let mut done = 0;
        while done < len {
            let take = self.acc.remaining().min(len - done);
            feed(&mut self.acc, done..done + take);
            done += take;
            if self.acc.remaining() == 0 {
                self.dst[self.next] = S::from_f64(self.acc.finish());
                self.next += 1;
                self.acc.restart();
            }
        }
    }
}

fn run_typed<S>(
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
    // A one-element dry run surfaces kernel errors (arity, bad arguments)
    // before anything is written.
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
            Outs {
                tiles: &mut [],
                direct: &[],
                streamed: &[],
                ahead: &[],
                deferred: &[],
                jit_streams: &[],
                pending: &mut [],
            },
        )?;
    }
    let srcs = inputs
        .iter()
        .zip(aliases)
        .map(|(x, &a)| source_for::<S>(x, a, shape))
        .collect::<Result<SmallVec<[_; 4]>>>()?;
    let mut dsts: SmallVec<[_; 4]> = SmallVec::with_capacity(outputs.len());
    for o in outputs.iter_mut() {
        dsts.push(DisjointMut::new(o.as_slice_mut::<S>()?));
    }
    // Outputs far larger than the caches, written whole (not added to),
    // are streamed to memory: a plain store first reads each line it
    // writes, which slows a fused chain down.
    let same_type = std::mem::size_of::<S>() == std::mem::size_of::<S::Compute>();
    // What the program touches, taking each input as large as the
    // largest output (slabs see only part of the arrays).
    let largest = whole.iter().copied().max().unwrap_or(0) * std::mem::size_of::<S>();
    let touched = largest * inputs.len() + whole.iter().sum::<usize>() * std::mem::size_of::<S>();
    let streamed: SmallVec<[bool; 4]> = whole
        .iter()
        .map(|&n| same_type && streams_past_caches(n * std::mem::size_of::<S>(), touched))
        .collect();
    let uses = SlotUses::of(prog, dsts.len());
    let mut direct = direct_slots::<S>(prog, &uses, inputs.len(), &streamed);
    // The sink reads its slot after the tile's instructions: it must hold
    // the value, not have had it computed straight into an output.
    if let Some(k) = &sink {
        direct[k.slot] = None;
    }
    let deferred = deferred_slots(prog, &uses, inputs.len(), &streamed);
    let spares = deferred.iter().flatten().count();
    let same_storage = std::mem::size_of::<S>() == std::mem::size_of::<S::Compute>();
    // Compiled code streams a deferred result straight to its output (the
    // sink's slot excepted: the sink reads it from the slot after the tile).
    let mut jit_streams = deferred.clone();
    if let Some(k) = &sink {
        jit_streams[k.slot] = None;
    }
    // The sink's rows are summed by the compiled code, in registers (the
    // tiles then end on chunk boundaries of rows, see `RowAcc::summable`);
    // from the slot, after the tile, for programs that cannot sum (an
    // input slot sunk, or no registers left for the sums), for short rows
    // with a partial last chunk (see `SUM_TAIL_MIN_ROW`), and for rows
    // whose ends are off a cache line when an output streams (each row's
    // call would start there, and streaming stores need 64-byte lines).
    let streams = jit_streams.iter().any(Option::is_some);
    let compiled = (S::Compute::F32 && same_storage)
        .then(|| {
            let sunk = sink.as_ref().map(|k| {
                let len = k.reduction.len;
                let whole = len.is_multiple_of(ROW_LANES);
                let ragged = len >= SUM_TAIL_MIN_ROW && (!streams || len.is_multiple_of(16));
                let summand = (k.slot >= inputs.len() && (whole || ragged))
                    .then(|| k.reduction.reducer.summand());
                (k.slot, summand)
            });
            compiled(prog, inputs.len(), sunk, &jit_streams).or_else(|| match sunk {
                Some((slot, Some(_))) => {
                    compiled(prog, inputs.len(), Some((slot, None)), &jit_streams)
                }
                _ => None,
            })
        })
        .flatten();
    // Rows of the sink end inside one worker's range.
    let (sink, mut sink_blob) = match sink {
        Some(k) => (Some((k.slot, k.reduction)), Some(k.dst)),
        None => (None, None),
    };
    let sink_dst = match sink_blob.as_mut() {
        Some(d) => Some(DisjointMut::new(d.as_slice_mut::<S>()?)),
        None => None,
    };
    let align = sink.map_or(TILE, |(_, r)| r.len);
    try_for_each_chunk(shape.size(), prog.cost, parallel, align, |range| {
        let rows = match (sink, &sink_dst) {
            (Some((slot, reduction)), Some(dst)) => Some(Rows {
                slot,
                // SAFETY: workers get disjoint ranges that start and end
                // on row boundaries (`align`), so their rows are disjoint.
                dst: unsafe { dst.range(range.start / reduction.len..range.end / reduction.len) },
                next: 0,
                acc: RowAcc::new(reduction.reducer, reduction.len),
            }),
            _ => None,
        };
        // Slots and the zero tile start on cache lines (see `Buffers`).
        with_buffers::<S::Compute, _>(prog.slots + 1 + spares, TILE, |mut b| {
            let mut slots: SmallVec<[&mut [S::Compute]; 16]> =
                (0..prog.slots).map(|_| b.next()).collect();
            let zero = b.next();
            zero.fill(<S::Compute as Float>::zero());
            let spares = (0..spares).map(|_| b.next()).collect();
            let outs = Dsts {
                dsts: &dsts,
                direct: &direct,
                streamed: &streamed,
                deferred: &deferred,
                jit_streams: &jit_streams,
                rows,
            };
            run_range::<S>(
                (prog, compiled.as_deref()),
                &srcs,
                outs,
                range,
                &mut slots,
                zero,
                spares,
            )
        })
    })
}

/// The outputs, the slots computed straight into one, the outputs written
/// with streaming stores, the slots whose streamed store is deferred, and
/// this worker's rows of a row sink.
struct Dsts<'a, 'b, S> {
    dsts: &'a [DisjointMut<'b, S>],
    direct: &'a [Option<usize>],
    streamed: &'a [bool],
    deferred: &'a [Option<usize>],
    /// Per slot, the output compiled code streams it to (see `run_typed`).
    jit_streams: &'a [Option<usize>],
    rows: Option<Rows<'b, S>>,
}

/// A tile's streamed result on its way out during the next tile: `buf`
/// holds it (a slot's buffer, swapped out), `dst` is where it goes, and
/// `done` elements are written.
struct Pending<'s, 'd, C> {
    buf: &'s mut [C],
    dst: &'d mut [C],
    done: usize,
}

impl<C: Copy + bytemuck::Pod> Pending<'_, '_, C> {
    /// Streams at least the next `part` elements (all of them for
    /// `usize::MAX`), ending on a cache line of `dst` so that no line is
    /// written partly by one slice and partly by the next.
    fn write(&mut self, part: usize) {
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
struct Outs<'a, 'b, 'c, 'd, S: TileIo> {
    tiles: &'a mut [&'b mut [S]],
    direct: &'a [Option<usize>],
    /// Per output, whether its `WriteTo` stores stream (see `run_typed`).
    streamed: &'a [bool],
    /// The next tile of each contiguous input, asked for in slices spread
    /// over the instructions, so that memory streams while the ops
    /// compute (with prefetching off, a fused chain is slower).
    ahead: &'a [&'b [S]],
    /// Per slot, the output its store is deferred to (see `deferred_slots`).
    deferred: &'a [Option<usize>],
    /// Per slot, the output compiled code streams it to.
    jit_streams: &'a [Option<usize>],
    /// The previous tile's deferred results, written out in slices spread
    /// over the instructions as `ahead` is read.
    pending: &'a mut [Pending<'c, 'd, S::Compute>],
}

/// How a program uses each slot, and how many stores each output gets:
/// the facts `direct_slots` and `deferred_slots` decide on.
struct SlotUses {
    /// Reads by ops (not by stores).
    reads: PerSlot<usize>,
    /// Writes by ops.
    writes: PerSlot<usize>,
    /// Whether a forward step writes the slot.
    forward_out: PerSlot<bool>,
    /// Stores of the slot.
    stores: PerSlot<usize>,
    /// Stores into each output.
    into: PerSlot<usize>,
}

/// One entry per slot (or output), inline for the usual program sizes:
/// these are rebuilt on every call.
type PerSlot<T> = SmallVec<[T; 16]>;

impl SlotUses {
    fn of(prog: &TileProgram<'_>, n_outputs: usize) -> SlotUses {
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
fn direct_slots<S: TileIo>(
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
fn deferred_slots(
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

/// Runs `range` tile by tile through the program, in the worker's slots.
fn run_range<'s, S>(
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
    // Streamed stores are ordered before this chunk reports back.
    let _fence = streamed.contains(&true).then_some(StreamFence);
    // Compiled code that reads only inputs lying in memory and writes only
    // outputs (or sums a row sink's values) needs no tiles at all: one
    // call covers the range (for a sink, one per tile's length of it,
    // split at row ends).
    if let Some(code) = compiled
        && (rows.is_none() || code.accumulates())
        && let Some(ptrs) = whole_range::<S>(prog, code, srcs, dsts, (direct, jit_streams), &range)
    {
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
            match rows.as_mut() {
                Some(rows) => sum_rows_compiled(code, (srcs, &ptrs), &range, rows),
                None => code.run(&ptrs, range.len()),
            }
        };
        jit::count_compiled_range();
        if rows.is_some() {
            jit::count_summed_range();
        }
        return Ok(());
    }
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
        ahead.clear();
        for ((src, slot), e) in srcs.iter().zip(slots.iter_mut()).zip(ext.iter_mut()) {
            if let Src::Contig(data) = src {
                ahead.push(&data[next.clone()]);
            }
            *e = src.contiguous(start, len).and_then(S::as_compute);
            if e.is_none() {
                src.fill(start, len, &tiles, slot);
            }
        }
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
            rows.feed(match ext.get(rows.slot) {
                Some(Some(e)) => e,
                _ => &slots[rows.slot][..len],
            });
        }
        for mut p in pending.drain(..) {
            p.write(usize::MAX);
            spares.push(p.buf);
        }
        for (slot, output) in deferred.iter().enumerate() {
            if compiled.is_some() && jit_streams[slot].is_some() {
                continue; // already streamed out by the compiled code
            }
            if let Some(k) = *output {
                let spare = spares.pop().expect("one spare per deferred slot");
                let buf = std::mem::replace(&mut slots[slot], spare);
                let dst = S::as_compute_mut(std::mem::take(&mut tiles[k]))
                    .expect("streamed outputs are in the compute type");
                pending.push(Pending { buf, dst, done: 0 });
            }
        }
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

/// Runs accumulating compiled code over `range` a tile's length at a
/// time (split at row ends), asking for each next piece of the inputs
/// ahead as single-op loops do where that helps
/// ([`prefetch_op_loop`]).
///
/// # Safety
/// As for [`Rows::run_compiled`] over `range`, with `ptrs` from
/// [`whole_range`].
unsafe fn sum_rows_compiled<S: TileIo>(
    code: &jit::Compiled,
    (srcs, ptrs): (&[Src<'_, S>], &[*mut f32]),
    range: &Range<usize>,
    rows: &mut Rows<'_, S>,
) {
    let n = range.len();
    let mut done = 0;
    while done < n {
        let len = rows.whole_rows(TILE.min(n - done));
        let next = range.start + done + len..(range.start + done + 2 * len).min(range.end);
        for &s in code.reads() {
            if let Some(Src::Contig(data)) = srcs.get(s) {
                prefetch_op_loop(&data[next.clone()]);
            }
        }
        let piece: PerSlot<*mut f32> = ptrs.iter().map(|p| p.wrapping_add(done)).collect();
        // SAFETY: the caller's contract, for the part `done..done + len`
        // of the range, which starts and ends on chunk boundaries of rows
        // or at rows' ends (`tile_len`).
        unsafe { rows.run_compiled(code, &piece, len) };
        done += len;
    }
}

/// Slot pointers for running compiled code over all of `range` at once,
/// when it reads only contiguous inputs of the compute type and writes only
/// results stored straight into distinct outputs (computed into them, or
/// streamed to 64-byte aligned ones), so that no store step is left.
fn whole_range<S: TileIo>(
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

/// Runs the instructions on slots of `len` elements; stores go to `out`.
/// With `compiled` (the program's register-resident code), that runs the
/// ops and only the stores are interpreted. True when it did.
fn run_instrs<S>(
    (prog, compiled, rows): (
        &TileProgram<'_>,
        Option<&jit::Compiled>,
        Option<&mut Rows<'_, S>>,
    ),
    slots: &mut [&mut [S::Compute]],
    ext: &[Option<&[S::Compute]>],
    zero: &[S::Compute],
    half: &mut [S],
    len: usize,
    outs: Outs<'_, '_, '_, '_, S>,
) -> Result<bool>
where
    S: TileIo,
    S::Compute: Compute,
{
    // Half types: a result is rounded to the storage type before an op
    // reads it, as storing and loading it would; stores (`AddTo` included)
    // see the unrounded result, as the single-op drivers' stores do.
    let round = std::mem::size_of::<S>() < std::mem::size_of::<S::Compute>() && !half.is_empty();
    let mut dirty = vec![false; if round { slots.len() } else { 0 }];
    fn settle<S: TileIo>(
        slots: &mut [&mut [S::Compute]],
        dirty: &mut [bool],
        half: &mut [S],
        len: usize,
        reads: &mut dyn Iterator<Item = usize>,
    ) {
        for s in reads {
            if dirty.get(s).copied().unwrap_or(false) {
                dirty[s] = false;
                S::store(&mut half[..len], &slots[s][..len], false);
                S::load(&half[..len], &mut slots[s][..len]);
            }
        }
    }
    let Outs {
        tiles,
        direct,
        streamed,
        ahead,
        deferred,
        jit_streams,
        pending,
    } = outs;
    let to_l2 = prog.cost >= L2_PREFETCH_MIN_COST;
    let like_one_op = prog.cost <= ONE_OP_PREFETCH_MAX_COST;
    if let Some(code) = compiled {
        // One pass with the values in registers streams memory as a
        // single-op loop does, and prefetches as one.
        for a in ahead {
            prefetch_op_loop(a);
        }
        for p in pending.iter_mut() {
            p.write(usize::MAX);
        }
        // Where each slot lives for this tile: an input where it lies, a
        // result computed straight into its output tile, else its buffer.
        let mut ptrs: PerSlot<*mut f32> = smallvec::smallvec![std::ptr::null_mut(); slots.len()];
        for (s, p) in ptrs.iter_mut().enumerate() {
            let direct_tile = match (direct.get(s), jit_streams.get(s)) {
                (Some(Some(k)), _) | (_, Some(Some(k))) => S::as_compute_mut(&mut *tiles[*k]),
                _ => None,
            };
            *p = match (ext.get(s), direct_tile) {
                (Some(Some(e)), _) => e.as_ptr().cast_mut().cast(),
                (_, Some(t)) => t.as_mut_ptr().cast(),
                _ => slots[s].as_mut_ptr().cast(),
            };
        }
        // SAFETY: `S::Compute` is f32 (`compiled` exists only then), so
        // every pointer is to f32: inputs (which the code only reads:
        // `compiled` refuses programs writing an input slot) and slot
        // buffers hold at least `len` elements, output tiles exactly
        // `len`; no reference to them is used during the call; the CPU has
        // AVX-512 (`compiled` checks). Tiles of accumulating code start
        // and end on chunk boundaries of rows or at rows' ends
        // (`tile_len`), and their row pieces start on 64-byte lines when
        // an output streams (`run_typed` sums only such rows then).
        unsafe {
            match rows {
                Some(rows) if code.accumulates() => rows.run_compiled(code, &ptrs, len),
                _ => code.run(&ptrs, len),
            }
        };
        for instr in &prog.instrs {
            if let TileInstr::Store { slot, output, req } = instr {
                run_store::<S>(
                    (*slot, *output, *req),
                    slots,
                    ext,
                    len,
                    StoreTo {
                        tiles,
                        direct,
                        deferred,
                        streamed,
                    },
                );
            }
        }
        return Ok(true);
    }
    let steps = prog
        .instrs
        .iter()
        .filter(|i| !matches!(i, TileInstr::Store { .. }))
        .count()
        .max(1);
    // Slices of equal size per op: weighting them by the ops' costs
    // bunched them before the costly op, which is slower on `chain6`. Sizes
    // are worked out once per tile, not with two divisions per op and
    // input.
    let ahead_part = ahead.first().map_or(0, |a| a.len().div_ceil(steps));
    let pending_part = pending.first().map_or(0, |p| p.dst.len().div_ceil(steps));
    let mut step = 0;
    for instr in &prog.instrs {
        if !matches!(instr, TileInstr::Store { .. }) {
            step += 1;
            let last = step == steps;
            for a in ahead {
                let from = ((step - 1) * ahead_part).min(a.len());
                let to = if last {
                    a.len()
                } else {
                    (from + ahead_part).min(a.len())
                };
                if to_l2 {
                    prefetch_l2(&a[from..to]);
                } else if like_one_op {
                    prefetch_op_loop(&a[from..to]);
                } else {
                    prefetch(&a[from..to]);
                }
            }
            for p in pending.iter_mut() {
                p.write(if last { usize::MAX } else { pending_part });
            }
        }
        match instr {
            TileInstr::Forward {
                fns,
                env,
                ins,
                out: o,
            } => {
                settle::<S>(slots, &mut dirty, half, len, &mut ins.iter().copied());
                let res = std::mem::take(&mut slots[*o]);
                // On the stack: this runs once per op per tile.
                let mut views: [&[S::Compute]; MAX_ARITY] = [&[]; MAX_ARITY];
                for (v, &i) in views.iter_mut().zip(*ins) {
                    *v = match ext.get(i) {
                        Some(Some(e)) => e,
                        _ => &slots[i][..len],
                    };
                }
                // A result only stored (`WriteTo`, same type) is computed
                // straight into the output: no copy through the cache.
                let dst = match direct.get(*o) {
                    Some(Some(k)) if !tiles.is_empty() => S::as_compute_mut(&mut *tiles[*k]),
                    _ => None,
                };
                let r = match dst {
                    Some(d) => <S::Compute as Compute>::forward(fns)(env, &views[..ins.len()], d),
                    None => <S::Compute as Compute>::forward(fns)(
                        env,
                        &views[..ins.len()],
                        &mut res[..len],
                    ),
                };
                slots[*o] = res;
                r?;
                if round {
                    dirty[*o] = true;
                }
            }
            TileInstr::Backward {
                fns,
                env,
                dy,
                y,
                xs,
                grads,
            } => {
                let f = <S::Compute as Compute>::backward(fns)
                    .ok_or_else(|| bad("instrs", "a backward step of an op without gradient"))?;
                settle::<S>(
                    slots,
                    &mut dirty,
                    half,
                    len,
                    &mut std::iter::once(*dy)
                        .chain(*y)
                        .chain(xs.iter().flatten().copied()),
                );
                let mut res: [&mut [S::Compute]; MAX_ARITY] = Default::default();
                for (r, &g) in res.iter_mut().zip(*grads) {
                    *r = std::mem::take(&mut slots[g]);
                }
                let r = {
                    let view = |s: Option<usize>| match s {
                        None => &zero[..len],
                        Some(s) => match ext.get(s) {
                            Some(Some(e)) => e,
                            _ => &slots[s][..len],
                        },
                    };
                    let mut xv: [&[S::Compute]; MAX_ARITY] = [&[]; MAX_ARITY];
                    for (v, &x) in xv.iter_mut().zip(*xs) {
                        *v = view(x);
                    }
                    let mut gv: [&mut [S::Compute]; MAX_ARITY] = Default::default();
                    for (v, g) in gv.iter_mut().zip(res.iter_mut()) {
                        let n = len.min(g.len());
                        *v = &mut g[..n];
                    }
                    f(
                        env,
                        view(Some(*dy)),
                        view(*y),
                        &xv[..xs.len()],
                        &mut gv[..grads.len()],
                    )
                };
                for (g, v) in grads.iter().zip(res) {
                    slots[*g] = v;
                }
                r?;
                if round {
                    for &g in *grads {
                        dirty[g] = true;
                    }
                }
            }
            TileInstr::Store { slot, output, req } => run_store::<S>(
                (*slot, *output, *req),
                slots,
                ext,
                len,
                StoreTo {
                    tiles,
                    direct,
                    deferred,
                    streamed,
                },
            ),
        }
    }
    Ok(false)
}

/// Where a `Store` step may write: the tiles, and the slots it skips.
struct StoreTo<'a, 'b, S> {
    tiles: &'a mut [&'b mut [S]],
    direct: &'a [Option<usize>],
    deferred: &'a [Option<usize>],
    streamed: &'a [bool],
}

/// A `Store` step: `slot` into this tile of `output` per `req`, unless the
/// value went there directly or its store is deferred.
fn run_store<S: TileIo>(
    (slot, output, req): (usize, usize, OpReqType),
    slots: &[&mut [S::Compute]],
    ext: &[Option<&[S::Compute]>],
    len: usize,
    to: StoreTo<'_, '_, S>,
) {
    let StoreTo {
        tiles,
        direct,
        deferred,
        streamed,
    } = to;
    if tiles.is_empty()
        || direct.get(slot).is_some_and(Option::is_some)
        || deferred.get(slot).is_some_and(Option::is_some)
    {
        return;
    }
    let src = match ext.get(slot) {
        Some(Some(e)) => e,
        _ => &slots[slot][..len],
    };
    let stream = req == OpReqType::WriteTo && streamed.get(output).copied().unwrap_or(false);
    match S::as_compute_mut(&mut *tiles[output]) {
        Some(dst) if stream => stream_copy(dst, src),
        _ => store(&mut *tiles[output], src, req),
    }
}

/// The program's register-resident code (see [`jit`]), when every step is
/// an op with a lane form on a CPU the generator covers: `sink` is a slot
/// read after the program. The caller checks the types (f32 storage).
/// The program's compiled code, if it has one; `sink`: the slot a row sink
/// reads, and what to sum of it when the code is to sum it in registers
/// (else the code stores it for the sink).
fn compiled(
    prog: &TileProgram<'_>,
    n_inputs: usize,
    sink: Option<(usize, Option<jit::Summand>)>,
    streams: &[Option<usize>],
) -> Option<std::sync::Arc<jit::Compiled>> {
    if active() != Isa::Avx512 || !prog.codegen {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::rows::RowReducer;

    fn noop32(_: &EnvArguments, _: &[&[f32]], _: &mut [f32]) -> Result<()> {
        Ok(())
    }
    fn noop64(_: &EnvArguments, _: &[&[f64]], _: &mut [f64]) -> Result<()> {
        Ok(())
    }

    fn sub32(_: &EnvArguments, ins: &[&[f32]], out: &mut [f32]) -> Result<()> {
        for ((o, a), b) in out.iter_mut().zip(ins[0]).zip(ins[1]) {
            *o = a - b;
        }
        Ok(())
    }
    fn sub64(_: &EnvArguments, ins: &[&[f64]], out: &mut [f64]) -> Result<()> {
        for ((o, a), b) in out.iter_mut().zip(ins[0]).zip(ins[1]) {
            *o = a - b;
        }
        Ok(())
    }

    /// The subtraction's entry points.
    fn sub_fns() -> TileFns {
        TileFns {
            forward_f32: sub32,
            forward_f64: sub64,
            backward_f32: None,
            backward_f64: None,
            lane: None,
        }
    }

    /// `slots[2] = slots[0] - slots[1]`.
    fn subtract(env: &EnvArguments) -> TileInstr<'_> {
        TileInstr::Forward {
            fns: sub_fns(),
            env,
            ins: &[0, 1],
            out: 2,
        }
    }

    /// A sink of `slot` reducing rows of `len` into `dst`.
    fn sink<'a, T: crate::Element>(
        slot: usize,
        reducer: crate::engine::rows::RowReducer,
        len: usize,
        dst: &'a mut [T],
    ) -> RowSink<'a> {
        let rows = dst.len();
        RowSink {
            slot,
            reduction: RowReduction { reducer, len },
            dst: TBlobMut::from_slice(dst, [rows]).unwrap(),
        }
    }

    /// `sqrt(sum((x - y)², rows of len))`, the program's slot 2 fed to the
    /// sink.
    fn row_sq_dist(
        x: &[f32],
        y: &[f32],
        len: usize,
        dst: &mut [f32],
        parallel: bool,
    ) -> Result<()> {
        let env = EnvArguments::none();
        let prog = TileProgram {
            codegen: true,
            slots: 3,
            instrs: vec![subtract(&env)],
            cost: 1,
        };
        let shape = Shape::new([x.len()]);
        let ins = [
            TBlob::from_slice(x, shape.clone())?,
            TBlob::from_slice(y, shape.clone())?,
        ];
        let sink = sink(2, RowReducer::Norm2, len, dst);
        run_program_reducing(&prog, &ins, &mut [], sink, &shape, parallel)
    }

    #[test]
    fn a_sink_reduces_every_row_as_the_reduction_alone_does() {
        crate::engine::grain::set_parallel_work(crate::engine::grain::PARALLEL_WORK);
        for len in [1, 7, 32, 33, 1000, 1500, 5000] {
            let rows = (300_000 / len).max(3);
            let n = rows * len;
            let x: Vec<f32> = (0..n).map(|i| (i % 97) as f32 * 0.37 - 9.0).collect();
            let y: Vec<f32> = (0..n).map(|i| (i % 89) as f32 * 0.21).collect();
            for parallel in [false, true] {
                let mut got = vec![f32::NAN; rows];
                row_sq_dist(&x, &y, len, &mut got, parallel).unwrap();
                for (r, g) in got.iter().enumerate() {
                    let d: Vec<f32> = (r * len..(r + 1) * len).map(|i| x[i] - y[i]).collect();
                    let want = RowReducer::Norm2.reduce(&d) as f32;
                    assert_eq!(g.to_bits(), want.to_bits(), "len {len} row {r} {parallel}");
                }
            }
        }
    }

    #[test]
    fn a_slot_both_stored_and_sunk_reaches_both() {
        let env = EnvArguments::none();
        let prog = TileProgram {
            codegen: true,
            slots: 3,
            instrs: vec![
                subtract(&env),
                TileInstr::Store {
                    slot: 2,
                    output: 0,
                    req: OpReqType::WriteTo,
                },
            ],
            cost: 1,
        };
        let (rows, len) = (300, 50);
        let x: Vec<f32> = (0..rows * len).map(|i| (i % 13) as f32).collect();
        let y: Vec<f32> = (0..rows * len).map(|i| (i % 7) as f32 * 0.5).collect();
        let shape = Shape::new([rows * len]);
        let mut diff = vec![f32::NAN; rows * len];
        let mut sums = vec![f32::NAN; rows];
        let ins = [
            TBlob::from_slice(&x, shape.clone()).unwrap(),
            TBlob::from_slice(&y, shape.clone()).unwrap(),
        ];
        let mut outs = [TBlobMut::from_slice(&mut diff, shape.clone()).unwrap()];
        let both = sink(2, RowReducer::Sum, len, &mut sums);
        run_program_reducing(&prog, &ins, &mut outs, both, &shape, false).unwrap();
        drop(outs);
        for (i, d) in diff.iter().enumerate() {
            assert_eq!(*d, x[i] - y[i]);
        }
        for (r, s) in sums.iter().enumerate() {
            let want = RowReducer::Sum.reduce(&diff[r * len..(r + 1) * len]);
            assert_eq!(s.to_bits(), (want as f32).to_bits(), "row {r}");
        }
        // A slot nothing writes holds no value to reduce.
        let mut sums = vec![0.0f32; rows];
        let empty = TileProgram {
            codegen: true,
            slots: 3,
            instrs: vec![],
            cost: 1,
        };
        let unwritten = sink(2, RowReducer::Sum, len, &mut sums);
        assert!(run_program_reducing(&empty, &ins, &mut [], unwritten, &shape, false).is_err());
    }

    /// Summing code calls once per row piece, so beside a streamed output
    /// (whose stores need whole 64-byte lines) it sums only rows of whole
    /// lines; others are summed from the slot. Both give the sink's bits,
    /// and neither faults (rows of 1,000 f32 end mid-line).
    #[test]
    fn sums_beside_a_streamed_output_start_on_cache_lines() {
        fn lane_sub(_: &EnvArguments) -> Option<jit::Lane> {
            Some(jit::Lane {
                op: jit::LaneOp::Sub,
                scalar: 0.0,
            })
        }
        let _switches = crate::engine::hints::Switches::hold();
        // outputs of 8 MiB and more stream
        crate::engine::hints::set_last_level_cache_bytes(0);
        let env = EnvArguments::none();
        let fns = TileFns {
            lane: Some(lane_sub),
            ..sub_fns()
        };
        let prog = TileProgram {
            codegen: true,
            slots: 4,
            instrs: vec![
                TileInstr::Forward {
                    fns,
                    env: &env,
                    ins: &[0, 1],
                    out: 2,
                },
                TileInstr::Forward {
                    fns,
                    env: &env,
                    ins: &[1, 0],
                    out: 3,
                },
                TileInstr::Store {
                    slot: 3,
                    output: 0,
                    req: OpReqType::WriteTo,
                },
            ],
            cost: 1,
        };
        for len in [1000, 1008] {
            let rows = (9 << 20) / len;
            let n = rows * len;
            let x: Vec<f32> = (0..n).map(|i| (i % 13) as f32 * 0.75).collect();
            let y: Vec<f32> = (0..n).map(|i| (i % 7) as f32 * 0.5).collect();
            let shape = Shape::new([n]);
            // pooled storage starts on a cache line, so the output streams
            let mut out = crate::NDArray::full([n], f64::NAN, crate::DType::F32);
            let mut sums = vec![f32::NAN; rows];
            let ins = [
                TBlob::from_slice(&x, shape.clone()).unwrap(),
                TBlob::from_slice(&y, shape.clone()).unwrap(),
            ];
            let mut outs = [out.blob_mut()];
            let before = jit::summed_ranges();
            let to = sink(2, RowReducer::Sum, len, &mut sums);
            run_program_reducing(&prog, &ins, &mut outs, to, &shape, true).unwrap();
            drop(outs);
            let back = out.blob().as_slice::<f32>().unwrap().to_vec();
            if len == 1008 && active() == Isa::Avx512 && prog.codegen {
                assert!(
                    jit::summed_ranges() > before,
                    "rows of whole lines sum in registers"
                );
            }
            for (i, b) in back.iter().enumerate() {
                assert_eq!(b.to_bits(), (y[i] - x[i]).to_bits(), "element {i}");
            }
            let diff: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a - b).collect();
            for (r, s) in sums.iter().enumerate() {
                let want = RowReducer::Sum.reduce(&diff[r * len..(r + 1) * len]) as f32;
                assert_eq!(s.to_bits(), want.to_bits(), "rows of {len}: row {r}");
            }
        }
    }

    #[test]
    fn a_sink_that_does_not_fit_is_refused_before_any_write() {
        let x = vec![1.0f32; 12];
        let y = vec![0.0f32; 12];
        // Rows that do not cover the space.
        let mut dst = vec![7.0f32; 5];
        assert!(row_sq_dist(&x, &y, 3, &mut dst, false).is_err());
        assert_eq!(dst, [7.0; 5]);
        // Half types round a value before a reduction reads it.
        let prog = TileProgram {
            codegen: true,
            slots: 1,
            instrs: vec![],
            cost: 1,
        };
        let xh = vec![half::f16::ONE; 4];
        let mut dh = vec![half::f16::ZERO; 2];
        let ins = [TBlob::from_slice(&xh, [4]).unwrap()];
        let halves = sink(0, RowReducer::Sum, 2, &mut dh);
        let err = run_program_reducing(&prog, &ins, &mut [], halves, &Shape::new([4]), false);
        assert!(err.unwrap_err().to_string().contains("float32 or float64"));
        assert_eq!(dh, [half::f16::ZERO; 2]);
    }

    #[test]
    fn only_a_result_no_op_reads_waits_for_the_next_tile() {
        let env = EnvArguments::none();
        let fns = TileFns {
            forward_f32: noop32,
            forward_f64: noop64,
            backward_f32: None,
            backward_f64: None,
            lane: None,
        };
        let fwd = |ins: &'static [usize], out| TileInstr::Forward {
            fns,
            env: &env,
            ins,
            out,
        };
        let store = |slot, output| TileInstr::Store {
            slot,
            output,
            req: OpReqType::WriteTo,
        };
        // Slot 1 is stored and then read; slot 2 only stored; slots 3
        // and 4 stored into one output.
        let prog = TileProgram {
            codegen: true,
            slots: 5,
            instrs: vec![
                fwd(&[0], 1),
                store(1, 0),
                fwd(&[1], 2),
                store(2, 1),
                fwd(&[1], 3),
                fwd(&[3], 4),
                store(4, 2),
                store(3, 2),
            ],
            cost: 4,
        };
        let uses = SlotUses::of(&prog, 3);
        let all = [true; 3];
        assert_eq!(
            deferred_slots(&prog, &uses, 1, &all).as_slice(),
            [None, None, Some(1), None, None]
        );
        assert_eq!(
            deferred_slots(&prog, &uses, 1, &[true, false, true]).as_slice(),
            [None; 5]
        );
    }
}
