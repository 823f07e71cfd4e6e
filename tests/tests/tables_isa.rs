//! A half-type table built under one instruction set is not read under
//! another (`simd::set_active`): the plain and FMA forms of the vector math
//! differ in the last bit, which can survive rounding to f16/bf16. A binary
//! of its own because it switches the process's instruction set.

use simpleop::__private::engine::isa::{self as simd, Isa};
use simpleop::{Attrs, DType, eager};
use simpleop_tests::half_bits::{bits, computed, from_bits};

#[test]
fn a_table_is_not_read_under_another_instruction_set() {
    simpleop_ops::link();
    // Read every table built, even where computing is faster.
    simpleop::__private::engine::table::set_half_table_timing(false);
    let best = simd::active();
    if best == Isa::Scalar {
        eprintln!("only the scalar instruction set here: nothing to switch between");
        return;
    }
    let ops = ["exp", "log", "tanh", "sigmoid", "erf", "sin"];
    for dtype in [DType::F16, DType::BF16] {
        let all: Vec<u16> = (0..=u16::MAX).collect();
        let x = from_bits(dtype, &all);
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
