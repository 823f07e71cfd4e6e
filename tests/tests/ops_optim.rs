//! Optimizer updates: state inputs updated in place, weight updated in
//! place, MXNet's formulas, every float dtype, by name and typed.

use simpleop::{Attrs, DType, Error, NDArray, eager};
use simpleop_ops as ops;

fn ptr(a: &NDArray) -> usize {
    a.blob().as_ptr() as usize
}

fn close(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "element {i}: {g} vs {w}"
        );
    }
}

fn tol(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 1e-12,
        DType::F32 => 1e-5,
        DType::F16 => 2e-3,
        _ => 2e-2,
    }
}

#[test]
fn sgd_update_matches_mxnet_formula() {
    let w = [1.0, -2.0, 0.5, 3.0];
    let g = [0.5, 10.0, -0.25, -4.0];
    let p = ops::SgdParams {
        lr: 0.1,
        wd: 0.01,
        rescale_grad: 0.5,
        clip_gradient: 1.0,
        lazy_update: false,
    };
    let want: Vec<f64> = w
        .iter()
        .zip(&g)
        .map(|(w, g)| (1.0 - 0.1 * 0.01) * w - 0.1 * (g * 0.5f64).clamp(-1.0, 1.0))
        .collect();
    for dtype in DType::FLOATS {
        let mut weight = NDArray::from_f64(&w, [4], dtype).unwrap();
        let grad = NDArray::from_f64(&g, [4], dtype).unwrap();
        let fresh = ops::sgd_update(&weight, &grad, p.clone()).unwrap();
        close(&fresh.to_f64_vec(), &want, tol(dtype));
        let before = ptr(&weight);
        ops::sgd_update_inplace(&mut weight, &grad, p.clone()).unwrap();
        assert_eq!(
            ptr(&weight),
            before,
            "{dtype}: weight updated in its own buffer"
        );
        assert_eq!(weight, fresh);
    }
}

#[test]
fn sgd_mom_update_updates_momentum_in_place() {
    let (lr, momentum, wd) = (0.05, 0.9, 0.001);
    for dtype in DType::FLOATS {
        let mut weight = NDArray::from_f64(&[1.0, -1.0, 2.0], [3], dtype).unwrap();
        let mut mom = NDArray::zeros([3], dtype);
        let mom_ptr = ptr(&mom);
        let (mut w_ref, mut m_ref) = (weight.to_f64_vec(), vec![0.0; 3]);
        for step in 0..5 {
            let g: Vec<f64> = (0..3)
                .map(|i| (i as f64 - 1.0) * 0.3 + step as f64 * 0.1)
                .collect();
            let grad = NDArray::from_f64(&g, [3], dtype).unwrap();
            let p = ops::SgdMomParams {
                lr,
                momentum,
                wd,
                ..Default::default()
            };
            let p = ops::SgdMomParams {
                rescale_grad: 1.0,
                clip_gradient: -1.0,
                ..p
            };
            ops::sgd_mom_update_inplace(&mut weight, &grad, &mut mom, p).unwrap();
            let g_used = grad.to_f64_vec();
            for i in 0..3 {
                m_ref[i] = momentum * m_ref[i] - lr * wd * w_ref[i] - lr * g_used[i];
                w_ref[i] += m_ref[i];
            }
        }
        assert_eq!(
            ptr(&mom),
            mom_ptr,
            "{dtype}: momentum updated in its own buffer"
        );
        close(&mom.to_f64_vec(), &m_ref, 10.0 * tol(dtype));
        close(&weight.to_f64_vec(), &w_ref, 10.0 * tol(dtype));
    }
}

#[test]
fn adam_update_by_name_with_mxnet_strings() {
    let w = [0.5, -0.5, 1.5, 0.0];
    let g = [0.1, -0.2, 0.3, 5.0];
    let mut weight = NDArray::from_f64(&w, [2, 2], DType::F32).unwrap();
    let grad = NDArray::from_f64(&g, [2, 2], DType::F32).unwrap();
    let mut mean = NDArray::full([2, 2], 0.01, DType::F32);
    let mut var = NDArray::full([2, 2], 0.02, DType::F32);
    let attrs = Attrs::from([
        ("lr", "0.01"),
        ("beta1", "0.8"),
        ("wd", "0.1"),
        ("clip_gradient", "1.0"),
    ]);
    let out = eager::invoke_mut(
        "adam_update",
        &[&weight, &grad],
        &mut [&mut mean, &mut var],
        &attrs,
    )
    .unwrap();
    let mut want_w = Vec::new();
    let (mut want_m, mut want_v) = (Vec::new(), Vec::new());
    for i in 0..4 {
        let gi = (g[i] + 0.1 * w[i]).clamp(-1.0, 1.0);
        let m = 0.8 * 0.01 + 0.2 * gi;
        let v = 0.999 * 0.02 + 0.001 * gi * gi;
        want_m.push(m);
        want_v.push(v);
        want_w.push(w[i] - 0.01 * m / (v.sqrt() + 1e-8));
    }
    close(&out.to_f64_vec(), &want_w, 1e-5);
    close(&mean.to_f64_vec(), &want_m, 1e-5);
    close(&var.to_f64_vec(), &want_v, 1e-5);
    // The typed function is the same op.
    let mut mean2 = NDArray::full([2, 2], 0.01, DType::F32);
    let mut var2 = NDArray::full([2, 2], 0.02, DType::F32);
    let p = ops::AdamParams {
        lr: 0.01,
        beta1: 0.8,
        beta2: 0.999,
        epsilon: 1e-8,
        wd: 0.1,
        rescale_grad: 1.0,
        clip_gradient: 1.0,
        lazy_update: false,
    };
    ops::adam_update_inplace(&mut weight, &grad, &mut mean2, &mut var2, p).unwrap();
    assert_eq!(weight, out);
    assert_eq!(mean2, mean);
}

#[test]
fn shared_state_is_copied_not_written_through() {
    let weight = NDArray::ones([2], DType::F32);
    let grad = NDArray::ones([2], DType::F32);
    let mut mom = NDArray::zeros([2], DType::F32);
    let snapshot = mom.clone();
    let p = ops::SgdMomParams {
        lr: 0.5,
        rescale_grad: 1.0,
        clip_gradient: -1.0,
        ..Default::default()
    };
    ops::sgd_mom_update(&weight, &grad, &mut mom, p).unwrap();
    assert_eq!(mom.to_f64_vec(), vec![-0.5, -0.5]);
    assert_eq!(snapshot.to_f64_vec(), vec![0.0, 0.0]);
}

#[test]
fn optimizer_errors_name_the_argument() {
    let weight = NDArray::ones([2], DType::F32);
    let grad = NDArray::ones([2], DType::F32);
    let mut mom = NDArray::zeros([3], DType::F32);
    let e = eager::invoke_mut(
        "sgd_mom_update",
        &[&weight, &grad],
        &mut [&mut mom],
        &Attrs::from([("lr", "0.1")]),
    )
    .unwrap_err();
    assert!(
        matches!(&e, Error::ShapeMismatch { arg, .. } if arg == "mom"),
        "{e}"
    );
    let mut mom = NDArray::zeros([2], DType::F32);
    let e = eager::invoke_mut(
        "sgd_mom_update",
        &[&weight, &grad],
        &mut [&mut mom],
        &Attrs::new(),
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "op `sgd_mom_update`: argument `lr`: missing required argument"
    );
    let e = eager::invoke(
        "sgd_mom_update",
        &[&weight, &grad, &mom],
        &Attrs::from([("lr", "0.1")]),
    )
    .unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { arg, .. } if arg == "mom"),
        "{e}"
    );
    let e = eager::invoke_mut(
        "sgd_mom_update",
        &[&weight],
        &mut [&mut mom],
        &Attrs::from([("lr", "0.1")]),
    )
    .unwrap_err();
    assert!(matches!(e, Error::Arity { .. }), "{e}");
    assert_eq!(mom.to_f64_vec(), vec![0.0, 0.0], "nothing written on error");
    let reg = simpleop::Registry::global().unwrap();
    assert_eq!(reg.get("adam_update").unwrap().def.mutate_inputs, &[2, 3]);
    assert_eq!(
        reg.get("sgd_update").unwrap().def.mutate_inputs,
        &[] as &[usize]
    );
}

#[test]
fn large_updates_split_across_threads_match_a_serial_reference() {
    simpleop::Tuning::update(|t| t.parallel_work = 0).unwrap();
    let n = simpleop_tests::least_grain() * 2 + 5;
    let w = NDArray::random_uniform([n], -1.0, 1.0, DType::F32, 1).unwrap();
    let g = NDArray::random_uniform([n], -1.0, 1.0, DType::F32, 2).unwrap();
    let mut mom = NDArray::random_uniform([n], -0.1, 0.1, DType::F32, 3).unwrap();
    let m0 = mom.to_vec::<f32>().unwrap();
    let p = ops::SgdMomParams {
        lr: 0.1,
        momentum: 0.9,
        rescale_grad: 1.0,
        clip_gradient: -1.0,
        ..Default::default()
    };
    let out = ops::sgd_mom_update(&w, &g, &mut mom, p).unwrap();
    let (wv, gv) = (w.to_vec::<f32>().unwrap(), g.to_vec::<f32>().unwrap());
    let m_ref: Vec<f32> = (0..n)
        .map(|i| 0.9f32 * m0[i] - 0.0f32 * wv[i] - 0.1f32 * gv[i])
        .collect();
    let w_ref: Vec<f32> = (0..n).map(|i| wv[i] + m_ref[i]).collect();
    assert_eq!(mom.to_vec::<f32>().unwrap(), m_ref);
    assert_eq!(out.to_vec::<f32>().unwrap(), w_ref);
}

/// Clipping keeps a NaN gradient NaN (MXNet's `clip` tests the bounds and
/// passes anything else), so a diverged step shows in the weight instead
/// of becoming a step of `-clip_gradient`. Values from MXNet 1.9.1
/// (`mx.nd.sgd_update`, `sgd_mom_update`, `adam_update` with
/// `clip_gradient=1`).
#[test]
fn clipping_passes_nan_gradients_through() {
    let nan = f64::NAN;
    let w = [1.0, -2.0, 3.0, 0.5];
    let g = [nan, f64::INFINITY, f64::NEG_INFINITY, 100.0];
    let with_nan = |got: Vec<f64>, want: &[f64]| {
        assert!(got[0].is_nan(), "NaN gradient gave {}", got[0]);
        close(&got[1..], &want[1..], 1e-5);
    };
    let weight = NDArray::from_f64(&w, [4], DType::F32).unwrap();
    let grad = NDArray::from_f64(&g, [4], DType::F32).unwrap();
    let clip = Attrs::from([("lr", "0.1"), ("clip_gradient", "1.0")]);
    let y = eager::invoke("sgd_update", &[&weight, &grad], &clip).unwrap();
    with_nan(y.to_f64_vec(), &[nan, -2.1, 3.1, 0.4]);
    let mut mom = NDArray::zeros([4], DType::F32);
    let mut attrs = clip.clone();
    attrs.insert("momentum", "0.9");
    let y = eager::invoke_mut("sgd_mom_update", &[&weight, &grad], &mut [&mut mom], &attrs);
    with_nan(y.unwrap().to_f64_vec(), &[nan, -2.1, 3.1, 0.4]);
    with_nan(mom.to_f64_vec(), &[nan, -0.1, 0.1, -0.1]);
    let mut mean = NDArray::zeros([4], DType::F32);
    let mut var = NDArray::zeros([4], DType::F32);
    let states: &mut [&mut NDArray] = &mut [&mut mean, &mut var];
    let y = eager::invoke_mut("adam_update", &[&weight, &grad], states, &clip);
    with_nan(
        y.unwrap().to_f64_vec(),
        &[nan, -2.316_229_8, 3.316_229_8, 0.183_770_24],
    );
}
