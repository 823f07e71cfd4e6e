//! The interpreter: runs a program's instructions on one tile of slots
//! (or its compiled code, and then only the stores), spreading the next
//! tile's prefetches and the previous tile's deferred stores over the ops.

use super::program::{Compute, MAX_ARITY, PerSlot, TileInstr, TileProgram, bad};
use super::row_sink::Rows;
use super::stores::Outs;
use crate::engine::half_io::TileIo;
use crate::engine::hints::{prefetch, prefetch_l2, prefetch_op_loop};
use crate::engine::jit;
use crate::kernel::TileFns;
use crate::{EnvArguments, Result};

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

/// Slot `s` of this tile: an input where it lies (`ext`), else the slot's
/// buffer.
#[inline(always)]
pub(super) fn slot_view<'a, C>(
    slots: &'a [&mut [C]],
    ext: &[Option<&'a [C]>],
    s: usize,
    len: usize,
) -> &'a [C] {
    match ext.get(s) {
        Some(Some(e)) => e,
        _ => &slots[s][..len],
    }
}

/// Runs the instructions on slots of `len` elements; stores go to `outs`.
/// With `compiled` (the program's register-resident code), that runs the
/// ops and only the stores are interpreted. True when it did.
pub(super) fn run_instrs<S>(
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
    mut outs: Outs<'_, '_, '_, '_, S>,
) -> Result<bool>
where
    S: TileIo,
    S::Compute: Compute,
{
    match compiled {
        Some(code) => {
            run_compiled::<S>((prog, code, rows), slots, ext, len, &mut outs);
            Ok(true)
        }
        None => {
            interpret::<S>(prog, slots, ext, zero, half, len, &mut outs)?;
            Ok(false)
        }
    }
}

/// Runs the program's compiled code on this tile, then its `Store` steps.
fn run_compiled<S: TileIo>(
    (prog, code, rows): (&TileProgram<'_>, &jit::Compiled, Option<&mut Rows<'_, S>>),
    slots: &mut [&mut [S::Compute]],
    ext: &[Option<&[S::Compute]>],
    len: usize,
    outs: &mut Outs<'_, '_, '_, '_, S>,
) {
    // One pass with the values in registers streams memory as a
    // single-op loop does, and prefetches as one.
    for a in outs.ahead {
        prefetch_op_loop(a);
    }
    for p in outs.pending.iter_mut() {
        p.write(usize::MAX);
    }
    // Where each slot lives for this tile: an input where it lies, a
    // result computed straight into its output tile, else its buffer.
    let mut ptrs: PerSlot<*mut f32> = smallvec::smallvec![std::ptr::null_mut(); slots.len()];
    for (s, p) in ptrs.iter_mut().enumerate() {
        *p = match (ext.get(s), outs.compiled_tile(s)) {
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
    // AVX-512 or AVX2 (`compiled` checks). Tiles of accumulating code start
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
            outs.store((*slot, *output, *req), slot_view(slots, ext, *slot, len));
        }
    }
}

/// Interprets the instructions on this tile.
fn interpret<S>(
    prog: &TileProgram<'_>,
    slots: &mut [&mut [S::Compute]],
    ext: &[Option<&[S::Compute]>],
    zero: &[S::Compute],
    half: &mut [S],
    len: usize,
    outs: &mut Outs<'_, '_, '_, '_, S>,
) -> Result<()>
where
    S: TileIo,
    S::Compute: Compute,
{
    let mut rounding = Rounding::new(slots.len(), half);
    let mut pacing = Pacing::new(prog, outs);
    for instr in &prog.instrs {
        match instr {
            TileInstr::Forward { fns, env, ins, out } => {
                pacing.next_op(outs);
                rounding.settle(slots, len, ins.iter().copied());
                run_forward::<S>((fns, env, ins, *out), slots, ext, len, outs)?;
                rounding.mark(*out);
            }
            TileInstr::Backward {
                fns,
                env,
                dy,
                y,
                xs,
                grads,
            } => {
                pacing.next_op(outs);
                let f = <S::Compute as Compute>::backward(fns)
                    .ok_or_else(|| bad("instrs", "a backward step of an op without gradient"))?;
                let reads = std::iter::once(*dy)
                    .chain(*y)
                    .chain(xs.iter().flatten().copied());
                rounding.settle(slots, len, reads);
                run_backward::<S::Compute>((f, env, *dy, *y, xs, grads), slots, ext, zero, len)?;
                for &g in *grads {
                    rounding.mark(g);
                }
            }
            TileInstr::Store { slot, output, req } => {
                outs.store((*slot, *output, *req), slot_view(slots, ext, *slot, len));
            }
        }
    }
    Ok(())
}

/// A `Forward` step: `slots[out] = op(slots[ins..])`, or straight into
/// the output tile when the result is only stored there.
#[inline(always)]
fn run_forward<S>(
    (fns, env, ins, out): (&TileFns, &EnvArguments, &[usize], usize),
    slots: &mut [&mut [S::Compute]],
    ext: &[Option<&[S::Compute]>],
    len: usize,
    outs: &mut Outs<'_, '_, '_, '_, S>,
) -> Result<()>
where
    S: TileIo,
    S::Compute: Compute,
{
    let res = std::mem::take(&mut slots[out]);
    // On the stack: this runs once per op per tile.
    let mut views: [&[S::Compute]; MAX_ARITY] = [&[]; MAX_ARITY];
    for (v, &i) in views.iter_mut().zip(ins) {
        *v = slot_view(slots, ext, i, len);
    }
    let forward = <S::Compute as Compute>::forward(fns);
    let r = match outs.direct_tile(out) {
        Some(d) => forward(env, &views[..ins.len()], d),
        None => forward(env, &views[..ins.len()], &mut res[..len]),
    };
    slots[out] = res;
    r
}

/// A `Backward` instruction's operands: the gradient function, its
/// arguments, and the slots of `dy`, `y`, the inputs and the gradients.
type BackwardStep<'a, C> = (
    crate::kernel::TileBackwardFn<C>,
    &'a EnvArguments,
    usize,
    Option<usize>,
    &'a [Option<usize>],
    &'a [usize],
);

/// A `Backward` step: `slots[grads..] = op'(slots[dy], slots[y],
/// slots[xs..])`, with the zero tile for values not given.
#[inline(always)]
fn run_backward<C: Compute>(
    (f, env, dy, y, xs, grads): BackwardStep<'_, C>,
    slots: &mut [&mut [C]],
    ext: &[Option<&[C]>],
    zero: &[C],
    len: usize,
) -> Result<()> {
    let mut res: [&mut [C]; MAX_ARITY] = Default::default();
    for (r, &g) in res.iter_mut().zip(grads) {
        *r = std::mem::take(&mut slots[g]);
    }
    let r = {
        let view = |s: Option<usize>| match s {
            None => &zero[..len],
            Some(s) => slot_view(slots, ext, s, len),
        };
        let mut xv: [&[C]; MAX_ARITY] = [&[]; MAX_ARITY];
        for (v, &x) in xv.iter_mut().zip(xs) {
            *v = view(x);
        }
        let mut gv: [&mut [C]; MAX_ARITY] = Default::default();
        for (v, g) in gv.iter_mut().zip(res.iter_mut()) {
            let n = len.min(g.len());
            *v = &mut g[..n];
        }
        f(
            env,
            view(Some(dy)),
            view(y),
            &xv[..xs.len()],
            &mut gv[..grads.len()],
        )
    };
    for (g, v) in grads.iter().zip(res) {
        slots[*g] = v;
    }
    r
}

/// Half types: a result is rounded to the storage type before an op
/// reads it, as storing and loading it would; stores (`AddTo` included)
/// see the unrounded result, as the single-op drivers' stores do.
struct Rounding<'h, S> {
    /// Per slot, whether it holds a result not rounded yet (empty when
    /// nothing is rounded).
    dirty: Vec<bool>,
    /// The rounding buffer, empty when the storage type is the compute
    /// type.
    half: &'h mut [S],
}

impl<'h, S: TileIo> Rounding<'h, S> {
    fn new(n_slots: usize, half: &'h mut [S]) -> Self {
        let round =
            std::mem::size_of::<S>() < std::mem::size_of::<S::Compute>() && !half.is_empty();
        Rounding {
            dirty: vec![false; if round { n_slots } else { 0 }],
            half,
        }
    }

    /// Rounds the slots an op is about to read that hold a new result.
    #[inline(always)]
    fn settle(
        &mut self,
        slots: &mut [&mut [S::Compute]],
        len: usize,
        reads: impl Iterator<Item = usize>,
    ) {
        for s in reads {
            if self.dirty.get(s).copied().unwrap_or(false) {
                self.dirty[s] = false;
                S::store(&mut self.half[..len], &slots[s][..len], false);
                S::load(&self.half[..len], &mut slots[s][..len]);
            }
        }
    }

    /// `slot` now holds a new result (when results are rounded at all).
    #[inline(always)]
    fn mark(&mut self, slot: usize) {
        if let Some(d) = self.dirty.get_mut(slot) {
            *d = true;
        }
    }
}

/// Spreads the next tile's prefetches and the previous tile's deferred
/// stores over this tile's ops, in slices of equal size per op:
/// weighting them by the ops' costs bunched them before the costly op,
/// which is slower on `chain6`. Sizes are worked out once per tile, not
/// with two divisions per op and input.
struct Pacing {
    /// Ops in the program (at least one).
    steps: usize,
    /// Ops begun so far.
    step: usize,
    /// Elements of each input's next tile asked for per op.
    ahead_part: usize,
    /// Elements of each deferred result written per op.
    pending_part: usize,
    /// Prefetch into L2 (costly programs).
    to_l2: bool,
    /// Prefetch as single-op loops do (very cheap programs).
    like_one_op: bool,
}

impl Pacing {
    fn new<S: TileIo>(prog: &TileProgram<'_>, outs: &Outs<'_, '_, '_, '_, S>) -> Self {
        let steps = prog
            .instrs
            .iter()
            .filter(|i| !matches!(i, TileInstr::Store { .. }))
            .count()
            .max(1);
        Pacing {
            steps,
            step: 0,
            ahead_part: outs.ahead.first().map_or(0, |a| a.len().div_ceil(steps)),
            pending_part: outs
                .pending
                .first()
                .map_or(0, |p| p.dst.len().div_ceil(steps)),
            to_l2: prog.cost >= L2_PREFETCH_MIN_COST,
            like_one_op: prog.cost <= ONE_OP_PREFETCH_MAX_COST,
        }
    }

    /// Before the next op: asks for its slice of each input's next tile
    /// and writes its slice of each deferred result (the rest of both at
    /// the last op).
    #[inline(always)]
    fn next_op<S: TileIo>(&mut self, outs: &mut Outs<'_, '_, '_, '_, S>) {
        self.step += 1;
        let last = self.step == self.steps;
        for a in outs.ahead {
            let from = ((self.step - 1) * self.ahead_part).min(a.len());
            let to = if last {
                a.len()
            } else {
                (from + self.ahead_part).min(a.len())
            };
            self.prefetch(&a[from..to]);
        }
        for p in outs.pending.iter_mut() {
            p.write(if last { usize::MAX } else { self.pending_part });
        }
    }

    #[inline(always)]
    fn prefetch<T>(&self, part: &[T]) {
        if self.to_l2 {
            prefetch_l2(part);
        } else if self.like_one_op {
            prefetch_op_loop(part);
        } else {
            prefetch(part);
        }
    }
}
