//! The op's registration: `inventory` entries for its definition and its
//! CPU kernels.

use proc_macro2::TokenStream;
use quote::quote;

use crate::model::OpModel;

/// What the op registers for its CPU kernels besides `__forward_cpu`.
pub(super) struct CpuKernels {
    /// `Some(__backward_cpu)` or `None`.
    pub backward: TokenStream,
    /// The tile functions, `Some(TileFns { .. })` or `None`.
    pub tile: TokenStream,
    /// The row reduction, `Some(__rows)` or `None`.
    pub rows: TokenStream,
    /// The forward on dual numbers, `Some(DerivativeFns { .. })` or `None`.
    pub derivative: TokenStream,
    /// The gradient on dual numbers, `Some(GradDerivativeFns { .. })` or
    /// `None`.
    pub grad_derivative: TokenStream,
}

pub(super) fn submit(m: &OpModel, k: &CpuKernels) -> TokenStream {
    let name = &m.name;
    let CpuKernels {
        backward,
        tile,
        rows,
        derivative,
        grad_derivative,
    } = k;
    quote! {
        ::simpleop::__private::inventory::submit! {
            ::simpleop::OpRegistration(&OP)
        }
        ::simpleop::__private::inventory::submit! {
            ::simpleop::KernelRegistration {
                op: #name,
                device: ::simpleop::Device::Cpu,
                forward: __forward_cpu,
                backward: #backward,
                tile: #tile,
                rows: #rows,
                derivative: #derivative,
                grad_derivative: #grad_derivative,
                location: concat!(file!(), ":", line!()),
            }
        }
    }
}
