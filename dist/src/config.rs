//! Settings, and the one place that reads this crate's environment
//! variables.

use std::time::Duration;

use crate::{DistError, Result};

/// The timeout's variable: seconds (a decimal) that a rank waits in one
/// collective before it declares the ranks that did not arrive failed.
pub const TIMEOUT_VAR: &str = "SIMPLEOP_DIST_TIMEOUT_SECS";
/// The bucket size's variable, in MiB (a decimal).
pub const BUCKET_VAR: &str = "SIMPLEOP_DIST_BUCKET_MB";

/// How a [`Dist`](crate::Dist) waits and how gradients are grouped.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DistConfig {
    /// How long one collective may wait for the other ranks.
    pub timeout: Duration,
    /// After a failure, how long a rank waits before it aborts the job, so
    /// that the other ranks (which time out a little later or receive its
    /// report) print their own error before MPI_Abort ends them.
    pub linger: Duration,
    /// Gradient bytes per all-reduce bucket (PyTorch DDP: 25 MiB).
    pub bucket_bytes: usize,
}

impl Default for DistConfig {
    /// 300 s, 1 s of linger, 25 MiB buckets.
    fn default() -> Self {
        DistConfig {
            timeout: Duration::from_secs(300),
            linger: Duration::from_secs(1),
            bucket_bytes: 25 << 20,
        }
    }
}

impl DistConfig {
    /// The defaults, with [`TIMEOUT_VAR`] and [`BUCKET_VAR`] applied when
    /// set. A value that is not a positive number is an error naming the
    /// variable.
    pub fn from_env() -> Result<DistConfig> {
        let mut config = DistConfig::default();
        if let Some(secs) = positive_var(TIMEOUT_VAR)? {
            config.timeout = Duration::from_secs_f64(secs);
        }
        if let Some(mb) = positive_var(BUCKET_VAR)? {
            config.bucket_bytes = ((mb * (1 << 20) as f64) as usize).max(4);
        }
        Ok(config)
    }
}

fn positive_var(name: &str) -> Result<Option<f64>> {
    let Ok(text) = std::env::var(name) else {
        return Ok(None);
    };
    match text.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v < 1e9 => Ok(Some(v)),
        _ => Err(DistError::invalid(
            "DistConfig::from_env",
            name,
            format!("`{text}` is not a positive number below 1e9"),
        )),
    }
}
