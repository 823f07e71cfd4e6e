//! The one error type. Every variant names the op and, where there is one,
//! the argument at fault.

use crate::{DType, OpReqType, Shape};

/// Result alias used throughout simpleop.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in simpleop.
///
/// Its `Debug` form is the message, as with `anyhow`: a `main` returning
/// `Result<(), simpleop::Error>` prints `Error: argument `x`: ...`, not the
/// variant's fields. Match on the variants for the structure.
#[derive(Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No op of that name is registered.
    #[error("unknown op `{name}`{}", suggest(suggestions))]
    UnknownOp {
        /// The name asked for.
        name: String,
        /// Registered names close to it.
        suggestions: Vec<String>,
    },
    /// Two ops were registered under one name.
    #[error("op `{op}` is defined twice: at {first} and at {second}")]
    DuplicateOp {
        /// The name.
        op: String,
        /// Where the first definition is.
        first: String,
        /// Where the second definition is.
        second: String,
    },
    /// The op received the wrong number of inputs.
    #[error("op `{op}`: expected {expected} input(s), got {got}")]
    Arity {
        /// The op.
        op: String,
        /// How many it takes.
        expected: usize,
        /// How many it got.
        got: usize,
    },
    /// An argument has the wrong shape.
    #[error("op `{op}`: argument `{arg}` has shape {got}, expected {expected}")]
    ShapeMismatch {
        /// The op.
        op: String,
        /// The argument.
        arg: String,
        /// What was expected, in words or as a shape.
        expected: String,
        /// What it had.
        got: Shape,
    },
    /// An argument has the wrong dtype.
    #[error("op `{op}`: argument `{arg}` has dtype {got}, expected {expected}")]
    DTypeMismatch {
        /// The op.
        op: String,
        /// The argument.
        arg: String,
        /// What was expected, in words or as a dtype.
        expected: String,
        /// What it had.
        got: DType,
    },
    /// The op takes a scalar and none was given.
    #[error("op `{op}`: missing scalar argument `scalar`")]
    MissingScalar {
        /// The op.
        op: String,
    },
    /// The op takes no scalar and one was given.
    #[error("op `{op}`: unexpected scalar argument; this op takes {takes}")]
    UnexpectedScalar {
        /// The op.
        op: String,
        /// What it takes instead.
        takes: String,
    },
    /// A keyword argument could not be used.
    #[error("op `{op}`: argument `{arg}`: {reason}")]
    BadKwarg {
        /// The op.
        op: String,
        /// The keyword.
        arg: String,
        /// What was wrong and what was expected.
        reason: String,
    },
    /// A recorded gradient would read a value that was changed in place
    /// after it was saved (autograd's version counter).
    #[error(
        "op `{op}`: its gradient reads `{arg}`, which was modified in place after it was recorded \
         (version {saved} then, {now} now); compute a new array instead of updating this one"
    )]
    ModifiedInPlace {
        /// The recorded op whose gradient reads the value.
        op: String,
        /// The input or output it reads.
        arg: String,
        /// The value's version when recorded.
        saved: u64,
        /// Its version now.
        now: u64,
    },
    /// The op has no gradient but one was asked for.
    #[error("op `{op}` has no gradient")]
    NoGradient {
        /// The op.
        op: String,
    },
    /// The op has no kernel for the device asked for.
    #[error("op `{op}` has no kernel for device `{device}`")]
    NoKernel {
        /// The op.
        op: String,
        /// The device.
        device: String,
    },
    /// The request type is not allowed here.
    #[error("op `{op}`: argument `{arg}`: request {req:?} is not allowed: {reason}")]
    BadReq {
        /// The op.
        op: String,
        /// The argument.
        arg: String,
        /// The request.
        req: OpReqType,
        /// Why.
        reason: String,
    },
    /// An output overlaps an input other than exactly.
    #[error("op `{op}`: output `{out}` overlaps argument `{arg}` without being the same buffer")]
    Aliasing {
        /// The op.
        op: String,
        /// The output.
        out: String,
        /// The input it overlaps.
        arg: String,
    },
    /// An argument's value is not acceptable.
    #[error("op `{op}`: argument `{arg}`: {reason}")]
    InvalidArgument {
        /// The op, or the API function.
        op: String,
        /// The argument.
        arg: String,
        /// What was expected.
        reason: String,
    },
    /// A graph is malformed: bad JSON, a dangling input, a cycle.
    #[error("graph: {reason}")]
    Graph {
        /// What is wrong.
        reason: String,
    },
    /// An error raised while handling one node of a graph.
    #[error("node `{node}` (op `{op}`): {cause}")]
    InNode {
        /// The node's name.
        node: String,
        /// Its op.
        op: String,
        /// The underlying error. Its message is part of this one's, so it
        /// is not also reported as `source()` (a report would print it
        /// twice).
        cause: Box<Error>,
    },
    /// A graph argument (variable) is missing, unknown or badly bound.
    #[error("argument `{arg}`: {reason}")]
    Argument {
        /// The argument's name.
        arg: String,
        /// What is wrong.
        reason: String,
    },
    /// Reading or writing a file (or stream) failed, or its contents are
    /// not in the expected format.
    #[error("{op}: `{path}`: {reason}")]
    Io {
        /// The function, e.g. `load_npy`.
        op: String,
        /// The file, or `<stream>`.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// A conformance case file is malformed.
    #[error("conformance case: {reason}")]
    Conformance {
        /// What is wrong.
        reason: String,
    },
    /// Memory for an array or for temporary space could not be had: the
    /// size does not fit the address space, or the allocator refused it.
    #[error("op `{op}`: cannot allocate {what} of {}", bytes_text(*bytes))]
    Alloc {
        /// The op, or the function (`NDArray::zeros`, `bind`).
        op: String,
        /// What the memory was for, e.g. "output `out` of shape [1073741824, 1073741824]".
        what: String,
        /// How many bytes; `None` when the count overflows `usize`.
        bytes: Option<usize>,
    },
    /// The gradient checker found a mismatch.
    #[error(
        "op `{op}`: gradient check failed for argument `{arg}` ({dtype}, {req:?}) at element {index}: analytic {analytic}, numeric {numeric}"
    )]
    GradCheck {
        /// The op.
        op: String,
        /// The input whose gradient differs.
        arg: String,
        /// The dtype tested.
        dtype: DType,
        /// The request type tested.
        req: OpReqType,
        /// Flat index of the worst element.
        index: usize,
        /// The registered gradient's value.
        analytic: f64,
        /// The central-difference value.
        numeric: f64,
    },
    /// The exact check found the written gradient differing from the
    /// derivative of the forward.
    #[error(
        "op `{op}`: the written gradient differs from the derivative of the forward at {count} point(s); first: {first}"
    )]
    ExactCheck {
        /// The op.
        op: String,
        /// How many (dtype, point, input) triples differ.
        count: usize,
        /// The first of them.
        first: String,
    },
}

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

fn bytes_text(bytes: Option<usize>) -> String {
    match bytes {
        Some(b) => format!("{b} bytes"),
        None => "more bytes than the address space holds".into(),
    }
}

fn suggest(names: &[String]) -> String {
    match names {
        // Ops register at link time, so an op crate nothing refers to is
        // absent; the operators (`+`, ...) call ops from `simpleop_ops`.
        [] => "; no registered op has a similar name: is the crate that defines it linked? \
               (`use simpleop_ops as _;` for the standard ops, which `+ - * /` call; \
               `use your_ops as _;` or its `link()` for your own)"
            .into(),
        [one] => format!("; did you mean `{one}`?"),
        many => format!(
            "; did you mean one of {}?",
            many.iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

impl Error {
    /// An allocation failure: `bytes` of memory (`None`: more than a
    /// `usize` counts) for `what`, in `op`.
    pub fn alloc(op: impl Into<String>, what: impl Into<String>, bytes: Option<usize>) -> Self {
        Error::Alloc {
            op: op.into(),
            what: what.into(),
            bytes,
        }
    }

    /// A malformed-graph error.
    pub fn graph(reason: impl Into<String>) -> Self {
        Error::Graph {
            reason: reason.into(),
        }
    }

    /// An error about graph argument `arg`.
    pub fn argument(arg: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Argument {
            arg: arg.into(),
            reason: reason.into(),
        }
    }

    /// Wraps this error with the graph node it happened in.
    pub fn in_node(self, node: &str, op: &str) -> Self {
        Error::InNode {
            node: node.into(),
            op: op.into(),
            cause: Box::new(self),
        }
    }

    /// Shorthand for [`Error::InvalidArgument`].
    pub fn invalid(
        op: impl Into<String>,
        arg: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        Error::InvalidArgument {
            op: op.into(),
            arg: arg.into(),
            reason: reason.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_the_message() {
        let e = Error::argument("x", "its shape cannot be inferred").in_node("r", "relu");
        let msg = "node `r` (op `relu`): argument `x`: its shape cannot be inferred";
        assert_eq!(e.to_string(), msg);
        assert_eq!(format!("{e:?}"), msg);
        assert!(std::error::Error::source(&e).is_none(), "said once");
        let r: Result<()> = Err(e);
        assert_eq!(format!("{r:?}"), format!("Err({msg})"));
    }
}
