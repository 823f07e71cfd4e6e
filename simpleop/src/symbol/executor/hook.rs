//! The gradient-ready hook: [`Executor::backward_with_hook`].

use super::Executor;
use crate::symbol::ready::GradReady;
use crate::{NDArray, Result};

impl Executor {
    /// Runs the backward pass of the last `forward(true)` as
    /// [`Executor::backward`] does, calling `hook` once for each argument
    /// with a gradient request (`write` or `add`) as soon as its gradient
    /// is final: right after the last backward step that writes (or, with
    /// `add` accumulation or fusion, reads) its buffer, so that no later
    /// kernel changes it. An argument that no step writes (its gradient
    /// path is cut) is given at the start, its buffer as backward leaves
    /// it. The order is the order backward finishes the gradients, roughly
    /// the reverse of the forward order; it is not guaranteed.
    ///
    /// This is the hook data-parallel training needs to start reducing
    /// the last layers' gradients while backward computes the first ones
    /// (PyTorch DDP's overlap). An error from `hook` stops the pass and is
    /// returned; the gradients not yet given are then unspecified.
    ///
    /// ```
    /// use std::collections::HashMap;
    /// use simpleop::symbol::{GradReq, Symbol};
    /// use simpleop::{DType, NDArray};
    /// # fn main() -> simpleop::Result<()> {
    /// simpleop_ops::link();
    /// let (a, b) = (Symbol::var("a"), Symbol::var("b"));
    /// let y = (&(&a * &b)? * &b)?;
    /// let one = || NDArray::from_vec(vec![2.0f32], [1]);
    /// let args = HashMap::from([("a".to_owned(), one()?), ("b".to_owned(), one()?)]);
    /// let zero = || NDArray::zeros([1], DType::F32);
    /// let grads = HashMap::from([("a".to_owned(), zero()), ("b".to_owned(), zero())]);
    /// let reqs = HashMap::from([("a".to_owned(), GradReq::Write), ("b".to_owned(), GradReq::Write)]);
    /// let mut exe = y.bind(args, grads, reqs)?;
    /// exe.forward(true)?;
    /// let mut seen = Vec::new();
    /// exe.backward_with_hook(&[], &mut |g| {
    ///     seen.push((g.name.to_owned(), g.grad.to_vec::<f32>()?[0]));
    ///     Ok(())
    /// })?;
    /// seen.sort_by(|x, y| x.0.cmp(&y.0));
    /// assert_eq!(seen, [("a".to_owned(), 4.0), ("b".to_owned(), 8.0)]);
    /// # Ok(()) }
    /// ```
    pub fn backward_with_hook(
        &mut self,
        head_grads: &[NDArray],
        hook: &mut dyn FnMut(GradReady<'_>) -> Result<()>,
    ) -> Result<()> {
        self.check_trained()?;
        let Some(plan) = self.training.take() else {
            // No argument asks for a gradient: nothing to give.
            return Ok(());
        };
        let schedule = std::mem::take(&mut self.ready_schedule);
        let mut next = 0;
        let mut fire = |exe: &Executor, done: usize| -> Result<()> {
            while let Some(&(s, k)) = schedule.get(next)
                && s <= done
            {
                next += 1;
                if let Some(grad) = exe.grads[k].as_ref() {
                    let name = &exe.arg_names[k];
                    hook(GradReady {
                        index: k,
                        name,
                        grad,
                    })?;
                }
            }
            Ok(())
        };
        let result = self
            .backward_with(&plan, head_grads, &mut fire)
            .and_then(|()| fire(self, usize::MAX));
        self.ready_schedule = schedule;
        self.training = Some(plan);
        result
    }
}
