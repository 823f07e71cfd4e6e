//! CPU drivers that run an op author's scalar kernel over whole arrays.
//!
//! The attribute turns an op's `forward`/`backward` functions into small
//! types implementing [`MapFn`], [`MapGrad`] or [`SourceFn`]; the drivers
//! here run them:
//!
//! * over tiles of [`TILE`] elements: f32/f64 inputs are read where they
//!   lie; half types are converted (F16C for f16) and broadcast inputs
//!   gathered into cache-resident buffers. The kernel runs over the tile in
//!   a loop compiled for the CPU's best instruction set ([`simd`]), and the
//!   result is stored honouring the [`OpReqType`] — straight into the
//!   output for f32/f64 writes.
//! * on the rayon pool, one contiguous chunk per thread, once the
//!   estimated work (elements × [`crate::OpDef::cost`]) pays for entering
//!   the pool ([`parallel_work`], measured on the machine: [`grain`]).
//! * with exact aliasing allowed: an input that is the same buffer as an
//!   output is read tile by tile before that tile is written. Partial
//!   overlap is an error.
//!
//! Broadcast inputs are gathered; their gradients are computed at the output
//! shape and summed back to the input's shape here, never by the op author.
//!
//! Every check happens before the first write, so a failing call writes
//! nothing.

use crate::engine::buffers::{DisjointMut, Src, TILE, store, with_buffers, with_tile_buffers};
use crate::engine::chunks::for_each_chunk;
use crate::engine::half_io::TileIo;
use crate::engine::hints::{StreamFence, streams_past_caches};
use crate::engine::isa as simd;
use crate::engine::table;
use crate::engine::tiles::StreamMap;
use crate::engine::tiles::{ConvertMap, GradTile, MapTile, MapTileMut};
use crate::kernel::{MapFn, MapGrad, SourceFn};
use crate::{
    DType, Element, Error, Float, OpCall, OpReqType, Result, Rng, Shape, TBlob, TBlobMut,
    dispatch_float,
};
use smallvec::SmallVec;
use std::ops::Range;

mod backward;
mod checks;
mod multi;

pub use backward::map_backward;
use checks::{Checked, SMALL_DIRECT, check_float, check_input, tiles_of};
pub(crate) use checks::{DstInfo, alias_of, source_for};
pub use multi::{multi_map_backward, multi_map_forward, tile_forward_output};

/// Work per element of drawing a random number.
const SAMPLE_COST: usize = 20;
/// Elements per random stream of a source op; thread splits align to it.
pub const RNG_BLOCK: usize = 4 * TILE;

fn tile_len_error(what: &str, expected: String) -> Error {
    Error::invalid("tile", what, expected)
}

/// Runs `kernel` over one tile: the body of a `TileForwardFn`.
pub fn tile_forward<K: MapFn<N>, C: Float, const N: usize>(
    kernel: &K,
    ins: &[&[C]],
    out: &mut [C],
) -> Result<()> {
    let ins: [&[C]; N] = ins
        .try_into()
        .map_err(|_| tile_len_error("inputs", format!("{N} input slices, got {}", ins.len())))?;
    if ins.iter().any(|s| s.len() != out.len()) {
        return Err(tile_len_error(
            "inputs",
            format!("{} elements each", out.len()),
        ));
    }
    simd::run(MapTile { kernel, ins, out });
    Ok(())
}

/// Runs a gradient `kernel` over one tile: the body of a `TileBackwardFn`.
pub fn tile_backward<K: MapGrad<N>, C: Float, const N: usize>(
    kernel: &K,
    dy: &[C],
    y: &[C],
    xs: &[&[C]],
    grads: &mut [&mut [C]],
) -> Result<()> {
    let n = dy.len();
    let xs: [&[C]; N] = xs
        .try_into()
        .map_err(|_| tile_len_error("inputs", format!("{N} input slices, got {}", xs.len())))?;
    if y.len() != n
        || xs.iter().any(|s| s.len() != n)
        || grads.len() != N
        || grads.iter().any(|g| g.len() != n)
    {
        return Err(tile_len_error(
            "grads",
            format!("{N} gradients and inputs of {n} elements"),
        ));
    }
    let mut views = grads.iter_mut();
    let out: [&mut [C]; N] = std::array::from_fn(|_| &mut **views.next().expect("checked count"));
    simd::run(GradTile {
        kernel,
        dy,
        y,
        xs,
        out,
    });
    Ok(())
}

/// Runs a forward [`MapFn`] of arity `N` (1..=3) over `inputs`.
///
/// `outputs[0]` is the op's output, written per `reqs[0]`. Inputs must have
/// its shape, or broadcast to it when the op's pattern is
/// [`crate::Pattern::Broadcast`]; an input may be the output's own buffer
/// (same address and shape). For an op that updates inputs in place
/// ([`crate::OpDef::mutate_inputs`]), `outputs[1 + j]` is exactly the buffer
/// of the `j`-th mutated input, and receives its new value.
pub fn map_forward<K: MapFn<N>, const N: usize>(
    call: &OpCall<'_>,
    kernel: &K,
    inputs: &[TBlob<'_>],
    outputs: &mut [TBlobMut<'_>],
    reqs: &[OpReqType],
) -> Result<()> {
    if let [out] = outputs
        && small_direct::<K, N>(call, kernel, inputs, out, reqs)
    {
        return Ok(());
    }
    let op = call.op;
    op.check_arity(inputs.len())?;
    let states = op.mutate_inputs;
    if outputs.len() != 1 + states.len() || reqs.len() != outputs.len() {
        return Err(Error::invalid(
            op.name,
            "outputs",
            format!(
                "expected {} output blob(s) and requests, got {} and {}",
                1 + states.len(),
                outputs.len(),
                reqs.len()
            ),
        ));
    }
    if reqs[0] == OpReqType::Null && states.is_empty() {
        return Ok(());
    }
    check_float(op.name, "output", outputs[0].dtype())?;
    let c = Checked {
        op: op.name,
        dtype: outputs[0].dtype(),
        out_shape: outputs[0].shape().clone(),
    };
    let broadcast = op.pattern == crate::Pattern::Broadcast;
    let names = std::iter::once("output").chain(states.iter().map(|&k| op.input_name(k)));
    let dst_info: SmallVec<[DstInfo<'_>; 4]> = outputs
        .iter()
        .zip(names)
        .map(|(o, n)| (n.into(), o.byte_range(), o.shape(), true))
        .collect();
    let mut aliases = [None; N];
    for (i, x) in inputs.iter().enumerate() {
        check_input(&c, op.input_name(i), x, broadcast, None)?;
        aliases[i] = alias_of(op.name, op.input_name(i), x, &dst_info)?;
    }
    for (j, &k) in states.iter().enumerate() {
        if aliases.get(k).copied().flatten() != Some(1 + j) {
            return Err(Error::invalid(
                op.name,
                op.input_name(k),
                "an input the op updates in place must be passed as its own output buffer",
            ));
        }
    }
    drop(dst_info);
    let n = c.out_shape.size();
    let parallel = call.ctx.parallel;
    dispatch_float!(c.dtype, S => {
        let srcs: [Src<'_, S>; N] = build_srcs(inputs, &aliases, &c.out_shape)?;
        let mut dsts: SmallVec<[DisjointMut<'_, S>; 4]> = SmallVec::new();
        for o in outputs.iter_mut() {
            dsts.push(DisjointMut::new(o.as_slice_mut::<S>()?));
        }
        // Outputs past the caches stream their stores (see
        // `simd::stream_copy`) when the kernel is cheap or writes from
        // registers (vector forms, and f32 kernels without one streamed a
        // chunk at a time; compute-bound kernels gain little, but lose
        // nothing). Costlier kernels staged through an L1 tile are slower
        // streamed, so they don't. A table lookup counts as a cheap kernel,
        // whatever the op's cost, but does not stream (streaming slows it).
        let own_shape = matches!(srcs.first(), Some(Src::Contig(_) | Src::Dst(0)));
        let table = own_shape
            .then(|| table_for::<S, K, N>(op, kernel, n, reqs[0], states.is_empty()))
            .flatten();
        let cost = if table.is_some() { 2 } else { op.cost };
        let stream = reqs[0] == OpReqType::WriteTo
            && table.is_none()
            && (cost <= STREAM_MAX_COST || streams_from_registers::<S, K, N>(kernel))
            && streams_past_caches(
                n * std::mem::size_of::<S>(),
                (N + 1) * n * std::mem::size_of::<S>(),
            );
        let job = ForwardJob { kernel, srcs: &srcs, dsts: &dsts, reqs, states, stream, table };
        for_each_chunk(n, cost as usize, parallel, TILE, |range| job.run(range));
        Ok(())
    }, _ => unreachable!("checked float above"))
}

/// Whether this call's streamed stores leave from registers with no
/// staging pass, whatever the kernel: with AVX-512 active, f32 and f64
/// kernels ([`StreamMap`] streams each chunk as it is computed); with
/// AVX-512 or AVX2, unary kernels whose vector form has loops for the
/// active set that cover the type.
fn streams_from_registers<S: TileIo, K: MapFn<N>, const N: usize>(kernel: &K) -> bool {
    let isa = simd::active();
    if isa == simd::Isa::Avx512 && matches!(S::DTYPE, DType::F32 | DType::F64) {
        return true;
    }
    let loops = match (isa, kernel.vector()) {
        (simd::Isa::Avx512, Some(v)) => v.avx512().copied(),
        (simd::Isa::Avx2, Some(v)) => v.avx2().copied(),
        _ => None,
    };
    N == 1
        && loops.is_some_and(|loops| match S::DTYPE {
            DType::F32 => true,
            DType::F64 => false,
            _ => S::half_loop(&loops).is_some(),
        })
}

/// The op's f16/bf16 lookup table ([`table`]) when this call should read
/// it: a one-input kernel that has one, written (not accumulated) over at
/// least [`table::TABLE_MIN_LEN`] elements, and costly enough to gain.
/// (Reading a cheap op's table past the caches did not clearly beat
/// converting and streaming the stores, and those benchmark rows are
/// noisy, so the cheap ops keep the known path.)
fn table_for<S: TileIo, K: MapFn<N>, const N: usize>(
    op: &crate::OpDef,
    kernel: &K,
    n: usize,
    req: OpReqType,
    stateless: bool,
) -> Option<&'static table::HalfTable> {
    let wanted = N == 1
        && stateless
        && matches!(req, OpReqType::WriteTo | OpReqType::WriteInplace)
        && n >= table::TABLE_MIN_LEN
        && op.cost >= table::TABLE_MIN_COST
        && table::half_tables_enabled();
    if !wanted {
        return None;
    }
    kernel.half_tables()?.get::<S, K, N>(kernel)
}

/// The eager fast path for small calls: when the output is f32 or f64, at
/// most [`SMALL_DIRECT`] elements, written (not accumulated), and every
/// input has its shape and dtype without sharing its bytes, the kernel runs
/// straight over the slices in one SIMD loop — no tiles, scratch or thread
/// decision. Returns false, having done nothing, in every other case, which
/// the general path then handles (and reports errors for).
fn small_direct<K: MapFn<N>, const N: usize>(
    call: &OpCall<'_>,
    kernel: &K,
    inputs: &[TBlob<'_>],
    out: &mut TBlobMut<'_>,
    reqs: &[OpReqType],
) -> bool {
    let op = call.op;
    let dtype = out.dtype();
    let fits = inputs.len() == N
        && op.mutate_inputs.is_empty()
        && matches!(reqs, [OpReqType::WriteTo | OpReqType::WriteInplace])
        && matches!(dtype, DType::F32 | DType::F64)
        && out.len() <= SMALL_DIRECT;
    if !fits {
        return false;
    }
    let dst = out.byte_range();
    let separate = |x: &TBlob<'_>| {
        let r = x.byte_range();
        x.dtype() == dtype && x.shape() == out.shape() && (r.end <= dst.start || dst.end <= r.start)
    };
    if !inputs.iter().all(separate) {
        return false;
    }
    fn run<S: Float, K: MapFn<N>, const N: usize>(
        kernel: &K,
        inputs: &[TBlob<'_>],
        out: &mut TBlobMut<'_>,
    ) -> bool {
        let mut ins = [&[][..]; N];
        for (slot, x) in ins.iter_mut().zip(inputs) {
            match x.as_slice::<S>() {
                Ok(s) => *slot = s,
                Err(_) => return false,
            }
        }
        match out.as_slice_mut::<S>() {
            Ok(out) => {
                simd::run(MapTile { kernel, ins, out });
                true
            }
            Err(_) => false,
        }
    }
    match dtype {
        DType::F32 => run::<f32, K, N>(kernel, inputs, out),
        _ => run::<f64, K, N>(kernel, inputs, out),
    }
}

fn build_srcs<'a, S: Float, const N: usize>(
    inputs: &[TBlob<'a>],
    aliases: &[Option<usize>; N],
    out_shape: &Shape,
) -> Result<[Src<'a, S>; N]> {
    let mut srcs: [Src<'a, S>; N] = std::array::from_fn(|_| Src::Zero);
    for (i, x) in inputs.iter().enumerate() {
        srcs[i] = source_for(x, aliases[i], out_shape)?;
    }
    Ok(srcs)
}

struct ForwardJob<'a, 'b, S: Float, K, const N: usize> {
    kernel: &'a K,
    srcs: &'a [Src<'b, S>; N],
    dsts: &'a [DisjointMut<'b, S>],
    reqs: &'a [OpReqType],
    states: &'a [usize],
    /// Write the output with streaming stores.
    stream: bool,
    /// Read the op's lookup table instead of running the kernel.
    table: Option<&'a table::HalfTable>,
}

/// The most a kernel may cost per element (`OpDef::cost`, about one per
/// cheap arithmetic op) for a single-op call to stream its output through
/// a staging tile; a kernel that writes from registers streams whatever
/// its cost ([`streams_from_registers`]).
const STREAM_MAX_COST: u32 = 2;

impl<S: TileIo, K: MapFn<N>, const N: usize> ForwardJob<'_, '_, S, K, N> {
    fn run(&self, range: Range<usize>) {
        let cap = TILE.min(range.len());
        if cap == 0 || self.run_table(&range) || self.run_direct(&range) {
            return;
        }
        with_tile_buffers::<S::Compute, N, _>(cap, |mut bufs, res| {
            let mut start = range.start;
            while start < range.end {
                let len = cap.min(range.end - start);
                self.tile(start, len, &mut bufs, &mut res[..len]);
                start += len;
            }
        })
    }

    /// Reads the op's table over the whole range when there is one and the
    /// input is of the output's shape, in its own memory or the output's
    /// (`table` is only set for unary writes without state). False
    /// (nothing done) otherwise.
    fn run_table(&self, range: &Range<usize>) -> bool {
        let Some(table) = self.table else {
            return false;
        };
        match &self.srcs[0] {
            Src::Contig(x) => {
                // SAFETY: each worker gets a disjoint range of the output;
                // the input is other memory (`Src::Contig`).
                let out: &mut [u16] =
                    bytemuck::cast_slice_mut(unsafe { self.dsts[0].range(range.clone()) });
                let x: &[u16] = bytemuck::cast_slice(&x[range.clone()]);
                // No software prefetch: it slows the lookups down.
                table.lookup(x, out);
            }
            Src::Dst(0) => {
                // SAFETY: as above; the input is this range itself.
                let out = unsafe { self.dsts[0].range(range.clone()) };
                table.lookup_in_place(bytemuck::cast_slice_mut(out));
            }
            _ => return false,
        }
        true
    }

    /// Runs the whole range in one SIMD dispatch when the inputs are of the
    /// output's shape in their own memory, the request overwrites and no
    /// input is updated: f32/f64 straight over the slices, f16/bf16 through
    /// L1 tile buffers converted inside the same loop. Entering the
    /// instruction-set dispatch once per thread instead of several times
    /// per tile matters on memory-bound ops. False (nothing done) otherwise.
    fn run_direct(&self, range: &Range<usize>) -> bool {
        let direct = self.states.is_empty()
            && matches!(self.reqs[0], OpReqType::WriteTo | OpReqType::WriteInplace);
        if !direct {
            return false;
        }
        let mut ins: [&[S]; N] = [&[]; N];
        for (slot, src) in ins.iter_mut().zip(self.srcs) {
            match src {
                Src::Contig(data) => *slot = &data[range.clone()],
                _ => return false,
            }
        }
        // SAFETY: each worker gets a disjoint range of the output, and the
        // inputs are other memory (`Src::Contig`, not `Src::Dst`).
        let out = unsafe { self.dsts[0].range(range.clone()) };
        // f32/f64: the storage is the compute type (all or none of the
        // slices convert, as they share a type)
        if S::as_compute(&[]).is_some() {
            let native: [&[S::Compute]; N] =
                std::array::from_fn(|i| S::as_compute(ins[i]).expect("storage is compute"));
            let out = S::as_compute_mut(out).expect("storage is compute");
            if self.stream {
                let _fence = StreamFence;
                with_tile_buffers::<S::Compute, 0, _>(TILE.min(range.len()), |_, res| {
                    simd::run(StreamMap {
                        kernel: self.kernel,
                        ins: native,
                        out,
                        res,
                    });
                });
                return true;
            }
            simd::run(MapTile {
                kernel: self.kernel,
                ins: native,
                out,
            });
            return true;
        }
        let cap = TILE.min(range.len());
        // One more buffer, to stage the narrowed result for streaming.
        with_buffers::<S::Compute, _>(N + 2, cap, |mut b| {
            let bufs: [&mut [S::Compute]; N] = std::array::from_fn(|_| b.next());
            let res = b.next();
            let staged = self.stream.then(|| {
                let buf: &mut [S] = bytemuck::cast_slice_mut(b.next());
                &mut buf[..cap]
            });
            let _fence = self.stream.then_some(StreamFence);
            simd::run(ConvertMap {
                kernel: self.kernel,
                ins,
                out,
                bufs,
                res,
                staged,
            });
        });
        true
    }

    fn tile(
        &self,
        start: usize,
        len: usize,
        bufs: &mut [&mut [S::Compute]; N],
        res: &mut [S::Compute],
    ) {
        // SAFETY: each worker gets a disjoint range, tiles within it are
        // disjoint and used one at a time, and distinct outputs never
        // overlap (each aliases a distinct input or nothing).
        let mut tiles: SmallVec<[&mut [S]; 4]> = self
            .dsts
            .iter()
            .map(|d| unsafe { d.range(start..start + len) })
            .collect();
        if self.states.is_empty() {
            let ins = tiles_of(self.srcs, bufs, (start, len), &tiles);
            let req = self.reqs[0];
            let direct = matches!(req, OpReqType::WriteTo | OpReqType::WriteInplace);
            match S::as_compute_mut(&mut *tiles[0]).filter(|_| direct) {
                Some(out) => simd::run(MapTile {
                    kernel: self.kernel,
                    ins,
                    out,
                }),
                None => {
                    simd::run(MapTile {
                        kernel: self.kernel,
                        ins,
                        out: &mut *res,
                    });
                    store(&mut *tiles[0], res, req);
                }
            }
        } else {
            // The kernel updates its inputs, so it works on copies.
            for (src, buf) in self.srcs.iter().zip(bufs.iter_mut()) {
                src.fill(start, len, &tiles, buf);
            }
            let ins: [&mut [S::Compute]; N] = bufs.each_mut().map(|b| &mut b[..len]);
            simd::run(MapTileMut {
                kernel: self.kernel,
                ins,
                out: &mut *res,
            });
            store(&mut *tiles[0], res, self.reqs[0]);
            for (j, &k) in self.states.iter().enumerate() {
                store(&mut *tiles[1 + j], &bufs[k][..len], OpReqType::WriteTo);
            }
        }
    }
}

/// Runs a [`SourceFn`] (no inputs) into `out`. The random stream of each
/// `RNG_BLOCK` of the output is fixed by the seed and the block index.
pub fn source_forward<K: SourceFn>(
    call: &OpCall<'_>,
    kernel: &K,
    outputs: &mut [TBlobMut<'_>],
    reqs: &[OpReqType],
) -> Result<()> {
    let op = call.op;
    let ([out], [req]) = (outputs, reqs) else {
        return Err(Error::invalid(
            op.name,
            "outputs",
            "a source op has one output",
        ));
    };
    let req = *req;
    if req == OpReqType::Null {
        return Ok(());
    }
    check_float(op.name, "output", out.dtype())?;
    let seed = call.env.seed_or_draw();
    let parallel = call.ctx.parallel;
    dispatch_float!(out.dtype(), S => {
        fill_blocks::<S>(out.as_slice_mut::<S>()?, seed, parallel, req, |r| kernel.apply(r));
        Ok(())
    }, _ => unreachable!("checked float above"))
}

/// Fills a float blob from `sample`, with the same block streams as
/// [`source_forward`], so a constructor and a source op agree for one seed.
pub fn fill_random(
    out: &mut TBlobMut<'_>,
    seed: u64,
    sample: impl Fn(&mut Rng) -> f64 + Sync,
) -> Result<()> {
    check_float("random", "dtype", out.dtype())?;
    dispatch_float!(out.dtype(), S => {
        fill_blocks::<S>(out.as_slice_mut::<S>()?, seed, true, OpReqType::WriteTo, |r| {
            <<S as Float>::Compute as Element>::from_f64(sample(r))
        });
        Ok(())
    }, _ => unreachable!("checked float above"))
}

fn fill_blocks<S: TileIo>(
    out: &mut [S],
    seed: u64,
    parallel: bool,
    req: OpReqType,
    sample: impl Fn(&mut Rng) -> S::Compute + Sync,
) {
    let n = out.len();
    let dst = DisjointMut::new(out);
    for_each_chunk(n, SAMPLE_COST, parallel, RNG_BLOCK, |range| {
        let mut res = [<S::Compute as Float>::zero(); TILE];
        let mut block_start = range.start;
        while block_start < range.end {
            let block_end = (block_start + RNG_BLOCK).min(range.end);
            let mut rng = Rng::new(seed, (block_start / RNG_BLOCK) as u64);
            let mut start = block_start;
            while start < block_end {
                let len = TILE.min(block_end - start);
                for r in &mut res[..len] {
                    *r = sample(&mut rng);
                }
                // SAFETY: disjoint ranges per worker, tiles used one at a time.
                store(unsafe { dst.range(start..start + len) }, &res[..len], req);
                start += len;
            }
            block_start = block_end;
        }
    });
}
