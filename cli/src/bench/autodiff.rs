//! The `autodiff` rows: a gradient derived from the forward by dual
//! numbers (`#[simple_op(autodiff)]`) against the standard library's
//! hand-written gradient of the same forward, over the same arrays.
//!
//! The derived twins are registered here, under `_bench_autodiff_*` names,
//! so that the library itself carries no benchmark-only ops.

use simpleop::{Attrs, NDArray, OpDef, OpReqType, Result, eager, simple_op};

use super::timing::{Bench, Call};

#[simple_op(name = "_bench_autodiff_relu", autodiff)]
mod relu {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T) -> T {
        simpleop_ops::relu::forward(x)
    }
}

#[simple_op(name = "_bench_autodiff_tanh", autodiff)]
mod tanh {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T) -> T {
        x.tanh()
    }
}

#[simple_op(name = "_bench_autodiff_sigmoid", autodiff)]
mod sigmoid {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T) -> T {
        x.sigmoid()
    }
}

/// The standard library's smooth L1 forward, called as it is.
#[simple_op(name = "_bench_autodiff_smooth_l1", autodiff, scalar)]
mod smooth_l1 {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T, sigma: T) -> T {
        simpleop_ops::smooth_l1::forward(x, sigma)
    }
}

#[simple_op(name = "_bench_autodiff_mul", autodiff)]
mod mul {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T, y: T) -> T {
        x * y
    }
}

/// String attributes, as `Attrs::from_iter` takes them.
type AttrList = &'static [(&'static str, &'static str)];

/// The pairs: the hand-written op, its derived twin, and the attributes.
const PAIRS: [(&str, &OpDef, AttrList); 5] = [
    ("relu", &relu::OP, &[]),
    ("tanh", &tanh::OP, &[]),
    ("sigmoid", &sigmoid::OP, &[]),
    ("smooth_l1", &smooth_l1::OP, &[("scalar", "1.0")]),
    ("elemwise_mul", &mul::OP, &[]),
];

/// One op's backward over `inputs` into `grads`, given its output.
struct Backward<'a> {
    op: &'static OpDef,
    env: simpleop::EnvArguments,
    dy: &'a NDArray,
    y: &'a NDArray,
    inputs: Vec<&'a NDArray>,
}

impl Backward<'_> {
    fn run(&self, grads: &mut [NDArray]) -> Result<()> {
        let reqs = vec![OpReqType::WriteTo; grads.len()];
        eager::invoke_backward(
            self.op,
            &self.env,
            self.dy,
            Some(self.y),
            &self.inputs,
            grads,
            &reqs,
        )
    }
}

/// `<op>/f32/backward`, the hand-written gradient into existing arrays
/// (no baseline: it is the baseline), and `<op>/f32/backward-autodiff`,
/// the derived one, against it.
pub(super) fn rows(b: &mut Bench, x: &NDArray, y: &NDArray, dy: &NDArray) -> Result<()> {
    for (name, derived, attrs) in PAIRS {
        let attrs = Attrs::from_iter(attrs.iter().copied());
        let written = eager::lookup(name)?.def;
        let inputs: Vec<&NDArray> = if written.num_inputs() == 2 {
            vec![x, y]
        } else {
            vec![x]
        };
        let out = eager::invoke(name, &inputs, &attrs)?;
        let hand = Backward {
            op: written,
            env: (written.parse)(written, &attrs)?,
            dy,
            y: &out,
            inputs: inputs.clone(),
        };
        let auto = Backward {
            op: derived,
            env: (derived.parse)(derived, &attrs)?,
            dy,
            y: &out,
            inputs,
        };
        let mut grads: Vec<NDArray> = hand
            .inputs
            .iter()
            .map(|a| NDArray::zeros(a.shape().clone(), a.dtype()))
            .collect();
        let row = format!("{name}/f32/backward");
        b.time(&row, || hand.run(&mut grads))?;
        b.pair(&format!("{row}-autodiff"), &row, |c| match c {
            Call::Base => hand.run(&mut grads),
            Call::Row => auto.run(&mut grads),
        })?;
    }
    Ok(())
}
