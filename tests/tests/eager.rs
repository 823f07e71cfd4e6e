//! Eager API: typed and by-name calls, operators, in-place and `_into`
//! variants for every request type, aliasing, threading, and errors.

use simpleop::{Attrs, DType, Error, NDArray, OpReqType, TBlob, TBlobMut, eager};
use simpleop_ops as ops;

fn arr(v: &[f32], shape: &[usize]) -> NDArray {
    NDArray::from_slice(v, shape).unwrap()
}

fn vals(a: &NDArray) -> Vec<f64> {
    a.to_f64_vec()
}

fn ptr(a: &NDArray) -> usize {
    a.blob().as_ptr() as usize
}

#[test]
fn typed_and_by_name_calls_agree() {
    let x = arr(&[-2.0, -0.5, 0.5, 2.0], &[2, 2]);
    let typed = ops::smooth_l1(&x, 1.0).unwrap();
    let named = eager::invoke("smooth_l1", &[&x], &Attrs::from([("scalar", "1.0")])).unwrap();
    assert_eq!(typed, named);
    assert_eq!(vals(&typed), vec![1.5, 0.125, 0.125, 1.5]);
    let c = ops::clip(
        &x,
        ops::ClipParams {
            a_min: -1.0,
            a_max: 1.0,
        },
    )
    .unwrap();
    assert_eq!(vals(&c), vec![-1.0, -0.5, 0.5, 1.0]);
    let c2 = eager::invoke(
        "clip",
        &[&x],
        &Attrs::from([("a_min", "-1"), ("a_max", "1")]),
    )
    .unwrap();
    assert_eq!(c, c2);
    // MXNet keeps clip's bounds in f32 (`real_t`): float64 data is clipped
    // at f64(0.1f32) = 0.10000000149.., not at 0.1
    let d = NDArray::from_f64(&[0.100_000_000_5, 0.100_000_002, -0.3], [3], DType::F64).unwrap();
    let bounds = Attrs::from([("a_min", "-0.2"), ("a_max", "0.1")]);
    let c = eager::invoke("clip", &[&d], &bounds).unwrap();
    let (lo, hi) = (f64::from(-0.2f32), f64::from(0.1f32));
    assert_eq!(vals(&c), vec![0.100_000_000_5, hi, lo]);
}

#[test]
fn operators_map_to_registered_ops() {
    let a = arr(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let b = arr(&[10.0, 20.0, 30.0], &[1, 3]);
    assert_eq!(
        vals(&(&a + &a).unwrap()),
        vec![2.0, 4.0, 6.0, 8.0, 10.0, 12.0]
    );
    assert_eq!(
        vals(&(&a + &b).unwrap()),
        vec![11.0, 22.0, 33.0, 14.0, 25.0, 36.0]
    );
    assert_eq!(
        vals(&(&a - &b).unwrap()),
        vec![-9.0, -18.0, -27.0, -6.0, -15.0, -24.0]
    );
    assert_eq!(vals(&(&a * &b).unwrap())[..3], [10.0, 40.0, 90.0]);
    assert_eq!(vals(&(&b / &a).unwrap())[..3], [10.0, 10.0, 10.0]);
    assert_eq!(vals(&(&a * 2.0).unwrap())[..2], [2.0, 4.0]);
    assert_eq!(vals(&(&a + 0.5).unwrap())[..2], [1.5, 2.5]);
    assert_eq!(vals(&(&a - 1.0).unwrap())[..2], [0.0, 1.0]);
    assert_eq!(vals(&(10.0 - &a).unwrap())[..2], [9.0, 8.0]);
    assert_eq!(vals(&(&a / 2.0).unwrap())[..2], [0.5, 1.0]);
    assert_eq!(vals(&(6.0 / &a).unwrap())[..3], [6.0, 3.0, 2.0]);
    assert_eq!(vals(&(-&a).unwrap())[..2], [-1.0, -2.0]);
    assert_eq!(
        vals(&(a.clone() * a.clone()).unwrap())[..3],
        [1.0, 4.0, 9.0]
    );
    let bad = arr(&[1.0, 2.0], &[2]);
    let e = (&a + &bad).unwrap_err();
    assert!(
        matches!(&e, Error::ShapeMismatch { op, arg, .. } if op == "broadcast_add" && arg == "b"),
        "{e}"
    );
}

#[test]
fn add_assign_is_add_to_in_the_same_buffer() {
    let mut a = arr(&[1.0, 2.0, 3.0], &[3]);
    let b = arr(&[10.0, 20.0, 30.0], &[3]);
    let before = ptr(&a);
    a += &b;
    assert_eq!(vals(&a), vec![11.0, 22.0, 33.0]);
    assert_eq!(ptr(&a), before, "+= must accumulate into a's own buffer");
    a -= &b;
    assert_eq!(vals(&a), vec![1.0, 2.0, 3.0]);
    a *= &b;
    assert_eq!(vals(&a), vec![10.0, 40.0, 90.0]);
    a /= &b;
    assert_eq!(vals(&a), vec![1.0, 2.0, 3.0]);
    a += 1.0;
    a *= 2.0;
    a -= 1.0;
    a /= 3.0;
    assert_eq!(
        vals(&a),
        [1.0, 5.0 / 3.0, 7.0 / 3.0]
            .iter()
            .map(|v| *v as f32 as f64)
            .collect::<Vec<_>>()
    );
    // Broadcasting right-hand side.
    let mut m = arr(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    m += &arr(&[10.0, 20.0], &[2]);
    assert_eq!(vals(&m), vec![11.0, 22.0, 13.0, 24.0]);
    // A shared handle never sees the write.
    let mut c = arr(&[1.0, 1.0], &[2]);
    let view = c.clone();
    c += &arr(&[1.0, 2.0], &[2]);
    assert_eq!(vals(&c), vec![2.0, 3.0]);
    assert_eq!(vals(&view), vec![1.0, 1.0]);
    // The fallible form reports errors.
    let e = c.try_add_assign(&arr(&[1.0, 2.0, 3.0], &[3])).unwrap_err();
    assert!(e.to_string().contains("broadcast_add"), "{e}");
    assert_eq!(vals(&c), vec![2.0, 3.0], "nothing written on error");
}

#[test]
fn inplace_variants_write_in_place_only_when_allowed_and_unshared() {
    // relu declares InOut: unique storage is overwritten in place.
    let mut x = arr(&[-1.0, 2.0, -3.0, 4.0], &[4]);
    let p = ptr(&x);
    ops::relu_inplace(&mut x).unwrap();
    assert_eq!(vals(&x), vec![0.0, 2.0, 0.0, 4.0]);
    assert_eq!(ptr(&x), p);
    // Shared storage: the handle is replaced, the other handle keeps its values.
    let mut y = arr(&[-1.0, 2.0], &[2]);
    let keep = y.clone();
    ops::relu_inplace(&mut y).unwrap();
    assert_eq!(vals(&y), vec![0.0, 2.0]);
    assert_eq!(vals(&keep), vec![-1.0, 2.0]);
    assert!(!y.shares_storage_with(&keep));
    // elemwise_mul has no forward in-place option (its gradient reads the
    // inputs): the result is right and lands in a new buffer.
    let mut a = arr(&[1.0, 2.0], &[2]);
    let p = ptr(&a);
    ops::elemwise_mul_inplace(&mut a, &arr(&[3.0, 4.0], &[2])).unwrap();
    assert_eq!(vals(&a), vec![3.0, 8.0]);
    assert_ne!(ptr(&a), p);
    // Binary LhsOut in place, all float dtypes.
    for dtype in DType::FLOATS {
        let mut a = NDArray::from_f64(&[1.0, 2.0, 3.0], [3], dtype).unwrap();
        let p = ptr(&a);
        let b = NDArray::from_f64(&[0.5, 0.25, 0.125], [3], dtype).unwrap();
        ops::elemwise_add_inplace(&mut a, &b).unwrap();
        assert_eq!(vals(&a), vec![1.5, 2.25, 3.125], "{dtype}");
        assert_eq!(ptr(&a), p, "{dtype}");
    }
}

#[test]
fn into_variants_honour_every_request() {
    let x = arr(&[-1.0, 2.0], &[2]);
    for dtype in DType::FLOATS {
        let x = x.astype(dtype);
        let init = NDArray::from_f64(&[10.0, 20.0], [2], dtype).unwrap();
        let cases = [
            (OpReqType::Null, vec![10.0, 20.0]),
            (OpReqType::WriteTo, vec![0.0, 2.0]),
            (OpReqType::WriteInplace, vec![0.0, 2.0]),
            (OpReqType::AddTo, vec![10.0, 22.0]),
        ];
        for (req, want) in cases {
            let mut out = init.deep_copy();
            ops::relu_into(&x, &mut out, req).unwrap();
            assert_eq!(vals(&out), want, "{dtype} {req:?}");
        }
        // A shared output is copied first, so the other handle is untouched.
        let mut out = init.clone();
        ops::relu_into(&x, &mut out, OpReqType::AddTo).unwrap();
        assert_eq!(vals(&init), vec![10.0, 20.0]);
        // Wrong output shape: error, nothing written.
        let mut wrong = NDArray::from_f64(&[7.0, 7.0, 7.0], [3], dtype).unwrap();
        let e = ops::relu_into(&x, &mut wrong, OpReqType::WriteTo).unwrap_err();
        assert!(
            matches!(&e, Error::ShapeMismatch { op, arg, .. } if op == "relu" && arg == "out"),
            "{e}"
        );
        assert_eq!(vals(&wrong), vec![7.0; 3]);
    }
}

/// Raw kernel calls with aliased blobs, for every request type: the output
/// buffer is also input 0 (and, for `x * x`, input 1).
#[test]
fn kernels_handle_exact_aliasing_for_every_request() {
    let call_env = simpleop::EnvArguments::none();
    let ctx = simpleop::RunContext::default();
    for (name, want) in [("relu", [0.0, 2.0, 0.0]), ("elemwise_mul", [1.0, 4.0, 9.0])] {
        let entry = eager::lookup(name).unwrap();
        let call = simpleop::OpCall {
            op: entry.def,
            env: &call_env,
            ctx: &ctx,
        };
        let forward = entry.kernels(simpleop::Device::Cpu).unwrap().forward;
        for req in OpReqType::ALL {
            let mut buf = [-1.0f32, 2.0, -3.0];
            let init = buf;
            let p = buf.as_mut_ptr().cast::<u8>();
            // SAFETY: `buf` lives for the whole call and is only accessed
            // through these views; exact aliasing is the contract under test.
            let (x, mut out) = unsafe {
                (
                    TBlob::from_raw(p, DType::F32, [3].into()),
                    TBlobMut::from_raw(p, DType::F32, [3].into()),
                )
            };
            let inputs: Vec<TBlob<'_>> = vec![x; entry.def.num_inputs()];
            forward(&call, &inputs, std::slice::from_mut(&mut out), &[req]).unwrap();
            let expect: Vec<f32> = match req {
                OpReqType::Null => init.to_vec(),
                OpReqType::AddTo => init.iter().zip(want).map(|(a, b)| a + b as f32).collect(),
                _ => want.iter().map(|v| *v as f32).collect(),
            };
            assert_eq!(buf.to_vec(), expect, "{name} {req:?}");
        }
    }
}

#[test]
fn partial_overlap_is_an_error_and_writes_nothing() {
    let env = simpleop::EnvArguments::none();
    let ctx = simpleop::RunContext::default();
    let entry = eager::lookup("relu").unwrap();
    let call = simpleop::OpCall {
        op: entry.def,
        env: &env,
        ctx: &ctx,
    };
    let forward = entry.kernels(simpleop::Device::Cpu).unwrap().forward;
    let mut buf = [-1.0f32, -2.0, -3.0, -4.0];
    let p = buf.as_mut_ptr();
    // SAFETY: both views stay inside `buf`; the kernel must refuse them.
    let (x, mut out) = unsafe {
        (
            TBlob::from_raw(p.cast(), DType::F32, [3].into()),
            TBlobMut::from_raw(p.add(1).cast(), DType::F32, [3].into()),
        )
    };
    let e = forward(
        &call,
        &[x],
        std::slice::from_mut(&mut out),
        &[OpReqType::WriteTo],
    )
    .unwrap_err();
    assert!(
        matches!(&e, Error::Aliasing { op, .. } if op == "relu"),
        "{e}"
    );
    assert_eq!(buf, [-1.0, -2.0, -3.0, -4.0]);
}

#[test]
fn gradient_in_place_over_the_output_gradient() {
    let x = arr(&[-2.0, -0.5, 0.5, 2.0], &[4]);
    let op = &ops::smooth_l1::OP;
    let env = simpleop::EnvArguments::scalar(1.0);
    let y = eager::invoke_with(op, &[&x], &env).unwrap();
    let mut dy = arr(&[1.0, 1.0, 2.0, 2.0], &[4]);
    let p = ptr(&dy);
    let in_place = eager::invoke_backward_inplace(
        op,
        &env,
        &mut dy,
        Some(&y),
        &[&x],
        &mut [],
        &[OpReqType::WriteTo],
    )
    .unwrap();
    assert!(in_place);
    assert_eq!(ptr(&dy), p);
    assert_eq!(vals(&dy), vec![-1.0, -0.5, 1.0, 2.0]);
}

#[test]
fn broadcast_gradient_add_to_accumulates_the_reduced_sum() {
    let a = arr(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let b = arr(&[1.0, 2.0, 3.0], &[3]);
    let dy = NDArray::ones([2, 3], DType::F32);
    let out = ops::broadcast_mul(&a, &b).unwrap();
    let mut grads = vec![
        NDArray::zeros([2, 3], DType::F32),
        NDArray::full([3], 100.0, DType::F32),
    ];
    eager::invoke_backward(
        &ops::broadcast_mul::OP,
        &simpleop::EnvArguments::none(),
        &dy,
        Some(&out),
        &[&a, &b],
        &mut grads,
        &[OpReqType::WriteTo, OpReqType::AddTo],
    )
    .unwrap();
    assert_eq!(vals(&grads[0]), vec![1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);
    assert_eq!(vals(&grads[1]), vec![105.0, 107.0, 109.0]);
}

#[test]
fn backward_checks_the_output_gradient_against_inference() {
    let a = NDArray::ones([3], DType::F32);
    let env = simpleop::EnvArguments::none();
    let mut grads = vec![
        NDArray::zeros([3], DType::F32),
        NDArray::zeros([3], DType::F32),
    ];
    let reqs = [OpReqType::WriteTo; 2];
    // dy of shape (2, 3) for inputs of shape (3,): the output is (3,).
    let e = eager::invoke_backward(
        &ops::broadcast_add::OP,
        &env,
        &NDArray::ones([2, 3], DType::F32),
        None,
        &[&a, &a],
        &mut grads,
        &reqs,
    )
    .unwrap_err();
    assert!(
        matches!(&e, Error::ShapeMismatch { op, arg, .. } if op == "broadcast_add" && arg == "out_grad"),
        "{e}"
    );
    let e = eager::invoke_backward(
        &ops::broadcast_add::OP,
        &env,
        &NDArray::ones([3], DType::F64),
        None,
        &[&a, &a],
        &mut grads,
        &reqs,
    )
    .unwrap_err();
    assert!(
        matches!(&e, Error::DTypeMismatch { arg, .. } if arg == "out_grad"),
        "{e}"
    );
    assert_eq!(vals(&grads[0]), vec![0.0; 3], "nothing written on error");
}

#[test]
fn threaded_results_equal_serial_results() {
    // Split over threads whatever this machine's measured grain.
    simpleop::Tuning::update(|t| t.parallel_work = 0).unwrap();
    let n = simpleop_tests::least_grain() * 3 + 17;
    let x = NDArray::random_uniform([n], -3.0, 3.0, DType::F32, 1).unwrap();
    let b = NDArray::random_uniform([n], -3.0, 3.0, DType::F32, 2).unwrap();
    let entry = eager::lookup("smooth_l1").unwrap();
    let env = simpleop::EnvArguments::scalar(1.0);
    let mut outs = Vec::new();
    for parallel in [false, true] {
        let ctx = simpleop::RunContext {
            parallel,
            ..Default::default()
        };
        let call = simpleop::OpCall {
            op: entry.def,
            env: &env,
            ctx: &ctx,
        };
        let mut out = NDArray::zeros([n], DType::F32);
        (entry.kernels(simpleop::Device::Cpu).unwrap().forward)(
            &call,
            &[x.blob()],
            &mut [out.blob_mut()],
            &[OpReqType::WriteTo],
        )
        .unwrap();
        outs.push(out);
    }
    assert_eq!(outs[0], outs[1]);
    let sum = (&x + &b).unwrap();
    let xs = x.to_vec::<f32>().unwrap();
    let bs = b.to_vec::<f32>().unwrap();
    let want: Vec<f32> = xs.iter().zip(&bs).map(|(a, b)| a + b).collect();
    assert_eq!(sum.to_vec::<f32>().unwrap(), want);
}

#[test]
fn random_source_op_is_seeded_and_matches_the_constructor() {
    let p = ops::UniformParams {
        low: -1.0,
        high: 1.0,
        shape: vec![3, 5000],
        ..Default::default()
    };
    let env = simpleop::EnvArguments::kwargs(p).with_seed(9);
    let a = eager::invoke_with(&ops::random_uniform::OP, &[], &env).unwrap();
    let b = NDArray::random_uniform([3, 5000], -1.0, 1.0, DType::F32, 9).unwrap();
    assert_eq!(a, b);
    let v = vals(&a);
    assert!(v.iter().all(|x| (-1.0..1.0).contains(x)));
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    assert!(mean.abs() < 0.03, "{mean}");
    // Unseeded calls draw from the global generator: reproducible after `seed`.
    simpleop::seed(5);
    let c = eager::invoke(
        "_random_uniform",
        &[],
        &Attrs::from([("shape", "(4,)"), ("dtype", "float64")]),
    )
    .unwrap();
    simpleop::seed(5);
    let d = eager::invoke(
        "_random_uniform",
        &[],
        &Attrs::from([("shape", "(4,)"), ("dtype", "float64")]),
    )
    .unwrap();
    assert_eq!(c, d);
    assert_eq!(c.dtype(), DType::F64);
    // MXNet refuses low > high ("low must be less or equal to high"); so
    // do the op and the constructor, and bounds that are not finite
    for (low, high, arg) in [
        ("1", "0", "high"),
        ("0", "inf", "high"),
        ("nan", "1", "low"),
    ] {
        let attrs = Attrs::from([("shape", "(4,)"), ("low", low), ("high", high)]);
        match eager::invoke("_random_uniform", &[], &attrs).unwrap_err() {
            Error::BadKwarg { op, arg: a, .. } => {
                assert_eq!((op.as_str(), a.as_str()), ("_random_uniform", arg))
            }
            e => panic!("{low}, {high}: {e:?}"),
        }
    }
    assert!(NDArray::random_uniform([4], 1.0, 0.0, DType::F32, 1).is_err());
    assert!(NDArray::random_uniform([4], 0.0, f64::INFINITY, DType::F32, 1).is_err());
    assert!(NDArray::random_normal([4], 0.0, -1.0, DType::F32, 1).is_err());
    assert!(NDArray::random_uniform([4], 1.0, 1.0, DType::F32, 1).is_ok());
}

#[test]
fn bad_inputs_are_errors_that_name_op_and_argument() {
    let x = arr(&[1.0, 2.0], &[2]);
    let y3 = arr(&[1.0, 2.0, 3.0], &[3]);
    let msg = |e: Error| e.to_string();
    let e = eager::invoke("rleu", &[&x], &Attrs::new()).unwrap_err();
    assert!(
        matches!(&e, Error::UnknownOp { suggestions, .. } if suggestions.contains(&"relu".to_string())),
        "{e}"
    );
    assert!(msg(e).contains("did you mean"));
    // nothing close: the usual cause is an op crate that is not linked
    let e = eager::invoke("qqq_zzz_unheard_of", &[&x], &Attrs::new()).unwrap_err();
    assert!(msg(e).contains("is the crate that defines it linked?"));
    let e = eager::invoke("relu", &[&x, &x], &Attrs::new()).unwrap_err();
    assert_eq!(msg(e), "op `relu`: expected 1 input(s), got 2");
    let e = eager::invoke("elemwise_add", &[&x, &y3], &Attrs::new()).unwrap_err();
    assert!(
        matches!(&e, Error::ShapeMismatch { op, arg, .. } if op == "elemwise_add" && arg == "b"),
        "{e}"
    );
    let e = eager::invoke("elemwise_add", &[&x, &x.astype(DType::F64)], &Attrs::new()).unwrap_err();
    assert!(
        matches!(&e, Error::DTypeMismatch { op, arg, .. } if op == "elemwise_add" && arg == "b"),
        "{e}"
    );
    let e = eager::invoke("relu", &[&x.astype(DType::I32)], &Attrs::new()).unwrap_err();
    assert!(
        matches!(&e, Error::DTypeMismatch { arg, .. } if arg == "x"),
        "{e}"
    );
    let e = eager::invoke("smooth_l1", &[&x], &Attrs::new()).unwrap_err();
    assert_eq!(msg(e), "op `smooth_l1`: missing scalar argument `scalar`");
    let e = eager::invoke("relu", &[&x], &Attrs::from([("scalar", "1")])).unwrap_err();
    assert!(matches!(e, Error::UnexpectedScalar { .. }));
    let e = eager::invoke("clip", &[&x], &Attrs::from([("scalar", "1")])).unwrap_err();
    assert!(matches!(e, Error::UnexpectedScalar { .. }));
    let e = eager::invoke("smooth_l1", &[&x], &Attrs::from([("scalar", "abc")])).unwrap_err();
    assert!(
        matches!(&e, Error::BadKwarg { arg, .. } if arg == "scalar"),
        "{e}"
    );
    let e = eager::invoke("clip", &[&x], &Attrs::from([("a_min", "0")])).unwrap_err();
    assert_eq!(
        msg(e),
        "op `clip`: argument `a_max`: missing required argument"
    );
    let e = eager::invoke(
        "clip",
        &[&x],
        &Attrs::from([("a_min", "0"), ("a_max", "1"), ("a_mx", "2")]),
    )
    .unwrap_err();
    assert!(
        matches!(&e, Error::BadKwarg { arg, .. } if arg == "a_mx"),
        "{e}"
    );
    let e = eager::invoke(
        "_random_uniform",
        &[],
        &Attrs::from([("shape", "(2,)"), ("dtype", "int8")]),
    )
    .unwrap_err();
    assert!(
        matches!(&e, Error::BadKwarg { arg, .. } if arg == "dtype"),
        "{e}"
    );
    let e = NDArray::from_vec(vec![1.0f32; 3], [2]).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }));
}

#[test]
fn registry_lists_every_op_sorted_with_descriptions() {
    ops::link();
    let reg = simpleop::Registry::global().unwrap();
    let names: Vec<&str> = reg.iter().map(|o| o.def.name).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    for want in [
        "smooth_l1",
        "relu",
        "elemwise_add",
        "elemwise_mul",
        "broadcast_add",
        "broadcast_mul",
        "_mul_scalar",
        "clip",
        "_random_uniform",
    ] {
        let op = reg.get(want).unwrap();
        assert!(!op.def.description.is_empty(), "{want} has no description");
        assert!(op.devices().any(|d| d == simpleop::Device::Cpu));
    }
    let smooth = reg.get("smooth_l1").unwrap().def;
    assert_eq!(smooth.gradient.unwrap().kind(), simpleop::GradKind::T2);
    assert_eq!(
        reg.get("relu").unwrap().def.gradient.unwrap().kind(),
        simpleop::GradKind::T1
    );
    assert_eq!(
        reg.get("elemwise_add")
            .unwrap()
            .def
            .gradient
            .unwrap()
            .kind(),
        simpleop::GradKind::T0
    );
    assert_eq!(
        smooth.signature(),
        "smooth_l1(x) -> out; scalar; gradient T2; inplace OutIn; pattern elementwise"
    );
    assert!(
        reg.get("clip")
            .unwrap()
            .def
            .signature()
            .contains("kwargs ClipParams {a_min, a_max}")
    );
    assert_eq!(
        reg.get("broadcast_add").unwrap().def.pattern,
        simpleop::Pattern::Broadcast
    );
}

/// Shapes whose arrays could not exist (more than `isize::MAX` bytes, or
/// an element count past `usize`) are errors where they are made, before
/// anything is allocated or written: in release builds the count would
/// otherwise wrap to a small number and kernels write past the buffer.
#[test]
fn shapes_too_large_for_memory_are_errors_not_allocations() {
    use simpleop::symbol::Symbol;
    use std::collections::HashMap;
    let huge = 1usize << 62;
    let too_large = |e: Error, op: &str| match e {
        Error::InvalidArgument { op: o, arg, reason } => {
            assert_eq!((o.as_str(), arg.as_str()), (op, "shape"), "{reason}");
            assert!(reason.contains("isize::MAX bytes"), "{reason}");
        }
        e => panic!("{op}: {e:?}"),
    };
    // the element count wraps to 0 in usize
    let attrs = Attrs::from([("shape", format!("(4, {huge})"))]);
    too_large(
        eager::invoke("_random_uniform", &[], &attrs).unwrap_err(),
        "_random_uniform",
    );
    // the count fits, its bytes do not
    let attrs = Attrs::from([("shape", format!("(2, {huge})"))]);
    too_large(
        eager::invoke("_random_uniform", &[], &attrs).unwrap_err(),
        "_random_uniform",
    );
    too_large(
        NDArray::try_zeros([huge, 4], DType::F32).unwrap_err(),
        "NDArray::zeros",
    );
    assert_eq!(
        NDArray::try_zeros([huge, 4, 0], DType::F64).unwrap().size(),
        0
    );
    assert!(NDArray::random_uniform([huge, 2], 0.0, 1.0, DType::F16, 1).is_err());
    // a wrapped count would have matched the empty data
    assert!(matches!(
        NDArray::from_vec(Vec::<f32>::new(), [huge, 4]),
        Err(Error::ShapeMismatch { .. })
    ));
    let empty = NDArray::from_vec(Vec::<f32>::new(), [0]).unwrap();
    assert!(matches!(
        empty.reshape([huge, 4]),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        TBlob::from_slice::<f32>(&[], [huge, 4]),
        Err(Error::InvalidArgument { .. })
    ));
    // graphs: an op's output, and arguments allocated by simple_bind
    let attrs = Attrs::from([("shape", format!("(4, {huge})"))]);
    let r = Symbol::invoke("_random_uniform", &[], &attrs).unwrap();
    let e = r
        .simple_bind(&HashMap::new(), &HashMap::new(), HashMap::new())
        .unwrap_err();
    assert!(e.to_string().contains("isize::MAX bytes"), "{e}");
    let y = Symbol::invoke("relu", &[&Symbol::var("x")], &Attrs::new()).unwrap();
    let shapes = HashMap::from([("x".to_owned(), simpleop::Shape::new([huge, 8]))]);
    let e = y
        .simple_bind(&shapes, &HashMap::new(), HashMap::new())
        .unwrap_err();
    assert!(e.to_string().contains("isize::MAX bytes"), "{e}");
}

#[test]
#[should_panic(expected = "would take more than isize::MAX bytes")]
fn zeros_of_a_shape_too_large_for_memory_panics_as_vec_does() {
    let _ = NDArray::zeros([1usize << 40, 1 << 40], DType::F32);
}
