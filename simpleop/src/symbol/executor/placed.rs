//! [`Placed`]: the addresses of a plan's values during one run, and the
//! views of them that the steps read and write.

use super::Ptrs;
use crate::symbol::steps::{self as plan, Loc, Plan, ValueId};
use crate::{DType, Shape, TBlob, TBlobMut};

/// Where the values of one plan live during one run (see
/// [`super::Executor::place`]).
pub(super) struct Placed<'p> {
    pub(super) plan: &'p Plan,
    pub(super) args: Ptrs<*const u8>,
    pub(super) aux: Ptrs<*mut u8>,
    pub(super) head_grads: Ptrs<*const u8>,
    pub(super) outputs: Ptrs<*mut u8>,
    pub(super) grads: Ptrs<Option<*mut u8>>,
    pub(super) pool: Ptrs<*mut u8>,
    pub(super) sink: *mut u8,
    pub(super) sink_slot: usize,
}

impl Placed<'_> {
    pub(super) fn ptr(&self, v: ValueId) -> *mut u8 {
        match self.plan.values[v].loc {
            Loc::Arg(k) => self.args[k].cast_mut(),
            Loc::Aux(k) => self.aux[k],
            Loc::ArgGrad(k) => self.grads[k].expect("planned only with a buffer"),
            Loc::Head(h) => self.outputs[h],
            Loc::HeadGrad(h) => self.head_grads[h].cast_mut(),
            Loc::Pool(b) => self.pool[b],
            Loc::Unplaced | Loc::Fused | Loc::Discard => {
                unreachable!("the planner places every value a step reads or writes")
            }
        }
    }

    pub(super) fn view(&self, v: ValueId) -> TBlob<'_> {
        let val = &self.plan.values[v];
        // SAFETY: see `view_mut`; arguments and head gradients are only
        // ever viewed here, never written.
        unsafe { TBlob::from_raw(self.ptr(v), val.dtype, val.shape.clone()) }
    }

    pub(super) fn view_mut(&self, v: ValueId) -> TBlobMut<'_> {
        let val = &self.plan.values[v];
        if val.loc == Loc::Discard {
            return TBlobMut::discarded(val.dtype, val.shape.clone());
        }
        // SAFETY: every pointer is the start of a live, 64-byte aligned
        // allocation owned by the executor (arguments, aux states, outputs,
        // gradient buffers, pool, sink) or by the run's head gradients, none of
        // which is resized or dropped while `self` lives; each is at least
        // as large as the value viewed there (pool buffers are sized by the
        // planner to the largest value placed in them). The planner gives a
        // value being written a buffer no live value occupies, except the
        // exact alias of a declared in-place option, which the kernel
        // contract allows: the elementwise driver reads each tile before
        // writing it. An aux state is viewed mutably only by the forward
        // step of the op it belongs to, which does not also read it as an
        // input, and one op's aux states are distinct variables (checked
        // when the graph is built), so no two views of one call overlap.
        unsafe { TBlobMut::from_raw(self.ptr(v), val.dtype, val.shape.clone()) }
    }

    /// Scratch for a gradient no one asked for: slot `i` of the sink.
    pub(super) fn sink_slot(&self, i: usize, dtype: DType, shape: &Shape) -> TBlobMut<'_> {
        // SAFETY: the sink has a slot for every input of the widest
        // backward step, each `sink_slot` bytes: at least the size of every
        // `Null` input, and of every input of a step whose gradients split
        // into several calls (`SinkLayout`), the only inputs that land
        // here. Slot `i` is this call's alone, and no array lives there, so
        // an op that writes it anyway harms nothing.
        unsafe { TBlobMut::from_raw(self.sink.add(i * self.sink_slot), dtype, shape.clone()) }
    }
}

pub(super) fn view_from<'a>(ptr: *const u8, like: &plan::Value) -> TBlob<'a> {
    // SAFETY: `ptr` is the start of a head gradient array, checked in
    // `backward_with` to have the output's shape and dtype, which is the
    // gradient value's; it outlives the step.
    unsafe { TBlob::from_raw(ptr, like.dtype, like.shape.clone()) }
}
