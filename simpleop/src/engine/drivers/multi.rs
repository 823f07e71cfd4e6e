//! Drivers for elementwise kernels with several outputs
//! (`fn forward<T>(x: T) -> (T, T)`): every output of an element from one
//! call of the kernel, on the rayon pool, honouring each output's request.
//!
//! Inputs and outputs have one shape (no broadcasting). An input that is
//! exactly an output's buffer is copied first, so that no element is read
//! after it was written; partial overlap is an error. The element loop
//! converts to the compute type per element: these ops have no vector
//! forms or half-type tables, and fused programs compute each output
//! tile by tile through [`tile_forward_output`].

use super::checks::{DstInfo, alias_of};
use super::tile_len_error;
use crate::engine::chunks::for_each_chunk_of;
use crate::kernel::{MultiMapFn, MultiMapGrad};
use crate::{
    DType, Error, Float, GradArgs, OpCall, OpReqType, Result, Shape, TBlob, TBlobMut,
    dispatch_float,
};
use std::borrow::Cow;

/// Output `k` of `kernel` over one tile: the body of a `TileForwardFn` of
/// an op with several outputs.
pub fn tile_forward_output<K: MultiMapFn<N, M>, C: Float, const N: usize, const M: usize>(
    kernel: &K,
    k: usize,
    ins: &[&[C]],
    out: &mut [C],
) -> Result<()> {
    let ins: [&[C]; N] = ins
        .try_into()
        .map_err(|_| tile_len_error("inputs", format!("{N} input slices, got {}", ins.len())))?;
    if k >= M || ins.iter().any(|s| s.len() != out.len()) {
        return Err(tile_len_error(
            "inputs",
            format!("output {k} of {M}, inputs of {} elements", out.len()),
        ));
    }
    for (j, o) in out.iter_mut().enumerate() {
        *o = kernel.apply(std::array::from_fn(|i| ins[i][j]))[k];
    }
    Ok(())
}

/// The shape and float dtype every array of the call shares, checked.
fn common_meta(op: &str, blobs: &[(String, &Shape, DType)]) -> Result<(Shape, DType)> {
    let (_, shape, dtype) = blobs[0];
    if !dtype.is_float() {
        return Err(Error::DTypeMismatch {
            op: op.into(),
            arg: blobs[0].0.clone(),
            expected: "a float dtype".into(),
            got: dtype,
        });
    }
    for (name, s, d) in blobs {
        if *s != shape {
            return Err(Error::ShapeMismatch {
                op: op.into(),
                arg: name.clone(),
                expected: shape.to_string(),
                got: (*s).clone(),
            });
        }
        if *d != dtype {
            return Err(Error::DTypeMismatch {
                op: op.into(),
                arg: name.clone(),
                expected: dtype.to_string(),
                got: *d,
            });
        }
    }
    Ok((shape.clone(), dtype))
}

/// Each input's elements: borrowed, or copied when the input is exactly
/// one of the written buffers (`dsts`).
fn read_inputs<'a, S: Float>(
    op: &'static str,
    names: &[String],
    inputs: &[&TBlob<'a>],
    dsts: &[DstInfo<'_>],
) -> Result<Vec<Cow<'a, [S]>>> {
    let mut xs = Vec::with_capacity(inputs.len());
    for (x, name) in inputs.iter().zip(names) {
        let s = x.as_slice::<S>()?;
        xs.push(match alias_of(op, name.as_str(), x, dsts)? {
            Some(_) => Cow::Owned(s.to_vec()),
            None => Cow::Borrowed(s),
        });
    }
    Ok(xs)
}

/// The writable elements of each blob whose request writes.
fn writable<'b, S: Float>(
    blobs: &'b mut [TBlobMut<'_>],
    reqs: &[OpReqType],
) -> Result<Vec<Option<&'b mut [S]>>> {
    blobs
        .iter_mut()
        .zip(reqs)
        .map(|(b, r)| match r {
            OpReqType::Null => Ok(None),
            _ => b.as_slice_mut::<S>().map(Some),
        })
        .collect()
}

fn dst_infos<'b>(
    names: &'b [String],
    blobs: &'b [TBlobMut<'_>],
    reqs: &[OpReqType],
) -> Vec<DstInfo<'b>> {
    names
        .iter()
        .zip(blobs)
        .zip(reqs)
        .map(|((n, b), r)| {
            (
                n.as_str().into(),
                b.byte_range(),
                b.shape(),
                *r != OpReqType::Null,
            )
        })
        .collect()
}

/// Runs a forward [`MultiMapFn`] with `N` inputs and `M` outputs;
/// `outputs[k]` is written per `reqs[k]`.
pub fn multi_map_forward<K: MultiMapFn<N, M>, const N: usize, const M: usize>(
    call: &OpCall<'_>,
    kernel: &K,
    inputs: &[TBlob<'_>],
    outputs: &mut [TBlobMut<'_>],
    reqs: &[OpReqType],
) -> Result<()> {
    let op = call.op;
    if inputs.len() != N || outputs.len() != M || reqs.len() != M {
        return Err(Error::invalid(
            op.name,
            "outputs",
            format!(
                "expected {N} input(s), {M} outputs and requests, got {}, {} and {}",
                inputs.len(),
                outputs.len(),
                reqs.len()
            ),
        ));
    }
    let in_names: Vec<String> = (0..N).map(|i| op.argument_name(i, call.env)).collect();
    let out_names = op.output_names(call.env);
    let mut metas: Vec<(String, &Shape, DType)> = inputs
        .iter()
        .zip(&in_names)
        .map(|(x, n)| (n.clone(), x.shape(), x.dtype()))
        .collect();
    let active = outputs
        .iter()
        .zip(reqs)
        .filter(|(_, r)| **r != OpReqType::Null);
    metas.extend(active.map(|(o, _)| ("output".to_string(), o.shape(), o.dtype())));
    let (shape, dtype) = common_meta(op.name, &metas)?;
    if reqs.iter().all(|r| *r == OpReqType::Null) {
        return Ok(());
    }
    let n = shape.size();
    let cost = (op.cost as usize).max(1) * M;
    dispatch_float!(dtype, S => {
        let refs: Vec<&TBlob<'_>> = inputs.iter().collect();
        let xs = read_inputs::<S>(op.name, &in_names, &refs, &dst_infos(&out_names, outputs, reqs))?;
        let outs = writable::<S>(outputs, reqs)?;
        for_each_chunk_of(outs, n, cost, |start, mut parts| {
            for (j, at) in (start..).take(parts_len(&parts, n - start)).enumerate() {
                let x: [<S as Float>::Compute; N] = std::array::from_fn(|i| xs[i][at].to_compute());
                let y = kernel.apply(x);
                for (k, part) in parts.iter_mut().enumerate() {
                    if let Some(p) = part {
                        reqs[k].assign(&mut p[j], y[k]);
                    }
                }
            }
        });
        Ok(())
    }, _ => Err(Error::invalid(op.name, "dtype", "a float dtype")))
}

/// The elements a chunk covers: its parts' length (all equal), or the rest
/// of the range when no output is written.
fn parts_len<T>(parts: &[Option<&mut [T]>], rest: usize) -> usize {
    parts
        .iter()
        .flatten()
        .map(|p| p.len())
        .next()
        .unwrap_or(rest)
}

/// Runs a [`MultiMapGrad`]: each input's gradient from every output's
/// gradient (`None`: zero), the outputs and inputs the gradient reads.
pub fn multi_map_backward<'a, K: MultiMapGrad<N, M>, const N: usize, const M: usize>(
    call: &OpCall<'_>,
    kernel: &K,
    args: &GradArgs<'a>,
    grads: &mut [TBlobMut<'_>],
    reqs: &[OpReqType],
) -> Result<()> {
    let op = call.op;
    if grads.len() != N || reqs.len() != N || args.out_grads.len() != M {
        return Err(Error::invalid(
            op.name,
            "grads",
            format!("expected {N} gradients and requests and {M} output gradients"),
        ));
    }
    let out_names = op.output_names(call.env);
    let in_names: Vec<String> = (0..N)
        .map(|i| format!("{}_grad", op.argument_name(i, call.env)))
        .collect();
    check_reads(op, call.env, args, M)?;
    if reqs.iter().all(|r| *r == OpReqType::Null) {
        return Ok(());
    }
    let dys: Vec<(String, &TBlob<'a>)> = args
        .out_grads
        .iter()
        .zip(&out_names)
        .filter_map(|(g, n)| g.as_ref().map(|g| (format!("{n}_grad"), g)))
        .collect();
    // Outputs join the checks only when the gradient reads them.
    let reads_outputs = op.gradient.is_some_and(|g| g.needs_output);
    let ys: Vec<(String, &TBlob<'a>)> = args
        .outputs
        .iter()
        .take(if reads_outputs { M } else { 0 })
        .zip(&out_names)
        .map(|(y, n)| (n.clone(), y))
        .collect();
    let xs: Vec<(String, &TBlob<'a>)> = args
        .inputs
        .iter()
        .enumerate()
        .filter_map(|(i, x)| x.as_ref().map(|x| (op.argument_name(i, call.env), x)))
        .collect();
    let mut metas: Vec<(String, &Shape, DType)> = Vec::new();
    for (name, b) in dys.iter().chain(&ys).chain(&xs) {
        metas.push((name.clone(), b.shape(), b.dtype()));
    }
    let active = grads
        .iter()
        .zip(reqs)
        .zip(&in_names)
        .filter(|((_, r), _)| **r != OpReqType::Null);
    metas.extend(active.map(|((g, _), n)| (n.clone(), g.shape(), g.dtype())));
    if metas.is_empty() {
        return Ok(());
    }
    let (shape, dtype) = common_meta(op.name, &metas)?;
    let n = shape.size();
    dispatch_float!(dtype, S => {
        let (dy_vals, y_vals, x_vals) = {
            let dsts = dst_infos(&in_names, grads, reqs);
            let read = |blobs: &[(String, &TBlob<'a>)]| -> Result<Vec<Cow<'a, [S]>>> {
                let names: Vec<String> = blobs.iter().map(|(n, _)| n.clone()).collect();
                let refs: Vec<&TBlob<'a>> = blobs.iter().map(|(_, b)| *b).collect();
                read_inputs::<S>(op.name, &names, &refs, &dsts)
            };
            (read(&dys)?, read(&ys)?, read(&xs)?)
        };
        let at = |have: &[Option<usize>], vals: &[Cow<'_, [S]>], j: usize, k: usize| {
            have[k].map_or(<S as Float>::Compute::zero(), |i| vals[i][j].to_compute())
        };
        let dy_at = positions(args.out_grads.iter().map(Option::is_some), M);
        let y_at = positions((0..M).map(|k| k < ys.len()), M);
        let x_at = positions(args.inputs.iter().map(Option::is_some), N);
        let outs = writable::<S>(grads, reqs)?;
        for_each_chunk_of(outs, n, (op.cost as usize).max(1) * M, |start, mut parts| {
            for (j, e) in (start..).take(parts_len(&parts, n - start)).enumerate() {
                let dy: [<S as Float>::Compute; M] = std::array::from_fn(|k| at(&dy_at, &dy_vals, e, k));
                let y: [<S as Float>::Compute; M] = std::array::from_fn(|k| at(&y_at, &y_vals, e, k));
                let x: [<S as Float>::Compute; N] = std::array::from_fn(|i| at(&x_at, &x_vals, e, i));
                let g = kernel.apply(dy, y, x);
                for (i, part) in parts.iter_mut().enumerate() {
                    if let Some(p) = part {
                        reqs[i].assign(&mut p[j], g[i]);
                    }
                }
            }
        });
        Ok(())
    }, _ => Err(Error::invalid(op.name, "dtype", "a float dtype")))
}

/// Errors unless `args` holds every output and input the op's gradient
/// reads: a missing one would silently read as zero.
fn check_reads(
    op: &crate::OpDef,
    env: &crate::EnvArguments,
    args: &GradArgs<'_>,
    m: usize,
) -> Result<()> {
    let Some(spec) = op.gradient else {
        return Err(Error::NoGradient { op: op.name.into() });
    };
    if spec.needs_output && args.outputs.len() != m {
        return Err(Error::invalid(
            op.name,
            "outputs",
            format!(
                "the gradient reads all {m} outputs, got {}",
                args.outputs.len()
            ),
        ));
    }
    for i in (0..args.inputs.len().max(op.num_arguments(env))).filter(|&i| spec.needs_input(i)) {
        if args.inputs.get(i).is_none_or(Option::is_none) {
            return Err(Error::invalid(
                op.name,
                op.argument_name(i, env),
                "the gradient reads this input; got none",
            ));
        }
    }
    Ok(())
}

/// For `len` slots of which those flagged are present (in order), each
/// slot's index among the present ones.
fn positions(present: impl Iterator<Item = bool>, len: usize) -> Vec<Option<usize>> {
    let mut next = 0;
    let mut at: Vec<Option<usize>> = present
        .map(|p| {
            p.then(|| {
                next += 1;
                next - 1
            })
        })
        .collect();
    at.resize(len, None);
    at
}
