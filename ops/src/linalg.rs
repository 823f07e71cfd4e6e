//! Matrix products: [`dot()`], [`batch_dot()`] and MXNet's dense layer
//! [`fully_connected()`] (`FullyConnected`), on the `gemm` crate.
//!
//! Every product here is `dst (M×N) (=|+=) op(A) (M×K) · op(B) (K×N)` over
//! row-major storage, where `op` is the identity or a transpose. A transpose
//! is never materialised: each operand is described by its row and column
//! strides (`Layout`), and `gemm` reads any strides. The gradients are
//! products of the same kind — `d op(A) = dC · op(B)ᵀ` and
//! `d op(B) = op(A)ᵀ · dC` — written straight into the input gradients
//! through the inputs' own layouts, so a transposed input gets a transposed
//! write at no cost.
//!
//! `gemm` computes `dst = alpha·dst + beta·lhs·rhs` (BLAS's names swapped)
//! and reads `dst` only when asked to (`read_dst`). [`OpReqType::AddTo`]
//! maps to `read_dst = true, alpha = 1`, the write requests to
//! `read_dst = false`, and [`OpReqType::Null`] skips the call. f32, f64 and
//! f16 go to `gemm` directly (its f16 kernels compute in f32); bf16 is
//! converted to f32 in temporary space, multiplied, and rounded back once.

use serde::{Deserialize, Serialize};
use simpleop::{
    DType, Element, Error, Float, OpReqType, Result, Shape, TBlob, TBlobMut, bf16, simple_op,
};

/// Keyword arguments of [`dot()`] and [`batch_dot()`].
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct DotParams {
    /// Use the transpose of the first operand. Defaults to false.
    pub transpose_a: bool,
    /// Use the transpose of the second operand. Defaults to false.
    pub transpose_b: bool,
    /// MXNet's storage type of the result: `None` or `"default"` (dense),
    /// the only storage simpleop has.
    pub forward_stype: Option<String>,
}

/// Refuses a sparse `forward_stype`.
fn dense_only(op: &str, p: &DotParams) -> Result<()> {
    match p.forward_stype.as_deref() {
        None | Some("default") => Ok(()),
        Some(s) => Err(Error::BadKwarg {
            op: op.into(),
            arg: "forward_stype".into(),
            reason: format!("only dense (`default`) results are supported, got `{s}`"),
        }),
    }
}

/// A product of `M·N·K` multiply-adds is split over the rayon pool by
/// `gemm` from this many times [`simpleop::kernel::parallel_work`] (the
/// machine's measured grain, in cheap elementwise ops; 128³ with the least
/// grain) and runs on the calling thread below. `gemm` enters the pool
/// once per block of its loops, not once per call, so one entry's cost
/// (what the grain weighs) undercounts it: with a smaller factor, where
/// entering the pool is slow, small products (as the digits example's)
/// ran slower split than on one thread.
const PARALLEL_FLOPS_PER_WORK: usize = 16;

/// Where the elements of one logical matrix sit in its storage: element
/// `(i, j)` of matrix `b` is at `b·batch + i·rs + j·cs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    pub(crate) rs: usize,
    pub(crate) cs: usize,
    pub(crate) batch: usize,
}

impl Layout {
    /// A row-major `rows × cols` matrix, `transposed` or not (then it is read
    /// as `cols × rows`).
    pub(crate) fn stored(rows: usize, cols: usize, transposed: bool) -> Layout {
        let l = Layout {
            rs: cols,
            cs: 1,
            batch: rows.saturating_mul(cols),
        };
        if transposed { l.t() } else { l }
    }

    /// The same storage read as the transpose.
    pub(crate) fn t(self) -> Layout {
        Layout {
            rs: self.cs,
            cs: self.rs,
            batch: self.batch,
        }
    }
}

/// A batch of products `op(A) (m×k) · op(B) (k×n)`, with the layouts of
/// `op(A)`, `op(B)` and the row-major output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Product {
    batch: usize,
    m: usize,
    n: usize,
    k: usize,
    a: Layout,
    b: Layout,
    c: Layout,
}

/// One `gemm` call pattern: `dst = lhs · rhs` per batch, `m×k · k×n`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mm {
    pub(crate) batch: usize,
    pub(crate) m: usize,
    pub(crate) n: usize,
    pub(crate) k: usize,
    pub(crate) dst: Layout,
    pub(crate) lhs: Layout,
    pub(crate) rhs: Layout,
}

impl Product {
    /// `C = op(A) · op(B)`.
    fn forward(&self) -> Mm {
        Mm {
            batch: self.batch,
            m: self.m,
            n: self.n,
            k: self.k,
            dst: self.c,
            lhs: self.a,
            rhs: self.b,
        }
    }
    /// `d op(A) (m×k) = dC (m×n) · op(B)ᵀ (n×k)`, written through A's layout.
    fn grad_a(&self) -> Mm {
        Mm {
            batch: self.batch,
            m: self.m,
            n: self.k,
            k: self.n,
            dst: self.a,
            lhs: self.c,
            rhs: self.b.t(),
        }
    }
    /// `d op(B) (k×n) = op(A)ᵀ (k×m) · dC (m×n)`, written through B's layout.
    fn grad_b(&self) -> Mm {
        Mm {
            batch: self.batch,
            m: self.k,
            n: self.n,
            k: self.m,
            dst: self.b,
            lhs: self.a.t(),
            rhs: self.c,
        }
    }
}

/// Saturating, as `Shape::size`: shape rules see shapes no array has (a
/// product past usize never matches a real blob's length in the checks).
fn product_of(dims: &[usize]) -> usize {
    dims.iter().fold(1usize, |n, &d| n.saturating_mul(d))
}

fn shape_error(op: &str, arg: &str, expected: String, got: &Shape) -> Error {
    Error::ShapeMismatch {
        op: op.into(),
        arg: arg.into(),
        expected,
        got: got.clone(),
    }
}

/// The geometry and output shape of `dot`, following MXNet 1.x: an N-D
/// `lhs` is read as a matrix `(prod(shape[..-1]), shape[-1])` (transposed:
/// `(shape[0], prod(shape[1..]))`), an M-D `rhs` as `(shape[0],
/// prod(shape[1..]))` (transposed: `(prod(shape[..-1]), shape[-1])`), and
/// the output keeps the non-contracted dimensions of both. A vector
/// contributes no output dimension; 1-D · 1-D has shape `(1,)`, as in MXNet.
fn dot_product(lhs: &Shape, rhs: &Shape, p: &DotParams) -> Result<(Product, Shape)> {
    const OP: &str = "dot";
    let (l, r) = (lhs.dims(), rhs.dims());
    if l.is_empty() {
        return Err(shape_error(
            OP,
            "lhs",
            "an array of 1 or more dimensions".into(),
            lhs,
        ));
    }
    if r.is_empty() {
        return Err(shape_error(
            OP,
            "rhs",
            "an array of 1 or more dimensions".into(),
            rhs,
        ));
    }
    if l.len() == 1 && r.len() == 1 {
        for (flag, arg) in [
            (p.transpose_a, "transpose_a"),
            (p.transpose_b, "transpose_b"),
        ] {
            if flag {
                return Err(Error::BadKwarg {
                    op: OP.into(),
                    arg: arg.into(),
                    reason: "a vector cannot be transposed (both operands are 1-D)".into(),
                });
            }
        }
    }
    // op(A) is M×K, stored row-major as (a_rows, a_cols).
    let (a_rows, a_cols, out_l): (usize, usize, &[usize]) = if p.transpose_a {
        (l[0], product_of(&l[1..]), &l[1..])
    } else {
        (
            product_of(&l[..l.len() - 1]),
            l[l.len() - 1],
            &l[..l.len() - 1],
        )
    };
    let (m, k) = if p.transpose_a {
        (a_cols, a_rows)
    } else {
        (a_rows, a_cols)
    };
    // op(B) is K×N, stored row-major as (b_rows, b_cols).
    let (b_rows, b_cols, out_r): (usize, usize, &[usize]) = if p.transpose_b {
        (
            product_of(&r[..r.len() - 1]),
            r[r.len() - 1],
            &r[..r.len() - 1],
        )
    } else {
        (r[0], product_of(&r[1..]), &r[1..])
    };
    let (kb, n) = if p.transpose_b {
        (b_cols, b_rows)
    } else {
        (b_rows, b_cols)
    };
    if k != kb {
        let axis = if p.transpose_b { "last" } else { "first" };
        return Err(shape_error(
            OP,
            "rhs",
            format!(
                "{k} along its {axis} axis, to match `lhs` {lhs}{}",
                if p.transpose_a { " (transposed)" } else { "" }
            ),
            rhs,
        ));
    }
    let mut out = Vec::new();
    if l.len() > 1 {
        out.extend_from_slice(out_l);
    }
    if r.len() > 1 {
        out.extend_from_slice(out_r);
    }
    if out.is_empty() {
        // MXNet gives the inner product of two vectors the shape (1,).
        out.push(1);
    }
    let product = Product {
        batch: 1,
        m,
        n,
        k,
        a: Layout::stored(a_rows, a_cols, p.transpose_a),
        b: Layout::stored(b_rows, b_cols, p.transpose_b),
        c: Layout::stored(m, n, false),
    };
    Ok((product, Shape::new(out)))
}

/// The geometry and output shape of `batch_dot`: `(B, M, K) · (B, K, N)`
/// (`(B, K, M)` with `transpose_a`, `(B, N, K)` with `transpose_b`) gives
/// `(B, M, N)`.
fn batch_dot_product(lhs: &Shape, rhs: &Shape, p: &DotParams) -> Result<(Product, Shape)> {
    const OP: &str = "batch_dot";
    let &[bl, l1, l2] = lhs.dims() else {
        return Err(shape_error(
            OP,
            "lhs",
            "a 3-D array (batch, rows, cols)".into(),
            lhs,
        ));
    };
    let &[br, r1, r2] = rhs.dims() else {
        return Err(shape_error(
            OP,
            "rhs",
            "a 3-D array (batch, rows, cols)".into(),
            rhs,
        ));
    };
    let (m, k) = if p.transpose_a { (l2, l1) } else { (l1, l2) };
    let (kb, n) = if p.transpose_b { (r2, r1) } else { (r1, r2) };
    if br != bl || kb != k {
        let want = if p.transpose_b {
            format!("({bl}, N, {k})")
        } else {
            format!("({bl}, {k}, N)")
        };
        return Err(shape_error(
            OP,
            "rhs",
            format!(
                "{want} to match `lhs` {lhs}{}",
                if p.transpose_a { " (transposed)" } else { "" }
            ),
            rhs,
        ));
    }
    let product = Product {
        batch: bl,
        m,
        n,
        k,
        a: Layout::stored(l1, l2, p.transpose_a),
        b: Layout::stored(r1, r2, p.transpose_b),
        c: Layout::stored(m, n, false),
    };
    Ok((product, Shape::new([bl, m, n])))
}

/// The number of storage elements `count` matrices of `rows × cols` laid out
/// as `l` span, for bounds checks before handing pointers to `gemm`.
fn span(l: Layout, count: usize, rows: usize, cols: usize) -> usize {
    if count == 0 || rows == 0 || cols == 0 {
        return 0;
    }
    // Saturating: a span past usize is past any slice, and fails the check.
    ((count - 1).saturating_mul(l.batch))
        .saturating_add((rows - 1).saturating_mul(l.rs))
        .saturating_add((cols - 1).saturating_mul(l.cs))
        .saturating_add(1)
}

/// `dst (=|+=) lhs · rhs` for every matrix of the batch, with `gemm`.
/// `T` is f32, f64 or f16 (the types `gemm` takes).
fn gemm_typed<T: Float>(mm: &Mm, dst: &mut [T], lhs: &[T], rhs: &[T], req: OpReqType) {
    // Within one chunk of a split loop (a fused step's slab) the other
    // threads are busy with theirs: splitting again only adds overhead.
    let flops = mm.m.saturating_mul(mm.n).saturating_mul(mm.k);
    let parallel = simpleop::kernel::may_split()
        && simpleop::kernel::worth_splitting(flops / PARALLEL_FLOPS_PER_WORK);
    gemm_on::<T>(mm, dst, lhs, rhs, req, parallel);
}

/// Whether a product of `flops` multiply-adds is worth splitting over the
/// rayon pool, by the rule [`gemm_typed`] applies.
pub(crate) fn worth_splitting_product(flops: usize) -> bool {
    simpleop::kernel::may_split()
        && simpleop::kernel::worth_splitting(flops / PARALLEL_FLOPS_PER_WORK)
}

/// [`gemm_typed`] with the caller's choice of splitting over the pool
/// (`parallel`): for callers that split their own loop around products.
/// Panics, before touching memory, when a layout reaches past its slice.
pub(crate) fn gemm_on<T: Float>(
    mm: &Mm,
    dst: &mut [T],
    lhs: &[T],
    rhs: &[T],
    req: OpReqType,
    parallel: bool,
) {
    if req == OpReqType::Null || mm.batch == 0 || mm.m == 0 || mm.n == 0 {
        return;
    }
    // Checked by the callers against the shapes; `gemm` trusts its pointers.
    assert!(
        span(mm.dst, mm.batch, mm.m, mm.n) <= dst.len(),
        "dst bounds"
    );
    if mm.k > 0 {
        assert!(
            span(mm.lhs, mm.batch, mm.m, mm.k) <= lhs.len(),
            "lhs bounds"
        );
        assert!(
            span(mm.rhs, mm.batch, mm.k, mm.n) <= rhs.len(),
            "rhs bounds"
        );
    }
    let parallelism = if parallel {
        gemm::Parallelism::Rayon(0) // 0: as many threads as the rayon pool has
    } else {
        gemm::Parallelism::None
    };
    let accumulate = req == OpReqType::AddTo;
    for b in 0..mm.batch {
        // SAFETY: every element `gemm` touches is inside its slice (the
        // asserts above bound the last one; all offsets are non-negative);
        // `dst` is exclusively borrowed and, being `&mut`, overlaps neither
        // `lhs` nor `rhs`. With `k == 0`, `lhs`/`rhs` are not read.
        unsafe {
            gemm::gemm(
                mm.m,
                mm.n,
                mm.k,
                dst.as_mut_ptr().add(b * mm.dst.batch),
                mm.dst.cs as isize,
                mm.dst.rs as isize,
                accumulate,
                lhs.as_ptr().wrapping_add(b * mm.lhs.batch),
                mm.lhs.cs as isize,
                mm.lhs.rs as isize,
                rhs.as_ptr().wrapping_add(b * mm.rhs.batch),
                mm.rhs.cs as isize,
                mm.rhs.rs as isize,
                T::one(), // alpha: the old dst, read only when accumulating
                T::one(), // beta: the product
                false,
                false,
                false,
                parallelism,
            );
        }
    }
}

/// bf16 through f32: both operands are widened into temporary space, the
/// product is computed in f32 and each result rounded once into `dst` per
/// `req`.
fn gemm_bf16(
    mm: &Mm,
    dst: &mut [bf16],
    lhs: &[bf16],
    rhs: &[bf16],
    req: OpReqType,
    env: &simpleop::EnvArguments,
    op: &str,
) -> Result<()> {
    if req == OpReqType::Null {
        return Ok(());
    }
    let widen = |src: &[bf16]| -> Result<Vec<f32>> {
        let mut t = env.temp_space::<f32>(op, src.len())?;
        for (d, s) in t.iter_mut().zip(src) {
            *d = s.to_f32();
        }
        Ok(t)
    };
    let (l32, r32) = (widen(lhs)?, widen(rhs)?);
    let mut d32 = env.temp_space::<f32>(op, dst.len())?;
    gemm_typed::<f32>(mm, &mut d32, &l32, &r32, OpReqType::WriteTo);
    for (d, &v) in dst.iter_mut().zip(&d32) {
        req.assign(d, v);
    }
    Ok(())
}

/// Runs `mm` on blobs of any float dtype; `names` are the arguments'
/// names for errors (destination, lhs, rhs).
#[allow(clippy::too_many_arguments)] // the two operands and the destination each need a name
fn gemm_blobs(
    op: &str,
    names: [&str; 3],
    mm: &Mm,
    dst: &mut TBlobMut<'_>,
    lhs: &TBlob<'_>,
    rhs: &TBlob<'_>,
    req: OpReqType,
    env: &simpleop::EnvArguments,
) -> Result<()> {
    if req == OpReqType::Null {
        return Ok(());
    }
    let dtype = lhs.dtype();
    for (name, d) in [(names[0], dst.dtype()), (names[2], rhs.dtype())] {
        if d != dtype {
            return Err(Error::DTypeMismatch {
                op: op.into(),
                arg: name.into(),
                expected: format!("{dtype} (the dtype of `{}`)", names[1]),
                got: d,
            });
        }
    }
    let check = |name: &str, len: usize, l: Layout, rows: usize, cols: usize| {
        let want = mm.batch.checked_mul(rows).and_then(|n| n.checked_mul(cols));
        if want != Some(len) || span(l, mm.batch, rows, cols) > len {
            let want = want.map_or(format!("{}×{rows}×{cols}", mm.batch), |w| w.to_string());
            return Err(Error::invalid(
                op,
                name,
                format!("expected {want} elements, got {len}"),
            ));
        }
        Ok(())
    };
    check(names[0], dst.len(), mm.dst, mm.m, mm.n)?;
    check(names[1], lhs.len(), mm.lhs, mm.m, mm.k)?;
    check(names[2], rhs.len(), mm.rhs, mm.k, mm.n)?;
    match dtype {
        DType::F32 => gemm_typed::<f32>(
            mm,
            dst.as_slice_mut()?,
            lhs.as_slice()?,
            rhs.as_slice()?,
            req,
        ),
        DType::F64 => gemm_typed::<f64>(
            mm,
            dst.as_slice_mut()?,
            lhs.as_slice()?,
            rhs.as_slice()?,
            req,
        ),
        DType::F16 => gemm_typed::<simpleop::f16>(
            mm,
            dst.as_slice_mut()?,
            lhs.as_slice()?,
            rhs.as_slice()?,
            req,
        ),
        DType::BF16 => gemm_bf16(
            mm,
            dst.as_slice_mut()?,
            lhs.as_slice()?,
            rhs.as_slice()?,
            req,
            env,
            op,
        )?,
        d => {
            return Err(Error::DTypeMismatch {
                op: op.into(),
                arg: names[1].into(),
                expected: "a float dtype (float32, float64, float16, bfloat16)".into(),
                got: d,
            });
        }
    }
    Ok(())
}

/// Forward of both ops.
fn product_forward(
    op: &str,
    product: &Product,
    inputs: &[TBlob<'_>],
    out: &mut TBlobMut<'_>,
    req: OpReqType,
    env: &simpleop::EnvArguments,
) -> Result<()> {
    gemm_blobs(
        op,
        ["output", "lhs", "rhs"],
        &product.forward(),
        out,
        &inputs[0],
        &inputs[1],
        req,
        env,
    )
}

/// Backward of both ops: one product per input gradient asked for.
fn product_backward(
    op: &str,
    product: &Product,
    dy: &TBlob<'_>,
    inputs: &[TBlob<'_>],
    grads: &mut [TBlobMut<'_>],
    req: &[OpReqType],
    env: &simpleop::EnvArguments,
) -> Result<()> {
    let (lhs, rhs) = (&inputs[0], &inputs[1]);
    gemm_blobs(
        op,
        ["lhs_grad", "out_grad", "rhs"],
        &product.grad_a(),
        &mut grads[0],
        dy,
        rhs,
        req[0],
        env,
    )?;
    // `grad_b` reads op(A)ᵀ as its left operand and dC as its right.
    gemm_blobs(
        op,
        ["rhs_grad", "lhs", "out_grad"],
        &product.grad_b(),
        &mut grads[1],
        lhs,
        dy,
        req[1],
        env,
    )
}

/// Checks that blobs handed to a kernel have two elements, for executors
/// that do not run shape inference first.
fn two_inputs<'a, 'b>(op: &str, inputs: &'a [TBlob<'b>]) -> Result<&'a [TBlob<'b>]> {
    if inputs.len() != 2 {
        return Err(Error::Arity {
            op: op.into(),
            expected: 2,
            got: inputs.len(),
        });
    }
    Ok(inputs)
}

matrix_products! {
    /// Matrix product of two arrays, as MXNet's `dot`: 2-D · 2-D is the matrix
    /// product, 2-D · 1-D and 1-D · 2-D the matrix-vector products, 1-D · 1-D
    /// the inner product (shape `(1,)`); `transpose_a` / `transpose_b` transpose
    /// an operand first. N-D operands are flattened as in MXNet (all but the
    /// contracted axis).
    dot = dot_product,
        shape "The shape of the product; errors when the contracted sizes differ.",
        forward "`out (=|+=) op(lhs) · op(rhs)`.",
        backward "`lhs_grad = dy · op(rhs)ᵀ`, `rhs_grad = op(lhs)ᵀ · dy`, each through
its input's transpose flag.";

    /// Batched matrix product, as MXNet's `batch_dot`: `(B, M, K) · (B, K, N)
    /// → (B, M, N)`, with `transpose_a` / `transpose_b` transposing every
    /// matrix of an operand.
    batch_dot = batch_dot_product,
        shape "`(B, M, N)`; errors unless both are 3-D with matching batch and
contracted sizes.",
        forward "`out[b] (=|+=) op(lhs[b]) · op(rhs[b])`.",
        backward "Per batch: `lhs_grad = dy · op(rhs)ᵀ`, `rhs_grad = op(lhs)ᵀ · dy`.";
}

/// Keyword arguments of [`fully_connected()`] (MXNet's `FullyConnectedParam`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct FullyConnectedParams {
    /// The number of outputs per row: `weight` is `(num_hidden, K)`.
    pub num_hidden: usize,
    /// Drops the `bias` input (its arguments are then `data`, `weight`).
    #[serde(default)]
    pub no_bias: bool,
    /// Flatten all axes after the first into `K` (the default); when false,
    /// only the last axis is contracted and the others are kept.
    #[serde(default = "flatten_default")]
    pub flatten: bool,
}

fn flatten_default() -> bool {
    true
}

impl Default for FullyConnectedParams {
    fn default() -> Self {
        FullyConnectedParams {
            num_hidden: 0,
            no_bias: false,
            flatten: true,
        }
    }
}

const FC: &str = "FullyConnected";

/// `(M, K)`, the rows and the contracted size of `data`, and the output
/// shape; checks `weight` is `(num_hidden, K)` and `bias` `(num_hidden,)`.
fn fc_geometry(
    data: &Shape,
    weight: &Shape,
    bias: Option<&Shape>,
    p: &FullyConnectedParams,
) -> Result<(usize, usize, Shape)> {
    let (rows, k, out) = fc_rows(data, p)?;
    let h = p.num_hidden;
    if weight.dims() != [h, k] {
        let want = format!("({h}, {k}): (num_hidden, the size contracted from `data` {data})");
        return Err(shape_error(FC, "weight", want, weight));
    }
    if let Some(bias) = bias
        && bias.dims() != [h]
    {
        return Err(shape_error(
            FC,
            "bias",
            format!("({h},): (num_hidden,)"),
            bias,
        ));
    }
    Ok((rows, k, out))
}

/// The arguments: `data`, `weight` and, unless `no_bias`, `bias`.
fn fc_arguments(p: &FullyConnectedParams) -> Vec<String> {
    let all = ["data", "weight", "bias"];
    let n = if p.no_bias { 2 } else { 3 };
    all[..n].iter().map(|s| (*s).to_owned()).collect()
}

/// The rows and the contracted size of `data`, and the output shape.
fn fc_rows(data: &Shape, p: &FullyConnectedParams) -> Result<(usize, usize, Shape)> {
    let h = p.num_hidden;
    if h == 0 {
        return Err(Error::BadKwarg {
            op: FC.into(),
            arg: "num_hidden".into(),
            reason: "expected a positive number of outputs".into(),
        });
    }
    let dims = data.dims();
    let (rows, k, mut out) = match (p.flatten, dims) {
        (_, []) => {
            let want = "an array with at least one axis".to_string();
            return Err(shape_error(FC, "data", want, data));
        }
        (true, [b, rest @ ..]) => (*b, product_of(rest), vec![*b]),
        (false, [lead @ .., k]) => (product_of(lead), *k, lead.to_vec()),
    };
    out.push(h);
    Ok((rows, k, Shape::new(out)))
}

/// The product `data (M×K) · weightᵀ (K×H)` of a [`fully_connected()`].
fn fc_product(rows: usize, k: usize, h: usize) -> Product {
    Product {
        batch: 1,
        m: rows,
        n: h,
        k,
        a: Layout::stored(rows, k, false),
        b: Layout::stored(h, k, true),
        c: Layout::stored(rows, h, false),
    }
}

/// The inputs of a [`fully_connected()`] kernel, checked: `data`,
/// `weight` and the bias unless `no_bias`.
fn fc_inputs<'a, 'b>(
    inputs: &'a [TBlob<'b>],
    p: &FullyConnectedParams,
) -> Result<(&'a TBlob<'b>, &'a TBlob<'b>, Option<&'a TBlob<'b>>)> {
    match (inputs, p.no_bias) {
        ([x, w], true) => Ok((x, w, None)),
        ([x, w, b], false) => Ok((x, w, Some(b))),
        _ => Err(Error::Arity {
            op: FC.into(),
            expected: if p.no_bias { 2 } else { 3 },
            got: inputs.len(),
        }),
    }
}

/// Every row of `out` (`rows × bias.len()`) set to `bias` (`overwrite`) or
/// added it, in the output's dtype.
fn bias_rows(out: &mut TBlobMut<'_>, bias: &TBlob<'_>, overwrite: bool) -> Result<()> {
    if bias.dtype() != out.dtype() {
        return Err(Error::DTypeMismatch {
            op: FC.into(),
            arg: "bias".into(),
            expected: format!("{} (the dtype of `data`)", out.dtype()),
            got: bias.dtype(),
        });
    }
    simpleop::dispatch_float!(out.dtype(), T => {
        let b: &[T] = bias.as_slice()?;
        if b.is_empty() {
            return Ok(());
        }
        for row in out.as_slice_mut::<T>()?.chunks_exact_mut(b.len()) {
            if overwrite {
                row.copy_from_slice(b);
            } else {
                for (d, &v) in row.iter_mut().zip(b) {
                    OpReqType::AddTo.assign(d, v.to_compute());
                }
            }
        }
        Ok(())
    }, _ => Err(Error::DTypeMismatch {
        op: FC.into(),
        arg: "data".into(),
        expected: "a float dtype (float32, float64, float16, bfloat16)".into(),
        got: out.dtype(),
    }))
}

/// `bias_grad (=|+=) Σ_rows dy`, summed in f64 and rounded once.
fn bias_grad(dy: &TBlob<'_>, grad: &mut TBlobMut<'_>, req: OpReqType) -> Result<()> {
    if req == OpReqType::Null {
        return Ok(());
    }
    check_shape(FC, "bias_grad", grad.shape(), &Shape::new([grad.len()]))?;
    simpleop::dispatch_float!(dy.dtype(), T => {
        let g: &mut [T] = grad.as_slice_mut()?;
        let mut sums = vec![0f64; g.len()];
        if !sums.is_empty() {
            for row in dy.as_slice::<T>()?.chunks_exact(sums.len()) {
                for (s, v) in sums.iter_mut().zip(row) {
                    *s += v.to_f64();
                }
            }
        }
        let add = req == OpReqType::AddTo;
        for (d, s) in g.iter_mut().zip(sums) {
            *d = T::from_f64(if add { d.to_f64() + s } else { s });
        }
        Ok(())
    }, _ => Err(Error::DTypeMismatch {
        op: FC.into(),
        arg: "out_grad".into(),
        expected: "a float dtype (float32, float64, float16, bfloat16)".into(),
        got: dy.dtype(),
    }))
}

fn check_shape(op: &str, arg: &str, got: &Shape, want: &Shape) -> Result<()> {
    if got != want {
        return Err(shape_error(op, arg, want.to_string(), got));
    }
    Ok(())
}

/// MXNet's `FullyConnected`: `out = data · weightᵀ + bias`, with `data`
/// flattened to `(batch, K)` (or, with `flatten = False`, contracted over
/// its last axis only), `weight` `(num_hidden, K)` and `bias`
/// `(num_hidden,)`. The gradients are products of the same kind, through
/// the weight's transpose, and the bias gradient sums `dy` over the rows.
#[simple_op(
    blob,
    name = "FullyConnected",
    inputs = ["data", "weight", "bias"],
    arguments = super::fc_arguments,
    kwargs = FullyConnectedParams,
    pattern = "out_elemwise_fusable",
    resources(temp)
)]
pub mod fully_connected {
    use super::FullyConnectedParams;
    use simpleop::prelude::*;

    /// `(batch, num_hidden)`, or `data`'s shape with its last axis
    /// replaced by `num_hidden` when `flatten` is false.
    pub fn shape(inputs: &[Shape], p: &FullyConnectedParams) -> Result<Shape> {
        Ok(super::fc_geometry(&inputs[0], &inputs[1], inputs.get(2), p)?.2)
    }

    /// `weight` is `(num_hidden, K)` and `bias` `(num_hidden,)` for
    /// `data`'s contracted size `K`.
    pub fn input_shapes(shapes: &mut [Option<Shape>], p: &FullyConnectedParams) -> Result<()> {
        if let Some(data) = shapes[0].clone() {
            let (_, k, _) = super::fc_rows(&data, p)?;
            let want = [vec![p.num_hidden, k], vec![p.num_hidden]];
            for (s, w) in shapes[1..].iter_mut().zip(want) {
                s.get_or_insert_with(|| Shape::new(w));
            }
        }
        Ok(())
    }

    /// The bias goes in first, then the product accumulates onto it, so
    /// each output is rounded once.
    pub fn forward(
        inputs: &[TBlob<'_>],
        out: &mut TBlobMut<'_>,
        req: OpReqType,
        p: &FullyConnectedParams,
        env: &EnvArguments,
    ) -> Result<()> {
        let (x, w, b) = super::fc_inputs(inputs, p)?;
        let (rows, k, shape) = super::fc_geometry(x.shape(), w.shape(), b.map(|b| b.shape()), p)?;
        super::check_shape(super::FC, "output", out.shape(), &shape)?;
        if req == OpReqType::Null {
            return Ok(());
        }
        let product_req = match b {
            Some(b) => {
                super::bias_rows(out, b, req != OpReqType::AddTo)?;
                OpReqType::AddTo
            }
            None => req,
        };
        let mm = super::fc_product(rows, k, p.num_hidden).forward();
        let names = ["output", "data", "weight"];
        super::gemm_blobs(super::FC, names, &mm, out, x, w, product_req, env)
    }

    /// `data_grad = dy · weight`, `weight_grad = dyᵀ · data`, `bias_grad =
    /// Σ_rows dy`.
    pub fn backward(
        dy: OutGrad<&TBlob<'_>>,
        x: Inputs<&[TBlob<'_>]>,
        grads: &mut [TBlobMut<'_>],
        req: &[OpReqType],
        p: &FullyConnectedParams,
        env: &EnvArguments,
    ) -> Result<()> {
        let (data, w, b) = super::fc_inputs(&x, p)?;
        let (rows, k, _) = super::fc_geometry(data.shape(), w.shape(), b.map(|b| b.shape()), p)?;
        let product = super::fc_product(rows, k, p.num_hidden);
        let (gx, rest) = grads.split_at_mut(1);
        let (gw, gb) = rest.split_at_mut(1);
        let names = ["data_grad", "out_grad", "weight"];
        super::gemm_blobs(
            super::FC,
            names,
            &product.grad_a(),
            &mut gx[0],
            &dy,
            w,
            req[0],
            env,
        )?;
        let names = ["weight_grad", "data", "out_grad"];
        super::gemm_blobs(
            super::FC,
            names,
            &product.grad_b(),
            &mut gw[0],
            data,
            &dy,
            req[1],
            env,
        )?;
        match gb.first_mut() {
            Some(gb) => super::bias_grad(&dy, gb, req[2]),
            None => Ok(()),
        }
    }
}

/// `c (=|+=) op(a) · op(b)` for row-major f64 matrices, through `gemm`:
/// `op(a)` is `m×k` (`a` stored `k×m` when `a_t`), `op(b)` is `k×n` (`b`
/// stored `n×k` when `b_t`) and `c` is `m×n`; `accumulate` adds to `c`.
/// For ops that compute in f64 internally (`RNN`). The callers size the
/// slices from one geometry; a slice too short panics in `gemm_typed`'s
/// bounds checks rather than reading out of bounds.
pub(crate) fn matmul_f64(
    (m, n, k): (usize, usize, usize),
    a: &[f64],
    a_t: bool,
    b: &[f64],
    b_t: bool,
    c: &mut [f64],
    accumulate: bool,
) {
    let (ar, ac) = if a_t { (k, m) } else { (m, k) };
    let (br, bc) = if b_t { (n, k) } else { (k, n) };
    let mm = Mm {
        batch: 1,
        m,
        n,
        k,
        dst: Layout::stored(m, n, false),
        lhs: Layout::stored(ar, ac, a_t),
        rhs: Layout::stored(br, bc, b_t),
    };
    let req = if accumulate {
        OpReqType::AddTo
    } else {
        OpReqType::WriteTo
    };
    gemm_typed::<f64>(&mm, c, a, b, req);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_shapes_follow_mxnet() {
        let s = |d: &[usize]| Shape::new(d.to_vec());
        let p = |a, b| DotParams {
            transpose_a: a,
            transpose_b: b,
            ..DotParams::default()
        };
        let out = |l: &[usize], r: &[usize], ta, tb| {
            dot_product(&s(l), &s(r), &p(ta, tb)).map(|(_, o)| o.dims().to_vec())
        };
        assert_eq!(out(&[2, 3], &[3, 4], false, false).unwrap(), [2, 4]);
        assert_eq!(out(&[3, 2], &[3, 4], true, false).unwrap(), [2, 4]);
        assert_eq!(out(&[2, 3], &[4, 3], false, true).unwrap(), [2, 4]);
        assert_eq!(out(&[3, 2], &[4, 3], true, true).unwrap(), [2, 4]);
        assert_eq!(out(&[3], &[3], false, false).unwrap(), [1]);
        assert_eq!(out(&[2, 3], &[3], false, false).unwrap(), [2]);
        assert_eq!(out(&[3], &[3, 4], false, false).unwrap(), [4]);
        assert_eq!(
            out(&[2, 5, 3], &[3, 4, 6], false, false).unwrap(),
            [2, 5, 4, 6]
        );
        assert!(out(&[2, 3], &[2, 4], false, false).is_err());
        assert!(out(&[3], &[3], true, false).is_err());
        assert!(out(&[], &[3], false, false).is_err());
    }

    #[test]
    fn layouts_address_the_transpose() {
        // A 2×3 matrix read transposed is 3×2: element (i, j) = A[j, i].
        let l = Layout::stored(2, 3, true);
        assert_eq!((l.rs, l.cs, l.batch), (1, 3, 6));
        assert_eq!(span(l, 1, 3, 2), 6);
    }
}
