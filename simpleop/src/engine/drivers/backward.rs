//! The eager backward driver: a [`MapGrad`] over the output's shape, its
//! broadcast gradients summed back to their inputs' shapes.

use std::ops::Range;

use smallvec::SmallVec;

use super::checks::{
    ArgName, Checked, DstInfo, SMALL_DIRECT, alias_of, check_float, check_input, source_for,
    tiles_of,
};
use crate::blob::overlaps;
use crate::engine::buffers::{DisjointMut, Indexer, Src, TILE, store, with_buffers};
use crate::engine::chunks::for_each_chunk;
use crate::engine::half_io::TileIo;
use crate::engine::isa as simd;
use crate::engine::tiles::GradTile;
use crate::kernel::MapGrad;
use crate::{
    DType, Element, Error, Float, GradArgs, OpCall, OpDef, OpReqType, Result, Shape, TBlob,
    TBlobMut, dispatch_float,
};

/// `n` zeros of temporary space, or [`Error::Alloc`].
fn zeroed_temp<C: Float>(n: usize) -> Result<Vec<C>> {
    let mut v = Vec::new();
    if v.try_reserve_exact(n).is_err() {
        let bytes = n.checked_mul(size_of::<C>());
        return Err(Error::alloc(
            "gradient",
            format!("temporary space of {n} elements"),
            bytes,
        ));
    }
    v.resize(n, C::zero());
    Ok(v)
}

/// Runs a backward [`MapGrad`] of arity `N`.
///
/// `grads[i]` has input `i`'s shape; when that is a broadcast shape the
/// gradient is summed over the broadcast axes. Sources (`out_grad`,
/// `output`, inputs) may be exactly the buffer of a gradient (in-place
/// gradient); partial overlaps are errors.
pub fn map_backward<K: MapGrad<N>, const N: usize>(
    call: &OpCall<'_>,
    kernel: &K,
    args: &GradArgs<'_>,
    grads: &mut [TBlobMut<'_>],
    reqs: &[OpReqType],
) -> Result<()> {
    let op = call.op;
    op.check_arity(grads.len())?;
    op.check_arity(reqs.len())?;
    op.check_arity(args.inputs.len())?;
    if reqs.iter().all(|&r| r == OpReqType::Null) {
        return Ok(());
    }
    if small_direct_backward(op, kernel, args, grads, reqs) {
        return Ok(());
    }
    check_float(op.name, "out_grad", args.out_grad.dtype())?;
    let c = Checked {
        op: op.name,
        dtype: args.out_grad.dtype(),
        out_shape: args.out_grad.shape().clone(),
    };
    check_grad_args::<N>(op, &c, args, grads, reqs)?;
    // Destinations: gradients at the output shape are written directly;
    // broadcast ones go through a temporary and a reduction.
    let direct: [bool; N] =
        std::array::from_fn(|i| reqs[i] != OpReqType::Null && grads[i].shape() == &c.out_shape);
    let aliases = grad_aliases::<N>(op, args, (grads, reqs), &direct)?;
    let run = BackwardRun {
        kernel,
        args,
        reqs,
        out_shape: &c.out_shape,
        direct: &direct,
        aliases: &aliases,
        cost: op.cost as usize,
        parallel: call.ctx.parallel,
    };
    dispatch_float!(c.dtype, S => run.typed::<S>(grads), _ => unreachable!("checked float above"))
}

/// Zeros standing in for a source the gradient does not read, in the
/// small path (the tile path reads `Src::Zero` for it).
static ZEROS: [f64; SMALL_DIRECT] = [0.0; SMALL_DIRECT];

/// The backward twin of the forward's small path: when every gradient is
/// written (not accumulated or skipped) in f32 or f64 at the output
/// gradient's shape, at most [`SMALL_DIRECT`] elements, and every source is
/// present where the gradient reads it, has that shape and dtype and
/// shares no bytes with a gradient, the kernel runs straight over the
/// slices — no checks repeated per source, tiles, scratch or thread
/// decision. Returns false, having done nothing, in every other case,
/// which the general path then handles (and reports errors for).
fn small_direct_backward<K: MapGrad<N>, const N: usize>(
    op: &OpDef,
    kernel: &K,
    args: &GradArgs<'_>,
    grads: &mut [TBlobMut<'_>],
    reqs: &[OpReqType],
) -> bool {
    let dy = &args.out_grad;
    let (dtype, shape) = (dy.dtype(), dy.shape());
    let Some(spec) = op.gradient else {
        return false;
    };
    let fits = matches!(dtype, DType::F32 | DType::F64)
        && dy.len() <= SMALL_DIRECT
        && reqs
            .iter()
            .all(|r| matches!(r, OpReqType::WriteTo | OpReqType::WriteInplace))
        && (args.output.is_some() || !spec.needs_output)
        && (0..N).all(|i| args.inputs[i].is_some() || !spec.needs_input(i));
    if !fits {
        return false;
    }
    let dsts: [Range<usize>; N] = std::array::from_fn(|i| grads[i].byte_range());
    let separate = |x: &TBlob<'_>| {
        let r = x.byte_range();
        x.dtype() == dtype
            && x.shape() == shape
            && dsts.iter().all(|d| r.end <= d.start || d.end <= r.start)
    };
    let sources_fit = separate(dy)
        && args.output.as_ref().is_none_or(separate)
        && args.inputs.iter().flatten().all(separate);
    let grads_fit = grads
        .iter()
        .all(|g| g.dtype() == dtype && g.shape() == shape)
        && (0..N).all(|i| (i + 1..N).all(|j| !overlaps(&dsts[i], &dsts[j])));
    if !(sources_fit && grads_fit) {
        return false;
    }
    match dtype {
        DType::F32 => small_backward_in::<f32, K, N>(kernel, args, grads),
        _ => small_backward_in::<f64, K, N>(kernel, args, grads),
    }
}

/// [`small_direct_backward`]'s loop in storage type `S` (f32 or f64).
fn small_backward_in<S: Float + bytemuck::Pod, K: MapGrad<N>, const N: usize>(
    kernel: &K,
    args: &GradArgs<'_>,
    grads: &mut [TBlobMut<'_>],
) -> bool {
    let n = args.out_grad.len();
    let zeros = &bytemuck::cast_slice::<f64, S>(&ZEROS)[..n];
    fn read<'s, S: Float>(b: Option<&'s TBlob<'_>>, zeros: &'s [S]) -> Result<&'s [S]> {
        b.map_or(Ok(zeros), |b| b.as_slice::<S>())
    }
    let (Ok(dy), Ok(y)) = (
        read(Some(&args.out_grad), zeros),
        read(args.output.as_ref(), zeros),
    ) else {
        return false;
    };
    let mut xs = [zeros; N];
    for (slot, x) in xs.iter_mut().zip(&args.inputs) {
        match read(x.as_ref(), zeros) {
            Ok(s) => *slot = s,
            Err(_) => return false,
        }
    }
    let mut views = grads.iter_mut();
    let mut out: [&mut [S]; N] = std::array::from_fn(|_| &mut [][..]);
    for slot in &mut out {
        match views.next().map(|g| g.as_slice_mut::<S>()) {
            Some(Ok(s)) => *slot = s,
            _ => return false,
        }
    }
    simd::run(GradTile {
        kernel,
        dy,
        y,
        xs,
        out,
    });
    true
}

/// The checks of [`map_backward`]'s arguments against the output gradient
/// (`c`): each wanted gradient, the output and inputs the gradient reads,
/// and no two wanted gradients overlapping.
fn check_grad_args<const N: usize>(
    op: &OpDef,
    c: &Checked,
    args: &GradArgs<'_>,
    grads: &[TBlobMut<'_>],
    reqs: &[OpReqType],
) -> Result<()> {
    let broadcast = op.pattern == crate::Pattern::Broadcast;
    let spec = op
        .gradient
        .ok_or_else(|| Error::NoGradient { op: op.name.into() })?;
    let grad_name = |i: usize| ArgName::GradOf(op.input_name(i));
    for (i, g) in grads.iter().enumerate() {
        if reqs[i] == OpReqType::Null {
            continue;
        }
        check_input(c, grad_name(i), &g.as_blob(), broadcast, None)?;
    }
    if let Some(y) = &args.output {
        check_input(c, "output", y, false, None)?;
    } else if spec.needs_output {
        return Err(Error::invalid(
            op.name,
            "output",
            "the gradient reads the forward output",
        ));
    }
    for (i, x) in args.inputs.iter().enumerate() {
        match x {
            Some(x) => {
                let want = (reqs[i] != OpReqType::Null).then(|| grads[i].shape().clone());
                check_input(c, op.input_name(i), x, broadcast, want.as_ref())?
            }
            None if spec.needs_input(i) => {
                return Err(Error::invalid(
                    op.name,
                    op.input_name(i),
                    "the gradient reads this input",
                ));
            }
            None => {}
        }
    }
    for i in 0..N {
        for j in i + 1..N {
            let (a, b) = (grads[i].byte_range(), grads[j].byte_range());
            let active = reqs[i] != OpReqType::Null && reqs[j] != OpReqType::Null;
            if active && !a.is_empty() && overlaps(&a, &b) {
                return Err(Error::Aliasing {
                    op: op.name.into(),
                    out: grad_name(i).to_string(),
                    arg: grad_name(j).to_string(),
                });
            }
        }
    }
    Ok(())
}

/// Per source of a backward pass, the directly written gradient whose
/// buffer it is exactly.
struct GradAliases<const N: usize> {
    dy: Option<usize>,
    y: Option<usize>,
    xs: [Option<usize>; N],
}

/// The sources that are exactly a gradient's buffer. A source that is
/// exactly a reduced destination is read in the map pass and that
/// destination is written after it: no conflict.
fn grad_aliases<const N: usize>(
    op: &OpDef,
    args: &GradArgs<'_>,
    (grads, reqs): (&[TBlobMut<'_>], &[OpReqType]),
    direct: &[bool; N],
) -> Result<GradAliases<N>> {
    let dst_info: [DstInfo<'_>; N] = std::array::from_fn(|i| {
        (
            ArgName::GradOf(op.input_name(i)),
            grads[i].byte_range(),
            grads[i].shape(),
            reqs[i] != OpReqType::Null,
        )
    });
    let alias = |arg: &'static str, b: &TBlob<'_>| -> Result<Option<usize>> {
        Ok(alias_of(op.name, arg, b, &dst_info)?.filter(|&k| direct[k]))
    };
    let dy = alias("out_grad", &args.out_grad)?;
    let y = match &args.output {
        Some(y) => alias("output", y)?,
        None => None,
    };
    let mut xs = [None; N];
    for (i, x) in args.inputs.iter().enumerate() {
        if let Some(x) = x {
            xs[i] = alias(op.input_name(i), x)?;
        }
    }
    Ok(GradAliases { dy, y, xs })
}

/// A checked backward pass, ready to run in its storage type.
struct BackwardRun<'a, 'b, K, const N: usize> {
    kernel: &'a K,
    args: &'a GradArgs<'b>,
    reqs: &'a [OpReqType],
    out_shape: &'a Shape,
    /// Per gradient, whether it is written directly (not reduced).
    direct: &'a [bool],
    aliases: &'a GradAliases<N>,
    cost: usize,
    parallel: bool,
}

impl<K: MapGrad<N>, const N: usize> BackwardRun<'_, '_, K, N> {
    /// Runs the kernel over the output shape in storage type `S`, into
    /// the direct gradients and the temporaries of the reduced ones, then
    /// reduces those.
    fn typed<S: TileIo>(&self, grads: &mut [TBlobMut<'_>]) -> Result<()> {
        let (args, shape, reqs) = (self.args, self.out_shape, self.reqs);
        let dy: Src<'_, S> = source_for(&args.out_grad, self.aliases.dy, shape)?;
        let y: Src<'_, S> = match &args.output {
            Some(b) => source_for(b, self.aliases.y, shape)?,
            None => Src::Zero,
        };
        let mut xs: [Src<'_, S>; N] = std::array::from_fn(|_| Src::Zero);
        for (i, x) in args.inputs.iter().enumerate() {
            if let Some(x) = x {
                xs[i] = source_for(x, self.aliases.xs[i], shape)?;
            }
        }
        let n = shape.size();
        let mut temps: [Vec<S::Compute>; N] = std::array::from_fn(|_| Vec::new());
        for (i, t) in temps.iter_mut().enumerate() {
            if reqs[i] != OpReqType::Null && !self.direct[i] {
                *t = zeroed_temp::<S::Compute>(n)?;
            }
        }
        {
            let (direct_grads, _) = grads.split_at_mut(N);
            let mut direct_slices: [Option<DisjointMut<'_, S>>; N] = std::array::from_fn(|_| None);
            for (i, g) in direct_grads.iter_mut().enumerate() {
                if self.direct[i] {
                    direct_slices[i] = Some(DisjointMut::new(g.as_slice_mut::<S>()?));
                }
            }
            let temp_slices = temps
                .each_mut()
                .map(|t| (!t.is_empty()).then(|| DisjointMut::new(t.as_mut_slice())));
            let job = BackwardJob {
                kernel: self.kernel,
                dy: &dy,
                y: &y,
                xs: &xs,
                direct: &direct_slices,
                temps: &temp_slices,
                reqs,
            };
            for_each_chunk(n, self.cost, self.parallel, TILE, |range| job.run(range));
        }
        for i in 0..N {
            if !temps[i].is_empty() {
                let in_shape = grads[i].shape().clone();
                reduce_into::<S>(
                    &temps[i],
                    shape,
                    &in_shape,
                    grads[i].as_slice_mut::<S>()?,
                    reqs[i],
                );
            }
        }
        Ok(())
    }
}

struct BackwardJob<'a, 'b, S: Float, K, const N: usize> {
    kernel: &'a K,
    dy: &'a Src<'b, S>,
    y: &'a Src<'b, S>,
    xs: &'a [Src<'b, S>; N],
    direct: &'a [Option<DisjointMut<'b, S>>],
    temps: &'a [Option<DisjointMut<'b, S::Compute>>],
    reqs: &'a [OpReqType],
}

impl<S: TileIo, K: MapGrad<N>, const N: usize> BackwardJob<'_, '_, S, K, N> {
    fn run(&self, range: Range<usize>) {
        let cap = TILE.min(range.len());
        if cap == 0 {
            return;
        }
        // dy, y, N inputs and N results.
        with_buffers::<S::Compute, _>(2 + 2 * N, cap, |mut b| {
            let mut next = || b.next();
            let (dyb, yb) = (next(), next());
            let mut xb: [&mut [S::Compute]; N] = std::array::from_fn(|_| next());
            let mut res: [&mut [S::Compute]; N] = std::array::from_fn(|_| next());
            let mut start = range.start;
            while start < range.end {
                let len = cap.min(range.end - start);
                self.tile(start, len, dyb, yb, &mut xb, &mut res);
                start += len;
            }
        })
    }

    fn tile(
        &self,
        start: usize,
        len: usize,
        dyb: &mut [S::Compute],
        yb: &mut [S::Compute],
        xb: &mut [&mut [S::Compute]; N],
        res: &mut [&mut [S::Compute]; N],
    ) {
        let tile = start..start + len;
        // SAFETY: disjoint ranges per worker, disjoint tiles within one,
        // and distinct destinations never overlap (checked before).
        let mut tiles: SmallVec<[&mut [S]; 4]> = self
            .direct
            .iter()
            .map(|d| match d {
                Some(d) => unsafe { d.range(tile.clone()) },
                None => &mut [],
            })
            .collect();
        {
            let dy = self.dy.tile(start, len, &tiles, dyb);
            let y = self.y.tile(start, len, &tiles, yb);
            let xs = tiles_of(self.xs, xb, (start, len), &tiles);
            let out: [&mut [S::Compute]; N] = res.each_mut().map(|r| &mut r[..len]);
            simd::run(GradTile {
                kernel: self.kernel,
                dy,
                y,
                xs,
                out,
            });
        }
        for i in 0..N {
            if self.direct[i].is_some() {
                store(&mut *tiles[i], &res[i][..len], self.reqs[i]);
            } else if let Some(t) = &self.temps[i] {
                // SAFETY: as above; temporaries are per-input buffers.
                unsafe { t.range(tile.clone()) }.copy_from_slice(&res[i][..len]);
            }
        }
    }
}

/// Sums `vals` (at `out_shape`) over the axes where `in_shape` broadcasts,
/// and writes the result into `dst` honouring `req`. Accumulates in f64.
fn reduce_into<S: Float>(
    vals: &[S::Compute],
    out_shape: &Shape,
    in_shape: &Shape,
    dst: &mut [S],
    req: OpReqType,
) {
    let mut acc = vec![0.0f64; dst.len()];
    Indexer::new(in_shape, out_shape).for_each_run(0, vals.len(), |j, off, run, stride| {
        if stride == 0 {
            acc[off] += vals[j..j + run].iter().map(|v| v.to_f64()).sum::<f64>();
        } else {
            for t in 0..run {
                acc[off + t * stride] += vals[j + t].to_f64();
            }
        }
    });
    for (d, a) in dst.iter_mut().zip(acc) {
        match req {
            OpReqType::Null => {}
            OpReqType::WriteTo | OpReqType::WriteInplace => *d = <S as crate::Element>::from_f64(a),
            OpReqType::AddTo => *d = <S as crate::Element>::from_f64(d.to_f64() + a),
        }
    }
}
