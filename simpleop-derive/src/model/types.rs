//! The model types: the op, its kernels, and what each kernel parameter
//! means.

use syn::{Ident, Visibility};

use crate::options::{Count, InplaceName};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Form {
    Elementwise,
    Blob,
}

#[derive(Clone)]
pub enum Params {
    None,
    Scalar,
    Kwargs(syn::Path),
}

/// What one kernel parameter is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Role {
    /// Elementwise input `i`.
    Input(usize),
    /// Elementwise input `i`, updated in place by the forward (`&mut T`).
    State(usize),
    Scalar,
    Kwargs,
    Rng,
    Env,
    OutGrad,
    OutValue,
    /// Elementwise gradient reading input `i` (`In0`..`In2`).
    InputValue(usize),
    /// Blob: all input blobs.
    Inputs,
    /// Blob forward: the output blob.
    Out,
    Req,
    Grads,
    Reqs,
    Shapes,
    DTypes,
    /// Blob forward of an op with several outputs: the output blobs.
    Outs,
    /// Blob forward: the aux states (`AuxStates`).
    Aux,
    /// The run context (`&RunContext`: training mode, threads).
    Ctx,
    /// Blob gradient of an op with several outputs: every output's gradient.
    OutGrads,
    /// Blob gradient of an op with several outputs: every output.
    OutValues,
}

impl Role {
    /// What a parameter of this role is, for messages.
    pub(super) fn describe(self) -> String {
        match self {
            Role::Input(k) => format!("input {k}"),
            Role::State(k) => format!("the state input {k} (`&mut T`)"),
            Role::Scalar => "the scalar (`T`)".into(),
            Role::Kwargs => "the kwargs (`&Params`)".into(),
            Role::Rng => "the random stream (`&mut Rng`)".into(),
            Role::Env => "the environment (`&EnvArguments`)".into(),
            Role::OutGrad => "the output gradient (`OutGrad`)".into(),
            Role::OutValue => "the output value (`OutValue`)".into(),
            Role::InputValue(k) => format!("input {k}'s value (`In{k}`)"),
            Role::Inputs => "the input blobs".into(),
            Role::Out => "the output blob".into(),
            Role::Req => "the request (`OpReqType`)".into(),
            Role::Grads => "the gradient blobs".into(),
            Role::Reqs => "the gradient requests".into(),
            Role::Shapes => "the input shapes".into(),
            Role::DTypes => "the input dtypes".into(),
            Role::Outs => "the output blobs (`&mut [TBlobMut]`)".into(),
            Role::Aux => "the aux states (`AuxStates`)".into(),
            Role::Ctx => "the run context (`&RunContext`)".into(),
            Role::OutGrads => "the output gradients (`OutGrads`)".into(),
            Role::OutValues => "the output values (`OutValues`)".into(),
        }
    }
}

pub struct Kernel {
    pub roles: Vec<Role>,
}

impl Kernel {
    /// Whether the kernel updates some input in place (`&mut T`).
    pub fn has_state(&self) -> bool {
        self.roles.iter().any(|r| matches!(r, Role::State(_)))
    }
}

pub struct Backward {
    pub kernel: Kernel,
    pub needs_output: bool,
    pub needs_inputs: u32,
}

pub struct OpModel {
    pub ident: Ident,
    pub vis: Visibility,
    pub name: String,
    pub aliases: Vec<String>,
    pub doc: String,
    pub form: Form,
    pub input_names: Vec<Ident>,
    pub params: Params,
    pub rng: bool,
    pub temp: bool,
    pub pattern: String,
    pub fwd_inplace: Option<InplaceName>,
    pub grad_inplace: Option<InplaceName>,
    pub forward: Kernel,
    pub backward: Option<Backward>,
    pub shape: Option<Kernel>,
    pub dtype: Option<Kernel>,
    /// `fn rows`: the row reduction a reduction op computes, if any.
    pub rows: Option<Kernel>,
    /// Estimated work per element (see `estimate_cost` in `cost.rs`).
    pub cost: u32,
    /// The `VectorForm` the kernel names, if any.
    pub vector: Option<syn::Path>,
    /// The `LaneOp` the kernel declares for code generation, if any.
    pub lanes: Option<syn::Path>,
    /// The author declared that the kernel reads state besides its
    /// arguments or may panic on some inputs (`impure`).
    pub impure: bool,
    /// `linear`: linear in the arguments, the gradient the adjoint.
    pub linear: bool,
    /// `outputs = ...`: several outputs.
    pub outputs: Option<Count>,
    /// `visible_outputs = ...`.
    pub visible_outputs: Option<Count>,
    /// `output_names = [...]`.
    pub output_names: Option<Vec<String>>,
    /// `arguments = path`: argument names from the kwargs.
    pub arguments: Option<syn::Path>,
    /// `aux = [...]`: the aux-state names.
    pub aux: Vec<String>,
    /// `simple_form = path`: the elementwise op some calls run as.
    pub simple_form: Option<syn::Path>,
    /// `inference_form = path`: the ops the op runs as in inference.
    pub inference_form: Option<syn::Path>,
    /// `fn input_shapes`: backward shape inference.
    pub input_shapes: Option<Kernel>,
    /// Outputs of an elementwise forward (`-> (T, T)`: 2); 1 otherwise.
    pub elem_outputs: usize,
}

impl OpModel {
    /// Several outputs, aux states or kwargs-dependent arguments: the op
    /// is called through `invoke_outputs` or a slice of inputs.
    pub fn is_general(&self) -> bool {
        self.outputs.is_some() || !self.aux.is_empty()
    }
}

impl OpModel {
    pub fn arity(&self) -> usize {
        self.input_names.len()
    }

    /// An elementwise kernel whose result depends on its one input alone
    /// (not declared `impure`, and see [`not_unary`]): it can be tabulated
    /// over a 16-bit type.
    pub fn pure_unary(&self) -> bool {
        !self.impure
            && not_unary(
                self.form,
                self.arity(),
                &self.params,
                self.rng,
                &self.forward,
            )
            .is_none()
    }
}

/// Why a kernel's result does not depend on its one input alone (the blob
/// form, another arity, a scalar or kwargs, a random stream, or an input it
/// updates in place), or `None` when it does. Vector forms and half-type
/// tables both need that.
pub(super) fn not_unary(
    form: Form,
    arity: usize,
    params: &Params,
    rng: bool,
    forward: &Kernel,
) -> Option<String> {
    if form == Form::Blob {
        Some("the blob form".to_string())
    } else if arity != 1 {
        Some(format!("{arity} inputs"))
    } else if !matches!(params, Params::None) {
        Some("a scalar or kwargs".to_string())
    } else if rng {
        Some("a random stream".to_string())
    } else if forward.has_state() {
        Some("an input it updates in place".to_string())
    } else {
        None
    }
}

/// An op's kernels as read from its module, before the op-level checks.
pub(super) struct Kernels {
    pub forward: Kernel,
    /// Outputs of an elementwise forward returning a tuple (else 1).
    pub outputs: usize,
    pub input_names: Vec<Ident>,
    pub backward: Option<Backward>,
}
