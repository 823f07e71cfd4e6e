//! `dot`, `batch_dot`, `softmax`, `log_softmax`, `softmax_cross_entropy` and
//! `_random_normal`: gradient checks on every float dtype and request type,
//! values against naive f64 loops, and sampling statistics.

use simpleop::gradcheck::GradCheck;
use simpleop::{Attrs, DType, EnvArguments, Isa, NDArray, OpReqType, Tuning, eager};
use simpleop_ops::{DotParams, NormalParams, SoftmaxParams};
use simpleop_tests::assert_close;

fn check(g: GradCheck) {
    let report = g.run().unwrap_or_else(|e| panic!("{e}"));
    for dtype in DType::FLOATS {
        for req in [OpReqType::Null, OpReqType::WriteTo, OpReqType::AddTo] {
            assert!(
                report.rows.iter().any(|(d, r, _)| *d == dtype && *r == req),
                "{}: no row for {dtype} {req:?}",
                report.op
            );
        }
    }
}

fn flag(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

const FLAGS: [(bool, bool); 4] = [(false, false), (true, false), (false, true), (true, true)];

/// Stored shape of a `rows × cols` operand, transposed or not.
fn stored(rows: usize, cols: usize, t: bool) -> [usize; 2] {
    if t { [cols, rows] } else { [rows, cols] }
}

// ---------------------------------------------------------------- gradients

#[test]
fn dot_gradients_all_transposes() {
    simpleop_ops::link();
    let (m, k, n) = (3, 4, 5);
    for (ta, tb) in FLAGS {
        let (a, b) = (stored(m, k, ta), stored(k, n, tb));
        check(
            GradCheck::new("dot")
                .attr("transpose_a", flag(ta))
                .attr("transpose_b", flag(tb))
                .shapes(&[&a, &b]),
        );
    }
}

#[test]
fn dot_gradients_vectors() {
    simpleop_ops::link();
    check(GradCheck::new("dot").shapes(&[&[4], &[4]]));
    check(GradCheck::new("dot").shapes(&[&[3, 4], &[4]]));
    check(GradCheck::new("dot").shapes(&[&[4], &[4, 5]]));
    // A transposed matrix against a vector.
    check(
        GradCheck::new("dot")
            .attr("transpose_a", "True")
            .shapes(&[&[4, 3], &[4]]),
    );
    check(
        GradCheck::new("dot")
            .attr("transpose_b", "True")
            .shapes(&[&[4], &[5, 4]]),
    );
}

/// N-D operands are flattened as MXNet does: all axes but the contracted one.
#[test]
fn dot_gradients_n_d() {
    simpleop_ops::link();
    check(GradCheck::new("dot").shapes(&[&[2, 3, 4], &[4, 5]]));
    check(
        GradCheck::new("dot")
            .attr("transpose_a", "True")
            .shapes(&[&[2, 3, 2], &[2, 5]]),
    );
    check(
        GradCheck::new("dot")
            .attr("transpose_b", "True")
            .shapes(&[&[3, 4], &[2, 5, 4]]),
    );
}

#[test]
fn batch_dot_gradients_all_transposes() {
    simpleop_ops::link();
    let (bs, m, k, n) = (2, 3, 4, 5);
    for (ta, tb) in FLAGS {
        let (a, b) = (stored(m, k, ta), stored(k, n, tb));
        check(
            GradCheck::new("batch_dot")
                .attr("transpose_a", flag(ta))
                .attr("transpose_b", flag(tb))
                .shapes(&[&[bs, a[0], a[1]], &[bs, b[0], b[1]]]),
        );
    }
}

#[test]
fn softmax_gradients() {
    simpleop_ops::link();
    for op in ["softmax", "log_softmax"] {
        check(GradCheck::new(op).attr("axis", -1));
        check(GradCheck::new(op).attr("axis", 0));
        check(GradCheck::new(op).attr("temperature", 2.0));
        check(GradCheck::new(op).attr("axis", 0).attr("temperature", 0.5));
        // The middle axis of a 3-D array: strided lanes.
        check(GradCheck::new(op).attr("axis", 1).shapes(&[&[2, 3, 4]]));
    }
}

#[test]
fn softmax_cross_entropy_gradient() {
    simpleop_ops::link();
    // The label's gradient is zero and its numeric derivative is zero too:
    // labels are rounded to class indices, so the checker's ±1e-6 probes
    // leave the loss unchanged. Both inputs are therefore checked.
    let data = NDArray::random_uniform([4, 5], -2.0, 2.0, DType::F64, 3).unwrap();
    check(
        GradCheck::new("softmax_cross_entropy")
            .shapes(&[&[4, 5], &[4]])
            .inputs(vec![data.to_f64_vec(), vec![0.0, 4.0, 2.0, 1.0]]),
    );
}

/// The data gradient by hand, with a zero-initialised label gradient under
/// `Null` (left alone) and `WriteTo` (zeros written).
#[test]
fn softmax_cross_entropy_gradient_by_central_differences() {
    simpleop_ops::link();
    let (n, c) = (3, 7);
    let x = NDArray::random_uniform([n, c], -3.0, 3.0, DType::F64, 11).unwrap();
    let label = NDArray::from_f64(&[6.0, 0.0, 3.0], [3], DType::F64).unwrap();
    let dy = NDArray::from_f64(&[0.75], [1], DType::F64).unwrap();
    let loss = |v: &[f64]| {
        let xa = NDArray::from_f64(v, [n, c], DType::F64).unwrap();
        simpleop_ops::softmax_cross_entropy(&xa, &label)
            .unwrap()
            .to_f64_vec()[0]
    };
    let base = x.to_f64_vec();
    let numeric: Vec<f64> = (0..n * c)
        .map(|j| {
            let (mut p, mut m) = (base.clone(), base.clone());
            p[j] += 1e-6;
            m[j] -= 1e-6;
            0.75 * (loss(&p) - loss(&m)) / 2e-6
        })
        .collect();
    let y = simpleop_ops::softmax_cross_entropy(&x, &label).unwrap();
    for label_req in [OpReqType::Null, OpReqType::WriteTo] {
        let mut grads = vec![
            NDArray::zeros([n, c], DType::F64),
            NDArray::full([n], 5.0, DType::F64),
        ];
        eager::invoke_backward(
            &simpleop_ops::softmax_cross_entropy::OP,
            &EnvArguments::none(),
            &dy,
            Some(&y),
            &[&x, &label],
            &mut grads,
            &[OpReqType::WriteTo, label_req],
        )
        .unwrap();
        assert_close(&grads[0].to_f64_vec(), &numeric, 1e-6, "data_grad");
        let want = if label_req == OpReqType::Null {
            5.0
        } else {
            0.0
        };
        assert!(
            grads[1].to_f64_vec().iter().all(|&v| v == want),
            "{label_req:?}"
        );
    }
}

// ------------------------------------------------------------------- values

fn random(shape: &[usize], seed: u64) -> Vec<f64> {
    NDArray::random_uniform(shape.to_vec(), -1.0, 1.0, DType::F64, seed)
        .unwrap()
        .to_f64_vec()
}

/// `C = op(A) · op(B)` by the definition, with A stored `stored(m, k, ta)`.
#[allow(clippy::too_many_arguments)]
fn naive(a: &[f64], b: &[f64], m: usize, k: usize, n: usize, ta: bool, tb: bool) -> Vec<f64> {
    let at = |i: usize, p: usize| if ta { a[p * m + i] } else { a[i * k + p] };
    let bt = |p: usize, j: usize| if tb { b[j * k + p] } else { b[p * n + j] };
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).map(|p| at(i, p) * bt(p, j)).sum();
        }
    }
    c
}

fn params(ta: bool, tb: bool) -> DotParams {
    DotParams {
        transpose_a: ta,
        transpose_b: tb,
        ..DotParams::default()
    }
}

/// Rounding of the result to `dtype` plus a sum of `k` products accumulated
/// in the compute type (f32 for the half types).
fn tolerance(dtype: DType, k: usize) -> f64 {
    let (out_eps, acc_eps) = match dtype {
        DType::F64 => (f64::EPSILON, f64::EPSILON),
        DType::F32 => (f32::EPSILON as f64, f32::EPSILON as f64),
        DType::F16 => (9.77e-4, f32::EPSILON as f64),
        _ => (7.82e-3, f32::EPSILON as f64),
    };
    out_eps + 2.0 * acc_eps * k as f64
}

/// `dot` against the naive loops for every transpose combination, with
/// WriteTo and AddTo, on `m×k · k×n`.
fn check_dot_values(m: usize, k: usize, n: usize, dtypes: &[DType]) {
    for (ta, tb) in FLAGS {
        let (sa, sb) = (stored(m, k, ta), stored(k, n, tb));
        let (a, b) = (random(&sa, 1), random(&sb, 2));
        for &dtype in dtypes {
            // Round the inputs to the dtype first, so only the product errs.
            let xa = NDArray::from_f64(&a, sa, dtype).unwrap();
            let xb = NDArray::from_f64(&b, sb, dtype).unwrap();
            let want = naive(&xa.to_f64_vec(), &xb.to_f64_vec(), m, k, n, ta, tb);
            let tol = tolerance(dtype, k);
            let what = format!("dot {m}x{k}x{n} ta={ta} tb={tb} {dtype}");
            let c = simpleop_ops::dot(&xa, &xb, params(ta, tb)).unwrap();
            assert_eq!(c.shape().dims(), [m, n], "{what}");
            assert_eq!(c.dtype(), dtype);
            assert_close(&c.to_f64_vec(), &want, tol, &format!("{what} write"));
            // A write never reads the old output: NaN there must not show.
            for req in [OpReqType::WriteTo, OpReqType::WriteInplace] {
                let mut nan = NDArray::full([m, n], f64::NAN, dtype);
                simpleop_ops::dot_into(&xa, &xb, params(ta, tb), &mut nan, req).unwrap();
                assert_close(
                    &nan.to_f64_vec(),
                    &want,
                    tol,
                    &format!("{what} {req:?} on NaN"),
                );
            }

            let init = NDArray::random_uniform([m, n], -1.0, 1.0, dtype, 9).unwrap();
            let mut acc = init.deep_copy();
            simpleop_ops::dot_into(&xa, &xb, params(ta, tb), &mut acc, OpReqType::AddTo).unwrap();
            let want_acc: Vec<f64> = init
                .to_f64_vec()
                .iter()
                .zip(&want)
                .map(|(a, b)| a + b)
                .collect();
            assert_close(&acc.to_f64_vec(), &want_acc, tol, &format!("{what} add"));

            let mut untouched = init.deep_copy();
            simpleop_ops::dot_into(&xa, &xb, params(ta, tb), &mut untouched, OpReqType::Null)
                .unwrap();
            assert_eq!(untouched.to_f64_vec(), init.to_f64_vec(), "{what} null");
        }
    }
}

#[test]
fn dot_matches_naive_loops_on_odd_sizes() {
    simpleop_ops::link();
    check_dot_values(37, 53, 29, &DType::FLOATS);
    check_dot_values(1, 7, 1, &DType::FLOATS);
    check_dot_values(5, 1, 3, &[DType::F64, DType::F32]);
}

/// `dot` and `batch_dot` on every instruction set this CPU runs
/// (`SIMPLEOP_ISA` reaches the products: f32 and f64 run on
/// `private-gemm-x86` at the set's width, the scalar set on `gemm`), with
/// the least parallel grain so that the largest size is split.
#[test]
fn dot_matches_naive_loops_on_every_isa() {
    simpleop_ops::link();
    for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
        let Ok(_tuning) = Tuning::scoped(|t| {
            t.isa = isa;
            t.parallel_work = 0;
        }) else {
            continue; // not on this CPU
        };
        assert_eq!(Tuning::current().isa, isa);
        for (m, k, n) in [(1, 1, 1), (7, 13, 5), (33, 65, 17), (130, 150, 140)] {
            check_dot_values(m, k, n, &[DType::F64, DType::F32]);
        }
        check_batch_dot_values(3, 13, 17, 11);
    }
}

#[test]
fn dot_large_runs_the_parallel_path() {
    simpleop_ops::link();
    check_dot_values(300, 300, 300, &[DType::F64, DType::F32]);
    check_dot_values(301, 257, 129, &[DType::F16, DType::BF16]);
}

#[test]
fn dot_gradients_match_naive_loops() {
    simpleop_ops::link();
    let (m, k, n) = (37, 53, 29);
    for (ta, tb) in FLAGS {
        let (sa, sb) = (stored(m, k, ta), stored(k, n, tb));
        let (a, b, dc) = (random(&sa, 3), random(&sb, 4), random(&[m, n], 5));
        // dA (as stored) = dC · op(B)ᵀ, transposed back when A is.
        let opb: Vec<f64> = naive(&b, &identity(n), k, n, n, tb, false); // op(B), k×n
        let opa: Vec<f64> = naive(&a, &identity(k), m, k, k, ta, false); // op(A), m×k
        let d_opa = naive(&dc, &opb, m, n, k, false, true); // m×k
        let d_opb = naive(&opa, &dc, k, m, n, true, false); // k×n
        let want_a = if ta { transpose(&d_opa, m, k) } else { d_opa };
        let want_b = if tb { transpose(&d_opb, k, n) } else { d_opb };
        let xa = NDArray::from_f64(&a, sa, DType::F64).unwrap();
        let xb = NDArray::from_f64(&b, sb, DType::F64).unwrap();
        let dy = NDArray::from_f64(&dc, [m, n], DType::F64).unwrap();
        let env = EnvArguments::kwargs(params(ta, tb));
        let grads = eager::gradient(&simpleop_ops::dot::OP, &env, &[&xa, &xb], &dy).unwrap();
        let what = format!("ta={ta} tb={tb}");
        assert_close(
            &grads[0].to_f64_vec(),
            &want_a,
            1e-13,
            &format!("lhs_grad {what}"),
        );
        assert_close(
            &grads[1].to_f64_vec(),
            &want_b,
            1e-13,
            &format!("rhs_grad {what}"),
        );
    }
}

fn identity(n: usize) -> Vec<f64> {
    (0..n * n)
        .map(|i| if i / n == i % n { 1.0 } else { 0.0 })
        .collect()
}

fn transpose(x: &[f64], rows: usize, cols: usize) -> Vec<f64> {
    (0..rows * cols)
        .map(|i| x[(i % rows) * cols + i / rows])
        .collect()
}

#[test]
fn dot_vectors_and_shapes() {
    simpleop_ops::link();
    let a = NDArray::from_f64(&[1.0, 2.0, 3.0], [3], DType::F32).unwrap();
    let b = NDArray::from_f64(&[4.0, -5.0, 6.0], [3], DType::F32).unwrap();
    let s = simpleop_ops::dot(&a, &b, DotParams::default()).unwrap();
    assert_eq!(s.shape().dims(), [1]);
    assert_eq!(s.to_f64_vec(), [12.0]);
    let m = NDArray::from_f64(&[1.0, 0.0, 2.0, 0.0, 1.0, -1.0], [2, 3], DType::F64).unwrap();
    let v = NDArray::from_f64(&[1.0, 2.0, 3.0], [3], DType::F64).unwrap();
    let mv = simpleop_ops::dot(&m, &v, DotParams::default()).unwrap();
    assert_eq!(mv.shape().dims(), [2]);
    assert_eq!(mv.to_f64_vec(), [7.0, -1.0]);
    let w = NDArray::from_f64(&[1.0, -1.0], [2], DType::F64).unwrap();
    let vm = simpleop_ops::dot(&w, &m, DotParams::default()).unwrap();
    assert_eq!(vm.shape().dims(), [3]);
    assert_eq!(vm.to_f64_vec(), [1.0, -1.0, 3.0]);
    // By name, with MXNet's attribute strings.
    let mt = NDArray::from_f64(&[1.0, 0.0, 0.0, 1.0, 2.0, -1.0], [3, 2], DType::F64).unwrap();
    let r = eager::invoke("dot", &[&mt, &v], &Attrs::from([("transpose_a", "True")])).unwrap();
    assert_eq!(r.to_f64_vec(), [7.0, -1.0]);
    // Errors name the op and the argument.
    let e = simpleop_ops::dot(&m, &m, DotParams::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("`dot`") && e.contains("`rhs`"), "{e}");
    let e = simpleop_ops::dot(&a, &b, params(true, false))
        .unwrap_err()
        .to_string();
    assert!(e.contains("`transpose_a`"), "{e}");
    let e = eager::invoke("dot", &[&m, &v], &Attrs::from([("transpose", "True")]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("transpose"), "{e}");
}

#[test]
fn dot_write_ignores_old_output_and_handles_empty_sizes() {
    simpleop_ops::link();
    for dtype in DType::FLOATS {
        let a = NDArray::from_f64(&[1.0, 2.0, 3.0, 4.0], [2, 2], dtype).unwrap();
        let mut out = NDArray::full([2, 2], f64::NAN, dtype);
        simpleop_ops::dot_into(&a, &a, DotParams::default(), &mut out, OpReqType::WriteTo).unwrap();
        assert_eq!(out.to_f64_vec(), [7.0, 10.0, 15.0, 22.0], "{dtype}");
        // K = 0: the product is all zeros (write) or leaves the output (add).
        let l = NDArray::zeros([3, 0], dtype);
        let r = NDArray::zeros([0, 2], dtype);
        let z = simpleop_ops::dot(&l, &r, DotParams::default()).unwrap();
        assert_eq!(z.shape().dims(), [3, 2]);
        let mut nan = NDArray::full([3, 2], f64::NAN, dtype);
        simpleop_ops::dot_into(&l, &r, DotParams::default(), &mut nan, OpReqType::WriteTo).unwrap();
        assert_eq!(nan.to_f64_vec(), [0.0; 6], "{dtype}");
        let mut ones = NDArray::ones([3, 2], dtype);
        simpleop_ops::dot_into(&l, &r, DotParams::default(), &mut ones, OpReqType::AddTo).unwrap();
        assert_eq!(ones.to_f64_vec(), [1.0; 6], "{dtype}");
        // M = 0 and an empty batch.
        let e = simpleop_ops::dot(
            &NDArray::zeros([0, 4], dtype),
            &NDArray::zeros([4, 2], dtype),
            DotParams::default(),
        )
        .unwrap();
        assert_eq!(e.shape().dims(), [0, 2]);
        let b = NDArray::zeros([0, 2, 3], dtype);
        let c = NDArray::zeros([0, 3, 4], dtype);
        let e = simpleop_ops::batch_dot(&b, &c, DotParams::default()).unwrap();
        assert_eq!(e.shape().dims(), [0, 2, 4]);
    }
}

#[test]
fn batch_dot_matches_naive_loops() {
    simpleop_ops::link();
    check_batch_dot_values(3, 13, 17, 11);
    let x = NDArray::zeros([2, 3, 4], DType::F32);
    let y = NDArray::zeros([3, 4, 5], DType::F32);
    let e = simpleop_ops::batch_dot(&x, &y, DotParams::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("`batch_dot`") && e.contains("`rhs`"), "{e}");
}

/// `batch_dot` of `bs` products `m×k · k×n` against the naive loops for
/// every transpose combination, with WriteTo and AddTo, in f64 and f32.
fn check_batch_dot_values(bs: usize, m: usize, k: usize, n: usize) {
    for (ta, tb) in FLAGS {
        let (sa, sb) = (stored(m, k, ta), stored(k, n, tb));
        let a = random(&[bs, sa[0], sa[1]], 6);
        let b = random(&[bs, sb[0], sb[1]], 7);
        let want: Vec<f64> = (0..bs)
            .flat_map(|i| {
                naive(
                    &a[i * m * k..(i + 1) * m * k],
                    &b[i * k * n..(i + 1) * k * n],
                    m,
                    k,
                    n,
                    ta,
                    tb,
                )
            })
            .collect();
        for dtype in [DType::F64, DType::F32] {
            let xa = NDArray::from_f64(&a, [bs, sa[0], sa[1]], dtype).unwrap();
            let xb = NDArray::from_f64(&b, [bs, sb[0], sb[1]], dtype).unwrap();
            let c = simpleop_ops::batch_dot(&xa, &xb, params(ta, tb)).unwrap();
            assert_eq!(c.shape().dims(), [bs, m, n]);
            let tol = if dtype == DType::F64 { 1e-13 } else { 1e-5 };
            let what = format!("batch_dot ta={ta} tb={tb} {dtype}");
            assert_close(&c.to_f64_vec(), &want, tol, &what);
            let mut acc = NDArray::ones([bs, m, n], dtype);
            simpleop_ops::batch_dot_into(&xa, &xb, params(ta, tb), &mut acc, OpReqType::AddTo)
                .unwrap();
            let want_acc: Vec<f64> = want.iter().map(|v| v + 1.0).collect();
            assert_close(&acc.to_f64_vec(), &want_acc, tol, &format!("{what} add"));
        }
    }
}

fn softmax_params(axis: i64, temperature: Option<f64>) -> SoftmaxParams {
    SoftmaxParams {
        axis,
        temperature,
        ..SoftmaxParams::default()
    }
}

#[test]
fn softmax_rows_sum_to_one() {
    simpleop_ops::link();
    let shape = [3, 5, 4];
    let x = NDArray::random_uniform(shape, -5.0, 5.0, DType::F32, 21).unwrap();
    for axis in [0i64, 1, 2, -1] {
        let ax = axis.rem_euclid(3) as usize;
        let y = simpleop_ops::softmax(&x, softmax_params(axis, None))
            .unwrap()
            .to_f64_vec();
        let ly = simpleop_ops::log_softmax(&x, softmax_params(axis, Some(2.0)))
            .unwrap()
            .to_f64_vec();
        let strides = [20, 4, 1];
        let lanes: Vec<usize> = (0..60)
            .filter(|i| (i / strides[ax]) % shape[ax] == 0)
            .collect();
        assert_eq!(lanes.len(), 60 / shape[ax]);
        for start in lanes {
            let idx = (0..shape[ax]).map(|i| start + i * strides[ax]);
            let s: f64 = idx.clone().map(|i| y[i]).sum();
            assert!((s - 1.0).abs() < 1e-6, "axis {axis}: sum {s}");
            assert!(idx.clone().all(|i| y[i] > 0.0));
            let ls: f64 = idx.map(|i| ly[i].exp()).sum();
            assert!((ls - 1.0).abs() < 1e-5, "log axis {axis}: sum {ls}");
        }
    }
}

#[test]
fn softmax_values_and_stability() {
    simpleop_ops::link();
    let x =
        NDArray::from_f64(&[1.0, 2.0, 3.0, 1000.0, 1001.0, 1002.0], [2, 3], DType::F32).unwrap();
    let e: Vec<f64> = [0.0f64, 1.0, 2.0].iter().map(|v| v.exp()).collect();
    let z: f64 = e.iter().sum();
    let want: Vec<f64> = e.iter().chain(&e).map(|v| v / z).collect();
    let y = simpleop_ops::softmax(&x, SoftmaxParams::default()).unwrap();
    assert_close(&y.to_f64_vec(), &want, 1e-6, "softmax");
    let ly = simpleop_ops::log_softmax(&x, SoftmaxParams::default()).unwrap();
    let lwant: Vec<f64> = want.iter().map(|v| v.ln()).collect();
    assert_close(&ly.to_f64_vec(), &lwant, 1e-6, "log_softmax");
    // Temperature divides the input.
    let t = simpleop_ops::softmax(&x, softmax_params(-1, Some(2.0))).unwrap();
    let e2: Vec<f64> = [0.0f64, 0.5, 1.0].iter().map(|v| v.exp()).collect();
    let z2: f64 = e2.iter().sum();
    let want2: Vec<f64> = e2.iter().chain(&e2).map(|v| v / z2).collect();
    assert_close(&t.to_f64_vec(), &want2, 1e-6, "softmax t=2");
    // By name; a bad axis names the op and the argument.
    let r = eager::invoke(
        "softmax",
        &[&x],
        &Attrs::from([("axis", "-1"), ("temperature", "None")]),
    )
    .unwrap();
    assert_eq!(r.to_f64_vec(), y.to_f64_vec());
    let e = simpleop_ops::softmax(&x, softmax_params(2, None))
        .unwrap_err()
        .to_string();
    assert!(e.contains("`softmax`") && e.contains("`axis`"), "{e}");
    let e = simpleop_ops::log_softmax(&x, softmax_params(0, Some(0.0)))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`log_softmax`") && e.contains("`temperature`"),
        "{e}"
    );
}

#[test]
fn softmax_cross_entropy_values_and_errors() {
    simpleop_ops::link();
    let (n, c) = (5, 9);
    let x = random(&[n, c], 31);
    let labels = [0.0, 8.0, 3.0, 3.0, 5.0];
    let want: f64 = (0..n)
        .map(|i| {
            let row = &x[i * c..(i + 1) * c];
            let lse = row.iter().map(|v| v.exp()).sum::<f64>().ln();
            lse - row[labels[i] as usize]
        })
        .sum();
    for dtype in [DType::F64, DType::F32] {
        let xa = NDArray::from_f64(&x, [n, c], dtype).unwrap();
        let la = NDArray::from_f64(&labels, [n], dtype).unwrap();
        let y = simpleop_ops::softmax_cross_entropy(&xa, &la).unwrap();
        assert_eq!(y.shape().dims(), [1]);
        assert_close(&y.to_f64_vec(), &[want], 1e-6, "softmax_cross_entropy");
    }
    // Integer labels work too.
    let xa = NDArray::from_f64(&x, [n, c], DType::F64).unwrap();
    let li = NDArray::from_f64(&labels, [n], DType::I32).unwrap();
    let y = simpleop_ops::softmax_cross_entropy(&xa, &li).unwrap();
    assert_close(&y.to_f64_vec(), &[want], 1e-12, "int labels");
    // A label out of range names the op and `label`, and writes nothing.
    for bad in [9.0, -1.0, f64::NAN] {
        let lb = NDArray::from_f64(&[0.0, bad, 1.0, 2.0, 3.0], [n], DType::F64).unwrap();
        let mut out = NDArray::full([1], 7.0, DType::F64);
        let e = simpleop_ops::softmax_cross_entropy_into(&xa, &lb, &mut out, OpReqType::WriteTo)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`softmax_cross_entropy`") && e.contains("`label`"),
            "{e}"
        );
        assert_eq!(out.to_f64_vec(), [7.0]);
    }
    let wrong = NDArray::zeros([n + 1], DType::F64);
    let e = simpleop_ops::softmax_cross_entropy(&xa, &wrong)
        .unwrap_err()
        .to_string();
    assert!(e.contains("`label`"), "{e}");
}

// ------------------------------------------------------------------ sampling

fn normal(shape: Vec<usize>, loc: f64, scale: f64, dtype: &str, seed: u64) -> NDArray {
    let p = NormalParams {
        loc,
        scale,
        shape,
        dtype: dtype.into(),
        ..Default::default()
    };
    eager::invoke_with(
        &simpleop_ops::random_normal::OP,
        &[],
        &EnvArguments::kwargs(p).with_seed(seed),
    )
    .unwrap()
}

#[test]
fn random_normal_statistics() {
    simpleop_ops::link();
    for (loc, scale, dtype) in [
        (0.0, 1.0, "float32"),
        (3.0, 2.5, "float64"),
        (-1.0, 0.5, "float16"),
    ] {
        let x = normal(vec![100_000], loc, scale, dtype, 5);
        assert_eq!(x.dtype().name(), dtype);
        let v = x.to_f64_vec();
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / (v.len() - 1) as f64;
        // Standard error of the mean is scale/316; allow about 5 of them.
        assert!((mean - loc).abs() < 0.016 * scale, "{dtype}: mean {mean}");
        assert!(
            (var.sqrt() / scale - 1.0).abs() < 0.015,
            "{dtype}: std {}",
            var.sqrt()
        );
        // About 68.3% within one standard deviation.
        let within = v.iter().filter(|a| (*a - loc).abs() < scale).count() as f64 / v.len() as f64;
        assert!((within - 0.6827).abs() < 0.01, "{dtype}: {within}");
    }
}

#[test]
fn random_normal_is_deterministic_for_a_seed() {
    simpleop_ops::link();
    let a = normal(vec![3, 1000], 1.0, 2.0, "float32", 42);
    let b = normal(vec![3, 1000], 1.0, 2.0, "float32", 42);
    let c = normal(vec![3, 1000], 1.0, 2.0, "float32", 43);
    assert_eq!(a.shape().dims(), [3, 1000]);
    assert_eq!(a.to_f64_vec(), b.to_f64_vec());
    assert_ne!(a.to_f64_vec(), c.to_f64_vec());
    // The same stream as the NDArray constructor.
    let d = NDArray::random_normal([3, 1000], 1.0, 2.0, DType::F32, 42).unwrap();
    assert_eq!(a.to_f64_vec(), d.to_f64_vec());
    // By name with MXNet's attribute strings; bad kwargs name the argument.
    let r = eager::invoke(
        "_random_normal",
        &[],
        &Attrs::from([
            ("loc", "0"),
            ("scale", "1"),
            ("shape", "(2, 3)"),
            ("dtype", "float64"),
        ]),
    )
    .unwrap();
    assert_eq!(r.shape().dims(), [2, 3]);
    assert_eq!(r.dtype(), DType::F64);
    let e = eager::invoke(
        "_random_normal",
        &[],
        &Attrs::from([("scale", "-1"), ("shape", "(2,)")]),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("`_random_normal`") && e.contains("`scale`"),
        "{e}"
    );
    let e = eager::invoke(
        "_random_normal",
        &[],
        &Attrs::from([("dtype", "int32"), ("shape", "(2,)")]),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("`dtype`"), "{e}");
}

// ---------------------------------------------------------- FullyConnected

#[test]
fn fully_connected_gradients() {
    simpleop_ops::link();
    // flatten: (2, 3, 2) data is (2, 6) against a (4, 6) weight
    check(
        GradCheck::new("FullyConnected")
            .attr("num_hidden", 4)
            .shapes(&[&[2, 3, 2], &[4, 6], &[4]]),
    );
    // flatten = False: the last axis is contracted, the others kept
    check(
        GradCheck::new("FullyConnected")
            .attr("num_hidden", 3)
            .attr("flatten", "False")
            .shapes(&[&[2, 2, 5], &[3, 5], &[3]]),
    );
}

/// `out[r, h] = Σ_k x[r, k] · w[h, k] + b[h]`, in f64.
fn naive_dense(x: &[f64], w: &[f64], b: &[f64], rows: usize, k: usize) -> Vec<f64> {
    let h = b.len();
    let mut out = vec![0.0; rows * h];
    for r in 0..rows {
        for j in 0..h {
            let dot: f64 = (0..k).map(|i| x[r * k + i] * w[j * k + i]).sum();
            out[r * h + j] = dot + b[j];
        }
    }
    out
}

#[test]
fn fully_connected_matches_naive_loops_and_honours_requests() {
    simpleop_ops::link();
    let (rows, k, h) = (5, 7, 3);
    let (x, w, b) = (random(&[rows, k], 1), random(&[h, k], 2), random(&[h], 3));
    let attrs = Attrs::new().with("num_hidden", h);
    for dtype in DType::FLOATS {
        let arr = |d: &[f64], s: &[usize]| NDArray::from_f64(d, s.to_vec(), dtype).unwrap();
        let (xa, wa, ba) = (arr(&x, &[rows, k]), arr(&w, &[h, k]), arr(&b, &[h]));
        // The reference sees the inputs as rounded to `dtype`.
        let (xr, wr, br) = (xa.to_f64_vec(), wa.to_f64_vec(), ba.to_f64_vec());
        let want = naive_dense(&xr, &wr, &br, rows, k);
        let inputs = [&xa, &wa, &ba];
        let out = eager::invoke("FullyConnected", &inputs, &attrs).unwrap();
        assert_eq!(out.shape().dims(), [rows, h]);
        let tol = tolerance(dtype, k);
        assert_close(&out.to_f64_vec(), &want, tol, &format!("{dtype} write"));
        // AddTo adds the layer onto what the output held.
        let mut acc = NDArray::full(vec![rows, h], 1.0, dtype);
        eager::invoke_into_by_name(
            "FullyConnected",
            &inputs,
            &attrs,
            &mut acc,
            OpReqType::AddTo,
        )
        .unwrap();
        let plus_one: Vec<f64> = want.iter().map(|v| v + 1.0).collect();
        assert_close(&acc.to_f64_vec(), &plus_one, tol, &format!("{dtype} add"));
    }
}

#[test]
fn fully_connected_errors_name_the_argument() {
    simpleop_ops::link();
    let x = NDArray::zeros(vec![2, 6], DType::F32);
    let w = NDArray::zeros(vec![4, 5], DType::F32);
    let b = NDArray::zeros(vec![4], DType::F32);
    let attrs = Attrs::new().with("num_hidden", 4);
    let e = eager::invoke("FullyConnected", &[&x, &w, &b], &attrs).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("FullyConnected") && msg.contains("weight") && msg.contains("(4, 6)"),
        "{msg}"
    );
    let w = NDArray::zeros(vec![4, 6], DType::F32);
    // no_bias takes two inputs, data and weight.
    let e = eager::invoke(
        "FullyConnected",
        &[&x, &w, &b],
        &attrs.clone().with("no_bias", "True"),
    )
    .unwrap_err();
    assert!(e.to_string().contains("expected 2"), "{e}");
    let e = eager::invoke("FullyConnected", &[&x, &w, &b], &Attrs::new()).unwrap_err();
    assert!(e.to_string().contains("num_hidden"), "{e}");
    let short = NDArray::zeros(vec![3], DType::F32);
    let e = eager::invoke("FullyConnected", &[&x, &w, &short], &attrs).unwrap_err();
    assert!(e.to_string().contains("bias"), "{e}");
}
