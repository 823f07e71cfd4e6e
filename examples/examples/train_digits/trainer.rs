//! The digits model (a 3×3 `Convolution`, then an MLP): data loading,
//! augmentation (random affine warps of the 8×8 images), the model as a
//! `Symbol`, and a training
//! loop on the executor with the registered optimizer ops. Shared by the
//! `train_digits` example and `tests/train_digits.rs`.

use std::collections::HashMap;
use std::f64::consts::PI;
use std::path::Path;
use std::time::Instant;

use simpleop::symbol::{Executor, GradReady, GradReq, Symbol};
use simpleop::{Attrs, autograd, eager};
use simpleop::{DType, Error, NDArray, Result, Shape};
use simpleop_examples::softplus;
use simpleop_ops::{
    AdamParams, DotParams, ReduceAxesParams, ReshapeParams, SgdMomParams, SoftmaxParams,
    adam_update_inplace, broadcast_add, dot, elemwise_mul, log_softmax, negative, relu, reshape,
    sgd_mom_update_inplace, sum,
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

/// Random affine warps of the 8×8 training images, drawn afresh for every
/// image in every epoch: with probability `probability` an image is
/// rotated, scaled, sheared and shifted about its centre and resampled
/// bilinearly (outside the image reads as 0, the background); otherwise it
/// is used as it is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Augment {
    /// Chance that an image is warped in a given epoch.
    pub probability: f64,
    /// Rotation drawn from `±rotate_deg` degrees.
    pub rotate_deg: f64,
    /// Scale drawn from `1 ± scale`.
    pub scale: f64,
    /// Shear factor drawn from `±shear`.
    pub shear: f64,
    /// Shift in pixels drawn from `±translate`, per axis.
    pub translate: f64,
}

impl Default for Augment {
    /// Half the images, ±15°, ±15 % scale, ±0.25 shear, ±1 pixel.
    fn default() -> Self {
        Augment {
            probability: 0.5,
            rotate_deg: 15.0,
            scale: 0.15,
            shear: 0.25,
            translate: 1.0,
        }
    }
}

impl Augment {
    /// Writes one warped copy of `img` (8×8, row-major) into `out`, with
    /// the transform's parameters drawn from `rng`, or `img` itself with
    /// chance `1 − probability`.
    fn warp(&self, img: &[f32], out: &mut [f32], rng: &mut SplitMix) {
        if rng.uniform() >= self.probability {
            out.copy_from_slice(img);
            return;
        }
        Affine {
            rotate_deg: rng.symmetric(self.rotate_deg),
            scale: 1.0 + rng.symmetric(self.scale),
            shear: rng.symmetric(self.shear),
            shift: (rng.symmetric(self.translate), rng.symmetric(self.translate)),
        }
        .apply(img, out);
    }
}

/// One affine transform of an 8×8 image about its centre: the forward map
/// is `scale · R(rotate_deg) · [[1, shear], [0, 1]]`, then a shift of
/// `(x, y)` pixels.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Affine {
    /// Rotation, degrees.
    pub rotate_deg: f64,
    /// Scale factor (1: none).
    pub scale: f64,
    /// Shear factor (0: none).
    pub shear: f64,
    /// Shift in pixels, `(x, y)`.
    pub shift: (f64, f64),
}

impl Affine {
    /// The identity.
    pub const IDENTITY: Affine = Affine {
        rotate_deg: 0.0,
        scale: 1.0,
        shear: 0.0,
        shift: (0.0, 0.0),
    };

    /// A pure shift.
    pub const fn shift(x: f64, y: f64) -> Affine {
        Affine {
            shift: (x, y),
            ..Affine::IDENTITY
        }
    }

    /// Writes `img` (8×8, row-major) transformed into `out`, resampled
    /// bilinearly; outside the image reads as 0, the background.
    pub fn apply(&self, img: &[f32], out: &mut [f32]) {
        let theta = self.rotate_deg.to_radians();
        let (s, sh) = (self.scale, self.shear);
        let (tx, ty) = self.shift;
        // Forward map A = s · R(θ) · [[1, sh], [0, 1]]; each output pixel
        // reads the source at A⁻¹ (p − c − t) + c.
        let (c, si) = (theta.cos(), theta.sin());
        let a = [c * s, (c * sh - si) * s, si * s, (si * sh + c) * s];
        let det = a[0] * a[3] - a[1] * a[2];
        let inv = [a[3] / det, -a[1] / det, -a[2] / det, a[0] / det];
        let centre = (SIDE as f64 - 1.0) / 2.0;
        for (k, o) in out.iter_mut().enumerate().take(FEATURES) {
            let u = (k % SIDE) as f64 - centre - tx;
            let v = (k / SIDE) as f64 - centre - ty;
            let sx = inv[0] * u + inv[1] * v + centre;
            let sy = inv[2] * u + inv[3] * v + centre;
            *o = bilinear(img, sx, sy) as f32;
        }
    }
}

/// `img` (8×8, row-major) read at `(x, y)`, bilinearly between the four
/// nearest pixels; outside the image reads as 0, the background.
fn bilinear(img: &[f32], x: f64, y: f64) -> f64 {
    let pixel = |r: isize, col: isize| -> f64 {
        if (0..SIDE as isize).contains(&r) && (0..SIDE as isize).contains(&col) {
            f64::from(img[r as usize * SIDE + col as usize])
        } else {
            0.0
        }
    };
    let (x0, y0) = (x.floor(), y.floor());
    let (fx, fy) = (x - x0, y - y0);
    let (x0, y0) = (x0 as isize, y0 as isize);
    pixel(y0, x0) * (1.0 - fx) * (1.0 - fy)
        + pixel(y0, x0 + 1) * fx * (1.0 - fy)
        + pixel(y0 + 1, x0) * (1.0 - fx) * fy
        + pixel(y0 + 1, x0 + 1) * fx * fy
}

/// Moment-based deskewing: writes `img` (8×8, row-major) into `out` with
/// its slant removed. With the ink's centroid `(cx, cy)`, vertical
/// variance `var_y` and covariance `cov_xy` (pixel values as weights), the
/// image is sheared horizontally about the centroid's row so that the
/// covariance becomes 0: output pixel `(x, y)` reads the source at
/// `(x + α (y − cy), y)`, `α = cov_xy / var_y`, bilinearly (outside reads
/// as 0). A blank image, or one with no vertical extent, is copied.
pub fn deskew(img: &[f32], out: &mut [f32]) {
    let (mut m, mut sx, mut sy) = (0.0f64, 0.0f64, 0.0f64);
    for (k, &v) in img.iter().enumerate().take(FEATURES) {
        let v = f64::from(v);
        m += v;
        sx += v * (k % SIDE) as f64;
        sy += v * (k / SIDE) as f64;
    }
    let m = m + 1e-9;
    let (cx, cy) = (sx / m, sy / m);
    let (mut var_y, mut cov) = (0.0f64, 0.0f64);
    for (k, &v) in img.iter().enumerate().take(FEATURES) {
        let (dx, dy) = ((k % SIDE) as f64 - cx, (k / SIDE) as f64 - cy);
        var_y += f64::from(v) * dy * dy;
        cov += f64::from(v) * dx * dy;
    }
    let (var_y, cov) = (var_y / m, cov / m);
    let alpha = if var_y > 1e-6 { cov / var_y } else { 0.0 };
    for (k, o) in out.iter_mut().enumerate().take(FEATURES) {
        let (x, y) = ((k % SIDE) as f64, (k / SIDE) as f64);
        *o = bilinear(img, x + alpha * (y - cy), y) as f32;
    }
}

/// One view of a test image for test-time augmentation: the image,
/// deskewed first if `deskew` (see [`deskew`]), then transformed by
/// `affine`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct View {
    /// Deskew before the transform.
    pub deskew: bool,
    /// The transform.
    pub affine: Affine,
}

impl View {
    /// The image as it is.
    pub const IDENTITY: View = View::of(Affine::IDENTITY);

    /// `affine` of the image as it is.
    pub const fn of(affine: Affine) -> View {
        View {
            deskew: false,
            affine,
        }
    }

    /// `affine` of the deskewed image.
    pub const fn deskewed(affine: Affine) -> View {
        View {
            deskew: true,
            affine,
        }
    }

    /// Writes this view of `img` into `out`.
    pub fn apply(&self, img: &[f32], out: &mut [f32]) {
        match (self.deskew, self.affine == Affine::IDENTITY) {
            (false, true) => out.copy_from_slice(img),
            (false, false) => self.affine.apply(img, out),
            (true, true) => deskew(img, out),
            (true, false) => {
                let mut straight = [0.0f32; FEATURES];
                deskew(img, &mut straight);
                self.affine.apply(&straight, out);
            }
        }
    }
}

/// The views test-time augmentation averages by default: the image as it
/// is, shifted by one pixel left, right, up and down, and deskewed.
pub const TTA_VIEWS: [View; 6] = [
    View::of(Affine::IDENTITY),
    View::of(Affine::shift(1.0, 0.0)),
    View::of(Affine::shift(-1.0, 0.0)),
    View::of(Affine::shift(0.0, 1.0)),
    View::of(Affine::shift(0.0, -1.0)),
    View::deskewed(Affine::IDENTITY),
];

/// Hyper-parameters. [`Config::default`] is the recipe the example runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Channels of the 3×3 convolution in front of the MLP (0: none, the
    /// pixels go straight to the hidden layer).
    pub conv_channels: usize,
    /// Hidden units.
    pub hidden: usize,
    /// Rows per step; the last partial batch of an epoch is dropped (the
    /// shuffle changes which rows that is).
    pub batch: usize,
    /// Peak learning rate.
    pub lr: f64,
    /// Passes over the data; with `cosine` the learning rate decays to 0
    /// over this many epochs.
    pub epochs: usize,
    /// Cosine learning-rate decay from `lr` to 0 over `epochs`, else
    /// constant.
    pub cosine: bool,
    /// Seeds the initial weights, the shuffles, the warps and the dropout
    /// masks.
    pub seed: u64,
    /// The update op.
    pub optimizer: Optimizer,
    /// Fraction of hidden units zeroed per training row (0 disables).
    pub dropout: f64,
    /// Label smoothing ε: the target is `(1 − ε)·onehot + ε/10`.
    pub label_smoothing: f64,
    /// Random affine warps of the training images, if any.
    pub augment: Option<Augment>,
    /// Standardise each pixel by the training rows' mean and standard
    /// deviation (plus 0.1, so that near-constant border pixels are not
    /// blown up).
    pub standardize: bool,
    /// Evaluate with the mean of the weights at the end of each of the
    /// last `average_last · epochs` epochs (0: the final weights).
    pub average_last: f64,
    /// Train with eager calls recorded by `autograd` instead of the bound
    /// graph (the same model, parameters and updates).
    pub eager: bool,
    /// This process's share of each step in data-parallel training.
    pub shard: Shard,
}

/// Data-parallel training: each step's global batch is `size × batch`
/// rows of the shuffle, and this process computes rows
/// `rank·batch .. (rank+1)·batch` of it (the contiguous slices of
/// `simpleop_dist::ShardedSampler`). Every process draws the same shuffle,
/// warps and dropout masks from the seed and keeps its rows of them, so
/// `size` processes with `batch` rows each take the steps of one process
/// with `size·batch` rows once their gradients are averaged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// This process's index, below `size`.
    pub rank: usize,
    /// Processes in the job.
    pub size: usize,
}

impl Default for Shard {
    /// One process doing everything.
    fn default() -> Self {
        Shard { rank: 0, size: 1 }
    }
}

impl Default for Config {
    /// The example's recipe, chosen by cross-validation on the training
    /// rows (see the README).
    fn default() -> Self {
        Config {
            conv_channels: 8,
            hidden: 128,
            batch: 50,
            lr: 0.1,
            epochs: 600,
            cosine: true,
            seed: 42,
            optimizer: Optimizer::SgdMomentum,
            dropout: 0.2,
            label_smoothing: 0.1,
            augment: Some(Augment::default()),
            standardize: true,
            average_last: 0.2,
            eager: false,
            shard: Shard::default(),
        }
    }
}

/// Image side: 8×8 pixels.
const SIDE: usize = 8;
/// The convolution's window side (3×3, no padding, stride 1).
const WINDOW: usize = 3;
/// Window positions per image: 6×6.
pub const POSITIONS: usize = (SIDE - WINDOW + 1) * (SIDE - WINDOW + 1);
/// Pixels per window.
pub const PATCH: usize = WINDOW * WINDOW;

/// `fc2(dropout(softplus(fc1(features))))`, where softplus is this
/// crate's own op and dropout multiplies by the `mask` input (0 or
/// `1/(1 − p)` per unit, drawn by the trainer). With a convolution, `x` is
/// the images as `(batch, 1, 8, 8)` and the features are
/// `relu(Convolution(x, wc, bc))` (3×3, no padding, `conv_channels`
/// filters `wc (C, 1, 3, 3)`) flattened to `C·36` per image; with
/// `conv_channels == 0`, `x` is the images (`batch × 64`). The loss is
/// the cross-entropy against the (smoothed) target distribution `target`,
/// `−Σ target ⊙ log_softmax(logits)`, summed over the batch. Returns
/// `(loss, logits)`, where `logits` has no mask (for evaluation).
pub fn build_model(conv_channels: usize, dropout: bool) -> Result<(Symbol, Symbol)> {
    let x = Symbol::var("x");
    let target = Symbol::var("target");
    let (w1, b1) = (Symbol::var("w1"), Symbol::var("b1"));
    let (w2, b2) = (Symbol::var("w2"), Symbol::var("b2"));
    let features = if conv_channels > 0 {
        let (wc, bc) = (Symbol::var("wc"), Symbol::var("bc"));
        let attrs = Attrs::new()
            .with("kernel", format!("({WINDOW}, {WINDOW})"))
            .with("num_filter", conv_channels);
        let maps = relu(&Symbol::invoke("Convolution", &[&x, &wc, &bc], &attrs)?)?;
        // (batch, channels, 6, 6) → (batch, channels·36): one row per image.
        let per_image = ReshapeParams {
            shape: vec![-1, (POSITIONS * conv_channels) as i64],
            reverse: false,
        };
        reshape(&maps, per_image)?
    } else {
        x
    };
    let h = softplus(&broadcast_add(
        &dot(&features, &w1, DotParams::default())?,
        &b1,
    )?)?;
    let fc2 = |h: &Symbol| broadcast_add(&dot(h, &w2, DotParams::default())?, &b2);
    let logits = fc2(&h)?;
    let train_logits = if dropout {
        fc2(&elemwise_mul(&h, &Symbol::var("mask"))?)?
    } else {
        logits.clone()
    };
    let log_p = log_softmax(&train_logits, SoftmaxParams::default())?;
    let loss = negative(&sum(
        &elemwise_mul(&target, &log_p)?,
        ReduceAxesParams::default(),
    )?)?;
    Ok((loss, logits))
}

/// A gradient-ready hook: called with each parameter's index (update
/// order) and final gradient during backward.
pub type ReadyHook<'a> = &'a mut dyn FnMut(usize, &NDArray) -> Result<()>;

/// [`build_model`]'s loss computed by eager calls under
/// `autograd::record`, then its backward: the parameters, variables held
/// by the training executor, receive their gradients (`hook`, if given,
/// sees each as soon as it is final). Returns the loss.
fn eager_loss_backward(
    exe: &Executor,
    config: &Config,
    x: &NDArray,
    target: &NDArray,
    mask: Option<&NDArray>,
    hook: Option<ReadyHook<'_>>,
) -> Result<f64> {
    let p = |n: &str| {
        exe.arg(n)
            .ok_or_else(|| Error::argument(n, "not an argument of the model"))
    };
    let loss = autograd::record(|| -> Result<NDArray> {
        let c = config.conv_channels;
        let features = if c > 0 {
            let attrs = Attrs::new()
                .with("kernel", format!("({WINDOW}, {WINDOW})"))
                .with("num_filter", c);
            let conv = eager::invoke("Convolution", &[x, p("wc")?, p("bc")?], &attrs)?;
            let per_image = ReshapeParams {
                shape: vec![-1, (POSITIONS * c) as i64],
                reverse: false,
            };
            reshape(&relu(&conv)?, per_image)?
        } else {
            x.clone()
        };
        let fc1 = broadcast_add(&dot(&features, p("w1")?, DotParams::default())?, p("b1")?)?;
        let mut h = softplus(&fc1)?;
        if let Some(mask) = mask {
            h = elemwise_mul(&h, mask)?;
        }
        let logits = broadcast_add(&dot(&h, p("w2")?, DotParams::default())?, p("b2")?)?;
        let log_p = log_softmax(&logits, SoftmaxParams::default())?;
        negative(&sum(
            &elemwise_mul(target, &log_p)?,
            ReduceAxesParams::default(),
        )?)
    })?;
    match hook {
        None => loss.backward()?,
        Some(hook) => {
            let vars = param_names(config)
                .iter()
                .map(|n| p(n))
                .collect::<Result<Vec<_>>>()?;
            autograd::backward_with_hook(&[&loss], &[], &vars, &mut |g: GradReady<'_>| {
                hook(g.index, g.grad)
            })?;
        }
    }
    Ok(f64::from(loss.as_slice::<f32>()?[0]))
}

/// How each step's gradients become the ones its update applies: data
/// parallel training averages them over the processes. A step calls
/// `begin`, then `ready` once per gradient, then `finish`.
pub trait GradSync {
    /// Whether `ready` is called from backward's gradient-ready hook, as
    /// each gradient becomes final (communication overlapping backward),
    /// or after backward, last parameter first.
    fn overlap(&self) -> bool;
    /// A round over gradients shaped like `grads` (update order): before
    /// backward when overlapping, else after it.
    fn begin(&mut self, grads: &[NDArray]) -> Result<()>;
    /// Gradient `k` (update order) is final.
    fn ready(&mut self, k: usize, grad: &NDArray) -> Result<()>;
    /// After backward: the gradients to apply, given this process's
    /// (`grads`, update order).
    fn finish(&mut self, grads: &[NDArray]) -> Result<Vec<NDArray>>;
}

/// One process: its own gradients are applied.
struct Local;

impl GradSync for Local {
    fn overlap(&self) -> bool {
        false
    }
    fn begin(&mut self, _: &[NDArray]) -> Result<()> {
        Ok(())
    }
    fn ready(&mut self, _: usize, _: &NDArray) -> Result<()> {
        Ok(())
    }
    fn finish(&mut self, grads: &[NDArray]) -> Result<Vec<NDArray>> {
        Ok(grads.to_vec())
    }
}

/// The parameters of the MLP alone, in update order.
pub const MLP_PARAMS: [&str; 4] = ["w1", "b1", "w2", "b2"];
/// The parameters with the convolution, in update order.
pub const CONV_PARAMS: [&str; 6] = ["wc", "bc", "w1", "b1", "w2", "b2"];

/// The parameters `config`'s model has, in update order.
pub fn param_names(config: &Config) -> &'static [&'static str] {
    if config.conv_channels > 0 {
        &CONV_PARAMS
    } else {
        &MLP_PARAMS
    }
}

/// splitmix64: a tiny seeded generator for the shuffles, warps and masks,
/// so runs are reproducible without another dependency.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[−r, r)`.
    fn symmetric(&mut self, r: f64) -> f64 {
        r * (2.0 * self.uniform() - 1.0)
    }

    /// Fisher–Yates.
    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = (self.next() % (i as u64 + 1)) as usize;
            v.swap(i, j);
        }
    }
}

/// Per-pixel `(x − mean) / (sd + 0.1)`, fitted on the training rows.
#[derive(Clone, Debug)]
struct Standardizer {
    mean: Vec<f32>,
    inv_sd: Vec<f32>,
}

impl Standardizer {
    /// Fitted on `data`; the identity when `enabled` is false.
    fn fit(data: &Dataset, enabled: bool) -> Standardizer {
        let n = data.len().max(1) as f64;
        let mut mean = vec![0.0f64; FEATURES];
        let mut sq = vec![0.0f64; FEATURES];
        for row in data.x.chunks_exact(FEATURES) {
            for (k, &v) in row.iter().enumerate() {
                mean[k] += f64::from(v);
                sq[k] += f64::from(v) * f64::from(v);
            }
        }
        if !enabled {
            return Standardizer {
                mean: vec![0.0; FEATURES],
                inv_sd: vec![1.0; FEATURES],
            };
        }
        let mut inv_sd = vec![0.0f32; FEATURES];
        for k in 0..FEATURES {
            mean[k] /= n;
            let var = (sq[k] / n - mean[k] * mean[k]).max(0.0);
            inv_sd[k] = (1.0 / (var.sqrt() + 0.1)) as f32;
        }
        Standardizer {
            mean: mean.into_iter().map(|m| m as f32).collect(),
            inv_sd,
        }
    }

    fn apply(&self, x: &mut [f32]) {
        for row in x.chunks_exact_mut(FEATURES) {
            for ((v, m), s) in row.iter_mut().zip(&self.mean).zip(&self.inv_sd) {
                *v = (*v - m) * s;
            }
        }
    }
}

/// A model bound for training, with its parameters and optimizer state.
pub struct Trainer {
    config: Config,
    train_exe: Executor,
    eval_exe: Option<(usize, Executor)>,
    logits: Symbol,
    /// Momentum (SGD) or the first moment (Adam), per parameter.
    state1: Vec<NDArray>,
    /// Adam's second moment, per parameter (empty for SGD).
    state2: Vec<NDArray>,
    rng: SplitMix,
    steps: u64,
    /// Epochs run so far.
    epochs_done: usize,
    /// Sum of the weights at the end of the averaged epochs, and how many.
    weight_sum: Vec<Vec<f64>>,
    averaged: usize,
    /// Set by the first call to [`Trainer::epoch`].
    standardizer: Option<Standardizer>,
    /// This epoch's (warped, standardised) training images.
    epoch_x: Vec<f32>,
}

/// What one epoch did.
#[derive(Clone, Debug, PartialEq)]
pub struct EpochReport {
    /// Mean cross-entropy per row over the epoch's steps (against the
    /// smoothed targets, on the warped images, with dropout).
    pub loss: f64,
    /// Wall time of each step (batch, mask and targets, forward, backward,
    /// updates), in seconds; the epoch's warping happens before them.
    pub step_seconds: Vec<f64>,
}

/// The bound shapes of every input of [`build_model`] at `batch` rows.
fn shapes(config: &Config, batch: usize) -> HashMap<String, Shape> {
    let (c, hidden) = (config.conv_channels, config.hidden);
    let (x, features) = if c > 0 {
        (vec![batch, 1, SIDE, SIDE], POSITIONS * c)
    } else {
        (vec![batch, FEATURES], FEATURES)
    };
    let mut s: Vec<(&str, Vec<usize>)> = vec![
        ("x", x),
        ("target", vec![batch, CLASSES]),
        ("mask", vec![batch, hidden]),
        ("w1", vec![features, hidden]),
        ("b1", vec![hidden]),
        ("w2", vec![hidden, CLASSES]),
        ("b2", vec![CLASSES]),
    ];
    if c > 0 {
        s.extend([("wc", vec![c, 1, WINDOW, WINDOW]), ("bc", vec![c])]);
    }
    s.into_iter()
        .map(|(n, s)| (n.to_string(), Shape::new(s)))
        .collect()
}

/// `rows × cols` row-major `m`, transposed.
fn transposed(m: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    (0..cols)
        .flat_map(|j| (0..rows).map(move |i| m[i * cols + j]))
        .collect()
}

/// `w1`'s rows reordered from position-major (`pos·C + ch`) to the
/// convolution's channel-major features (`ch·36 + pos`).
fn channel_major_rows(w1: &NDArray, c: usize, h: usize) -> Result<NDArray> {
    let old = w1.to_vec::<f32>()?;
    let rows = (0..c).flat_map(|ch| (0..POSITIONS).map(move |pos| pos * c + ch));
    let new: Vec<f32> = rows
        .flat_map(|r| old[r * h..(r + 1) * h].to_vec())
        .collect();
    NDArray::from_vec(new, [POSITIONS * c, h])
}

/// The model's input `x` for these images: one channel of 8×8 with a
/// convolution, else rows of 64 pixels.
fn model_input(config: &Config, images: Vec<f32>) -> Result<NDArray> {
    let n = images.len() / FEATURES;
    if config.conv_channels > 0 {
        NDArray::from_vec(images, [n, 1, SIDE, SIDE])
    } else {
        NDArray::from_vec(images, [n, FEATURES])
    }
}

/// `dst`'s values overwritten with `src`'s, which must have its shape and
/// dtype (a checkpoint from another model is an error, not a panic).
fn copy_values(op: &str, name: &str, dst: &mut NDArray, src: &NDArray) -> Result<()> {
    if dst.shape() != src.shape() || dst.dtype() != src.dtype() {
        return Err(Error::invalid(
            op,
            name,
            format!(
                "shape {} and dtype {} (the model's), got {} and {}",
                dst.shape(),
                dst.dtype(),
                src.shape(),
                src.dtype()
            ),
        ));
    }
    dst.as_slice_mut::<f32>()?
        .copy_from_slice(src.as_slice::<f32>()?);
    Ok(())
}

impl Trainer {
    /// Binds the model and draws the initial weights from `config.seed`.
    pub fn new(config: Config) -> Result<Trainer> {
        if config.shard.size == 0 || config.shard.rank >= config.shard.size {
            return Err(Error::invalid(
                "Trainer::new",
                "config.shard",
                format!(
                    "rank {} of {} processes",
                    config.shard.rank, config.shard.size
                ),
            ));
        }
        if config.batch == 0 || config.hidden == 0 || config.epochs == 0 {
            return Err(Error::invalid(
                "Trainer::new",
                "config",
                "batch, hidden and epochs must be positive",
            ));
        }
        if !(0.0..1.0).contains(&config.dropout) || !(0.0..1.0).contains(&config.label_smoothing) {
            return Err(Error::invalid(
                "Trainer::new",
                "config",
                "dropout and label_smoothing must be in [0, 1)",
            ));
        }
        let (loss, logits) = build_model(config.conv_channels, config.dropout > 0.0)?;
        let reqs = param_names(&config)
            .iter()
            .map(|p| (p.to_string(), GradReq::Write))
            .collect();
        let mut s = shapes(&config, config.batch);
        if config.dropout == 0.0 {
            s.remove("mask");
        }
        let train_exe = loss.simple_bind(&s, &HashMap::new(), reqs)?;
        let (h, c) = (config.hidden, config.conv_channels);
        let features = if c > 0 { POSITIONS * c } else { FEATURES };
        // N(0, 1/fan_in) weights, zero biases; one seed per tensor (the
        // MLP's two as before the convolution existed). The convolution's
        // draws keep the layout of the recipe's first version, which cut
        // windows itself: `(9, C)` filters and position-major features.
        let mut params = Vec::new();
        let mut w1 = NDArray::random_normal(
            [features, h],
            0.0,
            (1.0 / features as f64).sqrt(),
            DType::F32,
            config.seed,
        )?;
        if c > 0 {
            let filters = NDArray::random_normal(
                [PATCH, c],
                0.0,
                (1.0 / PATCH as f64).sqrt(),
                DType::F32,
                config.seed.wrapping_add(2),
            )?;
            params.push(NDArray::from_vec(
                transposed(&filters.to_vec::<f32>()?, PATCH, c),
                [c, 1, WINDOW, WINDOW],
            )?);
            params.push(NDArray::zeros([c], DType::F32));
            w1 = channel_major_rows(&w1, c, h)?;
        }
        params.extend([
            w1,
            NDArray::zeros([h], DType::F32),
            NDArray::random_normal(
                [h, CLASSES],
                0.0,
                (1.0 / h as f64).sqrt(),
                DType::F32,
                config.seed.wrapping_add(1),
            )?,
            NDArray::zeros([CLASSES], DType::F32),
        ]);
        let zeros = |p: &NDArray| NDArray::zeros(p.shape().clone(), DType::F32);
        let state1 = params.iter().map(zeros).collect();
        let state2 = match config.optimizer {
            Optimizer::Adam => params.iter().map(zeros).collect(),
            Optimizer::SgdMomentum => Vec::new(),
        };
        let rng = SplitMix(config.seed ^ 0x5eed);
        // The parameters live in the executor and are updated there in
        // place: a copy held here as well would make every update copy
        // them first.
        let mut train_exe = train_exe;
        for (name, p) in param_names(&config).iter().zip(params) {
            let arg = train_exe
                .arg_mut(name)
                .ok_or_else(|| Error::argument(*name, "not an argument of the model"))?;
            *arg = p;
            if config.eager {
                // A variable: the eager step's backward writes its gradient.
                arg.attach_grad()?;
            }
        }
        Ok(Trainer {
            config,
            train_exe,
            eval_exe: None,
            logits,
            state1,
            state2,
            rng,
            steps: 0,
            epochs_done: 0,
            weight_sum: Vec::new(),
            averaged: 0,
            standardizer: None,
            epoch_x: Vec::new(),
        })
    }

    /// The current parameters, in update order (they live in the training
    /// executor).
    pub fn params(&self) -> impl Iterator<Item = &NDArray> {
        param_names(&self.config)
            .iter()
            .filter_map(|n| self.train_exe.arg(n))
    }

    /// Overwrites the parameters (in update order) with `values`, e.g.
    /// the start-up broadcast of data-parallel training.
    pub fn set_params(&mut self, values: &[NDArray]) -> Result<()> {
        let names = param_names(&self.config);
        if values.len() != names.len() {
            return Err(Error::invalid(
                "Trainer::set_params",
                "values",
                format!("{} arrays for {} parameters", values.len(), names.len()),
            ));
        }
        for (name, v) in names.iter().zip(values) {
            let arg = self
                .train_exe
                .arg_mut(name)
                .ok_or_else(|| Error::argument(*name, "not an argument of the model"))?;
            copy_values("Trainer::set_params", name, arg, v)?;
        }
        Ok(())
    }

    /// Epochs run so far.
    pub fn epochs_done(&self) -> usize {
        self.epochs_done
    }

    /// Everything a resumed run needs besides the data, as named arrays:
    /// the parameters (`param:NAME`), the optimizer state (`state1:NAME`,
    /// and `state2:NAME` for Adam), the sums of the weight average
    /// (`average:NAME`, float64) and `trainer:counters` (int64: the random
    /// stream's state, steps, epochs, averaged epochs).
    pub fn state(&self) -> Result<Vec<(String, NDArray)>> {
        let names = param_names(&self.config);
        let mut out = Vec::new();
        for (name, p) in names.iter().zip(self.params()) {
            out.push((format!("param:{name}"), p.deep_copy()));
        }
        for (prefix, states) in [("state1", &self.state1), ("state2", &self.state2)] {
            for (name, st) in names.iter().zip(states) {
                out.push((format!("{prefix}:{name}"), st.deep_copy()));
            }
        }
        for (name, sum) in names.iter().zip(&self.weight_sum) {
            let shape = self.train_exe.arg(name).map(|a| a.shape().clone());
            let shape = shape.ok_or_else(|| Error::argument(*name, "not an argument"))?;
            out.push((
                format!("average:{name}"),
                NDArray::from_vec(sum.clone(), shape)?,
            ));
        }
        let counters = [
            self.rng.0 as i64,
            self.steps as i64,
            self.epochs_done as i64,
            self.averaged as i64,
        ];
        out.push((
            "trainer:counters".into(),
            NDArray::from_vec(counters.to_vec(), [4])?,
        ));
        Ok(out)
    }

    /// Puts back what [`Trainer::state`] returned.
    pub fn restore(&mut self, arrays: &[(String, NDArray)]) -> Result<()> {
        let get = |n: &str| {
            arrays
                .iter()
                .find(|(k, _)| k == n)
                .map(|(_, a)| a)
                .ok_or_else(|| Error::argument(n, "missing from the saved state"))
        };
        let names = param_names(&self.config);
        let params: Vec<NDArray> = names
            .iter()
            .map(|n| get(&format!("param:{n}")).cloned())
            .collect::<Result<_>>()?;
        self.set_params(&params)?;
        for (prefix, states) in [("state1", &mut self.state1), ("state2", &mut self.state2)] {
            for (name, st) in names.iter().zip(states.iter_mut()) {
                let saved = get(&format!("{prefix}:{name}"))?;
                copy_values("Trainer::restore", name, st, saved)?;
            }
        }
        let counters = get("trainer:counters")?.to_vec::<i64>()?;
        let [rng, steps, epochs, averaged] = counters[..] else {
            return Err(Error::argument("trainer:counters", "expected 4 values"));
        };
        (self.rng.0, self.steps, self.epochs_done) = (rng as u64, steps as u64, epochs as usize);
        self.averaged = averaged as usize;
        self.weight_sum = names
            .iter()
            .filter_map(|n| get(&format!("average:{n}")).ok())
            .map(|a| a.to_vec::<f64>())
            .collect::<Result<_>>()?;
        let sizes: Vec<usize> = self.params().map(NDArray::size).collect();
        let lens: Vec<usize> = self.weight_sum.iter().map(Vec::len).collect();
        if !lens.is_empty() && lens != sizes {
            return Err(Error::invalid(
                "Trainer::restore",
                "average",
                format!("one sum per parameter of sizes {sizes:?}, got sizes {lens:?}"),
            ));
        }
        Ok(())
    }

    /// The training executor (for its DOT and memory plan).
    pub fn executor(&self) -> &Executor {
        &self.train_exe
    }

    /// Bytes the run holds: the training executor's planned buffers, the
    /// evaluation executor's (if bound), and every bound array it does not
    /// own: parameters, gradients, optimizer state, one input batch.
    pub fn peak_bytes(&self) -> usize {
        let names = param_names(&self.config);
        let bytes = |a: &NDArray| a.size() * a.dtype().size();
        let exe = |e: &Executor| {
            e.memory_stats().planned_bytes
                + e.arg_names()
                    .iter()
                    .filter(|n| !names.contains(&n.as_str()))
                    .filter_map(|n| e.arg(n))
                    .map(bytes)
                    .sum::<usize>()
        };
        let params: usize = self.params().map(bytes).sum();
        let grads: usize = names
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

    /// One epoch over `data` in a seeded random order, each image warped
    /// afresh if augmentation is on. The first call fits the pixel
    /// standardisation on `data`.
    pub fn epoch(&mut self, data: &Dataset, on_step: impl FnMut()) -> Result<EpochReport> {
        self.epoch_with(data, on_step, &mut Local)
    }

    /// [`Trainer::epoch`], with `sync` between this process's gradients
    /// (summed over its rows) and each update: it returns the gradients
    /// the update applies, the mean over the processes in data-parallel
    /// training, and may receive them during backward ([`GradSync`]).
    pub fn epoch_with(
        &mut self,
        data: &Dataset,
        mut on_step: impl FnMut(),
        sync: &mut dyn GradSync,
    ) -> Result<EpochReport> {
        let b = self.config.batch;
        let global = b * self.config.shard.size;
        let standardizer = self
            .standardizer
            .get_or_insert_with(|| Standardizer::fit(data, self.config.standardize));
        let mut order: Vec<usize> = (0..data.len()).collect();
        self.rng.shuffle(&mut order);
        self.epoch_x.clear();
        match self.config.augment {
            Some(aug) => {
                self.epoch_x.resize(data.x.len(), 0.0);
                for (img, out) in data
                    .x
                    .chunks_exact(FEATURES)
                    .zip(self.epoch_x.chunks_exact_mut(FEATURES))
                {
                    aug.warp(img, out, &mut self.rng);
                }
            }
            None => self.epoch_x.extend_from_slice(&data.x),
        }
        standardizer.apply(&mut self.epoch_x);
        let mut loss_sum = 0.0;
        let mut rows = 0usize;
        let mut step_seconds = Vec::with_capacity(data.len() / b);
        for chunk in order.chunks_exact(global) {
            let start = Instant::now();
            let loss = self.step(&data.y, chunk, sync)?;
            step_seconds.push(start.elapsed().as_secs_f64());
            loss_sum += loss;
            rows += b;
            on_step();
        }
        if rows == 0 {
            return Err(Error::invalid(
                "Trainer::epoch",
                "data",
                format!("{} rows is fewer than one batch of {global}", data.len()),
            ));
        }
        let first_averaged = self.config.epochs as f64 * (1.0 - self.config.average_last);
        if self.config.average_last > 0.0 && self.epochs_done as f64 >= first_averaged {
            if self.weight_sum.is_empty() {
                self.weight_sum = self.params().map(|p| vec![0.0; p.size()]).collect();
            }
            let names = param_names(&self.config);
            let params = names.iter().filter_map(|n| self.train_exe.arg(n));
            for (sum, p) in self.weight_sum.iter_mut().zip(params) {
                for (s, &v) in sum.iter_mut().zip(p.as_slice::<f32>()?) {
                    *s += f64::from(v);
                }
            }
            self.averaged += 1;
        }
        self.epochs_done += 1;
        Ok(EpochReport {
            loss: loss_sum / rows as f64,
            step_seconds,
        })
    }

    /// The learning rate of the next step: cosine from `lr` down to 0 over
    /// the configured epochs, measured in steps of `steps_per_epoch`.
    fn learning_rate(&self, steps_per_epoch: usize) -> f64 {
        if !self.config.cosine {
            return self.config.lr;
        }
        let total = (self.config.epochs * steps_per_epoch).max(1) as f64;
        let t = (self.steps as f64).min(total);
        self.config.lr * 0.5 * (1.0 + (PI * t / total).cos())
    }

    /// Forward, backward and one update of every parameter on this
    /// process's share of `global` (rows of this epoch's images), with the
    /// gradients passed through `sync`; returns the share's summed loss.
    fn step(&mut self, labels: &[f32], global: &[usize], sync: &mut dyn GradSync) -> Result<f64> {
        let b = self.config.batch;
        let Shard { rank, size } = self.config.shard;
        let rows = &global[rank * b..(rank + 1) * b];
        let (h, eps) = (self.config.hidden, self.config.label_smoothing);
        let mut x = Vec::with_capacity(b * FEATURES);
        let mut target = vec![(eps / CLASSES as f64) as f32; b * CLASSES];
        for (i, &r) in rows.iter().enumerate() {
            x.extend_from_slice(&self.epoch_x[r * FEATURES..(r + 1) * FEATURES]);
            target[i * CLASSES + labels[r] as usize] += (1.0 - eps) as f32;
        }
        let lr = self.learning_rate(labels.len() / (b * size));
        let names = param_names(&self.config);
        let x = model_input(&self.config, x)?;
        let target = NDArray::from_vec(target, [b, CLASSES])?;
        let mask = if self.config.dropout > 0.0 {
            let p = self.config.dropout;
            let keep = (1.0 / (1.0 - p)) as f32;
            // The whole global batch's mask, as one process draws it.
            let mask: Vec<f32> = (0..global.len() * h)
                .map(|_| if self.rng.uniform() < p { 0.0 } else { keep })
                .collect();
            let mine = mask[rank * b * h..(rank + 1) * b * h].to_vec();
            Some(NDArray::from_vec::<f32>(mine, [b, h])?)
        } else {
            None
        };
        let overlap = sync.overlap();
        if overlap {
            // Only the shapes: the handles are dropped before backward
            // writes the buffers (a shared buffer would be copied first).
            sync.begin(&self.grad_handles()?)?;
        }
        let exe = &mut self.train_exe;
        let mut ready = |k: usize, g: &NDArray| sync.ready(k, g);
        let hook = overlap.then_some(&mut ready as ReadyHook<'_>);
        let loss = if self.config.eager {
            eager_loss_backward(exe, &self.config, &x, &target, mask.as_ref(), hook)?
        } else {
            exe.set_arg("x", &x)?;
            exe.set_arg("target", &target)?;
            if let Some(mask) = &mask {
                exe.set_arg("mask", mask)?;
            }
            exe.forward(true)?;
            match hook {
                None => exe.backward(&[])?,
                Some(hook) => exe.backward_with_hook(&[], &mut |g: GradReady<'_>| match names
                    .iter()
                    .position(|n| *n == g.name)
                {
                    Some(k) => hook(k, g.grad),
                    None => Ok(()),
                })?,
            }
            f64::from(exe.outputs()[0].as_slice::<f32>()?[0])
        };
        drop((x, target, mask));
        self.steps += 1;
        // Handles (no copies), dropped before the next backward writes the
        // buffers again.
        let grads = self.grad_handles()?;
        if !overlap {
            sync.begin(&grads)?;
            for k in (0..grads.len()).rev() {
                sync.ready(k, &grads[k])?;
            }
        }
        let grads = sync.finish(&grads)?;
        let exe = &mut self.train_exe;
        if grads.len() != names.len() {
            return Err(Error::invalid(
                "Trainer::epoch_with",
                "sync",
                format!(
                    "returned {} gradients for {} parameters",
                    grads.len(),
                    names.len()
                ),
            ));
        }
        // The loss is summed over the batch: average the gradient.
        let rescale_grad = 1.0 / b as f64;
        for (k, name) in names.iter().enumerate() {
            let grad = &grads[k];
            let param = exe
                .arg_mut(name)
                .ok_or_else(|| Error::argument(*name, "not an argument of the model"))?;
            match self.config.optimizer {
                Optimizer::SgdMomentum => {
                    let p = SgdMomParams {
                        lr,
                        momentum: 0.9,
                        wd: 0.0,
                        rescale_grad,
                        clip_gradient: -1.0,
                        lazy_update: false,
                    };
                    sgd_mom_update_inplace(param, grad, &mut self.state1[k], p)?;
                }
                Optimizer::Adam => {
                    let t = self.steps as i32;
                    let (b1, b2) = (0.9f64, 0.999f64);
                    let lr = lr * (1.0 - b2.powi(t)).sqrt() / (1.0 - b1.powi(t));
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
                    adam_update_inplace(param, grad, &mut self.state1[k], &mut self.state2[k], p)?;
                }
            }
        }
        Ok(loss)
    }

    /// Handles on the gradient buffers, in update order.
    fn grad_handles(&self) -> Result<Vec<NDArray>> {
        let exe = &self.train_exe;
        param_names(&self.config)
            .iter()
            .map(|name| {
                let grad = match self.config.eager {
                    true => exe.arg(name).and_then(NDArray::grad),
                    false => exe.grad(name).cloned(),
                };
                grad.ok_or_else(|| Error::argument(*name, "no gradient buffer"))
            })
            .collect()
    }

    /// Softmax class probabilities for every row of `data` (`len × 10`,
    /// row-major), standardised like the training rows (not warped, no
    /// dropout).
    pub fn probabilities(&mut self, data: &Dataset) -> Result<Vec<f32>> {
        self.probabilities_tta(data, &[View::IDENTITY])
    }

    /// Test-time augmentation: the mean of the softmax probabilities over
    /// `views` of every row of `data` (each view is the image, perhaps
    /// deskewed, transformed by one fixed [`Affine`], then standardised),
    /// one forward-only pass of the evaluation executor per view.
    pub fn probabilities_tta(&mut self, data: &Dataset, views: &[View]) -> Result<Vec<f32>> {
        let n = data.len();
        if n == 0 || views.is_empty() {
            return Err(Error::invalid(
                "Trainer::probabilities",
                "data",
                "no rows or no views",
            ));
        }
        let standardizer = self
            .standardizer
            .clone()
            .ok_or_else(|| Error::invalid("Trainer::probabilities", "model", "not trained"))?;
        let (_, exe) = match self.eval_exe.take() {
            Some(bound) if bound.0 == n => self.eval_exe.insert(bound),
            _ => {
                let mut s = shapes(&self.config, n);
                s.remove("target");
                s.remove("mask");
                let exe = self
                    .logits
                    .simple_bind(&s, &HashMap::new(), HashMap::new())?;
                self.eval_exe.insert((n, exe))
            }
        };
        let names = param_names(&self.config);
        let params = names.iter().filter_map(|n| self.train_exe.arg(n));
        if self.averaged > 0 {
            let k = self.averaged as f64;
            for ((name, sum), p) in names.iter().zip(&self.weight_sum).zip(params) {
                let mean: Vec<f32> = sum.iter().map(|s| (s / k) as f32).collect();
                exe.set_arg(name, &NDArray::from_vec(mean, p.shape().clone())?)?;
            }
        } else {
            for (name, p) in names.iter().zip(params) {
                exe.set_arg(name, p)?;
            }
        }
        let mut mean = vec![0.0f32; n * CLASSES];
        let mut x = vec![0.0f32; data.x.len()];
        for view in views {
            for (img, out) in data
                .x
                .chunks_exact(FEATURES)
                .zip(x.chunks_exact_mut(FEATURES))
            {
                view.apply(img, out);
            }
            standardizer.apply(&mut x);
            exe.set_arg("x", &model_input(&self.config, x.clone())?)?;
            exe.forward(false)?;
            let logits = exe.outputs()[0].as_slice::<f32>()?;
            for (row, acc) in logits
                .chunks_exact(CLASSES)
                .zip(mean.chunks_exact_mut(CLASSES))
            {
                let top = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let e: Vec<f32> = row.iter().map(|v| (v - top).exp()).collect();
                let total: f32 = e.iter().sum();
                for (a, v) in acc.iter_mut().zip(e) {
                    *a += v / total / views.len() as f32;
                }
            }
        }
        Ok(mean)
    }

    /// Fraction of `data`'s rows whose most probable class is the label.
    pub fn accuracy(&mut self, data: &Dataset) -> Result<f64> {
        let probs = self.probabilities(data)?;
        Ok(accuracy(&probs, &data.y))
    }

    /// [`Trainer::accuracy`] with test-time augmentation over `views`.
    pub fn accuracy_tta(&mut self, data: &Dataset, views: &[View]) -> Result<f64> {
        let probs = self.probabilities_tta(data, views)?;
        Ok(accuracy(&probs, &data.y))
    }
}

/// Fraction of rows of `probs` (`len × 10`) whose largest entry is the
/// matching label (the first such entry on ties).
pub fn accuracy(probs: &[f32], labels: &[f32]) -> f64 {
    let correct = probs
        .chunks_exact(CLASSES)
        .zip(labels)
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
    correct as f64 / labels.len().max(1) as f64
}
