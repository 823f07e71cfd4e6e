//! The executor's public accessors: its arguments, gradient buffers and
//! outputs by name, its weights in and out as named lists, and what
//! binding planned (memory, fusion, DOT).

use std::borrow::Borrow;
use std::collections::HashSet;
use std::path::Path;

use super::Executor;
use crate::params::{ARG_PREFIX, AUX_PREFIX, LoadOptions};
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

    /// The aux-state names, in [`Symbol::list_auxiliary_states`](crate::symbol::Symbol::list_auxiliary_states) order.
    pub fn aux_names(&self) -> &[String] {
        &self.aux_names
    }

    fn aux_index(&self, name: &str) -> Option<usize> {
        self.aux_names.iter().position(|n| n == name)
    }

    /// An aux state's array (BatchNorm's moving statistics), as the last
    /// training forward pass left it.
    pub fn aux(&self, name: &str) -> Option<&NDArray> {
        self.aux_index(name).map(|k| &self.aux[k])
    }

    /// Replaces an aux state's values with `value`'s; shape and dtype must
    /// match the bound ones.
    pub fn set_aux(&mut self, name: &str, value: &NDArray) -> Result<()> {
        let k = self
            .aux_index(name)
            .ok_or_else(|| Error::argument(name, "not an aux state of the graph"))?;
        self.check_aux(k, value)?;
        self.aux[k] = value.clone();
        Ok(())
    }

    /// `value` has aux state `k`'s bound shape and dtype.
    pub(super) fn check_aux(&self, k: usize, value: &NDArray) -> Result<()> {
        let node = self.graph.aux[k];
        let (shape, dtype) = (&self.shapes[node], self.dtypes[node]);
        if value.shape() != shape || value.dtype() != dtype {
            return Err(Error::argument(
                &self.aux_names[k],
                format!(
                    "is bound as {shape} {dtype}, got {} {}",
                    value.shape(),
                    value.dtype()
                ),
            ));
        }
        Ok(())
    }

    /// Every aux state with its name, in [`Executor::aux_names`] order
    /// (copy-on-write, as [`Executor::named_args`]).
    pub fn named_aux(&self) -> Vec<(String, NDArray)> {
        self.aux_names
            .iter()
            .cloned()
            .zip(self.aux.iter().cloned())
            .collect()
    }

    /// Every argument with its name, in [`Executor::arg_names`] order.
    /// The arrays share storage with the executor's copy-on-write, so they
    /// cost nothing and keep these values when the executor's arguments
    /// change afterwards.
    pub fn named_args(&self) -> Vec<(String, NDArray)> {
        self.arg_names
            .iter()
            .cloned()
            .zip(self.args.iter().cloned())
            .collect()
    }

    /// The weights as MXNet names them in a `.params` file: `arg:NAME` for
    /// every argument not in `inputs` (the data and labels), in argument
    /// order, then `aux:NAME` for every aux state.
    pub fn params(&self, inputs: &[&str]) -> Vec<(String, NDArray)> {
        let args = self
            .arg_names
            .iter()
            .zip(&self.args)
            .filter(|(name, _)| !inputs.contains(&name.as_str()))
            .map(|(name, a)| (format!("{ARG_PREFIX}{name}"), a.clone()));
        let aux = self
            .aux_names
            .iter()
            .zip(&self.aux)
            .map(|(name, a)| (format!("{AUX_PREFIX}{name}"), a.clone()));
        args.chain(aux).collect()
    }

    /// Writes [`Executor::params`] to an MXNet `.params` file at `path`
    /// (see [`NDArray::save_params`]): `mx.model.load_checkpoint`, Gluon's
    /// `SymbolBlock.imports` and [`Executor::load_params`] read it back,
    /// bit for bit.
    ///
    /// ```
    /// use std::collections::HashMap;
    /// use simpleop::params::LoadOptions;
    /// use simpleop::symbol::{GradReq, Symbol};
    /// use simpleop::{DType, NDArray, Shape};
    /// # fn main() -> simpleop::Result<()> {
    /// simpleop_ops::link();
    /// let y = (&Symbol::var("x") * &Symbol::var("w"))?;
    /// let shapes = HashMap::from([("x".to_owned(), Shape::new(vec![3])), ("w".to_owned(), Shape::new(vec![3]))]);
    /// let reqs = HashMap::from([("w".to_owned(), GradReq::Write)]);
    /// let mut exe = y.simple_bind(&shapes, &HashMap::new(), reqs.clone())?;
    /// exe.set_arg("w", &NDArray::from_vec(vec![0.1f32, 0.2, 0.3], [3])?)?;
    /// exe.set_arg("x", &NDArray::from_vec(vec![1.0f32, 2.0, 3.0], [3])?)?;
    /// // A training step: w -= 0.5 * dy/dw.
    /// exe.forward(true)?;
    /// exe.backward(&[])?;
    /// let grad = exe.grad("w").unwrap().to_vec::<f32>()?;
    /// for (w, g) in exe.arg_mut("w").unwrap().as_slice_mut::<f32>()?.iter_mut().zip(grad) {
    ///     *w -= 0.5 * g;
    /// }
    /// let dir = std::env::temp_dir().join(format!("simpleop-doc-exe-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let path = dir.join("model-0001.params");
    /// exe.save_params(&path, &["x"])?;
    ///
    /// // A fresh executor gets the trained weights back, bit for bit.
    /// let mut fresh = y.simple_bind(&shapes, &HashMap::new(), reqs)?;
    /// let params = NDArray::load_params(&path)?;
    /// fresh.load_params(&params, &LoadOptions { inputs: &["x"], ..Default::default() })?;
    /// std::fs::remove_dir_all(&dir).unwrap();
    /// let (a, b) = (exe.arg("w").unwrap(), fresh.arg("w").unwrap());
    /// assert_eq!(a.as_slice::<f32>()?, b.as_slice::<f32>()?);
    /// # Ok(()) }
    /// ```
    pub fn save_params(&self, path: impl AsRef<Path>, inputs: &[&str]) -> Result<()> {
        NDArray::save_params(path, &self.params(inputs))
    }

    /// Sets the arguments and aux states named in `entries` (as
    /// [`NDArray::load_params`] returns them: `arg:NAME` and `aux:NAME`, or
    /// a bare `NAME` as Gluon's `save_parameters` writes it), each checked
    /// against the bound shape and dtype. Nothing changes unless every
    /// check passes.
    ///
    /// With the default `options` it is an error when a name is neither
    /// an argument nor an aux state (`ignore_extra` skips those) and when
    /// an argument that is not one of `options.inputs`, or an aux state, is
    /// not given (`allow_missing` leaves those as they are).
    pub fn load_params<S: AsRef<str>, A: Borrow<NDArray>>(
        &mut self,
        entries: &[(S, A)],
        options: &LoadOptions<'_>,
    ) -> Result<()> {
        // Slots: arguments first, then aux states.
        let n_args = self.args.len();
        let mut updates: Vec<(usize, &NDArray)> = Vec::new();
        let mut given = HashSet::new();
        for (name, value) in entries {
            let (name, value) = (name.as_ref(), value.borrow());
            let target = match name.strip_prefix(AUX_PREFIX) {
                Some(aux) => self.aux_index(aux).map(|k| n_args + k),
                // `arg:` names an argument; a bare name either.
                None => match name.strip_prefix(ARG_PREFIX) {
                    Some(arg) => self.arg_index(arg),
                    None => {
                        let aux = || self.aux_index(name).map(|k| n_args + k);
                        self.arg_index(name).or_else(aux)
                    }
                },
            };
            let Some(slot) = target else {
                if options.ignore_extra {
                    continue;
                }
                return Err(Error::argument(
                    name,
                    "is in the parameter list but is no argument or aux state of the graph \
                     (LoadOptions::ignore_extra skips such names)",
                ));
            };
            if !given.insert(slot) {
                return Err(Error::argument(
                    name,
                    format!(
                        "{} `{}` is given twice in the parameter list",
                        if slot < n_args {
                            "argument"
                        } else {
                            "aux state"
                        },
                        self.slot_name(slot)
                    ),
                ));
            }
            match slot.checked_sub(n_args) {
                Some(k) => self.check_aux(k, value)?,
                None => self.check_arg(slot, value)?,
            }
            updates.push((slot, value));
        }
        if !options.allow_missing {
            let missing: Vec<&str> = (0..n_args + self.aux.len())
                .filter(|k| !given.contains(k))
                .map(|k| self.slot_name(k))
                .filter(|name| !options.inputs.contains(name))
                .collect();
            if let Some(first) = missing.first() {
                return Err(Error::argument(
                    *first,
                    format!(
                        "is missing from the parameter list (missing: {}); name the graph's \
                         inputs in LoadOptions::inputs, or set allow_missing",
                        missing.join(", ")
                    ),
                ));
            }
        }
        for (slot, value) in updates {
            match slot.checked_sub(n_args) {
                Some(k) => self.aux[k] = value.clone(),
                None => self.args[slot] = value.clone(),
            }
        }
        Ok(())
    }

    /// The name of slot `k`: argument `k`, or aux state `k - args`.
    fn slot_name(&self, k: usize) -> &str {
        match k.checked_sub(self.args.len()) {
            Some(a) => &self.aux_names[a],
            None => &self.arg_names[k],
        }
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

    /// An output by name (`<node>_output`, `<node>_mean`, as [`super::Symbol::list_outputs`](crate::symbol::Symbol::list_outputs)).
    pub fn output(&self, name: &str) -> Option<&NDArray> {
        // One list of output names per node, not per head.
        let mut names: Option<(usize, Vec<String>)> = None;
        self.graph
            .heads
            .iter()
            .position(|&h| {
                let (producer, k) = self.graph.nodes[h].output_of.unwrap_or((h, 0));
                let p = &self.graph.nodes[producer];
                let Some(op) = p.op else {
                    return p.name == name;
                };
                let Some(out) = name
                    .strip_prefix(p.name.as_str())
                    .and_then(|r| r.strip_prefix('_'))
                else {
                    return false;
                };
                if names.as_ref().is_none_or(|(q, _)| *q != producer) {
                    names = Some((producer, op.output_names(&p.env)));
                }
                let list = names.as_ref().map(|(_, n)| n.as_slice()).unwrap_or(&[]);
                list.get(k).is_some_and(|n| n == out)
            })
            .map(|i| &self.outputs[i])
    }

    /// The memory plan of training (forward + backward) when some argument
    /// asks for a gradient, else of inference.
    pub fn memory_stats(&self) -> MemoryStats {
        self.training
            .as_ref()
            .map_or_else(|| self.inference_memory_stats(), |t| t.stats)
    }

    /// The fusion groups of the forward graph as bound (groups of two or
    /// more nodes; empty when fusion is off). A group's elementwise members
    /// run as one tile loop; a reduction that keeps axis 0 runs behind it
    /// slab by slab (see the README's fusion section for when).
    /// `forward(false)` runs [`Executor::inference_fusion_groups`] instead
    /// when an op has an inference form (BatchNorm).
    pub fn fusion_groups(&self) -> &[FusionGroup] {
        &self.fusion_groups
    }

    /// The fusion groups `forward(false)` runs: those of the graph with
    /// each op that has an inference form replaced by it (BatchNorm by a
    /// per-channel subtract, multiply and add, named `<node>/inference<k>` but for
    /// the last, which keeps the node's name), else
    /// [`Executor::fusion_groups`].
    pub fn inference_fusion_groups(&self) -> &[FusionGroup] {
        self.expanded
            .as_ref()
            .map_or(&self.fusion_groups, |e| &e.fusion_groups)
    }

    /// The fused gradient chains of `backward()`: each group's gradient
    /// steps run as one tile loop, in the listed order (output side
    /// first). Members are named by their forward nodes. Empty when fusion
    /// is off or no argument asks for a gradient.
    pub fn backward_fusion_groups(&self) -> &[FusionGroup] {
        &self.backward_fusion_groups
    }

    /// The memory plan of `forward(false)` (of the graph with inference
    /// forms, when an op has one).
    pub fn inference_memory_stats(&self) -> MemoryStats {
        self.expanded
            .as_ref()
            .map_or(self.inference.stats, |e| e.inference.stats)
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
