//! The validated model of one op: what each kernel parameter means, and
//! every rule that can be checked at compile time.
//!
//! `types` holds the model; `build` reads the options and the module into
//! it, the kernels by form (`elementwise`, `blob`) and the shape, dtype
//! and rows functions by `infer`, on the signature readers in `syntax`
//! and `roles`; `checks` holds the op-level rules. `autodiff` writes a
//! derived `backward` into the module first, when the op asks for one.

mod autodiff;
mod blob;
mod build;
mod checks;
mod cost;
mod elementwise;
mod infer;
mod names;
mod roles;
mod syntax;
mod types;

pub use autodiff::with_derived_backward;
pub use build::build;
pub use types::{Backward, Form, Kernel, OpModel, Params, Role};
