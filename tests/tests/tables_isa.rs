//! A half-type table built under one instruction set is not read under
//! another (`simd::set_active`): the plain and FMA forms of the vector math
//! differ in the last bit, which can survive rounding to f16/bf16. A binary
//! of its own because it switches the process's instruction set.

use simpleop::kernel::simd::{self, Isa};
use simpleop::{Attrs, DType, NDArray, bf16, eager, f16};

fn bits(a: &NDArray) -> Vec<u16> {
    match a.dtype() {
        DType::F16 => a
            .to_vec::<f16>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect(),
        _ => a
            .to_vec::<bf16>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect(),
    }
}

fn every_pattern(dtype: DType) -> NDArray {
    let n = 1 << 16;
    match dtype {
        DType::F16 => NDArray::from_vec((0..=u16::MAX).map(f16::from_bits).collect(), [n]),
        _ => NDArray::from_vec((0..=u16::MAX).map(bf16::from_bits).collect(), [n]),
    }
    .unwrap()
}

/// `op` over `x` in pieces too short to read a table.
fn computed(op: &str, x: &NDArray) -> Vec<u16> {
    let all = x.to_f64_vec();
    let mut out = Vec::new();
    for chunk in all.chunks(1000) {
        let part = NDArray::from_vec(chunk.to_vec(), [chunk.len()])
            .unwrap()
            .astype(x.dtype());
        out.extend(bits(&eager::invoke(op, &[&part], &Attrs::new()).unwrap()));
    }
    out
}

#[test]
fn a_table_is_not_read_under_another_instruction_set() {
    simpleop_ops::link();
    let best = simd::active();
    if best == Isa::Scalar {
        eprintln!("only the scalar instruction set here: nothing to switch between");
        return;
    }
    let ops = ["exp", "log", "tanh", "sigmoid", "erf", "sin"];
    for dtype in [DType::F16, DType::BF16] {
        let x = every_pattern(dtype);
        // build every table under the best set
        for op in ops {
            eager::invoke(op, &[&x], &Attrs::new()).unwrap();
        }
        simd::set_active(Isa::Scalar).unwrap();
        for op in ops {
            let got = bits(&eager::invoke(op, &[&x], &Attrs::new()).unwrap());
            let want = computed(op, &x);
            let differ = got.iter().zip(&want).filter(|(a, b)| a != b).count();
            assert_eq!(differ, 0, "{op} {dtype}: the scalar build's bits");
        }
        simd::set_active(best).unwrap();
    }
}
