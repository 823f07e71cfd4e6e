//! The executor's public accessors: its arguments, gradient buffers and
//! outputs by name, and what binding planned (memory, fusion, DOT).

use super::Executor;
use crate::symbol::config::{GradReq, MemoryStats};
use crate::symbol::dot;
use crate::symbol::group::FusionGroup;
use crate::{Device, Error, NDArray, Result};

impl Executor {
    /// The argument names, in [`super::Symbol::list_arguments`](crate::symbol::Symbol::list_arguments) order.
    pub fn arg_names(&self) -> &[String] {
        &self.arg_names
    }

    fn arg_index(&self, name: &str) -> Option<usize> {
        self.arg_names.iter().position(|n| n == name)
    }

    /// An argument's array.
    pub fn arg(&self, name: &str) -> Option<&NDArray> {
        self.arg_index(name).map(|k| &self.args[k])
    }

    /// Mutable access to an argument's array, e.g. to update a parameter in
    /// place with an optimizer op between steps. `set_arg` shares the
    /// caller's array with the executor, so updating that copy in place
    /// copies it first (copy-on-write); updating it here does not, unless
    /// it is shared elsewhere. Its shape and dtype are checked again
    /// before use.
    pub fn arg_mut(&mut self, name: &str) -> Option<&mut NDArray> {
        self.arg_index(name).map(|k| &mut self.args[k])
    }

    /// Replaces an argument's values with `value`'s; shape and dtype must
    /// match the bound ones.
    pub fn set_arg(&mut self, name: &str, value: &NDArray) -> Result<()> {
        let k = self
            .arg_index(name)
            .ok_or_else(|| Error::argument(name, "not an argument of the graph"))?;
        self.check_arg(k, value)?;
        self.args[k] = value.clone();
        Ok(())
    }

    /// `value` has argument `k`'s bound shape and dtype.
    pub(super) fn check_arg(&self, k: usize, value: &NDArray) -> Result<()> {
        let node = self.graph.args[k];
        let (shape, dtype) = (&self.shapes[node], self.dtypes[node]);
        if value.shape() != shape || value.dtype() != dtype {
            return Err(Error::argument(
                &self.arg_names[k],
                format!(
                    "is bound as {shape} {dtype}, got {} {}",
                    value.shape(),
                    value.dtype()
                ),
            ));
        }
        Ok(())
    }

    /// An argument's gradient buffer (when its `grad_req` is not `null`).
    pub fn grad(&self, name: &str) -> Option<&NDArray> {
        self.arg_index(name).and_then(|k| self.grads[k].as_ref())
    }

    /// Mutable access to a gradient buffer, e.g. to zero it between
    /// `add` steps. Its shape and dtype are checked again before use.
    pub fn grad_mut(&mut self, name: &str) -> Option<&mut NDArray> {
        self.arg_index(name).and_then(|k| self.grads[k].as_mut())
    }

    /// An argument's `grad_req`.
    pub fn grad_req(&self, name: &str) -> Option<GradReq> {
        self.arg_index(name).map(|k| self.grad_req[k])
    }

    /// The outputs of the last forward pass.
    pub fn outputs(&self) -> &[NDArray] {
        &self.outputs
    }

    /// An output by name (`<node>_output`, as [`super::Symbol::list_outputs`](crate::symbol::Symbol::list_outputs)).
    pub fn output(&self, name: &str) -> Option<&NDArray> {
        self.graph
            .heads
            .iter()
            .position(|&h| {
                let node = &self.graph.nodes[h];
                (node.is_variable() && node.name == name)
                    || name.strip_suffix("_output") == Some(node.name.as_str())
            })
            .map(|i| &self.outputs[i])
    }

    /// The memory plan of training (forward + backward) when some argument
    /// asks for a gradient, else of inference.
    pub fn memory_stats(&self) -> MemoryStats {
        self.training.as_ref().unwrap_or(&self.inference).stats
    }

    /// The fusion groups of the forward graph (groups of two or more
    /// nodes; empty when fusion is off). A group's elementwise members run
    /// as one tile loop; a reduction that keeps axis 0 runs behind it slab
    /// by slab (see the README's fusion section for when).
    pub fn fusion_groups(&self) -> &[FusionGroup] {
        &self.fusion_groups
    }

    /// The fused gradient chains of `backward()`: each group's gradient
    /// steps run as one tile loop, in the listed order (output side
    /// first). Members are named by their forward nodes. Empty when fusion
    /// is off or no argument asks for a gradient.
    pub fn backward_fusion_groups(&self) -> &[FusionGroup] {
        &self.backward_fusion_groups
    }

    /// The memory plan of `forward(false)`.
    pub fn inference_memory_stats(&self) -> MemoryStats {
        self.inference.stats
    }

    /// The graph in DOT with shapes, dtypes and the planned buffer of
    /// every value; in-place writes are marked.
    pub fn to_dot(&self) -> String {
        let plan = self.training.as_ref().unwrap_or(&self.inference);
        dot::write(
            &self.graph,
            Some(dot::Planned {
                shapes: &self.shapes,
                dtypes: &self.dtypes,
                plan,
                groups: &self.dot_groups,
            }),
        )
    }

    /// The device kernels run on.
    pub fn device(&self) -> Device {
        self.ctx.device
    }
}
