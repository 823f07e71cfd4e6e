//! Timing: medians of repeated calls, and rows timed in alternating pairs
//! with their baseline's call.

use std::time::Instant;

use simpleop::{Result, Tuning};

use super::report::{Options, Row};

/// Median wall time of `f` in ms over `reps` runs after one warm-up.
pub(super) fn time_ms(reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
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
pub(super) enum Call {
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
pub(super) fn time_paired(
    reps: usize,
    mut call: impl FnMut(Call) -> Result<()>,
) -> Result<(f64, f64)> {
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

/// The rows measured so far, reported to `progress` as each is pushed.
pub(super) struct Bench<'p> {
    pub(super) opts: Options,
    rows: Vec<Row>,
    progress: &'p mut dyn FnMut(&Row),
}

impl<'p> Bench<'p> {
    pub(super) fn new(opts: Options, progress: &'p mut dyn FnMut(&Row)) -> Self {
        Bench {
            opts,
            rows: Vec::new(),
            progress,
        }
    }

    pub(super) fn into_rows(self) -> Vec<Row> {
        self.rows
    }

    pub(super) fn push(&mut self, name: &str, ms: f64, baseline: Option<&str>, ratio: Option<f64>) {
        let row = Row {
            name: name.into(),
            ms,
            baseline: baseline.map(Into::into),
            ratio,
        };
        (self.progress)(&row);
        self.rows.push(row);
    }

    /// A row without a baseline (a baseline itself, or an absolute figure).
    pub(super) fn time(&mut self, name: &str, f: impl FnMut() -> Result<()>) -> Result<f64> {
        let ms = time_ms(self.opts.reps, f)?;
        self.push(name, ms, None, None);
        Ok(ms)
    }

    /// A row timed in pairs with its baseline's call (see [`time_paired`]):
    /// the ratio is the median of the pairs' ratios, not the quotient of
    /// the two rows' printed medians.
    pub(super) fn pair(
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
    pub(super) fn pair_switched_off(
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
pub(super) type Switch = fn(&mut Tuning, bool);
