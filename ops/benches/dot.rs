//! `dot` on 1024×1024 f32, timed through the typed eager function
//! (`dot_into` with `WriteTo`, so no allocation is timed).
//!
//! A plain `main` (`harness = false`): a warm-up, then `DOT_BENCH_RUNS`
//! (default 20) timed runs; prints the median and the spread as
//! `dot_1024_f32_ms <median>` (and every sample, sorted, on a
//! `dot_1024_f32_samples_ms` line) for `bench/dot_vs_numpy.py` to read.
//!
//! ```text
//! cargo bench -p simpleop-ops --bench dot
//! ```

use std::hint::black_box;
use std::time::Instant;

use simpleop::{DType, NDArray, OpReqType};
use simpleop_ops::{DotParams, dot_into};

const N: usize = 1024;

fn main() {
    let runs: usize = std::env::var("DOT_BENCH_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20)
        .max(1);
    let a = NDArray::random_uniform([N, N], -1.0, 1.0, DType::F32, 1).expect("lhs");
    let b = NDArray::random_uniform([N, N], -1.0, 1.0, DType::F32, 2).expect("rhs");
    let mut c = NDArray::zeros([N, N], DType::F32);
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
    let gflops = 2.0 * (N as f64).powi(3) / (median * 1e-3) / 1e9;
    println!(
        "dot {N}x{N} f32 ({runs} runs): median {median:.3} ms, min {:.3} ms, max {:.3} ms, {gflops:.1} GFLOP/s",
        ms[0],
        ms[runs - 1]
    );
    println!("dot_1024_f32_ms {median:.4}");
    let all: Vec<String> = ms.iter().map(|v| format!("{v:.4}")).collect();
    println!("dot_1024_f32_samples_ms {}", all.join(" "));
}
