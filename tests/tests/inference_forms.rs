//! Inference forms: with fusion, `forward(false)` binds BatchNorm as a
//! per-channel subtract, multiply and add that fuse onto the convolution before
//! them (with the activation and a residual add behind). Checked against
//! the unfused executor, which runs BatchNorm itself, and eagerly: the
//! values, the groups, weights and statistics changed after bind, training
//! forward passes, the cases that must not expand, and a bad form.

use simpleop_tests::assert_close;
use std::collections::HashMap;

use simpleop::symbol::{BindConfig, Executor, GradReq, Symbol};
use simpleop::{
    Attrs, DType, FormInput, FormNode, InferenceForm, NDArray, Pattern, Result, Shape, eager,
    simple_op,
};

fn values(n: usize, seed: usize, lo: f64, hi: f64) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let u = ((i * 7919 + seed * 104_729) % 1009) as f64 / 1009.0;
            lo + (hi - lo) * u
        })
        .collect()
}

fn array(shape: &[usize], seed: usize, lo: f64, hi: f64, dtype: DType) -> NDArray {
    let n = shape.iter().product();
    NDArray::from_f64(&values(n, seed, lo, hi), shape.to_vec(), dtype).unwrap()
}

fn op(name: &str, node: &str, inputs: &[&Symbol], attrs: Attrs) -> Symbol {
    Symbol::invoke_named(name, inputs, &attrs, Some(node)).unwrap()
}

/// conv → BatchNorm → (+ `skip`) → relu, with the BatchNorm's kwargs.
fn block(x: &Symbol, name: &str, filters: usize, bn: Attrs, skip: Option<&Symbol>) -> Symbol {
    let conv = op(
        "Convolution",
        &format!("{name}_conv"),
        &[x, &Symbol::var(&format!("{name}_w"))],
        Attrs::new()
            .with("kernel", "(3, 3)")
            .with("pad", "(1, 1)")
            .with("num_filter", filters)
            .with("no_bias", "True"),
    );
    let v = |s: &str| Symbol::var(&format!("{name}_{s}"));
    let bn = op(
        "BatchNorm",
        &format!("{name}_bn"),
        &[&conv, &v("gamma"), &v("beta"), &v("mean"), &v("var")],
        bn,
    );
    let sum = match skip {
        Some(s) => op(
            "elemwise_add",
            &format!("{name}_add"),
            &[&bn, s],
            Attrs::new(),
        ),
        None => bn,
    };
    op(
        "Activation",
        &format!("{name}_relu"),
        &[&sum],
        Attrs::new().with("act_type", "relu"),
    )
}

/// Two blocks, the second with a residual add: data (2, 4, 6, 5).
fn net(bn: Attrs) -> Symbol {
    let x = Symbol::var("data");
    let a = block(&x, "a", 4, bn.clone(), None);
    block(&a, "b", 4, bn, Some(&a))
}

fn arrays(sym: &Symbol, dtype: DType) -> HashMap<String, NDArray> {
    let mut out = HashMap::new();
    out.insert("data".to_owned(), array(&[2, 4, 6, 5], 1, -1.0, 1.0, dtype));
    for (k, b) in ["a", "b"].iter().enumerate() {
        let s = 10 * k;
        let named = |n: &str| format!("{b}_{n}");
        out.insert(named("w"), array(&[4, 4, 3, 3], s + 2, -0.3, 0.3, dtype));
        out.insert(named("gamma"), array(&[4], s + 3, 0.5, 1.5, dtype));
        out.insert(named("beta"), array(&[4], s + 4, -0.5, 0.5, dtype));
        out.insert(named("mean"), array(&[4], s + 5, -0.2, 0.2, dtype));
        out.insert(named("var"), array(&[4], s + 6, 0.5, 2.0, dtype));
    }
    let names: Vec<String> = sym.list_arguments();
    assert!(names.iter().all(|n| out.contains_key(n)), "{names:?}");
    out
}

fn bind(sym: &Symbol, args: HashMap<String, NDArray>, fusion: bool) -> Executor {
    let config = BindConfig {
        fusion,
        ..BindConfig::default()
    };
    sym.bind_with(args, HashMap::new(), HashMap::new(), config)
        .unwrap()
}

fn output(exe: &mut Executor, is_train: bool) -> Vec<f64> {
    exe.forward(is_train).unwrap();
    exe.outputs()[0].to_f64_vec()
}

fn gluon_bn() -> Attrs {
    Attrs::new().with("fix_gamma", "False").with("eps", "1e-5")
}

#[test]
fn batch_norm_fuses_onto_the_convolution_and_matches_the_unfused_executor() {
    for (bn, dtype, tol) in [
        (gluon_bn(), DType::F32, 1e-5),
        (Attrs::new(), DType::F32, 1e-5), // fix_gamma, eps 1e-3
        (gluon_bn(), DType::F64, 1e-12),
    ] {
        let sym = net(bn);
        let mut fused = bind(&sym, arrays(&sym, dtype), true);
        let mut plain = bind(&sym, arrays(&sym, dtype), false);
        let want = output(&mut plain, false);
        assert_close(&output(&mut fused, false), &want, tol, "inference");
        // Twice: the expanded graph is lent the arrays per run.
        assert_close(&output(&mut fused, false), &want, tol, "second run");
        let groups = fused.inference_fusion_groups();
        for block in ["a", "b"] {
            let conv = format!("{block}_conv");
            let g = groups
                .iter()
                .find(|g| g.nodes.iter().any(|(n, _)| *n == conv))
                .unwrap_or_else(|| panic!("{conv} is in no group: {groups:?}"));
            let names: Vec<&str> = g.nodes.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(g.pattern, Pattern::OutElemwiseFusable, "{names:?}");
            assert!(
                names.contains(&format!("{block}_relu").as_str()),
                "{names:?}"
            );
            assert!(names.contains(&format!("{block}_bn").as_str()), "{names:?}");
        }
        // The bound graph's own groups keep BatchNorm, which breaks them.
        assert!(
            fused
                .fusion_groups()
                .iter()
                .all(|g| g.nodes.iter().all(|(n, _)| !n.ends_with("_conv"))),
            "{:?}",
            fused.fusion_groups()
        );
    }
}

#[test]
fn weights_and_statistics_changed_after_bind_are_used() {
    let sym = net(gluon_bn());
    let mut fused = bind(&sym, arrays(&sym, DType::F32), true);
    let mut plain = bind(&sym, arrays(&sym, DType::F32), false);
    output(&mut fused, false);
    let changes = [
        ("a_gamma", array(&[4], 30, -1.0, 2.0, DType::F32)),
        ("b_beta", array(&[4], 31, -1.0, 1.0, DType::F32)),
        ("a_w", array(&[4, 4, 3, 3], 32, -0.5, 0.5, DType::F32)),
    ];
    for (name, value) in &changes {
        fused.set_arg(name, value).unwrap();
        plain.set_arg(name, value).unwrap();
        let want = output(&mut plain, false);
        assert_close(&output(&mut fused, false), &want, 1e-5, name);
    }
    let var = array(&[4], 33, 0.1, 3.0, DType::F32);
    fused.set_aux("b_var", &var).unwrap();
    plain.set_aux("b_var", &var).unwrap();
    let want = output(&mut plain, false);
    assert_close(&output(&mut fused, false), &want, 1e-5, "b_var");
    // Written in place through `arg_mut`.
    for exe in [&mut fused, &mut plain] {
        let mean = exe
            .arg_mut("a_beta")
            .unwrap()
            .as_slice_mut::<f32>()
            .unwrap();
        mean.iter_mut().for_each(|m| *m += 0.25);
    }
    let want = output(&mut plain, false);
    assert_close(&output(&mut fused, false), &want, 1e-5, "arg_mut");
}

#[test]
fn training_passes_keep_batch_norm_and_update_what_inference_reads() {
    let sym = net(gluon_bn());
    let reqs = |sym: &Symbol| -> (HashMap<String, NDArray>, HashMap<String, GradReq>) {
        let args = arrays(sym, DType::F32);
        let grads = args
            .iter()
            .filter(|(n, _)| !n.ends_with("mean") && !n.ends_with("var"))
            .map(|(n, a)| (n.clone(), NDArray::zeros(a.shape().clone(), DType::F32)))
            .collect();
        let reqs = args.keys().map(|n| (n.clone(), GradReq::Write)).collect();
        (grads, reqs)
    };
    let mut exes = [true, false].map(|fusion| {
        let (grads, r) = reqs(&sym);
        let r = r
            .into_iter()
            .filter(|(n, _)| grads.contains_key(n))
            .collect();
        let config = BindConfig {
            fusion,
            ..BindConfig::default()
        };
        sym.bind_with(arrays(&sym, DType::F32), grads, r, config)
            .unwrap()
    });
    for step in 0..2 {
        let [fused, plain] = &mut exes;
        let want = output(plain, true);
        assert_close(&output(fused, true), &want, 1e-5, "training forward");
        fused.backward(&[]).unwrap();
        plain.backward(&[]).unwrap();
        let want = plain.grad("a_gamma").unwrap().to_f64_vec();
        assert_close(
            &fused.grad("a_gamma").unwrap().to_f64_vec(),
            &want,
            1e-4,
            "grad",
        );
        // The moving statistics the training pass updated.
        let want = output(plain, false);
        assert_close(&output(fused, false), &want, 1e-5, &format!("step {step}"));
    }
    // A training forward with no gradient asked for runs the bound graph.
    let mut fused = bind(&sym, arrays(&sym, DType::F32), true);
    let mut plain = bind(&sym, arrays(&sym, DType::F32), false);
    let want = output(&mut plain, true);
    assert_close(&output(&mut fused, true), &want, 1e-5, "is_train, no grads");
    let want = plain.aux("a_mean").unwrap().to_f64_vec();
    assert_close(
        &fused.aux("a_mean").unwrap().to_f64_vec(),
        &want,
        1e-6,
        "a_mean",
    );
}

#[test]
fn inference_matches_eager_batch_norm() {
    let sym = net(gluon_bn());
    let args = arrays(&sym, DType::F32);
    let mut fused = bind(&sym, args.clone(), true);
    let got = output(&mut fused, false);
    let call =
        |name: &str, ins: &[&NDArray], attrs: Attrs| eager::invoke(name, ins, &attrs).unwrap();
    let conv_attrs = Attrs::new()
        .with("kernel", "(3, 3)")
        .with("pad", "(1, 1)")
        .with("num_filter", 4)
        .with("no_bias", "True");
    let relu = Attrs::new().with("act_type", "relu");
    let blk = |x: &NDArray, b: &str, skip: Option<&NDArray>| {
        let a = |n: &str| &args[&format!("{b}_{n}")];
        let c = call("Convolution", &[x, a("w")], conv_attrs.clone());
        let (mut mean, mut var) = (a("mean").clone(), a("var").clone());
        let ins = [&c, a("gamma"), a("beta")];
        let mut aux = [&mut mean, &mut var];
        let bn = eager::invoke_outputs_by_name("BatchNorm", &ins, &mut aux, &gluon_bn());
        let mut y = bn.unwrap().remove(0);
        if let Some(s) = skip {
            y = call("elemwise_add", &[&y, s], Attrs::new());
        }
        call("Activation", &[&y], relu.clone())
    };
    let a = blk(&args["data"], "a", None);
    let want = blk(&a, "b", Some(&a)).to_f64_vec();
    assert_close(&got, &want, 1e-5, "eager");
}

#[test]
fn half_types_and_read_statistics_keep_the_op() {
    let sym = net(gluon_bn());
    let exe = bind(&sym, arrays(&sym, DType::F16), true);
    assert_eq!(exe.inference_fusion_groups(), exe.fusion_groups());
    // `output_mean_var` with the mean read: BatchNorm stays whole.
    let x = Symbol::var("data");
    let v = |s: &str| Symbol::var(s);
    let bn = Symbol::invoke(
        "BatchNorm",
        &[&x, &v("gamma"), &v("beta"), &v("mean"), &v("var")],
        &gluon_bn().with("output_mean_var", "True"),
    )
    .unwrap();
    let out = Symbol::group(&[bn.output(0).unwrap(), bn.output(1).unwrap()]);
    let args = HashMap::from([
        (
            "data".to_owned(),
            array(&[2, 3, 4], 1, -1.0, 1.0, DType::F32),
        ),
        ("gamma".to_owned(), array(&[3], 2, 0.5, 1.5, DType::F32)),
        ("beta".to_owned(), array(&[3], 3, -0.5, 0.5, DType::F32)),
        ("mean".to_owned(), array(&[3], 4, -0.2, 0.2, DType::F32)),
        ("var".to_owned(), array(&[3], 5, 0.5, 2.0, DType::F32)),
    ]);
    let mut fused = bind(&out, args.clone(), true);
    let mut plain = bind(&out, args, false);
    fused.forward(false).unwrap();
    plain.forward(false).unwrap();
    for k in 0..2 {
        let (g, w) = (&fused.outputs()[k], &plain.outputs()[k]);
        assert_close(&g.to_f64_vec(), &w.to_f64_vec(), 0.0, "output_mean_var");
    }
}

/// Doubles its input; in inference it claims to be an op that does not
/// exist, so binding it with fusion must fail with an error naming both.
fn broken_form(_: &TwiceParams, _: &[Shape], _: DType) -> Option<InferenceForm> {
    Some(InferenceForm {
        nodes: vec![FormNode::new(
            "no_such_op",
            &[FormInput::Input(0)],
            Attrs::new(),
        )],
    })
}

/// No kwargs of note.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default)]
pub struct TwiceParams {
    /// Unused.
    pub unused: bool,
}

#[simple_op(
    blob,
    name = "_test_twice_with_broken_form",
    inputs = ["data"],
    kwargs = TwiceParams,
    inference_form = super::broken_form
)]
pub mod twice {
    use super::TwiceParams;
    use simpleop::prelude::*;

    pub fn shape(inputs: &[Shape], _: &TwiceParams) -> Result<Shape> {
        Ok(inputs[0].clone())
    }

    pub fn forward(
        inputs: &[TBlob<'_>],
        out: &mut TBlobMut<'_>,
        req: OpReqType,
        _: &TwiceParams,
    ) -> Result<()> {
        let x = inputs[0].as_slice::<f32>()?;
        for (o, v) in out.as_slice_mut::<f32>()?.iter_mut().zip(x) {
            req.assign(o, 2.0 * v);
        }
        Ok(())
    }
}

#[test]
fn a_form_naming_an_unknown_op_is_a_bind_error() -> Result<()> {
    simpleop_ops::link();
    let x = Symbol::var("x");
    let y = Symbol::invoke("_test_twice_with_broken_form", &[&x], &Attrs::new())?;
    let args = || {
        HashMap::from([(
            "x".to_owned(),
            NDArray::from_vec(vec![1.0f32, 2.0], [2]).unwrap(),
        )])
    };
    let err = y
        .bind_with(
            args(),
            HashMap::new(),
            HashMap::new(),
            BindConfig::default(),
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("no_such_op"), "{err}");
    // Without fusion the op runs itself.
    let mut plain = bind(&y, args(), false);
    assert_eq!(output(&mut plain, false), [2.0, 4.0]);
    Ok(())
}

/// BatchNorm alone on `data`, f32, bound with and without fusion.
fn lone_batch_norm(data: NDArray, stats: [Vec<f32>; 4]) -> [Executor; 2] {
    let x = Symbol::var("data");
    let v = |s: &str| Symbol::var(s);
    let bn = Symbol::invoke(
        "BatchNorm",
        &[&x, &v("gamma"), &v("beta"), &v("mean"), &v("var")],
        &gluon_bn(),
    )
    .unwrap();
    let c = stats[0].len();
    let mut args = HashMap::from([("data".to_owned(), data)]);
    for (name, s) in ["gamma", "beta", "mean", "var"].iter().zip(stats) {
        args.insert((*name).to_owned(), NDArray::from_vec(s, [c]).unwrap());
    }
    [bind(&bn, args.clone(), true), bind(&bn, args, false)]
}

#[test]
fn a_large_mean_does_not_cancel() {
    // x·scale and mean·scale are ~95 000, where f32 steps are 0.008; the
    // output is ~1.
    let data = NDArray::from_vec(vec![1000.01f32, 999.99, 1000.0, 1000.02], [1, 1, 4]).unwrap();
    let [mut fused, mut plain] =
        lone_batch_norm(data, [vec![1.0], vec![0.5], vec![1000.0], vec![1e-4]]);
    let want = output(&mut plain, false);
    assert!(fused.inference_fusion_groups() != fused.fusion_groups());
    assert_close(&output(&mut fused, false), &want, 1e-5, "large mean");
}

#[test]
fn data_without_channels_keeps_the_op() {
    let data = NDArray::zeros([2, 0, 3], DType::F32);
    let [mut fused, mut plain] = lone_batch_norm(data, [vec![], vec![], vec![], vec![]]);
    assert_eq!(output(&mut fused, false), output(&mut plain, false));
    assert_eq!(fused.inference_fusion_groups(), fused.fusion_groups());
}
