//! A LeNet with BatchNorm on the UCI digits, built from MXNet's layer ops
//! (`Convolution`, `BatchNorm`, `Activation`, `Pooling`,
//! `FullyConnected`, `SoftmaxOutput`), trained on the executor, saved as
//! MXNet's `-symbol.json` and `.params`, and loaded back. Shared by the
//! `train_lenet` example and `tests/train_lenet.rs`.

use std::collections::HashMap;
use std::path::Path;

use simpleop::symbol::{Executor, GradReq, Symbol};
use simpleop::{Attrs, DType, Error, NDArray, Result, Shape};
use simpleop_ops::{SgdMomParams, sgd_mom_update_inplace};

/// Image side (8×8) and classes.
const SIDE: usize = 8;
const CLASSES: usize = 10;
/// The inputs that are data, not weights.
pub const INPUTS: [&str; 2] = ["data", "softmax_label"];

/// Images (pixels / 16, `(n, 1, 8, 8)` row-major) and labels.
pub struct Digits {
    pub images: Vec<f32>,
    pub labels: Vec<f32>,
}

impl Digits {
    pub fn rows(&self) -> usize {
        self.labels.len()
    }

    /// Rows `start..end`.
    pub fn slice(&self, start: usize, end: usize) -> Digits {
        let px = SIDE * SIDE;
        Digits {
            images: self.images[start * px..end * px].to_vec(),
            labels: self.labels[start..end].to_vec(),
        }
    }
}

/// Reads `label,p0,...,p63` lines (a header first).
pub fn load(path: &Path) -> Result<Digits> {
    let bad = |why: String| Error::argument(path.display().to_string(), why);
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let (mut images, mut labels) = (Vec::new(), Vec::new());
    for (i, line) in text
        .lines()
        .enumerate()
        .skip(1)
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let fields: Vec<f32> = line
            .split(',')
            .map(|f| f.trim().parse::<f32>())
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| bad(format!("line {}: {e}", i + 1)))?;
        if fields.len() != 1 + SIDE * SIDE || fields[0] as usize >= CLASSES {
            return Err(bad(format!(
                "line {}: expected a label 0-9 and 64 pixels",
                i + 1
            )));
        }
        labels.push(fields[0]);
        images.extend(fields[1..].iter().map(|p| p / 16.0));
    }
    Ok(Digits { images, labels })
}

fn op(name: &str, inputs: &[&Symbol], attrs: &[(&str, &str)], label: &str) -> Result<Symbol> {
    let mut a = Attrs::new();
    for (k, v) in attrs {
        a.insert(*k, v);
    }
    Symbol::invoke_named(name, inputs, &a, Some(label))
}

/// conv 3×3 (pad 1) → BatchNorm → relu → max-pool 2×2, named `name`.
fn conv_block(x: &Symbol, filters: &str, name: &str) -> Result<Symbol> {
    let w = Symbol::var(&format!("{name}_weight"));
    let b = Symbol::var(&format!("{name}_bias"));
    let conv_attrs = [
        ("kernel", "(3, 3)"),
        ("pad", "(1, 1)"),
        ("num_filter", filters),
    ];
    let conv = op(
        "Convolution",
        &[x, &w, &b],
        &conv_attrs,
        &format!("{name}_conv"),
    )?;
    let bn_vars: Vec<Symbol> = ["gamma", "beta", "moving_mean", "moving_var"]
        .iter()
        .map(|v| Symbol::var(&format!("{name}_bn_{v}")))
        .collect();
    let mut bn_in = vec![&conv];
    bn_in.extend(bn_vars.iter());
    let bn = op(
        "BatchNorm",
        &bn_in,
        &[("fix_gamma", "False")],
        &format!("{name}_bn"),
    )?;
    let act = op(
        "Activation",
        &[&bn],
        &[("act_type", "relu")],
        &format!("{name}_relu"),
    )?;
    let pool = [
        ("kernel", "(2, 2)"),
        ("stride", "(2, 2)"),
        ("pool_type", "max"),
    ];
    op("Pooling", &[&act], &pool, &format!("{name}_pool"))
}

/// data (n, 1, 8, 8) → two conv blocks (8, 16 filters) → 64 → relu → 10
/// → SoftmaxOutput.
pub fn model() -> Result<Symbol> {
    let x = conv_block(&Symbol::var("data"), "8", "c1")?;
    let x = conv_block(&x, "16", "c2")?;
    let dense = |x: &Symbol, hidden: &str, name: &str| {
        let (w, b) = (
            Symbol::var(&format!("{name}_weight")),
            Symbol::var(&format!("{name}_bias")),
        );
        op(
            "FullyConnected",
            &[x, &w, &b],
            &[("num_hidden", hidden)],
            name,
        )
    };
    let h = dense(&x, "64", "fc1")?;
    let h = op("Activation", &[&h], &[("act_type", "relu")], "fc1_relu")?;
    let logits = dense(&h, "10", "fc2")?;
    op(
        "SoftmaxOutput",
        &[&logits, &Symbol::var("softmax_label")],
        &[],
        "softmax",
    )
}

/// Binds `sym` for `batch` images; weights get gradients when `train`.
pub fn bind(sym: &Symbol, batch: usize, train: bool) -> Result<Executor> {
    let shapes = HashMap::from([
        ("data".to_string(), Shape::new([batch, 1, SIDE, SIDE])),
        ("softmax_label".to_string(), Shape::new([batch])),
    ]);
    let req = if train { GradReq::Write } else { GradReq::Null };
    let reqs = sym
        .list_arguments()
        .into_iter()
        .filter(|a| !INPUTS.contains(&a.as_str()))
        .map(|a| (a, req))
        .collect();
    sym.simple_bind(&shapes, &HashMap::new(), reqs)
}

/// N(0, 1/fan_in) weights, zero biases, BatchNorm's gamma and moving
/// variance 1; deterministic for `seed`.
pub fn initialize(exe: &mut Executor, seed: u64) -> Result<()> {
    for (k, name) in exe.arg_names().to_vec().iter().enumerate() {
        if INPUTS.contains(&name.as_str()) {
            continue;
        }
        let shape = exe.arg(name).expect("an argument").shape().clone();
        let value = if name.ends_with("_weight") {
            let fan_in = shape.size() / shape.dims()[0];
            let sd = (2.0 / fan_in as f64).sqrt();
            NDArray::random_normal(shape, 0.0, sd, DType::F32, seed + k as u64)?
        } else if name.ends_with("_gamma") {
            NDArray::ones(shape, DType::F32)
        } else {
            NDArray::zeros(shape, DType::F32)
        };
        exe.set_arg(name, &value)?;
    }
    for name in exe.aux_names().to_vec() {
        let shape = exe.aux(&name).expect("an aux state").shape().clone();
        if name.ends_with("_moving_var") {
            exe.set_aux(&name, &NDArray::ones(shape, DType::F32))?;
        }
    }
    Ok(())
}

/// One epoch of SGD with momentum over `data` in batches (the last
/// partial one dropped); `mom` holds one buffer per weight.
pub fn train_epoch(
    exe: &mut Executor,
    data: &Digits,
    batch: usize,
    lr: f64,
    mom: &mut HashMap<String, NDArray>,
) -> Result<()> {
    let names: Vec<String> = exe
        .arg_names()
        .iter()
        .filter(|n| !INPUTS.contains(&n.as_str()))
        .cloned()
        .collect();
    for start in (0..data.rows() / batch).map(|b| b * batch) {
        set_batch(exe, &data.slice(start, start + batch))?;
        exe.forward(true)?;
        exe.backward(&[])?;
        for name in &names {
            let grad = exe.grad(name).cloned().expect("a gradient buffer");
            let weight = exe.arg_mut(name).expect("an argument");
            let m = mom
                .entry(name.clone())
                .or_insert_with(|| NDArray::zeros(weight.shape().clone(), DType::F32));
            let p = SgdMomParams {
                lr,
                momentum: 0.9,
                wd: 1e-4,
                rescale_grad: 1.0 / batch as f64,
                clip_gradient: -1.0,
                lazy_update: false,
            };
            sgd_mom_update_inplace(weight, &grad, m, p)?;
        }
    }
    Ok(())
}

fn set_batch(exe: &mut Executor, d: &Digits) -> Result<()> {
    let n = d.rows();
    exe.set_arg(
        "data",
        &NDArray::from_vec(d.images.clone(), [n, 1, SIDE, SIDE])?,
    )?;
    exe.set_arg("softmax_label", &NDArray::from_vec(d.labels.clone(), [n])?)
}

/// The predicted class of every image (inference mode: moving statistics).
pub fn predict(exe: &mut Executor, data: &Digits) -> Result<Vec<usize>> {
    set_batch(exe, data)?;
    exe.forward(false)?;
    let probs = exe.outputs()[0].to_vec::<f32>()?;
    Ok(probs
        .chunks(CLASSES)
        .map(|row| {
            let best = row.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1));
            best.map_or(0, |(k, _)| k)
        })
        .collect())
}

/// The fraction of `predicted` equal to the labels.
pub fn accuracy(predicted: &[usize], data: &Digits) -> f64 {
    let right = predicted
        .iter()
        .zip(&data.labels)
        .filter(|(p, l)| **p == **l as usize)
        .count();
    right as f64 / data.rows().max(1) as f64
}

/// Writes `{stem}-symbol.json` and `{stem}-0000.params` (weights and
/// moving statistics, as Gluon's `export` names them).
pub fn save(exe: &Executor, sym: &Symbol, stem: &Path) -> Result<()> {
    let with = |suffix: &str| {
        let mut s = stem.as_os_str().to_owned();
        s.push(suffix);
        std::path::PathBuf::from(s)
    };
    std::fs::write(with("-symbol.json"), sym.to_json())
        .map_err(|e| Error::argument("symbol file", e.to_string()))?;
    exe.save_params(with("-0000.params"), &INPUTS)
}

/// Loads a model `save` wrote, bound for inference on `batch` images.
pub fn load_model(stem: &Path, batch: usize) -> Result<Executor> {
    let with = |suffix: &str| {
        let mut s = stem.as_os_str().to_owned();
        s.push(suffix);
        std::path::PathBuf::from(s)
    };
    let text = std::fs::read_to_string(with("-symbol.json"))
        .map_err(|e| Error::argument("symbol file", e.to_string()))?;
    let sym = Symbol::from_json(&text)?;
    let mut exe = bind(&sym, batch, false)?;
    let saved = NDArray::load_params(with("-0000.params"))?;
    let options = simpleop::params::LoadOptions {
        inputs: &INPUTS,
        ..Default::default()
    };
    exe.load_params(&saved, &options)?;
    Ok(exe)
}
