//! Reading the functions beside the kernels: `shape`, `dtype` and `rows`.

use syn::ItemFn;

use super::blob::blob_roles;
use super::roles::kernel;
use super::syntax::slice_ref_of;
use super::types::{Kernel, Params, Role};

/// A function over the inputs' shapes or dtypes (`&[elem]`, read as
/// `main`), which may also take the scalar, the kwargs or the environment.
pub(super) fn infer_fn(
    f: &ItemFn,
    params: &Params,
    main: Role,
    elem: &str,
    errors: &mut Vec<syn::Error>,
) -> Kernel {
    let roles = blob_roles(
        f,
        params,
        errors,
        |ty| slice_ref_of(ty, false, elem).then_some(main),
        &format!(
            "unexpected parameter in `{}`; expected `&[{elem}]`, `f64` (scalar) or `&Params`",
            f.sig.ident
        ),
    );
    kernel(roles)
}
