//! The checks every driver makes before its first write: dtypes, shapes,
//! and how each source relates to the destinations (exactly one of them,
//! or apart); and the sources' tiles in the compute type.

use std::fmt;
use std::ops::Range;

use crate::blob::overlaps;
use crate::engine::buffers::{Indexer, Src};
use crate::engine::half_io::TileIo;
use crate::{DType, Error, Float, Result, Shape, TBlob};

/// Outputs up to this many elements may take the small direct paths
/// (forward and backward), which skip tiles, scratch and threads.
pub(super) const SMALL_DIRECT: usize = 1024;

/// The facts every argument is checked against.
pub(super) struct Checked {
    pub(super) op: &'static str,
    pub(super) dtype: DType,
    pub(super) out_shape: Shape,
}

pub(super) fn check_float(op: &'static str, arg: &str, dtype: DType) -> Result<()> {
    if !dtype.is_float() {
        return Err(Error::DTypeMismatch {
            op: op.into(),
            arg: arg.into(),
            expected: "a float dtype (float32, float64, float16, bfloat16)".into(),
            got: dtype,
        });
    }
    Ok(())
}

/// An argument's name in an error message, spelled out only when an
/// error is raised: a backward names its gradients `x_grad` without
/// formatting a string per call.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ArgName<'a> {
    Plain(&'a str),
    /// The gradient of the named input.
    GradOf(&'a str),
}

impl<'a> From<&'a str> for ArgName<'a> {
    fn from(name: &'a str) -> Self {
        ArgName::Plain(name)
    }
}

impl fmt::Display for ArgName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgName::Plain(name) => f.write_str(name),
            ArgName::GradOf(name) => write!(f, "{name}_grad"),
        }
    }
}

pub(super) fn check_input<'n>(
    c: &Checked,
    arg: impl Into<ArgName<'n>>,
    blob: &TBlob<'_>,
    broadcast: bool,
    want_shape: Option<&Shape>,
) -> Result<()> {
    let arg = arg.into();
    if blob.dtype() != c.dtype {
        return Err(Error::DTypeMismatch {
            op: c.op.into(),
            arg: arg.to_string(),
            expected: c.dtype.to_string(),
            got: blob.dtype(),
        });
    }
    let target = want_shape.unwrap_or(&c.out_shape);
    let ok = if broadcast && want_shape.is_none() {
        blob.shape().broadcasts_to(target)
    } else {
        blob.shape() == target
    };
    if !ok {
        return Err(Error::ShapeMismatch {
            op: c.op.into(),
            arg: arg.to_string(),
            expected: if broadcast && want_shape.is_none() {
                format!("a shape that broadcasts to {target}")
            } else {
                target.to_string()
            },
            got: blob.shape().clone(),
        });
    }
    Ok(())
}

/// A destination as aliasing checks see it: name, bytes, shape, written.
pub(crate) type DstInfo<'a> = (ArgName<'a>, Range<usize>, &'a Shape, bool);

/// How a source relates to the destinations: `Some(k)` when it is exactly
/// destination `k`'s memory; an error when it partly overlaps one.
pub(crate) fn alias_of<'n>(
    op: &'static str,
    arg: impl Into<ArgName<'n>>,
    src: &TBlob<'_>,
    dsts: &[DstInfo<'_>],
) -> Result<Option<usize>> {
    let r = src.byte_range();
    if r.is_empty() {
        return Ok(None);
    }
    for (k, (name, dr, shape, active)) in dsts.iter().enumerate() {
        if !*active || !overlaps(&r, dr) {
            continue;
        }
        if r == *dr && src.shape() == *shape {
            return Ok(Some(k));
        }
        return Err(Error::Aliasing {
            op: op.into(),
            out: name.to_string(),
            arg: arg.into().to_string(),
        });
    }
    Ok(None)
}

pub(crate) fn source_for<'a, S: Float>(
    x: &TBlob<'a>,
    alias: Option<usize>,
    out_shape: &Shape,
) -> Result<Src<'a, S>> {
    Ok(match alias {
        Some(k) => Src::Dst(k),
        None if x.shape() == out_shape => Src::Contig(x.as_slice::<S>()?),
        None => Src::Bcast(x.as_slice::<S>()?, Indexer::new(x.shape(), out_shape)),
    })
}

/// The tile `start..start + len` of each source in the compute type
/// ([`Src::tile`]), loaded into `bufs` where it must be.
#[inline(always)]
pub(super) fn tiles_of<'t, S: TileIo, const N: usize>(
    srcs: &'t [Src<'_, S>],
    bufs: &'t mut [&mut [S::Compute]; N],
    (start, len): (usize, usize),
    dsts: &[&mut [S]],
) -> [&'t [S::Compute]; N] {
    let mut loaded = srcs.iter().zip(bufs.iter_mut());
    std::array::from_fn(|_| {
        let (src, buf) = loaded.next().expect("one buffer per input");
        src.tile(start, len, dsts, buf)
    })
}
