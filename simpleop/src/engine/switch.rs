//! Process-wide on/off switches of the engine, which [`crate::Tuning`]
//! reads and sets.

use std::sync::atomic::{AtomicU8, Ordering};

use crate::environment::{self, Var};

/// A switch that is `default()` unless its environment variable (if it has
/// one) is set at the first read, and that the program may flip later.
pub(crate) struct Switch {
    var: Option<Var>,
    default: fn() -> bool,
    /// 0 = not read yet, 1 = off, 2 = on.
    state: AtomicU8,
}

impl Switch {
    /// On by default, with no variable.
    pub(crate) const fn on() -> Switch {
        Switch::with_default(None, || true)
    }

    /// On by default unless `var` says otherwise.
    pub(crate) const fn from_env(var: Var) -> Switch {
        Switch::with_default(Some(var), || true)
    }

    pub(crate) const fn with_default(var: Option<Var>, default: fn() -> bool) -> Switch {
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
                let on = self
                    .var
                    .and_then(environment::flag)
                    .unwrap_or_else(self.default);
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
