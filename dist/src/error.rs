//! The crate's one error type.

use std::time::Duration;

/// What can go wrong in data-parallel training. Every message names the
/// function (`op`) and, for failures of other ranks, the rank.
#[derive(Debug, thiserror::Error)]
pub enum DistError {
    /// `MPI_Init_thread` was already called in this process, or failed.
    #[error("Dist::init: MPI is already initialised in this process, or MPI_Init_thread failed")]
    Init,
    /// An MPI call returned an error code (the world communicator returns
    /// errors instead of aborting).
    #[error("{op}: {call} failed with MPI error {code}: {message}")]
    Mpi {
        /// The crate's function.
        op: String,
        /// The MPI function.
        call: &'static str,
        /// Its error code.
        code: i32,
        /// `MPI_Error_string` of the code.
        message: String,
    },
    /// A collective did not complete within the timeout. `missing` are the
    /// ranks whose arrival message for it never came: they died or hang
    /// before it. Empty when every rank arrived and the operation itself
    /// stalled (a rank died inside it).
    #[error("{op} (collective #{seq}): {}", timeout_text(missing, *timeout))]
    Timeout {
        /// The crate's function.
        op: String,
        /// The collective's sequence number (the same on every rank).
        seq: u64,
        /// Ranks that never arrived.
        missing: Vec<i32>,
        /// The timeout that ran out.
        timeout: Duration,
    },
    /// Another rank detected a failure first and said so.
    #[error(
        "{op} (collective #{seq}): rank {reporter} reports that {}",
        missing_text(missing)
    )]
    PeerReported {
        /// The crate's function this rank was in.
        op: String,
        /// The collective the reporter was in.
        seq: u64,
        /// The rank that sent the report.
        reporter: i32,
        /// The ranks it found missing (empty: a stalled operation).
        missing: Vec<i32>,
    },
    /// Ranks called collectives in different orders or with different
    /// sizes: the same collective number means different things.
    #[error("{op} (collective #{seq}): rank {rank} is in a different collective ({reason})")]
    Mismatch {
        /// The crate's function.
        op: String,
        /// The collective's sequence number.
        seq: u64,
        /// The other rank.
        rank: i32,
        /// What differs.
        reason: String,
    },
    /// A collective failed earlier: MPI cannot recover a communicator, so
    /// every later one is refused.
    #[error("{op}: an earlier collective failed ({first}); the job must end")]
    Broken {
        /// The crate's function.
        op: String,
        /// The first failure's message.
        first: String,
    },
    /// A bad argument or setting.
    #[error("{op}: `{arg}`: {reason}")]
    Invalid {
        /// The crate's function.
        op: String,
        /// The argument or environment variable.
        arg: String,
        /// What was expected.
        reason: String,
    },
    /// An error of the core (arrays, files).
    #[error(transparent)]
    Simpleop(#[from] simpleop::Error),
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, DistError>;

impl DistError {
    /// A bad argument of `op`.
    pub fn invalid(
        op: impl Into<String>,
        arg: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        DistError::Invalid {
            op: op.into(),
            arg: arg.into(),
            reason: reason.into(),
        }
    }

    /// Whether this failure leaves the communicator unusable (a peer is
    /// gone or the ranks disagree), so that the job must end.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            DistError::Mpi { .. }
                | DistError::Timeout { .. }
                | DistError::PeerReported { .. }
                | DistError::Mismatch { .. }
                | DistError::Broken { .. }
        )
    }
}

fn ranks_text(ranks: &[i32]) -> String {
    let list: Vec<String> = ranks.iter().map(i32::to_string).collect();
    match ranks.len() {
        1 => format!("rank {}", list[0]),
        _ => format!("ranks {}", list.join(", ")),
    }
}

fn missing_text(missing: &[i32]) -> String {
    if missing.is_empty() {
        "every rank arrived but the operation stalled (a rank died or hangs inside it)".into()
    } else {
        format!("{} did not arrive (died or hangs)", ranks_text(missing))
    }
}

fn timeout_text(missing: &[i32], timeout: Duration) -> String {
    let secs = timeout.as_secs_f64();
    if missing.is_empty() {
        format!(
            "every rank arrived but the operation did not complete within {secs} s (a rank died or hangs inside it)"
        )
    } else {
        format!(
            "{} did not arrive within {secs} s (died or hangs; SIMPLEOP_DIST_TIMEOUT_SECS sets the timeout)",
            ranks_text(missing)
        )
    }
}
