//! What a kernel receives besides its arrays: [`EnvArguments`] (scalar,
//! typed kwargs, resources) and the [`RunContext`].

use std::any::Any;
use std::sync::{Arc, Mutex};

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng as _, SeedableRng};

use crate::{Element, Error, Result};

/// The device a kernel runs on. Kernels are registered per device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Device {
    /// The host CPU.
    Cpu,
}

impl Device {
    /// The device's name (`cpu`).
    pub fn name(self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
        }
    }
}

/// Where and how a kernel runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunContext {
    /// The device.
    pub device: Device,
    /// Whether kernels may split work across the rayon pool.
    pub parallel: bool,
    /// Training mode (MXNet's `is_train`): Dropout drops and BatchNorm
    /// uses the batch's statistics and updates its moving ones. The
    /// executor sets it per `forward`; eagerly it is
    /// [`crate::eager::is_training`].
    pub is_train: bool,
}

impl Default for RunContext {
    fn default() -> Self {
        RunContext {
            device: Device::Cpu,
            parallel: true,
            is_train: false,
        }
    }
}

/// The non-array arguments of one op call: its scalar or its parsed kwargs,
/// and the resources it asked for.
#[derive(Clone, Default)]
pub struct EnvArguments {
    scalar: Option<f64>,
    kwargs: Option<Arc<dyn Any + Send + Sync>>,
    seed: Option<u64>,
}

impl std::fmt::Debug for EnvArguments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnvArguments")
            .field("scalar", &self.scalar)
            .field("kwargs", &self.kwargs.is_some())
            .field("seed", &self.seed)
            .finish()
    }
}

impl EnvArguments {
    /// No scalar, no kwargs.
    pub fn none() -> Self {
        EnvArguments::default()
    }
    /// Just a scalar.
    pub fn scalar(value: f64) -> Self {
        EnvArguments {
            scalar: Some(value),
            ..Default::default()
        }
    }
    /// Typed kwargs.
    pub fn kwargs<P: Any + Send + Sync>(params: P) -> Self {
        EnvArguments {
            kwargs: Some(Arc::new(params)),
            ..Default::default()
        }
    }
    /// Sets the seed of the random resource.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// The scalar, if any.
    pub fn scalar_value(&self) -> Option<f64> {
        self.scalar
    }
    /// The scalar; errors naming `op` when there is none.
    pub fn require_scalar(&self, op: &str) -> Result<f64> {
        self.scalar
            .ok_or_else(|| Error::MissingScalar { op: op.into() })
    }
    /// Whether kwargs are present.
    pub fn has_kwargs(&self) -> bool {
        self.kwargs.is_some()
    }
    /// The kwargs as type `P`; errors naming `op` when absent or of another type.
    pub fn require_kwargs<P: Any>(&self, op: &str) -> Result<&P> {
        self.kwargs
            .as_deref()
            .and_then(|k| k.downcast_ref::<P>())
            .ok_or_else(|| {
                Error::invalid(
                    op,
                    "kwargs",
                    format!("expected kwargs of type `{}`", std::any::type_name::<P>()),
                )
            })
    }
    /// The seed of the random resource, drawing one from the global
    /// generator ([`seed`]) when none was set.
    pub fn seed_or_draw(&self) -> u64 {
        self.seed.unwrap_or_else(draw_seed)
    }
    /// Zeroed temporary space of `n` elements (the temp-space resource),
    /// or [`crate::Error::Alloc`] naming `op` when it cannot be had. Ask
    /// for what the kernel touches: none for an empty array, whatever its
    /// nominal dimensions.
    pub fn temp_space<T: Element>(&self, op: &str, n: usize) -> crate::Result<Vec<T>> {
        let mut v = Vec::new();
        if v.try_reserve_exact(n).is_err() {
            let bytes = n.checked_mul(size_of::<T>());
            return Err(crate::Error::alloc(
                op,
                format!("temporary space of {n} elements"),
                bytes,
            ));
        }
        v.resize(n, T::zeroed());
        Ok(v)
    }
}

static GLOBAL: Mutex<Option<ChaCha8Rng>> = Mutex::new(None);
const DEFAULT_SEED: u64 = 0x5EED_0F51_4D0B;

/// Seeds the global generator that eager random ops draw their seeds from,
/// as `mx.random.seed` / `torch.manual_seed`. Until called, a fixed default
/// seed is used, so programs are reproducible by default.
pub fn seed(seed: u64) {
    let mut g = GLOBAL.lock().unwrap_or_else(|e| e.into_inner());
    *g = Some(ChaCha8Rng::seed_from_u64(seed));
}

fn draw_seed() -> u64 {
    let mut g = GLOBAL.lock().unwrap_or_else(|e| e.into_inner());
    g.get_or_insert_with(|| ChaCha8Rng::seed_from_u64(DEFAULT_SEED))
        .next_u64()
}

/// The random resource handed to kernels: a ChaCha8 stream.
///
/// Source kernels get one generator per fixed-size block of the output,
/// seeded with `(seed, block index)`, so results depend on the seed alone,
/// never on how many threads ran.
#[derive(Clone, Debug)]
pub struct Rng(ChaCha8Rng);

impl Rng {
    /// The generator for stream `stream` of `seed`.
    pub fn new(seed: u64, stream: u64) -> Self {
        let mut r = ChaCha8Rng::seed_from_u64(seed);
        r.set_stream(stream);
        Rng(r)
    }
    /// 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    /// Uniform in `[0, 1)` with 53 random bits.
    #[inline]
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
    /// Standard normal (Box–Muller).
    #[inline]
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform(); // (0, 1]
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_streams_are_deterministic_and_distinct() {
        let a: Vec<u64> = (0..4).map(|_| Rng::new(7, 0).next_u64()).collect();
        assert!(a.iter().all(|&v| v == a[0]));
        assert_ne!(Rng::new(7, 0).next_u64(), Rng::new(7, 1).next_u64());
        let mut r = Rng::new(1, 0);
        let mean = (0..10_000).map(|_| r.uniform()).sum::<f64>() / 10_000.0;
        assert!((mean - 0.5).abs() < 0.02, "{mean}");
    }

    #[test]
    fn kwargs_are_typed() {
        let env = EnvArguments::kwargs(3.5f32);
        assert_eq!(*env.require_kwargs::<f32>("op").unwrap(), 3.5);
        assert!(env.require_kwargs::<f64>("op").is_err());
        assert!(EnvArguments::none().require_scalar("op").is_err());
    }
}
