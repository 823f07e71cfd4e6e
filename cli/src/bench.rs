//! The kernel benchmark behind `simpleop bench`: every row with a baseline
//! is timed in alternating pairs with its baseline's call, and its ratio is
//! the median of the pairs' ratios (see `time_paired`; it is not the
//! quotient of the two rows' printed medians), because absolute speeds
//! drift on a shared machine, even within one run, while ratios of calls
//! made moments apart hold.
//!
//! Rows (16M f32 elements unless named otherwise):
//! * `stream/copy` and `stream/triad`: STREAM-style baselines over the same
//!   bytes as a unary and a binary op, vectorised and split over the same
//!   threads as the kernels; `stream/read2`: the same for reading two
//!   arrays and writing nothing (a dot product in 32 f32 sums per thread),
//!   what a reduction of two inputs moves.
//! * `<op>/f32/out`: the op into an existing output (`out=`), against the
//!   baseline for its bytes; `<op>/f32/fresh`: a new output per call,
//!   against `out=` (the pooled allocator's job).
//! * `<op>/f16/out`, `<op>/bf16/out`: against the f32 row (half the bytes);
//!   `tanh/<half>/computed`: lookup tables off (`Tuning::half_tables` off),
//!   against the `out=` row: what reading a table instead of computing buys
//!   (about 1 where the table lost its timing and is not read anyway).
//! * `<op>/f32/scalar-isa`: the same kernel compiled without SIMD
//!   (`simd::Isa::Scalar`), against the vectorised row: what vectorising
//!   the author's scalar code buys (`smooth_l1` has a branch).
//! * `<op>/f32/no-prefetch` (relu, exp, tanh): software prefetching of
//!   the next block off (`Tuning::prefetch` off), against the `out=` row:
//!   what asking for memory ahead buys (about 1 on AMD CPUs, where
//!   single-op loops do not prefetch: `Tuning::op_loop_prefetch`).
//! * `chain6/eager`: six elementwise ops one after another, against one
//!   `elemwise_add`.
//! * `chain6/fused`: the same chain as a graph with fusion on (one pass:
//!   read x and y, write the result), against one `elemwise_add`;
//!   `chain6/fused/bandwidth` is the same call against `stream/triad`
//!   (same bytes); `chain6/fused/cached-stores`: streaming stores of the
//!   output off (`Tuning::stream_stores` off), against `chain6/fused`;
//!   `chain6/fused/interpreted`: code generation off
//!   (`BindConfig::codegen` off), so the tile interpreter runs the ops,
//!   against `chain6/fused`;
//!   `chain6/unfused`: fusion off, against `chain6/fused` (the ratio is
//!   what fusion buys).
//! * `smooth_l1/composed-fused`: `smooth_l1` written as `where(|x| < 1,
//!   0.5 x², |x| - 0.5)` from six primitive ops, fused, against the
//!   registered op; `smooth_l1/composed-interpreted`: code generation off,
//!   against the compiled row.
//! * `row_sq_dist/fused`: `sum((x - y)², axis = 1)` over 1,024-element rows
//!   of the same number of f32 elements, fused (the squares are summed in
//!   registers by the compiled program, or from L1 where the program is
//!   interpreted: a row sink), against one `elemwise_add`
//!   (which reads the same two inputs); `row_sq_dist/fused/bandwidth`: the
//!   same call against `stream/read2` (the same bytes, so about 1 when the
//!   reduction runs at the speed of reading memory);
//!   `row_sq_dist/fused-slabs`: row
//!   sinks off (`BindConfig::row_sinks` off), so the program writes slabs of
//!   squares that the reduction then reads from cache, against
//!   `row_sq_dist/fused`; `row_sq_dist/unfused` against `row_sq_dist/fused`.
//! * `dot/1024/f32`: 1024² matrix product (baseline: none; see `peers.py`).
//! * `dense/dot`: `dot(x, w)` of `(n/1024, 64) · (64, 1024)` into an
//!   existing output; `dense/fused`: `relu(dot(x, w) + b)` as a graph with
//!   fusion on (the product runs slab by slab and the bias and relu read
//!   it from cache), against `dense/dot`; `dense/unfused` against it.
//! * `tiny/relu/typed` and `tiny/relu/by-name`: µs per call on one element.
//!
//! Ops are called by name, so the rows need the standard ops linked in.

use std::hint::black_box;
use std::time::Instant;

use rayon::prelude::*;

use std::collections::HashMap;

use simpleop::__private::engine::isa::{self as simd, TileJob};
use simpleop::symbol::{BindConfig, Symbol};
use simpleop::{Attrs, DType, Isa, NDArray, OpReqType, Result, Tuning, eager};

/// One measured row.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// What was measured.
    pub name: String,
    /// Median wall time per call, in ms (µs for `tiny/` rows is `ms × 1000`).
    pub ms: f64,
    /// The row this one is compared with.
    pub baseline: Option<String>,
    /// `ms / baseline ms`.
    pub ratio: Option<f64>,
}

impl Row {
    /// The row as one JSON object (`name`, `ms`, `baseline`, `ratio`).
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "name": self.name,
            "ms": self.ms,
            "baseline": self.baseline,
            "ratio": self.ratio,
        })
        .to_string()
    }
}

/// The machine and run behind the rows, as the JSON object that
/// `simpleop bench --json` prints before them: `{"meta": {"cpu", "isa",
/// "threads", "date", "profile", "elements", "reps"}}`. `cpu` is the model
/// name in `/proc/cpuinfo` ("unknown" without one), `isa` the kernels'
/// active ISA, `date` the UTC day, `profile` "debug" or "release" (the
/// `bench` profile inherits release and reads "release" too).
pub fn meta_json(opts: Options) -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .filter(|l| l.starts_with("model name"))
                .find_map(|l| l.split_once(':').map(|(_, v)| v.trim().to_owned()))
        })
        .unwrap_or_else(|| "unknown".into());
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // The civil date of a day count since 1970-01-01 (Howard Hinnant's
    // `civil_from_days`).
    let z = (secs / 86_400) as i64 + 719_468;
    let (era, doe) = (z.div_euclid(146_097), z.rem_euclid(146_097));
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    serde_json::json!({ "meta": {
        "cpu": cpu,
        "isa": Tuning::current().isa.name(),
        "threads": rayon::current_num_threads(),
        "date": format!("{year:04}-{month:02}-{day:02}"),
        "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
        "elements": opts.elements,
        "reps": opts.reps,
    }})
    .to_string()
}

/// How much to measure.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Elements of the large arrays.
    pub elements: usize,
    /// Timed repetitions per row (the median is reported).
    pub reps: usize,
}

impl Options {
    /// The full benchmark: 16M elements, 15 repetitions.
    pub fn full() -> Self {
        Options {
            elements: 1 << 24,
            reps: 15,
        }
    }
    /// A quick look: 4M elements, 5 repetitions.
    pub fn quick() -> Self {
        Options {
            elements: 1 << 22,
            reps: 5,
        }
    }
}

/// Median wall time of `f` in ms over `reps` runs after one warm-up.
fn time_ms(reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?;
    let mut t = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        let start = Instant::now();
        f()?;
        t.push(start.elapsed().as_secs_f64() * 1e3);
    }
    t.sort_by(f64::total_cmp);
    Ok(t[t.len() / 2])
}

/// Which call of a timed pair runs: the baseline's or the row's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Call {
    Base,
    Row,
}

/// Times `call(Call::Base)` and `call(Call::Row)` alternately, `reps`
/// times each after one warm-up of each: the median ms of the row's call,
/// and the median of the per-pair ratios `row / base`. Pairs see the same
/// machine state, which on a shared VM can change within seconds (whether
/// its vCPUs share a physical core changes the speed of compute-bound
/// loops, not of memory-bound ones; memory bandwidth itself drifts), so
/// the ratio does not depend on when each row happened to run. One
/// closure for both calls lets them share mutable state (an executor, an
/// output).
fn time_paired(reps: usize, mut call: impl FnMut(Call) -> Result<()>) -> Result<(f64, f64)> {
    call(Call::Base)?;
    call(Call::Row)?;
    let (mut t, mut ratios) = (Vec::with_capacity(reps), Vec::with_capacity(reps));
    let mut timed = |c: Call| -> Result<f64> {
        let start = Instant::now();
        call(c)?;
        Ok(start.elapsed().as_secs_f64() * 1e3)
    };
    for i in 0..reps.max(1) {
        // Which call goes first alternates, so that neither always starts
        // while the other's writes drain.
        let (b, ms) = if i % 2 == 0 {
            let b = timed(Call::Base)?;
            (b, timed(Call::Row)?)
        } else {
            let ms = timed(Call::Row)?;
            (timed(Call::Base)?, ms)
        };
        t.push(ms);
        ratios.push(ms / b);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Ok((median(&mut t), median(&mut ratios)))
}

struct Triad<'a> {
    a: &'a mut [f32],
    b: &'a [f32],
    c: &'a [f32],
}

impl TileJob for Triad<'_> {
    #[inline(always)]
    fn run(self) {
        for ((a, &b), &c) in self.a.iter_mut().zip(self.b).zip(self.c) {
            *a = b + 3.0 * c;
        }
    }
}

struct Read2<'a> {
    b: &'a [f32],
    c: &'a [f32],
}

impl TileJob for Read2<'_> {
    #[inline(always)]
    fn run(self) {
        // 32 independent sums, so the loop vectorises and the additions
        // do not wait on each other.
        let mut acc = [0.0f32; 32];
        for (b, c) in self.b.chunks_exact(32).zip(self.c.chunks_exact(32)) {
            for ((a, &b), &c) in acc.iter_mut().zip(b).zip(c) {
                *a += b * c;
            }
        }
        black_box(acc);
    }
}

/// Splits `0..n` into one chunk per thread, as the kernels do for cheap ops.
fn chunks(n: usize) -> usize {
    n.div_ceil(rayon::current_num_threads().max(1))
        .next_multiple_of(64)
}

/// The copy baseline: `dst = src` (a call's result, for the timing
/// closures; the copy is kept from being optimised away).
fn stream_copy(dst: &mut [f32], src: &[f32]) -> Result<()> {
    let c = chunks(src.len());
    dst.par_chunks_mut(c)
        .zip(src.par_chunks(c))
        .for_each(|(d, s)| d.copy_from_slice(s));
    black_box(dst);
    Ok(())
}

/// The read baseline: `Σ b c` per thread (the sums kept from being
/// optimised away), as [`stream_copy`].
fn stream_read2(b: &[f32], c: &[f32]) -> Result<()> {
    let k = chunks(b.len());
    b.par_chunks(k)
        .zip(c.par_chunks(k))
        .for_each(|(b, c)| simd::run(Read2 { b, c }));
    Ok(())
}

/// The triad baseline: `a = b + 3 c`, as [`stream_copy`].
fn stream_triad(a: &mut [f32], b: &[f32], c: &[f32]) -> Result<()> {
    let k = chunks(a.len());
    a.par_chunks_mut(k)
        .zip(b.par_chunks(k).zip(c.par_chunks(k)))
        .for_each(|(a, (b, c))| simd::run(Triad { a, b, c }));
    black_box(a);
    Ok(())
}

struct Bench {
    opts: Options,
    rows: Vec<Row>,
}

impl Bench {
    fn push(&mut self, name: &str, ms: f64, baseline: Option<&str>, ratio: Option<f64>) {
        self.rows.push(Row {
            name: name.into(),
            ms,
            baseline: baseline.map(Into::into),
            ratio,
        });
    }

    /// A row without a baseline (a baseline itself, or an absolute figure).
    fn time(&mut self, name: &str, f: impl FnMut() -> Result<()>) -> Result<f64> {
        let ms = time_ms(self.opts.reps, f)?;
        self.push(name, ms, None, None);
        Ok(ms)
    }

    /// A row timed in pairs with its baseline's call (see [`time_paired`]):
    /// the ratio is the median of the pairs' ratios, not the quotient of
    /// the two rows' printed medians.
    fn pair(
        &mut self,
        name: &str,
        baseline: &str,
        call: impl FnMut(Call) -> Result<()>,
    ) -> Result<f64> {
        let (ms, ratio) = time_paired(self.opts.reps, call)?;
        self.push(name, ms, Some(baseline), Some(ratio));
        Ok(ms)
    }

    /// [`Bench::pair`] of `f` with an on/off switch of the kernels (`get`,
    /// `set`) turned off for the row's calls, against `f` as the switch
    /// stands; restored afterwards whatever happens.
    fn pair_switched_off(
        &mut self,
        name: &str,
        baseline: &str,
        switch: Switch,
        mut f: impl FnMut() -> Result<()>,
    ) -> Result<f64> {
        self.pair(name, baseline, |c| match c {
            Call::Base => f(),
            Call::Row => {
                let _off = Tuning::scoped(|t| switch(t, false))?;
                f()
            }
        })
    }
}

/// Sets one of [`Tuning`]'s switches.
type Switch = fn(&mut Tuning, bool);

/// The unary rows: op name and its string attributes.
const UNARY: [(&str, &[(&str, &str)]); 6] = [
    ("relu", &[]),
    ("exp", &[]),
    ("tanh", &[]),
    ("sigmoid", &[]),
    ("log", &[]),
    ("smooth_l1", &[("scalar", "1.0")]),
];

/// Runs every row, calling `progress` after each.
pub fn run(opts: Options, mut progress: impl FnMut(&Row)) -> Result<Vec<Row>> {
    let mut b = Bench {
        opts,
        rows: Vec::new(),
    };
    let n = opts.elements;
    let mut report = |b: &Bench| {
        if let Some(r) = b.rows.last() {
            progress(r);
        }
    };
    let x = NDArray::random_uniform([n], 0.05, 4.0, DType::F32, 1)?;
    let x_signed = NDArray::random_uniform([n], -4.0, 4.0, DType::F32, 2)?;
    let y = NDArray::random_uniform([n], -4.0, 4.0, DType::F32, 3)?;
    let mut out = NDArray::zeros([n], DType::F32);
    // where the baselines' calls write, so that a pair's two calls need
    // not share an output
    let mut out_base = NDArray::zeros([n], DType::F32);
    let into = |op: &str, input: &NDArray, attrs: &Attrs, out: &mut NDArray| {
        eager::invoke_into_by_name(op, &[input], attrs, out, OpReqType::WriteTo)
    };
    let add_into = |out: &mut NDArray| {
        eager::invoke_into_by_name(
            "elemwise_add",
            &[&x, &y],
            &Attrs::new(),
            out,
            OpReqType::WriteTo,
        )
    };
    let no_attrs = Attrs::new();

    // Baselines over the same bytes.
    let src = x.to_vec::<f32>()?;
    let src2 = y.to_vec::<f32>()?;
    let mut dst = vec![0.0f32; n];
    b.time("stream/copy", || stream_copy(&mut dst, &src))?;
    report(&b);
    b.time("stream/triad", || stream_triad(&mut dst, &src, &src2))?;
    report(&b);
    b.time("stream/read2", || stream_read2(&src, &src2))?;
    report(&b);

    for (op, attrs) in UNARY {
        let attrs = Attrs::from_iter(attrs.iter().copied());
        // log needs positive inputs; the others see both signs.
        let input = if op == "log" { &x } else { &x_signed };
        let out_row = format!("{op}/f32/out");
        if op == "relu" {
            b.pair(&out_row, "stream/copy", |c| match c {
                Call::Base => stream_copy(&mut dst, &src),
                Call::Row => into(op, input, &attrs, &mut out),
            })?;
        } else {
            b.pair(&out_row, "relu/f32/out", |c| match c {
                Call::Base => into("relu", &x_signed, &no_attrs, &mut out_base),
                Call::Row => into(op, input, &attrs, &mut out),
            })?;
        }
        report(&b);
        b.pair(&format!("{op}/f32/fresh"), &out_row, |c| match c {
            Call::Base => into(op, input, &attrs, &mut out),
            Call::Row => {
                black_box(eager::invoke(op, &[input], &attrs)?);
                Ok(())
            }
        })?;
        report(&b);
        if op == "relu" || op == "exp" || op == "tanh" {
            b.pair_switched_off(
                &format!("{op}/f32/no-prefetch"),
                &out_row,
                |t, on| t.prefetch = on,
                || into(op, input, &attrs, &mut out),
            )?;
            report(&b);
        }
        if op == "relu" || op == "smooth_l1" {
            let vectorised = Tuning::current().isa;
            let r = b.pair(&format!("{op}/f32/scalar-isa"), &out_row, |c| {
                let isa = if c == Call::Row {
                    Isa::Scalar
                } else {
                    vectorised
                };
                let _isa = Tuning::scoped(|t| t.isa = isa)?;
                into(op, input, &attrs, &mut out)
            });
            r?;
            report(&b);
        }
    }

    // Binary.
    b.pair("elemwise_add/f32/out", "stream/triad", |c| match c {
        Call::Base => stream_triad(&mut dst, &src, &src2),
        Call::Row => add_into(&mut out),
    })?;
    report(&b);
    b.pair(
        "elemwise_add/f32/fresh",
        "elemwise_add/f32/out",
        |c| match c {
            Call::Base => add_into(&mut out),
            Call::Row => {
                black_box(eager::invoke("elemwise_add", &[&x, &y], &Attrs::new())?);
                Ok(())
            }
        },
    )?;
    report(&b);

    // Half types: half the bytes of the f32 rows.
    for dtype in [DType::F16, DType::BF16] {
        let xh = x_signed.astype(dtype);
        let mut oh = NDArray::zeros([n], dtype);
        let xpos = x.astype(dtype);
        for (op, attrs) in UNARY {
            let attrs = Attrs::from_iter(attrs.iter().copied());
            let (input, input32) = if op == "log" {
                (&xpos, &x)
            } else {
                (&xh, &x_signed)
            };
            let row = format!("{op}/{}/out", dtype.name());
            b.pair(&row, &format!("{op}/f32/out"), |c| match c {
                Call::Base => into(op, input32, &attrs, &mut out),
                Call::Row => into(op, input, &attrs, &mut oh),
            })?;
            report(&b);
            if op == "tanh" {
                b.pair_switched_off(
                    &format!("{op}/{}/computed", dtype.name()),
                    &row,
                    |t, on| t.half_tables = on,
                    || into(op, input, &attrs, &mut oh),
                )?;
                report(&b);
            }
        }
    }

    // Six elementwise ops, eagerly (each a pass over memory).
    let chain = |x: &NDArray, y: &NDArray| -> Result<NDArray> {
        let s = |v: &str| Attrs::from([("scalar", v)]);
        let a = eager::invoke("_mul_scalar", &[x], &s("0.5"))?;
        let a = eager::invoke("_plus_scalar", &[&a], &s("1.0"))?;
        let a = eager::invoke("relu", &[&a], &Attrs::new())?;
        let a = eager::invoke("tanh", &[&a], &Attrs::new())?;
        let a = eager::invoke("elemwise_mul", &[&a, y], &Attrs::new())?;
        eager::invoke("elemwise_add", &[&a, x], &Attrs::new())
    };
    b.pair("chain6/eager", "elemwise_add/f32/out", |c| match c {
        Call::Base => add_into(&mut out_base),
        Call::Row => {
            black_box(chain(&x_signed, &y)?);
            Ok(())
        }
    })?;
    report(&b);

    // The same chain as a graph, fused (one pass) and unfused.
    if eager::lookup("where").is_ok() {
        let graph = chain6_symbol()?;
        let args = [("x", &x_signed), ("y", &y)];
        let mut fused = bind_inference(&graph, &args, BindConfig::default())?;
        let mut unfused = bind_inference(&graph, &args, unfused_config())?;
        b.pair("chain6/fused", "elemwise_add/f32/out", |c| match c {
            Call::Base => add_into(&mut out_base),
            Call::Row => fused.forward(false),
        })?;
        report(&b);
        b.pair("chain6/fused/bandwidth", "stream/triad", |c| match c {
            Call::Base => stream_triad(&mut dst, &src, &src2),
            Call::Row => fused.forward(false),
        })?;
        report(&b);
        b.pair_switched_off(
            "chain6/fused/cached-stores",
            "chain6/fused",
            |t, on| t.stream_stores = on,
            || fused.forward(false),
        )?;
        report(&b);
        let mut interpreted = bind_inference(&graph, &args, interpreted_config())?;
        b.pair("chain6/fused/interpreted", "chain6/fused", |c| match c {
            Call::Base => fused.forward(false),
            Call::Row => interpreted.forward(false),
        })?;
        report(&b);
        b.pair("chain6/unfused", "chain6/fused", |c| match c {
            Call::Base => fused.forward(false),
            Call::Row => unfused.forward(false),
        })?;
        report(&b);
        let composed = smooth_l1_symbol()?;
        let mut sl1 = bind_inference(&composed, &[("x", &x_signed)], BindConfig::default())?;
        let mut sl1_interpreted =
            bind_inference(&composed, &[("x", &x_signed)], interpreted_config())?;
        let sl1_attrs = Attrs::from([("scalar", "1.0")]);
        b.pair(
            "smooth_l1/composed-fused",
            "smooth_l1/f32/out",
            |c| match c {
                Call::Base => into("smooth_l1", &x_signed, &sl1_attrs, &mut out_base),
                Call::Row => sl1.forward(false),
            },
        )?;
        report(&b);
        b.pair(
            "smooth_l1/composed-interpreted",
            "smooth_l1/composed-fused",
            |c| match c {
                Call::Base => sl1.forward(false),
                Call::Row => sl1_interpreted.forward(false),
            },
        )?;
        report(&b);

        // A row-wise reduction fed by elementwise ops.
        let cols = 1024;
        let rows = (n / cols).max(1);
        let p = NDArray::random_uniform([rows, cols], -4.0, 4.0, DType::F32, 6)?;
        let q = NDArray::random_uniform([rows, cols], -4.0, 4.0, DType::F32, 7)?;
        let graph = row_sq_dist_symbol()?;
        let args = [("x", &p), ("y", &q)];
        let mut fused = bind_inference(&graph, &args, BindConfig::default())?;
        let mut unfused = bind_inference(&graph, &args, unfused_config())?;
        b.pair("row_sq_dist/fused", "elemwise_add/f32/out", |c| match c {
            Call::Base => add_into(&mut out_base),
            Call::Row => fused.forward(false),
        })?;
        report(&b);
        let (pv, qv) = (p.to_vec::<f32>()?, q.to_vec::<f32>()?);
        b.pair("row_sq_dist/fused/bandwidth", "stream/read2", |c| match c {
            Call::Base => stream_read2(&pv, &qv),
            Call::Row => fused.forward(false),
        })?;
        report(&b);
        let slabs_config = BindConfig {
            row_sinks: false,
            ..BindConfig::default()
        };
        let mut slabs = bind_inference(&graph, &args, slabs_config)?;
        b.pair(
            "row_sq_dist/fused-slabs",
            "row_sq_dist/fused",
            |c| match c {
                Call::Base => fused.forward(false),
                Call::Row => slabs.forward(false),
            },
        )?;
        report(&b);
        b.pair("row_sq_dist/unfused", "row_sq_dist/fused", |c| match c {
            Call::Base => fused.forward(false),
            Call::Row => unfused.forward(false),
        })?;
        report(&b);
    }

    // Matrix product.
    if eager::lookup("dot").is_ok() {
        let a = NDArray::random_uniform([1024, 1024], -1.0, 1.0, DType::F32, 4)?;
        let c = NDArray::random_uniform([1024, 1024], -1.0, 1.0, DType::F32, 5)?;
        let mut o = NDArray::zeros([1024, 1024], DType::F32);
        b.time("dot/1024/f32", || {
            eager::invoke_into_by_name("dot", &[&a, &c], &Attrs::new(), &mut o, OpReqType::WriteTo)
        })?;
        report(&b);

        // A dense layer whose output is as large as the other rows' arrays
        // and whose product is cheap (64 multiply-adds per element), so
        // that a pass over memory is visible next to it.
        if eager::lookup("broadcast_add").is_ok() {
            let (k, cols) = (64, 1024);
            let rows = (n / cols).max(1);
            let x = NDArray::random_uniform([rows, k], -1.0, 1.0, DType::F32, 8)?;
            let w = NDArray::random_uniform([k, cols], -1.0, 1.0, DType::F32, 9)?;
            let bias = NDArray::random_uniform([cols], -1.0, 1.0, DType::F32, 10)?;
            let mut o = NDArray::zeros([rows, cols], DType::F32);
            let mut dot = || {
                eager::invoke_into_by_name(
                    "dot",
                    &[&x, &w],
                    &Attrs::new(),
                    &mut o,
                    OpReqType::WriteTo,
                )
            };
            b.time("dense/dot", &mut dot)?;
            report(&b);
            let graph = dense_symbol()?;
            let args = [("x", &x), ("w", &w), ("b", &bias)];
            let mut fused = bind_inference(&graph, &args, BindConfig::default())?;
            let mut unfused = bind_inference(&graph, &args, unfused_config())?;
            b.pair("dense/fused", "dense/dot", |c| match c {
                Call::Base => dot(),
                Call::Row => fused.forward(false),
            })?;
            report(&b);
            b.pair("dense/unfused", "dense/fused", |c| match c {
                Call::Base => fused.forward(false),
                Call::Row => unfused.forward(false),
            })?;
            report(&b);
        }
    }

    // Dispatch overhead on one element: µs per call, over many calls.
    let one = NDArray::from_vec(vec![0.5f32], [1])?;
    let relu = eager::lookup("relu")?.def;
    let env = simpleop::EnvArguments::none();
    let calls = if opts.reps > 5 { 200_000 } else { 50_000 };
    let typed = || -> Result<()> {
        for _ in 0..calls {
            black_box(eager::invoke_with(relu, &[black_box(&one)], &env)?);
        }
        Ok(())
    };
    let by_name = || -> Result<()> {
        for _ in 0..calls {
            black_box(eager::invoke("relu", &[black_box(&one)], &Attrs::new())?);
        }
        Ok(())
    };
    let typed_ms = time_ms(opts.reps, typed)?;
    b.push("tiny/relu/typed", typed_ms / calls as f64, None, None);
    report(&b);
    let (by_name_ms, ratio) = time_paired(opts.reps, |c| match c {
        Call::Base => typed(),
        Call::Row => by_name(),
    })?;
    b.push(
        "tiny/relu/by-name",
        by_name_ms / calls as f64,
        Some("tiny/relu/typed"),
        Some(ratio),
    );
    report(&b);
    Ok(b.rows)
}

/// `chain6/eager` as a graph over `x` and `y`.
pub fn chain6_symbol() -> Result<Symbol> {
    let x = Symbol::var("x");
    let y = Symbol::var("y");
    let s = |v: f64| Attrs::new().with("scalar", v);
    let a = Symbol::invoke("_mul_scalar", &[&x], &s(0.5))?;
    let a = Symbol::invoke("_plus_scalar", &[&a], &s(1.0))?;
    let a = Symbol::invoke("relu", &[&a], &Attrs::new())?;
    let a = Symbol::invoke("tanh", &[&a], &Attrs::new())?;
    let a = Symbol::invoke("elemwise_mul", &[&a, &y], &Attrs::new())?;
    Symbol::invoke("elemwise_add", &[&a, &x], &Attrs::new())
}

/// `sum((x - y)², axis = 1)`: squared distances of rows.
pub fn row_sq_dist_symbol() -> Result<Symbol> {
    let x = Symbol::var("x");
    let y = Symbol::var("y");
    let d = Symbol::invoke("elemwise_sub", &[&x, &y], &Attrs::new())?;
    let sq = Symbol::invoke("square", &[&d], &Attrs::new())?;
    Symbol::invoke("sum", &[&sq], &Attrs::new().with("axis", 1))
}

/// `relu(dot(x, w) + b)`: a dense layer, `b` broadcast along the rows.
pub fn dense_symbol() -> Result<Symbol> {
    let x = Symbol::var("x");
    let w = Symbol::var("w");
    let b = Symbol::var("b");
    let d = Symbol::invoke("dot", &[&x, &w], &Attrs::new())?;
    let s = Symbol::invoke("broadcast_add", &[&d, &b], &Attrs::new())?;
    Symbol::invoke("relu", &[&s], &Attrs::new())
}

/// `smooth_l1(x, scalar = 1)` from primitive ops:
/// `where(|x| < 1, 0.5 x², |x| - 0.5)`.
pub fn smooth_l1_symbol() -> Result<Symbol> {
    let x = Symbol::var("x");
    let s = |v: f64| Attrs::new().with("scalar", v);
    let a = Symbol::invoke("abs", &[&x], &Attrs::new())?;
    let small = Symbol::invoke("_lesser_scalar", &[&a], &s(1.0))?;
    let sq = Symbol::invoke("square", &[&x], &Attrs::new())?;
    let quad = Symbol::invoke("_mul_scalar", &[&sq], &s(0.5))?;
    let lin = Symbol::invoke("_minus_scalar", &[&a], &s(0.5))?;
    Symbol::invoke("where", &[&small, &quad, &lin], &Attrs::new())
}

/// Code generation off, the rest as by default.
fn interpreted_config() -> BindConfig {
    BindConfig {
        codegen: false,
        ..BindConfig::default()
    }
}

/// Fusion off, the rest as by default.
fn unfused_config() -> BindConfig {
    BindConfig {
        fusion: false,
        ..BindConfig::default()
    }
}

fn bind_inference(
    graph: &Symbol,
    args: &[(&str, &NDArray)],
    config: BindConfig,
) -> Result<simpleop::symbol::Executor> {
    let args = args
        .iter()
        .map(|(n, a)| ((*n).to_owned(), (*a).clone()))
        .collect();
    graph.bind_with(args, HashMap::new(), HashMap::new(), config)
}

/// Formats rows as an aligned table.
pub fn table(rows: &[Row]) -> String {
    let mut s = format!(
        "{:<26} {:>10}  {:<22} {:>7}\n",
        "row", "ms", "baseline", "ratio"
    );
    for r in rows {
        let ms = if r.name.starts_with("tiny/") {
            format!("{:.3}µs", r.ms * 1e3)
        } else {
            format!("{:.3}", r.ms)
        };
        s.push_str(&format!(
            "{:<26} {:>10}  {:<22} {:>7}\n",
            r.name,
            ms,
            r.baseline.as_deref().unwrap_or("-"),
            r.ratio.map_or("-".into(), |x| format!("{x:.2}")),
        ));
    }
    s
}
