//! [`ShardedSampler`]: each rank's batches of every epoch, cut from one
//! permutation that every rank draws from the shared seed.

use crate::{DistError, Result};

/// What happens to the rows left over when the dataset is not a multiple
/// of the global batch (`size × batch` rows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Remainder {
    /// The permutation's last `len mod (size·batch)` rows are skipped this
    /// epoch (the shuffle changes which rows that is), as PyTorch's
    /// `DistributedSampler(drop_last=True)` with a batch sampler dropping
    /// the last partial batch. Every step has a full global batch, so a
    /// run on N ranks matches one process with batch N·B step for step.
    DropLast,
    /// The permutation is extended by repeating its start until it is a
    /// multiple of the global batch, as `DistributedSampler`'s padding:
    /// every row is seen, a few twice.
    Pad,
}

/// Rank `rank`'s share of a shuffled dataset of `len` rows.
///
/// Epoch `e`'s permutation of `0..len` depends only on `(seed, e)`, so
/// every rank draws the same one without talking. Global batch `k` is the
/// permutation's rows `k·size·batch .. (k+1)·size·batch`, and rank `r`
/// takes the contiguous slice `r·batch .. (r+1)·batch` of it. The ranks'
/// batches of step `k`, concatenated in rank order, are exactly batch `k`
/// of a one-process sampler with batch `size·batch`
/// (`ShardedSampler::new(len, size·batch, 0, 1, seed, ..)`), which is
/// what makes N ranks equal one large-batch process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardedSampler {
    len: usize,
    batch: usize,
    rank: usize,
    size: usize,
    seed: u64,
    remainder: Remainder,
}

impl ShardedSampler {
    /// `batch` rows per rank and step; `rank < size`.
    pub fn new(
        len: usize,
        batch: usize,
        rank: usize,
        size: usize,
        seed: u64,
        remainder: Remainder,
    ) -> Result<ShardedSampler> {
        let op = "ShardedSampler::new";
        if batch == 0 || size == 0 {
            return Err(DistError::invalid(op, "batch, size", "must be positive"));
        }
        if rank >= size {
            return Err(DistError::invalid(
                op,
                "rank",
                format!("{rank} is not below size {size}"),
            ));
        }
        let global = batch.checked_mul(size).ok_or_else(|| {
            DistError::invalid(op, "batch", format!("{batch} × {size} ranks overflows"))
        })?;
        if len == 0 || (remainder == Remainder::DropLast && len < global) {
            return Err(DistError::invalid(
                op,
                "len",
                format!(
                    "{len} rows is fewer than one global batch of {global} ({size} ranks × {batch})"
                ),
            ));
        }
        Ok(ShardedSampler {
            len,
            batch,
            rank,
            size,
            seed,
            remainder,
        })
    }

    /// Rows per step over all ranks.
    pub fn global_batch(&self) -> usize {
        self.batch * self.size
    }

    /// Steps in every epoch (the same on every rank).
    pub fn steps_per_epoch(&self) -> usize {
        match self.remainder {
            Remainder::DropLast => self.len / self.global_batch(),
            Remainder::Pad => self.len.div_ceil(self.global_batch()),
        }
    }

    /// Epoch `epoch`'s permutation of `0..len` (Fisher–Yates driven by
    /// splitmix64 seeded from `seed` and `epoch`).
    pub fn permutation(&self, epoch: u64) -> Vec<usize> {
        let mut state = self.seed ^ epoch.wrapping_mul(0xd1b5_4a32_d192_ed03);
        let mut order: Vec<usize> = (0..self.len).collect();
        for i in (1..order.len()).rev() {
            let j = (splitmix(&mut state) % (i as u64 + 1)) as usize;
            order.swap(i, j);
        }
        order
    }

    /// This rank's batches of `epoch`, one per step, `batch` rows each.
    pub fn batches(&self, epoch: u64) -> Vec<Vec<usize>> {
        let mut order = self.permutation(epoch);
        let global = self.global_batch();
        let total = self.steps_per_epoch() * global;
        if total > order.len() {
            let pad: Vec<usize> = order
                .iter()
                .copied()
                .cycle()
                .take(total - order.len())
                .collect();
            order.extend(pad);
        }
        order[..total]
            .chunks_exact(global)
            .map(|g| g[self.rank * self.batch..(self.rank + 1) * self.batch].to_vec())
            .collect()
    }
}

/// splitmix64's next value.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_concatenated_are_the_large_batch() {
        let (len, b) = (103, 4);
        for size in 1..=5 {
            let one = ShardedSampler::new(len, b * size, 0, 1, 9, Remainder::DropLast).unwrap();
            let shards: Vec<_> = (0..size)
                .map(|r| ShardedSampler::new(len, b, r, size, 9, Remainder::DropLast).unwrap())
                .collect();
            for epoch in 0..3 {
                let big = one.batches(epoch);
                let parts: Vec<_> = shards.iter().map(|s| s.batches(epoch)).collect();
                assert_eq!(big.len(), len / (b * size));
                for (k, batch) in big.iter().enumerate() {
                    let joined: Vec<usize> = parts.iter().flat_map(|p| p[k].clone()).collect();
                    assert_eq!(&joined, batch);
                }
            }
        }
    }

    #[test]
    fn drop_last_covers_disjoint_rows_and_pad_covers_all() {
        let (len, b, size) = (10, 2, 3);
        let rows = |rem| -> Vec<usize> {
            let mut all: Vec<usize> = (0..size)
                .flat_map(|r| {
                    ShardedSampler::new(len, b, r, size, 1, rem)
                        .unwrap()
                        .batches(0)
                })
                .flatten()
                .collect();
            all.sort();
            all
        };
        let dropped = rows(Remainder::DropLast);
        assert_eq!(dropped.len(), 6);
        assert!(dropped.windows(2).all(|w| w[0] < w[1]), "no row twice");
        let padded = rows(Remainder::Pad);
        assert_eq!(padded.len(), 12);
        let mut seen = padded.clone();
        seen.dedup();
        assert_eq!(seen, (0..len).collect::<Vec<_>>());
    }

    #[test]
    fn epochs_differ_and_bad_arguments_are_errors() {
        let s = ShardedSampler::new(50, 5, 0, 2, 3, Remainder::DropLast).unwrap();
        assert_ne!(s.permutation(0), s.permutation(1));
        assert_eq!(s.permutation(4), s.clone().permutation(4));
        assert!(ShardedSampler::new(50, 5, 2, 2, 3, Remainder::DropLast).is_err());
        assert!(ShardedSampler::new(9, 5, 0, 2, 3, Remainder::DropLast).is_err());
        assert!(ShardedSampler::new(9, 5, 0, 2, 3, Remainder::Pad).is_ok());
        assert!(ShardedSampler::new(9, 0, 0, 2, 3, Remainder::Pad).is_err());
    }
}
