//! Symbolic graphs: the second front end fed by the same registered ops.
//!
//! A [`Symbol`] is a handle on one or more outputs of a graph of op nodes
//! over variables. Build one with [`Symbol::var`], the ops' typed functions
//! (they are generic over [`crate::Operand`], so `relu(&x)` works on a
//! `Symbol` as on an `NDArray`), [`Symbol::invoke`] by name, arithmetic
//! operators and [`Symbol::group`]; save and load MXNet's symbol JSON; infer
//! shapes and dtypes; and [`Symbol::bind`] it to an [`Executor`] that runs
//! forward and backward with a planned memory layout.

//!
//! [`Symbol::bind`] compiles the graph in passes, one file each, each
//! with a typed input and output (`steps` is the form they share):
//! inference (`infer`) → for `forward(false)` with fusion, ops replaced
//! by their inference forms (`inference`) → schedule, forward plus autodiff (`schedule`)
//! → fusion groups (`group`) → lowering of each group to one fused step
//! (`lower`) → memory planning (`allocate`) → the executable steps
//! (`executor`). `dot` prints any stage.

mod allocate;
mod api;
mod bind;
pub(crate) mod config;
mod dot;
mod executor;
mod gradient;
mod graph;
mod group;
mod infer;
mod inference;
mod json;
mod lower;
mod node;
mod ready;
mod schedule;
mod slabs;
mod steps;

pub use api::{Symbol, TopoNode, Topology};
pub use config::{BindConfig, GradReq, MemoryStats};
pub use executor::Executor;
pub use group::FusionGroup;
pub use infer::{InferredShapes, InferredTypes};
pub use ready::GradReady;
