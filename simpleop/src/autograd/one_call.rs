//! A backward from one head that one recorded call made straight from
//! variables (`y = f(x); y.backward()`), without the pass's tables: the
//! tiny case whose fixed cost the `tiny/relu/recorded` bench row times.
//! It does what [`Pass`](super::engine::Pass) would do for that graph, in
//! the same order and with the same checks and requests; anything else
//! (a recorded input, a variable used twice) goes to the pass.

use std::sync::Mutex;

use smallvec::SmallVec;

use super::engine::{check_call, freed, run_kernel};
use super::tape::{Kind, Link, OpCall, lock};
use crate::symbol::config::GradReq;
use crate::{NDArray, OpReqType, Result};

/// A variable argument: its request and its gradient buffer.
type Var<'a> = (GradReq, &'a Mutex<Option<NDArray>>);

/// The head's call, and per argument its variable (`None` for a constant).
pub(crate) struct OneCall<'a> {
    head: &'a Link,
    call: &'a OpCall,
    vars: SmallVec<[Option<Var<'a>>; 4]>,
}

impl<'a> OneCall<'a> {
    /// The head's call when every argument is a constant or a variable,
    /// no variable twice.
    #[inline]
    pub(crate) fn new(head: &'a Link) -> Option<OneCall<'a>> {
        let call = head.node.call()?;
        let mut vars: SmallVec<[Option<Var<'a>>; 4]> = SmallVec::new();
        for (i, input) in call.inputs.iter().enumerate() {
            let Some(from) = &input.from else {
                vars.push(None);
                continue;
            };
            let twice = call.inputs[..i]
                .iter()
                .filter_map(|j| j.from.as_ref())
                .any(|j| std::sync::Arc::ptr_eq(&j.node, &from.node));
            let Kind::Variable { req, grad, .. } = &from.node.kind else {
                return None;
            };
            if twice {
                return None;
            }
            vars.push(Some((*req, grad)));
        }
        Some(OneCall { head, call, vars })
    }

    fn needed(&self) -> bool {
        self.vars.iter().any(Option::is_some)
    }

    /// [`Pass::check`](super::engine::Pass::check) for this one call.
    #[inline]
    pub(crate) fn check(&self) -> Result<()> {
        if !self.needed() {
            return Ok(());
        }
        check_call(&self.head.node, self.call)
    }

    /// Runs the call's backward with head gradient `g`, each variable's
    /// gradient written into (`write`) or added to (`add`) its buffer; on
    /// success frees what the call saved unless `retain`.
    #[inline]
    pub(crate) fn run(&self, g: &NDArray, retain: bool) -> Result<()> {
        let call = self.call;
        let result = if self.needed() {
            self.run_kernel(g)
        } else {
            Ok(())
        };
        if result.is_ok() && !retain {
            *lock(&call.saved) = None;
        }
        result
    }

    fn run_kernel(&self, g: &NDArray) -> Result<()> {
        let call = self.call;
        let saved = lock(&call.saved);
        let saved = saved.as_ref().ok_or_else(|| freed(call.op.name))?;
        let mut out_grads: SmallVec<[Option<NDArray>; 2]> =
            (0..call.outputs.len()).map(|_| None).collect();
        out_grads[self.head.output] = Some(g.clone());
        let mut bufs: SmallVec<[NDArray; 4]> = SmallVec::with_capacity(self.vars.len());
        let mut reqs: SmallVec<[OpReqType; 4]> = SmallVec::with_capacity(self.vars.len());
        for (input, var) in call.inputs.iter().zip(&self.vars) {
            let own = var.and_then(|(req, grad)| Some((req, take_buffer(req, grad)?)));
            let (buf, req) = match own {
                Some((GradReq::Add, b)) => (b, OpReqType::AddTo),
                Some((_, b)) => (b, OpReqType::WriteTo),
                None => {
                    let b = NDArray::for_overwrite(call.op.name, input.shape.clone(), input.dtype)?;
                    let req = match var {
                        Some(_) => OpReqType::WriteTo,
                        None => OpReqType::Null,
                    };
                    (b, req)
                }
            };
            bufs.push(buf);
            reqs.push(req);
        }
        let result = run_kernel(call, saved, &out_grads, &mut bufs, &reqs);
        for (buf, var) in bufs.into_iter().zip(&self.vars) {
            if let Some((req, grad)) = var {
                // As `Pass::finish`: a failed `write` keeps its buffer only
                // when it has no other.
                let mut grad = lock(grad);
                if result.is_ok() || *req == GradReq::Add || grad.is_none() {
                    *grad = Some(buf);
                }
            }
        }
        result
    }
}

/// A variable's gradient buffer, taken for the pass (none for `null`).
fn take_buffer(req: GradReq, grad: &Mutex<Option<NDArray>>) -> Option<NDArray> {
    (req != GradReq::Null).then(|| lock(grad).take()).flatten()
}
