//! `row_sq_dist/fused` (the bench's row-sum graph over 1,024-element rows)
//! alone in a process, alternated with the bench's `stream/read2` loop
//! over the same bytes, for a profiler or a quick A/B:
//!
//! ```sh
//! cargo build --profile bench -p simpleop-cli --example prof_rows
//! SIMPLEOP_ISA=avx2 target/release/examples/prof_rows 16777216 50
//! ```
//!
//! Arguments: elements (a multiple of 1,024; default 2^24) and calls
//! (default 50). It prints the median and best ms of each and the ratio
//! of the medians.

use std::collections::HashMap;
use std::hint::black_box;
use std::time::Instant;

use simpleop::symbol::BindConfig;
use simpleop::{DType, NDArray};
use simpleop_cli::bench::{row_sq_dist_symbol, stream_read2};

fn arg(i: usize, default: usize) -> simpleop::Result<usize> {
    match std::env::args().nth(i) {
        Some(s) => s.parse().map_err(|_| {
            simpleop::Error::argument("prof_rows", format!("argument {i}: got {s:?}"))
        }),
        None => Ok(default),
    }
}

fn main() -> simpleop::Result<()> {
    simpleop_ops::link();
    let n = arg(1, 1 << 24)?;
    let calls = arg(2, 50)?.max(1);
    let rows = (n / 1024).max(1);
    let p = NDArray::random_uniform([rows, 1024], -4.0, 4.0, DType::F32, 6)?;
    let q = NDArray::random_uniform([rows, 1024], -4.0, 4.0, DType::F32, 7)?;
    let args = HashMap::from([("x".to_owned(), p.clone()), ("y".to_owned(), q.clone())]);
    let mut fused = row_sq_dist_symbol()?.bind_with(
        args,
        HashMap::new(),
        HashMap::new(),
        BindConfig::default(),
    )?;
    let (pv, qv) = (p.to_vec::<f32>()?, q.to_vec::<f32>()?);
    let (mut ts, mut bs) = (Vec::new(), Vec::new());
    for _ in 0..calls {
        let t = Instant::now();
        fused.forward(false)?;
        ts.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        stream_read2(black_box(&pv), black_box(&qv))?;
        bs.push(t.elapsed().as_secs_f64() * 1e3);
    }
    for v in [&mut ts, &mut bs] {
        v.sort_by(f64::total_cmp);
    }
    let (m, b) = (ts[ts.len() / 2], bs[bs.len() / 2]);
    println!(
        "row_sq_dist/fused: median {m:.3} ms, best {:.3} ms; read2 median {b:.3} ms, best {:.3} ms; ratio {:.2}",
        ts[0],
        bs[0],
        m / b
    );
    Ok(())
}
