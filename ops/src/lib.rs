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

// First: the family macros must be defined before the modules that use them.
#[macro_use]
mod families;
mod common;

pub mod activation;
pub mod arith;
pub mod batch_norm;
pub mod binary;
pub mod broadcast;
pub mod clip;
pub mod compare;
pub mod conv;
pub mod dropout;
pub mod gradient;
pub mod indexing;
pub mod init;
pub mod join;
pub mod layers;
pub mod leaky_relu;
pub mod linalg;
pub mod loss;
pub mod math;
pub mod nn;
pub mod norm;
pub mod optim;
pub mod ordering;
pub mod output;
pub mod pad;
pub mod pooling;
pub mod random;
pub mod reduce;
pub mod rnn;
pub mod scalar;
pub mod select;
pub mod shape;
pub mod upsampling;

pub use activation::*;
pub use arith::*;
pub use batch_norm::*;
pub use binary::*;
pub use broadcast::*;
pub use clip::*;
pub use compare::*;
pub use conv::*;
pub use dropout::*;
pub use gradient::*;
pub use indexing::*;
pub use init::*;
pub use join::*;
pub use layers::*;
pub use leaky_relu::*;
pub use linalg::*;
pub use loss::*;
pub use math::*;
pub use nn::*;
pub use norm::*;
pub use optim::*;
pub use ordering::*;
pub use output::*;
pub use pad::*;
pub use pooling::*;
pub use random::*;
pub use reduce::*;
pub use rnn::*;
pub use scalar::*;
pub use select::*;
pub use shape::*;
pub use upsampling::*;

simpleop::link_ops!();
