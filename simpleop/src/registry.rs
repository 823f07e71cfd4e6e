//! The op registry: an explicit value mapping names to [`OpDef`]s and their
//! per-device kernels.
//!
//! `#[simple_op]` submits an [`OpRegistration`] and a [`KernelRegistration`]
//! through `inventory`; [`Registry::global`] collects them once. A backend
//! crate adds a device by submitting more `KernelRegistration`s for existing
//! op names, without touching any op.
//!
//! # Making sure an ops crate is linked
//! Registration happens at link time, so a crate whose ops are only ever
//! called *by name* must still be linked into the final binary, and Rust
//! drops dependencies that nothing references. Either of these does it:
//!
//! * `use simpleop_ops as _;` anywhere in the binary crate;
//! * `simpleop_ops::link();` once, e.g. first thing in `main`. An op crate
//!   gets this function from [`crate::link_ops!`].
//!
//! `examples/tests/link_by_use.rs` and `link_by_name.rs` test both with a
//! crate whose ops are never named by a Rust path.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;
use std::sync::OnceLock;

use crate::{BackwardFn, Device, EnvArguments, Error, ForwardFn, OpDef, OpForm, ParamKind, Result};

/// One op submitted to the global registry.
pub struct OpRegistration(pub &'static OpDef);

/// The kernels of one op on one device.
#[derive(Clone, Copy, Debug)]
pub struct KernelRegistration {
    /// The op's registered name.
    pub op: &'static str,
    /// The device these kernels run on.
    pub device: Device,
    /// The forward kernel.
    pub forward: ForwardFn,
    /// The backward kernel, when the op has a gradient.
    pub backward: Option<BackwardFn>,
    /// Tile entry points, for elementwise ops that fused executors can
    /// chain (not for ops that update inputs in place or draw random
    /// numbers).
    pub tile: Option<crate::kernel::TileFns>,
    /// For reductions over trailing axes that sum (a `fn rows` in the op's
    /// module): what each output row reduces, so that a fused program can
    /// feed the reduction tile by tile.
    pub rows: Option<crate::kernel::RowReductionFn>,
    /// The forward on dual numbers, for elementwise ops it can run on
    /// (one output, 1–3 inputs, none updated in place, no random stream).
    pub derivative: Option<crate::kernel::DerivativeFns>,
    /// The gradient on dual numbers, for elementwise ops whose typed
    /// gradient it can run on (one output, 1–3 inputs): `_backward`'s
    /// gradient, the second derivative.
    pub grad_derivative: Option<crate::kernel::GradDerivativeFns>,
    /// Where the kernels were registered (`file:line`).
    pub location: &'static str,
}

/// The op that runs `op` called with `env` (see [`Registry::simple_form`]),
/// or `op` itself when there is no fitting simple form: what the executor,
/// the tape and gradient graphs differentiate, so that all three give the
/// same bits.
pub(crate) fn runs_as(op: &'static OpDef, env: &EnvArguments) -> &'static OpDef {
    match op.simple_form {
        Some(_) => Registry::global()
            .and_then(|r| r.simple_form(op, env))
            .unwrap_or(op),
        None => op,
    }
}

inventory::collect!(OpRegistration);
inventory::collect!(KernelRegistration);

/// A registered op: its definition and its kernels by device.
#[derive(Debug)]
pub struct RegisteredOp {
    /// The definition.
    pub def: &'static OpDef,
    kernels: BTreeMap<Device, KernelRegistration>,
}

impl RegisteredOp {
    /// The kernels for `device`.
    pub fn kernels(&self, device: Device) -> Result<&KernelRegistration> {
        self.kernels.get(&device).ok_or_else(|| Error::NoKernel {
            op: self.def.name.into(),
            device: device.name().into(),
        })
    }
    /// The devices this op has kernels for.
    pub fn devices(&self) -> impl Iterator<Item = Device> + '_ {
        self.kernels.keys().copied()
    }
}

/// A set of ops by name, iterated in sorted order.
///
/// Hash maps with a fast string hash: every eager call looks its op up.
#[derive(Debug, Default)]
pub struct Registry {
    ops: FxHashMap<&'static str, RegisteredOp>,
    /// Alias → registered name.
    aliases: FxHashMap<&'static str, &'static str>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Registry::default()
    }

    /// Everything submitted with `inventory` in the linked crates.
    pub fn from_inventory() -> Result<Self> {
        let mut r = Registry::new();
        for OpRegistration(def) in inventory::iter::<OpRegistration> {
            r.register(def)?;
        }
        for k in inventory::iter::<KernelRegistration> {
            r.register_kernel(*k)?;
        }
        Ok(r)
    }

    /// The process-wide registry, built from `inventory` on first use.
    ///
    /// Errors (every time) when two linked crates define the same op name.
    pub fn global() -> Result<&'static Registry> {
        static GLOBAL: OnceLock<Result<Registry>> = OnceLock::new();
        GLOBAL
            .get_or_init(Registry::from_inventory)
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Adds an op; errors naming both definitions when the name is taken,
    /// and naming the op when it is declared linear but cannot be
    /// ([`OpDef::check_linear`]).
    pub fn register(&mut self, def: &'static OpDef) -> Result<()> {
        def.check_linear()?;
        if let Some(prev) = self.ops.get(def.name) {
            if std::ptr::eq(prev.def, def) {
                return Ok(());
            }
            return Err(Error::DuplicateOp {
                op: def.name.into(),
                first: prev.def.location.into(),
                second: def.location.into(),
            });
        }
        for &alias in def.aliases {
            let taken = self.ops.get(alias).map(|o| o.def.location).or_else(|| {
                self.aliases
                    .get(alias)
                    .and_then(|n| self.ops.get(n))
                    .map(|o| o.def.location)
            });
            if let Some(first) = taken {
                return Err(Error::DuplicateOp {
                    op: alias.into(),
                    first: first.into(),
                    second: def.location.into(),
                });
            }
        }
        if let Some(prev) = self.aliases.get(def.name).and_then(|n| self.ops.get(n)) {
            return Err(Error::DuplicateOp {
                op: def.name.into(),
                first: prev.def.location.into(),
                second: def.location.into(),
            });
        }
        for &alias in def.aliases {
            self.aliases.insert(alias, def.name);
        }
        self.ops.insert(
            def.name,
            RegisteredOp {
                def,
                kernels: BTreeMap::new(),
            },
        );
        Ok(())
    }

    /// Adds kernels for a registered op on one device.
    pub fn register_kernel(&mut self, k: KernelRegistration) -> Result<()> {
        let name = self.aliases.get(k.op).copied().unwrap_or(k.op);
        // Suggestions only on the error path: scoring every name per
        // registered kernel made building the registry cost ~15M
        // instructions.
        let Some(entry) = self.ops.get_mut(name) else {
            return Err(Error::UnknownOp {
                name: k.op.into(),
                suggestions: self.suggest(k.op),
            });
        };
        if let Some(prev) = entry.kernels.get(&k.device) {
            return Err(Error::DuplicateOp {
                op: format!("{} ({} kernels)", k.op, k.device.name()),
                first: prev.location.into(),
                second: k.location.into(),
            });
        }
        if k.backward.is_none() && entry.def.gradient.is_some() {
            return Err(Error::invalid(
                k.op,
                "backward",
                "the op declares a gradient but its kernels have none",
            ));
        }
        entry.kernels.insert(k.device, k);
        Ok(())
    }

    /// Looks an op up; an unknown name errors with close names suggested.
    pub fn get(&self, name: &str) -> Result<&RegisteredOp> {
        let name = self.aliases.get(name).copied().unwrap_or(name);
        self.ops.get(name).ok_or_else(|| Error::UnknownOp {
            name: name.into(),
            suggestions: self.suggest(name),
        })
    }

    /// The op that runs `op` called with `env`: `op` itself, or the
    /// elementwise op its [`OpDef::simple_form`] names for these kwargs,
    /// checked to take the same kind of kwargs (or none: `Activation`
    /// with `act_type=relu` runs as `relu`), as many arguments and to give
    /// one output.
    pub fn simple_form(&self, op: &'static OpDef, env: &EnvArguments) -> Result<&'static OpDef> {
        let Some(name) = op.simple_form.and_then(|f| f(env)) else {
            return Ok(op);
        };
        let target = self.get(name)?.def;
        let fits = target.form == OpForm::Elementwise
            && target.is_simple()
            && matches!(target.params, ParamKind::Kwargs { .. } | ParamKind::None)
            && target.num_inputs() == op.num_arguments(env)
            && op.num_outputs(env) == 1
            && op.aux_states.is_empty();
        if !fits {
            return Err(Error::invalid(
                op.name,
                "simple_form",
                format!(
                    "`{name}` must be an elementwise op with kwargs or none, {} input(s) and one output",
                    op.num_arguments(env)
                ),
            ));
        }
        Ok(target)
    }

    /// Whether an op of that name exists.
    pub fn contains(&self, name: &str) -> bool {
        self.ops.contains_key(name) || self.aliases.contains_key(name)
    }

    /// All ops, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = &RegisteredOp> {
        let mut all: Vec<&RegisteredOp> = self.ops.values().collect();
        all.sort_unstable_by_key(|o| o.def.name);
        all.into_iter()
    }

    /// Number of ops.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Up to three registered names close to `name`.
    pub fn suggest(&self, name: &str) -> Vec<String> {
        let mut scored: Vec<(f64, &str)> = self
            .ops
            .keys()
            .chain(self.aliases.keys())
            .map(|k| (strsim::jaro_winkler(name, k), *k))
            .filter(|(s, _)| *s > 0.8)
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
        scored
            .into_iter()
            .take(3)
            .map(|(_, k)| k.to_string())
            .collect()
    }
}

/// Gives an op crate a `pub fn link()` that forces it into the final binary.
///
/// Rust links a dependency only when something references it, and ops that
/// are only called by name are never referenced. Put `simpleop::link_ops!();`
/// at the root of the op crate and call `your_crate::link()` once from the
/// binary.
#[macro_export]
macro_rules! link_ops {
    () => {
        /// Forces this crate, and with it every op it registers, to be linked.
        ///
        /// Call it once (for example first thing in `main`) when the crate's
        /// ops are only ever used by name.
        #[inline(never)]
        pub fn link() {
            ::std::hint::black_box(module_path!());
        }
    };
}
