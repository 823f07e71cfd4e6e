//! Blob ops with more inputs than the built-in ones, in graphs whose
//! backward hands some inputs a scratch ("sink") blob: each input needs
//! its own in-bounds slot, however many inputs the op has. These ops write
//! every gradient blob they are given, `Null` ones too, as a careless but
//! safe op may; valgrind (`.ci/valgrind`) checks that such writes stay in
//! bounds.

use simpleop::symbol::{BindConfig, Executor, GradReq, Symbol};
use simpleop::{DType, NDArray, simple_op};

/// `out = Σ_k (k + 1) · x_k` over five same-shape inputs.
#[simple_op(name = "_test_weighted_sum5", blob, inputs = 5)]
mod weighted_sum5 {
    use simpleop::prelude::*;

    pub fn shape(inputs: &[Shape]) -> Result<Shape> {
        if inputs.iter().any(|s| s != &inputs[0]) {
            return Err(Error::invalid(
                "_test_weighted_sum5",
                "x",
                "expected five inputs of one shape",
            ));
        }
        Ok(inputs[0].clone())
    }

    pub fn forward(inputs: &[TBlob<'_>], out: &mut TBlobMut<'_>, req: OpReqType) -> Result<()> {
        let xs: Vec<&[f64]> = inputs
            .iter()
            .map(|x| x.as_slice::<f64>())
            .collect::<Result<_>>()?;
        for (i, o) in out.as_slice_mut::<f64>()?.iter_mut().enumerate() {
            let v = xs
                .iter()
                .enumerate()
                .map(|(k, x)| (k + 1) as f64 * x[i])
                .sum::<f64>();
            req.assign(o, v);
        }
        Ok(())
    }

    /// Writes every blob, whatever its request says.
    pub fn backward(
        dy: OutGrad<&TBlob<'_>>,
        grads: &mut [TBlobMut<'_>],
        req: &[OpReqType],
    ) -> Result<()> {
        let dy = dy.as_slice::<f64>()?;
        super::write_every_blob(grads, req, |k, i| (k + 1) as f64 * dy[i])
    }
}

/// `out = a + b + Σ c`: `c` may have any shape.
#[simple_op(name = "_test_add_add_total", blob, inputs = 3)]
mod add_add_total {
    use simpleop::prelude::*;

    pub fn shape(inputs: &[Shape]) -> Result<Shape> {
        if inputs[0] != inputs[1] {
            return Err(Error::invalid(
                "_test_add_add_total",
                "b",
                "expected the shape of `a`",
            ));
        }
        Ok(inputs[0].clone())
    }

    pub fn forward(inputs: &[TBlob<'_>], out: &mut TBlobMut<'_>, req: OpReqType) -> Result<()> {
        let (a, b) = (inputs[0].as_slice::<f64>()?, inputs[1].as_slice::<f64>()?);
        let total: f64 = inputs[2].as_slice::<f64>()?.iter().sum();
        for (i, o) in out.as_slice_mut::<f64>()?.iter_mut().enumerate() {
            req.assign(o, a[i] + b[i] + total);
        }
        Ok(())
    }

    /// Writes every blob, whatever its request says.
    pub fn backward(
        dy: OutGrad<&TBlob<'_>>,
        grads: &mut [TBlobMut<'_>],
        req: &[OpReqType],
    ) -> Result<()> {
        let dy = dy.as_slice::<f64>()?;
        let total: f64 = dy.iter().sum();
        super::write_every_blob(grads, req, |k, i| if k < 2 { dy[i] } else { total })
    }
}

/// `grads[k][i] = value(k, i)`, added under `AddTo` and written under any
/// other request, `Null` included: the careless but safe op these tests
/// need.
fn write_every_blob(
    grads: &mut [simpleop::TBlobMut<'_>],
    req: &[simpleop::OpReqType],
    value: impl Fn(usize, usize) -> f64,
) -> simpleop::Result<()> {
    for (k, (g, r)) in grads.iter_mut().zip(req).enumerate() {
        for (i, o) in g.as_slice_mut::<f64>()?.iter_mut().enumerate() {
            let v = value(k, i);
            if *r == simpleop::OpReqType::AddTo {
                *o += v
            } else {
                *o = v
            }
        }
    }
    Ok(())
}

fn ramp(n: usize, scale: f64) -> NDArray {
    let v: Vec<f64> = (0..n).map(|i| scale * (i as f64 + 1.0)).collect();
    NDArray::from_vec(v, [n]).unwrap()
}

fn run(
    sym: &Symbol,
    args: Vec<(&str, NDArray)>,
    reqs: Vec<(&str, GradReq)>,
    planning: bool,
) -> Executor {
    let grads = reqs
        .iter()
        .filter(|(_, r)| *r != GradReq::Null)
        .map(|(n, _)| {
            let like = &args.iter().find(|(a, _)| a == n).unwrap().1;
            (
                n.to_string(),
                NDArray::zeros(like.shape().clone(), DType::F64),
            )
        })
        .collect();
    let args = args.into_iter().map(|(n, a)| (n.to_string(), a)).collect();
    let reqs = reqs.into_iter().map(|(n, r)| (n.to_string(), r)).collect();
    let config = BindConfig {
        memory_planning: planning,
        ..Default::default()
    };
    let mut exe = sym.bind_with(args, grads, reqs, config).unwrap();
    exe.forward(true).unwrap();
    let n = exe.outputs()[0].shape().size();
    exe.backward(&[ramp(n, 1.0)]).unwrap();
    exe
}

#[test]
fn a_five_input_op_with_one_wanted_gradient_gets_in_bounds_scratch() {
    let names = ["x0", "x1", "x2", "x3", "x4"];
    let vars: Vec<Symbol> = names.iter().map(|n| Symbol::var(n)).collect();
    let refs: Vec<&Symbol> = vars.iter().collect();
    let y = Symbol::invoke("_test_weighted_sum5", &refs, &Default::default()).unwrap();
    for planning in [false, true] {
        let n = 1000;
        let args = names
            .iter()
            .enumerate()
            .map(|(k, &name)| (name, ramp(n, k as f64)))
            .collect();
        let exe = run(&y, args, vec![("x0", GradReq::Write)], planning);
        let out = exe.outputs()[0].to_f64_vec();
        // Σ_k (k + 1) · k · (i + 1) = 40 (i + 1)
        assert!(
            out.iter()
                .enumerate()
                .all(|(i, &o)| o == 40.0 * (i as f64 + 1.0))
        );
        let g = exe.grad("x0").unwrap().to_f64_vec();
        assert!(
            g.iter().enumerate().all(|(i, &v)| v == i as f64 + 1.0),
            "{g:?}"
        );
    }
}

#[test]
fn an_input_used_twice_beside_a_small_one_gets_scratch_of_its_own_size() {
    // `a` feeds two inputs, so their gradients go in two calls, and the
    // call for the first hands the second a scratch blob of `a`'s size,
    // while the only `Null` input, `c`, is one element.
    let (a, c) = (Symbol::var("a"), Symbol::var("c"));
    let y = Symbol::invoke("_test_add_add_total", &[&a, &a, &c], &Default::default()).unwrap();
    for planning in [false, true] {
        let n = 4096;
        let args = vec![("a", ramp(n, 1.0)), ("c", ramp(1, 0.5))];
        let exe = run(
            &y,
            args,
            vec![("a", GradReq::Write), ("c", GradReq::Null)],
            planning,
        );
        let out = exe.outputs()[0].to_f64_vec();
        assert!(
            out.iter()
                .enumerate()
                .all(|(i, &o)| o == 2.0 * (i as f64 + 1.0) + 0.5)
        );
        let g = exe.grad("a").unwrap().to_f64_vec();
        assert!(
            g.iter()
                .enumerate()
                .all(|(i, &v)| v == 2.0 * (i as f64 + 1.0)),
            "{g:?}"
        );
    }
}

#[test]
fn a_large_input_beside_a_shared_one_gets_scratch_of_its_own_size() {
    // `c` has a gradient of its own, but the step splits (`a` twice), so
    // the first call hands `c` a scratch blob: it must be `c`'s size.
    let (a, c) = (Symbol::var("a"), Symbol::var("c"));
    let y = Symbol::invoke("_test_add_add_total", &[&a, &a, &c], &Default::default()).unwrap();
    for planning in [false, true] {
        let args = vec![("a", ramp(1, 1.0)), ("c", ramp(4096, 0.5))];
        let exe = run(
            &y,
            args,
            vec![("a", GradReq::Write), ("c", GradReq::Write)],
            planning,
        );
        assert_eq!(exe.grad("a").unwrap().to_f64_vec(), [2.0]);
        let gc = exe.grad("c").unwrap().to_f64_vec();
        assert!(gc.iter().all(|&v| v == 1.0), "{gc:?}");
    }
}

/// `a * b + c`, whose gradient may overwrite the output gradient with
/// `a`'s (`OutLhs`).
#[simple_op(name = "_test_fma_inplace_grad", inplace = "OutLhs")]
mod fma_inplace_grad {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(a: T, b: T, c: T) -> T {
        a * b + c
    }
    pub fn backward<T: Float>(dy: OutGrad<T>, a: In0<T>, b: In1<T>) -> (T, T, T) {
        (dy * *b, dy * *a, *dy)
    }
}

#[test]
fn an_in_place_gradient_is_not_taken_when_the_step_splits() {
    // fma(relu(w), x, x): x's gradient goes in two calls, which both read
    // the output gradient, so relu(w)'s gradient may not overwrite it.
    use simpleop::Attrs;
    simpleop_ops::link();
    let (w, x) = (Symbol::var("w"), Symbol::var("x"));
    let a = Symbol::invoke("relu", &[&w], &Attrs::new()).unwrap();
    let f = Symbol::invoke("_test_fma_inplace_grad", &[&a, &x, &x], &Attrs::new()).unwrap();
    let loss = Symbol::invoke("sum", &[&f], &Attrs::new()).unwrap();
    for fusion in [false, true] {
        let arr = |v: &[f64]| NDArray::from_vec(v.to_vec(), [v.len()]).unwrap();
        let args = [("w", arr(&[1.0, 2.0, 3.0])), ("x", arr(&[5.0, 6.0, 7.0]))];
        let grads = args
            .iter()
            .map(|(n, a)| (n.to_string(), NDArray::zeros(a.shape().clone(), DType::F64)));
        let reqs = args.iter().map(|(n, _)| (n.to_string(), GradReq::Write));
        let args = args.iter().map(|(n, a)| (n.to_string(), a.clone()));
        let config = BindConfig {
            fusion,
            ..BindConfig::default()
        };
        let mut exe = loss
            .bind_with(args.collect(), grads.collect(), reqs.collect(), config)
            .unwrap();
        exe.forward(true).unwrap();
        exe.backward(&[]).unwrap();
        // d/dx (a x + x) = a + 1; d/dw = x where w > 0
        let gx = exe.grad("x").unwrap().to_f64_vec();
        assert_eq!(gx, [2.0, 3.0, 4.0], "fusion {fusion}");
        let gw = exe.grad("w").unwrap().to_f64_vec();
        assert_eq!(gw, [5.0, 6.0, 7.0], "fusion {fusion}");
    }
}
