//! [`rnn()`] (`RNN`), MXNet's fused multi-layer LSTM / GRU / vanilla RNN,
//! and [`rnn_param_concat()`] (`_rnn_param_concat`), the `Concat` that
//! Gluon's `rnn.LSTM`/`rnn.GRU`/`rnn.RNN` exports use to pack their
//! weights into RNN's `parameters`.
//!
//! # What RNN computes
//!
//! `data` is `(T, N, I)` (time, batch, features: MXNet's TNC layout).
//! Each of the `L = num_layers` layers runs `D` directions (`D = 2` with
//! `bidirectional`: one forward in time, one backward) with `H =
//! state_size` units. A direction of layer `l` reads the layer's input
//! `x_t` (`data` for layer 0, the previous layer's output, `D·H` wide,
//! after) and its own previous state `h` (initially `state[l·D + d]`):
//!
//! - `rnn_tanh`/`rnn_relu`: `h' = act(W_i2h x + b_i2h + W_h2h h + b_h2h)`.
//! - `lstm`, gates `i, f, g, o` in that order (each `H` rows of the
//!   weights), each of `W_i2h x + b_i2h + W_h2h h + b_h2h`: `i, f, o =
//!   σ(·)`, `g = tanh(·)`; then `c' = f ⊙ c + i ⊙ g` (`c` starts at
//!   `state_cell`) and `h' = o ⊙ tanh(c')`.
//! - `gru`, gates `r, z, n`: `r, z = σ(W_i2h x + b_i2h + W_h2h h + b_h2h)`,
//!   `n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn))`, and `h' = (1 − z) ⊙
//!   n + z ⊙ h`.
//!
//! The layer's output at step `t` is the directions' `h` side by side; the
//! last layer's is `out`, `(T, N, D·H)`. With `state_outputs`, `hy` (and
//! for lstm `cy`), `(L·D, N, H)`, hold each direction's final state (the
//! backward direction's at `t = 0`). With `p > 0` in training, each layer's
//! output but the last goes through dropout before the next layer reads it.
//!
//! # Parameter layout
//!
//! `parameters` is one 1-D array, MXNet's packing: first every weight —
//! for each layer, for each direction, `W_i2h` (`G·H × I_l`) then `W_h2h`
//! (`G·H × H`), row-major — then every bias in the same order, `b_i2h`
//! and `b_h2h` (`G·H` each). `G` is 4 (lstm), 3 (gru) or 1, and `I_l` is
//! `I` for layer 0 and `D·H` after.
//!
//! # Outputs, and what backward reads
//!
//! The op has four outputs: `output`, `state_output`, `statecell_output`
//! (MXNet's names; shown as `state_outputs` and the mode say) and a hidden
//! `dropout_mask`, `((L − 1)·T·N·D·H,)` when `p > 0` (else empty), which a
//! training forward pass fills from the op's seeded random stream
//! (`0` or `1/(1 − p)`) and backward reads, so both see the same mask.
//! A GRU or vanilla RNN's `statecell_output` is hidden and zero.
//!
//! Backward does not read activations saved by the forward pass: it runs
//! the forward recurrence again, in f64 from the inputs (and the mask),
//! keeping every gate and state, then back-propagates through time. That
//! costs one more forward pass per backward, and saves holding `T·N·G·H`
//! values per layer and direction between the passes (memory the planner
//! would keep for every RNN node of a training graph), and it makes the
//! gradient independent of the output dtype's rounding of the saved
//! activations. The big products (every step's input projection, the
//! weight gradients) are single matrix products over all `T·N` rows; only the
//! `N × H` recurrent products run per step.
//!
//! Every dtype of float is computed in f64 and rounded once into the
//! outputs and gradients. Not implemented (errors naming the kwarg):
//! `projection_size`, `use_sequence_length`, `lstm_state_clip_min/max`
//! (MXNet 1.9.1's CPU kernel ignores the clip too).

use serde::{Deserialize, Serialize};
use simpleop::{
    Element, Float, OpReqType, Result, RunContext, Shape, TBlob, TBlobMut, dispatch_float,
    simple_op,
};

use crate::common::{bad_kwarg, float_error, shape_error};
use crate::linalg::matmul_f64;

const RNN: &str = "RNN";

/// Keyword arguments of [`rnn()`] (MXNet's `RNNParam`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct RnnParams {
    /// `H`, the units of each layer and direction (required).
    pub state_size: usize,
    /// `L`, the stacked layers (required).
    pub num_layers: usize,
    /// `rnn_relu`, `rnn_tanh`, `lstm` or `gru` (required).
    pub mode: String,
    /// Runs a second direction, backward in time, per layer.
    #[serde(default)]
    pub bidirectional: bool,
    /// Shows the final states `hy` (and `cy` for lstm) as outputs.
    #[serde(default)]
    pub state_outputs: bool,
    /// Dropout between layers, in training only, in `[0, 1)`.
    #[serde(default)]
    pub p: f64,
    /// LSTM projection (not implemented: must be unset).
    #[serde(default)]
    pub projection_size: Option<usize>,
    /// LSTM cell clipping (not implemented: must be unset).
    #[serde(default)]
    pub lstm_state_clip_min: Option<f64>,
    /// LSTM cell clipping (not implemented: must be unset).
    #[serde(default)]
    pub lstm_state_clip_max: Option<f64>,
    /// Accepted (only meaningful with clipping).
    #[serde(default)]
    pub lstm_state_clip_nan: bool,
    /// Variable sequence lengths (not implemented: must be false).
    #[serde(default)]
    pub use_sequence_length: bool,
}

impl Default for RnnParams {
    fn default() -> Self {
        RnnParams {
            state_size: 0,
            num_layers: 0,
            mode: "lstm".into(),
            bidirectional: false,
            state_outputs: false,
            p: 0.0,
            projection_size: None,
            lstm_state_clip_min: None,
            lstm_state_clip_max: None,
            lstm_state_clip_nan: false,
            use_sequence_length: false,
        }
    }
}

/// The cell kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Relu,
    Tanh,
    Lstm,
    Gru,
}

impl Mode {
    fn parse(s: &str) -> Result<Mode> {
        Ok(match s {
            "rnn_relu" => Mode::Relu,
            "rnn_tanh" => Mode::Tanh,
            "lstm" => Mode::Lstm,
            "gru" => Mode::Gru,
            m => {
                return Err(bad_kwarg(
                    RNN,
                    "mode",
                    format!("expected rnn_relu, rnn_tanh, lstm or gru, got `{m}`"),
                ));
            }
        })
    }
    /// Gates per unit, `G`.
    fn gates(self) -> usize {
        match self {
            Mode::Relu | Mode::Tanh => 1,
            Mode::Lstm => 4,
            Mode::Gru => 3,
        }
    }
}

/// Checks the kwargs; the mode.
fn check_kwargs(p: &RnnParams) -> Result<Mode> {
    let mode = Mode::parse(&p.mode)?;
    if p.state_size == 0 {
        return Err(bad_kwarg(RNN, "state_size", "expected at least 1, got 0"));
    }
    if p.num_layers == 0 {
        return Err(bad_kwarg(RNN, "num_layers", "expected at least 1, got 0"));
    }
    if !(0.0..1.0).contains(&p.p) {
        return Err(bad_kwarg(
            RNN,
            "p",
            format!("expected a number in [0, 1), got {}", p.p),
        ));
    }
    if let Some(n) = p.projection_size {
        return Err(bad_kwarg(
            RNN,
            "projection_size",
            format!("LSTM projection is not implemented (got {n}); leave it unset"),
        ));
    }
    for (arg, v) in [
        ("lstm_state_clip_min", p.lstm_state_clip_min),
        ("lstm_state_clip_max", p.lstm_state_clip_max),
    ] {
        if let Some(v) = v {
            return Err(bad_kwarg(
                RNN,
                arg,
                format!("cell-state clipping is not implemented (got {v}); leave it unset"),
            ));
        }
    }
    if p.use_sequence_length {
        return Err(bad_kwarg(
            RNN,
            "use_sequence_length",
            "variable sequence lengths are not implemented; expected false",
        ));
    }
    Ok(mode)
}

/// The argument names: `data`, `parameters`, `state`, and `state_cell`
/// for lstm (and `sequence_length` when asked for, which is refused).
fn rnn_arguments(p: &RnnParams) -> Vec<String> {
    let mut names = vec!["data", "parameters", "state"];
    if p.mode == "lstm" {
        names.push("state_cell");
    }
    if p.use_sequence_length {
        names.push("sequence_length");
    }
    names.into_iter().map(String::from).collect()
}

/// `output`, then `state_output` and, for lstm, `statecell_output` with
/// `state_outputs`.
fn rnn_visible(p: &RnnParams) -> usize {
    match (p.state_outputs, p.mode == "lstm") {
        (false, _) => 1,
        (true, false) => 2,
        (true, true) => 3,
    }
}

/// The sizes of one call, every product checked.
#[derive(Clone, Copy, Debug)]
struct Geo {
    mode: Mode,
    t: usize,
    n: usize,
    i: usize,
    h: usize,
    layers: usize,
    dirs: usize,
    /// `G·H`.
    gh: usize,
    /// The length of `parameters`.
    params: usize,
    /// The length of the dropout mask (0 without dropout).
    mask: usize,
}

fn too_big(what: &str) -> simpleop::Error {
    bad_kwarg(
        RNN,
        "state_size",
        format!("the {what} would have more elements than fit in memory"),
    )
}

impl Geo {
    fn new(data: &Shape, p: &RnnParams) -> Result<Geo> {
        let mode = check_kwargs(p)?;
        let &[t, n, i] = data.dims() else {
            return Err(shape_error(RNN, "data", "3-D (T, N, I), TNC layout", data));
        };
        if t == 0 || n == 0 || i == 0 {
            return Err(shape_error(RNN, "data", "no zero-sized dimension", data));
        }
        let (h, layers) = (p.state_size, p.num_layers);
        let dirs = if p.bidirectional { 2 } else { 1 };
        let gh = mode
            .gates()
            .checked_mul(h)
            .ok_or_else(|| too_big("gates"))?;
        let mut g = Geo {
            mode,
            t,
            n,
            i,
            h,
            layers,
            dirs,
            gh,
            params: 0,
            mask: 0,
        };
        g.params = g.param_len().ok_or_else(|| too_big("parameters"))?;
        let prod = |f: &[usize]| f.iter().try_fold(1usize, |a, &b| a.checked_mul(b));
        // Every layer's output, every gate kept for backward, the states.
        let outputs = prod(&[t, n, dirs, h, layers]).ok_or_else(|| too_big("layer outputs"))?;
        prod(&[t, n, gh.max(i), dirs, layers]).ok_or_else(|| too_big("saved gates"))?;
        prod(&[n, h, layers, dirs]).ok_or_else(|| too_big("states"))?;
        if p.p > 0.0 {
            g.mask = outputs / layers * (layers - 1);
        }
        Ok(g)
    }
    fn in_size(&self, l: usize) -> usize {
        if l == 0 { self.i } else { self.dirs * self.h }
    }
    /// `T·N`, the rows of every sequence matrix.
    fn rows(&self) -> usize {
        self.t * self.n
    }
    /// Σ over layers and directions of `G·H·(I_l + H + 2)`, checked; in
    /// closed form, so that a huge `num_layers` costs no loop.
    fn param_len(&self) -> Option<usize> {
        let per = |inl: usize| {
            inl.checked_add(self.h)?
                .checked_add(2)?
                .checked_mul(self.gh)?
                .checked_mul(self.dirs)
        };
        let upper = self.dirs.checked_mul(self.h)?;
        let rest = per(upper)?.checked_mul(self.layers - 1)?;
        per(self.i)?.checked_add(rest)
    }
    /// Where `W_i2h`, `W_h2h`, `b_i2h`, `b_h2h` of layer `l`, direction
    /// `d` start in `parameters`.
    fn offsets(&self, l: usize, d: usize) -> [usize; 4] {
        let (mut w, mut b) = (0, 0);
        for ll in 0..self.layers {
            for dd in 0..self.dirs {
                if (ll, dd) == (l, d) {
                    let wx = self.gh * self.in_size(l);
                    let bias_start = self.weights_len();
                    return [w, w + wx, bias_start + b, bias_start + b + self.gh];
                }
                w += self.gh * (self.in_size(ll) + self.h);
                b += 2 * self.gh;
            }
        }
        unreachable!("layer {l}, direction {d} out of range")
    }
    fn weights_len(&self) -> usize {
        (0..self.layers)
            .map(|l| self.dirs * self.gh * (self.in_size(l) + self.h))
            .sum()
    }
    /// `(L·D, N, H)`.
    fn state_shape(&self) -> Shape {
        Shape::new(vec![self.layers * self.dirs, self.n, self.h])
    }
    fn out_shape(&self) -> Shape {
        Shape::new(vec![self.t, self.n, self.dirs * self.h])
    }
    fn param_shape(&self) -> Shape {
        Shape::new(vec![self.params])
    }
    /// The expected shapes of the arguments after `data`.
    fn argument_shapes(&self) -> Vec<(&'static str, Shape)> {
        let mut v = vec![
            ("parameters", self.param_shape()),
            ("state", self.state_shape()),
        ];
        if self.mode == Mode::Lstm {
            v.push(("state_cell", self.state_shape()));
        }
        v
    }
}

/// Checks every argument's shape against `data`'s.
fn check_arguments(g: &Geo, shapes: &[&Shape]) -> Result<()> {
    let want = g.argument_shapes();
    if shapes.len() != want.len() + 1 {
        return Err(simpleop::Error::Arity {
            op: RNN.into(),
            expected: want.len() + 1,
            got: shapes.len(),
        });
    }
    for ((arg, w), got) in want.iter().zip(&shapes[1..]) {
        if *got != w {
            let why = match *arg {
                "parameters" => format!(
                    "{w}: the packed weights and biases of {} layer(s) \
                     for `data` {} and state_size {}",
                    g.layers, shapes[0], g.h
                ),
                _ => format!("{w}: (num_layers·directions, batch, state_size)"),
            };
            return Err(shape_error(RNN, arg, why, got));
        }
    }
    Ok(())
}

/// MXNet's `RNN`: a fused multi-layer, optionally bidirectional LSTM,
/// GRU or vanilla RNN over a `(T, N, I)` sequence (see the module
/// documentation for the formulas and the `parameters` layout). Inputs
/// `data`, `parameters`, `state` and, for lstm, `state_cell`; outputs
/// `output` and, with `state_outputs`, `state_output` (and for lstm
/// `statecell_output`). Gradients for every input through time, with head
/// gradients on every shown output.
#[simple_op(
    blob,
    name = "RNN",
    kwargs = RnnParams,
    arguments = super::rnn_arguments,
    outputs = 4,
    visible_outputs = super::rnn_visible,
    output_names = ["output", "state_output", "statecell_output", "dropout_mask"],
    resources(rng)
)]
pub mod rnn {
    use super::RnnParams;
    use simpleop::prelude::*;

    /// `(T, N, D·H)`, the states' shape twice and the mask's; checks
    /// every argument against `data`.
    pub fn shape(inputs: &[Shape], p: &RnnParams) -> Result<Vec<Shape>> {
        let g = super::Geo::new(&inputs[0], p)?;
        let refs: Vec<&Shape> = inputs.iter().collect();
        super::check_arguments(&g, &refs)?;
        let s = g.state_shape();
        Ok(vec![g.out_shape(), s.clone(), s, Shape::new(vec![g.mask])])
    }

    /// `data`'s float dtype for every output; the other arguments share it.
    pub fn dtype(inputs: &[DType], p: &RnnParams) -> Result<Vec<DType>> {
        super::rnn_dtypes(inputs, p)
    }

    /// `parameters`, `state` and `state_cell` from `data`'s shape.
    pub fn input_shapes(shapes: &mut [Option<Shape>], p: &RnnParams) -> Result<()> {
        if let Some(data) = shapes[0].clone() {
            let g = super::Geo::new(&data, p)?;
            for (s, (_, want)) in shapes[1..].iter_mut().zip(g.argument_shapes()) {
                if s.is_none() {
                    *s = Some(want);
                }
            }
        }
        Ok(())
    }

    /// Runs the layers; draws the dropout mask in training.
    pub fn forward(
        inputs: &[TBlob<'_>],
        outs: &mut [TBlobMut<'_>],
        reqs: &[OpReqType],
        ctx: &RunContext,
        p: &RnnParams,
        env: &EnvArguments,
    ) -> Result<()> {
        super::rnn_forward(inputs, outs, reqs, ctx, p, env)
    }

    /// Runs the layers again, keeping every gate, then back-propagates
    /// through time.
    pub fn backward(
        dys: OutGrads<&[Option<TBlob<'_>>]>,
        ys: OutValues<&[TBlob<'_>]>,
        x: Inputs<&[TBlob<'_>]>,
        grads: &mut [TBlobMut<'_>],
        reqs: &[OpReqType],
        p: &RnnParams,
    ) -> Result<()> {
        super::rnn_backward(&dys, &ys, &x, grads, reqs, p)
    }
}

fn rnn_dtypes(inputs: &[simpleop::DType], p: &RnnParams) -> Result<Vec<simpleop::DType>> {
    let data = *inputs
        .first()
        .ok_or_else(|| simpleop::Error::invalid(RNN, "data", "missing"))?;
    crate::common::require_float(RNN, "data", data)?;
    for (arg, &d) in rnn_arguments(p).iter().zip(inputs).skip(1) {
        crate::common::require_same_dtype(RNN, arg, d, data, "data")?;
    }
    Ok(vec![data; 4])
}

/// A blob's values as f64, after checking its dtype is `dtype`.
fn values(b: &TBlob<'_>, arg: &str, dtype: simpleop::DType) -> Result<Vec<f64>> {
    crate::common::require_same_dtype(RNN, arg, b.dtype(), dtype, "data")?;
    dispatch_float!(dtype, T => {
        Ok(b.as_slice::<T>()?.iter().map(|v| v.to_f64()).collect())
    }, _ => Err(float_error(RNN, arg, dtype)))
}

/// `dst (=|+=) vals` per `req`, rounded once to `dst`'s dtype.
fn store(dst: &mut TBlobMut<'_>, arg: &str, vals: &[f64], req: OpReqType) -> Result<()> {
    if req == OpReqType::Null {
        return Ok(());
    }
    if dst.len() != vals.len() {
        return Err(simpleop::Error::invalid(
            RNN,
            arg,
            format!("expected {} elements, got {}", vals.len(), dst.len()),
        ));
    }
    let dtype = dst.dtype();
    dispatch_float!(dtype, T => {
        let from = <<T as Float>::Compute as Element>::from_f64;
        for (o, &v) in dst.as_slice_mut::<T>()?.iter_mut().zip(vals) {
            req.assign(o, from(v));
        }
        Ok(())
    }, _ => Err(float_error(RNN, arg, dtype)))
}

/// The arguments of one call as f64, checked against `data`.
struct Args {
    g: Geo,
    x: Vec<f64>,
    w: Vec<f64>,
    hx: Vec<f64>,
    cx: Vec<f64>,
}

fn read_args(inputs: &[TBlob<'_>], p: &RnnParams) -> Result<Args> {
    let data = inputs
        .first()
        .ok_or_else(|| simpleop::Error::invalid(RNN, "data", "missing"))?;
    let g = Geo::new(data.shape(), p)?;
    let shapes: Vec<&Shape> = inputs.iter().map(TBlob::shape).collect();
    check_arguments(&g, &shapes)?;
    let dtype = crate::common::require_float(RNN, "data", data.dtype())?;
    let cx = match g.mode {
        Mode::Lstm => values(&inputs[3], "state_cell", dtype)?,
        _ => vec![0.0; g.layers * g.dirs * g.n * g.h],
    };
    Ok(Args {
        g,
        x: values(data, "data", dtype)?,
        w: values(&inputs[1], "parameters", dtype)?,
        hx: values(&inputs[2], "state", dtype)?,
        cx,
    })
}

/// Draws the dropout mask (`0` or `1/(1 − p)` per element) for the layer
/// outputs that feed another layer. The scale is rounded to `dtype`, as
/// the hidden output that backward reads holds it.
fn draw_mask(g: &Geo, p: f64, dtype: simpleop::DType, env: &simpleop::EnvArguments) -> Vec<f64> {
    let keep = 1.0 - p;
    let scale = dispatch_float!(dtype, T => T::from_f64(1.0 / keep).to_f64(), _ => 1.0 / keep);
    let mut rng = simpleop::Rng::new(env.seed_or_draw(), 0);
    (0..g.mask)
        .map(|_| if rng.uniform() < keep { scale } else { 0.0 })
        .collect()
}

fn rnn_forward(
    inputs: &[TBlob<'_>],
    outs: &mut [TBlobMut<'_>],
    reqs: &[OpReqType],
    ctx: &RunContext,
    p: &RnnParams,
    env: &simpleop::EnvArguments,
) -> Result<()> {
    let a = read_args(inputs, p)?;
    let g = a.g;
    let dtype = inputs[0].dtype();
    let mask = (ctx.is_train && g.mask > 0).then(|| draw_mask(&g, p.p, dtype, env));
    let run = run_layers(&a, mask.as_deref());
    let ([out, hy, cy, mk], 4) = (outs, reqs.len()) else {
        return Err(simpleop::Error::invalid(
            RNN,
            "outputs",
            "expected 4 outputs and 4 requests",
        ));
    };
    store(out, "output", &run.out, reqs[0])?;
    store(hy, "state_output", &run.hy, reqs[1])?;
    store(cy, "statecell_output", &run.cy, reqs[2])?;
    if g.mask > 0 && reqs[3] != OpReqType::Null {
        let ones;
        let m = match &mask {
            Some(m) => m,
            None => {
                ones = vec![1.0; g.mask];
                &ones
            }
        };
        store(mk, "dropout_mask", m, reqs[3])?;
    }
    Ok(())
}

/// One direction of one layer, as the forward pass left it: per step
/// (indexed by time, `T × N × ·`), the gates after their activations, the
/// state `h`, the cell `c` (lstm) and `W_hn h + b_hn` (gru).
struct DirTrace {
    gates: Vec<f64>,
    h: Vec<f64>,
    c: Vec<f64>,
    hn: Vec<f64>,
}

/// The whole forward pass: each layer's input, its directions' traces,
/// and the results.
struct Run {
    inputs: Vec<Vec<f64>>,
    traces: Vec<Vec<DirTrace>>,
    out: Vec<f64>,
    hy: Vec<f64>,
    cy: Vec<f64>,
}

/// The time steps of direction `d` in the order it visits them.
fn steps(t: usize, d: usize) -> impl Iterator<Item = usize> {
    (0..t).map(move |s| if d == 0 { s } else { t - 1 - s })
}

fn sigmoid(v: f64) -> f64 {
    1.0 / (1.0 + (-v).exp())
}

fn run_layers(a: &Args, mask: Option<&[f64]>) -> Run {
    let g = &a.g;
    let nh = g.n * g.h;
    let width = g.dirs * g.h;
    let layer_len = g.rows() * width;
    let mut run = Run {
        inputs: Vec::with_capacity(g.layers),
        traces: Vec::with_capacity(g.layers),
        out: Vec::new(),
        hy: vec![0.0; g.layers * g.dirs * nh],
        cy: vec![0.0; g.layers * g.dirs * nh],
    };
    let mut x = a.x.clone();
    for l in 0..g.layers {
        let mut y = vec![0.0; layer_len];
        let mut dirs = Vec::with_capacity(g.dirs);
        for d in 0..g.dirs {
            let s = (l * g.dirs + d) * nh;
            let tr = run_direction(g, &a.w, (l, d), &x, &a.hx[s..s + nh], &a.cx[s..s + nh]);
            let last = if d == 0 { g.t - 1 } else { 0 };
            run.hy[s..s + nh].copy_from_slice(&tr.h[last * nh..(last + 1) * nh]);
            if g.mode == Mode::Lstm {
                run.cy[s..s + nh].copy_from_slice(&tr.c[last * nh..(last + 1) * nh]);
            }
            for (r, hrow) in tr.h.chunks_exact(g.h).enumerate() {
                y[r * width + d * g.h..r * width + (d + 1) * g.h].copy_from_slice(hrow);
            }
            dirs.push(tr);
        }
        run.traces.push(dirs);
        let next = match mask {
            Some(m) if l + 1 < g.layers => {
                let m = &m[l * layer_len..(l + 1) * layer_len];
                y.iter().zip(m).map(|(v, k)| v * k).collect()
            }
            _ => y,
        };
        run.inputs.push(std::mem::replace(&mut x, next));
    }
    run.out = x;
    run
}

/// Adds `bias` to every row of `m`.
fn add_rows(m: &mut [f64], bias: &[f64]) {
    for row in m.chunks_exact_mut(bias.len()) {
        row.iter_mut().zip(bias).for_each(|(v, b)| *v += b);
    }
}

/// One direction of layer `l` over the whole sequence `x` (`T·N × I_l`).
fn run_direction(
    g: &Geo,
    w: &[f64],
    (l, d): (usize, usize),
    x: &[f64],
    h0: &[f64],
    c0: &[f64],
) -> DirTrace {
    let (gh, h, nh, inl) = (g.gh, g.h, g.n * g.h, g.in_size(l));
    let [wx, wh, bx, bh] = g.offsets(l, d);
    let (wx, wh) = (&w[wx..wx + gh * inl], &w[wh..wh + gh * h]);
    let (bx, bh) = (&w[bx..bx + gh], &w[bh..bh + gh]);
    // Every step's input projection in one product.
    let mut xg = vec![0.0; g.rows() * gh];
    matmul_f64((g.rows(), gh, inl), x, false, wx, true, &mut xg, false);
    add_rows(&mut xg, bx);
    let mut tr = DirTrace {
        gates: vec![0.0; g.rows() * gh],
        h: vec![0.0; g.rows() * h],
        c: if g.mode == Mode::Lstm {
            vec![0.0; g.rows() * h]
        } else {
            Vec::new()
        },
        hn: if g.mode == Mode::Gru {
            vec![0.0; g.rows() * h]
        } else {
            Vec::new()
        },
    };
    let (mut hp, mut cp) = (h0.to_vec(), c0.to_vec());
    let mut hg = vec![0.0; g.n * gh];
    for t in steps(g.t, d) {
        matmul_f64((g.n, gh, h), &hp, false, wh, true, &mut hg, false);
        add_rows(&mut hg, bh);
        for b in 0..g.n {
            let row = t * g.n + b;
            let pre = Pre {
                xg: &xg[row * gh..(row + 1) * gh],
                hg: &hg[b * gh..(b + 1) * gh],
            };
            cell_forward(
                g,
                &pre,
                &hp[b * h..(b + 1) * h],
                &cp[b * h..(b + 1) * h],
                row,
                &mut tr,
            );
        }
        hp.copy_from_slice(&tr.h[t * nh..(t + 1) * nh]);
        if g.mode == Mode::Lstm {
            cp.copy_from_slice(&tr.c[t * nh..(t + 1) * nh]);
        }
    }
    tr
}

/// One row's input and recurrent projections (biases included).
struct Pre<'a> {
    xg: &'a [f64],
    hg: &'a [f64],
}

/// One step of one batch row: writes row `row` of the trace.
fn cell_forward(g: &Geo, pre: &Pre<'_>, hp: &[f64], cp: &[f64], row: usize, tr: &mut DirTrace) {
    let (h, gh) = (g.h, g.gh);
    let gates = &mut tr.gates[row * gh..(row + 1) * gh];
    let hout = &mut tr.h[row * h..(row + 1) * h];
    let sum = |k: usize| pre.xg[k] + pre.hg[k];
    for j in 0..h {
        match g.mode {
            Mode::Tanh => {
                gates[j] = sum(j).tanh();
                hout[j] = gates[j];
            }
            Mode::Relu => {
                gates[j] = sum(j).max(0.0);
                hout[j] = gates[j];
            }
            Mode::Lstm => {
                let (i, f) = (sigmoid(sum(j)), sigmoid(sum(h + j)));
                let (c, o) = (sum(2 * h + j).tanh(), sigmoid(sum(3 * h + j)));
                let cell = f * cp[j] + i * c;
                [gates[j], gates[h + j], gates[2 * h + j], gates[3 * h + j]] = [i, f, c, o];
                tr.c[row * h + j] = cell;
                hout[j] = o * cell.tanh();
            }
            Mode::Gru => {
                let (r, z) = (sigmoid(sum(j)), sigmoid(sum(h + j)));
                let hn = pre.hg[2 * h + j];
                let n = (pre.xg[2 * h + j] + r * hn).tanh();
                [gates[j], gates[h + j], gates[2 * h + j]] = [r, z, n];
                tr.hn[row * h + j] = hn;
                hout[j] = (1.0 - z) * n + z * hp[j];
            }
        }
    }
}

/// A head gradient as f64: zeros when absent, its shape checked.
fn head_grad(dy: Option<&TBlob<'_>>, arg: &str, want: &Shape) -> Result<Vec<f64>> {
    match dy {
        None => Ok(vec![0.0; want.size()]),
        Some(b) => {
            if b.shape() != want {
                return Err(shape_error(RNN, arg, want.to_string(), b.shape()));
            }
            let dtype = crate::common::require_float(RNN, arg, b.dtype())?;
            dispatch_float!(dtype, T => {
                Ok(b.as_slice::<T>()?.iter().map(|v| v.to_f64()).collect())
            }, _ => Err(float_error(RNN, arg, dtype)))
        }
    }
}

/// The gradients of one call, f64.
struct Grads {
    x: Vec<f64>,
    w: Vec<f64>,
    hx: Vec<f64>,
    cx: Vec<f64>,
}

fn rnn_backward(
    dys: &[Option<TBlob<'_>>],
    ys: &[TBlob<'_>],
    inputs: &[TBlob<'_>],
    grads: &mut [TBlobMut<'_>],
    reqs: &[OpReqType],
    p: &RnnParams,
) -> Result<()> {
    let a = read_args(inputs, p)?;
    let g = a.g;
    if dys.len() != 4 || ys.len() != 4 || grads.len() != inputs.len() || reqs.len() != grads.len() {
        return Err(simpleop::Error::invalid(
            RNN,
            "outputs",
            "expected 4 outputs and one gradient per input",
        ));
    }
    let mask = match g.mask {
        0 => None,
        _ => Some(values(&ys[3], "dropout_mask", inputs[0].dtype())?),
    };
    if let Some(m) = &mask
        && m.len() != g.mask
    {
        return Err(shape_error(
            RNN,
            "dropout_mask",
            format!("({},)", g.mask),
            ys[3].shape(),
        ));
    }
    let run = run_layers(&a, mask.as_deref());
    let states = g.state_shape();
    let heads = [
        head_grad(dys[0].as_ref(), "output_grad", &g.out_shape())?,
        head_grad(dys[1].as_ref(), "state_output_grad", &states)?,
        head_grad(dys[2].as_ref(), "statecell_output_grad", &states)?,
    ];
    let gr = backprop(&a, &run, &heads, mask.as_deref());
    let names = [
        "data_grad",
        "parameters_grad",
        "state_grad",
        "state_cell_grad",
    ];
    let vals = [&gr.x, &gr.w, &gr.hx, &gr.cx];
    for (k, grad) in grads.iter_mut().enumerate() {
        store(grad, names[k], vals[k], reqs[k])?;
    }
    Ok(())
}

/// Back-propagation through time over every layer, top first. `heads`
/// are the gradients of `out`, `hy` and `cy`.
fn backprop(a: &Args, run: &Run, heads: &[Vec<f64>; 3], mask: Option<&[f64]>) -> Grads {
    let g = &a.g;
    let nh = g.n * g.h;
    let layer_len = g.rows() * g.dirs * g.h;
    let mut gr = Grads {
        x: Vec::new(),
        w: vec![0.0; g.params],
        hx: vec![0.0; g.layers * g.dirs * nh],
        cx: vec![0.0; g.layers * g.dirs * nh],
    };
    let mut dy = heads[0].clone();
    for l in (0..g.layers).rev() {
        let x = &run.inputs[l];
        let mut dx = vec![0.0; x.len()];
        for d in 0..g.dirs {
            let s = (l * g.dirs + d) * nh;
            let init = State {
                h: &a.hx[s..s + nh],
                c: &a.cx[s..s + nh],
            };
            let dlast = (heads[1][s..s + nh].to_vec(), heads[2][s..s + nh].to_vec());
            let tr = &run.traces[l][d];
            let (dh0, dc0) = back_direction(
                g,
                &a.w,
                (l, d),
                x,
                tr,
                &init,
                &dy,
                dlast,
                &mut gr.w,
                &mut dx,
            );
            gr.hx[s..s + nh].copy_from_slice(&dh0);
            if g.mode == Mode::Lstm {
                gr.cx[s..s + nh].copy_from_slice(&dc0);
            }
        }
        dy = match mask {
            Some(m) if l > 0 => {
                let m = &m[(l - 1) * layer_len..l * layer_len];
                dx.iter().zip(m).map(|(v, k)| v * k).collect()
            }
            _ => dx,
        };
    }
    gr.x = dy;
    gr
}

/// A direction's initial state.
struct State<'a> {
    h: &'a [f64],
    c: &'a [f64],
}

/// The pre-activation gradients of one direction, by time (`T·N × G·H`):
/// the input projection's `dx`, and the recurrent one's `dh` when it
/// differs (gru's `n` gate; empty otherwise), with the state each step
/// read (`hprev`, `T·N × H`).
struct PreGrads {
    dx: Vec<f64>,
    dh: Vec<f64>,
    hprev: Vec<f64>,
}

impl PreGrads {
    /// The recurrent projection's gradients.
    fn recurrent(&self) -> &[f64] {
        if self.dh.is_empty() {
            &self.dx
        } else {
            &self.dh
        }
    }
}

/// The gradients of one direction of layer `l`: accumulates into the
/// weights' gradient `dw` and the layer input's `dx`; returns those of
/// the initial `h` and `c`. `dlast` are the gradients of the final `h`
/// and `c` (heads on `hy`, `cy`).
#[allow(clippy::too_many_arguments)] // one direction's inputs, trace and both gradient sinks
fn back_direction(
    g: &Geo,
    w: &[f64],
    (l, d): (usize, usize),
    x: &[f64],
    tr: &DirTrace,
    init: &State<'_>,
    dy: &[f64],
    (mut dh, mut dc): (Vec<f64>, Vec<f64>),
    dw: &mut [f64],
    dx: &mut [f64],
) -> (Vec<f64>, Vec<f64>) {
    let (gh, h, nh, rows) = (g.gh, g.h, g.n * g.h, g.rows());
    let owh = g.offsets(l, d)[1];
    let wh = &w[owh..owh + gh * h];
    let gru = g.mode == Mode::Gru;
    let mut pg = PreGrads {
        dx: vec![0.0; rows * gh],
        dh: if gru {
            vec![0.0; rows * gh]
        } else {
            Vec::new()
        },
        hprev: vec![0.0; rows * h],
    };
    // gru's `z ⊙ dh`: the part of the previous state's gradient that
    // skips the recurrent product.
    let mut dh_direct = vec![0.0; nh];
    let order: Vec<usize> = steps(g.t, d).collect();
    for (s, &t) in order.iter().enumerate().rev() {
        let prev = (s > 0).then(|| order[s - 1]);
        let hp = prev.map_or(init.h, |p| &tr.h[p * nh..(p + 1) * nh]);
        pg.hprev[t * nh..(t + 1) * nh].copy_from_slice(hp);
        let cp = match g.mode {
            Mode::Lstm => prev.map_or(init.c, |p| &tr.c[p * nh..(p + 1) * nh]),
            _ => init.c,
        };
        add_out_grad(g, d, t, dy, &mut dh);
        let span = t * g.n * gh..(t + 1) * g.n * gh;
        let dhg = gru.then(|| &mut pg.dh[span.clone()]);
        let step = Step { t, hp, cp };
        let dxg = &mut pg.dx[span.clone()];
        cell_backward(g, tr, &step, &dh, &mut dc, dxg, dhg, &mut dh_direct);
        let rec = &pg.recurrent()[span];
        matmul_f64((g.n, h, gh), rec, false, wh, false, &mut dh, false);
        dh.iter_mut().zip(&dh_direct).for_each(|(v, e)| *v += e);
    }
    weight_grads(g, w, (l, d), x, &pg, dw, dx);
    (dh, dc)
}

/// `dh += dy[t]`: the layer output's gradient at step `t`, direction `d`.
fn add_out_grad(g: &Geo, d: usize, t: usize, dy: &[f64], dh: &mut [f64]) {
    let width = g.dirs * g.h;
    for b in 0..g.n {
        let at = (t * g.n + b) * width + d * g.h;
        dh[b * g.h..(b + 1) * g.h]
            .iter_mut()
            .zip(&dy[at..at + g.h])
            .for_each(|(v, e)| *v += e);
    }
}

/// From one direction's pre-activation gradients: the weights' and
/// biases' gradients (added into `dw`) and the layer input's (added into
/// `dx`), each one product over all `T·N` rows.
fn weight_grads(
    g: &Geo,
    w: &[f64],
    (l, d): (usize, usize),
    x: &[f64],
    pg: &PreGrads,
    dw: &mut [f64],
    dx: &mut [f64],
) {
    let (gh, h, inl, rows) = (g.gh, g.h, g.in_size(l), g.rows());
    let [owx, owh, obx, obh] = g.offsets(l, d);
    let dwx = &mut dw[owx..owx + gh * inl];
    matmul_f64((gh, inl, rows), &pg.dx, true, x, false, dwx, true);
    let dwh = &mut dw[owh..owh + gh * h];
    matmul_f64(
        (gh, h, rows),
        pg.recurrent(),
        true,
        &pg.hprev,
        false,
        dwh,
        true,
    );
    for (bias, src) in [(obx, &pg.dx[..]), (obh, pg.recurrent())] {
        let db = &mut dw[bias..bias + gh];
        for row in src.chunks_exact(gh) {
            db.iter_mut().zip(row).for_each(|(o, v)| *o += v);
        }
    }
    let wx = &w[owx..owx + gh * inl];
    matmul_f64((rows, inl, gh), &pg.dx, false, wx, false, dx, true);
}

/// One step's time index and the state it read.
struct Step<'a> {
    t: usize,
    hp: &'a [f64],
    cp: &'a [f64],
}

/// One step's gradients for every batch row: from `dh` (the step's `h`
/// gradient) and `dc` (lstm: its `c`'s, replaced by the previous `c`'s),
/// writes the pre-activation gradients `dxg` (and gru's recurrent ones
/// `dhg`) and the part of the previous `h`'s gradient that skips the
/// recurrent product (`dh_direct`: gru's `z ⊙ dh`, else zero).
#[allow(clippy::too_many_arguments)] // the step, its trace and four gradient buffers
fn cell_backward(
    g: &Geo,
    tr: &DirTrace,
    st: &Step<'_>,
    dh: &[f64],
    dc: &mut [f64],
    dxg: &mut [f64],
    mut dhg: Option<&mut [f64]>,
    dh_direct: &mut [f64],
) {
    let (h, gh) = (g.h, g.gh);
    for b in 0..g.n {
        let row = st.t * g.n + b;
        let gates = &tr.gates[row * gh..(row + 1) * gh];
        let dpre = &mut dxg[b * gh..(b + 1) * gh];
        for j in 0..h {
            let k = b * h + j;
            let dhk = dh[k];
            match g.mode {
                Mode::Tanh => dpre[j] = dhk * (1.0 - gates[j] * gates[j]),
                Mode::Relu => dpre[j] = if gates[j] > 0.0 { dhk } else { 0.0 },
                Mode::Lstm => {
                    let [i, f, c, o] = [gates[j], gates[h + j], gates[2 * h + j], gates[3 * h + j]];
                    let tc = tr.c[row * h + j].tanh();
                    let dct = dc[k] + dhk * o * (1.0 - tc * tc);
                    dpre[j] = dct * c * i * (1.0 - i);
                    dpre[h + j] = dct * st.cp[k] * f * (1.0 - f);
                    dpre[2 * h + j] = dct * i * (1.0 - c * c);
                    dpre[3 * h + j] = dhk * tc * o * (1.0 - o);
                    dc[k] = dct * f;
                }
                Mode::Gru => {
                    let [r, z, n] = [gates[j], gates[h + j], gates[2 * h + j]];
                    let dn = dhk * (1.0 - z) * (1.0 - n * n);
                    let dr = dn * tr.hn[row * h + j] * r * (1.0 - r);
                    let dz = dhk * (st.hp[k] - n) * z * (1.0 - z);
                    [dpre[j], dpre[h + j], dpre[2 * h + j]] = [dr, dz, dn];
                    if let Some(dhg) = dhg.as_deref_mut() {
                        let rec = &mut dhg[b * gh..(b + 1) * gh];
                        [rec[j], rec[h + j], rec[2 * h + j]] = [dr, dz, dn * r];
                    }
                    dh_direct[k] = dhk * z;
                }
            }
        }
    }
}

const PARAM_CONCAT: &str = "_rnn_param_concat";

/// MXNet's `_rnn_param_concat`: `Concat` under the name Gluon's RNN layers
/// export for packing their weights and biases (flattened) into
/// [`rnn()`]'s `parameters`; same kwargs (`num_args`, `dim`), kernels and
/// gradient. MXNet's version also fills one input of unknown length from
/// a known output; simpleop's backward shape inference sees the inputs
/// only, so the inputs' shapes must be known: Gluon writes them as
/// `__shape__` hints when the layer's `input_size` is given, and the
/// weights' own shapes give them otherwise.
#[simple_op(
    blob,
    name = "_rnn_param_concat",
    kwargs = crate::join::ConcatParams,
    arguments = crate::join::concat_arguments,
    pattern = "injective",
    linear
)]
pub mod rnn_param_concat {
    use crate::join::ConcatParams;
    use simpleop::prelude::*;

    /// The inputs' shape with `dim` the sum of theirs.
    pub fn shape(inputs: &[Shape], p: &ConcatParams) -> Result<Shape> {
        crate::join::concat_shape(super::PARAM_CONCAT, inputs, p)
    }

    /// Any dtype; the inputs share one.
    pub fn dtype(inputs: &[DType], _p: &ConcatParams) -> Result<DType> {
        crate::join::same_dtype(super::PARAM_CONCAT, inputs)
    }

    /// Copies each input's blocks into place.
    pub fn forward(
        inputs: &[TBlob<'_>],
        out: &mut TBlobMut<'_>,
        req: OpReqType,
        p: &ConcatParams,
    ) -> Result<()> {
        crate::join::concat_forward(super::PARAM_CONCAT, inputs, out, req, p)
    }

    /// Each input's gradient is its piece of `dy`.
    pub fn backward(
        dy: OutGrad<&TBlob<'_>>,
        grads: &mut [TBlobMut<'_>],
        reqs: &[OpReqType],
        p: &ConcatParams,
    ) -> Result<()> {
        crate::join::concat_backward(super::PARAM_CONCAT, &dy, grads, reqs, p)
    }
}
