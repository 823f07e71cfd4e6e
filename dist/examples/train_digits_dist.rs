//! The digits model of `train_digits`, trained data-parallel over MPI:
//! every rank binds the same model, rank 0's weights are broadcast, each
//! step's global batch of `ranks × --batch` rows is split among the
//! ranks, and the gradients are averaged by a bucketed all-reduce before
//! the update: each gradient is handed to the reducer by backward's
//! gradient-ready hook as soon as it is final, so the last layers'
//! buckets travel while backward computes the first (`--no-overlap`
//! reduces after backward instead, with the same bits; `--alternate`
//! switches between the two every epoch to time both in one run). With
//! `--checkpoint-dir`, rank 0 writes a `.params`
//! checkpoint (weights, momentum, counters, random state) every
//! `--checkpoint-every` epochs, and a restarted job resumes from the
//! newest.
//!
//! ```text
//! cargo build --release -p simpleop-dist --example train_digits_dist
//! mpirun -np 2 --oversubscribe target/release/examples/train_digits_dist [--json]
//! ```
//!
//! Two ranks with `--batch 25` take the steps of `train_digits --batch 50`
//! up to the order of float sums (docs/distributed.md).

#[allow(dead_code)]
#[path = "../../examples/examples/train_digits/trainer.rs"]
mod trainer;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use simpleop::{Error, NDArray};
use simpleop_dist::{Checkpointer, Dist, DistConfig, DistError, GradReducer};
use trainer::{Config, GradSync, Shard, TTA_VIEWS, Trainer, load_digits};

/// Rows used for training; the rest test (as in train_digits).
const TRAIN_ROWS: usize = 1500;

/// Train the digits model data-parallel over MPI (run under mpirun).
#[derive(Debug, Parser)]
struct Args {
    /// Passes over the training rows.
    #[arg(long, default_value_t = 100)]
    epochs: usize,
    /// Rows per rank and step (the global batch is ranks × this).
    #[arg(long, default_value_t = 25)]
    batch: usize,
    /// Peak learning rate (cosine-decayed to 0).
    #[arg(long, default_value_t = 0.1)]
    lr: f64,
    /// Seeds the weights, the shuffles, the warps and the dropout masks
    /// (the same on every rank).
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Train with the eager tape instead of the bound graph.
    #[arg(long)]
    eager: bool,
    /// Gradient bytes per all-reduce bucket, in MiB [default:
    /// SIMPLEOP_DIST_BUCKET_MB or 25].
    #[arg(long)]
    bucket_mb: Option<f64>,
    /// Gradient bytes per all-reduce bucket (overrides --bucket-mb).
    #[arg(long)]
    bucket_bytes: Option<usize>,
    /// Reduce the gradients after backward instead of from its
    /// gradient-ready hook (no overlap of communication and backward).
    #[arg(long)]
    no_overlap: bool,
    /// Overlap in even epochs, not in odd ones, and report both step
    /// times: a comparison on one noisy machine in one run.
    #[arg(long, conflicts_with = "no_overlap")]
    alternate: bool,
    /// Write checkpoints here, and resume from the newest one found.
    #[arg(long)]
    checkpoint_dir: Option<PathBuf>,
    /// Epochs between checkpoints.
    #[arg(long, default_value_t = 10)]
    checkpoint_every: usize,
    /// Stop after this many epochs of the run (to test resuming).
    #[arg(long)]
    stop_after: Option<usize>,
    /// Print one JSON object at the end (rank 0) instead of the report.
    #[arg(long)]
    json: bool,
    /// The CSV (label, then 64 pixels 0–16).
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/data/digits.csv"))]
    data: PathBuf,
}

/// Why the run stopped: a failure of the job (which must end it) or any
/// other error.
enum Failure {
    Dist(DistError),
    Other(Box<dyn std::error::Error>),
}

impl<E: Into<Box<dyn std::error::Error>>> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure::Other(e.into())
    }
}

/// The trainer's [`GradSync`] over MPI: [`GradReducer`]'s round, from
/// backward's hook or after it, timed.
struct Reduce<'a> {
    dist: &'a mut Dist,
    reducer: GradReducer,
    overlap: bool,
    /// Seconds in the reducer during the current step.
    busy: f64,
    /// Seconds in the reducer per finished step.
    steps: Vec<f64>,
    /// The first failure of the job, kept whole (the trainer's error type
    /// only carries its text).
    failed: Option<DistError>,
}

impl Reduce<'_> {
    /// `f`'s result, timed; a failure kept and turned into the trainer's
    /// error type.
    fn run<T>(
        &mut self,
        f: impl FnOnce(&mut GradReducer, &mut Dist) -> simpleop_dist::Result<T>,
    ) -> simpleop::Result<T> {
        let start = Instant::now();
        let result = f(&mut self.reducer, self.dist);
        self.busy += start.elapsed().as_secs_f64();
        result.map_err(|e| {
            let text = e.to_string();
            self.failed.get_or_insert(e);
            Error::invalid("train_digits_dist", "gradients", text)
        })
    }
}

impl GradSync for Reduce<'_> {
    fn overlap(&self) -> bool {
        self.overlap
    }
    fn begin(&mut self, grads: &[NDArray]) -> simpleop::Result<()> {
        let refs: Vec<&NDArray> = grads.iter().collect();
        self.run(|r, d| r.begin(d, &refs))
    }
    fn ready(&mut self, k: usize, grad: &NDArray) -> simpleop::Result<()> {
        self.run(|r, d| r.ready(d, k, grad))
    }
    fn finish(&mut self, _: &[NDArray]) -> simpleop::Result<Vec<NDArray>> {
        let mean = self.run(|r, d| r.finish(d).map(<[NDArray]>::to_vec));
        let busy = std::mem::take(&mut self.busy);
        self.steps.push(busy);
        mean
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn run(args: &Args, dist: &mut Dist) -> Result<(), Failure> {
    let all = load_digits(&args.data)?;
    if all.len() <= TRAIN_ROWS {
        return Err(format!(
            "{}: {} rows, need more than {TRAIN_ROWS}",
            args.data.display(),
            all.len()
        )
        .into());
    }
    let (train, test) = (all.slice(0..TRAIN_ROWS), all.slice(TRAIN_ROWS..all.len()));
    let (rank, size) = (dist.rank() as usize, dist.size() as usize);
    let config = Config {
        batch: args.batch,
        lr: args.lr,
        epochs: args.epochs,
        seed: args.seed,
        eager: args.eager,
        shard: Shard { rank, size },
        ..Config::default()
    };
    let mut model = Trainer::new(config)?;
    let ckpt = args
        .checkpoint_dir
        .as_ref()
        .map(|d| Checkpointer::new(d, 2));
    let resumed = match &ckpt {
        Some(c) => c.resume(dist).map_err(Failure::Dist)?,
        None => None,
    };
    match &resumed {
        Some(c) => model.restore(&c.arrays)?,
        None => {
            let mut params: Vec<NDArray> = model.params().map(NDArray::deep_copy).collect();
            dist.broadcast(&mut params.iter_mut().collect::<Vec<_>>())
                .map_err(Failure::Dist)?;
            model.set_params(&params)?;
        }
    }
    let first = model.epochs_done();
    if rank == 0 && !args.json {
        println!(
            "train_digits_dist: {size} ranks × batch {} = {} rows per step, {} epochs{}",
            args.batch,
            size * args.batch,
            args.epochs,
            resumed
                .as_ref()
                .map_or(String::new(), |c| format!(", resumed at epoch {}", c.epoch))
        );
    }
    let mut sync = Reduce {
        reducer: GradReducer::new(dist.config().bucket_bytes),
        dist,
        overlap: !args.no_overlap,
        busy: 0.0,
        steps: Vec::new(),
        failed: None,
    };
    // [no overlap, overlap]: step and reducer seconds.
    let mut step_seconds: [Vec<f64>; 2] = Default::default();
    let mut reduce_seconds: [Vec<f64>; 2] = Default::default();
    let mut loss = f64::NAN;
    let last = args
        .stop_after
        .map_or(args.epochs, |s| (first + s).min(args.epochs));
    for epoch in first..last {
        if args.alternate {
            sync.overlap = epoch % 2 == 0;
        }
        let mode = usize::from(sync.overlap);
        let report = model.epoch_with(&train, || {}, &mut sync);
        reduce_seconds[mode].append(&mut sync.steps);
        if let Some(e) = sync.failed.take() {
            return Err(Failure::Dist(e));
        }
        let report = report?;
        step_seconds[mode].extend_from_slice(&report.step_seconds);
        loss = report.loss;
        let dist = &mut *sync.dist;
        let done = epoch + 1;
        if rank == 0 && !args.json && (done % 10 == 0 || done == args.epochs) {
            println!("epoch {done:4}  loss {loss:.6} (rank 0's rows)");
        }
        if let Some(c) = &ckpt
            && (done % args.checkpoint_every.max(1) == 0 || done == args.epochs)
        {
            let state = model.state()?;
            let refs: Vec<(&str, &NDArray)> = state.iter().map(|(n, a)| (n.as_str(), a)).collect();
            let steps = (done * (TRAIN_ROWS / (args.batch * size))) as u64;
            c.save(dist, steps, done as u64, &refs)
                .map_err(Failure::Dist)?;
        }
    }
    if rank != 0 {
        return Ok(());
    }
    let accuracy = model.accuracy_tta(&test, &TTA_VIEWS)?;
    let ms = |v: &mut Vec<f64>| 1e3 * median(v);
    let all_steps: Vec<f64> = step_seconds.concat();
    let ms_per_step = ms(&mut all_steps.clone());
    let ms_allreduce = ms(&mut reduce_seconds.concat());
    let samples_per_s = (size * args.batch) as f64 / (ms_per_step / 1e3);
    // Per mode (no overlap, overlap): median step and reducer ms, steps.
    let ran: Vec<usize> = (0..2).filter(|&m| !step_seconds[m].is_empty()).collect();
    let modes: Vec<serde_json::Value> = ran
        .into_iter()
        .map(|m| {
            serde_json::json!({
                "overlap": m == 1,
                "steps": step_seconds[m].len(),
                "ms_per_step": ms(&mut step_seconds[m]),
                "ms_in_reducer_per_step": ms(&mut reduce_seconds[m]),
            })
        })
        .collect();
    if args.json {
        let out = serde_json::json!({
            "ranks": size,
            "batch_per_rank": args.batch,
            "global_batch": size * args.batch,
            "epochs": args.epochs,
            "first_epoch": first,
            "steps": all_steps.len(),
            "final_loss": loss,
            "test_accuracy": accuracy,
            "ms_per_step": ms_per_step,
            "ms_allreduce_per_step": ms_allreduce,
            "samples_per_s": samples_per_s,
            "buckets": sync.reducer.buckets().len(),
            "eager": args.eager,
            "modes": modes,
        });
        println!("{out}");
    } else {
        println!(
            "test accuracy  {accuracy:.4} (mean of {} views)",
            TTA_VIEWS.len()
        );
        println!(
            "time per step  {ms_per_step:.4} ms (median of {} steps; in the reducer {ms_allreduce:.4} ms of it), {samples_per_s:.0} samples/s over {size} ranks",
            all_steps.len()
        );
        for m in &modes {
            println!("  {m}");
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut config = match DistConfig::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("train_digits_dist: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(mb) = args.bucket_mb {
        config.bucket_bytes = (mb * (1 << 20) as f64) as usize;
    }
    if let Some(bytes) = args.bucket_bytes {
        config.bucket_bytes = bytes;
    }
    let mut dist = match Dist::init(config) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("train_digits_dist: {e} (run it under mpirun)");
            return ExitCode::FAILURE;
        }
    };
    match run(&args, &mut dist) {
        Ok(()) => ExitCode::SUCCESS,
        // The error is printed where it was detected; dropping `dist`
        // ends the job (MPI_Abort), so no rank waits for the failed one.
        Err(Failure::Dist(e)) if e.is_fatal() => {
            drop(dist);
            ExitCode::FAILURE
        }
        Err(Failure::Dist(e)) => {
            eprintln!("train_digits_dist: rank {}: {e}", dist.rank());
            dist.abort(1)
        }
        Err(Failure::Other(e)) => {
            // Another rank may be waiting for this one: end the job.
            eprintln!("train_digits_dist: rank {}: {e}", dist.rank());
            dist.abort(1)
        }
    }
}
