//! Trains a LeNet with BatchNorm on the UCI digits from MXNet's layer
//! ops, saves it as MXNet's `-symbol.json` and `.params` (what Gluon's
//! `export` writes), loads it back into a fresh executor, and checks that
//! the reloaded model predicts exactly what the trained one does.
//!
//! ```text
//! cargo run --release --example train_lenet [-- --epochs 20 --out target/lenet]
//! ```
//!
//! The first 1,500 rows of `examples/data/digits.csv` train, the last 297
//! test. The model: two blocks of 3×3 `Convolution` (padding 1; 8, then
//! 16 filters), `BatchNorm`, relu and 2×2 max `Pooling`, then
//! `FullyConnected` 64, relu, `FullyConnected` 10 and `SoftmaxOutput`;
//! SGD with momentum 0.9 at a cosine-decayed learning rate.

mod lenet;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// Rows used for training; the rest test.
const TRAIN_ROWS: usize = 1500;

/// Train, save, reload and compare a LeNet on the digits data.
#[derive(Parser, Debug)]
struct Args {
    /// Passes over the training rows.
    #[arg(long, default_value_t = 20)]
    epochs: usize,
    /// Images per step.
    #[arg(long, default_value_t = 50)]
    batch: usize,
    /// The initial learning rate.
    #[arg(long, default_value_t = 0.05)]
    lr: f64,
    /// Seed of the initial weights.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Where the model goes: `OUT-symbol.json` and `OUT-0000.params`.
    #[arg(long, default_value = "target/lenet/lenet")]
    out: PathBuf,
    /// The digits CSV.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/data/digits.csv"))]
    data: PathBuf,
}

fn main() -> ExitCode {
    simpleop_ops::link();
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> simpleop::Result<()> {
    let all = lenet::load(&args.data)?;
    let (train, test) = (all.slice(0, TRAIN_ROWS), all.slice(TRAIN_ROWS, all.rows()));
    let sym = lenet::model()?;
    let mut exe = lenet::bind(&sym, args.batch, true)?;
    lenet::initialize(&mut exe, args.seed)?;
    let mut mom = HashMap::new();
    let started = std::time::Instant::now();
    for epoch in 0..args.epochs {
        let t = epoch as f64 / args.epochs as f64;
        let lr = args.lr * 0.5 * (1.0 + (std::f64::consts::PI * t).cos());
        lenet::train_epoch(&mut exe, &train, args.batch, lr, &mut mom)?;
    }
    let seconds = started.elapsed().as_secs_f64();
    if let Some(dir) = args.out.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| simpleop::Error::argument("--out", e.to_string()))?;
    }
    // Inference executors over the test rows: the trained weights, then
    // the ones read back from the files.
    let mut trained = lenet::bind(&sym, test.rows(), false)?;
    let options = simpleop::params::LoadOptions {
        inputs: &lenet::INPUTS,
        ..Default::default()
    };
    trained.load_params(&exe.params(&lenet::INPUTS), &options)?;
    let before = lenet::predict(&mut trained, &test)?;
    lenet::save(&exe, &sym, &args.out)?;
    let mut reloaded = lenet::load_model(&args.out, test.rows())?;
    let after = lenet::predict(&mut reloaded, &test)?;
    println!(
        "trained {} epochs in {seconds:.1} s; test accuracy {:.3}; saved {}-symbol.json and -0000.params",
        args.epochs,
        lenet::accuracy(&before, &test),
        args.out.display()
    );
    println!(
        "reloaded: test accuracy {:.3}, predictions {}",
        lenet::accuracy(&after, &test),
        if before == after {
            "identical"
        } else {
            "DIFFERENT"
        }
    );
    if before != after {
        let why = "the model read back predicts differently from the trained one";
        return Err(simpleop::Error::invalid("train_lenet", "--out", why));
    }
    Ok(())
}
