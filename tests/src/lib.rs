//! Workspace tests for simpleop: integration tests of the core and the
//! standard ops, compile-fail UI tests of `#[simple_op]`, the CLI, and the
//! MXNet conformance cases (`tests/conformance/*.jsonl`, checked with
//! `simpleop_cli::conformance`). Everything lives under `tests/`; this library
//! only holds helpers that several test binaries share.

pub mod fuzz;
pub mod random_graphs;

/// Hostile-input checks shared by the `hostile_*` test binaries.
pub mod hostile {
    use std::collections::HashMap;

    use simpleop::symbol::Symbol;
    use simpleop::{Attrs, DType, NDArray, Shape, eager};

    /// Attributes from `(key, value)` pairs.
    pub fn attrs(kv: &[(&str, &str)]) -> Attrs {
        let mut a = Attrs::new();
        for (k, v) in kv {
            a.insert(*k, v);
        }
        a
    }

    /// `op` on `inputs` fails eagerly and in shape inference, with a message
    /// naming the op and every string of `names`.
    pub fn refused(op: &str, shapes: &[&[usize]], kv: &[(&str, &str)], names: &[&str]) {
        simpleop_ops::link();
        let arrays: Vec<NDArray> = shapes
            .iter()
            .map(|s| NDArray::zeros(Shape::from(*s), DType::F32))
            .collect();
        let inputs: Vec<&NDArray> = arrays.iter().collect();
        let a = attrs(kv);
        let err = eager::invoke(op, &inputs, &a).unwrap_err().to_string();
        for n in std::iter::once(&op).chain(names) {
            assert!(err.contains(n), "{op} {kv:?}: `{err}` does not name `{n}`");
        }
        // Shape inference of a graph refuses the same (or the attrs at all).
        let vars: Vec<Symbol> = (0..shapes.len())
            .map(|i| Symbol::var(&format!("x{i}")))
            .collect();
        let refs: Vec<&Symbol> = vars.iter().collect();
        if let Ok(s) = Symbol::invoke(op, &refs, &a) {
            let known: HashMap<String, Shape> = shapes
                .iter()
                .enumerate()
                .map(|(i, s)| (format!("x{i}"), Shape::from(*s)))
                .collect();
            let err = s.infer_shape(&known).unwrap_err().to_string();
            assert!(
                err.contains(names[0]),
                "{op} {kv:?} in a graph: `{err}` does not name `{}`",
                names[0]
            );
        }
    }
}

/// f16/bf16 arrays as raw bit patterns, for the half-type table tests.
pub mod half_bits {
    use simpleop::__private::engine::table::TABLE_MIN_LEN;
    use simpleop::{Attrs, DType, Element, NDArray, bf16, eager, f16};

    /// An f16 or bf16 array holding `bits`.
    pub fn from_bits(dtype: DType, bits: &[u16]) -> NDArray {
        fn of<T: Element>(bits: &[u16], from: fn(u16) -> T) -> NDArray {
            NDArray::from_vec(bits.iter().map(|&b| from(b)).collect(), [bits.len()]).unwrap()
        }
        match dtype {
            DType::F16 => of(bits, f16::from_bits),
            DType::BF16 => of(bits, bf16::from_bits),
            other => panic!("{other} is not a 16-bit float type"),
        }
    }

    /// The bit patterns of an f16 or bf16 array.
    pub fn bits(a: &NDArray) -> Vec<u16> {
        fn of<T: Element>(a: &NDArray, to: fn(T) -> u16) -> Vec<u16> {
            a.to_vec::<T>().unwrap().into_iter().map(to).collect()
        }
        match a.dtype() {
            DType::F16 => of(a, f16::to_bits),
            DType::BF16 => of(a, bf16::to_bits),
            other => panic!("{other} is not a 16-bit float type"),
        }
    }

    /// `op` over `x` computed: in calls shorter than `TABLE_MIN_LEN`,
    /// which never read a table.
    pub fn computed(op: &str, x: &NDArray) -> Vec<u16> {
        let piece = 1000;
        assert!(piece < TABLE_MIN_LEN);
        let all = bits(x);
        let mut out = Vec::with_capacity(all.len());
        for chunk in all.chunks(piece) {
            let part = from_bits(x.dtype(), chunk);
            out.extend(bits(&eager::invoke(op, &[&part], &Attrs::new()).unwrap()));
        }
        out
    }
}

/// Makes every loop split over the thread pool from the least grain up,
/// and returns that grain (work units).
pub fn least_grain() -> usize {
    simpleop::Tuning::update(|t| t.parallel_work = 0).expect("the grain always applies");
    simpleop::Tuning::current().parallel_work
}

/// Runs the gradient checker and asserts it covered every float dtype and
/// request; `first_is_output`: input 0 has the output's shape, so the op's
/// declared in-place options are checked too (one row per dtype each).
pub fn check_gradients(g: simpleop::gradcheck::GradCheck, first_is_output: bool) {
    use simpleop::{DType, OpReqType, Registry};
    let report = g.run().unwrap_or_else(|e| panic!("{e}"));
    for dtype in DType::FLOATS {
        for req in [OpReqType::Null, OpReqType::WriteTo, OpReqType::AddTo] {
            assert!(
                report.rows.iter().any(|(d, r, _)| *d == dtype && *r == req),
                "{}: no row for {dtype} {req:?}",
                report.op
            );
        }
    }
    let op = Registry::global().unwrap().get(&report.op).unwrap().def;
    let inplace_rows = report
        .rows
        .iter()
        .filter(|(_, r, _)| *r == OpReqType::WriteInplace)
        .count();
    let declared = op.inplace.gradient.is_some() as usize + op.inplace.forward.is_some() as usize;
    let want = if first_is_output { 4 * declared } else { 0 };
    assert_eq!(inplace_rows, want, "{}: in-place rows", report.op);
}

/// Asserts `got` matches `want` element by element within `tol` relative
/// to `1 + |want|`, naming `what` and the first element that does not.
pub fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (a, e)) in got.iter().zip(want).enumerate() {
        assert!(
            (a - e).abs() <= tol * (1.0 + e.abs()),
            "{what}: element {i}: got {a}, expected {e}"
        );
    }
}
