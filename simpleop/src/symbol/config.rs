//! How a graph is bound: gradient requests, the executor's settings, and
//! what its memory plan achieved.

/// How an argument's gradient is delivered (MXNet's `grad_req`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum GradReq {
    /// No gradient.
    #[default]
    Null,
    /// The gradient overwrites the buffer.
    Write,
    /// The gradient is added to the buffer.
    Add,
}

impl GradReq {
    /// Parses MXNet's names: `null`, `write`, `add` (and `inplace`, which
    /// MXNet treats as `write` for arguments).
    pub fn from_name(name: &str) -> Option<GradReq> {
        match name {
            "null" => Some(GradReq::Null),
            "write" | "inplace" => Some(GradReq::Write),
            "add" => Some(GradReq::Add),
            _ => None,
        }
    }
    /// The MXNet name.
    pub fn name(self) -> &'static str {
        match self {
            GradReq::Null => "null",
            GradReq::Write => "write",
            GradReq::Add => "add",
        }
    }
}

/// Options for binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BindConfig {
    /// Reuse buffers by liveness and run declared in-place options. Off,
    /// every value gets a buffer of its own (the baseline planned results
    /// are tested against, bit for bit).
    pub memory_planning: bool,
    /// Fuse elementwise ops (TVM's FuseOps rules; see
    /// `Executor::fusion_groups`): a fused group runs tile by tile in
    /// cache and its intermediates get no memory. Results are bitwise
    /// those of the unfused executor, except where `forward(false)` runs
    /// an op's inference form (BatchNorm in f32/f64: a few roundings
    /// apart; see `Executor::inference_fusion_groups`).
    pub fusion: bool,
    /// Compile fused programs to register-resident code where the CPU is
    /// covered; off, they run in the tile interpreter (same bits).
    pub codegen: bool,
    /// Let a row reduction (`sum`, `mean`, `norm` over trailing axes) read
    /// the tiles of the fused program feeding it, so that its input never
    /// reaches memory; off, the input is stored and reduced (same bits).
    pub row_sinks: bool,
}

impl Default for BindConfig {
    /// Planning and fusion on; code generation and row sinks as
    /// [`crate::Tuning::current`] says (read alone: the rest of the
    /// settings, such as the measured grain, are not needed to bind).
    fn default() -> Self {
        BindConfig {
            memory_planning: true,
            fusion: true,
            codegen: crate::engine::jit::codegen_enabled(),
            row_sinks: crate::engine::fused::row_sinks_enabled(),
        }
    }
}

/// What the memory planner achieved for one plan.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes of the buffers the executor allocates for values it owns:
    /// planned buffers, outputs and scratch.
    pub planned_bytes: usize,
    /// The same with one buffer per value and no in-place writes.
    pub unplanned_bytes: usize,
    /// Steps that write over their input (forward) or output gradient
    /// (backward).
    pub inplace_writes: usize,
    /// Number of buffers: planned ones plus one per output.
    pub buffers: usize,
    /// Intermediate values fusion keeps in cache-sized tiles only: they
    /// get no buffer (counted in `unplanned_bytes`, not `planned_bytes`).
    pub fused_values: usize,
    /// Their bytes.
    pub fused_bytes: usize,
}
