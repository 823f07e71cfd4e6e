//! Criterion benches of the elementwise kernels through the eager API:
//! `cargo bench -p simpleop-ops --bench kernels`.
//!
//! One million elements (in cache on most machines, so these measure the
//! kernels' compute, not memory bandwidth), for the cheap and the
//! transcendental ops, f32 and the half types, with SIMD on and off. The
//! whole-array, bandwidth-bound figures are `simpleop bench`'s.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use simpleop::{Attrs, DType, NDArray, OpReqType, eager};
use simpleop::{Isa, Tuning};

const N: usize = 1 << 20;

fn unary(c: &mut Criterion) {
    simpleop_ops::link();
    let mut g = c.benchmark_group("unary");
    g.throughput(Throughput::Elements(N as u64));
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let x = NDArray::random_uniform([N], 0.1, 4.0, dtype, 1).expect("input");
        let mut out = NDArray::zeros([N], dtype);
        for op in ["relu", "exp", "tanh", "sigmoid", "log", "erf"] {
            g.bench_with_input(BenchmarkId::new(op, dtype.name()), &x, |b, x| {
                b.iter(|| {
                    eager::invoke_into_by_name(
                        op,
                        &[x],
                        &Attrs::new(),
                        &mut out,
                        OpReqType::WriteTo,
                    )
                    .expect("op runs")
                })
            });
        }
    }
    g.finish();
}

fn simd_on_off(c: &mut Criterion) {
    simpleop_ops::link();
    let mut g = c.benchmark_group("smooth_l1_isa");
    g.throughput(Throughput::Elements(N as u64));
    let x = NDArray::random_uniform([N], -3.0, 3.0, DType::F32, 2).expect("input");
    let mut out = NDArray::zeros([N], DType::F32);
    let attrs = Attrs::from([("scalar", "1.0")]);
    for isa in [Isa::Scalar, Isa::best()] {
        let _isa = Tuning::scoped(|t| t.isa = isa).expect("supported");
        g.bench_function(isa.name(), |b| {
            b.iter(|| {
                eager::invoke_into_by_name("smooth_l1", &[&x], &attrs, &mut out, OpReqType::WriteTo)
                    .expect("op runs")
            })
        });
    }
    g.finish();
}

criterion_group!(benches, unary, simd_on_off);
criterion_main!(benches);
