//! [`Dual`]: dual numbers, so that a kernel written against [`Float`] gives
//! its own exact derivative.
//!
//! A `Dual<T, N>` carries a value and `N` partial derivatives (its
//! tangent). Arithmetic and every [`Float`] method apply the chain rule, so
//! running `forward::<Dual<T, N>>` on inputs seeded with
//! [`Dual::variable`] returns the forward's value and its partial
//! derivative with respect to each input: forward-mode differentiation of
//! exactly the code the author wrote, branches included (a comparison
//! reads the value). `Dual` implements `Float` itself, so duals nest
//! (`Dual<Dual<f64, 1>, 1>` carries second derivatives).
//!
//! Two rules keep the derivative of an expression what its author would
//! expect where a plain dual would give NaN:
//! - A tangent that is exactly zero stays zero through every rule: a
//!   constant, or a partial for an input the value does not depend on,
//!   contributes nothing even where the local derivative is infinite
//!   (`sqrt` at 0) or NaN. Without it, `sqrt(x) + y` would have a NaN
//!   partial in `y` at `x = 0`.
//! - `x^0` is flat in `x` and `0^y` (y > 0) flat in `y`, whatever the
//!   other partial's formula gives there.
//!
//! Rounding and discontinuous functions (`floor`, `round`, `sign`, ...)
//! have derivative zero, as in PyTorch; `abs` has derivative `sign(x)`, so
//! zero at zero. Its [`Element::DTYPE`] names the storage type of its
//! value, so kernels that branch on the dtype branch as they do on plain
//! numbers; typed views of arrays and blobs refuse it (its size is not
//! the dtype's).

use std::fmt;
use std::ops::{Add, AddAssign, Div, Mul, MulAssign, Neg, Rem, Sub, SubAssign};

use crate::dtype::types::{DType, Element, Float, sealed};

/// A value of `T` and its partial derivatives with respect to `N`
/// variables.
///
/// ```
/// use simpleop::{Dual, Float};
///
/// fn f<T: Float>(x: T, y: T) -> T {
///     x * y.exp() + x.sin()
/// }
/// let (x, y) = (0.5f64, 2.0f64);
/// let r = f(Dual::<f64, 2>::variable(x, 0), Dual::variable(y, 1));
/// assert_eq!(r.value(), f(x, y));
/// assert!((r.partial(0) - (y.exp() + x.cos())).abs() < 1e-12);
/// assert!((r.partial(1) - x * y.exp()).abs() < 1e-12);
/// ```
#[derive(Clone, Copy)]
#[repr(C)]
pub struct Dual<T, const N: usize> {
    value: T,
    tangent: [T; N],
}

impl<T: Float, const N: usize> Dual<T, N> {
    /// A constant: every partial is zero.
    #[inline(always)]
    pub fn constant(value: T) -> Self {
        Dual {
            value,
            tangent: [T::zero(); N],
        }
    }

    /// Variable `i` (`i < N`): partial 1 with respect to itself, 0 to the
    /// others.
    ///
    /// # Panics
    /// If `i >= N`.
    #[inline(always)]
    pub fn variable(value: T, i: usize) -> Self {
        let mut tangent = [T::zero(); N];
        tangent[i] = T::one();
        Dual { value, tangent }
    }

    /// A value with the given partials.
    #[inline(always)]
    pub fn new(value: T, tangent: [T; N]) -> Self {
        Dual { value, tangent }
    }

    /// The value.
    #[inline(always)]
    pub fn value(self) -> T {
        self.value
    }

    /// The partial derivative with respect to variable `i`.
    ///
    /// # Panics
    /// If `i >= N`.
    #[inline(always)]
    pub fn partial(self, i: usize) -> T {
        self.tangent[i]
    }

    /// Every partial derivative.
    #[inline(always)]
    pub fn tangent(self) -> [T; N] {
        self.tangent
    }

    /// The value `value`, with partial `i` from `rule(self's, rhs's)`
    /// partial `i`: the chain rule for a function of two arguments.
    #[inline(always)]
    fn zip_with(self, rhs: Self, value: T, rule: impl Fn(T, T) -> T) -> Self {
        let mut tangent = self.tangent;
        for (d, e) in tangent.iter_mut().zip(rhs.tangent) {
            *d = rule(*d, e);
        }
        Dual { value, tangent }
    }

    /// The value `value`, with the tangent scaled by `slope` (the local
    /// derivative): the chain rule for a function of one argument.
    #[inline(always)]
    fn chain(self, value: T, slope: T) -> Self {
        Dual {
            value,
            tangent: self.tangent.map(|d| scale(d, slope)),
        }
    }
}

/// `d * k`, but zero when `d` is exactly zero (see the module docs).
#[inline(always)]
fn scale<T: Float>(d: T, k: T) -> T {
    if d.is_exact_zero() { d } else { d * k }
}

/// `a * ka + b * kb`, each term as [`scale`].
#[inline(always)]
fn scale2<T: Float>(a: T, ka: T, b: T, kb: T) -> T {
    scale(a, ka) + scale(b, kb)
}

impl<T: fmt::Debug, const N: usize> fmt::Debug for Dual<T, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} + {:?}ε", self.value, self.tangent)
    }
}

/// Duals compare by value, as the branches of the code they run through do.
impl<T: Float, const N: usize> PartialEq for Dual<T, N> {
    #[inline(always)]
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}

impl<T: Float, const N: usize> PartialOrd for Dual<T, N> {
    #[inline(always)]
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        self.value.partial_cmp(&other.value)
    }
}

// SAFETY: `repr(C)` with fields `T` and `[T; N]`, both `Zeroable`.
unsafe impl<T: Float, const N: usize> bytemuck::Zeroable for Dual<T, N> {}
// SAFETY: as above; `[T; N]` has `T`'s alignment and a multiple of its
// size, so the struct has no padding, and every bit pattern of each
// field is valid because `T` is `Pod`.
unsafe impl<T: Float, const N: usize> bytemuck::Pod for Dual<T, N> {}

impl<T: Float, const N: usize> sealed::Sealed for Dual<T, N> {}

impl<T: Float, const N: usize> Element for Dual<T, N> {
    const DTYPE: DType = T::DTYPE;
    /// The value, widened.
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self.value.to_f64()
    }
    /// A constant.
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        Dual::constant(T::from_f64(v))
    }
}

impl<T: Float, const N: usize> Add for Dual<T, N> {
    type Output = Self;
    #[inline(always)]
    fn add(self, rhs: Self) -> Self {
        self.zip_with(rhs, self.value + rhs.value, |d, e| d + e)
    }
}

impl<T: Float, const N: usize> Sub for Dual<T, N> {
    type Output = Self;
    #[inline(always)]
    fn sub(self, rhs: Self) -> Self {
        self.zip_with(rhs, self.value - rhs.value, |d, e| d - e)
    }
}

impl<T: Float, const N: usize> Mul for Dual<T, N> {
    type Output = Self;
    #[inline(always)]
    fn mul(self, rhs: Self) -> Self {
        let (a, b) = (self.value, rhs.value);
        self.zip_with(rhs, a * b, |d, e| scale2(d, b, e, a))
    }
}

impl<T: Float, const N: usize> Div for Dual<T, N> {
    type Output = Self;
    #[inline(always)]
    fn div(self, rhs: Self) -> Self {
        // d(a/b) = (da - (a/b) db) / b, divided last: 1/b may overflow
        // where the quotient does not
        let (q, b) = (self.value / rhs.value, rhs.value);
        self.zip_with(rhs, q, |d, e| {
            let t = scale2(d, T::one(), e, -q);
            if t.is_exact_zero() { t } else { t / b }
        })
    }
}

impl<T: Float, const N: usize> Rem for Dual<T, N> {
    type Output = Self;
    /// `a % b = a - k b` for the integer `k` the remainder used (not
    /// `trunc(a / b)`, which the rounded quotient can overshoot), so the
    /// partials are `da - k db`.
    #[inline(always)]
    fn rem(self, rhs: Self) -> Self {
        let r = self.value % rhs.value;
        let k = ((self.value - r) / rhs.value).round();
        self.zip_with(rhs, r, |d, e| scale2(d, T::one(), e, -k))
    }
}

impl<T: Float, const N: usize> Neg for Dual<T, N> {
    type Output = Self;
    #[inline(always)]
    fn neg(self) -> Self {
        Dual::new(-self.value, self.tangent.map(|d| -d))
    }
}

impl<T: Float, const N: usize> AddAssign for Dual<T, N> {
    #[inline(always)]
    fn add_assign(&mut self, rhs: Self) {
        *self = *self + rhs;
    }
}

impl<T: Float, const N: usize> SubAssign for Dual<T, N> {
    #[inline(always)]
    fn sub_assign(&mut self, rhs: Self) {
        *self = *self - rhs;
    }
}

impl<T: Float, const N: usize> MulAssign for Dual<T, N> {
    #[inline(always)]
    fn mul_assign(&mut self, rhs: Self) {
        *self = *self * rhs;
    }
}

/// `c` as `T` (the constants of the derivative rules).
#[inline(always)]
fn k<T: Float>(c: f64) -> T {
    T::from_f64(c)
}

/// Functions whose derivative is zero wherever it exists.
macro_rules! flat {
    ($($m:ident),*) => {$(
        #[inline(always)]
        fn $m(self) -> Self {
            Dual::constant(self.value.$m())
        }
    )*};
}

impl<T: Float, const N: usize> Float for Dual<T, N> {
    type Compute = Dual<T::Compute, N>;
    type Fma = Self;
    #[inline(always)]
    fn to_compute(self) -> Self::Compute {
        Dual::new(self.value.to_compute(), self.tangent.map(T::to_compute))
    }
    #[inline(always)]
    fn from_compute(c: Self::Compute) -> Self {
        Dual::new(T::from_compute(c.value), c.tangent.map(T::from_compute))
    }
    #[inline(always)]
    fn zero() -> Self {
        Dual::constant(T::zero())
    }
    #[inline(always)]
    fn one() -> Self {
        Dual::constant(T::one())
    }
    #[inline(always)]
    fn infinity() -> Self {
        Dual::constant(T::infinity())
    }
    #[inline(always)]
    fn neg_infinity() -> Self {
        Dual::constant(T::neg_infinity())
    }
    #[inline(always)]
    fn nan() -> Self {
        Dual::constant(T::nan())
    }
    #[inline(always)]
    fn is_nan(self) -> bool {
        self.value.is_nan()
    }
    #[inline(always)]
    fn is_exact_zero(self) -> bool {
        self.value.is_exact_zero() && self.tangent.iter().all(|d| d.is_exact_zero())
    }

    flat!(sign, floor, ceil, round, trunc);

    #[inline(always)]
    fn abs(self) -> Self {
        self.chain(self.value.abs(), self.value.sign())
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        let s = self.value.sqrt();
        self.chain(s, k::<T>(0.5) / s)
    }
    #[inline(always)]
    fn cbrt(self) -> Self {
        let c = self.value.cbrt();
        self.chain(c, T::one() / (k::<T>(3.0) * c * c))
    }
    #[inline(always)]
    fn exp(self) -> Self {
        let e = self.value.exp();
        self.chain(e, e)
    }
    #[inline(always)]
    fn exp_m1(self) -> Self {
        self.chain(self.value.exp_m1(), self.value.exp())
    }
    #[inline(always)]
    fn ln(self) -> Self {
        self.chain(self.value.ln(), T::one() / self.value)
    }
    #[inline(always)]
    fn ln_1p(self) -> Self {
        self.chain(self.value.ln_1p(), T::one() / (T::one() + self.value))
    }
    #[inline(always)]
    fn log2(self) -> Self {
        let slope = T::one() / (self.value * k(std::f64::consts::LN_2));
        self.chain(self.value.log2(), slope)
    }
    #[inline(always)]
    fn log10(self) -> Self {
        let slope = T::one() / (self.value * k(std::f64::consts::LN_10));
        self.chain(self.value.log10(), slope)
    }
    /// `x^y`: `y x^(y-1)` in `x`, `x^y ln x` in `y`; `x^0` is flat in `x`
    /// and `0^y` (y > 0) flat in `y` (see the module docs).
    #[inline(always)]
    fn powf(self, y: Self) -> Self {
        let (a, b) = (self.value, y.value);
        let p = a.powf(b);
        let da = if b.is_exact_zero() {
            T::zero()
        } else {
            b * a.powf(b - T::one())
        };
        // 0^y is 0 for every y > 0: flat in y there (p ln a would be 0·-inf)
        let db = if a.is_exact_zero() && b > T::zero() {
            T::zero()
        } else {
            p * a.ln()
        };
        self.zip_with(y, p, |d, e| scale2(d, da, e, db))
    }
    #[inline(always)]
    fn sin(self) -> Self {
        self.chain(self.value.sin(), self.value.cos())
    }
    #[inline(always)]
    fn cos(self) -> Self {
        self.chain(self.value.cos(), -self.value.sin())
    }
    #[inline(always)]
    fn tan(self) -> Self {
        let t = self.value.tan();
        self.chain(t, T::one() + t * t)
    }
    #[inline(always)]
    fn asin(self) -> Self {
        let x = self.value;
        let slope = T::one() / ((T::one() - x) * (T::one() + x)).sqrt();
        self.chain(x.asin(), slope)
    }
    #[inline(always)]
    fn acos(self) -> Self {
        let x = self.value;
        let slope = -T::one() / ((T::one() - x) * (T::one() + x)).sqrt();
        self.chain(x.acos(), slope)
    }
    #[inline(always)]
    fn atan(self) -> Self {
        let slope = T::one() / (T::one() + self.value * self.value);
        self.chain(self.value.atan(), slope)
    }
    #[inline(always)]
    fn sinh(self) -> Self {
        self.chain(self.value.sinh(), self.value.cosh())
    }
    #[inline(always)]
    fn cosh(self) -> Self {
        self.chain(self.value.cosh(), self.value.sinh())
    }
    #[inline(always)]
    fn tanh(self) -> Self {
        let t = self.value.tanh();
        self.chain(t, T::one() - t * t)
    }
    #[inline(always)]
    fn erf(self) -> Self {
        let x = self.value;
        let slope = k::<T>(std::f64::consts::FRAC_2_SQRT_PI) * (-(x * x)).exp();
        self.chain(x.erf(), slope)
    }
    #[inline(always)]
    fn sigmoid(self) -> Self {
        let s = self.value.sigmoid();
        self.chain(s, s * (T::one() - s))
    }
    /// Γ'(x) = Γ(x) ψ(x).
    #[inline(always)]
    fn gamma(self) -> Self {
        let g = self.value.gamma();
        self.chain(g, g * digamma(self.value))
    }
    #[inline(always)]
    fn hypot(self, y: Self) -> Self {
        let (a, b) = (self.value, y.value);
        let h = a.hypot(b);
        self.zip_with(y, h, |d, e| scale2(d, a / h, e, b / h))
    }
}

/// The digamma function ψ = Γ'/Γ: reflection below 1/2, the recurrence
/// ψ(x) = ψ(x + 1) - 1/x up to 10, then the asymptotic series (error
/// below 1e-15 there). Generic, so that a nested dual differentiates it
/// too.
fn digamma<T: Float>(x: T) -> T {
    let half = k::<T>(0.5);
    if x < half {
        // ψ(x) = ψ(1 - x) - π / tan(πx)
        let pi = k::<T>(std::f64::consts::PI);
        return digamma(T::one() - x) - pi / (pi * x).tan();
    }
    let mut x = x;
    let mut acc = T::zero();
    while x < k(10.0) {
        acc -= T::one() / x;
        x += T::one();
    }
    let r = T::one() / (x * x);
    // Σ B₂ₙ / (2n x²ⁿ): 1/(12x²) - 1/(120x⁴) + .. - 691/(32760x¹²)
    let coef = [
        1.0 / 12.0,
        -1.0 / 120.0,
        1.0 / 252.0,
        -1.0 / 240.0,
        1.0 / 132.0,
        -691.0 / 32760.0,
    ];
    let mut series = T::zero();
    for c in coef.iter().rev() {
        series = (series + k(*c)) * r;
    }
    acc + x.ln() - half / x - series
}

#[cfg(test)]
mod tests {
    use super::*;

    type D = Dual<f64, 1>;

    fn d(x: f64) -> D {
        D::variable(x, 0)
    }

    /// `f'(x)` by dual numbers against `df` within `tol` (relative).
    fn close(what: &str, got: f64, want: f64, tol: f64) {
        assert!(
            (got - want).abs() <= tol * want.abs().max(1.0),
            "{what}: {got} vs {want}"
        );
    }

    #[test]
    fn unary_rules_match_closed_forms() {
        type Rule = (&'static str, fn(D) -> D, fn(f64) -> f64);
        let cases: [Rule; 20] = [
            ("exp", D::exp, f64::exp),
            ("exp_m1", D::exp_m1, f64::exp),
            ("ln", D::ln, |x| 1.0 / x),
            ("ln_1p", D::ln_1p, |x| 1.0 / (1.0 + x)),
            ("log2", D::log2, |x| 1.0 / (x * std::f64::consts::LN_2)),
            ("log10", D::log10, |x| 1.0 / (x * std::f64::consts::LN_10)),
            ("sqrt", D::sqrt, |x| 0.5 / x.sqrt()),
            ("cbrt", D::cbrt, |x| x.cbrt() / (3.0 * x)),
            ("sin", D::sin, f64::cos),
            ("cos", D::cos, |x| -x.sin()),
            ("tan", D::tan, |x| 1.0 / (x.cos() * x.cos())),
            ("asin", D::asin, |x| 1.0 / (1.0 - x * x).sqrt()),
            ("acos", D::acos, |x| -1.0 / (1.0 - x * x).sqrt()),
            ("atan", D::atan, |x| 1.0 / (1.0 + x * x)),
            ("sinh", D::sinh, f64::cosh),
            ("cosh", D::cosh, f64::sinh),
            ("tanh", D::tanh, |x| 1.0 / (x.cosh() * x.cosh())),
            ("sigmoid", D::sigmoid, |x| {
                let s = 1.0 / (1.0 + (-x).exp());
                s * (1.0 - s)
            }),
            ("erf", D::erf, |x| {
                2.0 / std::f64::consts::PI.sqrt() * (-x * x).exp()
            }),
            ("abs", D::abs, f64::signum),
        ];
        for (name, f, df) in cases {
            for x in [0.1, 0.3, 0.7, 0.95] {
                let r = f(d(x));
                close(name, r.partial(0), df(x), 1e-12);
            }
        }
    }

    #[test]
    fn gamma_derivative_is_gamma_times_digamma() {
        // ψ(1) = -γ, ψ(1/2) = -γ - 2 ln 2, ψ(10) = H_9 - γ
        let euler = 0.577_215_664_901_532_9;
        close("psi(1)", digamma(1.0), -euler, 1e-14);
        close(
            "psi(1/2)",
            digamma(0.5),
            -euler - 2.0 * std::f64::consts::LN_2,
            1e-14,
        );
        let h9: f64 = (1..=9).map(|i| 1.0 / i as f64).sum();
        close("psi(10)", digamma(10.0), h9 - euler, 1e-14);
        // ψ(-1/2) = ψ(1/2) + 2 by the recurrence
        close("psi(-1/2)", digamma(-0.5), digamma(0.5) + 2.0, 1e-13);
        let g = d(3.5).gamma();
        close("gamma'", g.partial(0), g.value() * digamma(3.5), 1e-14);
    }

    #[test]
    fn binary_rules_give_both_partials() {
        type D2 = Dual<f64, 2>;
        let (a, b) = (1.7, -0.6);
        let (x, y) = (D2::variable(a, 0), D2::variable(b, 1));
        let check = |what: &str, r: D2, da: f64, db: f64| {
            close(what, r.partial(0), da, 1e-14);
            close(what, r.partial(1), db, 1e-14);
        };
        check("add", x + y, 1.0, 1.0);
        check("sub", x - y, 1.0, -1.0);
        check("mul", x * y, b, a);
        check("div", x / y, 1.0 / b, -a / (b * b));
        check("rem", x % y, 1.0, -(a / b).trunc());
        // 1 % 0.1 is 0.0999..: 9 whole 0.1s, though 1 / 0.1 rounds to 10
        let r = D2::variable(1.0, 0) % D2::variable(0.1, 1);
        assert_eq!(r.tangent(), [1.0, -9.0]);
        check("neg", -x, -1.0, 0.0);
        check("pow", x.powf(y), b * a.powf(b - 1.0), a.powf(b) * a.ln());
        let h = a.hypot(b);
        check("hypot", x.hypot(y), a / h, b / h);
        check("max", x.max(y), 1.0, 0.0);
        check("min", x.min(y), 0.0, 1.0);
        let mut z = x;
        z *= y;
        z += x;
        z -= y;
        check("assign", z, b + 1.0, a - 1.0);
    }

    #[test]
    fn zero_tangents_stay_zero_where_the_slope_is_infinite() {
        type D2 = Dual<f64, 2>;
        let (x, y) = (D2::variable(0.0, 0), D2::variable(3.0, 1));
        let r = x.sqrt() + y;
        assert_eq!(r.partial(1), 1.0);
        assert_eq!(r.partial(0), f64::INFINITY);
        // x^0 is 1 at x = 0, whose x^-1 is infinite
        let p = x.powf(D2::constant(0.0));
        assert_eq!((p.value(), p.partial(0), p.partial(1)), (1.0, 0.0, 0.0));
        // a constant through ln at 0
        assert_eq!(D2::constant(0.0).ln().tangent(), [0.0, 0.0]);
        let z = D2::variable(0.0, 0).powf(D2::variable(2.5, 1));
        assert_eq!(z.tangent(), [0.0, 0.0]);
    }

    #[test]
    fn flat_functions_and_comparisons_read_the_value() {
        for f in [D::floor, D::ceil, D::round, D::trunc, D::sign] {
            assert_eq!(f(d(1.3)).partial(0), 0.0);
        }
        assert!(d(1.0) < d(2.0) && d(1.0) == D::new(1.0, [5.0]));
        assert_eq!(D::from_f64(2.5).tangent(), [0.0]);
        assert_eq!(d(2.5).to_f64(), 2.5);
        assert!(D::nan().is_nan() && !d(0.0).is_nan());
        assert_eq!(<D as Element>::DTYPE, DType::F64);
        // a branch follows the value: relu's derivative is 0 or 1
        let relu = |x: D| if x <= D::zero() { D::zero() } else { x };
        assert_eq!(relu(d(-1.0)).partial(0), 0.0);
        assert_eq!(relu(d(2.0)).partial(0), 1.0);
    }

    #[test]
    fn nested_duals_give_second_derivatives() {
        type DD = Dual<Dual<f64, 1>, 1>;
        let x = 0.4;
        let v = DD::new(Dual::variable(x, 0), [Dual::constant(1.0)]);
        let t = v.tanh();
        // d²/dx² tanh = -2 tanh sech²
        let th = x.tanh();
        close(
            "tanh''",
            t.partial(0).partial(0),
            -2.0 * th * (1.0 - th * th),
            1e-14,
        );
        let s = v.sigmoid();
        let sg = 1.0 / (1.0 + (-x).exp());
        let want = sg * (1.0 - sg) * (1.0 - 2.0 * sg);
        close("sigmoid''", s.partial(0).partial(0), want, 1e-14);
        // the zero-tangent rule looks through the nesting
        assert!(!Dual::<f64, 1>::new(0.0, [1.0]).is_exact_zero());
    }

    #[test]
    fn typed_views_refuse_a_dual_wider_than_the_dtype() {
        let data = [1.0f32; 4];
        let blob = crate::TBlob::from_slice(&data, [4]).unwrap();
        assert!(blob.as_slice::<Dual<f32, 3>>().is_err());
        assert!(blob.as_slice::<f32>().is_ok());
        let a = crate::NDArray::from_slice(&data, [4]).unwrap();
        assert!(a.as_slice::<Dual<f32, 1>>().is_err());
        assert!(a.to_vec::<Dual<f32, 1>>().is_err());
        assert!(crate::NDArray::from_slice(&[Dual::<f32, 1>::constant(1.0)], [1]).is_err());
    }

    #[test]
    fn compute_conversions_keep_every_partial() {
        let h =
            Dual::<half::f16, 2>::new(half::f16::from_f32(1.5), [half::f16::ONE, half::f16::ZERO]);
        let c = h.to_compute();
        assert_eq!((c.value(), c.tangent()), (1.5f32, [1.0, 0.0]));
        let back = Dual::<half::f16, 2>::from_compute(c * c);
        assert_eq!(back.value().to_f32(), 2.25);
        assert_eq!(back.partial(0).to_f32(), 3.0);
        assert_eq!(std::mem::size_of::<Dual<f32, 3>>(), 16);
    }
}
