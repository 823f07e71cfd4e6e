//! `dot` on N×N f32 (`DOT_BENCH_SIZE`, default 1024), timed through the
//! typed eager function (`dot_into` with `WriteTo`, so no allocation is
//! timed).
//!
//! A plain `main` (`harness = false`): a warm-up, then `DOT_BENCH_RUNS`
//! (default 20) timed runs; prints the median and the spread as
//! `dot_<N>_f32_ms <median>` (and every sample, sorted, on a
//! `dot_<N>_f32_samples_ms` line) for `bench/dot_vs_numpy.py` to read.
//!
//! ```text
//! cargo bench -p simpleop-ops --bench dot
//! DOT_BENCH_SIZE=512 cargo bench -p simpleop-ops --bench dot
//! ```

use std::hint::black_box;
use std::time::Instant;

use simpleop::{DType, NDArray, OpReqType};
use simpleop_ops::{DotParams, dot_into};

/// A positive number from the environment variable `name`, or `default`.
fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
        .max(1)
}

fn main() {
    let runs = env_count("DOT_BENCH_RUNS", 20);
    let n = env_count("DOT_BENCH_SIZE", 1024);
    let a = NDArray::random_uniform([n, n], -1.0, 1.0, DType::F32, 1).expect("lhs");
    let b = NDArray::random_uniform([n, n], -1.0, 1.0, DType::F32, 2).expect("rhs");
    let mut c = NDArray::zeros([n, n], DType::F32);
    let run = |c: &mut NDArray| {
        dot_into(
            black_box(&a),
            black_box(&b),
            DotParams::default(),
            c,
            OpReqType::WriteTo,
        )
        .expect("dot");
    };
    for _ in 0..3 {
        run(&mut c);
    }
    let mut ms: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            run(&mut c);
            black_box(&c);
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    let median = if runs % 2 == 1 {
        ms[runs / 2]
    } else {
        0.5 * (ms[runs / 2 - 1] + ms[runs / 2])
    };
    let gflops = 2.0 * (n as f64).powi(3) / (median * 1e-3) / 1e9;
    println!(
        "dot {n}x{n} f32 ({runs} runs): median {median:.3} ms, min {:.3} ms, max {:.3} ms, {gflops:.1} GFLOP/s",
        ms[0],
        ms[runs - 1]
    );
    println!("dot_{n}_f32_ms {median:.4}");
    let all: Vec<String> = ms.iter().map(|v| format!("{v:.4}")).collect();
    println!("dot_{n}_f32_samples_ms {}", all.join(" "));
}
