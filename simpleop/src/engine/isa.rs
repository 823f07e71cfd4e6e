//! Runtime instruction-set dispatch for the elementwise tile loops.
//!
//! An op author writes a scalar kernel generic over [`Float`]. The drivers in
//! [`crate::kernel`] run it over tiles through the [`TileJob`]s here; each
//! job is compiled once per instruction set with `#[target_feature]`, the
//! kernel is inlined into it (`#[inline(always)]` all the way down), and
//! LLVM vectorises the loop — branches in the kernel become blends, and the
//! [`Float`] transcendentals for f32 are branch-free polynomials
//! ([`crate::vmath`]) that vectorise with it. The best set the CPU has is
//! chosen at run time, once.
//!
//! Where the set has fused multiply-add (AVX2, AVX-512, NEON), kernels run
//! with `T = F32Fma` for f32 ([`TileJob::run_fma`]): the same `f32`
//! arithmetic, but the vector math's polynomials use FMA, which makes
//! `exp`, `tanh`, `sigmoid` and `log` markedly faster. Results then may
//! differ from the scalar build's in the last bit, within the documented
//! bounds; every SIMD set gives the same bits as every other.
//!
//! `SIMPLEOP_ISA=scalar|avx2|avx512` (read at the first dispatch) or
//! [`set_active`] pick a lower set, which is how the benchmark shows what
//! vectorisation buys.

use std::sync::atomic::{AtomicU8, Ordering};

use crate::{Error, Result};

/// An instruction set the tile loops are compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// Plain code for the target's baseline (SSE2 on x86-64).
    Scalar,
    /// AArch64 Advanced SIMD (the baseline there).
    Neon,
    /// AVX2 with FMA and F16C.
    Avx2,
    /// AVX-512 F/BW/DQ/VL with FMA and F16C (512-bit vectors).
    Avx512,
}

impl Isa {
    /// The best set this CPU runs.
    pub fn best() -> Isa {
        best()
    }

    /// The lower-case name used by `SIMPLEOP_ISA` and the benchmark.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Neon => "neon",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    /// Parses [`Isa::name`].
    pub fn from_name(name: &str) -> Option<Isa> {
        [Isa::Scalar, Isa::Neon, Isa::Avx2, Isa::Avx512]
            .into_iter()
            .find(|i| i.name() == name)
    }

    /// Whether this CPU can run code compiled for `self`.
    pub fn is_supported(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                is_x86_feature_detected!("avx2")
                    && is_x86_feature_detected!("fma")
                    && is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                Isa::Avx2.is_supported()
                    && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512dq")
                    && is_x86_feature_detected!("avx512vl")
            }
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }
}

/// The best instruction set this CPU supports.
pub fn best() -> Isa {
    [Isa::Avx512, Isa::Avx2, Isa::Neon]
        .into_iter()
        .find(|i| i.is_supported())
        .unwrap_or(Isa::Scalar)
}

/// 0 = not chosen yet; otherwise `Isa as u8 + 1`.
static ACTIVE: AtomicU8 = AtomicU8::new(0);

fn decode(v: u8) -> Isa {
    match v {
        1 => Isa::Scalar,
        2 => Isa::Neon,
        3 => Isa::Avx2,
        _ => Isa::Avx512,
    }
}

/// Sets the active set without checking that the CPU has it (tests restore
/// one they read from [`active`]).
#[cfg(test)]
pub(crate) fn restore(isa: Isa) {
    ACTIVE.store(encode(isa), Ordering::Relaxed);
}

fn encode(isa: Isa) -> u8 {
    isa as u8 + 1
}

/// The instruction set the tile loops use now.
#[inline]
pub fn active() -> Isa {
    match ACTIVE.load(Ordering::Relaxed) {
        0 => choose(),
        v => decode(v),
    }
}

#[cold]
fn choose() -> Isa {
    let requested =
        crate::environment::text(crate::environment::Var::Isa).and_then(|s| Isa::from_name(&s));
    let isa = requested.filter(|i| i.is_supported()).unwrap_or_else(best);
    ACTIVE.store(encode(isa), Ordering::Relaxed);
    isa
}

/// Selects the instruction set for every later tile loop in this process,
/// for example [`Isa::Scalar`] to measure what vectorisation buys.
pub fn set_active(isa: Isa) -> Result<()> {
    if !isa.is_supported() {
        return Err(Error::invalid(
            "simd",
            "isa",
            format!("this CPU cannot run `{}` code", isa.name()),
        ));
    }
    ACTIVE.store(encode(isa), Ordering::Relaxed);
    Ok(())
}

/// A loop body compiled once per instruction set. Implementations mark
/// `run` `#[inline(always)]` so that it is compiled inside the
/// `#[target_feature]` function that calls it.
pub trait TileJob: Sized {
    /// Runs the loop.
    fn run(self);
    /// Runs the loop where the CPU has fused multiply-add: kernels run in
    /// `Float::Fma`, so an f32 kernel's vector math uses
    /// [`crate::vmath::fma`]. Jobs without kernels run as [`TileJob::run`].
    #[inline(always)]
    fn run_fma(self) {
        self.run()
    }

    /// Runs the loop inside the AVX-512 dispatch; jobs whose kernels have
    /// a `VectorForm` run it here, the rest as
    /// [`TileJob::run_fma`].
    ///
    /// # Safety
    /// The CPU must have what [`Isa::Avx512`] stands for (AVX-512F, BW,
    /// DQ and VL, with AVX2, FMA and F16C).
    #[inline(always)]
    unsafe fn run_avx512(self) {
        self.run_fma()
    }

    /// Runs the loop inside the AVX2 dispatch; jobs whose kernels have a
    /// `VectorForm` with AVX2 loops run them here, the rest as
    /// [`TileJob::run_fma`].
    ///
    /// # Safety
    /// The CPU must have what [`Isa::Avx2`] stands for (AVX2, FMA and
    /// F16C).
    #[inline(always)]
    unsafe fn run_avx2(self) {
        self.run_fma()
    }
}

/// Runs `job` compiled for the active instruction set.
#[inline]
pub fn run<J: TileJob>(job: J) {
    // SAFETY: `active` only returns an instruction set the CPU supports.
    unsafe { run_on(active(), job) }
}

/// A closure as a [`TileJob`], for [`with_isa`].
struct ClosureJob<F>(F);

impl<F: FnOnce()> TileJob for ClosureJob<F> {
    #[inline(always)]
    fn run(self) {
        (self.0)()
    }
}

/// Runs `f` compiled for the active instruction set: a blob kernel's
/// loop inlined into it vectorises for this CPU (AVX-512, AVX2 with FMA)
/// instead of the build's baseline. Call it around a loop, not inside
/// one: each call crosses a function boundary. `f` is inlined into the
/// dispatch only when it is marked so: pass `#[inline(always)] || ...`
/// calling `#[inline(always)]` functions.
#[inline]
pub fn with_isa<R>(f: impl FnOnce() -> R) -> R {
    let mut out = None;
    run(ClosureJob(
        #[inline(always)]
        || out = Some(f()),
    ));
    out.expect("the job ran")
}

/// Runs `job` compiled for `isa`, which was [`active`] when the caller
/// read it (so that what it computed can be labelled with the set that
/// computed it), or plainly if the CPU lacks `isa`.
pub(crate) fn run_with<J: TileJob>(isa: Isa, job: J) {
    if isa.is_supported() {
        // SAFETY: checked just now.
        unsafe { run_on(isa, job) }
    } else {
        job.run()
    }
}

/// The dispatch behind [`run`] and [`run_with`].
///
/// # Safety
/// The CPU supports `isa`.
#[inline(always)]
unsafe fn run_on<J: TileJob>(isa: Isa, job: J) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller's contract.
        Isa::Avx512 => unsafe { run_avx512(job) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Isa::Avx2 => unsafe { run_avx2(job) },
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => job.run_fma(),
        _ => job.run(),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(
    enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c,bmi1,bmi2,lzcnt,popcnt"
)]
fn run_avx512<J: TileJob>(job: J) {
    // SAFETY: `run_on` calls this only for `Isa::Avx512` on a CPU that
    // supports it (its caller's contract).
    unsafe { job.run_avx512() }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,bmi1,bmi2,lzcnt,popcnt")]
fn run_avx2<J: TileJob>(job: J) {
    // SAFETY: `run_on` calls this only for `Isa::Avx2` on a CPU that
    // supports it (its caller's contract).
    unsafe { job.run_avx2() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_best_is_supported() {
        for isa in [Isa::Scalar, Isa::Neon, Isa::Avx2, Isa::Avx512] {
            assert_eq!(Isa::from_name(isa.name()), Some(isa));
        }
        assert!(best().is_supported());
        assert!(Isa::Scalar.is_supported());
        assert!(active().is_supported());
    }
}
