//! [`GradReducer`]: the mean of every rank's gradients, all-reduced in
//! buckets in the order backward produces them.

use simpleop::NDArray;

use crate::comm::{Phase, fingerprint};
use crate::raw::{Buf, Pending};

use crate::{Dist, DistError, Result};

/// Averages gradients over the ranks after each backward.
///
/// Gradients are taken in *ready order*: the reverse of the parameters'
/// forward order, which is the order a backward pass finishes them. They
/// are packed into buckets of about [`DistConfig::bucket_bytes`]
/// (a gradient larger than that is a bucket of its own), and each bucket's
/// non-blocking all-reduce (`MPI_Iallreduce`, sum) starts as soon as it is
/// full, so the first buckets travel while the later ones are packed.
/// [`GradReducer::finish`] waits for all of them (with the timeout) and
/// divides by the number of ranks.
///
/// The executor has no hook that fires when one gradient is ready, so
/// [`GradReducer::allreduce_mean`] starts after backward. With such a hook,
/// a caller would call [`GradReducer::begin`], then
/// [`GradReducer::ready`] from the hook for each gradient as it is
/// written, and [`GradReducer::finish`] after backward, and the first
/// buckets would travel while backward computes the rest (PyTorch DDP's
/// overlap).
///
/// [`DistConfig::bucket_bytes`]: crate::DistConfig::bucket_bytes
#[derive(Debug, Default)]
pub struct GradReducer {
    bucket_bytes: usize,
    /// Element counts of the gradients, in forward order (fixed by the
    /// first call).
    sizes: Vec<usize>,
    /// Bucket boundaries as ranges of ready-order positions.
    buckets: Vec<std::ops::Range<usize>>,
    /// The averaged gradients, in forward order.
    averaged: Vec<NDArray>,
    /// The collective in flight and its started buckets.
    inflight: Option<(Phase, Vec<Pending>)>,
    /// The bucket being packed.
    packing: Vec<f32>,
    /// Gradients packed so far in this round (ready-order positions).
    packed: usize,
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
    pub fn buckets(&self) -> &[std::ops::Range<usize>] {
        &self.buckets
    }

    /// The mean over the ranks of `grads` (float32, in the parameters'
    /// forward order; the same shapes on every rank and at every call),
    /// in the same order.
    pub fn allreduce_mean(&mut self, dist: &mut Dist, grads: &[&NDArray]) -> Result<&[NDArray]> {
        self.begin(dist, grads)?;
        for k in (0..grads.len()).rev() {
            self.ready(dist, k, grads[k])?;
        }
        self.finish(dist)
    }

    /// Starts a round over gradients shaped like `grads` (forward order):
    /// fixes the buckets on the first call and checks the shapes on later
    /// ones.
    pub fn begin(&mut self, dist: &mut Dist, grads: &[&NDArray]) -> Result<()> {
        let op = "GradReducer::begin";
        if self.inflight.is_some() {
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
        let lens: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| self.bucket_len(b) as u64)
            .collect();
        let phase = dist.begin("GradReducer::allreduce", fingerprint("allreduce", &lens))?;
        self.inflight = Some((phase, Vec::with_capacity(self.buckets.len())));
        self.packed = 0;
        self.packing.clear();
        Ok(())
    }

    /// Gradient `k` (forward order) is ready: packs it, and starts its
    /// bucket's all-reduce when the bucket is full. Gradients must come in
    /// ready order (`k` from the last down to 0).
    pub fn ready(&mut self, dist: &mut Dist, k: usize, grad: &NDArray) -> Result<()> {
        let op = "GradReducer::ready";
        let n = self.sizes.len();
        if self.inflight.is_none() || self.packed >= n || k != n - 1 - self.packed {
            let expected = n.checked_sub(1 + self.packed);
            return Err(DistError::invalid(
                op,
                "k",
                format!("gradient {k} is out of ready order (expected {expected:?}, after begin)"),
            ));
        }
        if grad.size() != self.sizes[k] {
            return Err(DistError::invalid(
                op,
                format!("grads[{k}]"),
                format!("{} elements, expected {}", grad.size(), self.sizes[k]),
            ));
        }
        let values = grad.as_slice::<f32>().map_err(|_| {
            DistError::invalid(
                op,
                format!("grads[{k}]"),
                format!("is {:?}, expected float32", grad.dtype()),
            )
        })?;
        self.packing.extend_from_slice(values);
        self.packed += 1;
        let bucket = self.buckets.iter().position(|b| b.end == self.packed);
        if bucket.is_some() {
            let send = std::mem::take(&mut self.packing);
            let recv = vec![0.0f32; send.len()];
            let Some((phase, pending)) = self.inflight.as_mut() else {
                return Err(DistError::invalid(op, "round", "no round was begun"));
            };
            pending.push(dist.start_allreduce(phase, send, recv)?);
        }
        Ok(())
    }

    /// Waits for every bucket (with the timeout) and returns the averaged
    /// gradients in forward order.
    pub fn finish(&mut self, dist: &mut Dist) -> Result<&[NDArray]> {
        let op = "GradReducer::finish";
        let Some((phase, pending)) = self.inflight.take() else {
            return Err(DistError::invalid(op, "round", "no round was begun"));
        };
        if self.packed != self.sizes.len() {
            return Err(DistError::invalid(
                op,
                "grads",
                format!(
                    "{} of {} gradients were given",
                    self.packed,
                    self.sizes.len()
                ),
            ));
        }
        let done = dist.finish(phase, pending)?;
        let scale = 1.0 / dist.size() as f32;
        let n = self.sizes.len();
        for (bucket, pending) in self.buckets.clone().into_iter().zip(done) {
            let Some(Buf::F32(sum)) = pending.into_buffers().and_then(|mut b| b.pop()) else {
                return Err(DistError::invalid(op, "bucket", "lost by MPI_Iallreduce"));
            };
            let mut at = 0;
            for pos in bucket {
                let k = n - 1 - pos;
                let out = self.averaged[k].as_slice_mut::<f32>()?;
                let len = out.len();
                for (o, s) in out.iter_mut().zip(&sum[at..at + len]) {
                    *o = s * scale;
                }
                at += len;
            }
        }
        Ok(&self.averaged)
    }

    /// Fixes the buckets and allocates the averaged gradients.
    fn plan(&mut self, grads: &[&NDArray]) -> Result<()> {
        self.sizes = grads.iter().map(|g| g.size()).collect();
        self.averaged = grads
            .iter()
            .map(|g| NDArray::try_zeros(g.shape().clone(), simpleop::DType::F32))
            .collect::<simpleop::Result<_>>()?;
        let cap = self.bucket_bytes / 4;
        let (mut start, mut filled) = (0, 0usize);
        for pos in 0..self.sizes.len() {
            filled += self.sizes[self.sizes.len() - 1 - pos];
            if filled >= cap {
                self.buckets.push(start..pos + 1);
                (start, filled) = (pos + 1, 0);
            }
        }
        if start < self.sizes.len() {
            self.buckets.push(start..self.sizes.len());
        }
        Ok(())
    }

    /// Elements in `bucket`.
    fn bucket_len(&self, bucket: &std::ops::Range<usize>) -> usize {
        let n = self.sizes.len();
        bucket.clone().map(|pos| self.sizes[n - 1 - pos]).sum()
    }
}
