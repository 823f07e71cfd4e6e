//! MXNet's NDArray list files (`.params`): the reader and the writer.
//!
//! The layout, all little-endian, as MXNet 1.x writes it (`mx.nd.save`,
//! Gluon's `save_parameters` and `export`):
//!
//! ```text
//! u64 0x112, u64 reserved            the list's magic number
//! u64 count, count × array
//! u64 count (0 or the array count), count × (u64 length, UTF-8 bytes)
//! ```
//!
//! An array is `u32 magic` (0xF993FAC9 for MXNet's legacy shape semantics,
//! 0xF993FACA for NumPy semantics), `i32` storage type (0 dense), the
//! shape (`i32 ndim`, `ndim × i64`), then, unless the shape is unknown,
//! the context (`i32` device type, `i32` device id), the `i32` type flag
//! and the elements. Files from before MXNet 1.0 have no storage type:
//! magic 0xF993FAC8 with the same shape, or no magic at all (the first
//! `u32` is then the number of dimensions and each dimension a `u32`).

use std::borrow::Borrow;
use std::io::{BufReader, Read, Write};
use std::path::Path;

use super::io::{
    CHUNK_BYTES, Input, as_entries, from_le, io_error, open, write_atomically, write_le,
};
use crate::{DType, Error, NDArray, Result, Shape, dispatch_any};

/// The function named in errors while reading.
const OP: &str = "load_params";

/// The list's magic number (`kMXAPINDArrayListMagic`).
const LIST_MAGIC: u64 = 0x112;
/// An array from MXNet 0.x with 64-bit dimensions and no storage type.
const V1_MAGIC: u32 = 0xF993_FAC8;
/// An array with a storage type, in MXNet's legacy shape semantics (a
/// shape with no dimensions is unknown).
const V2_MAGIC: u32 = 0xF993_FAC9;
/// As V2, in NumPy shape semantics (no dimensions is a 0-d array; -1 is
/// unknown).
const V3_MAGIC: u32 = 0xF993_FACA;
/// MXNet's `Context::kCPU`.
const DEV_CPU: i32 = 1;
/// The most dimensions an array may have (NumPy 2's limit; MXNet's
/// models use at most 6).
const MAX_NDIM: usize = 64;

/// The type flags of MXNet (`mshadow::TypeFlag`) that simpleop has no
/// dtype for, with their element sizes: such arrays are skipped over so
/// that the error can name them.
const FOREIGN_FLAGS: [(i32, &str, u64); 6] = [
    (5, "int8", 1),
    (7, "bool", 1),
    (8, "int16", 2),
    (9, "uint16", 2),
    (10, "uint32", 4),
    (11, "uint64", 8),
];

const SUPPORTED: &str = "supported: float32 (flag 0), float64 (1), float16 (2), uint8 (3), \
                         int32 (4), int64 (6) and bfloat16 (12)";

/// One array of the file: its values, or why it cannot be one.
enum Slot {
    Array(NDArray),
    /// A readable array that simpleop cannot represent (its dtype, or an
    /// unknown shape): reported with its name once the names are read.
    Refused(String),
}

/// Reads a whole list.
fn read_list<R: Read>(inp: &mut Input<R>) -> Result<Vec<(String, NDArray)>> {
    let magic = inp.u64("the list's magic number")?;
    if magic != LIST_MAGIC {
        return Err(inp.error(format!(
            "not an MXNet NDArray list (.params) file: magic number {magic:#x}, expected {LIST_MAGIC:#x}"
        )));
    }
    inp.u64("the list's reserved field")?;
    let count = inp.u64("the number of arrays")?;
    let mut arrays = Vec::new();
    // The first array that cannot be loaded, by index; later ones are
    // parsed (to reach the names) and dropped.
    let mut refused: Option<(u64, String)> = None;
    for i in 0..count {
        match read_array(inp, i)? {
            Slot::Array(a) if refused.is_none() => {
                arrays.try_reserve(1).map_err(|e| {
                    inp.error(format!("cannot allocate the list of {count} arrays: {e}"))
                })?;
                arrays.push(a);
            }
            Slot::Array(_) => {}
            Slot::Refused(why) => {
                refused.get_or_insert((i, why));
            }
        }
    }
    let n_names = inp.u64("the number of names")?;
    if n_names != 0 && n_names != count {
        return Err(inp.error(format!(
            "the file has {count} arrays but {n_names} names (expected {count}, or 0 for an unnamed list)"
        )));
    }
    let mut names = Vec::new();
    for i in 0..n_names {
        let what = format!("name {i}");
        let len = inp.u64(&format!("the length of {what}"))?;
        let bytes = inp.bytes(len, &what)?;
        let name =
            String::from_utf8(bytes).map_err(|e| inp.error(format!("{what} is not UTF-8: {e}")))?;
        names
            .try_reserve(1)
            .map_err(|e| inp.error(format!("cannot allocate the list of {n_names} names: {e}")))?;
        names.push(name);
    }
    if let Some((i, why)) = refused {
        let name = match names.get(i as usize) {
            Some(n) => format!(" (`{n}`)"),
            None => String::new(),
        };
        return Err(inp.error(format!("array {i}{name}: {why}")));
    }
    if names.is_empty() {
        names.resize(arrays.len(), String::new());
    }
    Ok(names.into_iter().zip(arrays).collect())
}

/// Reads array `i`, leaving the input at the next one.
fn read_array<R: Read>(inp: &mut Input<R>, i: u64) -> Result<Slot> {
    let at = inp.position();
    let magic = inp.u32(&format!("array {i}'s magic number"))?;
    // `dims` is `None` for an unknown shape, which MXNet writes without
    // context, type or data.
    let dims = match magic {
        V2_MAGIC | V3_MAGIC => {
            let stype = inp.i32(&format!("array {i}'s storage type"))?;
            match stype {
                0 => {}
                1 | 2 => {
                    let kind = if stype == 1 { "row_sparse" } else { "csr" };
                    return Err(inp.error(format!(
                        "array {i}: {kind} storage (storage type {stype}) is not supported, only \
                         dense (0); convert it with `tostype('default')` before saving"
                    )));
                }
                _ => {
                    return Err(inp.error(format!(
                        "array {i}: unknown storage type {stype} (expected 0, dense)"
                    )));
                }
            }
            read_shape(inp, i, magic == V3_MAGIC)?
        }
        V1_MAGIC => read_shape(inp, i, false)?,
        ndim if (ndim as usize) <= MAX_NDIM => read_legacy_shape(inp, i, ndim as usize)?,
        _ => {
            return Err(inp.error(format!(
                "array {i} (at byte {at}) starts with {magic:#010x}: not an NDArray magic number \
                 (0xf993fac8 to 0xf993faca) nor a legacy dimension count (at most {MAX_NDIM})"
            )));
        }
    };
    let Some(dims) = dims else {
        return Ok(Slot::Refused(
            "its shape is unknown (an empty NDArray), which simpleop arrays cannot be".into(),
        ));
    };
    let _dev_type = inp.i32(&format!("array {i}'s device type"))?;
    let _dev_id = inp.i32(&format!("array {i}'s device id"))?;
    let flag = inp.i32(&format!("array {i}'s type flag"))?;
    let shape = Shape::new(dims);
    let Some(dtype) = DType::from_mxnet_flag(flag) else {
        let Some(&(_, name, size)) = FOREIGN_FLAGS.iter().find(|f| f.0 == flag) else {
            return Err(inp.error(format!(
                "array {i}: unknown MXNet type flag {flag}; {SUPPORTED}"
            )));
        };
        let bytes = shape
            .checked_size()
            .and_then(|n| (n as u64).checked_mul(size))
            .ok_or_else(|| inp.error(format!("array {i}: shape {shape} overflows")))?;
        inp.skip(bytes, &format!("array {i}'s data"))?;
        return Ok(Slot::Refused(format!(
            "{name} (MXNet type flag {flag}) has no simpleop dtype; {SUPPORTED}"
        )));
    };
    read_data(inp, i, shape, dtype).map(Slot::Array)
}

/// A V1/V2/V3 shape: `i32 ndim`, then `ndim` `i64`s. `None` when unknown.
fn read_shape<R: Read>(inp: &mut Input<R>, i: u64, numpy: bool) -> Result<Option<Vec<usize>>> {
    let ndim = inp.i32(&format!("array {i}'s number of dimensions"))?;
    if ndim == -1 && numpy {
        return Ok(None);
    }
    if ndim == 0 && !numpy {
        // Legacy semantics: no dimensions means no shape yet.
        return Ok(None);
    }
    let ndim = usize::try_from(ndim)
        .ok()
        .filter(|&n| n <= MAX_NDIM)
        .ok_or_else(|| {
            inp.error(format!(
                "array {i} has {ndim} dimensions; at most {MAX_NDIM} are supported"
            ))
        })?;
    let mut dims = Vec::with_capacity(ndim);
    let mut unknown = false;
    for _ in 0..ndim {
        let d = inp.i64(&format!("array {i}'s shape"))?;
        match usize::try_from(d) {
            Ok(d) => dims.push(d),
            // NumPy semantics: -1 is a dimension not known yet.
            Err(_) if d == -1 && numpy => unknown = true,
            Err(_) => {
                return Err(inp.error(format!("array {i} has a negative dimension {d}")));
            }
        }
    }
    Ok((!unknown).then_some(dims))
}

/// A pre-V1 shape: `ndim` (already read) `u32`s. `None` when unknown.
fn read_legacy_shape<R: Read>(
    inp: &mut Input<R>,
    i: u64,
    ndim: usize,
) -> Result<Option<Vec<usize>>> {
    if ndim == 0 {
        return Ok(None);
    }
    let mut dims = Vec::with_capacity(ndim);
    for _ in 0..ndim {
        dims.push(inp.u32(&format!("array {i}'s shape"))? as usize);
    }
    Ok(Some(dims))
}

/// Reads array `i`'s elements. A sized input was checked to hold them
/// before their storage is allocated; a stream is read in chunks first.
fn read_data<R: Read>(inp: &mut Input<R>, i: u64, shape: Shape, dtype: DType) -> Result<NDArray> {
    let what = format!("array {i}'s data ({shape} {dtype})");
    let Some(bytes) = shape.bytes(dtype.size()) else {
        return Err(inp.error(format!("{what} would take more than isize::MAX bytes")));
    };
    let raw = if inp.sized() {
        inp.check_left(bytes as u64, &what)?;
        None
    } else {
        Some(inp.bytes(bytes as u64, &what)?)
    };
    let mut a = NDArray::for_overwrite(OP, shape.clone(), dtype).map_err(|_| {
        Error::alloc(
            OP,
            format!("array {i} of `{}`, shape {shape} ({dtype})", inp.path()),
            Some(bytes),
        )
    })?;
    dispatch_any!(dtype, T => {
        let out: &mut [u8] = bytemuck::cast_slice_mut(a.as_slice_mut::<T>()?);
        match &raw {
            Some(raw) => out.copy_from_slice(raw),
            None => {
                for chunk in out.chunks_mut(CHUNK_BYTES) {
                    inp.fill(chunk, &what)?;
                }
            }
        }
        from_le::<T>(out);
    });
    Ok(a)
}

/// Writes a list. Arrays with a 0-d shape exist only in MXNet's NumPy
/// semantics, so a list holding one is written in that layout (V3)
/// throughout; otherwise in the legacy layout (V2) that `mx.nd.load`
/// reads.
fn write_list(w: &mut impl Write, entries: &[(&str, &NDArray)], path: &str) -> Result<()> {
    let err = |e: std::io::Error| io_error("save_params", path, e);
    let numpy = entries.iter().any(|(_, a)| a.ndim() == 0);
    let magic = if numpy { V3_MAGIC } else { V2_MAGIC };
    let named = entries.iter().any(|(n, _)| !n.is_empty());
    let mut head = Vec::with_capacity(24);
    head.extend_from_slice(&LIST_MAGIC.to_le_bytes());
    head.extend_from_slice(&0u64.to_le_bytes());
    head.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    w.write_all(&head).map_err(err)?;
    for (_, a) in entries {
        let mut h = Vec::with_capacity(32 + 8 * a.ndim());
        h.extend_from_slice(&magic.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes());
        h.extend_from_slice(&(a.ndim() as i32).to_le_bytes());
        for &d in a.shape().dims() {
            h.extend_from_slice(&(d as i64).to_le_bytes());
        }
        h.extend_from_slice(&DEV_CPU.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes());
        h.extend_from_slice(&a.dtype().mxnet_flag().to_le_bytes());
        w.write_all(&h).map_err(err)?;
        dispatch_any!(a.dtype(), T => write_le::<T>(w, a.as_slice::<T>()?)).map_err(err)?;
    }
    let n_names = if named { entries.len() } else { 0 };
    w.write_all(&(n_names as u64).to_le_bytes()).map_err(err)?;
    for (name, _) in entries.iter().take(n_names) {
        w.write_all(&(name.len() as u64).to_le_bytes())
            .map_err(err)?;
        w.write_all(name.as_bytes()).map_err(err)?;
    }
    Ok(())
}

/// Checks what MXNet's format cannot hold, before anything is written.
fn check_entries(entries: &[(&str, &NDArray)], path: &str) -> Result<()> {
    for (name, a) in entries {
        if a.shape().dims().iter().any(|&d| i64::try_from(d).is_err()) || a.ndim() > MAX_NDIM {
            return Err(io_error(
                "save_params",
                path,
                format!(
                    "array `{name}` of shape {} does not fit MXNet's shape",
                    a.shape()
                ),
            ));
        }
    }
    Ok(())
}

impl NDArray {
    /// Reads an MXNet NDArray list file (`.params`, as `mx.nd.save`,
    /// Gluon's `save_parameters` and `export` write it): the arrays in
    /// file order with their names as stored (`arg:fc1_weight`,
    /// `aux:bn_moving_mean`, or Gluon's bare `dense0.weight`). A list saved
    /// without names (`mx.nd.save(f, [a, b])`) gives empty names.
    /// [`ParamFile`](crate::ParamFile) splits the `arg:`/`aux:` prefixes.
    ///
    /// Dense float32, float64, float16, bfloat16, int32, int64 and uint8
    /// arrays load; anything else (sparse storage, int8, bool, an empty
    /// NDArray with no shape) is an error naming the array. So is a
    /// truncated or corrupt file: the sizes it declares are checked against
    /// the file's length before anything is allocated.
    pub fn load_params(path: impl AsRef<Path>) -> Result<Vec<(String, NDArray)>> {
        let path = path.as_ref();
        let (file, len) = open(path, "load_params")?;
        let name = path.display().to_string();
        read_list(&mut Input::new(
            BufReader::new(file),
            "load_params",
            &name,
            len,
        ))
    }

    /// [`NDArray::load_params`] from a stream. Its length is unknown, so
    /// data is read in 64 KiB chunks: a file declaring more than it holds
    /// fails where it ends, having allocated no more than it held.
    pub fn read_params(r: impl Read) -> Result<Vec<(String, NDArray)>> {
        read_list(&mut Input::new(r, "load_params", "<stream>", None))
    }

    /// [`NDArray::read_params`] from bytes in memory, whose length is known
    /// (so each array's storage is allocated once, after its size is
    /// checked against the bytes).
    pub fn read_params_bytes(bytes: &[u8]) -> Result<Vec<(String, NDArray)>> {
        let len = Some(bytes.len() as u64);
        read_list(&mut Input::new(bytes, "load_params", "<bytes>", len))
    }

    /// Writes `entries` as an MXNet NDArray list file that `mx.nd.load`
    /// and Gluon (`load_parameters`, `SymbolBlock.imports`) read: names as
    /// given, so write `arg:NAME`/`aux:NAME` for a symbolic model's file
    /// and bare names for Gluon's `load_parameters`. If every name is
    /// empty, the list is written unnamed (MXNet loads it as a list).
    ///
    /// Arrays are written in MXNet's legacy layout; a 0-d array exists
    /// only in its NumPy semantics, so a list with one is written in that
    /// layout, which MXNet reads with `npx.load` (after `npx.set_np()`).
    ///
    /// The file is written to a temporary file beside `path` and renamed
    /// over it when complete: an error leaves `path` as it was.
    pub fn save_params<S: AsRef<str>, A: Borrow<NDArray>>(
        path: impl AsRef<Path>,
        entries: &[(S, A)],
    ) -> Result<()> {
        let path = path.as_ref();
        let entries = as_entries(entries);
        check_entries(&entries, &path.display().to_string())?;
        write_atomically(path, "save_params", |w, name| write_list(w, &entries, name))
    }

    /// [`NDArray::save_params`] to a stream.
    pub fn write_params<S: AsRef<str>, A: Borrow<NDArray>>(
        mut w: impl Write,
        entries: &[(S, A)],
    ) -> Result<()> {
        let entries = as_entries(entries);
        check_entries(&entries, "<stream>")?;
        write_list(&mut w, &entries, "<stream>")?;
        w.flush()
            .map_err(|e| io_error("save_params", "<stream>", e))
    }
}
