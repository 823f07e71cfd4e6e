//! Trains a small convolutional net on the UCI digits with the symbolic
//! executor: the model is a `Symbol` whose activation is this crate's own
//! `softplus` op, its gradient comes from autodiff, and the weights are
//! updated in place in the executor by the registered `sgd_mom_update` (or
//! `adam_update`) op.
//!
//! The default recipe: a 3×3 `Convolution` without padding, 8 channels
//! and relu, 288 features → 128 hidden units (softplus) → 10; half
//! the training images warped by a fresh random affine transform each
//! epoch (rotation ±15°, scale ±15 %, shear ±0.25, shift ±1 pixel,
//! bilinear), pixels standardised by the training rows' statistics,
//! dropout 0.2 on the hidden layer (a mask input), label smoothing 0.1,
//! SGD with momentum 0.9 at a cosine-decayed learning rate from 0.1, 600
//! epochs of batches of 50; evaluated with the mean of the weights over
//! the last 20 % of epochs and test-time augmentation (softmax averaged
//! over six views of each test image: as it is, its four one-pixel
//! shifts, and deskewed; forward-only passes; `--no-tta` turns it off).
//! It was chosen by 5-fold cross-validation over contiguous 300-row blocks
//! of the training rows (0.985), not on the test rows. Test accuracy:
//! 0.983 at the default seed 42, 0.978 on average over seeds 42 and 1–11
//! (0.966–0.987); `--conv-channels 0 --hidden 256` is the previous
//! default, the MLP alone (0.957 on average). See the README.
//!
//! ```text
//! cargo run --release --example train_digits [-- --epochs 30 --json]
//! ```
//!
//! The first 1,500 rows of `examples/data/digits.csv` train, the last 297
//! test. The run is deterministic for a given `--seed`.

// The data-parallel and checkpoint parts are used by
// dist/examples/train_digits_dist.rs, which shares the file.
#[allow(dead_code)]
mod trainer;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use trainer::{Augment, Config, Optimizer, TTA_VIEWS, Trainer, load_digits};

/// Rows used for training; the rest test.
const TRAIN_ROWS: usize = 1500;

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Opt {
    /// `sgd_mom_update`, momentum 0.9.
    Sgd,
    /// `adam_update`, β = (0.9, 0.999), bias-corrected.
    Adam,
}

/// Train a small convolutional network (or an MLP) on the digits data
/// with simpleop's symbolic executor.
#[derive(Debug, Parser)]
struct Args {
    /// Passes over the training rows.
    #[arg(long, default_value_t = 600)]
    epochs: usize,
    /// Rows per step.
    #[arg(long, default_value_t = 50)]
    batch: usize,
    /// Channels of the 3×3 convolution in front of the hidden layer (0: no
    /// convolution, the pixels feed the hidden layer).
    #[arg(long, default_value_t = 8)]
    conv_channels: usize,
    /// Hidden units.
    #[arg(long, default_value_t = 128)]
    hidden: usize,
    /// Peak learning rate (cosine-decayed to 0 unless --constant-lr).
    #[arg(long, default_value_t = 0.1)]
    lr: f64,
    /// Keep the learning rate constant instead of the cosine decay.
    #[arg(long)]
    constant_lr: bool,
    /// Fraction of hidden units dropped per training row (0: off).
    #[arg(long, default_value_t = 0.2)]
    dropout: f64,
    /// Label smoothing ε (0: plain cross-entropy).
    #[arg(long, default_value_t = 0.1)]
    label_smoothing: f64,
    /// Chance that a training image is warped in an epoch.
    #[arg(long, default_value_t = 0.5)]
    augment_prob: f64,
    /// Largest rotation of the random affine warps, degrees.
    #[arg(long, default_value_t = 15.0)]
    rotate: f64,
    /// Largest relative scale change of the warps.
    #[arg(long, default_value_t = 0.15)]
    scale: f64,
    /// Largest shear factor of the warps.
    #[arg(long, default_value_t = 0.25)]
    shear: f64,
    /// Largest shift of the warps, pixels.
    #[arg(long, default_value_t = 1.0)]
    translate: f64,
    /// Train on the images as they are (no random warps).
    #[arg(long)]
    no_augment: bool,
    /// Evaluate with the mean of the weights over this fraction of the
    /// last epochs (0: the final weights).
    #[arg(long, default_value_t = 0.2)]
    average_last: f64,
    /// Score the test rows as they are, without test-time augmentation
    /// (averaging the predictions over shifted and deskewed copies).
    #[arg(long)]
    no_tta: bool,
    /// Feed pixels scaled to [0, 1] without standardising them.
    #[arg(long)]
    no_standardize: bool,
    /// Seeds the weights, the shuffles, the warps and the dropout masks.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// The update op.
    #[arg(long, value_enum, default_value_t = Opt::Sgd)]
    optimizer: Opt,
    /// Train with eager calls recorded by `autograd` (the same model and
    /// updates) instead of the bound graph.
    #[arg(long)]
    eager: bool,
    /// Print one JSON object at the end instead of the report (no
    /// progress bar).
    #[arg(long)]
    json: bool,
    /// Print every epoch's loss. By default a terminal shows a progress
    /// bar, and other output (a pipe, a CI log) gets about ten lines.
    #[arg(long)]
    log_epochs: bool,
    /// Where to write graph.dot [default: target/train_digits in the
    /// workspace].
    #[arg(long)]
    out: Option<PathBuf>,
    /// The CSV (label, then 64 pixels 0–16).
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/data/digits.csv"))]
    data: PathBuf,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => 0.5 * (v[n / 2 - 1] + v[n / 2]),
    }
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
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
    let config = Config {
        conv_channels: args.conv_channels,
        hidden: args.hidden,
        batch: args.batch,
        lr: args.lr,
        epochs: args.epochs,
        cosine: !args.constant_lr,
        seed: args.seed,
        optimizer: match args.optimizer {
            Opt::Sgd => Optimizer::SgdMomentum,
            Opt::Adam => Optimizer::Adam,
        },
        dropout: args.dropout,
        label_smoothing: args.label_smoothing,
        augment: (!args.no_augment).then_some(Augment {
            probability: args.augment_prob,
            rotate_deg: args.rotate,
            scale: args.scale,
            shear: args.shear,
            translate: args.translate,
        }),
        standardize: !args.no_standardize,
        average_last: args.average_last,
        eager: args.eager,
        shard: trainer::Shard::default(),
    };
    let mut model = Trainer::new(config.clone())?;

    let out = args.out.clone().unwrap_or_else(|| {
        let examples = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        examples
            .parent()
            .unwrap_or(&examples)
            .join("target/train_digits")
    });
    std::fs::create_dir_all(&out)?;
    let dot_path = out.join("graph.dot");
    std::fs::write(&dot_path, model.executor().to_dot())?;

    let steps_per_epoch = (train.len() / args.batch) as u64;
    let bar = if args.json || !std::io::stderr().is_terminal() {
        ProgressBar::hidden()
    } else {
        ProgressBar::with_draw_target(
            Some(steps_per_epoch * args.epochs as u64),
            ProgressDrawTarget::stderr(),
        )
    };
    bar.set_style(ProgressStyle::with_template(
        "{bar:40} {pos}/{len} steps {msg} [{elapsed}<{eta}]",
    )?);
    if !args.json {
        println!(
            "train_digits: {} train / {} test rows, {}{} (softplus, dropout {}) → 10, batch {}, {:?}, lr {}{}, label smoothing {}, seed {}",
            train.len(),
            test.len(),
            if args.conv_channels > 0 {
                format!(
                    "3×3 conv × {} (relu) → 36·{} → ",
                    args.conv_channels, args.conv_channels
                )
            } else {
                "64 → ".to_string()
            },
            args.hidden,
            args.dropout,
            args.batch,
            config.optimizer,
            args.lr,
            if config.cosine { " (cosine)" } else { "" },
            args.label_smoothing,
            args.seed
        );
        match &config.augment {
            Some(a) => println!(
                "augmentation: random affine on {:.0} % of images per epoch, rotation ±{}°, scale ±{}, shear ±{}, shift ±{} px; standardised: {}",
                100.0 * a.probability,
                a.rotate_deg,
                a.scale,
                a.shear,
                a.translate,
                config.standardize
            ),
            None => println!("augmentation: none; standardised: {}", config.standardize),
        }
        println!("graph: {}", dot_path.display());
    }
    let mut step_seconds = Vec::new();
    let mut losses = Vec::new();
    for epoch in 1..=args.epochs {
        let report = model.epoch(&train, || bar.inc(1))?;
        step_seconds.extend_from_slice(&report.step_seconds);
        losses.push(report.loss);
        bar.set_message(format!("loss {:.4}", report.loss));
        let line = format!("epoch {epoch:3}  loss {:.6}", report.loss);
        // Without a terminal, every tenth of the run (and the last epoch).
        let summary_every = args.epochs.div_ceil(10).max(1);
        let summary = epoch % summary_every == 0 || epoch == args.epochs;
        if !args.json {
            if args.log_epochs && !bar.is_hidden() {
                bar.println(line);
            } else if args.log_epochs || (bar.is_hidden() && summary) {
                println!("{line}");
            }
        }
    }
    bar.finish_and_clear();
    let plain_accuracy = model.accuracy(&test)?;
    let test_accuracy = if args.no_tta {
        plain_accuracy
    } else {
        model.accuracy_tta(&test, &TTA_VIEWS)?
    };
    let ms_per_step = 1e3 * median(&mut step_seconds);
    let peak_bytes = model.peak_bytes();
    if args.json {
        let out = serde_json::json!({
            "epochs": args.epochs,
            "batch": args.batch,
            "conv_channels": args.conv_channels,
            "hidden": args.hidden,
            "steps": step_seconds.len(),
            "final_loss": losses.last(),
            "test_accuracy": test_accuracy,
            "test_accuracy_no_tta": plain_accuracy,
            "tta_views": if args.no_tta { 1 } else { TTA_VIEWS.len() },
            "ms_per_step": ms_per_step,
            "eager": args.eager,
            "peak_bytes": peak_bytes,
            "graph": dot_path.display().to_string(),
        });
        println!("{out}");
    } else {
        if args.no_tta {
            println!("test accuracy  {test_accuracy:.4}");
        } else {
            println!(
                "test accuracy  {test_accuracy:.4} (mean of {} views; {plain_accuracy:.4} without)",
                TTA_VIEWS.len()
            );
        }
        println!(
            "time per step  {ms_per_step:.4} ms (median of {} steps: forward, backward, updates)",
            step_seconds.len()
        );
        println!(
            "peak bytes     {peak_bytes} (planned executor buffers + parameters, gradients, optimizer state, one batch)"
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("train_digits: {e}");
            ExitCode::FAILURE
        }
    }
}
