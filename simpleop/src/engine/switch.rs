//! Process-wide on/off switches read from the environment once.

use std::sync::atomic::{AtomicU8, Ordering};

/// A switch that is `default()` unless its environment variable is set
/// at the first read (`0` is off, anything else on), and that the program
/// may flip later.
pub(crate) struct Switch {
    var: &'static str,
    default: fn() -> bool,
    /// 0 = not read yet, 1 = off, 2 = on.
    state: AtomicU8,
}

impl Switch {
    /// On by default.
    pub(crate) const fn new(var: &'static str) -> Switch {
        Switch::with_default(var, || true)
    }

    pub(crate) const fn with_default(var: &'static str, default: fn() -> bool) -> Switch {
        Switch {
            var,
            default,
            state: AtomicU8::new(0),
        }
    }

    #[inline]
    pub(crate) fn get(&self) -> bool {
        match self.state.load(Ordering::Relaxed) {
            0 => {
                let on =
                    std::env::var(self.var).map_or_else(|_| (self.default)(), |v| v.trim() != "0");
                // A value set meanwhile wins over the first read.
                let v = if on { 2 } else { 1 };
                match self
                    .state
                    .compare_exchange(0, v, Ordering::Relaxed, Ordering::Relaxed)
                {
                    Ok(_) => on,
                    Err(set) => set == 2,
                }
            }
            v => v == 2,
        }
    }

    pub(crate) fn set(&self, on: bool) {
        self.state.store(if on { 2 } else { 1 }, Ordering::Relaxed);
    }
}
