//! A loop of one recorded one-element `relu` and its backward (the path
//! the `tiny/relu/recorded` bench row times), or with `typed` of the
//! unrecorded call (`tiny/relu/typed`), alone in a process so that a
//! profiler sees nothing else. Wall time depends on whole-program inlining;
//! the instruction count is the stable measure:
//!
//! ```sh
//! cargo build --profile bench -p simpleop-cli --example prof_recorded
//! valgrind --tool=callgrind target/release/examples/prof_recorded 20000 [typed]
//! ```
//!
//! The first argument is the number of iterations (default 20 000); it
//! prints µs per iteration.

use std::hint::black_box;

use simpleop::{NDArray, autograd, eager};

fn main() -> simpleop::Result<()> {
    simpleop_ops::link();
    let n: usize = match std::env::args().nth(1) {
        Some(s) => s
            .parse()
            .map_err(|_| simpleop::Error::argument("iterations", format!("a count, got {s:?}")))?,
        None => 20_000,
    };
    let relu = eager::lookup("relu")?.def;
    let env = simpleop::EnvArguments::none();
    let mut x = NDArray::from_vec(vec![0.5f32], [1])?;
    x.attach_grad()?;
    let typed = std::env::args().nth(2).is_some_and(|a| a == "typed");
    let start = std::time::Instant::now();
    for _ in 0..n {
        if typed {
            black_box(eager::invoke_with(relu, &[black_box(&x)], &env)?);
        } else {
            let y = autograd::record(|| eager::invoke_with(relu, &[black_box(&x)], &env))?;
            y.backward()?;
        }
    }
    let us = start.elapsed().as_secs_f64() * 1e6 / n.max(1) as f64;
    black_box(x.grad());
    let what = if typed {
        "typed relu"
    } else {
        "recorded relu + backward"
    };
    println!("{us:.3} µs per {what}");
    Ok(())
}
