//! One eager unary op over a large array, alone in a process, for a
//! profiler or a quick A/B of one bench row without the whole suite:
//!
//! ```sh
//! cargo build --profile bench -p simpleop-cli --example prof_unary
//! SIMPLEOP_ISA=avx2 target/release/examples/prof_unary exp bfloat16 16777216 50
//! ```
//!
//! Arguments: op, dtype, elements, calls (defaults relu float32 2^24 50).
//! It prints the median ms per call and the best, and, when the op is not
//! relu, relu's median over the same dtype and elements timed in
//! alternation, with their ratio.

use std::hint::black_box;
use std::time::Instant;

use simpleop::{Attrs, DType, NDArray, OpReqType, eager};

fn arg<T: std::str::FromStr>(i: usize, default: T) -> simpleop::Result<T> {
    match std::env::args().nth(i) {
        Some(s) => s.parse().map_err(|_| {
            simpleop::Error::argument("prof_unary", format!("argument {i}: got {s:?}"))
        }),
        None => Ok(default),
    }
}

fn main() -> simpleop::Result<()> {
    simpleop_ops::link();
    let op: String = arg(1, "relu".to_string())?;
    let dtype_name: String = arg(2, "float32".to_string())?;
    let dtype = DType::from_name(&dtype_name)
        .ok_or_else(|| simpleop::Error::argument("prof_unary", format!("dtype {dtype_name:?}")))?;
    let n: usize = arg(3, 1 << 24)?;
    let calls: usize = arg(4, 50)?;
    let lo = if op == "log" { 0.05 } else { -4.0 };
    let x = NDArray::random_uniform([n], lo, 4.0, DType::F32, 2)?.astype(dtype);
    let mut out = NDArray::zeros([n], dtype);
    let mut base = NDArray::zeros([n], dtype);
    let attrs = if op == "smooth_l1" {
        Attrs::from_iter([("scalar", "1.0")])
    } else {
        Attrs::new()
    };
    let none = Attrs::new();
    let run = |name: &str, out: &mut NDArray| -> simpleop::Result<f64> {
        let attrs = if name == op { &attrs } else { &none };
        let t = Instant::now();
        eager::invoke_into_by_name(name, &[black_box(&x)], attrs, out, OpReqType::WriteTo)?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    };
    let (mut ts, mut bs) = (Vec::new(), Vec::new());
    for _ in 0..calls.max(1) {
        ts.push(run(&op, &mut out)?);
        if op != "relu" {
            bs.push(run("relu", &mut base)?);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let m = median(&mut ts);
    print!("{op}/{dtype_name}: median {m:.3} ms, best {:.3} ms", ts[0]);
    if !bs.is_empty() {
        let b = median(&mut bs);
        print!("; relu {b:.3} ms; ratio {:.2}", m / b);
    }
    println!();
    Ok(())
}
