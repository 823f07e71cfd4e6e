//! safetensors files: the header is parsed and validated by the
//! `safetensors` crate's [`Metadata`]; the data is read straight into each
//! array (so loading needs no second copy of the file) and written straight
//! from it.
//!
//! The layout: `u64` header length `n`, `n` bytes of JSON (`{"name":
//! {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, ...}`,
//! optionally `"__metadata__": {...}`), then the data, little-endian,
//! C order, the tensors back to back in offset order and the last one
//! ending at the end of the file.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::io::{BufReader, Read, Write};
use std::path::Path;

use ::safetensors::Dtype;
use ::safetensors::tensor::{Metadata, TensorInfo};

use super::io::{
    CHUNK_BYTES, Input, as_entries, from_le, io_error, open, write_atomically, write_le,
};
use crate::{DType, Error, NDArray, Result, dispatch_any};

/// The function named in errors while reading.
const OP: &str = "load_safetensors";

/// The longest header read, as the `safetensors` crate's own reader
/// allows.
const MAX_HEADER_BYTES: u64 = 100_000_000;

/// The key of the header's free-form metadata, which no tensor may have.
const METADATA_KEY: &str = "__metadata__";

const SUPPORTED: &str = "supported: F32, F64, F16, BF16, I32, I64, U8";

fn to_dtype(d: Dtype) -> Option<DType> {
    Some(match d {
        Dtype::F32 => DType::F32,
        Dtype::F64 => DType::F64,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::I32 => DType::I32,
        Dtype::I64 => DType::I64,
        Dtype::U8 => DType::U8,
        _ => return None,
    })
}

fn from_dtype(d: DType) -> Dtype {
    match d {
        DType::F32 => Dtype::F32,
        DType::F64 => Dtype::F64,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::I32 => Dtype::I32,
        DType::I64 => Dtype::I64,
        DType::U8 => Dtype::U8,
    }
}

/// Reads a whole file: header, then each tensor's data into its array.
fn read_file<R: Read>(inp: &mut Input<R>) -> Result<Vec<(String, NDArray)>> {
    let n = inp.u64("the header length")?;
    if n > MAX_HEADER_BYTES {
        return Err(inp.error(format!(
            "header length {n} exceeds the limit of {MAX_HEADER_BYTES} bytes"
        )));
    }
    let header = inp.bytes(n, "the header")?;
    let metadata: Metadata = serde_json::from_slice(&header)
        .map_err(|e| inp.error(format!("not a safetensors header: {e}")))?;
    drop(header);
    let data_len = metadata.data_len() as u64;
    inp.check_left(data_len, "the data the header describes")?;
    // The crate's own reader insists the data ends the file.
    if let Some(left) = inp.left()
        && left > data_len
    {
        return Err(inp.error(format!(
            "{} bytes follow the {data_len} bytes of data the header describes; \
             the data must end the file",
            left - data_len
        )));
    }
    let mut out = Vec::new();
    for name in metadata.offset_keys() {
        let Some(info) = metadata.info(&name) else {
            continue;
        };
        let array = read_tensor(inp, &name, info)?;
        out.try_reserve(1)
            .map_err(|e| inp.error(format!("cannot allocate the list of tensors: {e}")))?;
        out.push((name, array));
    }
    if !inp.sized() && !inp.at_end()? {
        return Err(inp.error(format!(
            "bytes follow the data, which should end the stream at byte {}",
            inp.position()
        )));
    }
    Ok(out)
}

/// Reads one tensor's data (the header checked its size against its
/// offsets) into a new array.
fn read_tensor<R: Read>(inp: &mut Input<R>, name: &str, info: &TensorInfo) -> Result<NDArray> {
    let dtype = to_dtype(info.dtype).ok_or_else(|| {
        inp.error(format!(
            "tensor `{name}`: dtype {:?} has no simpleop dtype; {SUPPORTED}",
            info.dtype
        ))
    })?;
    let shape = crate::Shape::new(info.shape.clone());
    let what = format!("tensor `{name}` ({shape} {dtype})");
    let (start, end) = info.data_offsets;
    let bytes = end.saturating_sub(start);
    if end < start || shape.bytes(dtype.size()) != Some(bytes) {
        return Err(inp.error(format!("{what}: its offsets span {bytes} bytes")));
    }
    let raw = if inp.sized() {
        None
    } else {
        Some(inp.bytes(bytes as u64, &what)?)
    };
    let mut a = NDArray::for_overwrite(OP, shape.clone(), dtype).map_err(|_| {
        Error::alloc(
            OP,
            format!(
                "tensor `{name}` of `{}`, shape {shape} ({dtype})",
                inp.path()
            ),
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

/// Checks the names, builds and serialises the header, and writes it and
/// the data. Tensors are laid out as the `safetensors` crate lays them out
/// (by dtype, widest first, then by name), so files match its own.
fn write_file(w: &mut impl Write, entries: &[(&str, &NDArray)], path: &str) -> Result<()> {
    let err = |e: std::io::Error| io_error("save_safetensors", path, e);
    let mut seen = HashSet::new();
    for (name, _) in entries {
        if *name == METADATA_KEY {
            return Err(io_error(
                "save_safetensors",
                path,
                format!(
                    "`{METADATA_KEY}` is reserved for the header's metadata, not a tensor name"
                ),
            ));
        }
        if !seen.insert(*name) {
            return Err(io_error(
                "save_safetensors",
                path,
                format!("tensor name `{name}` is given twice"),
            ));
        }
    }
    let mut order: Vec<&(&str, &NDArray)> = entries.iter().collect();
    order.sort_by(|(ln, la), (rn, ra)| {
        from_dtype(ra.dtype())
            .cmp(&from_dtype(la.dtype()))
            .then(ln.cmp(rn))
    });
    let mut infos = Vec::with_capacity(order.len());
    let mut offset = 0usize;
    for (name, a) in &order {
        let bytes = a.size() * a.dtype().size();
        infos.push((
            (*name).to_owned(),
            TensorInfo {
                dtype: from_dtype(a.dtype()),
                shape: a.shape().dims().to_vec(),
                data_offsets: (offset, offset + bytes),
            },
        ));
        offset += bytes;
    }
    let metadata = Metadata::new(None, infos).map_err(|e| {
        io_error(
            "save_safetensors",
            path,
            format!("cannot build the header: {e}"),
        )
    })?;
    let mut header = serde_json::to_vec(&metadata).map_err(|e| {
        io_error(
            "save_safetensors",
            path,
            format!("cannot write the header: {e}"),
        )
    })?;
    // The data starts 8-byte aligned, as the crate writes it.
    header.resize(header.len().next_multiple_of(8), b' ');
    w.write_all(&(header.len() as u64).to_le_bytes())
        .map_err(err)?;
    w.write_all(&header).map_err(err)?;
    for (_, a) in &order {
        dispatch_any!(a.dtype(), T => write_le::<T>(w, a.as_slice::<T>()?)).map_err(err)?;
    }
    Ok(())
}

impl NDArray {
    /// Reads a safetensors file: every tensor, in the file's (offset)
    /// order, with its name. F32, F64, F16, BF16, I32, I64 and U8 tensors
    /// load; other dtypes are an error naming the tensor. The header (at
    /// most 100 MB, as the `safetensors` crate allows) is validated before
    /// any array is allocated, and the data it describes must end the file.
    pub fn load_safetensors(path: impl AsRef<Path>) -> Result<Vec<(String, NDArray)>> {
        let path = path.as_ref();
        let (file, len) = open(path, OP)?;
        let name = path.display().to_string();
        read_file(&mut Input::new(BufReader::new(file), OP, &name, len))
    }

    /// [`NDArray::load_safetensors`] from a stream, read in 64 KiB chunks.
    pub fn read_safetensors(r: impl Read) -> Result<Vec<(String, NDArray)>> {
        read_file(&mut Input::new(r, OP, "<stream>", None))
    }

    /// [`NDArray::load_safetensors`] from bytes in memory.
    pub fn read_safetensors_bytes(bytes: &[u8]) -> Result<Vec<(String, NDArray)>> {
        let len = Some(bytes.len() as u64);
        read_file(&mut Input::new(bytes, OP, "<bytes>", len))
    }

    /// Writes `entries` as a safetensors file. Names must be unique and
    /// not `__metadata__`. The format keeps no order: tensors are stored
    /// by dtype, then name, as the `safetensors` crate stores them. Written
    /// to a temporary file beside `path` and renamed over it when
    /// complete: an error leaves `path` as it was.
    pub fn save_safetensors<S: AsRef<str>, A: Borrow<NDArray>>(
        path: impl AsRef<Path>,
        entries: &[(S, A)],
    ) -> Result<()> {
        let entries = as_entries(entries);
        write_atomically(path.as_ref(), "save_safetensors", |w, name| {
            write_file(w, &entries, name)
        })
    }

    /// [`NDArray::save_safetensors`] to a stream.
    pub fn write_safetensors<S: AsRef<str>, A: Borrow<NDArray>>(
        mut w: impl Write,
        entries: &[(S, A)],
    ) -> Result<()> {
        let entries = as_entries(entries);
        write_file(&mut w, &entries, "<stream>")?;
        w.flush()
            .map_err(|e| io_error("save_safetensors", "<stream>", e))
    }
}
