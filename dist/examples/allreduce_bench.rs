//! Times `GradReducer::allreduce_mean` (pack, `MPI_Iallreduce`, wait,
//! unpack) on one float32 gradient of growing size, and fits the α–β
//! model `t = α + β · bytes`: α from the smallest message, β from the
//! slope to the largest. Rank 0 prints the table and the fit.
//!
//! ```text
//! cargo build --release -p simpleop-dist --example allreduce_bench
//! mpirun -np 2 --oversubscribe target/release/examples/allreduce_bench [--json]
//! ```
//!
//! With `--json`, rank 0 prints one JSON object per size instead
//! (`ranks`, `bytes`, `reps`, `median_s`, `min_s`), which
//! `bench/dist_projection.py` reads.

use std::process::ExitCode;
use std::time::Instant;

use simpleop::{DType, NDArray};
use simpleop_dist::{Dist, DistConfig, GradReducer};

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One size's timings: bytes, repetitions, median and fastest seconds.
#[derive(Clone, Copy)]
struct Row {
    bytes: usize,
    reps: usize,
    median: f64,
    min: f64,
}

fn bench(dist: &mut Dist) -> simpleop_dist::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for log4 in 2..=11 {
        let n = 1usize << (2 * log4);
        let g = NDArray::ones([n], DType::F32);
        // One bucket: the size under test.
        let mut reducer = GradReducer::new(usize::MAX);
        let reps = if n >= 1 << 20 { 10 } else { 50 };
        let mut times = Vec::with_capacity(reps);
        for rep in 0..reps + 3 {
            let start = Instant::now();
            reducer.allreduce_mean(dist, &[&g])?;
            if rep >= 3 {
                times.push(start.elapsed().as_secs_f64());
            }
        }
        let min = times.iter().copied().fold(f64::INFINITY, f64::min);
        rows.push(Row {
            bytes: 4 * n,
            reps,
            median: median(&mut times),
            min,
        });
    }
    Ok(rows)
}

fn main() -> ExitCode {
    let json = match std::env::args().skip(1).collect::<Vec<_>>().as_slice() {
        [] => false,
        [a] if a == "--json" => true,
        other => {
            eprintln!("allreduce_bench: unexpected arguments {other:?} (only --json)");
            return ExitCode::FAILURE;
        }
    };
    let mut dist = match DistConfig::from_env().and_then(Dist::init) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("allreduce_bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    let rows = match bench(&mut dist) {
        Ok(rows) => rows,
        Err(_) => return ExitCode::FAILURE,
    };
    if dist.is_root() && json {
        for r in &rows {
            println!(
                "{{\"ranks\": {}, \"bytes\": {}, \"reps\": {}, \"median_s\": {:e}, \"min_s\": {:e}}}",
                dist.size(),
                r.bytes,
                r.reps,
                r.median,
                r.min
            );
        }
    } else if dist.is_root() {
        println!("ranks {}: bytes, median seconds", dist.size());
        for r in &rows {
            println!("{:>10} {:>10.1} µs", r.bytes, r.median * 1e6);
        }
        // α: the smallest message; β: the slope up to the largest (a
        // least-squares line would let the large sizes' noise set α).
        let (small, large) = (rows[0], rows[rows.len() - 1]);
        let alpha = small.median;
        let beta = (large.median - small.median) / (large.bytes - small.bytes) as f64;
        println!(
            "fit: alpha {:.1} µs, beta {:.3} ns/byte ({:.2} GB/s)",
            alpha * 1e6,
            beta * 1e9,
            1.0 / beta / 1e9
        );
    }
    ExitCode::SUCCESS
}
