//! Family macros: one entry per op for families whose ops differ only in a
//! name, an operator or a kernel selector (as candle's `unary_op!` or
//! MXNet's `MXNET_OPERATOR_REGISTER_UNARY`). Each expands to the same
//! `#[simple_op]` module that was written out by hand before; the op's doc
//! comment and attribute options pass through unchanged.

/// Comparisons against a scalar and their NumPy-broadcasting twins: 1 where
/// `x op s` holds, else 0; zero gradients. One entry per relation:
/// `scalar_mod [scalar options] op broadcast_mod [broadcast options];`,
/// each module preceded by its doc comment.
macro_rules! comparisons {
    ($(
        $(#[$sdoc:meta])* $scalar:ident [$($sopt:tt)*] $op:tt
        $(#[$bdoc:meta])* $broadcast:ident [$($bopt:tt)*];
    )*) => {$(
        $(#[$sdoc])*
        #[simple_op(scalar, inplace = "InOut, OutIn", $($sopt)*)]
        pub mod $scalar {
            use simpleop::prelude::*;
            #[doc = concat!("`x ", stringify!($op), " s ? 1 : 0`.")]
            pub fn forward<T: Float>(x: T, s: T) -> T {
                if x $op s { T::one() } else { T::zero() }
            }
            /// 0.
            pub fn backward<T: Float>(_dy: OutGrad<T>) -> T {
                T::zero()
            }
        }

        $(#[$bdoc])*
        #[simple_op(broadcast, inplace = "LhsOut, OutLhs", $($bopt)*)]
        pub mod $broadcast {
            use simpleop::prelude::*;
            #[doc = concat!("`a ", stringify!($op), " b ? 1 : 0`.")]
            pub fn forward<T: Float>(a: T, b: T) -> T {
                super::$scalar::forward(a, b)
            }
            /// `(0, 0)`.
            pub fn backward<T: Float>(_dy: OutGrad<T>) -> (T, T) {
                (T::zero(), T::zero())
            }
        }
    )*};
}

/// Broadcasting twins of same-shape binary ops: the same kernels, run with
/// NumPy broadcasting. One entry per op:
/// `broadcast_mod = same_shape_mod [options] (gradient arguments);`, where
/// the gradient arguments (`y: OutValue`, `a: In0`, `b: In1`, each taken
/// as `Wrapper<T>`) are the ones the same-shape backward reads, after `dy`.
macro_rules! broadcast_twins {
    ($(
        $(#[$doc:meta])* $broadcast:ident = $same:ident [$($opt:tt)*]
        ($($arg:ident: $wrapper:ident),*) forward $fdoc:literal backward $bdoc:literal;
    )*) => {$(
        $(#[$doc])*
        #[simple_op(broadcast, $($opt)*)]
        pub mod $broadcast {
            use simpleop::prelude::*;
            #[doc = $fdoc]
            pub fn forward<T: Float>(a: T, b: T) -> T {
                super::$same::forward(a, b)
            }
            #[doc = $bdoc]
            pub fn backward<T: Float>(dy: OutGrad<T>, $($arg: $wrapper<T>),*) -> (T, T) {
                super::$same::backward(dy, $($arg),*)
            }
        }
    )*};
}

/// Reductions over axes: shape, forward and gradient all go through the
/// shared plan in `reduce.rs`, selected by a `Reducer`. One entry per op:
/// `name [options]: Params, Reducer::X, rows "what", forward "formula",
/// backward(sources) "gradient doc";`. `rows "sum"` gives the op a row
/// reduction for fusion; the gradient sources are `dy`, `dy, x` or
/// `dy, y, x` (what the gradient reads, so they set its kind).
macro_rules! reductions {
    ($(
        $(#[$doc:meta])* $name:ident [$($opt:tt)*]: $params:ident, $reducer:expr,
        $(rows $rows:literal,)? forward $fdoc:literal,
        backward($($src:ident),*) $bdoc:literal;
    )*) => {$(
        reductions!(@sources ($($src),*)
            [$(#[$doc])* $name [$($opt)*]: $params, $reducer, $(rows $rows,)? forward $fdoc,]
            $bdoc);
    )*};
    // What the gradient reads decides its parameters, which
    // `#[simple_op]` reads to learn what to keep for backward, so they
    // are spelled out here, before the module exists (an attribute sees
    // a macro call in the module, not what the call would expand to).
    (@sources (dy) [$($op:tt)*] $bdoc:literal) => {
        reductions!(@module $($op)* backward [] None, None, $bdoc);
    };
    (@sources (dy, x) [$($op:tt)*] $bdoc:literal) => {
        reductions!(@module $($op)*
            backward [x: Inputs<&[TBlob<'_>]>,] None, x.first(), $bdoc);
    };
    (@sources (dy, y, x) [$($op:tt)*] $bdoc:literal) => {
        reductions!(@module $($op)*
            backward [y: OutValue<&TBlob<'_>>, x: Inputs<&[TBlob<'_>]>,] Some(y.0), x.first(), $bdoc);
    };
    (@module
        $(#[$doc:meta])* $name:ident [$($opt:tt)*]: $params:ident, $reducer:expr,
        $(rows $rows:literal,)? forward $fdoc:literal,
        backward [$($grad_params:tt)*] $y:expr, $x:expr, $bdoc:literal
    ) => {
        $(#[$doc])*
        #[simple_op(blob, kwargs = $params, pattern = "reduction", $($opt)*)]
        pub mod $name {
            use super::{$params, Reducer};
            use simpleop::prelude::*;

            #[doc = concat!("The reduced shape (MXNet rules, see [`", stringify!($params), "`]).")]
            pub fn shape(inputs: &[Shape], p: &$params) -> Result<Shape> {
                super::reduce_shape(stringify!($name), inputs, p)
            }
            $(
                #[doc = concat!("A row ", $rows, " when the trailing axes are reduced.")]
                pub fn rows(
                    inputs: &[Shape],
                    p: &$params,
                ) -> Result<Option<simpleop::kernel::RowReduction>> {
                    super::row_reduction(stringify!($name), $reducer, inputs, p)
                }
            )?

            #[doc = concat!("`out = ", $fdoc, "` over the reduced axes, honouring `req`.")]
            pub fn forward(
                inputs: &[TBlob<'_>],
                out: &mut TBlobMut<'_>,
                req: OpReqType,
                p: &$params,
            ) -> Result<()> {
                super::reduce_forward(stringify!($name), $reducer, inputs, out, req, p)
            }

            #[doc = $bdoc]
            pub fn backward(
                dy: OutGrad<&TBlob<'_>>,
                $($grad_params)*
                grads: &mut [TBlobMut<'_>],
                req: &[OpReqType],
                p: &$params,
            ) -> Result<()> {
                let src = super::GradSources { dy: dy.0, y: $y, x: $x };
                super::reduce_backward(stringify!($name), $reducer, src, grads, req, p)
            }
        }
    };
}

/// Index searches along one axis (`argmax`, `argmin`): the index as a float,
/// a zero gradient. One entry per op: `name: Reducer::X;`.
macro_rules! arg_searches {
    ($($(#[$doc:meta])* $name:ident: $reducer:expr;)*) => {$(
        $(#[$doc])*
        #[simple_op(blob, kwargs = ArgReduceParams, pattern = "reduction")]
        pub mod $name {
            use super::{ArgReduceParams, Reducer};
            use simpleop::prelude::*;

            /// The input shape without `axis` (`(1,)` when flattened), or with it
            /// as 1 under `keepdims`.
            pub fn shape(inputs: &[Shape], p: &ArgReduceParams) -> Result<Shape> {
                super::arg_shape(stringify!($name), &inputs[0], p)
            }

            #[doc = concat!("`out = ", stringify!($name), " data` along the axis, honouring `req`.")]
            pub fn forward(
                inputs: &[TBlob<'_>],
                out: &mut TBlobMut<'_>,
                req: OpReqType,
                p: &ArgReduceParams,
            ) -> Result<()> {
                super::arg_forward(stringify!($name), $reducer, inputs, out, req, p)
            }

            /// Zero: the index does not change under small perturbations.
            pub fn backward(
                dy: OutGrad<&TBlob<'_>>,
                grads: &mut [TBlobMut<'_>],
                req: &[OpReqType],
                p: &ArgReduceParams,
            ) -> Result<()> {
                super::arg_backward(stringify!($name), $reducer, dy.0, grads, req, p)
            }
        }
    )*};
}

/// Softmax and log-softmax along an axis: one kernel, `log` selects the
/// form; the gradient reads the output only. One entry per op:
/// `name(log) backward "gradient doc";`.
macro_rules! softmaxes {
    ($($(#[$doc:meta])* $name:ident($log:tt) backward $bdoc:literal;)*) => {$(
        $(#[$doc])*
        #[simple_op(blob, inputs = 1, kwargs = SoftmaxParams, resources(temp))]
        pub mod $name {
            use super::SoftmaxParams;
            use simpleop::prelude::*;

            /// The input's shape; checks `axis` and `temperature`.
            pub fn shape(inputs: &[Shape], p: &SoftmaxParams) -> Result<Shape> {
                super::softmax_geometry(stringify!($name), &inputs[0], p)?;
                Ok(inputs[0].clone())
            }

            #[doc = concat!("`out (=|+=) ", stringify!($name), "(data / t)` along `axis`.")]
            pub fn forward(
                inputs: &[TBlob<'_>],
                out: &mut TBlobMut<'_>,
                req: OpReqType,
                p: &SoftmaxParams,
                env: &EnvArguments,
            ) -> Result<()> {
                super::softmax_forward(stringify!($name), $log, inputs, out, req, p, env)
            }

            #[doc = $bdoc]
            pub fn backward(
                dy: OutGrad<&TBlob<'_>>,
                y: OutValue<&TBlob<'_>>,
                grads: &mut [TBlobMut<'_>],
                req: &[OpReqType],
                p: &SoftmaxParams,
            ) -> Result<()> {
                super::softmax_backward(stringify!($name), $log, &dy, &y, grads, req, p)
            }
        }
    )*};
}

/// Matrix products (`dot`, `batch_dot`): a planning function gives the
/// product's layout and shape, one GEMM driver runs it. One entry per op:
/// `name = planner, shape "doc", forward "doc", backward "doc";`.
macro_rules! matrix_products {
    ($(
        $(#[$doc:meta])* $name:ident = $plan:ident,
        shape $sdoc:literal, forward $fdoc:literal, backward $bdoc:literal;
    )*) => {$(
        $(#[$doc])*
        #[simple_op(blob, inputs = 2, kwargs = DotParams, pattern = "out_elemwise_fusable", resources(temp))]
        pub mod $name {
            use super::DotParams;
            use simpleop::prelude::*;

            #[doc = $sdoc]
            pub fn shape(inputs: &[Shape], p: &DotParams) -> Result<Shape> {
                super::dense_only(stringify!($name), p)?;
                Ok(super::$plan(&inputs[0], &inputs[1], p)?.1)
            }

            #[doc = $fdoc]
            pub fn forward(
                inputs: &[TBlob<'_>],
                out: &mut TBlobMut<'_>,
                req: OpReqType,
                p: &DotParams,
                env: &EnvArguments,
            ) -> Result<()> {
                let inputs = super::two_inputs(stringify!($name), inputs)?;
                let (product, _) = super::$plan(inputs[0].shape(), inputs[1].shape(), p)?;
                super::product_forward(stringify!($name), &product, inputs, out, req, env)
            }

            #[doc = $bdoc]
            pub fn backward(
                dy: OutGrad<&TBlob<'_>>,
                x: Inputs<&[TBlob<'_>]>,
                grads: &mut [TBlobMut<'_>],
                req: &[OpReqType],
                p: &DotParams,
                env: &EnvArguments,
            ) -> Result<()> {
                let inputs = super::two_inputs(stringify!($name), &x)?;
                let (product, _) = super::$plan(inputs[0].shape(), inputs[1].shape(), p)?;
                super::product_backward(stringify!($name), &product, &dy, inputs, grads, req, env)
            }
        }
    )*};
}

/// Blob ops of one input and kwargs whose gradient reads `dy` only, in
/// families where three helpers do the work given each op's own rule:
/// strided views (the rule is the view; gather, scatter back) and
/// broadcasts along kwargs (the rule is the output shape; repeat, sum back).
/// One `via (shape_helper, forward_helper, backward_helper);` per family,
/// then one entry per op:
/// `name [options]: Params = rule, shape "doc", forward "doc", backward "doc";`.
macro_rules! unary_kwarg_ops {
    (
        via ($shape:ident, $forward:ident, $backward:ident);
        $(
            $(#[$doc:meta])* $name:ident [$($opt:tt)*]: $params:ident = $rule:ident,
            shape $sdoc:literal, forward $fdoc:literal, backward $bdoc:literal;
        )*
    ) => {$(
        $(#[$doc])*
        #[simple_op(blob, kwargs = $params, $($opt)*)]
        pub mod $name {
            use super::$params;
            use simpleop::prelude::*;

            #[doc = $sdoc]
            pub fn shape(inputs: &[Shape], p: &$params) -> Result<Shape> {
                super::$shape(super::$rule, &inputs[0], p)
            }

            #[doc = $fdoc]
            pub fn forward(
                inputs: &[TBlob<'_>],
                out: &mut TBlobMut<'_>,
                req: OpReqType,
                p: &$params,
            ) -> Result<()> {
                super::$forward(stringify!($name), super::$rule, &inputs[0], out, req, p)
            }

            #[doc = $bdoc]
            pub fn backward(
                dy: OutGrad<&TBlob<'_>>,
                grads: &mut [TBlobMut<'_>],
                req: &[OpReqType],
                p: &$params,
            ) -> Result<()> {
                super::$backward(stringify!($name), super::$rule, dy.0, grads, req, p)
            }
        }
    )*};
}
