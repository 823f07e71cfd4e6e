//! The op author's contract with the kernel engine.
//!
//! `#[simple_op]` turns an op's `forward`/`backward` functions into small
//! types implementing [`MapFn`], [`MapGrad`] or [`SourceFn`]; the engine
//! (crate-private) runs them over whole arrays: over cache-resident tiles,
//! on every float dtype, with the best instruction set the CPU has, on the
//! rayon pool, honouring every [`crate::OpReqType`]. An elementwise op may
//! also name a hand-vectorised [`VectorForm`] (`vector = ...`, see
//! [`forms`]), a [`LaneOp`] the fused-program code generator can emit
//! (`lanes = ...`), and a [`RowReduction`] for reductions over trailing
//! axes. Blob ops that loop themselves split their work with
//! [`par_chunks_mut`], and compile their loops for the CPU with
//! [`with_isa`].
//!
//! Everything named here is stable API for op crates; the engine behind it
//! may change in any release.

use crate::{Float, Isa, Result, Rng};

pub use crate::engine::chunks::{may_split, par_chunks_mut};
pub use crate::engine::grain::worth_splitting;
pub use crate::engine::hints::prefetch;
pub use crate::engine::isa::with_isa;
pub use crate::engine::lanes::{Lane, LaneOp};
pub use crate::engine::rows::{RowReducer, RowReduction, RowReductionFn};
pub use crate::engine::table::HalfTables;
pub use crate::engine::vector::VectorForm;

/// The instruction set the engine's loops use now: the best the CPU has,
/// capped by `SIMPLEOP_ISA` or changed by [`crate::Tuning`]. For kernels
/// that choose their own code by it (the matrix products pick their
/// kernels' vector width), so that they follow the setting as the tile
/// loops do. Cheap: one relaxed atomic load once chosen.
#[inline]
pub fn active_isa() -> Isa {
    crate::engine::isa::active()
}

/// The built-in hand-vectorised forms, for `#[simple_op(vector = ...)]`.
pub mod forms {
    pub use crate::engine::vector::{EXP, LN, RELU, SIGMOID, TANH};
}

/// A forward kernel of arity `N`: one output element from `N` input
/// elements. An op that updates some inputs in place writes their new
/// values back into `x`.
///
/// Kernels are small values (a scalar parameter or a borrow of the params),
/// hence `Copy`: the loops work on a local copy, so that the compiler keeps
/// the parameters in registers instead of reloading them per vector.
pub trait MapFn<const N: usize>: Sync + Copy {
    /// Computes one element, in the compute type `T`.
    fn apply<T: Float>(&self, x: &mut [T; N]) -> T;

    /// The kernel's hand-vectorised form, which the tile loops run instead
    /// of [`MapFn::apply`] where it covers the CPU, on f32 tiles and
    /// f16/bf16 storage (unary kernels only, never f64;
    /// `#[simple_op(vector = ...)]`).
    #[inline(always)]
    fn vector(&self) -> Option<VectorForm> {
        None
    }

    /// The op's lookup tables over f16/bf16 (`table`), which the
    /// attribute declares for kernels whose result depends on their one
    /// input alone. The executor reads them (arity 1 only) in place of
    /// running the kernel, so a kernel that returns one must be a pure
    /// function of its input that does not panic on any value.
    #[inline(always)]
    fn half_tables(&self) -> Option<&'static HalfTables> {
        None
    }
}

/// A backward kernel of arity `N`: the gradient of each input at one element.
///
/// `y` and the entries of `x` the op's gradient does not read are zero.
/// `Copy` for the reason given on [`MapFn`].
pub trait MapGrad<const N: usize>: Sync + Copy {
    /// Computes the `N` input gradients at one element.
    fn apply<T: Float>(&self, dy: T, y: T, x: [T; N]) -> [T; N];
}

/// A forward kernel of arity `N` with `M` outputs (`fn forward<T>(..) ->
/// (T, T)`): every output at one element. `Copy` for the reason given on
/// [`MapFn`].
pub trait MultiMapFn<const N: usize, const M: usize>: Sync + Copy {
    /// Computes the `M` outputs at one element, in the compute type `T`.
    fn apply<T: Float>(&self, x: [T; N]) -> [T; M];
}

/// The gradient of a [`MultiMapFn`]: the `N` input gradients at one element
/// from each output's gradient (zero for an output no one read), the
/// outputs and the inputs (zero where the gradient does not read them).
pub trait MultiMapGrad<const N: usize, const M: usize>: Sync + Copy {
    /// Computes the `N` input gradients at one element.
    fn apply<T: Float>(&self, dy: [T; M], y: [T; M], x: [T; N]) -> [T; N];
}

/// A source kernel: one output element from the random stream.
pub trait SourceFn: Sync {
    /// Computes one element.
    fn apply<T: Float>(&self, rng: &mut Rng) -> T;
}

/// A fused executor's entry into an op's forward kernel: `out[j] =
/// f(ins[0][j], ..)` over compute-type slices of one length.
pub type TileForwardFn<C> = fn(&crate::EnvArguments, &[&[C]], &mut [C]) -> Result<()>;
/// A fused executor's entry into an op's gradient kernel: `grads[i][j]`
/// from `dy[j]`, `y[j]` and `xs[..][j]` (zeros where the gradient does not
/// read them).
pub type TileBackwardFn<C> =
    fn(&crate::EnvArguments, &[C], &[C], &[&[C]], &mut [&mut [C]]) -> Result<()>;

/// An elementwise op's forward run on dual numbers at one point: its value,
/// with `partials[i]` set to the derivative with respect to input `i`.
/// What the exact gradient check ([`crate::gradcheck::ExactCheck`])
/// compares a hand-written gradient with.
pub type DerivativeFn<C> = fn(&crate::EnvArguments, &[C], &mut [C]) -> Result<C>;

/// The [`DerivativeFn`]s of an op whose forward is a single-output
/// elementwise kernel of 1–3 inputs that updates none of them.
#[derive(Clone, Copy, Debug)]
pub struct DerivativeFns {
    /// In f32 (also what f16 and bf16 compute in).
    pub f32: DerivativeFn<f32>,
    /// In f64.
    pub f64: DerivativeFn<f64>,
}

/// An elementwise op's typed gradient run on dual numbers at one point:
/// `at` is `[dy, y, x_0, ..]` (`y` and unread inputs as the tile path
/// gives them), `weights[i]` the gradient reaching input `i`'s gradient;
/// `partials` receives the derivatives of `Σ_i weights[i] · grad_i` with
/// respect to each of `at`. `_backward`'s own gradient (second order).
pub type GradDerivativeFn<C> = fn(&crate::EnvArguments, &[C], &[C], &mut [C]) -> Result<()>;

/// The [`GradDerivativeFn`]s of an op whose gradient is a typed
/// elementwise gradient of 1–3 inputs.
#[derive(Clone, Copy, Debug)]
pub struct GradDerivativeFns {
    /// In f32 (also what f16 and bf16 compute in).
    pub f32: GradDerivativeFn<f32>,
    /// In f64.
    pub f64: GradDerivativeFn<f64>,
}

/// Dual variables for a gradient's `dy`, `y` and up to three inputs.
const GRAD_VARIABLES: usize = 5;

/// The body of a [`GradDerivativeFn`]: `kernel` on `Dual<C, 5>`, `dy` as
/// variable 0, `y` as 1 and input `i` as `2 + i`. A zero weight adds
/// nothing (not `0 · inf`), as an unread output's zero gradient does.
pub fn dual_grad_derivative<K: MapGrad<N>, C: Float, const N: usize>(
    kernel: &K,
    at: &[C],
    weights: &[C],
    partials: &mut [C],
) -> Result<()> {
    if at.len() != 2 + N || weights.len() != N || partials.len() != 2 + N {
        return Err(crate::Error::invalid(
            "dual_grad_derivative",
            "at",
            format!(
                "{} values, {N} weights and {} partials, got {}, {} and {}",
                2 + N,
                2 + N,
                at.len(),
                weights.len(),
                partials.len()
            ),
        ));
    }
    let var = |k: usize| crate::Dual::<C, GRAD_VARIABLES>::variable(at[k], k);
    let grads = kernel.apply(var(0), var(1), std::array::from_fn(|i| var(2 + i)));
    partials.fill(C::zero());
    for (g, &w) in grads.iter().zip(weights) {
        if w.is_exact_zero() {
            continue;
        }
        for (p, t) in partials.iter_mut().zip(g.tangent()) {
            *p += w * t;
        }
    }
    Ok(())
}

/// `dy · partial` for a gradient derived by `autodiff`, zero where `dy`
/// is exactly zero (an output nothing read), as a dual's zero tangents
/// stay zero: an infinite partial there would give NaN.
#[inline(always)]
pub fn head_times<T: Float>(dy: T, partial: T) -> T {
    if dy.is_exact_zero() {
        T::zero()
    } else {
        dy * partial
    }
}

/// The body of a [`DerivativeFn`]: `kernel` on `Dual<C, N>`, input `i`
/// seeded as variable `i`.
pub fn dual_derivative<K: MapFn<N>, C: Float, const N: usize>(
    kernel: &K,
    x: &[C],
    partials: &mut [C],
) -> Result<C> {
    if x.len() != N || partials.len() != N {
        return Err(crate::Error::invalid(
            "dual_derivative",
            "x",
            format!(
                "{N} inputs and {N} partials, got {} and {}",
                x.len(),
                partials.len()
            ),
        ));
    }
    let mut duals: [crate::Dual<C, N>; N] = std::array::from_fn(|i| crate::Dual::variable(x[i], i));
    let y = kernel.apply(&mut duals);
    partials.copy_from_slice(&y.tangent());
    Ok(y.value())
}

/// The type-erased tile entry points of an elementwise op, so that an
/// executor can run several ops over the same cache-resident tile
/// (fusion). Half types compute in f32.
#[derive(Clone, Copy, Debug)]
pub struct TileFns {
    /// Forward in f32 (f32, f16, bf16).
    pub forward_f32: TileForwardFn<f32>,
    /// Forward in f64.
    pub forward_f64: TileForwardFn<f64>,
    /// Gradient in f32, when the op has one.
    pub backward_f32: Option<TileBackwardFn<f32>>,
    /// Gradient in f64, when the op has one.
    pub backward_f64: Option<TileBackwardFn<f64>>,
    /// The op's lane form for code generation, when it declares one
    /// (`#[simple_op(lanes = ...)]`): `None` from the function where the
    /// arguments do not allow it.
    pub lane: Option<LaneFn>,
    /// For an op with several outputs: the forward of outputs `1..`, each
    /// on its own (`forward_f32`/`forward_f64` compute output 0), so that a
    /// fused program stores just the outputs something reads.
    pub more_outputs: &'static [(TileForwardFn<f32>, TileForwardFn<f64>)],
}

/// An op's `jit::Lane` for its arguments.
pub type LaneFn = fn(&crate::EnvArguments) -> Option<Lane>;
