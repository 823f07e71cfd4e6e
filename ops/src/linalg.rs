//! Matrix products: [`dot()`], [`batch_dot()`] and MXNet's dense layer
//! [`fully_connected()`] (`FullyConnected`), on `private-gemm-x86` (f32 and
//! f64 on x86-64 under AVX2 or AVX-512) or the `gemm` crate (the rest).
//!
//! Every product here is `dst (M×N) (=|+=) op(A) (M×K) · op(B) (K×N)` over
//! row-major storage, where `op` is the identity or a transpose. A transpose
//! is never materialised: each operand is described by its row and column
//! strides (`Layout`), and both kernels read any strides. The gradients are
//! products of the same kind — `d op(A) = dC · op(B)ᵀ` and
//! `d op(B) = op(A)ᵀ · dC` — written straight into the input gradients
//! through the inputs' own layouts, so a transposed input gets a transposed
//! write at no cost. The convolutions (`conv/gemm.rs`) and `RNN` run their
//! products through here too.
//!
//! # Kernels
//!
//! f32 and f64 products on x86-64 run on `private-gemm-x86`, the x86
//! kernel of faer 0.24, at the width of simpleop's active instruction set
//! ([`simpleop::kernel::active_isa`]): AVX-512, or AVX2 with FMA when
//! `SIMPLEOP_ISA=avx2` (or [`simpleop::Tuning`]) asks for it, so that the
//! products follow the setting like every other kernel. The rest run on
//! the `gemm` crate (0.19): f16 (its f16 kernels compute in f32), the
//! scalar set, other targets, and vector results (`M` or `N` of 1), where
//! `private-gemm-x86` has no matrix-vector path and measured several times
//! slower than `gemm`. `gemm` chooses its SIMD from the CPU, not from
//! simpleop's setting: those products use AVX-512 on an AVX-512 CPU even
//! under `SIMPLEOP_ISA=avx2`. bf16 is converted to f32 in temporary space,
//! multiplied, and rounded back once.
//!
//! Why: timed side by side with numpy's OpenBLAS and with the `gemm` build
//! (`bench/dot_vs_numpy.py --isa avx2|avx512 --baseline`), the x86 kernel
//! of faer beats `gemm` at both widths on square products, and on the dense
//! layer's and the convolution weight gradient's shapes; `gemm` also left
//! mid-size products on one thread. A convolution's forward and data
//! gradient products are about even between the two. `bench/dot_vs_numpy.py`
//! prints the ratios; bench/RESULTS.md has the `dot` rows of `simpleop
//! bench` and `bench/peers.py`.
//!
//! `private-gemm-x86` is pinned (`=0.1.22`): it is faer's internal kernel,
//! published for faer's use, and its one entry point (`gemm`, a raw-pointer
//! function of 25 arguments) carries no stability promise between patch
//! releases. Moving the pin means re-running this module's tests (every
//! request type, transposes, strides, `K = 0`, both widths, threads) and
//! the benchmark.
//!
//! # Requests
//!
//! [`OpReqType::WriteTo`] and `WriteInplace` overwrite `dst` without
//! reading it (it may hold NaN), [`OpReqType::AddTo`] adds the product to
//! it, and [`OpReqType::Null`] skips the call. `K = 0` is handled here for
//! both kernels: a write zeroes `dst`, an addition leaves it
//! (`private-gemm-x86` would leave `dst` untouched on a write).
//!
//! # Threads
//!
//! A product is split over the current rayon pool (all of its threads)
//! only when the caller allows it (`parallel`: the product is large enough
//! for the machine's grain and not inside a split loop); on one
//! thread otherwise, so that a caller that splits its own loop (a fused
//! step's slabs, the convolution's blocks) never oversubscribes the pool.
//! `private-gemm-x86` enters the pool through `spindle` (a `rayon::scope`
//! whose helper tasks the calling thread runs itself when no other thread
//! takes them), so a call from inside a pool thread cannot deadlock.

#[cfg(target_arch = "x86_64")]
use private_gemm_x86 as pgx;
use serde::{Deserialize, Serialize};
use simpleop::composition::GradParts;
use simpleop::eager::invoke;
use simpleop::{
    Attrs, DType, Element, Error, Float, NDArray, OpReqType, Result, Shape, TBlob, TBlobMut, bf16,
    simple_op,
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

/// A product of `M·N·K` multiply-adds is split over the rayon pool from
/// this many times the grain of [`simpleop::kernel::worth_splitting`] (the
/// machine's measured grain, in cheap elementwise ops; 128³ with the least
/// grain) and runs on the calling thread below. One pool entry's cost (what the
/// grain weighs) undercounts a split product: `gemm` enters the pool once
/// per block of its loops, and `private-gemm-x86` enters it once and then
/// hands every block to helper threads. With a smaller factor, where
/// entering the pool is slow, small products (as the digits example's)
/// ran slower split than on one thread; `private-gemm-x86` too loses from
/// splitting at 128³ and gains from about 192³.
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
/// as `l` span, for bounds checks before handing pointers to a kernel.
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

/// `dst (=|+=) lhs · rhs` for every matrix of the batch, split over the
/// rayon pool when it pays. `T` is f32, f64 or f16.
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

/// The code that computes a product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kernel {
    /// The `gemm` crate, which picks its SIMD code from the CPU's features
    /// (AVX-512 where the CPU has it, whatever simpleop's instruction set).
    Gemm,
    /// `private-gemm-x86` at this vector width, for f32 and f64 on x86-64.
    /// Made only by [`Kernel::choose`], which checks that the CPU runs the
    /// width and that `T` is the type named.
    #[cfg(target_arch = "x86_64")]
    Pgx(pgx::InstrSet, pgx::DType),
}

impl Kernel {
    /// The kernel for `mm` on `T` under the instruction set `isa`:
    /// `private-gemm-x86`'s AVX-512 or AVX2 kernels for f32 and f64 when
    /// `isa` is AVX-512 or AVX2 (and the CPU runs it), `gemm` otherwise
    /// (f16, the scalar set, other targets) and for a vector result (`m`
    /// or `n` of 1), where `private-gemm-x86` has no matrix-vector path
    /// and measured several times slower than `gemm`.
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
    fn choose<T: Float>(isa: simpleop::Isa, mm: &Mm) -> Kernel {
        #[cfg(target_arch = "x86_64")]
        {
            use std::any::TypeId;
            let dtype = if TypeId::of::<T>() == TypeId::of::<f32>() {
                Some(pgx::DType::F32)
            } else if TypeId::of::<T>() == TypeId::of::<f64>() {
                Some(pgx::DType::F64)
            } else {
                None
            };
            let width = match isa {
                simpleop::Isa::Avx512 => Some(pgx::InstrSet::Avx512),
                simpleop::Isa::Avx2 => Some(pgx::InstrSet::Avx256),
                _ => None,
            };
            if let (Some(dtype), Some(width)) = (dtype, width)
                && mm.m > 1
                && mm.n > 1
                && isa.is_supported()
            {
                return Kernel::Pgx(width, dtype);
            }
        }
        Kernel::Gemm
    }
}

/// [`gemm_typed`] with the caller's choice of splitting over the pool
/// (`parallel`): for callers that split their own loop around products.
/// Runs on the kernel for the active instruction set
/// ([`simpleop::kernel::active_isa`], which `SIMPLEOP_ISA` caps).
/// Panics, before touching memory, when a layout reaches past its slice.
pub(crate) fn gemm_on<T: Float>(
    mm: &Mm,
    dst: &mut [T],
    lhs: &[T],
    rhs: &[T],
    req: OpReqType,
    parallel: bool,
) {
    let kernel = Kernel::choose::<T>(simpleop::kernel::active_isa(), mm);
    gemm_with(kernel, mm, dst, lhs, rhs, req, parallel);
}

/// [`gemm_on`] on the given kernel. `parallel` splits each product over
/// all the threads of the current rayon pool; otherwise it runs on the
/// calling thread alone.
fn gemm_with<T: Float>(
    kernel: Kernel,
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
    // Checked by the callers against the shapes; the kernels trust their
    // pointers.
    assert!(
        span(mm.dst, mm.batch, mm.m, mm.n) <= dst.len(),
        "dst bounds"
    );
    let accumulate = req == OpReqType::AddTo;
    if mm.k == 0 {
        // An empty sum: a write is all zeros, an addition nothing. Done
        // here, as `private-gemm-x86` leaves `dst` as it is for both.
        if !accumulate {
            zero_through(mm, dst);
        }
        return;
    }
    assert!(
        span(mm.lhs, mm.batch, mm.m, mm.k) <= lhs.len(),
        "lhs bounds"
    );
    assert!(
        span(mm.rhs, mm.batch, mm.k, mm.n) <= rhs.len(),
        "rhs bounds"
    );
    match kernel {
        Kernel::Gemm => gemm_crate(mm, dst, lhs, rhs, accumulate, parallel),
        #[cfg(target_arch = "x86_64")]
        Kernel::Pgx(width, dtype) => {
            // 1: the calling thread alone (the crate then never enters the
            // pool); otherwise every thread of the current pool, as
            // `gemm`'s `Rayon(0)`.
            let threads = if parallel {
                rayon::current_num_threads()
            } else {
                1
            };
            let beta = if accumulate {
                pgx::Accum::Add
            } else {
                pgx::Accum::Replace
            };
            let alpha = T::one();
            for b in 0..mm.batch {
                // SAFETY: `Kernel::choose` made `Pgx` only for T = f32
                // (`dtype` F32) or f64 (F64) and for a width the CPU runs
                // (`Isa::is_supported`: AVX-512 F/BW/DQ/VL, or AVX2 with
                // FMA, covering the instructions of the crate's kernels).
                // Every element the call reads or writes is inside its
                // slice: the asserts above bound the last one, all strides
                // and offsets are non-negative, and m, n, k > 0. `dst` is
                // exclusively borrowed and, being `&mut`, overlaps neither
                // `lhs` nor `rhs`; with `Replace` the crate writes `dst`
                // without reading it. `alpha` is a `T`, as `dtype` says, and
                // outlives the call; the index pointers are null (a full
                // destination, no diagonal).
                unsafe {
                    pgx::gemm(
                        dtype,
                        pgx::IType::U64,
                        width,
                        mm.m,
                        mm.n,
                        mm.k,
                        dst.as_mut_ptr().add(b * mm.dst.batch).cast(),
                        mm.dst.rs as isize,
                        mm.dst.cs as isize,
                        std::ptr::null(),
                        std::ptr::null(),
                        pgx::DstKind::Full,
                        beta,
                        lhs.as_ptr().add(b * mm.lhs.batch).cast(),
                        mm.lhs.rs as isize,
                        mm.lhs.cs as isize,
                        false,
                        std::ptr::null(),
                        0,
                        rhs.as_ptr().add(b * mm.rhs.batch).cast(),
                        mm.rhs.rs as isize,
                        mm.rhs.cs as isize,
                        false,
                        (&raw const alpha).cast(),
                        threads,
                    );
                }
            }
        }
    }
}

/// Every element of `dst`'s `batch × m × n` matrices set to zero, through
/// its layout (bounds-checked).
fn zero_through<T: Float>(mm: &Mm, dst: &mut [T]) {
    for b in 0..mm.batch {
        for i in 0..mm.m {
            let row = b * mm.dst.batch + i * mm.dst.rs;
            for j in 0..mm.n {
                dst[row + j * mm.dst.cs] = T::zero();
            }
        }
    }
}

/// `dst (=|+=) lhs · rhs` per matrix of the batch on the `gemm` crate,
/// for `k > 0` and layouts checked against the slices.
fn gemm_crate<T: Float>(
    mm: &Mm,
    dst: &mut [T],
    lhs: &[T],
    rhs: &[T],
    accumulate: bool,
    parallel: bool,
) {
    let parallelism = if parallel {
        gemm::Parallelism::Rayon(0) // 0: as many threads as the rayon pool has
    } else {
        gemm::Parallelism::None
    };
    for b in 0..mm.batch {
        // SAFETY: every element `gemm` touches is inside its slice (the
        // caller's asserts bound the last one; all offsets are
        // non-negative); `dst` is exclusively borrowed and, being `&mut`,
        // overlaps neither `lhs` nor `rhs`.
        unsafe {
            gemm::gemm(
                mm.m,
                mm.n,
                mm.k,
                dst.as_mut_ptr().add(b * mm.dst.batch),
                mm.dst.cs as isize,
                mm.dst.rs as isize,
                accumulate,
                lhs.as_ptr().add(b * mm.lhs.batch),
                mm.lhs.cs as isize,
                mm.lhs.rs as isize,
                rhs.as_ptr().add(b * mm.rhs.batch),
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

/// `dot`'s gradient as ops, which gives it second derivatives
/// (`simpleop::composition`): on the 2-D views the kernel multiplies
/// (`op(A)` is `M×K`, `op(B)` is `K×N`),
/// `d op(A) = dC · op(B)ᵀ` and `d op(B) = op(A)ᵀ · dC`, each reshaped back.
fn dot_gradient(p: &GradParts<'_>) -> Result<Vec<Option<NDArray>>> {
    const OP: &str = "dot";
    let params = p.env.require_kwargs::<DotParams>(OP)?;
    let ([a, b], [dc]) = (p.inputs, p.out_grads) else {
        return Err(Error::invalid(
            OP,
            "gradient composition",
            "two inputs and one output gradient",
        ));
    };
    let (ta, tb) = (params.transpose_a, params.transpose_b);
    let view = |x: &NDArray, split_first: bool| -> Result<NDArray> {
        let d = x.shape().dims();
        let (rows, cols) = match (split_first, d) {
            (_, [k]) if split_first => (*k, 1),
            (_, [k]) => (1, *k),
            (true, [first, rest @ ..]) => (*first, rest.iter().product()),
            (false, [rest @ .., last]) => (rest.iter().product(), *last),
            (_, []) => (1, 1),
        };
        invoke(
            "Reshape",
            &[x],
            &Attrs::new().with("shape", Shape::new([rows, cols])),
        )
    };
    // A is stored (M, K) unless transposed; B is stored (K, N) unless transposed.
    let (a2, b2) = (view(a, ta)?, view(b, !tb)?);
    let m = a2.shape().dims()[usize::from(ta)];
    let n = b2.shape().dims()[usize::from(!tb)];
    let dc2 = invoke(
        "Reshape",
        &[dc],
        &Attrs::new().with("shape", Shape::new([m, n])),
    )?;
    let product = |l: &NDArray, r: &NDArray, t_l: bool, t_r: bool| {
        let attrs = Attrs::new()
            .with("transpose_a", t_l)
            .with("transpose_b", t_r);
        invoke(OP, &[l, r], &attrs)
    };
    let da2 = if ta {
        product(&b2, &dc2, tb, true)?
    } else {
        product(&dc2, &b2, false, !tb)?
    };
    let db2 = if tb {
        product(&dc2, &a2, true, ta)?
    } else {
        product(&a2, &dc2, !ta, false)?
    };
    let back = |g: &NDArray, like: &NDArray| {
        invoke("Reshape", &[g], &Attrs::new().with("shape", like.shape()))
    };
    Ok(vec![Some(back(&da2, a)?), Some(back(&db2, b)?)])
}

simpleop::gradient_composition!("dot", dot_gradient);

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

    // ------------------------------------------------ the products' kernels

    use simpleop::{Isa, f16};

    /// Deterministic values in [-1, 1) (xorshift).
    fn values(len: usize, seed: u64) -> Vec<f64> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
            })
            .collect()
    }

    /// `rows × cols` matrices stored transposed (`t`) or not, each stored
    /// row `pad` elements longer than it is, and `pad` elements between
    /// matrices: strides that are neither contiguous nor a whole batch.
    fn padded(rows: usize, cols: usize, t: bool, pad: usize) -> Layout {
        let (sr, sc) = if t { (cols, rows) } else { (rows, cols) };
        let l = Layout {
            rs: sc + pad,
            cs: 1,
            batch: sr * (sc + pad) + pad,
        };
        if t { l.t() } else { l }
    }

    /// A product of `batch` matrices `m×k · k×n` with the operands and the
    /// destination stored transposed or not (`t = [a, b, c]`) and padded.
    fn geometry(batch: usize, (m, n, k): (usize, usize, usize), t: [bool; 3], pad: usize) -> Mm {
        Mm {
            batch,
            m,
            n,
            k,
            lhs: padded(m, k, t[0], pad),
            rhs: padded(k, n, t[1], pad),
            dst: padded(m, n, t[2], pad),
        }
    }

    /// Every kernel this CPU runs for `mm` on `T`: `gemm` and, where
    /// `Kernel::choose` picks them, `private-gemm-x86` at both widths.
    fn kernels<T: Float>(mm: &Mm) -> Vec<Kernel> {
        let mut all = vec![Kernel::Gemm];
        for isa in [Isa::Avx2, Isa::Avx512] {
            let k = Kernel::choose::<T>(isa, mm);
            if !all.contains(&k) {
                all.push(k);
            }
        }
        all
    }

    fn same(a: f64, b: f64) -> bool {
        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
    }

    /// Runs `mm` on `kernel` and checks every element of the destination's
    /// storage against the definition, computed in f64 from the same
    /// (rounded) operands: the matrices' elements per `req` (a write
    /// starts from NaN, which must not show), the padding untouched.
    /// Returns the destination.
    fn check<T: Float>(
        kernel: Kernel,
        mm: &Mm,
        req: OpReqType,
        parallel: bool,
        what: &str,
    ) -> Vec<T> {
        let to_t = |v: Vec<f64>| -> Vec<T> { v.into_iter().map(T::from_f64).collect() };
        // Exactly as long as the layouts reach: a read past the end is a
        // read past the allocation (valgrind sees it).
        let lhs = to_t(values(span(mm.lhs, mm.batch, mm.m, mm.k), 1));
        let rhs = to_t(values(span(mm.rhs, mm.batch, mm.k, mm.n), 2));
        let dst_len = span(mm.dst, mm.batch, mm.m, mm.n);
        let init: Vec<T> = match req {
            OpReqType::WriteTo | OpReqType::WriteInplace => vec![T::from_f64(f64::NAN); dst_len],
            _ => to_t(values(dst_len, 3)),
        };
        let mut dst = init.clone();
        gemm_with(kernel, mm, &mut dst, &lhs, &rhs, req, parallel);
        // The sums accumulate in f64 or f32 (f16: in f32, rounded once).
        let (acc_eps, out_eps) = match T::DTYPE {
            DType::F64 => (f64::EPSILON, f64::EPSILON),
            DType::F32 => (f64::from(f32::EPSILON), f64::from(f32::EPSILON)),
            _ => (f64::from(f32::EPSILON), f16::EPSILON.to_f64()),
        };
        let mut covered = vec![false; dst_len];
        for b in 0..mm.batch {
            for i in 0..mm.m {
                for j in 0..mm.n {
                    let at = b * mm.dst.batch + i * mm.dst.rs + j * mm.dst.cs;
                    covered[at] = true;
                    let (mut sum, mut abs) = (0.0, 0.0);
                    for p in 0..mm.k {
                        let x = lhs[b * mm.lhs.batch + i * mm.lhs.rs + p * mm.lhs.cs].to_f64();
                        let y = rhs[b * mm.rhs.batch + p * mm.rhs.rs + j * mm.rhs.cs].to_f64();
                        sum += x * y;
                        abs += (x * y).abs();
                    }
                    let (got, old) = (dst[at].to_f64(), init[at].to_f64());
                    let want = match req {
                        OpReqType::Null => {
                            assert!(same(got, old), "{what}: ({b}, {i}, {j}) written by Null");
                            continue;
                        }
                        OpReqType::AddTo => old + sum,
                        _ => sum,
                    };
                    // Accumulation in T over k terms, and the rounding of
                    // the sum with the old value.
                    let start = if req == OpReqType::AddTo {
                        old.abs()
                    } else {
                        0.0
                    };
                    let tol = acc_eps * (mm.k as f64 * abs + start)
                        + out_eps * want.abs()
                        + f64::MIN_POSITIVE;
                    assert!(
                        (got - want).abs() <= tol,
                        "{what}: ({b}, {i}, {j}) = {got}, want {want} (tolerance {tol:e})"
                    );
                }
            }
        }
        for (at, &c) in covered.iter().enumerate() {
            if !c {
                let (got, old) = (dst[at].to_f64(), init[at].to_f64());
                assert!(same(got, old), "{what}: padding at {at} changed to {got}");
            }
        }
        dst
    }

    /// Every kernel, request, transpose and padding, on one and on all
    /// threads, for sizes that are not multiples of any vector or tile.
    fn every_case<T: Float>() {
        let sizes = [
            (1, 1, 1),
            (7, 13, 5),
            (33, 65, 17),
            (13, 7, 1),
            (2, 9, 40),
            (5, 1, 9),
            (1, 6, 4),
        ];
        let reqs = [
            OpReqType::WriteTo,
            OpReqType::WriteInplace,
            OpReqType::AddTo,
            OpReqType::Null,
        ];
        for size in sizes {
            for t in 0..8 {
                let t = [t & 1 != 0, t & 2 != 0, t & 4 != 0];
                for (batch, pad) in [(1, 0), (1, 3), (3, 2)] {
                    let mm = geometry(batch, size, t, pad);
                    for kernel in kernels::<T>(&mm) {
                        for req in reqs {
                            for parallel in [false, true] {
                                let what = format!(
                                    "{} {kernel:?} {size:?} batch {batch} transposed {t:?} pad {pad} {req:?} parallel {parallel}",
                                    T::DTYPE
                                );
                                check::<T>(kernel, &mm, req, parallel, &what);
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn every_kernel_matches_the_definition_f32() {
        every_case::<f32>();
    }

    #[test]
    fn every_kernel_matches_the_definition_f64() {
        every_case::<f64>();
    }

    #[test]
    fn f16_products_match_the_definition() {
        // `gemm` alone, computing in f32.
        let mm = geometry(2, (9, 11, 7), [true, false, true], 1);
        assert_eq!(kernels::<f16>(&mm), [Kernel::Gemm]);
        let dst = check::<f16>(Kernel::Gemm, &mm, OpReqType::AddTo, false, "f16");
        assert!(dst.iter().any(|v| v.to_f64() != 0.0));
    }

    #[test]
    fn this_cpu_runs_both_widths_of_private_gemm_x86() {
        // The tests above cover `private-gemm-x86` wherever the CPU can:
        // make sure they do not quietly run `gemm` alone.
        let mm = geometry(1, (7, 13, 5), [false; 3], 0);
        let ks = kernels::<f32>(&mm);
        if cfg!(target_arch = "x86_64") && Isa::Avx2.is_supported() {
            assert!(ks.len() >= 2, "{ks:?}");
        }
        if cfg!(target_arch = "x86_64") && Isa::Avx512.is_supported() {
            assert_eq!(ks.len(), 3, "{ks:?}");
        }
    }

    #[test]
    fn the_active_isa_picks_the_kernel() {
        let mm = geometry(1, (7, 13, 5), [false; 3], 0);
        // Scalar code, f16 and vector results run on `gemm`.
        assert_eq!(Kernel::choose::<f32>(Isa::Scalar, &mm), Kernel::Gemm);
        for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
            assert_eq!(Kernel::choose::<f16>(isa, &mm), Kernel::Gemm);
            for (m, n) in [(1, 13), (7, 1), (1, 1)] {
                let v = Mm { m, n, ..mm };
                assert_eq!(Kernel::choose::<f32>(isa, &v), Kernel::Gemm, "{m}x{n}");
            }
        }
        #[cfg(target_arch = "x86_64")]
        for (isa, width) in [
            (Isa::Avx2, pgx::InstrSet::Avx256),
            (Isa::Avx512, pgx::InstrSet::Avx512),
        ] {
            if !isa.is_supported() {
                continue;
            }
            assert_eq!(
                Kernel::choose::<f64>(isa, &mm),
                Kernel::Pgx(width, pgx::DType::F64)
            );
            // `SIMPLEOP_ISA` / `Tuning` reaches the products through
            // `gemm_on`'s reading of the active set.
            let _isa = simpleop::Tuning::scoped(|t| t.isa = isa).unwrap();
            assert_eq!(
                Kernel::choose::<f32>(simpleop::kernel::active_isa(), &mm),
                Kernel::Pgx(width, pgx::DType::F32)
            );
        }
    }

    #[test]
    fn an_empty_sum_writes_zeros_and_adds_nothing() {
        for t in [[false; 3], [true; 3]] {
            let mm = geometry(2, (5, 7, 0), t, 2);
            for kernel in kernels::<f32>(&Mm { k: 1, ..mm }) {
                for req in OpReqType::ALL {
                    let what = format!("K = 0 {kernel:?} {req:?} transposed {t:?}");
                    // The operands are empty: nothing is read.
                    let len = span(mm.dst, mm.batch, mm.m, mm.n);
                    let init: Vec<f32> = if req == OpReqType::AddTo {
                        values(len, 4).into_iter().map(|v| v as f32).collect()
                    } else {
                        vec![f32::NAN; len]
                    };
                    let mut dst = init.clone();
                    gemm_with(kernel, &mm, &mut dst, &[], &[], req, true);
                    let mut covered = vec![false; len];
                    for b in 0..mm.batch {
                        for i in 0..mm.m {
                            for j in 0..mm.n {
                                covered[b * mm.dst.batch + i * mm.dst.rs + j * mm.dst.cs] = true;
                            }
                        }
                    }
                    for (at, (&got, &old)) in dst.iter().zip(&init).enumerate() {
                        let zeroed = covered[at]
                            && matches!(req, OpReqType::WriteTo | OpReqType::WriteInplace);
                        if zeroed {
                            assert_eq!(got.to_bits(), 0, "{what}: at {at}");
                        } else {
                            assert!(same(got.into(), old.into()), "{what}: at {at} changed");
                        }
                    }
                }
            }
        }
        // No rows, no columns or no matrices: nothing happens, on empty
        // slices.
        for (batch, m, n) in [(1, 0, 3), (1, 3, 0), (0, 3, 3)] {
            let mm = geometry(batch, (m, n, 4), [false; 3], 0);
            for kernel in kernels::<f64>(&geometry(1, (2, 2, 4), [false; 3], 0)) {
                gemm_with::<f64>(kernel, &mm, &mut [], &[], &[], OpReqType::WriteTo, true);
            }
        }
    }

    /// `f` on a pool of `threads`.
    fn on_pool<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> R {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(f)
    }

    #[test]
    fn split_products_match_one_thread() {
        // Large enough for every kernel to split, a sum longer than one
        // block of `private-gemm-x86`'s (512), and transposed operands.
        for (size, t) in [
            ((160, 200, 300), [false, false, false]),
            ((97, 130, 700), [true, true, false]),
            ((130, 97, 600), [false, true, true]),
        ] {
            let mm = geometry(2, size, t, 1);
            for kernel in kernels::<f32>(&mm) {
                for req in [OpReqType::WriteTo, OpReqType::AddTo] {
                    let what = format!("{kernel:?} {size:?} {t:?} {req:?}");
                    let one = check::<f32>(kernel, &mm, req, false, &what);
                    let three = on_pool(3, || check::<f32>(kernel, &mm, req, true, &what));
                    // Each output's sum runs in the same order whatever
                    // the split (the fused slabs rely on it).
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert!(bits(&one) == bits(&three), "{what}: 1 thread against 3");
                }
            }
            let mm = geometry(1, size, t, 0);
            for kernel in kernels::<f64>(&mm) {
                let what = format!("f64 {kernel:?} {size:?} {t:?}");
                on_pool(2, || {
                    check::<f64>(kernel, &mm, OpReqType::WriteTo, true, &what)
                });
            }
        }
    }

    #[test]
    fn split_products_called_from_pool_threads_finish() {
        // Products that split, called at once from every thread of a pool
        // (and from inside a `join`): no deadlock, no wrong result.
        let mm = geometry(1, (150, 170, 190), [false, true, false], 0);
        for kernel in kernels::<f32>(&mm) {
            on_pool(2, || {
                use rayon::prelude::*;
                (0..6).into_par_iter().for_each(|i| {
                    let what = format!("{kernel:?} from a pool thread, call {i}");
                    let (a, b) = rayon::join(
                        || check::<f32>(kernel, &mm, OpReqType::WriteTo, true, &what),
                        || check::<f32>(kernel, &mm, OpReqType::AddTo, true, &what),
                    );
                    assert_eq!(a.len(), b.len());
                });
            });
        }
    }
}
