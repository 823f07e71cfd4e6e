//! The third-party `running_centre` op (two outputs, an aux state):
//! eagerly in both modes, and in a graph trained for a few steps, where
//! the executor's gradient matches finite differences and its aux state
//! matches the eager one.

use std::collections::HashMap;

use simpleop::symbol::{GradReq, Symbol};
use simpleop::{DType, NDArray, eager};
use simpleop_examples::{RunningCentreParams, running_centre, running_centre_symbol};

fn data() -> NDArray {
    NDArray::from_vec(vec![1.0f32, 2.0, 3.0, 6.0, 5.0, 10.0], [3, 2]).unwrap()
}

#[test]
fn eager_training_centres_with_the_batch_and_moves_the_running_mean() {
    let x = data();
    let mut running = NDArray::from_vec(vec![1.0f32, 1.0], [2]).unwrap();
    let p = RunningCentreParams { momentum: 0.5 };
    let outs = eager::train_mode(|| running_centre(&x, &mut running, p.clone())).unwrap();
    assert_eq!(outs.len(), 2);
    // Batch means (3, 6).
    assert_eq!(outs[1].to_vec::<f32>().unwrap(), [3.0, 6.0]);
    assert_eq!(
        outs[0].to_vec::<f32>().unwrap(),
        [-2.0, -4.0, 0.0, 0.0, 2.0, 4.0]
    );
    assert_eq!(running.to_vec::<f32>().unwrap(), [2.0, 3.5]);
    // Inference uses the running mean and leaves it alone.
    let outs = running_centre(&x, &mut running, p).unwrap();
    assert_eq!(
        outs[0].to_vec::<f32>().unwrap(),
        [-1.0, -1.5, 1.0, 2.5, 3.0, 6.5]
    );
    assert_eq!(running.to_vec::<f32>().unwrap(), [2.0, 3.5]);
}

/// `sum(w · running_centre(x))` bound with `x` differentiated.
fn bound(x: &NDArray, w: &NDArray) -> simpleop::symbol::Executor {
    simpleop_ops::link(); // `*` is the standard ops' `elemwise_mul`
    let (xs, ws, rs) = (Symbol::var("x"), Symbol::var("w"), Symbol::var("r"));
    let c = running_centre_symbol(&xs, &rs, RunningCentreParams::default()).unwrap();
    assert_eq!(c.list_arguments(), ["x"]);
    assert_eq!(c.list_auxiliary_states(), ["r"]);
    let y = (&c * &ws).unwrap();
    let args = HashMap::from([
        ("x".to_string(), x.clone()),
        ("w".to_string(), w.clone()),
        ("r".to_string(), NDArray::zeros([2], DType::F32)),
    ]);
    let grads = HashMap::from([("x".to_string(), NDArray::zeros([3, 2], DType::F32))]);
    let reqs = HashMap::from([("x".to_string(), GradReq::Write)]);
    y.bind(args, grads, reqs).unwrap()
}

#[test]
fn a_graph_trains_through_it_with_the_exact_gradient_and_updates_the_aux_state() {
    let x = data();
    let w = NDArray::from_vec(vec![0.5f32, -1.0, 2.0, 1.5, -0.5, 3.0], [3, 2]).unwrap();
    let mut exe = bound(&x, &w);
    exe.forward(true).unwrap();
    exe.backward(&[]).unwrap();
    let grad = exe.grad("x").unwrap().to_vec::<f32>().unwrap();
    // Finite differences of sum(w · (x − mean(x))) in f64.
    let (xv, wv) = (x.to_f64_vec(), w.to_f64_vec());
    let loss = |xv: &[f64]| -> f64 {
        (0..6)
            .map(|i| {
                let col = i % 2;
                let mean = (xv[col] + xv[col + 2] + xv[col + 4]) / 3.0;
                wv[i] * (xv[i] - mean)
            })
            .sum()
    };
    for i in 0..6 {
        let (mut up, mut down) = (xv.clone(), xv.clone());
        up[i] += 1e-3;
        down[i] -= 1e-3;
        let fd = (loss(&up) - loss(&down)) / 2e-3;
        assert!(
            (grad[i] as f64 - fd).abs() < 1e-3,
            "x[{i}]: {} vs {fd}",
            grad[i]
        );
    }
    // One training step moved r from 0 towards the batch mean (3, 6).
    let r = exe.aux("r").unwrap().to_vec::<f32>().unwrap();
    assert!(
        (r[0] - 0.3).abs() < 1e-6 && (r[1] - 0.6).abs() < 1e-6,
        "{r:?}"
    );
    // Inference reads r and does not move it.
    exe.forward(false).unwrap();
    assert_eq!(exe.aux("r").unwrap().to_vec::<f32>().unwrap(), r);
    let y = exe.outputs()[0].to_vec::<f32>().unwrap();
    assert!((y[0] - 0.5 * (1.0 - 0.3)).abs() < 1e-6, "{y:?}");
}
