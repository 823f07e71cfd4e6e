//! Data-parallel training for simpleop over MPI, in the manner of
//! PyTorch's DDP and MXNet's `dist_sync` KVStore, as a crate of its own
//! so that `simpleop` needs no MPI.
//!
//! - [`Dist`]: start-up (rank, size), the broadcast of rank 0's
//!   parameters, and collectives that wait with a timeout and name the
//!   rank that died or hangs;
//! - [`GradReducer`]: the mean of the ranks' gradients, all-reduced in
//!   buckets that start during backward when it is fed from the core's
//!   gradient-ready hook (`Executor::backward_with_hook`,
//!   `autograd::backward_with_hook`), as in PyTorch DDP;
//! - [`ShardedSampler`]: each rank's slice of every epoch's permutation;
//! - [`Checkpointer`]: `.params` checkpoints written by rank 0 (atomically)
//!   and resumed from by every rank.
//!
//! N ranks with batch B each take the same steps as one process with
//! batch N·B, up to the order of float sums; `docs/distributed.md` has the
//! design, the tolerance and how to run it.
//!
//! ```no_run
//! use simpleop_dist::{Dist, DistConfig, GradReducer};
//! # fn main() -> simpleop_dist::Result<()> {
//! let config = DistConfig::from_env()?;
//! let mut dist = Dist::init(config)?;
//! let mut w = simpleop::NDArray::zeros([4], simpleop::DType::F32);
//! dist.broadcast(&mut [&mut w])?;
//! let mut reducer = GradReducer::new(config.bucket_bytes);
//! let g = simpleop::NDArray::ones([4], simpleop::DType::F32);
//! let mean = reducer.allreduce_mean(&mut dist, &[&g])?;
//! assert_eq!(mean[0].as_slice::<f32>()?, &[1.0; 4]);
//! # Ok(()) }
//! ```

mod checkpoint;
mod comm;
mod config;
mod error;
mod raw;
mod reducer;
mod sampler;

pub use checkpoint::{Checkpoint, Checkpointer};
pub use comm::Dist;
pub use config::{BUCKET_VAR, DistConfig, TIMEOUT_VAR};
pub use error::{DistError, Result};
pub use reducer::GradReducer;
pub use sampler::{Remainder, ShardedSampler};
