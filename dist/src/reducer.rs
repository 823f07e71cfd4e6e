//! [`GradReducer`]: the mean of every rank's gradients, all-reduced in
//! buckets in the order backward produces them.

use std::ops::Range;

use simpleop::NDArray;

use crate::comm::{Phase, fingerprint};
use crate::raw::{Buf, Pending};

use crate::{Dist, DistError, Result};

/// Averages gradients over the ranks after each backward.
///
/// Gradients are numbered in the parameters' forward order and bucketed in
/// *ready order*, its reverse, which is roughly the order a backward pass
/// finishes them: buckets of about [`DistConfig::bucket_bytes`] (a
/// gradient larger than that is a bucket of its own). A round is
/// [`GradReducer::begin`], then [`GradReducer::ready`] once per gradient,
/// in any order, then [`GradReducer::finish`]. `ready` packs a gradient
/// into its bucket at its fixed offset, and once every member of a bucket
/// is there, the bucket's non-blocking all-reduce (`MPI_Iallreduce`, sum)
/// starts, so the first buckets travel while backward computes the rest
/// (PyTorch DDP's overlap). Buckets start in bucket order, whatever order
/// the gradients come in, since every rank must issue MPI collectives in
/// the same order: a bucket whose members are ready waits for the buckets
/// before it. `finish` waits for all of them (with the timeout) and
/// divides by the number of ranks.
///
/// The sums do not depend on the order of the `ready` calls: each bucket
/// holds the same values at the same offsets, so an overlapped round and
/// [`GradReducer::allreduce_mean`] after backward agree bit for bit.
///
/// `ready` is meant to be called from the gradient-ready hook of
/// [`Executor::backward_with_hook`] or
/// [`autograd::backward_with_hook`]; it also lets MPI progress the
/// buckets already started (Open MPI has no progress thread by default:
/// a non-blocking collective moves only inside MPI calls).
///
/// One training step on a bound executor, overlapped:
///
/// ```no_run
/// use simpleop::NDArray;
/// use simpleop::symbol::Executor;
/// use simpleop_dist::{Dist, GradReducer};
///
/// /// The mean gradients of `params` (names, forward order).
/// fn step(
///     exe: &mut Executor,
///     dist: &mut Dist,
///     reducer: &mut GradReducer,
///     params: &[&str],
/// ) -> simpleop_dist::Result<Vec<NDArray>> {
///     let grads: Vec<NDArray> = params.iter().filter_map(|n| exe.grad(n).cloned()).collect();
///     reducer.begin(dist, &grads.iter().collect::<Vec<_>>())?;
///     drop(grads); // only the shapes: backward is about to write them
///     exe.forward(true)?;
///     let mut failed = None;
///     let result = exe.backward_with_hook(&[], &mut |g| {
///         let Some(k) = params.iter().position(|n| *n == g.name) else {
///             return Ok(());
///         };
///         reducer.ready(dist, k, g.grad).map_err(|e| {
///             let text = e.to_string();
///             failed = Some(e); // kept whole: the hook returns simpleop's errors
///             simpleop::Error::invalid("step", g.name, text)
///         })
///     });
///     if let Some(e) = failed {
///         return Err(e);
///     }
///     result?;
///     Ok(reducer.finish(dist)?.to_vec())
/// }
/// ```
///
/// [`DistConfig::bucket_bytes`]: crate::DistConfig::bucket_bytes
/// [`Executor::backward_with_hook`]: simpleop::symbol::Executor::backward_with_hook
/// [`autograd::backward_with_hook`]: simpleop::autograd::backward_with_hook
#[derive(Debug, Default)]
pub struct GradReducer {
    bucket_bytes: usize,
    /// Element counts of the gradients, in forward order (fixed by the
    /// first call).
    sizes: Vec<usize>,
    /// Bucket boundaries as ranges of ready-order positions.
    buckets: Vec<Range<usize>>,
    /// Per gradient (forward order): its bucket and its offset there.
    slots: Vec<(usize, usize)>,
    /// The averaged gradients, in forward order.
    averaged: Vec<NDArray>,
    /// The round in progress.
    round: Option<Round>,
}

/// One round of [`GradReducer`]: its collective and what was given.
#[derive(Debug)]
struct Round {
    phase: Phase,
    /// Per bucket: its values being packed (taken when it starts).
    packing: Vec<Vec<f32>>,
    /// Per bucket: members not given yet.
    missing: Vec<usize>,
    /// Per gradient: given in this round.
    given: Vec<bool>,
    /// The started all-reduces: bucket `i` is `started[i]`.
    started: Vec<Pending>,
}

impl GradReducer {
    /// A reducer with buckets of `bucket_bytes` (at least one f32).
    pub fn new(bucket_bytes: usize) -> GradReducer {
        GradReducer {
            bucket_bytes: bucket_bytes.max(4),
            ..GradReducer::default()
        }
    }

    /// The bucket boundaries, as ranges of ready-order positions (position
    /// 0 is the last parameter of the forward order); empty before the
    /// first call.
    pub fn buckets(&self) -> &[Range<usize>] {
        &self.buckets
    }

    /// The mean over the ranks of `grads` (float32, in the parameters'
    /// forward order; the same shapes on every rank and at every call),
    /// in the same order: one round with the gradients given in ready
    /// order, after backward.
    pub fn allreduce_mean(&mut self, dist: &mut Dist, grads: &[&NDArray]) -> Result<&[NDArray]> {
        self.begin(dist, grads)?;
        for k in (0..grads.len()).rev() {
            self.ready(dist, k, grads[k])?;
        }
        self.finish(dist)
    }

    /// Starts a round over gradients shaped like `grads` (forward order;
    /// only their sizes are read, so the buffers backward is about to
    /// write will do): fixes the buckets on the first call and checks the
    /// sizes on later ones.
    pub fn begin(&mut self, dist: &mut Dist, grads: &[&NDArray]) -> Result<()> {
        let op = "GradReducer::begin";
        if self.round.is_some() {
            return Err(DistError::invalid(
                op,
                "round",
                "the previous round was not finished",
            ));
        }
        let sizes: Vec<usize> = grads.iter().map(|g| g.size()).collect();
        if self.sizes.is_empty() {
            self.plan(grads)?;
        } else if sizes != self.sizes {
            return Err(DistError::invalid(
                op,
                "grads",
                format!(
                    "element counts {sizes:?}, the first round had {:?}",
                    self.sizes
                ),
            ));
        }
        let lens: Vec<usize> = self.buckets.iter().map(|b| self.bucket_len(b)).collect();
        let words: Vec<u64> = lens.iter().map(|&l| l as u64).collect();
        // Arrival waits for `finish`: a rank that dies or hangs in backward
        // is then named as missing.
        let phase = dist.open("GradReducer::allreduce", fingerprint("allreduce", &words))?;
        self.round = Some(Round {
            phase,
            packing: lens.iter().map(|&l| vec![0.0; l]).collect(),
            missing: self.buckets.iter().map(|b| b.len()).collect(),
            given: vec![false; self.sizes.len()],
            started: Vec::with_capacity(self.buckets.len()),
        });
        Ok(())
    }

    /// Gradient `k` (forward order) is ready: packs it into its bucket,
    /// starts every bucket that is complete and whose predecessors have
    /// started, and lets MPI progress the started ones. Gradients may come
    /// in any order, each once per round.
    pub fn ready(&mut self, dist: &mut Dist, k: usize, grad: &NDArray) -> Result<()> {
        let op = "GradReducer::ready";
        let n = self.sizes.len();
        let Some(round) = self.round.as_mut() else {
            return Err(DistError::invalid(
                op,
                "round",
                "no round was begun (call begin first)",
            ));
        };
        if k >= n {
            return Err(DistError::invalid(
                op,
                "k",
                format!("gradient {k}, but the round has {n} (0..{n})"),
            ));
        }
        if round.given[k] {
            return Err(DistError::invalid(
                op,
                format!("grads[{k}]"),
                "given twice in one round",
            ));
        }
        let values = checked_values(op, k, grad, self.sizes[k])?;
        let (bucket, at) = self.slots[k];
        round.packing[bucket][at..at + values.len()].copy_from_slice(values);
        round.given[k] = true;
        round.missing[bucket] -= 1;
        while let Some(&0) = round.missing.get(round.started.len()) {
            let send = std::mem::take(&mut round.packing[round.started.len()]);
            let recv = vec![0.0f32; send.len()];
            let pending = dist.start_allreduce(&round.phase, send, recv)?;
            round.started.push(pending);
        }
        dist.progress(&round.phase, &mut round.started)
    }

    /// Waits for every bucket (with the timeout) and returns the averaged
    /// gradients in forward order. An error naming them if some gradients
    /// were not given; the round then stays open for them.
    pub fn finish(&mut self, dist: &mut Dist) -> Result<&[NDArray]> {
        let op = "GradReducer::finish";
        let Some(round) = self.round.as_ref() else {
            return Err(DistError::invalid(op, "round", "no round was begun"));
        };
        let missing: Vec<String> = (0..self.sizes.len())
            .filter(|&k| !round.given[k])
            .map(|k| format!("grads[{k}]"))
            .collect();
        if !missing.is_empty() {
            return Err(DistError::invalid(
                op,
                missing.join(", "),
                "not given by ready in this round",
            ));
        }
        let Some(mut round) = self.round.take() else {
            return Err(DistError::invalid(op, "round", "no round was begun"));
        };
        dist.arrive(&mut round.phase)?;
        let done = dist.finish(round.phase, round.started)?;
        let scale = 1.0 / dist.size() as f32;
        let n = self.sizes.len();
        for (bucket, pending) in self.buckets.iter().zip(done) {
            let Some(Buf::F32(sum)) = pending.into_buffers().and_then(|mut b| b.pop()) else {
                return Err(DistError::invalid(op, "bucket", "lost by MPI_Iallreduce"));
            };
            for pos in bucket.clone() {
                let k = n - 1 - pos;
                let at = self.slots[k].1;
                let out = self.averaged[k].as_slice_mut::<f32>()?;
                let len = out.len();
                for (o, s) in out.iter_mut().zip(&sum[at..at + len]) {
                    *o = s * scale;
                }
            }
        }
        Ok(&self.averaged)
    }

    /// Fixes the buckets, each gradient's place in them, and allocates the
    /// averaged gradients.
    fn plan(&mut self, grads: &[&NDArray]) -> Result<()> {
        self.sizes = grads.iter().map(|g| g.size()).collect();
        self.averaged = grads
            .iter()
            .map(|g| NDArray::try_zeros(g.shape().clone(), simpleop::DType::F32))
            .collect::<simpleop::Result<_>>()?;
        let n = self.sizes.len();
        let cap = self.bucket_bytes / 4;
        self.slots = vec![(0, 0); n];
        let (mut start, mut filled) = (0, 0usize);
        for pos in 0..n {
            let k = n - 1 - pos;
            self.slots[k] = (self.buckets.len(), filled);
            filled += self.sizes[k];
            if filled >= cap {
                self.buckets.push(start..pos + 1);
                (start, filled) = (pos + 1, 0);
            }
        }
        if start < n {
            self.buckets.push(start..n);
        }
        Ok(())
    }

    /// Elements in `bucket`.
    fn bucket_len(&self, bucket: &Range<usize>) -> usize {
        let n = self.sizes.len();
        bucket.clone().map(|pos| self.sizes[n - 1 - pos]).sum()
    }
}

/// Gradient `k`'s values, checked to be `size` float32s.
fn checked_values<'a>(op: &str, k: usize, grad: &'a NDArray, size: usize) -> Result<&'a [f32]> {
    if grad.size() != size {
        return Err(DistError::invalid(
            op,
            format!("grads[{k}]"),
            format!("{} elements, expected {size}", grad.size()),
        ));
    }
    grad.as_slice::<f32>().map_err(|_| {
        DistError::invalid(
            op,
            format!("grads[{k}]"),
            format!("is {:?}, expected float32", grad.dtype()),
        )
    })
}
