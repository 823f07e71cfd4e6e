//! Ops defined in a test crate: the ternary elementwise form with
//! broadcasting, a kernel that branches, and one that names a built-in
//! vector form, each through the gradient checker and the eager API.

use simpleop::gradcheck::GradCheck;
use simpleop::{DType, NDArray, OpReqType, simple_op};

/// Fused multiply-add `a * b + c`, broadcasting all three inputs.
#[simple_op(name = "_test_fma", broadcast, inplace = "OutLhs")]
mod fma {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(a: T, b: T, c: T) -> T {
        a * b + c
    }
    pub fn backward<T: Float>(dy: OutGrad<T>, a: In0<T>, b: In1<T>) -> (T, T, T) {
        (dy * *b, dy * *a, *dy)
    }
}

/// A kernel with a branch and a T1 gradient: leaky relu with slope `scalar`.
#[simple_op(name = "_test_leaky", scalar, inplace = "InOut, OutIn")]
mod leaky {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T, slope: T) -> T {
        if x > T::zero() { x } else { x * slope }
    }
    pub fn backward<T: Float>(dy: OutGrad<T>, y: OutValue<T>, slope: T) -> T {
        if *y > T::zero() { *dy } else { dy * slope }
    }
}

/// A user's e^x that names the built-in AVX-512 form of its kernel.
#[simple_op(name = "_test_vexp", inplace = "InOut, OutIn", vector = simpleop::kernel::forms::EXP)]
mod vexp {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T) -> T {
        x.exp()
    }
    pub fn backward<T: Float>(dy: OutGrad<T>, y: OutValue<T>) -> T {
        dy * *y
    }
}

/// Breaks the vector-form contract on purpose (its scalar kernel is e^x),
/// to show which one runs.
#[simple_op(name = "_test_wrong_vector", vector = simpleop::kernel::forms::SIGMOID)]
mod wrong_vector {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T) -> T {
        x.exp()
    }
}

#[test]
fn a_user_op_can_name_a_vector_form() {
    simpleop_ops::link();
    simpleop::Tuning::update(|t| t.parallel_work = 0).unwrap();
    for dtype in DType::FLOATS {
        // odd length, split over threads
        let x = NDArray::random_uniform([3 * 65_537], -20.0, 20.0, dtype, 3).unwrap();
        let mine = simpleop::eager::invoke("_test_vexp", &[&x], &Default::default()).unwrap();
        let builtin = simpleop::eager::invoke("exp", &[&x], &Default::default()).unwrap();
        assert_eq!(mine.to_f64_vec(), builtin.to_f64_vec(), "{dtype}");
    }
    GradCheck::new("_test_vexp")
        .shapes(&[&[2, 9]])
        .run()
        .unwrap();

    // Where the form covers the CPU, it is what runs, on every storage type.
    let runs_vector = simpleop::Tuning::current().isa == simpleop::Isa::Avx512;
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let x = NDArray::random_uniform([4099], -3.0, 3.0, dtype, 4).unwrap();
        let got =
            simpleop::eager::invoke("_test_wrong_vector", &[&x], &Default::default()).unwrap();
        let want = if runs_vector { "sigmoid" } else { "exp" };
        let want = simpleop::eager::invoke(want, &[&x], &Default::default()).unwrap();
        assert!(same(&got.to_f64_vec(), &want.to_f64_vec()), "{dtype}");
    }

    // ... and in a fused group's tiles: `op(x · 2) + 1`, fused, against the
    // same graph with the form's own op in the middle.
    let fused = |op: &str| {
        use simpleop::Attrs;
        use simpleop::symbol::{BindConfig, Symbol};
        let x = Symbol::var("x");
        let s = |v: f64| Attrs::new().with("scalar", v);
        let a = Symbol::invoke("_mul_scalar", &[&x], &s(2.0)).unwrap();
        let a = Symbol::invoke(op, &[&a], &Attrs::new()).unwrap();
        let a = Symbol::invoke("_plus_scalar", &[&a], &s(1.0)).unwrap();
        let data = NDArray::random_uniform([5, 1000], -3.0, 3.0, DType::F32, 6).unwrap();
        let args = [("x".to_string(), data)].into_iter().collect();
        let config = BindConfig {
            fusion: true,
            ..BindConfig::default()
        };
        let mut exe = a
            .bind_with(args, Default::default(), Default::default(), config)
            .unwrap();
        assert_eq!(exe.fusion_groups().len(), 1, "one fused group");
        exe.forward(false).unwrap();
        exe.outputs()[0].to_f64_vec()
    };
    let want = if runs_vector { "sigmoid" } else { "exp" };
    assert!(same(&fused("_test_wrong_vector"), &fused(want)), "fused");
}

/// Equal, or else how many values differ (printed, not the arrays).
fn same(a: &[f64], b: &[f64]) -> bool {
    let differ = a.iter().zip(b).filter(|(x, y)| x != y).count();
    if differ > 0 || a.len() != b.len() {
        eprintln!("{differ} of {} values differ", a.len());
    }
    differ == 0 && a.len() == b.len()
}

#[test]
fn ternary_op_broadcasts_and_reduces_all_three_gradients() {
    for shapes in [
        &[&[2, 3][..], &[2, 3][..], &[2, 3][..]][..],
        &[&[2, 3], &[1, 3], &[2, 1]],
        &[&[4], &[3, 1], &[]],
    ] {
        GradCheck::new("_test_fma")
            .shapes(shapes)
            .run()
            .unwrap_or_else(|e| panic!("{shapes:?}: {e}"));
    }
    let a = NDArray::from_vec(vec![1.0f64, 2.0], [2, 1]).unwrap();
    let b = NDArray::from_vec(vec![10.0f64, 20.0, 30.0], [3]).unwrap();
    let c = NDArray::from_vec(vec![0.5f64], []).unwrap();
    let y = fma(&a, &b, &c).unwrap();
    assert_eq!(y.shape().dims(), &[2, 3]);
    assert_eq!(
        y.to_vec::<f64>().unwrap(),
        vec![10.5, 20.5, 30.5, 20.5, 40.5, 60.5]
    );
}

#[test]
fn branching_kernel_with_t1_gradient() {
    GradCheck::new("_test_leaky")
        .attr("scalar", 0.1)
        .shapes(&[&[2, 4]])
        .inputs(vec![vec![-2.0, -1.0, -0.5, -0.1, 0.1, 0.5, 1.0, 2.0]])
        .run()
        .unwrap();
    assert_eq!(leaky::OP.gradient.unwrap().kind(), simpleop::GradKind::T1);
    let mut x = NDArray::from_f64(&[-2.0, 3.0], [2], DType::BF16).unwrap();
    leaky_inplace(&mut x, 0.5).unwrap();
    assert_eq!(x.to_f64_vec(), vec![-1.0, 3.0]);
    let mut out = NDArray::full([2], 1.0, DType::BF16);
    leaky_into(&x, 0.5, &mut out, OpReqType::AddTo).unwrap();
    assert_eq!(out.to_f64_vec(), vec![0.5, 4.0]);
}

/// An op with MXNet-style aliases.
#[simple_op(name = "_test_twice", alias = "_test_double, _test_x2")]
mod twice {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T) -> T {
        x + x
    }
}

#[test]
fn aliases_resolve_to_the_same_op() {
    let reg = simpleop::Registry::global().unwrap();
    let a = reg.get("_test_twice").unwrap();
    for alias in ["_test_double", "_test_x2"] {
        assert!(std::ptr::eq(reg.get(alias).unwrap().def, a.def));
        assert!(reg.contains(alias));
    }
    assert_eq!(twice::OP.aliases, ["_test_double", "_test_x2"]);
    let x = NDArray::from_vec(vec![1.5f32], [1]).unwrap();
    let y = simpleop::eager::invoke("_test_x2", &[&x], &simpleop::Attrs::new()).unwrap();
    assert_eq!(y.to_f64_vec(), vec![3.0]);
    // Iteration lists each op once, under its registered name.
    assert_eq!(
        reg.iter().filter(|o| o.def.name == "_test_twice").count(),
        1
    );
    // An alias that collides with another op's name is a duplicate.
    let mut fresh = simpleop::Registry::new();
    fresh.register(&twice::OP).unwrap();
    let e = fresh.register(&leaky::OP).map(|_| ()).and_then(|_| {
        static CLASH: std::sync::OnceLock<simpleop::OpDef> = std::sync::OnceLock::new();
        let def = CLASH.get_or_init(|| simpleop::OpDef {
            name: "_test_x2",
            aliases: &[],
            ..clone_def(&leaky::OP)
        });
        fresh.register(def)
    });
    assert!(
        matches!(e, Err(simpleop::Error::DuplicateOp { .. })),
        "{e:?}"
    );
}

fn clone_def(d: &simpleop::OpDef) -> simpleop::OpDef {
    simpleop::OpDef { ..*d }
}

/// Breaks the `WriteTo` contract: leaves element 0 of its output alone.
#[simple_op(name = "_test_skips_first", blob, inputs = 1)]
mod skips_first {
    use simpleop::prelude::*;
    pub fn shape(inputs: &[Shape]) -> Result<Shape> {
        Ok(inputs[0].clone())
    }
    pub fn forward(inputs: &[TBlob<'_>], out: &mut TBlobMut<'_>, req: OpReqType) -> Result<()> {
        let x = inputs[0].as_slice::<f64>()?;
        for (o, v) in out.as_slice_mut::<f64>()?.iter_mut().zip(x).skip(1) {
            req.assign(o, 2.0 * v);
        }
        Ok(())
    }
    pub fn backward(
        dy: OutGrad<&TBlob<'_>>,
        grads: &mut [TBlobMut<'_>],
        req: &[OpReqType],
    ) -> Result<()> {
        let dy = dy.as_slice::<f64>()?;
        for (g, d) in grads[0].as_slice_mut::<f64>()?.iter_mut().zip(dy) {
            req[0].assign(g, 2.0 * d);
        }
        Ok(())
    }
}

#[test]
fn poisoning_shows_an_element_a_write_to_kernel_skipped() {
    use simpleop::{Attrs, eager, pool};
    let x = NDArray::from_vec(vec![1.0f64, 2.0, 3.0], [3]).unwrap();
    let _poison = pool::PoisonGuard::hold();
    let y = eager::invoke("_test_skips_first", &[&x], &Attrs::new()).unwrap();
    let y = y.to_vec::<f64>().unwrap();
    assert!(y[0].is_nan(), "{y:?}");
    assert_eq!(y[1..], [4.0, 6.0]);
    // So does the executor, before each step that writes.
    let v = simpleop::Symbol::var("x");
    let s = simpleop::Symbol::invoke("_test_skips_first", &[&v], &Attrs::new()).unwrap();
    let args = std::collections::HashMap::from([("x".to_string(), x.clone())]);
    let mut exe = s
        .bind(args, Default::default(), Default::default())
        .unwrap();
    exe.forward(false).unwrap();
    let y = exe.outputs()[0].to_vec::<f64>().unwrap();
    assert!(y[0].is_nan(), "{y:?}");
    // The gradient checker poisons on its own and names the element.
    drop(_poison);
    let e = GradCheck::new("_test_skips_first")
        .dtypes(&[DType::F64])
        .run()
        .unwrap_err();
    assert!(
        matches!(
            e,
            simpleop::Error::GradCheck {
                index: 0,
                req: OpReqType::WriteTo,
                ..
            }
        ),
        "{e}"
    );
}
