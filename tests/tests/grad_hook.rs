//! The gradient-ready hook (`Executor::backward_with_hook`,
//! `autograd::backward_with_hook`): called exactly once per gradient, with
//! the gradient's final value (a copy taken in the hook equals the buffer
//! after backward, bit for bit), early for the last layers, and an error
//! from it stops backward.

use std::collections::HashMap;

use simpleop::symbol::{BindConfig, Executor, GradReady, GradReq, Symbol};
use simpleop::{DType, Error, NDArray, Result, Shape, autograd};
use simpleop_ops::{
    DotParams, ReduceAxesParams, SoftmaxParams, block_grad, broadcast_add, dot, elemwise_add,
    elemwise_mul, log_softmax, negative, sum, tanh,
};

/// `−Σ t ⊙ log_softmax(tanh(x·w1 + b1)·w2 + b2)`, on symbols or arrays.
macro_rules! mlp {
    ($x:expr, $t:expr, $w1:expr, $b1:expr, $w2:expr, $b2:expr) => {{
        let h = tanh(&broadcast_add(&dot($x, $w1, DotParams::default())?, $b1)?)?;
        let logits = broadcast_add(&dot(&h, $w2, DotParams::default())?, $b2)?;
        let log_p = log_softmax(&logits, SoftmaxParams::default())?;
        negative(&sum(
            &elemwise_mul($t, &log_p)?,
            ReduceAxesParams::default(),
        )?)
    }};
}

/// `Σ tanh(x ⊙ w + b) ⊙ w`: `w` is used twice (one elementwise chain,
/// fused when fusion is on).
macro_rules! twice {
    ($x:expr, $w:expr, $b:expr) => {{
        let inner = tanh(&elemwise_add(&elemwise_mul($x, $w)?, $b)?)?;
        sum(&elemwise_mul(&inner, $w)?, ReduceAxesParams::default())
    }};
}

/// `Σ tanh(x ⊙ w) ⊙ BlockGrad(v)`: `v`'s gradient path is cut.
macro_rules! blocked {
    ($x:expr, $w:expr, $v:expr) => {{
        let y = elemwise_mul(&tanh(&elemwise_mul($x, $w)?)?, &block_grad($v)?)?;
        sum(&y, ReduceAxesParams::default())
    }};
}

/// One case: a loss over named inputs with their shapes and requests.
struct Case {
    loss: Symbol,
    inputs: Vec<(&'static str, Vec<usize>, GradReq)>,
}

fn v(n: &str) -> Symbol {
    Symbol::var(n)
}

fn cases() -> Result<Vec<(&'static str, Case)>> {
    use GradReq::{Add, Null, Write};
    let mlp = Case {
        loss: mlp!(&v("x"), &v("t"), &v("w1"), &v("b1"), &v("w2"), &v("b2"))?,
        inputs: vec![
            ("x", vec![5, 4], Null),
            ("t", vec![5, 3], Null),
            ("w1", vec![4, 6], Write),
            ("b1", vec![6], Write),
            ("w2", vec![6, 3], Write),
            ("b2", vec![3], Add),
        ],
    };
    // One symbol per variable: `v("w")` twice would be two variables.
    let (x, w, b) = (v("x"), v("w"), v("b"));
    let twice = Case {
        loss: twice!(&x, &w, &b)?,
        inputs: vec![
            ("x", vec![4, 3], Null),
            ("w", vec![4, 3], Write),
            ("b", vec![4, 3], Add),
        ],
    };
    let blocked = Case {
        loss: blocked!(&x, &w, &v("v"))?,
        inputs: vec![
            ("x", vec![4, 3], Write),
            ("w", vec![4, 3], Write),
            ("v", vec![4, 3], Write),
        ],
    };
    Ok(vec![("mlp", mlp), ("twice", twice), ("blocked", blocked)])
}

/// Random values of `dims`, seeded.
fn random(dims: &[usize], seed: u64) -> NDArray {
    NDArray::random_uniform(Shape::new(dims.to_vec()), -1.0, 1.0, DType::F32, seed).unwrap()
}

fn bits(a: &NDArray) -> Vec<u32> {
    a.as_slice::<f32>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

/// `case` bound with fusion on or off; gradient buffers hold random
/// values (what `add` accumulates onto, and what `write` must replace).
fn bind(case: &Case, fusion: bool) -> Executor {
    let (mut args, mut grads, mut reqs) = (HashMap::new(), HashMap::new(), HashMap::new());
    for (i, (name, dims, req)) in case.inputs.iter().enumerate() {
        args.insert(name.to_string(), random(dims, 1 + i as u64));
        reqs.insert(name.to_string(), *req);
        if *req != GradReq::Null {
            grads.insert(name.to_string(), random(dims, 100 + i as u64));
        }
    }
    let config = BindConfig {
        fusion,
        ..BindConfig::default()
    };
    case.loss.bind_with(args, grads, reqs, config).unwrap()
}

/// What the hook saw: per call, the argument and a copy of its gradient.
type Seen = Vec<(usize, String, NDArray)>;

fn record(seen: &mut Seen) -> impl FnMut(GradReady<'_>) -> Result<()> + '_ {
    |g| {
        seen.push((g.index, g.name.to_owned(), g.grad.deep_copy()));
        Ok(())
    }
}

#[test]
fn executor_hook_sees_each_final_gradient_once() {
    simpleop_ops::link();
    for (what, case) in cases().unwrap() {
        for fusion in [false, true] {
            let mut hooked = bind(&case, fusion);
            let mut plain = bind(&case, fusion);
            for step in 0..2 {
                hooked.forward(true).unwrap();
                plain.forward(true).unwrap();
                plain.backward(&[]).unwrap();
                let mut seen = Seen::new();
                hooked
                    .backward_with_hook(&[], &mut record(&mut seen))
                    .unwrap();
                let at = format!("{what}, fusion {fusion}, step {step}");
                let wanted: Vec<&str> = case
                    .inputs
                    .iter()
                    .filter(|(_, _, r)| *r != GradReq::Null)
                    .map(|(n, _, _)| *n)
                    .collect();
                let mut names: Vec<&str> = seen.iter().map(|(_, n, _)| n.as_str()).collect();
                names.sort_unstable();
                let mut sorted = wanted.clone();
                sorted.sort_unstable();
                assert_eq!(names, sorted, "{at}: each gradient once");
                for (k, name, copy) in &seen {
                    assert_eq!(&hooked.arg_names()[*k], name, "{at}");
                    let last = hooked.grad(name).unwrap();
                    assert_eq!(
                        bits(copy),
                        bits(last),
                        "{at}: `{name}` changed after its hook"
                    );
                    let reference = plain.grad(name).unwrap();
                    assert_eq!(bits(last), bits(reference), "{at}: `{name}` differs");
                }
                if what == "mlp" {
                    let first: Vec<&str> = seen[..2].iter().map(|(_, n, _)| n.as_str()).collect();
                    assert!(
                        first.contains(&"w2") && first.contains(&"b2"),
                        "{at}: the last layer's gradients should be given first, got {names:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn executor_hook_error_stops_backward() {
    simpleop_ops::link();
    let cases = cases().unwrap();
    let mut exe = bind(&cases[0].1, true);
    exe.forward(true).unwrap();
    let mut calls = 0;
    let err = exe
        .backward_with_hook(&[], &mut |g| {
            calls += 1;
            Err(Error::invalid("test hook", g.name, "refused"))
        })
        .unwrap_err();
    assert_eq!(calls, 1, "backward went on after the hook's error");
    assert!(err.to_string().contains("test hook"), "{err}");
    assert!(err.to_string().contains("refused"), "{err}");
    // Nothing is left broken: the next step works.
    exe.forward(true).unwrap();
    exe.backward_with_hook(&[], &mut |_| Ok(())).unwrap();
}

#[test]
fn executor_hook_needs_a_training_forward() {
    simpleop_ops::link();
    let cases = cases().unwrap();
    let mut exe = bind(&cases[0].1, true);
    exe.forward(false).unwrap();
    let err = exe.backward_with_hook(&[], &mut |_| Ok(())).unwrap_err();
    assert!(err.to_string().contains("forward"), "{err}");
}

/// The variables of `case` (inputs asking for a gradient), attached with
/// their requests and random gradient buffers, and the constants.
fn eager_inputs(case: &Case) -> Vec<NDArray> {
    let mut arrays = Vec::new();
    for (i, (_, dims, req)) in case.inputs.iter().enumerate() {
        let mut a = random(dims, 1 + i as u64);
        if *req != GradReq::Null {
            let grad = random(dims, 100 + i as u64);
            autograd::mark_variables(&mut [&mut a], vec![grad], &[*req]).unwrap();
        }
        arrays.push(a);
    }
    arrays
}

/// `case`'s loss by eager calls on `a` (in `case.inputs` order).
fn eager_loss(what: &str, a: &[NDArray]) -> Result<NDArray> {
    autograd::record(|| match what {
        "mlp" => mlp!(&a[0], &a[1], &a[2], &a[3], &a[4], &a[5]),
        "twice" => twice!(&a[0], &a[1], &a[2]),
        _ => blocked!(&a[0], &a[1], &a[2]),
    })
}

#[test]
fn tape_hook_sees_each_final_gradient_once() {
    simpleop_ops::link();
    for (what, case) in cases().unwrap() {
        let hooked = eager_inputs(&case);
        let plain = eager_inputs(&case);
        // A variable the loss does not use: given too, untouched.
        let mut unused = random(&[2], 9);
        autograd::mark_variables(
            &mut [&mut unused],
            vec![random(&[2], 10)],
            &[GradReq::Write],
        )
        .unwrap();
        let before = bits(&unused.grad().unwrap());
        let vars: Vec<(usize, &NDArray)> = case
            .inputs
            .iter()
            .enumerate()
            .filter(|(_, (_, _, r))| *r != GradReq::Null)
            .map(|(i, _)| (i, &hooked[i]))
            .chain([(usize::MAX, &unused)])
            .collect();
        let list: Vec<&NDArray> = vars.iter().map(|(_, a)| *a).collect();
        for step in 0..2 {
            let at = format!("{what}, step {step}");
            let loss = eager_loss(what, &hooked).unwrap();
            let mut seen = Seen::new();
            autograd::backward_with_hook(&[&loss], &[], &list, &mut record(&mut seen)).unwrap();
            eager_loss(what, &plain).unwrap().backward().unwrap();
            let mut order: Vec<usize> = seen.iter().map(|(k, _, _)| *k).collect();
            order.sort_unstable();
            assert_eq!(
                order,
                (0..list.len()).collect::<Vec<_>>(),
                "{at}: each once"
            );
            for (k, _, copy) in &seen {
                let last = list[*k].grad().unwrap();
                assert_eq!(
                    bits(copy),
                    bits(&last),
                    "{at}: variables[{k}] changed after its hook"
                );
                match vars[*k].0 {
                    usize::MAX => assert_eq!(bits(&last), before, "{at}: unused changed"),
                    i => {
                        let reference = plain[i].grad().unwrap();
                        assert_eq!(
                            bits(&last),
                            bits(&reference),
                            "{at}: variables[{k}] differs"
                        );
                    }
                }
            }
            if what == "mlp" {
                // w1 b1 w2 b2 are variables 0..4: w2 and b2 come first.
                let first: Vec<usize> = seen.iter().map(|(k, _, _)| *k).take(3).collect();
                assert!(first.contains(&2) && first.contains(&3), "{at}: {first:?}");
            }
        }
    }
}

#[test]
fn tape_hook_error_stops_backward() {
    simpleop_ops::link();
    let cases = cases().unwrap();
    let a = eager_inputs(&cases[0].1);
    let loss = eager_loss("mlp", &a).unwrap();
    let list: Vec<&NDArray> = a[2..].iter().collect();
    let mut calls = 0;
    let err = autograd::backward_with_hook(&[&loss], &[], &list, &mut |g| {
        calls += 1;
        Err(Error::invalid(
            "test hook",
            format!("variables[{}]", g.index),
            "refused",
        ))
    })
    .unwrap_err();
    assert_eq!(calls, 1, "backward went on after the hook's error");
    assert!(err.to_string().contains("refused"), "{err}");
    // Every variable got a buffer back, and a new pass works.
    let loss = eager_loss("mlp", &a).unwrap();
    autograd::backward_with_hook(&[&loss], &[], &list, &mut |_| Ok(())).unwrap();
}

#[test]
fn tape_hook_refuses_bad_variables() {
    simpleop_ops::link();
    let cases = cases().unwrap();
    let a = eager_inputs(&cases[0].1);
    let loss = eager_loss("mlp", &a).unwrap();
    let mut hook = |_: GradReady<'_>| Ok(());
    // a[0] is a constant; a[2] listed twice.
    for (list, bad) in [
        (vec![&a[2], &a[0]], "variables[1]"),
        (vec![&a[2], &a[2]], "variables[1]"),
    ] {
        let err = autograd::backward_with_hook(&[&loss], &[], &list, &mut hook).unwrap_err();
        assert!(err.to_string().contains(bad), "{err}");
        assert!(
            err.to_string().contains("autograd::backward_with_hook"),
            "{err}"
        );
    }
    // Refused before anything ran: the tape is still there.
    autograd::backward_with_hook(&[&loss], &[], &[&a[2]], &mut hook).unwrap();
}
