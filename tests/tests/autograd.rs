//! Eager autograd: record, backward and grad on NDArray, against known
//! derivatives and against the executor's gradients bit for bit.

use std::cell::Cell;

use simpleop::symbol::{BindConfig, GradReq};
use simpleop::{Attrs, DType, Error, NDArray, autograd, eager, simple_op};
use simpleop_tests::assert_close;
use simpleop_tests::random_graphs::{bits, build, fixed_runner, graph_ops, recipe, run, run_tape};

/// x³, a T2 gradient (reads its input), defined outside simpleop-ops.
#[simple_op(name = "_ag_cube")]
mod cube {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T) -> T {
        x * x * x
    }
    pub fn backward<T: Float>(dy: OutGrad<T>, x: In0<T>) -> T {
        dy * T::from_f64(3.0) * *x * *x
    }
}

/// 2x with no gradient registered.
#[simple_op(name = "_ag_nograd")]
mod nograd {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T) -> T {
        x + x
    }
}

fn arr(v: &[f32], shape: &[usize]) -> NDArray {
    NDArray::from_slice(v, shape).unwrap()
}

fn var(v: &[f32], shape: &[usize]) -> NDArray {
    let mut a = arr(v, shape);
    a.attach_grad().unwrap();
    a
}

fn call(op: &str, inputs: &[&NDArray]) -> NDArray {
    eager::invoke(op, inputs, &Attrs::new()).unwrap()
}

fn grad_of(a: &NDArray) -> Vec<f32> {
    a.grad().expect("a variable").to_vec::<f32>().unwrap()
}

#[test]
fn a_third_party_op_is_differentiable_eagerly() {
    simpleop_ops::link();
    let x = var(&[1.0, -2.0, 0.5], &[3]);
    let y = autograd::record(|| call("_ag_cube", &[&x]));
    assert!(y.requires_grad());
    y.backward().unwrap();
    assert_eq!(grad_of(&x), [3.0, 12.0, 0.75]);
}

#[test]
fn two_heads_take_their_own_gradients() {
    simpleop_ops::link();
    let x = var(&[1.0, 2.0], &[2]);
    let (a, b) = autograd::record(|| (call("square", &[&x]), call("exp", &[&x])));
    let (ga, gb) = (arr(&[1.0, 10.0], &[2]), arr(&[2.0, 0.0], &[2]));
    autograd::backward(&[&a, &b], &[&ga, &gb]).unwrap();
    let want = [2.0 * 1.0 + 2.0 * 1f32.exp(), 10.0 * 4.0];
    assert_eq!(grad_of(&x), want);
}

#[test]
fn an_array_used_several_times_accumulates_every_use() {
    simpleop_ops::link();
    let x = var(&[3.0, -1.0], &[2]);
    // y = x·x + x + exp(x): the same array in one call twice, then twice more.
    let y = autograd::record(|| {
        let xx = call("elemwise_mul", &[&x, &x]);
        let s = call("elemwise_add", &[&xx, &x]);
        call("elemwise_add", &[&s, &call("exp", &[&x])])
    });
    y.backward().unwrap();
    let want: Vec<f64> = [3.0f64, -1.0]
        .iter()
        .map(|v| 2.0 * v + 1.0 + v.exp())
        .collect();
    let got = x.grad().unwrap().to_f64_vec();
    assert_close(&got, &want, 1e-6, "2x + 1 + exp(x)");
}

#[test]
fn retain_graph_allows_a_second_backward_and_its_absence_refuses_one() {
    simpleop_ops::link();
    let mut x = arr(&[2.0], &[1]);
    x.attach_grad_with(GradReq::Add).unwrap();
    let y = autograd::record(|| call("_ag_cube", &[&x]));
    autograd::backward_with(&[&y], &[], true).unwrap();
    autograd::backward_with(&[&y], &[], false).unwrap();
    assert_eq!(grad_of(&x), [24.0]);
    let err = y.backward().unwrap_err();
    assert!(err.to_string().contains("retain_graph"), "{err}");
    assert!(err.to_string().contains("_ag_cube"), "{err}");
    assert_eq!(grad_of(&x), [24.0], "a refused backward writes nothing");
}

#[test]
fn pause_stops_recording_and_training() {
    simpleop_ops::link();
    let x = var(&[1.0], &[1]);
    autograd::record(|| {
        assert!(autograd::is_recording() && autograd::is_training());
        let p = autograd::pause(|| {
            assert!(!autograd::is_recording() && !eager::is_training());
            call("exp", &[&x])
        });
        assert!(!p.requires_grad());
        let err = p.backward().unwrap_err();
        assert!(err.to_string().contains("not recorded"), "{err}");
    });
    assert!(!autograd::is_recording() && !autograd::is_training());
}

#[test]
fn write_add_and_null_requests_behave_as_in_mxnet() {
    simpleop_ops::link();
    let mut w = arr(&[1.0, 2.0], &[2]);
    let mut a = arr(&[1.0, 2.0], &[2]);
    let mut n = arr(&[5.0, 5.0], &[2]);
    w.attach_grad_with(GradReq::Write).unwrap();
    a.attach_grad_with(GradReq::Add).unwrap();
    n.attach_grad_with(GradReq::Null).unwrap();
    for _ in 0..2 {
        let y = autograd::record(|| {
            let wa = call("elemwise_mul", &[&w, &a]);
            call("elemwise_mul", &[&wa, &n])
        });
        y.backward().unwrap();
    }
    assert_eq!(grad_of(&w), [5.0, 10.0], "write: the last backward's");
    assert_eq!(grad_of(&a), [10.0, 20.0], "add: both backward calls'");
    assert!(n.grad().is_none() && !n.requires_grad());
    // Only null inputs: nothing is recorded.
    let c = autograd::record(|| call("exp", &[&n]));
    assert!(!c.requires_grad());
}

#[test]
fn an_in_place_change_to_a_saved_value_is_refused_by_its_version() {
    simpleop_ops::link();
    // T1: exp saves its output; an in-place write to it afterwards.
    let x = var(&[0.5], &[1]);
    let mut y = autograd::record(|| call("exp", &[&x]));
    let z = autograd::record(|| call("sum", &[&y]));
    eager::invoke_inplace_by_name("relu", &mut y, &[], &Attrs::new()).unwrap();
    match z.backward().unwrap_err() {
        Error::ModifiedInPlace {
            op,
            arg,
            saved,
            now,
        } => {
            assert_eq!((op.as_str(), arg.as_str()), ("exp", "output"));
            assert!(now > saved);
        }
        e => panic!("{e}"),
    }
    // T2: elemwise_mul saves both inputs; a plain write to one of them.
    let mut w = var(&[2.0], &[1]);
    let p = autograd::record(|| call("elemwise_mul", &[&x, &w]));
    w.as_slice_mut::<f32>().unwrap()[0] = 7.0;
    let err = p.backward().unwrap_err().to_string();
    assert!(
        err.contains("`elemwise_mul`") && err.contains("`b`"),
        "{err}"
    );
    // Under recording, an in-place op on a variable is refused at once.
    let mut v = var(&[1.0], &[1]);
    let err = autograd::record(|| eager::invoke_inplace_by_name("exp", &mut v, &[], &Attrs::new()));
    assert!(err.unwrap_err().to_string().contains("variable"));
}

#[test]
fn optimizer_updates_outside_recording_keep_the_parameter_a_variable() {
    simpleop_ops::link();
    let mut w = var(&[1.0, -1.0], &[2]);
    for step in 0..3 {
        let y = autograd::record(|| call("sum", &[&call("square", &[&w])]));
        y.backward().unwrap();
        let g = w.grad().unwrap();
        let attrs = Attrs::from([("lr", "0.25")]);
        eager::invoke_inplace_by_name("sgd_update", &mut w, &[&g], &attrs).unwrap();
        assert!(w.requires_grad(), "step {step}");
    }
    // w ← w − 0.25·2w = w/2 each step
    assert_eq!(w.to_vec::<f32>().unwrap(), [0.125, -0.125]);
}

#[test]
fn a_multi_output_op_with_one_output_used_gives_zeros_to_the_rest() {
    simpleop_ops::link();
    let x = var(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let attrs = Attrs::from([("num_outputs", "2"), ("axis", "1")]);
    let right = autograd::record(|| {
        let parts = eager::invoke_outputs_by_name("split", &[&x], &mut [], &attrs).unwrap();
        call("square", &[&parts[1]])
    });
    right.backward().unwrap();
    assert_eq!(grad_of(&x), [0.0, 4.0, 0.0, 8.0]);
}

#[test]
fn broadcast_gradients_are_reduced_to_each_input_shape() {
    simpleop_ops::link();
    let x = var(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let b = var(&[1.0, 1.0, 1.0], &[1, 3]);
    let y = autograd::record(|| call("broadcast_mul", &[&x, &b]));
    y.backward().unwrap();
    assert_eq!(grad_of(&b), [5.0, 7.0, 9.0]);
    assert_eq!(grad_of(&x), [1.0; 6]);
}

#[test]
fn an_op_without_a_gradient_is_refused_only_on_a_path_that_needs_it() {
    simpleop_ops::link();
    let x = var(&[3.0], &[1]);
    let c = arr(&[1.0], &[1]);
    let y = autograd::record(|| {
        let k = call("_ag_nograd", &[&c]); // constant: not recorded
        call("elemwise_mul", &[&k, &x])
    });
    y.backward().unwrap();
    assert_eq!(grad_of(&x), [2.0]);
    let z = autograd::record(|| call("_ag_nograd", &[&x]));
    match z.backward().unwrap_err() {
        Error::NoGradient { op } => assert_eq!(op, "_ag_nograd"),
        e => panic!("{e}"),
    }
}

#[test]
fn grad_returns_gradients_without_touching_buffers() {
    simpleop_ops::link();
    let x = var(&[2.0], &[1]);
    let (h, y) = autograd::record(|| {
        let h = call("square", &[&x]);
        (h.clone(), call("exp", &[&h]))
    });
    let g = autograd::grad(&[&y], &[&h, &x], &[], false).unwrap();
    let e4 = 4f64.exp();
    assert_close(&g[0].to_f64_vec(), &[e4], 1e-6, "dy/dh");
    assert_close(&g[1].to_f64_vec(), &[e4 * 4.0], 1e-6, "dy/dx");
    assert_eq!(grad_of(&x), [0.0]);
    let err = autograd::grad(&[&y], &[&arr(&[1.0], &[1])], &[], false).unwrap_err();
    assert!(err.to_string().contains("inputs[0]"), "{err}");
}

/// A chain of unary ops whose gradients could be written over their
/// output gradients (they declare `OutIn`): the gradients are right, and a
/// head gradient the caller passed, a gradient `grad` returned and a
/// gradient handle taken before another backward keep their values.
#[test]
fn backward_through_a_chain_leaves_the_callers_arrays_alone() {
    simpleop_ops::link();
    let x = var(&[0.5, -1.0, 2.0], &[3]);
    let (h, y) = autograd::record(|| {
        let h = call("sigmoid", &[&x]);
        let t = call("tanh", &[&h]);
        (h.clone(), call("relu", &[&t]))
    });
    let head = arr(&[1.0, 2.0, 3.0], &[3]);
    let s: Vec<f64> = [0.5f64, -1.0, 2.0]
        .iter()
        .map(|v| 1.0 / (1.0 + (-v).exp()))
        .collect();
    let dh: Vec<f64> = s
        .iter()
        .zip([1.0, 2.0, 3.0])
        .map(|(s, g)| g * (1.0 - s.tanh().powi(2)))
        .collect();
    let dx: Vec<f64> = dh.iter().zip(&s).map(|(d, s)| d * s * (1.0 - s)).collect();
    let g = autograd::grad(&[&y], &[&h, &x], &[&head], true).unwrap();
    assert_close(&g[0].to_f64_vec(), &dh, 1e-6, "dy/dh");
    assert_close(&g[1].to_f64_vec(), &dx, 1e-6, "dy/dx");
    assert_eq!(head.to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0]);
    autograd::backward(&[&y], &[&head]).unwrap();
    let x_grad = x.grad().unwrap();
    assert_close(&x_grad.to_f64_vec(), &dx, 1e-6, "x.grad");
    assert_eq!(head.to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0]);
    assert_close(&g[0].to_f64_vec(), &dh, 1e-6, "dy/dh after backward");
    // a second pass writes a new gradient; the handle taken keeps its value
    let y2 = autograd::record(|| call("sigmoid", &[&x]));
    y2.backward().unwrap();
    assert_close(&x_grad.to_f64_vec(), &dx, 1e-6, "earlier x.grad");
}

#[test]
fn record_sets_training_mode_for_dropout() {
    simpleop_ops::link();
    let x = var(&[1.0; 64], &[64]);
    let attrs = Attrs::from([("p", "0.5")]);
    let dropped = autograd::record(|| eager::invoke("Dropout", &[&x], &attrs).unwrap());
    let kept = autograd::record_with(false, || eager::invoke("Dropout", &[&x], &attrs).unwrap());
    assert!(dropped.to_vec::<f32>().unwrap().contains(&0.0));
    assert_eq!(kept.to_vec::<f32>().unwrap(), [1.0; 64]);
    dropped.backward().unwrap();
    // The gradient follows the mask: 2 where kept, 0 where dropped.
    let out = dropped.to_vec::<f32>().unwrap();
    for (g, y) in grad_of(&x).iter().zip(out) {
        assert_eq!(*g, y);
    }
}

#[test]
fn two_threads_record_at_once_without_seeing_each_other() {
    simpleop_ops::link();
    let results: Vec<Vec<f32>> = std::thread::scope(|s| {
        let handles: Vec<_> = (1..=2)
            .map(|k| {
                s.spawn(move || {
                    let x = var(&[k as f32; 4], &[4]);
                    let mut y = x.clone();
                    autograd::record(|| {
                        for _ in 0..200 {
                            y = call("_ag_cube", &[&call("square", &[&y])]);
                            y = call("negative", &[&y]);
                        }
                    });
                    let c = autograd::record(|| call("sum", &[&call("_ag_cube", &[&x])]));
                    assert!(!autograd::is_recording());
                    c.backward().unwrap();
                    grad_of(&x)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(results[0], [3.0; 4]);
    assert_eq!(results[1], [12.0; 4]);
}

#[test]
fn the_tape_saves_only_what_each_gradient_reads() {
    simpleop_ops::link();
    let n = 1000;
    let x = var(&vec![0.5; n], &[n]);
    // relu (T1: output), _plus_scalar... negative (T0: nothing), cube (T2: input)
    let y = autograd::record(|| {
        let a = call("negative", &[&x]);
        let b = call("_ag_cube", &[&a]);
        call("relu", &[&b])
    });
    let s = autograd::tape_stats(&[&y]);
    assert_eq!(s.calls, 3);
    assert_eq!(s.saved_bytes, 2 * n * 4, "cube's input and relu's output");
    assert_eq!(s.all_bytes, 4 * n * 4, "x, a, b and y");
    y.backward().unwrap();
    assert_eq!(
        autograd::tape_stats(&[&y]).saved_bytes,
        0,
        "freed by backward"
    );
}

#[test]
fn a_deep_tape_of_saving_calls_drops_without_recursion_and_without_backward() {
    simpleop_ops::link();
    let x = var(&[0.5], &[1]);
    let mut y = x.clone();
    autograd::record(|| {
        for _ in 0..100_000 {
            y = call("elemwise_mul", &[&y, &x]); // saves both inputs
        }
    });
    drop(y); // never backward: every node still holds its saved links
}

#[test]
fn batch_norm_recorded_in_inference_mode_differentiates_with_the_moving_statistics() {
    simpleop_ops::link();
    let x = NDArray::random_uniform([4, 3, 2, 2], -1.0, 1.0, DType::F32, 5).unwrap();
    let grad_x = |global: &str, training: bool| {
        let mut x = x.clone();
        x.attach_grad().unwrap();
        let (gamma, beta) = (arr(&[1.5, 0.5, 2.0], &[3]), arr(&[0.0, 0.1, 0.2], &[3]));
        let (mut mean, mut var) = (arr(&[0.1, -0.2, 0.3], &[3]), arr(&[0.5, 2.0, 1.0], &[3]));
        let attrs = Attrs::from([("use_global_stats", global), ("fix_gamma", "false")]);
        let y = autograd::record_with(training, || {
            let mut aux = [&mut mean, &mut var];
            let outs =
                eager::invoke_outputs_by_name("BatchNorm", &[&x, &gamma, &beta], &mut aux, &attrs);
            outs.unwrap().swap_remove(0)
        });
        y.backward().unwrap();
        x.grad().unwrap().to_vec::<f32>().unwrap()
    };
    // Inference mode normalises with the moving statistics, as
    // use_global_stats does in training: the same gradient.
    assert_eq!(grad_x("false", false), grad_x("true", true));
    assert_ne!(grad_x("false", false), grad_x("false", true));
}

#[test]
fn a_head_replaced_since_it_was_recorded_is_refused() {
    simpleop_ops::link();
    let x = var(&[1.0, 2.0], &[2]);
    let mut y = autograd::record(|| call("exp", &[&x]));
    eager::invoke_inplace_by_name("sum", &mut y, &[], &Attrs::new()).unwrap();
    assert!(!y.requires_grad(), "the sum is no recorded value");
    let mut z = autograd::record(|| call("exp", &[&x]));
    z.as_slice_mut::<f32>().unwrap()[0] = 0.0;
    let err = z.backward().unwrap_err().to_string();
    assert!(
        err.contains("heads[0]") && err.contains("changed in place"),
        "{err}"
    );
}

#[test]
fn an_update_of_its_inputs_is_refused_under_recording() {
    simpleop_ops::link();
    let w = var(&[1.0], &[1]);
    let g = arr(&[0.5], &[1]);
    let mut mom = arr(&[0.0], &[1]);
    let attrs = Attrs::from([("lr", "0.1"), ("momentum", "0.9")]);
    let err = autograd::record(|| {
        eager::invoke_mut("sgd_mom_update", &[&w, &g], &mut [&mut mom], &attrs)
    });
    assert!(err.unwrap_err().to_string().contains("cannot be recorded"));
    eager::invoke_mut("sgd_mom_update", &[&w, &g], &mut [&mut mom], &attrs).unwrap();
    // Outside recording, a shape-changing in-place op on a variable makes
    // it a plain array again.
    let mut v = var(&[1.0, 2.0], &[2]);
    eager::invoke_inplace_by_name("sum", &mut v, &[], &Attrs::new()).unwrap();
    assert!(!v.requires_grad() && v.grad().is_none());
    assert!(w.requires_grad(), "the optimizer step keeps the variable");
}

#[test]
fn a_deep_tape_runs_and_drops_without_recursion() {
    simpleop_ops::link();
    let x = var(&[1.0], &[1]);
    let mut y = x.clone();
    autograd::record(|| {
        for _ in 0..100_000 {
            y = call("negative", &[&y]);
        }
    });
    y.backward().unwrap();
    assert_eq!(grad_of(&x), [1.0]);
    drop(y); // 100,000 nodes, dropped in a loop
}

#[test]
fn bad_heads_and_head_gradients_are_errors() {
    simpleop_ops::link();
    let x = var(&[1.0, 2.0], &[2]);
    let y = autograd::record(|| call("exp", &[&x]));
    let wrong = arr(&[1.0], &[1]);
    let err = autograd::backward(&[&y], &[&wrong]).unwrap_err();
    assert!(err.to_string().contains("head_grads[0]"), "{err}");
    let err = autograd::backward(&[&y], &[&wrong, &wrong]).unwrap_err();
    assert!(err.to_string().contains("one per head"), "{err}");
    let err = arr(&[1.0], &[1]).backward().unwrap_err();
    assert!(err.to_string().contains("heads[0]"), "{err}");
    let mut i = NDArray::zeros([2], DType::I32);
    assert!(i.attach_grad().is_err());
    let mut v = arr(&[1.0], &[1]);
    let err = autograd::mark_variables(&mut [&mut v], vec![wrong.clone(), wrong], &[GradReq::Add]);
    assert!(err.is_err());
    y.backward().unwrap();
}

#[test]
fn half_types_differentiate_in_f32() {
    simpleop_ops::link();
    for dtype in [DType::F16, DType::BF16] {
        let mut x = NDArray::from_f64(&[0.5, 2.0], [2], dtype).unwrap();
        x.attach_grad().unwrap();
        let y = autograd::record(|| call("_ag_cube", &[&x]));
        y.backward().unwrap();
        assert_eq!(x.grad().unwrap().to_f64_vec(), [0.75, 12.0], "{dtype}");
    }
}

/// The eager tape and the executor (fusion off: the same kernels in the
/// same order) give the same outputs and gradients, bit for bit, on
/// random graphs of every float dtype and request.
#[test]
fn tape_and_executor_agree_bit_for_bit_on_random_graphs() {
    simpleop_ops::link();
    let ops = graph_ops();
    let mut runner = fixed_runner();
    let graphs = Cell::new(0);
    runner
        .run(&recipe(), |r| {
            let b = build(&r, &ops, true);
            let config = BindConfig {
                fusion: false,
                ..BindConfig::default()
            };
            let (outs, grads, _) = run(&r, &b, config);
            let (tape_outs, tape_grads) = run_tape(&r, &b);
            for (e, t) in outs.iter().zip(&tape_outs) {
                proptest::prop_assert_eq!(bits(e), bits(t));
            }
            for (e, t) in grads.iter().zip(&tape_grads) {
                proptest::prop_assert_eq!(e.as_ref().map(bits), t.as_ref().map(bits));
            }
            graphs.set(graphs.get() + 1);
            Ok(())
        })
        .unwrap();
    assert!(graphs.get() >= 1000);
}

fn random(shape: &[usize], seed: u64) -> NDArray {
    NDArray::random_uniform(shape, -1.0, 1.0, DType::F32, seed).unwrap()
}

fn param(shape: &[usize], seed: u64) -> NDArray {
    let mut p = random(shape, seed);
    p.attach_grad().unwrap();
    p
}

fn conv(x: &NDArray, w: &NDArray, b: &NDArray, filters: usize, pad: usize) -> NDArray {
    let k = w.shape().dims()[2];
    let attrs = Attrs::from([
        ("kernel", format!("({k}, {k})")),
        ("pad", format!("({pad}, {pad})")),
        ("num_filter", filters.to_string()),
    ]);
    eager::invoke("Convolution", &[x, w, b], &attrs).unwrap()
}

/// The tape's bytes on the digits example's model (3×3 conv × 8, relu,
/// dense 288 → 128, softplus, dense → 10, log_softmax, cross-entropy;
/// batch 50) and on a ResNet basic block (conv 3×3, BatchNorm, relu,
/// conv, BatchNorm, + input, relu; 16 × 64 × 28 × 28), against saving
/// every input and output of every call (docs/autograd.md quotes them).
#[test]
fn tape_memory_on_the_digits_model_and_a_resnet_block() {
    simpleop_ops::link();
    let (x, target) = (random(&[50, 1, 8, 8], 1), random(&[50, 10], 2));
    let (wc, bc) = (param(&[8, 1, 3, 3], 3), param(&[8], 4));
    let (w1, b1) = (param(&[288, 128], 5), param(&[128], 6));
    let (w2, b2) = (param(&[128, 10], 7), param(&[10], 8));
    let loss = autograd::record(|| {
        let maps = call("relu", &[&conv(&x, &wc, &bc, 8, 0)]);
        let shape = Attrs::from([("shape", "(-1, 288)")]);
        let f = eager::invoke("Reshape", &[&maps], &shape).unwrap();
        let fc1 = call("broadcast_add", &[&call("dot", &[&f, &w1]), &b1]);
        let softplus = Attrs::from([("act_type", "softrelu")]);
        let h = eager::invoke("Activation", &[&fc1], &softplus).unwrap();
        let logits = call("broadcast_add", &[&call("dot", &[&h, &w2]), &b2]);
        let lp = call("log_softmax", &[&logits]);
        call(
            "negative",
            &[&call("sum", &[&call("elemwise_mul", &[&target, &lp])])],
        )
    });
    let digits = autograd::tape_stats(&[&loss]);
    eprintln!("digits model: {digits:?}");
    assert_eq!((digits.saved_bytes, digits.all_bytes), (310_496, 425_856));

    let x = random(&[16, 64, 28, 28], 9);
    let (w_a, b_a) = (param(&[64, 64, 3, 3], 10), param(&[64], 11));
    let (w_b, b_b) = (param(&[64, 64, 3, 3], 12), param(&[64], 13));
    let (gamma, beta) = (param(&[64], 14), param(&[64], 15));
    let bn = |y: &NDArray| {
        let (mut mean, mut var) = (
            NDArray::zeros([64], DType::F32),
            NDArray::ones([64], DType::F32),
        );
        let mut aux = [&mut mean, &mut var];
        let outs = eager::invoke_outputs_by_name(
            "BatchNorm",
            &[y, &gamma, &beta],
            &mut aux,
            &Attrs::new(),
        );
        outs.unwrap().swap_remove(0)
    };
    let out = autograd::record(|| {
        let a = call("relu", &[&bn(&conv(&x, &w_a, &b_a, 64, 1))]);
        let b = bn(&conv(&a, &w_b, &b_b, 64, 1));
        call("relu", &[&call("elemwise_add", &[&b, &x])])
    });
    let block = autograd::tape_stats(&[&out]);
    eprintln!("ResNet block: {block:?}");
    assert_eq!(
        (block.saved_bytes, block.all_bytes),
        (22_775_808, 25_987_072)
    );
}

/// The ones a backward seeds a small head with are shared per thread; a
/// gradient buffer holding them and written in place copies first, so the
/// next backward still seeds ones.
#[test]
fn seeded_ones_are_never_changed_through_a_gradient_buffer() {
    simpleop_ops::link();
    let mut x = NDArray::from_vec(vec![0.5f32, 2.0], [2]).unwrap();
    x.attach_grad().unwrap();
    for round in 0..3 {
        x.backward().unwrap(); // the variable is its own head: its gradient is the seed
        assert_eq!(
            x.grad().unwrap().to_vec::<f32>().unwrap(),
            [1.0, 1.0],
            "round {round}"
        );
        let mut g = x.grad().unwrap();
        g.as_slice_mut::<f32>().unwrap()[0] = 42.0;
        let y = autograd::record(|| eager::invoke("relu", &[&x], &Attrs::new())).unwrap();
        y.backward().unwrap();
        assert_eq!(
            x.grad().unwrap().to_vec::<f32>().unwrap(),
            [1.0, 1.0],
            "round {round}"
        );
    }
}

/// A `write` variable's gradient is written into its own buffer (as
/// MXNet does), not a fresh array each backward; a handle read before
/// keeps the old values (the write copies shared storage first).
#[test]
fn a_write_variable_reuses_its_gradient_buffer() {
    simpleop_ops::link();
    let mut x = NDArray::from_vec(vec![0.5f32, -2.0], [2]).unwrap();
    x.attach_grad().unwrap();
    let run = |x: &NDArray, op: &str| {
        let y = autograd::record(|| eager::invoke(op, &[x], &Attrs::new())).unwrap();
        y.backward().unwrap();
    };
    run(&x, "relu");
    let at = x.grad().unwrap().blob().as_ptr();
    run(&x, "negative");
    assert_eq!(x.grad().unwrap().blob().as_ptr(), at, "same buffer");
    assert_eq!(x.grad().unwrap().to_vec::<f32>().unwrap(), [-1.0, -1.0]);
    let before = x.grad().unwrap();
    run(&x, "relu");
    assert_eq!(
        before.to_vec::<f32>().unwrap(),
        [-1.0, -1.0],
        "an old handle keeps its values"
    );
    assert_eq!(x.grad().unwrap().to_vec::<f32>().unwrap(), [1.0, 0.0]);
}

/// How a case's argument enters: a variable asking for `write` or `add`,
/// or a constant.
#[derive(Clone, Copy)]
enum Arg {
    Write,
    Add,
    Const,
}

/// Runs `op` recorded on arguments made per `args`, and backward with a
/// head gradient, twice (so `add` accumulates and `write` reuses its
/// buffer); alone, a backward from that one call takes the short path
/// (`autograd/one_call.rs`), and with a second, unrelated head the general
/// pass. Returns every variable's gradient bits.
fn one_call_grads(
    op: &str,
    attrs: &Attrs,
    args: &[(Arg, &[usize])],
    dtype: DType,
    output: usize,
    general: bool,
) -> Vec<Vec<u64>> {
    let inputs: Vec<NDArray> = args
        .iter()
        .enumerate()
        .map(|(i, (arg, shape))| {
            let mut a = random(shape, 7 + i as u64).astype(dtype);
            match arg {
                Arg::Write => a.attach_grad_with(GradReq::Write).unwrap(),
                Arg::Add => a.attach_grad_with(GradReq::Add).unwrap(),
                Arg::Const => {}
            }
            a
        })
        .collect();
    let other = var(&[0.5, -1.0], &[2]);
    for round in 0..2 {
        let refs: Vec<&NDArray> = inputs.iter().collect();
        let (y, z) = autograd::record(|| {
            let mut ys = eager::invoke_outputs_by_name(op, &refs, &mut [], attrs).unwrap();
            (ys.swap_remove(output), call("relu", &[&other]))
        });
        let g = random(y.shape().dims(), 40 + round).astype(dtype);
        if general {
            let ones = NDArray::ones([2], DType::F32);
            autograd::backward(&[&y, &z], &[&g, &ones]).unwrap();
        } else {
            autograd::backward(&[&y], &[&g]).unwrap();
        }
    }
    inputs
        .iter()
        .filter_map(|a| a.grad())
        .map(|g| bits(&g))
        .collect()
}

/// An op, its attributes, its arguments and the output used as the head.
type OneCallCase = (&'static str, Attrs, Vec<(Arg, &'static [usize])>, usize);

#[test]
fn a_one_call_backward_equals_the_general_pass_bit_for_bit() {
    use Arg::*;
    simpleop_ops::link();
    let none = Attrs::new;
    let cases: Vec<OneCallCase> = vec![
        ("relu", none(), vec![(Write, &[5])], 0),
        ("sigmoid", none(), vec![(Add, &[2, 3])], 0),
        ("_ag_cube", none(), vec![(Write, &[4])], 0),
        (
            "elemwise_mul",
            none(),
            vec![(Write, &[3]), (Const, &[3])],
            0,
        ),
        ("elemwise_mul", none(), vec![(Add, &[3]), (Write, &[3])], 0),
        (
            "broadcast_mul",
            none(),
            vec![(Write, &[2, 3]), (Add, &[1, 3])],
            0,
        ),
        ("dot", none(), vec![(Const, &[2, 3]), (Write, &[3, 4])], 0),
        (
            "FullyConnected",
            Attrs::from([("num_hidden", "4")]),
            vec![(Const, &[2, 3]), (Write, &[4, 3]), (Add, &[4])],
            0,
        ),
        ("sum", Attrs::from([("axis", "1")]), vec![(Add, &[2, 3])], 0),
        (
            "split",
            Attrs::from([("num_outputs", "2"), ("axis", "1")]),
            vec![(Write, &[2, 4])],
            1,
        ),
    ];
    for dtype in [DType::F32, DType::F64] {
        for (op, attrs, args, output) in &cases {
            let short = one_call_grads(op, attrs, args, dtype, *output, false);
            let long = one_call_grads(op, attrs, args, dtype, *output, true);
            assert!(!short.is_empty(), "{op}: no gradients");
            assert_eq!(short, long, "{op} {dtype}: the short path differs");
        }
    }
}
