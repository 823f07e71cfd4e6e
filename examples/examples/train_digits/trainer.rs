//! The digits MLP: data loading, the model as a `Symbol`, and a training
//! loop on the executor with the registered optimizer ops. Shared by the
//! `train_digits` example and `tests/train_digits.rs`.

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use simpleop::symbol::{Executor, GradReq, Symbol};
use simpleop::{DType, Error, NDArray, Result, Shape};
use simpleop_examples::softplus;
use simpleop_ops::{
    AdamParams, DotParams, SgdMomParams, adam_update_inplace, broadcast_add, dot,
    sgd_mom_update_inplace, softmax_cross_entropy,
};

/// Pixels per image (8×8) and classes.
pub const FEATURES: usize = 64;
/// Digits 0–9.
pub const CLASSES: usize = 10;

/// Images scaled to `[0, 1]` (row-major, `FEATURES` per row) and labels.
#[derive(Clone, Debug, Default)]
pub struct Dataset {
    /// `len × FEATURES` pixel values divided by 16.
    pub x: Vec<f32>,
    /// One class index per row, as f32 (what `softmax_cross_entropy` reads).
    pub y: Vec<f32>,
}

impl Dataset {
    /// Number of rows.
    pub fn len(&self) -> usize {
        self.y.len()
    }

    /// Rows `range`, in order.
    pub fn slice(&self, range: std::ops::Range<usize>) -> Dataset {
        Dataset {
            x: self.x[range.start * FEATURES..range.end * FEATURES].to_vec(),
            y: self.y[range].to_vec(),
        }
    }
}

fn data_error(path: &Path, reason: String) -> Error {
    Error::Io {
        op: "load_digits".into(),
        path: path.display().to_string(),
        reason,
    }
}

/// Reads the UCI optdigits CSV: a header line, then `label,p0..p63` with
/// pixels 0–16. Pixels are scaled by 1/16.
pub fn load_digits(path: &Path) -> Result<Dataset> {
    let text = std::fs::read_to_string(path).map_err(|e| data_error(path, e.to_string()))?;
    let mut data = Dataset::default();
    for (i, line) in text.lines().enumerate().skip(1) {
        if line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split(',').collect();
        if fields.len() != FEATURES + 1 {
            return Err(data_error(
                path,
                format!(
                    "line {}: expected {} fields, got {}",
                    i + 1,
                    FEATURES + 1,
                    fields.len()
                ),
            ));
        }
        let parse = |s: &str| {
            s.trim().parse::<u8>().map_err(|e| {
                data_error(
                    path,
                    format!("line {}: `{s}` is not a small integer: {e}", i + 1),
                )
            })
        };
        let label = parse(fields[0])?;
        if usize::from(label) >= CLASSES {
            return Err(data_error(
                path,
                format!("line {}: label {label} is not a digit", i + 1),
            ));
        }
        data.y.push(f32::from(label));
        for f in &fields[1..] {
            let p = parse(f)?;
            if p > 16 {
                return Err(data_error(
                    path,
                    format!("line {}: pixel {p} is above 16", i + 1),
                ));
            }
            data.x.push(f32::from(p) / 16.0);
        }
    }
    Ok(data)
}

/// Which registered update op trains the weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Optimizer {
    /// `sgd_mom_update` with momentum 0.9.
    SgdMomentum,
    /// `adam_update` with the usual betas and bias correction.
    Adam,
}

/// Hyper-parameters.
#[derive(Clone, Debug)]
pub struct Config {
    /// Hidden units.
    pub hidden: usize,
    /// Rows per step; the last partial batch of an epoch is dropped (the
    /// shuffle changes which rows that is).
    pub batch: usize,
    /// Learning rate.
    pub lr: f64,
    /// Seeds the initial weights and the shuffles.
    pub seed: u64,
    /// The update op.
    pub optimizer: Optimizer,
}

/// `64 → hidden → 10`: `softmax_cross_entropy(fc2(softplus(fc1(x))), label)`,
/// where softplus is this crate's own op. Returns `(loss, logits)`.
pub fn build_model() -> Result<(Symbol, Symbol)> {
    let x = Symbol::var("x");
    let label = Symbol::var("label");
    let (w1, b1) = (Symbol::var("w1"), Symbol::var("b1"));
    let (w2, b2) = (Symbol::var("w2"), Symbol::var("b2"));
    let h = softplus(&broadcast_add(&dot(&x, &w1, DotParams::default())?, &b1)?)?;
    let logits = broadcast_add(&dot(&h, &w2, DotParams::default())?, &b2)?;
    let loss = softmax_cross_entropy(&logits, &label)?;
    Ok((loss, logits))
}

/// The parameters, in update order.
pub const PARAMS: [&str; 4] = ["w1", "b1", "w2", "b2"];

/// splitmix64: a tiny seeded generator for the shuffles, so runs are
/// reproducible without another dependency.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Fisher–Yates.
    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = (self.next() % (i as u64 + 1)) as usize;
            v.swap(i, j);
        }
    }
}

/// A model bound for training, with its parameters and optimizer state.
pub struct Trainer {
    config: Config,
    train_exe: Executor,
    eval_exe: Option<(usize, Executor)>,
    logits: Symbol,
    params: Vec<NDArray>,
    /// Momentum (SGD) or the first moment (Adam), per parameter.
    state1: Vec<NDArray>,
    /// Adam's second moment, per parameter (empty for SGD).
    state2: Vec<NDArray>,
    rng: SplitMix,
    steps: u64,
}

/// What one epoch did.
#[derive(Clone, Debug, PartialEq)]
pub struct EpochReport {
    /// Mean cross-entropy per row over the epoch's steps.
    pub loss: f64,
    /// Wall time of each step (forward, backward, updates), in seconds.
    pub step_seconds: Vec<f64>,
}

fn shapes(batch: usize, hidden: usize) -> HashMap<String, Shape> {
    [
        ("x", vec![batch, FEATURES]),
        ("label", vec![batch]),
        ("w1", vec![FEATURES, hidden]),
        ("b1", vec![hidden]),
        ("w2", vec![hidden, CLASSES]),
        ("b2", vec![CLASSES]),
    ]
    .into_iter()
    .map(|(n, s)| (n.to_string(), Shape::new(s)))
    .collect()
}

impl Trainer {
    /// Binds the model and draws the initial weights from `config.seed`.
    pub fn new(config: Config) -> Result<Trainer> {
        if config.batch == 0 || config.hidden == 0 {
            return Err(Error::invalid(
                "Trainer::new",
                "config",
                "batch and hidden must be positive",
            ));
        }
        let (loss, logits) = build_model()?;
        let reqs = PARAMS
            .iter()
            .map(|p| (p.to_string(), GradReq::Write))
            .collect();
        let train_exe =
            loss.simple_bind(&shapes(config.batch, config.hidden), &HashMap::new(), reqs)?;
        let h = config.hidden;
        // N(0, 1/fan_in) weights, zero biases; one seed per tensor.
        let params = vec![
            NDArray::random_normal(
                [FEATURES, h],
                0.0,
                (1.0 / FEATURES as f64).sqrt(),
                DType::F32,
                config.seed,
            )?,
            NDArray::zeros([h], DType::F32),
            NDArray::random_normal(
                [h, CLASSES],
                0.0,
                (1.0 / h as f64).sqrt(),
                DType::F32,
                config.seed.wrapping_add(1),
            )?,
            NDArray::zeros([CLASSES], DType::F32),
        ];
        let zeros = |p: &NDArray| NDArray::zeros(p.shape().clone(), DType::F32);
        let state1 = params.iter().map(zeros).collect();
        let state2 = match config.optimizer {
            Optimizer::Adam => params.iter().map(zeros).collect(),
            Optimizer::SgdMomentum => Vec::new(),
        };
        let rng = SplitMix(config.seed ^ 0x5eed);
        Ok(Trainer {
            config,
            train_exe,
            eval_exe: None,
            logits,
            params,
            state1,
            state2,
            rng,
            steps: 0,
        })
    }

    /// The training executor (for its DOT and memory plan).
    pub fn executor(&self) -> &Executor {
        &self.train_exe
    }

    /// Bytes the run holds: the training executor's planned buffers, the
    /// evaluation executor's (if bound), and every bound array it does not
    /// own: parameters, gradients, optimizer state, one input batch.
    pub fn peak_bytes(&self) -> usize {
        let bytes = |a: &NDArray| a.size() * a.dtype().size();
        let exe = |e: &Executor| {
            e.memory_stats().planned_bytes
                + e.arg_names()
                    .iter()
                    .filter(|n| !PARAMS.contains(&n.as_str()))
                    .filter_map(|n| e.arg(n))
                    .map(bytes)
                    .sum::<usize>()
        };
        let params: usize = self.params.iter().map(bytes).sum();
        let grads: usize = PARAMS
            .iter()
            .filter_map(|p| self.train_exe.grad(p))
            .map(bytes)
            .sum();
        let state: usize = self.state1.iter().chain(&self.state2).map(bytes).sum();
        exe(&self.train_exe)
            + self.eval_exe.as_ref().map_or(0, |(_, e)| exe(e))
            + params
            + grads
            + state
    }

    /// One epoch over `data` in a seeded random order.
    pub fn epoch(&mut self, data: &Dataset, mut on_step: impl FnMut()) -> Result<EpochReport> {
        let b = self.config.batch;
        let mut order: Vec<usize> = (0..data.len()).collect();
        self.rng.shuffle(&mut order);
        let mut loss_sum = 0.0;
        let mut rows = 0usize;
        let mut step_seconds = Vec::with_capacity(data.len() / b);
        for chunk in order.chunks_exact(b) {
            let start = Instant::now();
            let loss = self.step(data, chunk)?;
            step_seconds.push(start.elapsed().as_secs_f64());
            loss_sum += loss;
            rows += b;
            on_step();
        }
        if rows == 0 {
            return Err(Error::invalid(
                "Trainer::epoch",
                "data",
                format!("{} rows is fewer than one batch of {b}", data.len()),
            ));
        }
        Ok(EpochReport {
            loss: loss_sum / rows as f64,
            step_seconds,
        })
    }

    /// Forward, backward and one update of every parameter on `rows`;
    /// returns the batch's summed loss.
    fn step(&mut self, data: &Dataset, rows: &[usize]) -> Result<f64> {
        let b = rows.len();
        let mut x = Vec::with_capacity(b * FEATURES);
        let mut y = Vec::with_capacity(b);
        for &r in rows {
            x.extend_from_slice(&data.x[r * FEATURES..(r + 1) * FEATURES]);
            y.push(data.y[r]);
        }
        let exe = &mut self.train_exe;
        exe.set_arg("x", &NDArray::from_vec(x, [b, FEATURES])?)?;
        exe.set_arg("label", &NDArray::from_vec(y, [b])?)?;
        for (name, p) in PARAMS.iter().zip(&self.params) {
            exe.set_arg(name, p)?;
        }
        exe.forward(true)?;
        exe.backward(&[])?;
        let loss = f64::from(exe.outputs()[0].as_slice::<f32>()?[0]);
        self.steps += 1;
        // The loss is summed over the batch: average the gradient.
        let rescale_grad = 1.0 / b as f64;
        for (k, name) in PARAMS.iter().enumerate() {
            let grad = exe
                .grad(name)
                .ok_or_else(|| Error::argument(*name, "no gradient buffer"))?;
            match self.config.optimizer {
                Optimizer::SgdMomentum => {
                    let p = SgdMomParams {
                        lr: self.config.lr,
                        momentum: 0.9,
                        wd: 0.0,
                        rescale_grad,
                        clip_gradient: -1.0,
                        lazy_update: false,
                    };
                    sgd_mom_update_inplace(&mut self.params[k], grad, &mut self.state1[k], p)?;
                }
                Optimizer::Adam => {
                    let t = self.steps as i32;
                    let (b1, b2) = (0.9f64, 0.999f64);
                    let lr = self.config.lr * (1.0 - b2.powi(t)).sqrt() / (1.0 - b1.powi(t));
                    let p = AdamParams {
                        lr,
                        beta1: b1,
                        beta2: b2,
                        epsilon: 1e-8,
                        wd: 0.0,
                        rescale_grad,
                        clip_gradient: -1.0,
                        lazy_update: false,
                    };
                    adam_update_inplace(
                        &mut self.params[k],
                        grad,
                        &mut self.state1[k],
                        &mut self.state2[k],
                        p,
                    )?;
                }
            }
        }
        Ok(loss)
    }

    /// Fraction of `data`'s rows whose largest logit is the label.
    pub fn accuracy(&mut self, data: &Dataset) -> Result<f64> {
        let n = data.len();
        if n == 0 {
            return Err(Error::invalid("Trainer::accuracy", "data", "no rows"));
        }
        let (_, exe) = match self.eval_exe.take() {
            Some(bound) if bound.0 == n => self.eval_exe.insert(bound),
            _ => {
                let mut s = shapes(n, self.config.hidden);
                s.remove("label");
                let exe = self
                    .logits
                    .simple_bind(&s, &HashMap::new(), HashMap::new())?;
                self.eval_exe.insert((n, exe))
            }
        };
        exe.set_arg("x", &NDArray::from_vec(data.x.clone(), [n, FEATURES])?)?;
        for (name, p) in PARAMS.iter().zip(&self.params) {
            exe.set_arg(name, p)?;
        }
        exe.forward(false)?;
        let logits = exe.outputs()[0].as_slice::<f32>()?;
        let correct = logits
            .chunks_exact(CLASSES)
            .zip(&data.y)
            .filter(|&(row, &label)| {
                let best = row
                    .iter()
                    .enumerate()
                    .fold(
                        (0, f32::NEG_INFINITY),
                        |acc, (i, &v)| if v > acc.1 { (i, v) } else { acc },
                    )
                    .0;
                best as f32 == label
            })
            .count();
        Ok(correct as f64 / n as f64)
    }
}
