//! `#[simple_op(autodiff)]`: gradients derived from the forward kernel by
//! dual numbers. Each derived op passes the numeric checker (every float
//! dtype and request), equals the hand-written gradient of the same
//! function, and gives the same gradients eagerly, on the tape, in the
//! executor and fused.

use std::collections::HashMap;

use simpleop::gradcheck::GradCheck;
use simpleop::symbol::{BindConfig, GradReq};
use simpleop::{Attrs, DType, NDArray, Shape, Symbol, autograd, eager, simple_op};
use simpleop_tests::assert_close;

/// The standard library's relu forward.
#[simple_op(name = "_ad_relu", autodiff, inplace = "OutIn")]
mod ad_relu {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T) -> T {
        simpleop_ops::relu::forward(x)
    }
}

#[simple_op(name = "_ad_tanh", autodiff)]
mod ad_tanh {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T) -> T {
        x.tanh()
    }
}

#[simple_op(name = "_ad_sigmoid", autodiff)]
mod ad_sigmoid {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T) -> T {
        x.sigmoid()
    }
}

/// The standard library's smooth L1 forward, with its scalar, called as it is.
#[simple_op(name = "_ad_smooth_l1", autodiff, scalar, inplace = "OutIn")]
mod ad_smooth_l1 {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T, sigma: T) -> T {
        simpleop_ops::smooth_l1::forward(x, sigma)
    }
}

/// A binary op with broadcasting: `x e^y`.
#[simple_op(name = "_ad_mul_exp", autodiff, broadcast)]
mod ad_mul_exp {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T, y: T) -> T {
        x * y.exp()
    }
}

/// A ternary op: `a b + c`.
#[simple_op(name = "_ad_fma", autodiff, broadcast)]
mod ad_fma {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(a: T, b: T, c: T) -> T {
        a * b + c
    }
}

/// Two outputs: `(sin x, x cos x)`.
#[simple_op(name = "_ad_sin_xcos", autodiff)]
mod ad_sin_xcos {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T) -> (T, T) {
        (x.sin(), x * x.cos())
    }
}

/// Two outputs, the first with an infinite slope at 0.
#[simple_op(name = "_ad_sqrt_and_x", autodiff)]
mod ad_sqrt_and_x {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T) -> (T, T) {
        (x.sqrt(), x)
    }
}

/// The kwargs of `_ad_soft_clip`.
#[derive(Clone, Debug, PartialEq, serde::Deserialize, serde::Serialize)]
pub struct SoftClipParams {
    /// The bound.
    pub limit: f64,
}

/// `limit tanh(x / limit)`, with kwargs.
#[simple_op(name = "_ad_soft_clip", autodiff, kwargs = SoftClipParams)]
mod ad_soft_clip {
    use super::SoftClipParams;
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T, p: &SoftClipParams) -> T {
        let l = T::from_f64(p.limit);
        l * (x / l).tanh()
    }
}

/// Eager gradients of `op` at `inputs` for head `head`, through the tape.
fn tape_grads(op: &str, attrs: &Attrs, inputs: &[NDArray], head: &NDArray) -> Vec<Vec<f64>> {
    tape_grads_of(inputs, head, |xs| eager::invoke(op, xs, attrs).unwrap())
}

/// Eager gradients of `f(inputs)` for head `head`, through the tape.
fn tape_grads_of(
    inputs: &[NDArray],
    head: &NDArray,
    f: impl FnOnce(&[&NDArray]) -> NDArray,
) -> Vec<Vec<f64>> {
    let mut xs = inputs.to_vec();
    for x in &mut xs {
        x.attach_grad().unwrap();
    }
    let refs: Vec<&NDArray> = xs.iter().collect();
    let y = autograd::record(|| f(&refs));
    autograd::backward(&[&y], &[head]).unwrap();
    xs.iter().map(|x| x.grad().unwrap().to_f64_vec()).collect()
}

/// Gradients of `op` at `inputs` for head `head`, through the executor.
fn executor_grads(
    op: &str,
    attrs: &Attrs,
    inputs: &[NDArray],
    head: &NDArray,
    fusion: bool,
) -> Vec<Vec<f64>> {
    let names: Vec<String> = (0..inputs.len()).map(|i| format!("x{i}")).collect();
    let vars: Vec<Symbol> = names.iter().map(|n| Symbol::var(n)).collect();
    let refs: Vec<&Symbol> = vars.iter().collect();
    // tanh after the op, so that fusion has a chain to fuse
    let y = Symbol::invoke(op, &refs, attrs).unwrap();
    let y = Symbol::invoke("_ad_tanh", &[&y], &Attrs::new()).unwrap();
    let mut args = HashMap::new();
    let mut grads = HashMap::new();
    let mut reqs = HashMap::new();
    for (n, x) in names.iter().zip(inputs) {
        args.insert(n.clone(), x.clone());
        grads.insert(n.clone(), NDArray::zeros(x.shape().clone(), x.dtype()));
        reqs.insert(n.clone(), GradReq::Write);
    }
    let config = BindConfig {
        fusion,
        ..BindConfig::default()
    };
    let mut exe = y.bind_with(args, grads, reqs, config).unwrap();
    exe.forward(true).unwrap();
    exe.backward(std::slice::from_ref(head)).unwrap();
    names
        .iter()
        .map(|n| exe.grad(n).unwrap().to_f64_vec())
        .collect()
}

fn uniform(shape: &[usize], low: f64, high: f64, dtype: DType, seed: u64) -> NDArray {
    NDArray::random_uniform(Shape::new(shape.to_vec()), low, high, dtype, seed).unwrap()
}

/// Values of `a`, with -0 read as +0 (a derived zero gradient may be
/// `dy · 0`, which keeps `dy`'s sign).
fn values(a: &[f64]) -> Vec<f64> {
    a.iter().map(|v| v + 0.0).collect()
}

#[test]
fn derived_gradients_pass_the_numeric_checker_in_every_dtype_and_request() {
    simpleop_ops::link();
    let shapes: &[&[usize]] = &[&[3, 4]];
    // relu and smooth L1 away from their kinks, where differences are exact
    GradCheck::new("_ad_relu").shapes(shapes).run().unwrap();
    GradCheck::new("_ad_tanh").shapes(shapes).run().unwrap();
    GradCheck::new("_ad_sigmoid").shapes(shapes).run().unwrap();
    GradCheck::new("_ad_smooth_l1")
        .attr("scalar", 1.5)
        .shapes(shapes)
        .range(-3.0, 3.0)
        .run()
        .unwrap();
    GradCheck::new("_ad_mul_exp")
        .shapes(&[&[3, 4], &[1, 4]])
        .run()
        .unwrap();
    GradCheck::new("_ad_fma")
        .shapes(&[&[3, 4], &[3, 1], &[4]])
        .run()
        .unwrap();
    GradCheck::new("_ad_sin_xcos").shapes(shapes).run().unwrap();
    GradCheck::new("_ad_soft_clip")
        .attr("limit", 1.5)
        .shapes(shapes)
        .range(-4.0, 4.0)
        .run()
        .unwrap();
}

#[test]
fn derived_gradients_equal_the_hand_written_ones() {
    simpleop_ops::link();
    let pairs = [
        ("_ad_relu", "relu", Attrs::new()),
        ("_ad_tanh", "tanh", Attrs::new()),
        ("_ad_sigmoid", "sigmoid", Attrs::new()),
        (
            "_ad_smooth_l1",
            "smooth_l1",
            Attrs::new().with("scalar", 0.8),
        ),
    ];
    for dtype in DType::FLOATS {
        // f32 and f64 give the same bits but for sigmoid, whose
        // hand-written `dy y (1 - y)` rounds in another order; the half
        // types store the output a T1 gradient reads, the derived gradient
        // recomputes it in f32.
        let tol = match dtype {
            DType::F64 => 1e-15,
            DType::F32 => 3e-7,
            _ => 1e-2,
        };
        let x = uniform(&[1000], -4.0, 4.0, dtype, 11);
        let head = uniform(&[1000], -1.0, 1.0, dtype, 12);
        for (derived, written, attrs) in &pairs {
            let got = tape_grads(derived, attrs, std::slice::from_ref(&x), &head);
            let want = tape_grads(written, attrs, std::slice::from_ref(&x), &head);
            let what = format!("{derived} against {written} in {dtype}");
            if dtype == DType::F64 && *derived != "_ad_sigmoid" {
                assert_eq!(values(&got[0]), values(&want[0]), "{what}");
            }
            assert_close(&got[0], &want[0], tol, &what);
        }
    }
}

#[test]
fn derived_gradients_of_several_inputs_and_outputs_match_closed_forms() {
    simpleop_ops::link();
    let (x, y) = (
        uniform(&[2, 5], -1.5, 1.5, DType::F64, 1),
        uniform(&[1, 5], -1.5, 1.5, DType::F64, 2),
    );
    let head = uniform(&[2, 5], -1.0, 1.0, DType::F64, 3);
    let g = tape_grads("_ad_mul_exp", &Attrs::new(), &[x.clone(), y.clone()], &head);
    let (xv, yv, hv) = (x.to_f64_vec(), y.to_f64_vec(), head.to_f64_vec());
    let want_x: Vec<f64> = (0..10).map(|i| hv[i] * yv[i % 5].exp()).collect();
    // y broadcast over rows: its gradient sums them
    let want_y: Vec<f64> = (0..5)
        .map(|j| {
            (0..2)
                .map(|r| hv[r * 5 + j] * xv[r * 5 + j] * yv[j].exp())
                .sum()
        })
        .collect();
    assert_close(&g[0], &want_x, 1e-15, "d/dx x e^y");
    assert_close(&g[1], &want_y, 1e-15, "d/dy x e^y");

    let c = uniform(&[2, 5], -1.0, 1.0, DType::F64, 4);
    let g = tape_grads(
        "_ad_fma",
        &Attrs::new(),
        &[x.clone(), head.clone(), c],
        &head,
    );
    let want_a: Vec<f64> = hv.iter().map(|h| h * h).collect();
    let want_b: Vec<f64> = hv.iter().zip(&xv).map(|(h, a)| h * a).collect();
    assert_close(&g[0], &want_a, 0.0, "d/da");
    assert_close(&g[1], &want_b, 0.0, "d/db");
    assert_close(&g[2], &hv, 0.0, "d/dc");

    // two outputs, each with its head: d/dx = h0 cos x + h1 (cos x - x sin x)
    let mut xa = x.clone();
    xa.attach_grad().unwrap();
    let outs = autograd::record(|| {
        eager::invoke_outputs_by_name("_ad_sin_xcos", &[&xa], &mut [], &Attrs::new()).unwrap()
    });
    let h1 = uniform(&[2, 5], -1.0, 1.0, DType::F64, 5);
    autograd::backward(&[&outs[0], &outs[1]], &[&head, &h1]).unwrap();
    let h1v = h1.to_f64_vec();
    let want: Vec<f64> = (0..10)
        .map(|i| {
            let v = xv[i];
            hv[i] * v.cos() + h1v[i] * (v.cos() - v * v.sin())
        })
        .collect();
    assert_close(
        &xa.grad().unwrap().to_f64_vec(),
        &want,
        1e-15,
        "sin, x cos x",
    );
}

#[test]
fn an_output_nothing_reads_adds_nothing_even_where_its_slope_is_infinite() {
    simpleop_ops::link();
    let mut x = NDArray::from_slice(&[0.0f32, 4.0], [2]).unwrap();
    x.attach_grad().unwrap();
    let outs = autograd::record(|| {
        eager::invoke_outputs_by_name("_ad_sqrt_and_x", &[&x], &mut [], &Attrs::new()).unwrap()
    });
    // only the second output has a head: sqrt's slope at 0 must not leak
    let head = NDArray::from_slice(&[1.0f32, 1.0], [2]).unwrap();
    autograd::backward(&[&outs[1]], &[&head]).unwrap();
    assert_eq!(x.grad().unwrap().to_vec::<f32>().unwrap(), [1.0, 1.0]);
}

#[test]
fn every_path_gives_the_same_derived_gradients() {
    simpleop_ops::link();
    let cases: [(&str, Attrs, Vec<&[usize]>); 4] = [
        (
            "_ad_smooth_l1",
            Attrs::new().with("scalar", 1.2),
            vec![&[3000]],
        ),
        ("_ad_mul_exp", Attrs::new(), vec![&[30, 100], &[100]]),
        ("_ad_fma", Attrs::new(), vec![&[3000], &[3000], &[3000]]),
        (
            "_ad_soft_clip",
            Attrs::new().with("limit", 2.0),
            vec![&[3000]],
        ),
    ];
    for dtype in DType::FLOATS {
        for (op, attrs, shapes) in &cases {
            let inputs: Vec<NDArray> = shapes
                .iter()
                .enumerate()
                .map(|(i, s)| uniform(s, -2.0, 2.0, dtype, 20 + i as u64))
                .collect();
            let out_shape = if *op == "_ad_mul_exp" {
                vec![30, 100]
            } else {
                vec![3000]
            };
            let head = uniform(&out_shape, -1.0, 1.0, dtype, 9);
            let fused = executor_grads(op, attrs, &inputs, &head, true);
            let unfused = executor_grads(op, attrs, &inputs, &head, false);
            assert_eq!(fused, unfused, "{op} in {dtype}: fused against unfused");
            // the tape over the same two ops
            let tape = tape_grads_of(&inputs, &head, |xs| {
                let y = eager::invoke(op, xs, attrs).unwrap();
                eager::invoke("_ad_tanh", &[&y], &Attrs::new()).unwrap()
            });
            for (i, g) in tape.iter().enumerate() {
                assert_eq!(*g, unfused[i], "{op} in {dtype}: tape, input {i}");
            }
        }
    }
}

#[test]
fn a_derived_gradient_honours_every_request_eagerly() {
    simpleop_ops::link();
    let x = uniform(&[64], -2.0, 2.0, DType::F32, 7);
    let dy = uniform(&[64], -1.0, 1.0, DType::F32, 8);
    let env = simpleop::EnvArguments::none();
    let grad = |req: simpleop::OpReqType, start: f32| {
        let mut g = [NDArray::from_slice(&[start; 64], [64]).unwrap()];
        eager::invoke_backward(&ad_tanh::OP, &env, &dy, None, &[&x], &mut g, &[req]).unwrap();
        g[0].to_f64_vec()
    };
    let written = grad(simpleop::OpReqType::WriteTo, f32::NAN);
    let want: Vec<f64> = x
        .to_f64_vec()
        .iter()
        .zip(dy.to_f64_vec())
        .map(|(v, d)| d * (1.0 - v.tanh() * v.tanh()))
        .collect();
    assert_close(&written, &want, 1e-6, "WriteTo over NaN");
    let added = grad(simpleop::OpReqType::AddTo, 1.0);
    let plus_one: Vec<f64> = written.iter().map(|w| ((*w as f32) + 1.0) as f64).collect();
    assert_eq!(added, plus_one, "AddTo");
    assert_eq!(grad(simpleop::OpReqType::Null, 3.0), vec![3.0; 64], "Null");
}
