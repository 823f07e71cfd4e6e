//! Every `SIMPLEOP_*` environment variable the library reads, in one place.
//!
//! Each is read at most once, by the part of the engine it sets, when that
//! part first runs; [`crate::Tuning`] changes the same settings at run time.
//! The table in `docs/tuning.md` lists them for users.

/// A variable the library reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Var {
    /// `scalar`, `avx2`, `avx512` or `neon`: the highest instruction set.
    Isa,
    /// `0` turns code generation for fused programs off.
    Codegen,
    /// Bytes the storage pool may hold.
    PoolBytes,
    /// The parallel grain, in work units, instead of measuring it.
    ParallelWork,
    /// `0` turns huge-page advice for large buffers off.
    HugePages,
    /// `1` fills every new output with NaN first (debugging aid).
    Poison,
}

impl Var {
    /// The variable's name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Var::Isa => "SIMPLEOP_ISA",
            Var::Codegen => "SIMPLEOP_CODEGEN",
            Var::PoolBytes => "SIMPLEOP_POOL_BYTES",
            Var::ParallelWork => "SIMPLEOP_PARALLEL_WORK",
            Var::HugePages => "SIMPLEOP_HUGE_PAGES",
            Var::Poison => "SIMPLEOP_POISON",
        }
    }
}

/// The variable's trimmed text, if set.
pub(crate) fn text(var: Var) -> Option<String> {
    std::env::var(var.name()).ok().map(|v| v.trim().to_owned())
}

/// An on/off variable: `0` is off, anything else on; `None` when unset.
pub(crate) fn flag(var: Var) -> Option<bool> {
    text(var).map(|v| v != "0")
}

/// A count; `None` when unset or not a number.
pub(crate) fn count(var: Var) -> Option<usize> {
    text(var).and_then(|v| v.parse().ok())
}
