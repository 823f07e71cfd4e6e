//! The entry points: check the arrays against the program, find inputs
//! that are an output's buffer, and hand the typed run the rest.

use std::borrow::Cow;

use smallvec::SmallVec;

use super::program::{TileProgram, bad};
use super::row_sink::RowSink;
use super::slots::SlotUses;
use super::typed::run_typed;
use crate::engine::drivers::{DstInfo, alias_of};
use crate::{DType, Result, Shape, TBlob, TBlobMut, dispatch_float};

/// Runs `prog` over every element of `outputs[0]`'s shape. All arrays share
/// one float dtype; outputs share one shape; inputs broadcast to it and may
/// be exactly an output's buffer (each tile is read before it is written).
/// Every check happens before the first write.
pub fn run_program(
    prog: &TileProgram<'_>,
    inputs: &[TBlob<'_>],
    outputs: &mut [TBlobMut<'_>],
    parallel: bool,
) -> Result<()> {
    run_program_within(prog, inputs, outputs, parallel, &[])
}

/// [`run_program`] over part of larger arrays (a slab of rows): output `k`
/// is one piece of an array of `whole[k]` elements (its own length when
/// `whole` is shorter), which decides whether it is written with streaming
/// stores: a slab of a huge output leaves the caches as surely as the
/// whole output does.
pub(crate) fn run_program_within(
    prog: &TileProgram<'_>,
    inputs: &[TBlob<'_>],
    outputs: &mut [TBlobMut<'_>],
    parallel: bool,
    whole: &[usize],
) -> Result<()> {
    let Some(first) = outputs.first() else {
        return Ok(());
    };
    let (dtype, shape) = (first.dtype(), first.shape().clone());
    run_over(
        prog,
        inputs,
        outputs,
        None,
        (dtype, &shape),
        parallel,
        whole,
    )
}

/// [`run_program`] over an iteration space of `shape` whose values in
/// `sink.slot` are reduced row by row into `sink.dst` (f32 and f64 only:
/// a half-type value would be rounded to its storage type before the
/// reduction read it). `outputs`, which may be empty, have that shape;
/// threads split at row boundaries.
pub fn run_program_reducing(
    prog: &TileProgram<'_>,
    inputs: &[TBlob<'_>],
    outputs: &mut [TBlobMut<'_>],
    sink: RowSink<'_>,
    shape: &Shape,
    parallel: bool,
) -> Result<()> {
    let dtype = sink.dst.dtype();
    if !matches!(dtype, DType::F32 | DType::F64) {
        return Err(bad("sink", format!("float32 or float64, got {dtype}")));
    }
    let len = sink.reduction.len;
    if len == 0 || sink.dst.len().checked_mul(len) != Some(shape.size()) {
        return Err(bad(
            "sink",
            format!(
                "{} rows of {len} elements covering {shape}, got {}",
                sink.dst.len(),
                sink.dst.shape()
            ),
        ));
    }
    let dst_bytes = sink.dst.byte_range();
    let overlapping = inputs.iter().map(|x| x.byte_range());
    if overlapping
        .chain(outputs.iter().map(|o| o.byte_range()))
        .any(|r| crate::blob::overlaps(&r, &dst_bytes))
    {
        return Err(bad(
            "sink",
            "the reduction's output overlaps an input or output",
        ));
    }
    run_over(
        prog,
        inputs,
        outputs,
        Some(sink),
        (dtype, shape),
        parallel,
        &[],
    )
}

/// The checks and dispatch behind [`run_program_within`] and
/// [`run_program_reducing`], over an iteration space of `shape`.
fn run_over(
    prog: &TileProgram<'_>,
    inputs: &[TBlob<'_>],
    outputs: &mut [TBlobMut<'_>],
    sink: Option<RowSink<'_>>,
    (dtype, shape): (DType, &Shape),
    parallel: bool,
    whole: &[usize],
) -> Result<()> {
    if !dtype.is_float() {
        return Err(bad("outputs", format!("a float dtype, got {dtype}")));
    }
    prog.check(inputs.len(), outputs.len())?;
    // A sink reads a value: an input's, or one an instruction writes
    // (checked once the program's slot indices are known to be in range).
    if let Some(k) = &sink
        && (k.slot >= prog.slots
            || !(k.slot < inputs.len() || SlotUses::of(prog, outputs.len()).writes[k.slot] > 0))
    {
        return Err(bad(
            "sink",
            "a slot that is an input or that an instruction writes",
        ));
    }
    for (k, o) in outputs.iter().enumerate() {
        if o.dtype() != dtype || o.shape() != shape {
            return Err(bad("outputs", format!("output {k} is not {shape} {dtype}")));
        }
        for p in &outputs[..k] {
            if crate::blob::overlaps(&o.byte_range(), &p.byte_range()) {
                return Err(bad("outputs", "two outputs overlap"));
            }
        }
    }
    let names: SmallVec<[Cow<'static, str>; 4]> = (0..outputs.len()).map(output_name).collect();
    let dst_info: SmallVec<[DstInfo<'_>; 4]> = outputs
        .iter()
        .zip(&names)
        .map(|(o, n)| (n.as_ref().into(), o.byte_range(), o.shape(), true))
        .collect();
    let mut aliases: SmallVec<[Option<usize>; 4]> = SmallVec::with_capacity(inputs.len());
    for (i, x) in inputs.iter().enumerate() {
        if x.dtype() != dtype || !x.shape().broadcasts_to(shape) {
            return Err(bad(
                "inputs",
                format!(
                    "input {i} is {} {}, expected {dtype} broadcasting to {shape}",
                    x.shape(),
                    x.dtype()
                ),
            ));
        }
        aliases.push(alias_of("fused", "input", x, &dst_info)?);
    }
    drop(dst_info);
    let whole: SmallVec<[usize; 4]> = outputs
        .iter()
        .enumerate()
        .map(|(k, o)| whole.get(k).copied().unwrap_or(0).max(o.shape().size()))
        .collect();
    dispatch_float!(dtype, S => run_typed::<S>(prog, inputs, &aliases, (outputs, sink), shape, parallel, &whole),
        _ => unreachable!("checked float above"))
}

/// `output{k}`, for errors naming an output; the common ones without
/// allocating, since this runs on every call.
fn output_name(k: usize) -> Cow<'static, str> {
    const NAMES: [&str; 8] = [
        "output0", "output1", "output2", "output3", "output4", "output5", "output6", "output7",
    ];
    NAMES
        .get(k)
        .map_or_else(|| Cow::Owned(format!("output{k}")), |&n| Cow::Borrowed(n))
}
