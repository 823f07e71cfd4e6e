//! Weights in and out: MXNet's `.params` files and safetensors files, as
//! lists of named arrays, and [`ParamFile`], which splits MXNet's `arg:` and
//! `aux:` names.
//!
//! - [`NDArray::load_params`] / [`NDArray::save_params`] (and
//!   `read_params`/`write_params` on streams) read and write MXNet's
//!   NDArray list files, as `mx.nd.save`, `mx.nd.load`, Gluon's
//!   `save_parameters`/`load_parameters` and `HybridBlock.export` use
//!   them. Names are kept as stored: `arg:fc1_weight` and
//!   `aux:bn0_moving_mean` in an export, bare `dense0.weight` from
//!   `save_parameters`.
//! - [`NDArray::load_safetensors`] / [`NDArray::save_safetensors`] (and
//!   the stream forms) read and write safetensors files, the header
//!   handled by the `safetensors` crate.
//! - [`Executor::named_args`](crate::symbol::Executor::named_args),
//!   [`Executor::save_params`](crate::symbol::Executor::save_params) and
//!   [`Executor::load_params`](crate::symbol::Executor::load_params) take
//!   a bound graph's weights out and put them back, with the
//!   [`LoadOptions`] of Gluon's `allow_missing` and `ignore_extra`.
//!
//! Both formats hold float32, float64, float16, bfloat16, int32, int64 and
//! uint8 arrays, bit for bit. Other dtypes in a file (MXNet's int8 and
//! bool, safetensors' I8, U16, F8_*, ...) and MXNet's sparse arrays are
//! errors naming the array.
//!
//! Bad files fail cleanly: every read names the file and what it expected,
//! and no size read from a file is allocated before the bytes behind it are
//! known to be there. A file's length is checked first; a stream is read in
//! 64 KiB chunks, so memory grows only with bytes that arrive. Saving
//! writes a temporary file beside the target and renames it over the
//! target when it is complete, so an error never leaves a partial file.
//!
//! ```
//! use simpleop::{NDArray, ParamFile};
//! # fn main() -> simpleop::Result<()> {
//! let w = NDArray::from_vec(vec![0.5f32, -1.0, 2.0, 4.0], [2, 2])?;
//! let mean = NDArray::from_vec(vec![0.0f32, 1.0], [2])?;
//! let mut file = Vec::new();
//! NDArray::write_params(&mut file, &[("arg:fc_weight", &w), ("aux:bn_moving_mean", &mean)])?;
//!
//! let entries = NDArray::read_params(&file[..])?;
//! assert_eq!(entries[0].0, "arg:fc_weight");
//! let params = ParamFile::from_entries(entries)?;
//! assert_eq!(params.args["fc_weight"], w);
//! assert_eq!(params.aux["bn_moving_mean"], mean);
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use crate::{Error, NDArray, Result};

mod io;
mod mxnet;
mod safetensors;

#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod tests;

/// The prefix of an argument's name in a symbolic model's `.params` file.
pub const ARG_PREFIX: &str = "arg:";
/// The prefix of an auxiliary state's name.
pub const AUX_PREFIX: &str = "aux:";

/// A parameter list split by MXNet's name prefixes: `arg:NAME` entries
/// into [`ParamFile::args`] and `aux:NAME` entries into [`ParamFile::aux`],
/// by `NAME`. Names without either prefix (a Gluon `save_parameters`
/// file, or a safetensors file) go into `args` as they are, as Gluon's
/// loader matches them to parameters by their full name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ParamFile {
    /// Arguments (weights, biases; Gluon's parameters), by name.
    pub args: BTreeMap<String, NDArray>,
    /// Auxiliary states (BatchNorm's moving mean and variance), by name.
    pub aux: BTreeMap<String, NDArray>,
}

impl ParamFile {
    /// Splits `entries` by prefix. A name that occurs twice (after
    /// removing its prefix) is an error.
    pub fn from_entries(entries: impl IntoIterator<Item = (String, NDArray)>) -> Result<ParamFile> {
        let mut out = ParamFile::default();
        for (name, array) in entries {
            let (map, key) = if let Some(key) = name.strip_prefix(AUX_PREFIX) {
                (&mut out.aux, key)
            } else {
                (
                    &mut out.args,
                    name.strip_prefix(ARG_PREFIX).unwrap_or(&name),
                )
            };
            if map.insert(key.to_owned(), array).is_some() {
                return Err(Error::argument(&name, "occurs twice in the parameter list"));
            }
        }
        Ok(out)
    }

    /// Reads an MXNet `.params` file ([`NDArray::load_params`]) and splits
    /// it.
    pub fn load(path: impl AsRef<Path>) -> Result<ParamFile> {
        ParamFile::from_entries(NDArray::load_params(path)?)
    }

    /// The entries with their prefixes, `arg:` ones first, each group in
    /// name order: what an MXNet symbolic model's `.params` file holds.
    pub fn to_entries(&self) -> Vec<(String, NDArray)> {
        let prefixed = |prefix: &str, map: &BTreeMap<String, NDArray>| {
            map.iter()
                .map(|(k, v)| (format!("{prefix}{k}"), v.clone()))
                .collect::<Vec<_>>()
        };
        let mut out = prefixed(ARG_PREFIX, &self.args);
        out.extend(prefixed(AUX_PREFIX, &self.aux));
        out
    }

    /// Writes [`ParamFile::to_entries`] as an MXNet `.params` file
    /// ([`NDArray::save_params`]), which `mx.model.load_checkpoint` and
    /// Gluon's `SymbolBlock.imports` read.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        NDArray::save_params(path, &self.to_entries())
    }
}

/// How [`Executor::load_params`](crate::symbol::Executor::load_params)
/// matches a list of named arrays to a graph's arguments, as Gluon's
/// `load_parameters` and `SymbolBlock.imports` do.
///
/// The default is strict: every argument that is not an input must be
/// given, and every name must be an argument.
#[derive(Clone, Copy, Debug, Default)]
pub struct LoadOptions<'a> {
    /// The graph's inputs (`data`, labels): arguments that are not
    /// parameters, so a file need not hold them (an entry for one is still
    /// loaded).
    pub inputs: &'a [&'a str],
    /// Parameters the list does not name keep their values (Gluon's
    /// `allow_missing`); otherwise each one missing is an error.
    pub allow_missing: bool,
    /// Names that are no argument of the graph are skipped (Gluon's
    /// `ignore_extra`); otherwise each one is an error.
    pub ignore_extra: bool,
}
