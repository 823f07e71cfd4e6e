//! The vectorised drivers: every SIMD instruction set gives the same bits,
//! and the same bits as the scalar build except where the FMA forms of the
//! f32 vector math round differently (by at most their error bounds), for
//! f32, f64, f16 and bf16, branchy kernels included; outputs large enough to
//! be split over threads honour every request type, in place included; and
//! `Float`'s f32 vector math is what the ops use.

use simpleop::{Attrs, DType, Isa, NDArray, OpReqType, Tuning, TuningGuard, eager};

fn run(op: &str, x: &NDArray, attrs: &Attrs) -> NDArray {
    eager::invoke(op, &[x], attrs).unwrap()
}

fn bits(a: &NDArray) -> Vec<u64> {
    a.to_f64_vec().iter().map(|v| v.to_bits()).collect()
}

/// Ordered-integer distance between two values of `dtype` (as f64).
fn ulps(dtype: DType, a: f64, b: f64) -> u64 {
    let ord = |v: f64| -> i64 {
        let i = match dtype {
            DType::F64 => v.to_bits() as i64,
            DType::F32 => i64::from((v as f32).to_bits() as i32),
            DType::F16 => i64::from(simpleop::f16::from_f64(v).to_bits() as i16),
            _ => i64::from(simpleop::bf16::from_f64(v).to_bits() as i16),
        };
        if i < 0 { i64::MIN.wrapping_sub(i) } else { i }
    };
    ord(a).abs_diff(ord(b))
}

/// The tests here change process-wide switches (the instruction set, the
/// parallel grain, the cache size) or compare bits of runs that depend on
/// them, so they take turns: tests run on parallel threads.
/// They hold a [`Tuning`] guard, which also puts every setting back.
fn turn() -> TuningGuard {
    Tuning::scoped(|_| {}).unwrap()
}

#[test]
fn every_isa_agrees_with_the_scalar_build() {
    let mut tuning = turn();
    simpleop_ops::link();
    // (op, attrs, uses f32 vector math)
    let ops: [(&str, Attrs, bool); 7] = [
        ("relu", Attrs::new(), false),
        ("smooth_l1", Attrs::from([("scalar", "1.0")]), false),
        ("tanh", Attrs::new(), true),
        ("exp", Attrs::new(), true),
        ("sigmoid", Attrs::new(), true),
        ("erf", Attrs::new(), true),
        // NaN for the negative inputs
        ("log", Attrs::new(), true),
    ];
    let mut fma_differs = 0;
    // Odd length: every loop has a remainder after its vectors.
    for dtype in DType::FLOATS {
        let x = NDArray::random_uniform([3, 1001], -6.0, 6.0, dtype, 11).unwrap();
        let y = NDArray::random_uniform([1001], -2.0, 2.0, dtype, 12).unwrap();
        tuning.update(|t| t.isa = Isa::Scalar).unwrap();
        let scalar: Vec<_> = ops.iter().map(|(op, a, _)| run(op, &x, a)).collect();
        let want_add = bits(&eager::invoke("broadcast_add", &[&x, &y], &Attrs::new()).unwrap());
        let mut first_simd: Option<Vec<Vec<u64>>> = None;
        for isa in [Isa::Avx2, Isa::Avx512, Isa::Neon] {
            if tuning.update(|t| t.isa = isa).is_err() {
                continue;
            }
            let got: Vec<_> = ops.iter().map(|(op, a, _)| run(op, &x, a)).collect();
            for (((op, _, math), g), s) in ops.iter().zip(&got).zip(&scalar) {
                if *math && dtype != DType::F64 {
                    // The plain and fused forms are at most 4 ULP apart
                    // (f32): exp and erf are each within 1 ULP of the true
                    // value, and the forms of tanh and sigmoid were measured
                    // at most 2 and 4 apart over all f32 inputs; a half type
                    // rounds both.
                    let bound = if dtype == DType::F32 { 4 } else { 1 };
                    for (a, b) in g.to_f64_vec().iter().zip(s.to_f64_vec()) {
                        let d = ulps(dtype, *a, b);
                        assert!(d <= bound, "{op} {dtype} {isa:?}: {a} vs scalar {b}");
                        fma_differs += usize::from(d > 0);
                    }
                } else {
                    assert_eq!(bits(g), bits(s), "{op} {dtype} {isa:?}");
                }
            }
            let got: Vec<_> = got.iter().map(bits).collect();
            match &first_simd {
                None => first_simd = Some(got),
                Some(w) => assert_eq!(&got, w, "{dtype} {isa:?} against the first SIMD set"),
            }
            let add = eager::invoke("broadcast_add", &[&x, &y], &Attrs::new()).unwrap();
            assert_eq!(bits(&add), want_add, "broadcast_add {dtype} {isa:?}");
        }
    }
    if Isa::best() != Isa::Scalar {
        // the FMA forms are really in use: some results differ in the last bit
        assert!(fma_differs > 0);
    }
}

#[test]
fn large_outputs_honour_every_request() {
    let _turn = turn();
    simpleop_ops::link();
    // Split over threads, and not a multiple of any vector or tile.
    simpleop::Tuning::update(|t| t.parallel_work = 0).unwrap();
    let n = 16 * simpleop_tests::least_grain() + 37;
    let x = NDArray::random_uniform([n], -3.0, 3.0, DType::F32, 5).unwrap();
    let xs = x.to_vec::<f32>().unwrap();
    let relu: Vec<f32> = xs.iter().map(|&v| if v <= 0.0 { 0.0 } else { v }).collect();

    let fresh = run("relu", &x, &Attrs::new());
    assert_eq!(fresh.to_vec::<f32>().unwrap(), relu);

    let mut out = NDArray::full([n], 7.0, DType::F32);
    eager::invoke_into_by_name("relu", &[&x], &Attrs::new(), &mut out, OpReqType::WriteTo).unwrap();
    assert_eq!(out.to_vec::<f32>().unwrap(), relu);

    let mut acc = NDArray::full([n], 1.0, DType::F32);
    eager::invoke_into_by_name("relu", &[&x], &Attrs::new(), &mut acc, OpReqType::AddTo).unwrap();
    let want: Vec<f32> = relu.iter().map(|v| v + 1.0).collect();
    assert_eq!(acc.to_vec::<f32>().unwrap(), want);

    let mut inplace = x.deep_copy();
    let before = inplace.blob().as_ptr();
    eager::invoke_inplace_by_name("relu", &mut inplace, &[], &Attrs::new()).unwrap();
    assert_eq!(inplace.blob().as_ptr(), before, "written in its own buffer");
    assert_eq!(inplace.to_vec::<f32>().unwrap(), relu);

    let mut null = NDArray::full([n], 3.0, DType::F32);
    eager::invoke_into_by_name("relu", &[&x], &Attrs::new(), &mut null, OpReqType::Null).unwrap();
    assert!(null.to_vec::<f32>().unwrap().iter().all(|&v| v == 3.0));
}

/// exp, tanh, sigmoid, log and relu name AVX-512 vector forms, which convert f16/bf16
/// in registers: every request, on every float type, over an output split
/// between threads with a tail, against the scalar form the active set
/// runs (the FMA one but on the scalar baseline) per element.
/// (Within the bound `every_isa_agrees_with_the_scalar_build` allows: a
/// CPU without them runs the plain forms.)
#[test]
fn vector_forms_honour_every_request_on_every_type() {
    let _turn = turn();
    simpleop_ops::link();
    simpleop::Tuning::update(|t| t.parallel_work = 0).unwrap();
    let n = 4 * simpleop_tests::least_grain() + 37;
    type Scalar = fn(f32) -> f32;
    use simpleop::__private::vmath;
    // the form the active set's tile loops run: FMA where it has it
    let fma = simpleop::Tuning::current().isa != simpleop::Isa::Scalar;
    let ops: [(&str, Scalar); 5] = [
        ("exp", if fma { vmath::fma::exp } else { vmath::exp }),
        ("tanh", if fma { vmath::fma::tanh } else { vmath::tanh }),
        (
            "sigmoid",
            if fma {
                vmath::fma::sigmoid
            } else {
                vmath::sigmoid
            },
        ),
        ("log", if fma { vmath::fma::ln } else { vmath::ln }),
        ("relu", |x| if x <= 0.0 { 0.0 } else { x }),
    ];
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let x = NDArray::random_uniform([n], -12.0, 12.0, dtype, 9).unwrap();
        let xs = x.to_f64_vec();
        let bound = if dtype == DType::F32 { 4 } else { 1 };
        for (op, f) in ops {
            let want: Vec<f64> = xs.iter().map(|&v| f64::from(f(v as f32))).collect();
            let check = |got: &NDArray, plus: f64, how: &str| {
                for ((g, w), v) in got.to_f64_vec().iter().zip(&want).zip(&xs) {
                    // the sum is rounded to the type like the store rounds it
                    let w = match dtype {
                        DType::F32 => f64::from((w + plus) as f32),
                        DType::F16 => simpleop::f16::from_f64(w + plus).to_f64(),
                        _ => simpleop::bf16::from_f64(w + plus).to_f64(),
                    };
                    let close = ulps(dtype, *g, w) <= bound || (g.is_nan() && w.is_nan());
                    assert!(close, "{op} {dtype} {how} at {v}: {g}, want {w}");
                }
            };
            check(&run(op, &x, &Attrs::new()), 0.0, "fresh");
            let mut out = NDArray::full([n], 7.0, dtype);
            eager::invoke_into_by_name(op, &[&x], &Attrs::new(), &mut out, OpReqType::WriteTo)
                .unwrap();
            check(&out, 0.0, "write");
            let mut acc = NDArray::full([n], 1.0, dtype);
            eager::invoke_into_by_name(op, &[&x], &Attrs::new(), &mut acc, OpReqType::AddTo)
                .unwrap();
            check(&acc, 1.0, "add");
            let mut inplace = x.deep_copy();
            eager::invoke_inplace_by_name(op, &mut inplace, &[], &Attrs::new()).unwrap();
            check(&inplace, 0.0, "in place");
            let mut null = NDArray::full([n], 3.0, dtype);
            eager::invoke_into_by_name(op, &[&x], &Attrs::new(), &mut null, OpReqType::Null)
                .unwrap();
            assert!(
                null.to_f64_vec().iter().all(|&v| v == 3.0),
                "{op} {dtype} null"
            );
        }
    }
}

/// The 16-bit patterns of a half-type array.
fn half_bits(a: &NDArray) -> Vec<u16> {
    match a.dtype() {
        DType::F16 => a
            .to_vec::<simpleop::f16>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect(),
        _ => a
            .to_vec::<simpleop::bf16>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect(),
    }
}

/// A half-type array of the given 16-bit patterns.
fn from_half_bits(bits: &[u16], dtype: DType) -> NDArray {
    let n = bits.len();
    match dtype {
        DType::F16 => NDArray::from_vec(
            bits.iter().map(|&b| simpleop::f16::from_bits(b)).collect(),
            [n],
        ),
        _ => NDArray::from_vec(
            bits.iter().map(|&b| simpleop::bf16::from_bits(b)).collect(),
            [n],
        ),
    }
    .unwrap()
}

/// f16/bf16 kernels without a vector form (`smooth_l1`, and `elemwise_add`
/// with two inputs) convert in registers on AVX2 and AVX-512 and through
/// tile buffers in plain code: the same bits for every request (in place
/// on the input's own buffer included), over every 16-bit pattern (both
/// zeros and infinities, every NaN payload, the subnormals, the largest
/// values) and sums that tie, overflow or land among subnormals, split
/// between threads with a tail; and past the caches, where the writes
/// stream. `elemwise_add` is also checked against `half` element by
/// element. Skipped on CPUs without AVX2, FMA and F16C.
#[test]
fn half_kernels_without_a_form_give_the_same_bits_on_every_isa() {
    let mut tuning = turn();
    simpleop_ops::link();
    if !Isa::Avx2.is_supported() {
        eprintln!("skipped: this CPU lacks AVX2, FMA or F16C");
        return;
    }
    let n = (4 * simpleop_tests::least_grain()).max(1 << 17) + 37;
    let sigma = Attrs::from([("scalar", "1.0")]);
    let ops: [(&str, &Attrs); 2] = [("smooth_l1", &sigma), ("elemwise_add", &Attrs::new())];
    for dtype in [DType::F16, DType::BF16] {
        // every pattern in order, then again from the top
        let xs: Vec<u16> = (0..n).map(|j| j as u16).collect();
        // half an ulp of 1 and of the largest values, the least subnormal
        let addends: [u16; 8] = match dtype {
            DType::F16 => [
                0x0000, 0x8000, 0x3c00, 0xbc00, 0x1000, 0x4c00, 0x0001, 0x8001,
            ],
            _ => [
                0x0000, 0x8000, 0x3f80, 0xbf80, 0x3b80, 0x7b00, 0x0001, 0x8001,
            ],
        };
        let ys: Vec<u16> = (0..n).map(|j| addends[j * 5 % addends.len()]).collect();
        let (x, y) = (from_half_bits(&xs, dtype), from_half_bits(&ys, dtype));
        let big = (8 << 20) / 2 + 123;
        let x_big = from_half_bits(
            &(0..big).map(|j| (j * 40_503) as u16).collect::<Vec<_>>(),
            dtype,
        );
        let y_big = from_half_bits(&(0..big).map(|j| ys[j % n]).collect::<Vec<_>>(), dtype);
        let cache = Tuning::current().cache_bytes;
        let mut first: Option<Vec<Vec<u16>>> = None;
        for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
            if tuning.update(|t| t.isa = isa).is_err() {
                continue;
            }
            // per op: fresh, WriteTo, AddTo, Null, in place, streamed
            let mut got = Vec::new();
            for (op, attrs) in ops {
                let (ins, big) = match op {
                    "smooth_l1" => (vec![&x], vec![&x_big]),
                    _ => (vec![&x, &y], vec![&x_big, &y_big]),
                };
                got.push(half_bits(&eager::invoke(op, &ins, attrs).unwrap()));
                for req in [OpReqType::WriteTo, OpReqType::AddTo, OpReqType::Null] {
                    let mut out = y.deep_copy();
                    eager::invoke_into_by_name(op, &ins, attrs, &mut out, req).unwrap();
                    got.push(half_bits(&out));
                }
                let mut inplace = x.deep_copy();
                let before = inplace.blob().as_ptr();
                eager::invoke_inplace_by_name(op, &mut inplace, &ins[1..], attrs).unwrap();
                // Only an op declaring a forward in place keeps the buffer.
                if eager::lookup(op).unwrap().def.inplace.forward.is_some() {
                    assert_eq!(
                        inplace.blob().as_ptr(),
                        before,
                        "{op} {dtype} {isa:?} in place"
                    );
                }
                got.push(half_bits(&inplace));
                // past the caches, however large this machine's are
                tuning.update(|t| t.cache_bytes = 0).unwrap();
                got.push(half_bits(&eager::invoke(op, &big, attrs).unwrap()));
                tuning.update(|t| t.cache_bytes = cache).unwrap();
                let at = |k: usize| format!("{op} {dtype} {isa:?} case {k}");
                let last = got.len() - 6;
                assert_eq!(got[last + 1], got[last], "{}", at(1));
                assert_eq!(got[last + 3], ys, "{}", at(3));
                assert_eq!(got[last + 4], got[last], "{}", at(4));
            }
            let widen = |b: u16| match dtype {
                DType::F16 => simpleop::f16::from_bits(b).to_f32(),
                _ => simpleop::bf16::from_bits(b).to_f32(),
            };
            let round = |v: f32| match dtype {
                DType::F16 => simpleop::f16::from_f32(v).to_bits(),
                _ => simpleop::bf16::from_f32(v).to_bits(),
            };
            // `elemwise_add` against `half`; an add to the output adds
            // the unrounded sum
            let pairs = || xs.iter().zip(&ys).map(|(&a, &b)| (widen(a), widen(b)));
            let sum: Vec<u16> = pairs().map(|(a, b)| round(a + b)).collect();
            let added: Vec<u16> = pairs().map(|(a, b)| round(b + (a + b))).collect();
            assert_eq!(got[6], sum, "elemwise_add {dtype} {isa:?}");
            assert_eq!(got[8], added, "elemwise_add {dtype} {isa:?} AddTo");
            match &first {
                None => first = Some(got),
                Some(want) => {
                    for (k, (g, w)) in got.iter().zip(want).enumerate() {
                        let (op, case) = (ops[k / 6].0, k % 6);
                        assert!(
                            g == w,
                            "{op} {dtype} {isa:?} case {case}: not plain code's bits"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn f32_ops_use_the_accurate_vector_math() {
    let _turn = turn();
    simpleop_ops::link();
    // tanh near 0 is where `1 - 2/(e^2x + 1)` would lose ~35 ULP.
    let xs: Vec<f32> = (1..2000).map(|i| i as f32 * 1e-4).collect();
    let x = NDArray::from_vec(xs.clone(), [xs.len()]).unwrap();
    // (op, reference, documented max ULP of `vmath`)
    for (op, f, bound) in [
        ("tanh", f64::tanh as fn(f64) -> f64, 3),
        ("exp", f64::exp, 2),
        ("log", f64::ln, 2),
        ("sigmoid", |v: f64| 1.0 / (1.0 + (-v).exp()), 2),
    ] {
        let got = run(op, &x, &Attrs::new()).to_vec::<f32>().unwrap();
        for (v, g) in xs.iter().zip(got) {
            let want = f(*v as f64) as f32;
            let ulps = (g.to_bits() as i64 - want.to_bits() as i64).abs();
            assert!(ulps <= bound, "{op}({v}) = {g}, want {want}: {ulps} ULP");
        }
    }
}

#[test]
fn small_direct_calls_match_the_tiled_path() {
    let _turn = turn();
    simpleop_ops::link();
    // 1,000 elements take the small direct path, 5,000 the tiled one; the
    // first 1,000 of the long input are the short input.
    for dtype in [DType::F32, DType::F64] {
        let long = NDArray::random_uniform([5000], -4.0, 4.0, dtype, 3).unwrap();
        let short_vals = long.to_f64_vec()[..1000].to_vec();
        let short = NDArray::from_f64(&short_vals, [1000], dtype).unwrap();
        let other = NDArray::random_uniform([1000], -1.0, 1.0, dtype, 4).unwrap();
        for (op, a) in [
            ("exp", Attrs::new()),
            ("tanh", Attrs::new()),
            ("smooth_l1", Attrs::from([("scalar", "2.0")])),
        ] {
            let want = run(op, &long, &a).to_f64_vec()[..1000].to_vec();
            let got = run(op, &short, &a).to_f64_vec();
            assert_eq!(
                got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{op} {dtype}"
            );
            // the requests the direct path leaves to the general one
            let mut acc = other.deep_copy();
            eager::invoke_into_by_name(op, &[&short], &a, &mut acc, OpReqType::AddTo).unwrap();
            for ((g, w), o) in acc.to_f64_vec().iter().zip(&want).zip(other.to_f64_vec()) {
                let sum = if dtype == DType::F32 {
                    f64::from((*w as f32) + (o as f32))
                } else {
                    w + o
                };
                assert_eq!(*g, sum, "{op} {dtype} AddTo");
            }
            let mut inplace = short.deep_copy();
            eager::invoke_inplace_by_name(op, &mut inplace, &[], &a).unwrap();
            assert_eq!(inplace.to_f64_vec(), want, "{op} {dtype} in place");
        }
        // a binary op whose second input is the output's own buffer
        let mut out = other.deep_copy();
        let alias = out.clone();
        eager::invoke_into_by_name(
            "elemwise_add",
            &[&short, &alias],
            &Attrs::new(),
            &mut out,
            OpReqType::WriteTo,
        )
        .unwrap();
        let want: Vec<f64> = short_vals
            .iter()
            .zip(other.to_f64_vec())
            .map(|(a, b)| {
                if dtype == DType::F32 {
                    f64::from(*a as f32 + b as f32)
                } else {
                    a + b
                }
            })
            .collect();
        assert_eq!(out.to_f64_vec(), want, "elemwise_add {dtype} aliased");
    }
}

#[test]
fn large_outputs_of_cheap_ops_stream_with_the_same_bits() {
    let mut tuning = turn();
    // streamed however large this machine's last-level cache is
    tuning.update(|t| t.cache_bytes = 0).unwrap();
    simpleop_ops::link();
    // 8 MiB and more written whole by a cheap kernel go out with
    // streaming stores (from registers where a vector form runs or, with
    // AVX-512, for f32/f64, through a staging tile otherwise); 2^21 + 123
    // elements (2^22 + 123 for half types) leave a tail past the last
    // line. Streaming off must give the same bits; `AddTo` (which never
    // streams) is checked against exact values alongside. Special values
    // sit at the start, inside, on a line boundary and in the tail: relu
    // gives +0 for -0 (checked bit for bit) and NaN for NaN, and an add of
    // a NaN is a NaN.
    let same = |a: &[f64], b: &[f64]| {
        a.len() == b.len()
            && a.iter()
                .zip(b)
                .all(|(x, y)| x == y || (x.is_nan() && y.is_nan()))
    };
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        let n = (8 << 20) / dtype.size() + 123;
        let specials = [
            f32::NAN,
            -0.0,
            0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            1e-40,
            -1e-40,
        ];
        // The sum of two values, rounded as the kernel does: in the
        // compute type (f32 for half types), then to the storage type.
        let round = |v: f32| match dtype {
            DType::F16 => f64::from(simpleop::f16::from_f32(v)),
            DType::BF16 => f64::from(simpleop::bf16::from_f32(v)),
            _ => f64::from(v),
        };
        let mut x32 = NDArray::random_uniform([n], -1.0, 1.0, DType::F32, 5)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        for at in [0, 1000, 4096, n / 2, n - 5] {
            let m = specials.len().min(n - at);
            x32[at..at + m].copy_from_slice(&specials[..m]);
        }
        let x = NDArray::from_vec(x32, [n]).unwrap().astype(dtype);
        let y = NDArray::random_uniform([n], -1.0, 1.0, dtype, 6).unwrap();
        let (xs, ys) = (x.to_f64_vec(), y.to_f64_vec());
        let relu = run("relu", &x, &Attrs::new());
        let relu_of = |v: f64| if v <= 0.0 { 0.0 } else { v };
        let want: Vec<u64> = xs.iter().map(|&v| relu_of(v).to_bits()).collect();
        let got = bits(&relu);
        let nan = |b: u64| f64::from_bits(b).is_nan();
        assert!(
            got.len() == want.len()
                && got
                    .iter()
                    .zip(&want)
                    .all(|(&g, &w)| g == w || (nan(g) && nan(w))),
            "{dtype:?} relu"
        );
        let add = eager::invoke("elemwise_add", &[&x, &y], &Attrs::new()).unwrap();
        let want: Vec<f64> = xs
            .iter()
            .zip(&ys)
            .map(|(a, b)| match dtype {
                DType::F64 => a + b,
                _ => round(*a as f32 + *b as f32),
            })
            .collect();
        assert!(same(&add.to_f64_vec(), &want), "{dtype:?} add");
        let mut acc = y.clone();
        eager::invoke_into_by_name("relu", &[&x], &Attrs::new(), &mut acc, OpReqType::AddTo)
            .unwrap();
        let want: Vec<f64> = xs
            .iter()
            .zip(&ys)
            .map(|(a, b)| match dtype {
                DType::F64 => relu_of(*a) + b,
                _ => round(relu_of(*a) as f32 + *b as f32),
            })
            .collect();
        assert!(same(&acc.to_f64_vec(), &want), "{dtype:?} relu AddTo");
        let before = Tuning::current().stream_stores;
        tuning.update(|t| t.stream_stores = false).unwrap();
        let plain = run("relu", &x, &Attrs::new());
        tuning.update(|t| t.stream_stores = before).unwrap();
        assert_eq!(bits(&plain), bits(&relu), "{dtype:?} streaming off");
        tuning.update(|t| t.stream_stores = false).unwrap();
        let plain = eager::invoke("elemwise_add", &[&x, &y], &Attrs::new()).unwrap();
        tuning.update(|t| t.stream_stores = before).unwrap();
        assert_eq!(bits(&plain), bits(&add), "{dtype:?} add streaming off");
        // Costlier ops that write from registers stream too (on AVX-512
        // CPUs): those with a vector form, and on f32/f64 any kernel, a
        // chunk at a time (erf and expm1 have no vector form; square is
        // cheap); log of a negative number is a NaN either way.
        for op in ["exp", "tanh", "sigmoid", "log", "erf", "expm1", "square"] {
            let streamed = run(op, &x, &Attrs::new());
            tuning.update(|t| t.stream_stores = false).unwrap();
            let plain = run(op, &x, &Attrs::new());
            tuning.update(|t| t.stream_stores = before).unwrap();
            assert!(
                same(&streamed.to_f64_vec(), &plain.to_f64_vec()),
                "{dtype:?} {op} streaming off"
            );
        }
    }
}
