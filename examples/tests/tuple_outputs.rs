//! Elementwise ops whose forward returns a tuple (`sincos`,
//! `polar_to_xy`): values in every float dtype, gradients through the
//! checker with heads on either output, and in a graph, where they fuse
//! with their readers and agree with the unfused executor and eager calls.

use std::collections::HashMap;

use simpleop::gradcheck::GradCheck;
use simpleop::symbol::{BindConfig, Executor, GradReq, Symbol};
use simpleop::{Attrs, DType, NDArray, eager};
use simpleop_examples::{polar_to_xy, sincos, sincos_symbol};
use simpleop_ops as _;

fn angles(dtype: DType) -> NDArray {
    let v: Vec<f64> = (0..1000).map(|i| i as f64 * 0.013 - 6.0).collect();
    NDArray::from_vec(v, [10, 100]).unwrap().astype(dtype)
}

#[test]
fn sincos_values_in_every_float_dtype() {
    for (dtype, tol) in [
        (DType::F64, 1e-15),
        (DType::F32, 1e-6),
        (DType::F16, 2e-3),
        (DType::BF16, 1e-2),
    ] {
        let x = angles(dtype);
        let outs = sincos(&x).unwrap();
        assert_eq!(outs.len(), 2);
        let xs = x.to_f64_vec();
        for (k, f) in [f64::sin as fn(f64) -> f64, f64::cos]
            .into_iter()
            .enumerate()
        {
            assert_eq!(outs[k].dtype(), dtype);
            for (got, x) in outs[k].to_f64_vec().iter().zip(&xs) {
                assert!(
                    (got - f(*x)).abs() <= tol * 2.0,
                    "{dtype:?} output {k} at {x}: {got}"
                );
            }
        }
    }
}

#[test]
fn polar_to_xy_takes_two_inputs() {
    let r = NDArray::from_vec(vec![1.0f32, 2.0, 0.5], [3]).unwrap();
    let t = NDArray::from_vec(
        vec![0.0f32, std::f32::consts::FRAC_PI_2, std::f32::consts::PI],
        [3],
    )
    .unwrap();
    let xy = polar_to_xy(&r, &t).unwrap();
    let (x, y) = (
        xy[0].to_vec::<f32>().unwrap(),
        xy[1].to_vec::<f32>().unwrap(),
    );
    for (got, want) in x
        .iter()
        .zip([1.0, 0.0, -0.5])
        .chain(y.iter().zip([0.0, 2.0, 0.0]))
    {
        assert!((got - want).abs() < 1e-6, "{x:?} {y:?}");
    }
    let bad = NDArray::zeros([4], DType::F32);
    let err = polar_to_xy(&r, &bad).unwrap_err().to_string();
    assert!(err.contains("theta"), "{err}");
}

#[test]
fn gradients_with_heads_on_each_output_and_both() {
    for heads in [&[0][..], &[1], &[0, 1]] {
        for op in ["sincos", "polar_to_xy"] {
            let report = GradCheck::new(op)
                .heads(heads)
                .run()
                .unwrap_or_else(|e| panic!("{op}: {e}"));
            assert!(report.rows.len() >= 12, "{op}: {report:?}");
            assert!(
                report.rows.iter().all(|r| r.2 <= 1.0),
                "{op} {heads:?}: {report:?}"
            );
        }
    }
}

/// `sin² + cos²` and `sin · 2`, over `sincos(x)`.
fn identity_graph() -> Symbol {
    let x = Symbol::var("x");
    let sc = sincos_symbol(&x).unwrap();
    let (s, c) = (sc.output(0).unwrap(), sc.output(1).unwrap());
    let op = |name: &str, ins: &[&Symbol]| Symbol::invoke(name, ins, &Attrs::new()).unwrap();
    let one = op(
        "elemwise_add",
        &[&op("square", &[&s]), &op("square", &[&c])],
    );
    let twice = op("elemwise_add", &[&s, &s]);
    Symbol::group(&[one, twice])
}

fn bind(sym: &Symbol, x: &NDArray, fusion: bool) -> Executor {
    let args = HashMap::from([("x".to_string(), x.clone())]);
    let grads = HashMap::from([(
        "x".to_string(),
        NDArray::zeros(x.shape().clone(), x.dtype()),
    )]);
    let reqs = HashMap::from([("x".to_string(), GradReq::Write)]);
    let config = BindConfig {
        fusion,
        ..BindConfig::default()
    };
    sym.bind_with(args, grads, reqs, config).unwrap()
}

#[test]
fn in_a_graph_it_fuses_and_every_path_agrees() {
    simpleop_examples::link();
    let sym = identity_graph();
    let x = angles(DType::F32);
    let (mut on, mut off) = (bind(&sym, &x, true), bind(&sym, &x, false));
    let group = on
        .fusion_groups()
        .iter()
        .find(|g| g.nodes.iter().any(|(n, _)| n.contains("sincos")));
    let group = group.unwrap_or_else(|| panic!("sincos not fused: {:?}", on.fusion_groups()));
    assert!(group.nodes.len() >= 3, "{group:?}");
    for exe in [&mut on, &mut off] {
        exe.forward(true).unwrap();
        exe.backward(&[]).unwrap();
    }
    for (a, b) in on.outputs().iter().zip(off.outputs()) {
        assert_eq!(a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
    }
    for v in on.outputs()[0].to_vec::<f32>().unwrap() {
        assert!((v - 1.0).abs() < 1e-6);
    }
    // d/dx (sin² + cos²) + d/dx 2 sin = 2 cos x.
    let grad = on.grad("x").unwrap().to_f64_vec();
    assert_eq!(grad, off.grad("x").unwrap().to_f64_vec());
    for (g, x) in grad.iter().zip(x.to_f64_vec()) {
        assert!((g - 2.0 * x.cos()).abs() < 1e-5, "{g} at {x}");
    }
    // Eagerly, op by op.
    let sc = sincos(&x).unwrap();
    let twice = eager::invoke("elemwise_add", &[&sc[0], &sc[0]], &Attrs::new()).unwrap();
    assert_eq!(
        twice.to_vec::<f32>().unwrap(),
        on.outputs()[1].to_vec::<f32>().unwrap()
    );
}

#[test]
fn an_unread_output_has_a_zero_head_gradient() {
    simpleop_examples::link();
    let x = Symbol::var("x");
    let sc = sincos_symbol(&x).unwrap();
    let sym = Symbol::invoke(
        "elemwise_add",
        &[&sc.output(1).unwrap(), &sc.output(1).unwrap()],
        &Attrs::new(),
    )
    .unwrap();
    let data = angles(DType::F64);
    for fusion in [true, false] {
        let mut exe = bind(&sym, &data, fusion);
        exe.forward(true).unwrap();
        exe.backward(&[]).unwrap();
        // d/dx 2 cos x = −2 sin x
        for (g, x) in exe
            .grad("x")
            .unwrap()
            .to_f64_vec()
            .iter()
            .zip(data.to_f64_vec())
        {
            assert!((g + 2.0 * x.sin()).abs() < 1e-12, "{g} at {x}");
        }
    }
}

/// The forward kernel honours each output's request: `WriteTo` writes,
/// `AddTo` adds, `Null` leaves the buffer alone; a wrong shape is an error
/// that writes nothing.
#[test]
fn each_output_follows_its_request() {
    use simpleop::{Device, EnvArguments, OpCall, OpReqType, RunContext};
    simpleop_examples::link();
    let entry = eager::lookup("sincos").unwrap();
    let forward = entry.kernels(Device::Cpu).unwrap().forward;
    let (env, ctx) = (EnvArguments::none(), RunContext::default());
    let call = OpCall {
        op: entry.def,
        env: &env,
        ctx: &ctx,
    };
    let x = NDArray::from_vec(vec![0.5f64, -1.0, 2.0], [3]).unwrap();
    for (r0, r1) in [
        (OpReqType::WriteTo, OpReqType::AddTo),
        (OpReqType::AddTo, OpReqType::Null),
        (OpReqType::WriteInplace, OpReqType::WriteTo),
    ] {
        let mut a = NDArray::from_vec(vec![10.0f64; 3], [3]).unwrap();
        let mut b = NDArray::from_vec(vec![20.0f64; 3], [3]).unwrap();
        {
            let mut outs = [a.try_blob_mut().unwrap(), b.try_blob_mut().unwrap()];
            forward(&call, &[x.blob()], &mut outs, &[r0, r1]).unwrap();
        }
        let expect = |r: OpReqType, old: f64, f: fn(f64) -> f64| -> Vec<f64> {
            x.to_f64_vec()
                .iter()
                .map(|&v| match r {
                    OpReqType::Null => old,
                    OpReqType::AddTo => old + f(v),
                    _ => f(v),
                })
                .collect()
        };
        assert_eq!(a.to_f64_vec(), expect(r0, 10.0, f64::sin), "{r0:?}");
        assert_eq!(b.to_f64_vec(), expect(r1, 20.0, f64::cos), "{r1:?}");
    }
    let mut a = NDArray::from_vec(vec![10.0f64; 3], [3]).unwrap();
    let mut short = NDArray::from_vec(vec![20.0f64; 2], [2]).unwrap();
    {
        let mut outs = [a.try_blob_mut().unwrap(), short.try_blob_mut().unwrap()];
        let reqs = [OpReqType::WriteTo; 2];
        assert!(forward(&call, &[x.blob()], &mut outs, &reqs).is_err());
    }
    assert_eq!(a.to_f64_vec(), [10.0; 3]);
}

/// A backward call missing the outputs its gradient reads is an error,
/// not a gradient computed from zeros.
#[test]
fn backward_without_the_outputs_it_reads_is_an_error() {
    use simpleop::{Device, EnvArguments, GradArgs, OpCall, OpReqType, RunContext};
    simpleop_examples::link();
    let entry = eager::lookup("sincos").unwrap();
    let backward = entry.kernels(Device::Cpu).unwrap().backward.unwrap();
    let (env, ctx) = (EnvArguments::none(), RunContext::default());
    let call = OpCall {
        op: entry.def,
        env: &env,
        ctx: &ctx,
    };
    let dy = NDArray::from_vec(vec![1.0f32; 3], [3]).unwrap();
    let mut g = NDArray::zeros([3], DType::F32);
    let args = GradArgs {
        out_grad: dy.blob(),
        output: None,
        inputs: vec![None].into(),
        out_grads: vec![Some(dy.blob()), None].into(),
        outputs: Default::default(),
    };
    let mut grads = [g.try_blob_mut().unwrap()];
    let err = backward(&call, &args, &mut grads, &[OpReqType::WriteTo]).unwrap_err();
    assert!(err.to_string().contains("outputs"), "{err}");
}
