//! What an op is, as data: [`OpDef`] holds everything the executors need to
//! know about an op except its kernels, which are registered per device
//! (see [`crate::registry`]).

use std::fmt;

use smallvec::SmallVec;

use crate::{
    Attrs, DType, EnvArguments, Error, OpReqType, Result, RunContext, Shape, TBlob, TBlobMut,
};

/// How an op's output relates to its inputs, for fusion (TVM's op patterns).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Pattern {
    /// Output element i depends on input element i only.
    Elementwise,
    /// Elementwise after NumPy broadcasting of the inputs.
    Broadcast,
    /// Each output element reads one input element (reshape, transpose, slice).
    Injective,
    /// Reduces along axes (sum, max): each output element reads only the
    /// input elements that share its indices on the axes it keeps. Fusion
    /// relies on this to run a reduction that keeps axis 0 over slabs of
    /// rows; an op that mixes rows is [`Pattern::Opaque`].
    Reduction,
    /// Complex, but an elementwise op can be fused onto its output (dot).
    /// When the shape function, given some rows (axis 0) of the first
    /// input and the other inputs whole, answers with those rows of the
    /// output, each output row must depend only on the same row of the
    /// first input and on the other inputs: fusion then runs the op slab
    /// by slab of rows ahead of its elementwise consumers. An op that
    /// mixes rows is [`Pattern::Opaque`].
    OutElemwiseFusable,
    /// Cannot be fused.
    Opaque,
}

impl Pattern {
    /// The lowercase name used in attributes and listings.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Elementwise => "elementwise",
            Pattern::Broadcast => "broadcast",
            Pattern::Injective => "injective",
            Pattern::Reduction => "reduction",
            Pattern::OutElemwiseFusable => "out_elemwise_fusable",
            Pattern::Opaque => "opaque",
        }
    }
}

/// Which input a forward pass may overwrite with its output (seed names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ForwardInplace {
    /// Unary: the output may be written over the input.
    InOut,
    /// Binary or ternary: the output may be written over the first input.
    LhsOut,
}

/// Which input gradient may be written over the output gradient (seed names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GradInplace {
    /// Unary: the input gradient may be written over the output gradient.
    OutIn,
    /// Binary or ternary: the first input's gradient may be written over it.
    OutLhs,
}

/// The in-place options an op declares.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct InplaceOptions {
    /// Forward in place over input 0.
    pub forward: Option<ForwardInplace>,
    /// Gradient of input 0 in place over the output gradient.
    pub gradient: Option<GradInplace>,
}

/// The seed's gradient kinds: what backward reads besides the output gradient.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GradKind {
    /// The output gradient only.
    T0,
    /// The output gradient and the output value.
    T1,
    /// The output gradient and (some of) the inputs, maybe also the output.
    T2,
}

/// What an op's gradient needs kept alive from the forward pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GradSpec {
    /// Backward reads the forward output.
    pub needs_output: bool,
    /// Bit `i` set: backward reads input `i`.
    pub needs_inputs: u32,
}

impl GradSpec {
    /// The seed's kind.
    pub fn kind(&self) -> GradKind {
        if self.needs_inputs != 0 {
            GradKind::T2
        } else if self.needs_output {
            GradKind::T1
        } else {
            GradKind::T0
        }
    }
    /// Whether backward reads input `i`.
    pub fn needs_input(&self, i: usize) -> bool {
        i < 32 && self.needs_inputs & (1 << i) != 0
    }
}

/// How an op takes non-array arguments.
#[derive(Clone, Copy, Debug)]
pub enum ParamKind {
    /// None.
    None,
    /// One scalar, attribute `scalar`.
    Scalar,
    /// A serde struct.
    Kwargs {
        /// The struct's Rust type name.
        type_name: &'static str,
        /// Its field names (the accepted keys).
        fields: fn() -> &'static [&'static str],
    },
}

/// Which form the op was written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpForm {
    /// Scalar kernels, run over arrays by the framework.
    Elementwise,
    /// Whole-blob kernels with a shape function.
    Blob,
}

/// The resources an op requested.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    /// A seeded random generator.
    pub rng: bool,
    /// Temporary space.
    pub temp: bool,
}

/// Parses string attributes into [`EnvArguments`].
pub type ParseFn = fn(&OpDef, &Attrs) -> Result<EnvArguments>;
/// Writes [`EnvArguments`] back as string attributes.
pub type AttrsFn = fn(&OpDef, &EnvArguments) -> Result<Attrs>;
/// Infers the output shape from the input shapes.
pub type ShapeFn = fn(&OpDef, &[Shape], &EnvArguments) -> Result<Shape>;
/// Infers the output dtype from the input dtypes.
pub type DTypeFn = fn(&OpDef, &[DType], &EnvArguments) -> Result<DType>;
/// Infers every output's shape from the input shapes.
pub type ShapesFn = fn(&OpDef, &[Shape], &EnvArguments) -> Result<Vec<Shape>>;
/// Infers every output's dtype from the input dtypes.
pub type DTypesFn = fn(&OpDef, &[DType], &EnvArguments) -> Result<Vec<DType>>;
/// Fills in unknown input shapes (`None`) from the known ones and the
/// kwargs, as MXNet's layer ops infer their weight shapes from the data
/// (`FInferShape` run backwards). Inputs are arguments then aux states.
pub type CompleteFn = fn(&OpDef, &mut [Option<Shape>], &EnvArguments) -> Result<()>;
/// A count or list that depends on the op's kwargs.
pub type EnvFn<T> = fn(&EnvArguments) -> T;
/// What an op computes in inference for these kwargs, input shapes
/// (arguments then aux states) and output dtype ([`OpDef::inference_form`]).
pub type InferenceFormFn = fn(&EnvArguments, &[Shape], DType) -> Option<InferenceForm>;

/// An op's inference (`forward(false)`) computation as a small graph of
/// registered ops, which the executor binds in its place so that fusion
/// sees through it: BatchNorm becomes a per-channel subtract, multiply and
/// add that fuse onto the convolution before it. The last node's output is the op's
/// output 0; the op's other outputs must be unread.
#[derive(Clone, Debug, PartialEq)]
pub struct InferenceForm {
    /// In topological order.
    pub nodes: Vec<FormNode>,
}

/// One node of an [`InferenceForm`].
#[derive(Clone, Debug, PartialEq)]
pub struct FormNode {
    /// A registered op's name.
    pub op: &'static str,
    /// Its string attributes, as a graph file writes them.
    pub attrs: Attrs,
    /// Its inputs, in order.
    pub inputs: Vec<FormInput>,
}

/// Where a [`FormNode`]'s input comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FormInput {
    /// The replaced op's input `k` (arguments, then aux states).
    Input(usize),
    /// Output 0 of an earlier node of the form.
    Node(usize),
}

impl FormNode {
    /// Op `op` on `inputs` with attributes `attrs`.
    pub fn new(op: &'static str, inputs: &[FormInput], attrs: Attrs) -> FormNode {
        FormNode {
            op,
            attrs,
            inputs: inputs.to_vec(),
        }
    }
}

/// The outputs of an op with several (MXNet's `FNumOutputs`,
/// `FNumVisibleOutputs`, `FListOutputNames`).
pub struct MultiOutput {
    /// How many outputs a call has.
    pub count: EnvFn<usize>,
    /// How many of them a symbol shows (the first ones); the rest are
    /// kept for backward only (BatchNorm's mean and variance).
    pub visible: EnvFn<usize>,
    /// Their names (`output`, `mean`, `var`; `output0`, `output1`, ...).
    pub names: EnvFn<Vec<String>>,
    /// Every output's shape.
    pub infer_shapes: ShapesFn,
    /// Every output's dtype.
    pub infer_dtypes: DTypesFn,
}

impl fmt::Debug for MultiOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MultiOutput")
    }
}

/// One op call as a kernel sees it.
#[derive(Clone, Copy)]
pub struct OpCall<'a> {
    /// The op.
    pub op: &'static OpDef,
    /// Its scalar, kwargs and resources.
    pub env: &'a EnvArguments,
    /// Where it runs.
    pub ctx: &'a RunContext,
}

/// What a backward kernel reads. Only what [`GradSpec`] asked for is present.
pub struct GradArgs<'a> {
    /// The gradient of the output (of output 0 for an op with several;
    /// empty when no one reads that output).
    pub out_grad: TBlob<'a>,
    /// The forward output (output 0), when the gradient needs it.
    pub output: Option<TBlob<'a>>,
    /// The forward inputs (arguments, never aux states), each present when
    /// the gradient needs it.
    pub inputs: GradBlobs<'a>,
    /// Per output, its gradient; `None` for an output no one reads, whose
    /// gradient is zero (not allocated). One entry for a one-output op.
    pub out_grads: GradBlobs<'a>,
    /// For an op with several outputs, every forward output when the
    /// gradient reads them; otherwise empty (a one-output op reads
    /// `output`).
    pub outputs: OutputBlobs<'a>,
}

/// [`GradArgs`]' per-argument and per-output lists: inline for the usual
/// few, so that building the arguments of a backward call allocates
/// nothing (build one with `collect()`, or `.into()` from a `Vec`).
pub type GradBlobs<'a> = SmallVec<[Option<TBlob<'a>>; 3]>;

/// [`GradArgs::outputs`]: inline for the usual few.
pub type OutputBlobs<'a> = SmallVec<[TBlob<'a>; 2]>;

/// A forward kernel: computes the op's outputs from the inputs, each per
/// its request. `outputs` holds the op's outputs (one, or
/// [`MultiOutput::count`]), then its aux states
/// ([`OpDef::aux_states`]; `inputs` holds the arguments only), which the
/// kernel reads and may update when their request is not `Null` (training
/// mode). For an op with [`OpDef::mutate_inputs`], `outputs[1..]` are those
/// inputs' own buffers, which receive their updated values.
pub type ForwardFn = fn(&OpCall<'_>, &[TBlob<'_>], &mut [TBlobMut<'_>], &[OpReqType]) -> Result<()>;
/// A backward kernel: computes one gradient per input, honouring each `req`.
pub type BackwardFn =
    fn(&OpCall<'_>, &GradArgs<'_>, &mut [TBlobMut<'_>], &[OpReqType]) -> Result<()>;

/// Everything known about an op except its kernels.
///
/// The `#[simple_op]` attribute builds one of these per op as a `static OP`
/// inside the op's module.
pub struct OpDef {
    /// The registered name (MXNet's name for standard ops).
    pub name: &'static str,
    /// Other names the op answers to (MXNet's `add_alias`).
    pub aliases: &'static [&'static str],
    /// The doc comment.
    pub description: &'static str,
    /// Where the op is defined (`file:line`), for duplicate-name errors.
    pub location: &'static str,
    /// The names of the inputs, in order.
    pub inputs: &'static [&'static str],
    /// Scalar, kwargs or nothing.
    pub params: ParamKind,
    /// Elementwise or blob form.
    pub form: OpForm,
    /// The fusion pattern.
    pub pattern: Pattern,
    /// Estimated work per element in units of one cheap elementwise op
    /// (the attribute counts the transcendental calls in the kernel); the
    /// drivers split work across threads only when `elements × cost` pays.
    pub cost: u32,
    /// Declared in-place options.
    pub inplace: InplaceOptions,
    /// Inputs the forward pass updates in place (optimizer state, as
    /// MXNet's `FMutateInputs`), by index.
    pub mutate_inputs: &'static [usize],
    /// The gradient's needs; `None` when the op has no gradient.
    pub gradient: Option<GradSpec>,
    /// The op is linear jointly in all its arguments (`transpose`,
    /// `Concat`, `sum`) and its gradient is the adjoint map, reading
    /// nothing but the output gradients. Its gradient's gradient is then
    /// the op itself: `_backward`'s second derivative runs the forward on
    /// the gradients reaching it (see [`crate::backward_op`]). Checked
    /// by [`OpDef::check_linear`] when the op is registered.
    pub linear: bool,
    /// Requested resources.
    pub resources: Resources,
    /// String attributes to [`EnvArguments`].
    pub parse: ParseFn,
    /// [`EnvArguments`] back to string attributes.
    pub to_attrs: AttrsFn,
    /// Shape inference.
    pub infer_shape: ShapeFn,
    /// Dtype inference.
    pub infer_dtype: DTypeFn,
    /// The argument names when they depend on the kwargs (`num_args`
    /// inputs `arg0`, `arg1`, ...; `no_bias` dropping `bias`); `None` when
    /// they are [`OpDef::inputs`].
    pub arguments: Option<EnvFn<Vec<String>>>,
    /// Auxiliary states (MXNet's `FListAuxiliaryStates`): inputs after the
    /// arguments that the op reads and updates in training, such as
    /// BatchNorm's moving statistics. Never differentiated.
    pub aux_states: &'static [&'static str],
    /// The outputs of an op with several; `None` for one output.
    pub outputs: Option<&'static MultiOutput>,
    /// Backward shape inference, when the op has it.
    pub complete_shapes: Option<CompleteFn>,
    /// For a general op that is elementwise for some kwargs: the name of
    /// the registered elementwise op (same kwargs, arguments and one
    /// output) that runs such calls, so that executors fuse them. `None`
    /// from the function, or no function, runs the op itself.
    pub simple_form: Option<EnvFn<Option<&'static str>>>,
    /// For an op that is cheaper to run as other ops in inference: that
    /// graph ([`InferenceForm`]), which executors bind for
    /// `forward(false)` when fusion is on. `None` from the function keeps
    /// the op.
    pub inference_form: Option<InferenceFormFn>,
}

impl fmt::Debug for OpDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpDef")
            .field("name", &self.name)
            .field("inputs", &self.inputs)
            .field("params", &self.params)
            .field("form", &self.form)
            .field("pattern", &self.pattern)
            .field("inplace", &self.inplace)
            .field("gradient", &self.gradient)
            .field("resources", &self.resources)
            .finish()
    }
}

impl OpDef {
    /// Number of array inputs of a fixed-arity op (see [`OpDef::arity`]).
    pub fn num_inputs(&self) -> usize {
        self.inputs.len()
    }

    /// The argument names of a call with `env` (MXNet's `ListArguments`).
    pub fn argument_names(&self, env: &EnvArguments) -> Vec<String> {
        match self.arguments {
            Some(f) => f(env),
            None => self.inputs.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    /// Number of arguments of a call with `env` (aux states excluded).
    pub fn num_arguments(&self, env: &EnvArguments) -> usize {
        match self.arguments {
            Some(f) => f(env).len(),
            None => self.inputs.len(),
        }
    }

    /// Number of array inputs of a call with `env`: arguments, then aux states.
    pub fn arity(&self, env: &EnvArguments) -> usize {
        self.num_arguments(env) + self.aux_states.len()
    }

    /// Checks the number of inputs (arguments and aux states) of a call.
    pub fn check_inputs(&self, env: &EnvArguments, got: usize) -> Result<()> {
        let expected = self.arity(env);
        if got != expected && self.arguments.is_some() {
            // Name them: which inputs a call takes depends on its kwargs.
            let mut names = self.argument_names(env);
            names.extend(self.aux_states.iter().map(|s| (*s).to_owned()));
            return Err(Error::invalid(
                self.name,
                "inputs",
                format!(
                    "expected {expected} input(s) for these kwargs ({}), got {got}",
                    names.join(", ")
                ),
            ));
        }
        if got != expected {
            return Err(Error::Arity {
                op: self.name.into(),
                expected,
                got,
            });
        }
        Ok(())
    }

    /// Number of outputs of a call with `env`.
    pub fn num_outputs(&self, env: &EnvArguments) -> usize {
        self.outputs.map_or(1, |m| (m.count)(env))
    }

    /// Number of outputs a symbol shows.
    pub fn num_visible_outputs(&self, env: &EnvArguments) -> usize {
        self.outputs.map_or(1, |m| (m.visible)(env))
    }

    /// The output names (MXNet's `FListOutputNames`).
    pub fn output_names(&self, env: &EnvArguments) -> Vec<String> {
        match self.outputs {
            Some(m) => (m.names)(env),
            None => vec!["output".to_owned()],
        }
    }

    /// Every output's shape, from the arguments' shapes.
    pub fn output_shapes(&self, inputs: &[Shape], env: &EnvArguments) -> Result<Vec<Shape>> {
        match self.outputs {
            Some(m) => (m.infer_shapes)(self, inputs, env),
            None => Ok(vec![(self.infer_shape)(self, inputs, env)?]),
        }
    }

    /// Every output's dtype, from the arguments' dtypes.
    pub fn output_dtypes(&self, inputs: &[DType], env: &EnvArguments) -> Result<Vec<DType>> {
        match self.outputs {
            Some(m) => (m.infer_dtypes)(self, inputs, env),
            None => Ok(vec![(self.infer_dtype)(self, inputs, env)?]),
        }
    }

    /// Checks the known input shapes (arguments, then aux states) against
    /// what [`OpDef::complete_shapes`] infers from the data (input 0)
    /// alone: a weight or aux state of the wrong shape is an error naming
    /// it before any kernel runs. Nothing to check without that function
    /// or the data's shape.
    pub fn check_against_data(&self, inputs: &[Option<Shape>], env: &EnvArguments) -> Result<()> {
        let (Some(f), Some(Some(data))) = (self.complete_shapes, inputs.first()) else {
            return Ok(());
        };
        // As many slots as the call takes, whatever was passed: the
        // completion indexes them.
        let mut probe: Vec<Option<Shape>> = vec![None; inputs.len().max(self.arity(env))];
        probe[0] = Some(data.clone());
        f(self, &mut probe, env)?;
        for (i, (have, want)) in inputs.iter().zip(probe).enumerate().skip(1) {
            if let (Some(have), Some(want)) = (have, want)
                && *have != want
                && !self.accepts_arguments(inputs, env)
            {
                return Err(Error::ShapeMismatch {
                    op: self.name.into(),
                    arg: self.argument_name(i, env),
                    expected: format!(
                        "{want} (from the shape of `{}`)",
                        self.argument_name(0, env)
                    ),
                    got: have.clone(),
                });
            }
        }
        Ok(())
    }

    /// Whether the shape function takes these arguments as they are: the
    /// completed shape is a default, and some ops take others too
    /// (prelu's one `gamma` for every channel). Aux states are always
    /// checked against their completion.
    fn accepts_arguments(&self, inputs: &[Option<Shape>], env: &EnvArguments) -> bool {
        let n = self.num_arguments(env);
        let args: Option<Vec<Shape>> = inputs.iter().take(n).cloned().collect();
        let aux_match = inputs.len() == n; // any aux state differs: refuse
        aux_match && args.is_some_and(|a| a.len() == n && self.output_shapes(&a, env).is_ok())
    }

    /// Checks that an op declared [`OpDef::linear`] can be: it has a
    /// gradient that reads neither its outputs nor its inputs (a gradient
    /// reading them would not be linear in the output gradients and the
    /// arguments together), no aux states or updated inputs, and no
    /// random stream (a second call would draw other numbers).
    pub fn check_linear(&self) -> Result<()> {
        if !self.linear {
            return Ok(());
        }
        let why = match self.gradient {
            None => Some("it has no gradient"),
            Some(g) if g.needs_output => Some("its gradient reads the op's output"),
            Some(g) if g.needs_inputs != 0 => Some("its gradient reads the op's inputs"),
            Some(_) if !self.aux_states.is_empty() => Some("it has aux states"),
            Some(_) if !self.mutate_inputs.is_empty() => Some("it updates inputs in place"),
            Some(_) if self.resources.rng => Some("it draws random numbers"),
            Some(_) => None,
        };
        match why {
            Some(why) => Err(Error::invalid(
                self.name,
                "linear",
                format!(
                    "an op declared linear has a gradient that is the forward's adjoint \
                     and reads only the output gradients, but {why}"
                ),
            )),
            None => Ok(()),
        }
    }

    /// Whether the op has one output and no aux states, the mould that
    /// fusion and the in-place options assume.
    pub fn is_simple(&self) -> bool {
        self.outputs.is_none() && self.aux_states.is_empty()
    }

    /// Checks the number of inputs of a fixed-arity op (variadic ops are
    /// checked by [`OpDef::check_inputs`]).
    pub fn check_arity(&self, got: usize) -> Result<()> {
        if self.arguments.is_none() && got != self.num_inputs() {
            return Err(Error::Arity {
                op: self.name.into(),
                expected: self.num_inputs(),
                got,
            });
        }
        Ok(())
    }

    /// The name of input `i` of a call with `env` (arguments, then aux
    /// states), for messages.
    pub fn argument_name(&self, i: usize, env: &EnvArguments) -> String {
        match self.arguments {
            Some(f) => {
                let names = f(env);
                let aux = i
                    .checked_sub(names.len())
                    .and_then(|j| self.aux_states.get(j));
                names
                    .get(i)
                    .cloned()
                    .or(aux.map(|s| (*s).to_owned()))
                    .unwrap_or_else(|| "input".into())
            }
            None => self.input_name(i).into(),
        }
    }

    /// The name of input `i`, for messages.
    pub fn input_name(&self, i: usize) -> &'static str {
        let aux = |j: usize| self.aux_states.get(j).copied();
        self.inputs
            .get(i)
            .copied()
            .or_else(|| i.checked_sub(self.inputs.len()).and_then(aux))
            .unwrap_or("input")
    }

    /// A one-paragraph summary for listings: arity, params, gradient kind,
    /// in-place options, pattern.
    pub fn signature(&self) -> String {
        let params = match self.params {
            ParamKind::None => "no params".to_string(),
            ParamKind::Scalar => "scalar".to_string(),
            ParamKind::Kwargs { type_name, fields } => {
                format!("kwargs {type_name} {{{}}}", fields().join(", "))
            }
        };
        let grad = match self.gradient {
            None => "no gradient".to_string(),
            Some(g) => format!("gradient {:?}", g.kind()),
        };
        let mut inplace = Vec::new();
        if let Some(f) = self.inplace.forward {
            inplace.push(format!("{f:?}"));
        }
        if let Some(g) = self.inplace.gradient {
            inplace.push(format!("{g:?}"));
        }
        let inplace = if inplace.is_empty() {
            "no inplace".to_string()
        } else {
            format!("inplace {}", inplace.join("+"))
        };
        format!(
            "{}({}) -> out; {params}; {grad}; {inplace}; pattern {}",
            self.name,
            self.inputs.join(", "),
            self.pattern.name()
        )
    }
}

/// Default attribute parser: accepts exactly what [`OpDef::params`] says.
/// Used by generated code for scalar and no-param ops.
pub fn parse_scalar_or_none(op: &OpDef, attrs: &Attrs) -> Result<EnvArguments> {
    let mut scalar = None;
    for (k, v) in attrs.arguments() {
        match (op.params, k) {
            (ParamKind::Scalar, "scalar") => {
                scalar = Some(crate::attrs::parse_f64(v).ok_or_else(|| Error::BadKwarg {
                    op: op.name.into(),
                    arg: "scalar".into(),
                    reason: format!("expected a number, got `{v}`"),
                })?)
            }
            (ParamKind::None, "scalar") => {
                return Err(Error::UnexpectedScalar {
                    op: op.name.into(),
                    takes: "no arguments".into(),
                });
            }
            _ => {
                return Err(Error::BadKwarg {
                    op: op.name.into(),
                    arg: k.into(),
                    reason: match op.params {
                        ParamKind::Scalar => "unknown argument; expected `scalar`".into(),
                        _ => "unknown argument; this op takes no arguments".into(),
                    },
                });
            }
        }
    }
    match (op.params, scalar) {
        (ParamKind::Scalar, None) => Err(Error::MissingScalar { op: op.name.into() }),
        (_, Some(s)) => Ok(EnvArguments::scalar(s)),
        _ => Ok(EnvArguments::none()),
    }
}

/// Attribute parser of kwargs ops: a `scalar` attribute is reported as
/// unexpected, everything else goes to [`crate::attrs::parse_kwargs`].
pub fn parse_kwargs_env<P>(op: &OpDef, attrs: &Attrs) -> Result<EnvArguments>
where
    P: serde::de::DeserializeOwned + Send + Sync + 'static,
{
    if attrs.get("scalar").is_some() {
        return Err(Error::UnexpectedScalar {
            op: op.name.into(),
            takes: "keyword arguments".into(),
        });
    }
    Ok(EnvArguments::kwargs(crate::attrs::parse_kwargs::<P>(
        op.name, attrs,
    )?))
}

/// Attribute writer of kwargs ops.
pub fn kwargs_to_attrs<P: serde::Serialize + 'static>(
    op: &OpDef,
    env: &EnvArguments,
) -> Result<Attrs> {
    crate::attrs::to_attrs(op.name, env.require_kwargs::<P>(op.name)?)
}

/// Default attribute writer for scalar and no-param ops.
pub fn scalar_to_attrs(op: &OpDef, env: &EnvArguments) -> Result<Attrs> {
    Ok(match op.params {
        ParamKind::Scalar => Attrs::new().with("scalar", env.require_scalar(op.name)?),
        _ => Attrs::new(),
    })
}

/// Shape rule of same-shape elementwise ops: every input has one shape.
pub fn same_shape(op: &OpDef, inputs: &[Shape], _env: &EnvArguments) -> Result<Shape> {
    op.check_arity(inputs.len())?;
    let first = inputs.first().ok_or_else(|| {
        Error::invalid(
            op.name,
            "inputs",
            "an op without inputs needs a shape function",
        )
    })?;
    for (i, s) in inputs.iter().enumerate().skip(1) {
        if s != first {
            return Err(Error::ShapeMismatch {
                op: op.name.into(),
                arg: op.input_name(i).into(),
                expected: format!("{first} (the shape of `{}`)", op.input_name(0)),
                got: s.clone(),
            });
        }
    }
    Ok(first.clone())
}

/// Shape rule of broadcasting ops: NumPy broadcasting of all inputs.
pub fn broadcast_shape(op: &OpDef, inputs: &[Shape], _env: &EnvArguments) -> Result<Shape> {
    op.check_arity(inputs.len())?;
    let mut out = inputs.first().cloned().unwrap_or_default();
    for (i, s) in inputs.iter().enumerate().skip(1) {
        out = out.broadcast(s).ok_or_else(|| Error::ShapeMismatch {
            op: op.name.into(),
            arg: op.input_name(i).into(),
            expected: format!("a shape that broadcasts with {out}"),
            got: s.clone(),
        })?;
    }
    Ok(out)
}

/// Dtype rule of most ops: every input has one float dtype, and so does the output.
pub fn same_float_dtype(op: &OpDef, inputs: &[DType], env: &EnvArguments) -> Result<DType> {
    op.check_arity(inputs.len())?;
    let Some(&first) = inputs.first() else {
        return Ok(DType::F32);
    };
    for (i, &d) in inputs.iter().enumerate() {
        if !d.is_float() {
            return Err(Error::DTypeMismatch {
                op: op.name.into(),
                arg: op.argument_name(i, env),
                expected: "a float dtype (float32, float64, float16, bfloat16)".into(),
                got: d,
            });
        }
        if d != first {
            return Err(Error::DTypeMismatch {
                op: op.name.into(),
                arg: op.argument_name(i, env),
                expected: format!("{first} (the dtype of `{}`)", op.argument_name(0, env)),
                got: d,
            });
        }
    }
    Ok(first)
}

/// Checks that a blob has the shape and dtype inference gave, naming the argument.
pub fn check_blob(
    op: &OpDef,
    arg: &str,
    shape: &Shape,
    dtype: DType,
    want_shape: &Shape,
    want_dtype: DType,
) -> Result<()> {
    if dtype != want_dtype {
        return Err(Error::DTypeMismatch {
            op: op.name.into(),
            arg: arg.into(),
            expected: want_dtype.to_string(),
            got: dtype,
        });
    }
    if shape != want_shape {
        return Err(Error::ShapeMismatch {
            op: op.name.into(),
            arg: arg.into(),
            expected: want_shape.to_string(),
            got: shape.clone(),
        });
    }
    Ok(())
}
