//! The standard op library of simpleop, registered under MXNet 1.x names.
//! Every op is written with `#[simple_op]`, one family per module.
//!
//! Each op gets a typed eager function (`relu(&x)`), an `_into` variant with
//! an explicit output and [`simpleop::OpReqType`], and, when it has inputs,
//! an `_inplace` variant. All are also callable by name through
//! [`simpleop::eager::invoke`].
//!
//! If you only ever call these ops by name, call [`link`] once so the crate
//! is linked into your binary.

#![warn(missing_docs)]

pub mod activation;
pub mod arith;
pub mod clip;
pub mod loss;
pub mod random;
pub mod scalar;

pub use activation::*;
pub use arith::*;
pub use clip::*;
pub use loss::*;
pub use random::*;
pub use scalar::*;

simpleop::link_ops!();
