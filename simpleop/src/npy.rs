//! NumPy `.npy` files: read by the parser here (which checks the header
//! and the data size before allocating; see [`MAX_HEADER_BYTES`]), written
//! with the `npyz` crate.
//!
//! Reading is our own because `npyz` 0.8 could not be made safe on hostile
//! files from outside: a shape whose element count overflows panics inside
//! it (debug) or wraps (release), and a v2 header's length field makes it
//! allocate up to 4 GiB for a 12-byte file before failing.
//!
//! Supported dtypes: float32, float64, float16, int32, int64 and uint8, in
//! either byte order and either axis order (Fortran-order files are
//! reordered on load). `bfloat16` has no NumPy dtype, so saving one is an
//! error rather than a silent change of dtype: convert with
//! `astype(DType::F32)` first. Files are always written little-endian,
//! C-order.
//!
//! ```
//! use simpleop::{DType, NDArray};
//! # fn main() -> simpleop::Result<()> {
//! let x = NDArray::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3])?;
//! let mut bytes = Vec::new();
//! x.write_npy(&mut bytes)?;
//! let y = NDArray::read_npy(&bytes[..])?;
//! assert_eq!(y, x);
//! // bfloat16 has no NumPy dtype: an error, not a silent conversion.
//! assert!(x.astype(DType::BF16).write_npy(&mut Vec::new()).is_err());
//! # Ok(()) }
//! ```

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

use npyz::WriterBuilder;

use crate::{DType, Element, Error, NDArray, Result, Shape, f16};

/// An I/O or format error of `op`, with the file (or stream) it concerns.
fn io_error(op: &str, path: &str, e: impl std::fmt::Display) -> Error {
    Error::Io {
        op: op.into(),
        path: path.into(),
        reason: e.to_string(),
    }
}

/// The longest `.npy` header read, in bytes. NumPy writes headers of a few
/// hundred bytes and refuses to read ones over 10 000 by default; the cap
/// stops a v2/v3 header's 32-bit length from making a tiny file allocate
/// up to 4 GiB.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// The most dimensions a file may have (NumPy 2's limit).
const MAX_NDIM: usize = 64;

/// Bytes of data read (and decoded) at a time, so that a stream whose
/// header promises more than it holds costs only what it really holds.
const CHUNK_BYTES: usize = 64 * 1024;

const SUPPORTED: &str = "supported: float32, float64, float16, int32, int64, uint8";

/// What a `.npy` header says about the data after it.
#[derive(Debug)]
struct Header {
    dtype: DType,
    big_endian: bool,
    fortran: bool,
    dims: Vec<usize>,
    /// Bytes of data: the element count times the element size, checked
    /// to fit `isize`.
    data_bytes: usize,
    /// Bytes before the data (magic, version, length and header).
    data_offset: u64,
}

/// Reads and validates the magic, version and header of a `.npy` stream,
/// leaving `r` at the first data byte.
fn read_header(r: &mut impl Read) -> std::result::Result<Header, String> {
    let mut pre = [0u8; 8];
    r.read_exact(&mut pre)
        .map_err(|e| format!("not a .npy file (too short: {e})"))?;
    if &pre[..6] != b"\x93NUMPY" {
        return Err("not a .npy file (no \\x93NUMPY magic)".into());
    }
    let len = match pre[6] {
        1 => {
            let mut b = [0u8; 2];
            r.read_exact(&mut b)
                .map_err(|e| format!("header length: {e}"))?;
            usize::from(u16::from_le_bytes(b))
        }
        2 | 3 => {
            let mut b = [0u8; 4];
            r.read_exact(&mut b)
                .map_err(|e| format!("header length: {e}"))?;
            usize::try_from(u32::from_le_bytes(b)).unwrap_or(usize::MAX)
        }
        v => return Err(format!("unsupported .npy version {v}.{}", pre[7])),
    };
    if len > MAX_HEADER_BYTES {
        return Err(format!(
            "header length {len} exceeds the limit of {MAX_HEADER_BYTES} bytes"
        ));
    }
    // `len` is at most 64 KiB, so this allocation is small.
    let mut text = vec![0u8; len];
    r.read_exact(&mut text)
        .map_err(|e| format!("header of {len} bytes is cut short: {e}"))?;
    let prefix = if pre[6] == 1 { 10 } else { 12 };
    let mut h = parse_header(&text)?;
    h.data_offset = (prefix + len) as u64;
    Ok(h)
}

/// Parses the header dict (`{'descr': '<f4', 'fortran_order': False,
/// 'shape': (2, 3), }`) and checks the data size it implies.
fn parse_header(text: &[u8]) -> std::result::Result<Header, String> {
    let mut p = Lit::parser(text);
    let dict = p.value(0)?;
    p.end()?;
    let Lit::Dict(entries) = dict else {
        return Err("header is not a dict".into());
    };
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    for (key, value) in entries {
        match key {
            Lit::Str(k) if k == "descr" => descr = Some(value),
            Lit::Str(k) if k == "fortran_order" => fortran = Some(value),
            Lit::Str(k) if k == "shape" => shape = Some(value),
            other => return Err(format!("unexpected header key {other:?}")),
        }
    }
    let missing = |k: &str| format!("header has no `{k}`");
    let (dtype, big_endian) = parse_descr(&descr.ok_or_else(|| missing("descr"))?)?;
    let fortran = match fortran.ok_or_else(|| missing("fortran_order"))? {
        Lit::Bool(b) => b,
        other => return Err(format!("`fortran_order` is {other:?}, not True or False")),
    };
    let dims = parse_shape(shape.ok_or_else(|| missing("shape"))?)?;
    let data_bytes = Shape::new(dims.clone())
        .bytes(dtype.size())
        .ok_or_else(|| {
            format!(
                "shape {dims:?} of {} holds more than isize::MAX bytes",
                dtype.name()
            )
        })?;
    Ok(Header {
        dtype,
        big_endian,
        fortran,
        dims,
        data_bytes,
        data_offset: 0,
    })
}

/// The dtype and byte order (`true` for big-endian) of a `descr`.
fn parse_descr(descr: &Lit) -> std::result::Result<(DType, bool), String> {
    let Lit::Str(s) = descr else {
        return Err(format!(
            "unsupported NumPy dtype (structured: {descr:?}); {SUPPORTED}"
        ));
    };
    let (order, code) = match s.as_bytes().first() {
        Some(b'<' | b'>' | b'|' | b'=') => s.split_at(1),
        _ => ("=", s.as_str()),
    };
    let dtype = match code {
        "f4" => DType::F32,
        "f8" => DType::F64,
        "f2" => DType::F16,
        "i4" => DType::I32,
        "i8" => DType::I64,
        "u1" => DType::U8,
        _ => return Err(format!("unsupported NumPy dtype `{s}`; {SUPPORTED}")),
    };
    let big = match order {
        ">" => true,
        "=" => cfg!(target_endian = "big"),
        "|" if dtype.size() > 1 => return Err(format!("dtype `{s}` has no byte order")),
        _ => false,
    };
    Ok((dtype, big))
}

/// The dimensions of a `shape` tuple.
fn parse_shape(shape: Lit) -> std::result::Result<Vec<usize>, String> {
    let Lit::Tuple(items) = shape else {
        return Err(format!("`shape` is {shape:?}, not a tuple"));
    };
    if items.len() > MAX_NDIM {
        return Err(format!(
            "shape has {} dimensions; at most {MAX_NDIM} are supported",
            items.len()
        ));
    }
    items
        .into_iter()
        .map(|d| match d {
            Lit::Int(digits) => digits.parse::<usize>().map_err(|_| {
                format!("shape dimension {digits} is not an integer in 0..=usize::MAX")
            }),
            other => Err(format!("shape dimension {other:?} is not an integer")),
        })
        .collect()
}

/// A Python literal, as far as `.npy` headers use them.
#[derive(Debug)]
enum Lit {
    Str(String),
    Bool(bool),
    None,
    /// The digits (and sign) of an integer, parsed where it is used.
    Int(String),
    Tuple(Vec<Lit>),
    Dict(Vec<(Lit, Lit)>),
}

/// A recursive-descent parser over header bytes.
struct LitParser<'a> {
    s: &'a [u8],
    at: usize,
}

/// Nesting deeper than this (structured dtypes nest a few levels) is an
/// error rather than a risk to the stack.
const MAX_DEPTH: usize = 16;

impl Lit {
    fn parser(s: &[u8]) -> LitParser<'_> {
        LitParser { s, at: 0 }
    }
}

impl LitParser<'_> {
    fn peek(&mut self) -> Option<u8> {
        while self.s.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
        self.s.get(self.at).copied()
    }

    fn end(&mut self) -> std::result::Result<(), String> {
        match self.peek() {
            None => Ok(()),
            Some(c) => Err(self.unexpected(c)),
        }
    }

    fn unexpected(&self, c: u8) -> String {
        format!("header: unexpected {:?} at byte {}", c as char, self.at)
    }

    /// Bytes while `keep` holds, from the current position.
    fn run(&mut self, keep: impl Fn(u8) -> bool) -> &[u8] {
        let start = self.at;
        while self.s.get(self.at).is_some_and(|&c| keep(c)) {
            self.at += 1;
        }
        &self.s[start..self.at]
    }

    fn value(&mut self, depth: usize) -> std::result::Result<Lit, String> {
        if depth > MAX_DEPTH {
            return Err(format!("header nests deeper than {MAX_DEPTH} levels"));
        }
        let Some(c) = self.peek() else {
            return Err("header ends inside a value".into());
        };
        match c {
            b'\'' | b'"' => self.string(c),
            b'(' => self.sequence(b')', depth),
            b'[' => self.sequence(b']', depth),
            b'{' => self.dict(depth),
            b'-' | b'0'..=b'9' => {
                self.at += 1;
                let digits = self.run(|c| c.is_ascii_digit());
                let int = format!("{}{}", c as char, String::from_utf8_lossy(digits));
                // Python 2 wrote longs as `3L`.
                if self.s.get(self.at) == Some(&b'L') {
                    self.at += 1;
                }
                Ok(Lit::Int(int))
            }
            _ => match self.run(|c| c.is_ascii_alphanumeric() || c == b'_') {
                b"True" => Ok(Lit::Bool(true)),
                b"False" => Ok(Lit::Bool(false)),
                b"None" => Ok(Lit::None),
                _ => Err(self.unexpected(c)),
            },
        }
    }

    /// A tuple or list (both become `Lit::Tuple`), from its open bracket.
    fn sequence(&mut self, close: u8, depth: usize) -> std::result::Result<Lit, String> {
        self.at += 1;
        let mut items = Vec::new();
        while !self.at_close(close)? {
            items.push(self.value(depth + 1)?);
            self.after_item(close)?;
        }
        Ok(Lit::Tuple(items))
    }

    /// A dict, from its `{`.
    fn dict(&mut self, depth: usize) -> std::result::Result<Lit, String> {
        self.at += 1;
        let mut entries = Vec::new();
        while !self.at_close(b'}')? {
            let key = self.value(depth + 1)?;
            match self.peek() {
                Some(b':') => self.at += 1,
                Some(c) => return Err(self.unexpected(c)),
                None => return Err("header ends inside a dict".into()),
            }
            entries.push((key, self.value(depth + 1)?));
            self.after_item(b'}')?;
        }
        Ok(Lit::Dict(entries))
    }

    /// At the `close` bracket (consumed): true. Otherwise false, for an
    /// item to follow.
    fn at_close(&mut self, close: u8) -> std::result::Result<bool, String> {
        match self.peek() {
            Some(c) if c == close => {
                self.at += 1;
                Ok(true)
            }
            Some(_) => Ok(false),
            None => Err("header ends inside a bracket".into()),
        }
    }

    /// After an item: a `,` (consumed) or the `close` bracket (left).
    fn after_item(&mut self, close: u8) -> std::result::Result<(), String> {
        match self.peek() {
            Some(b',') => {
                self.at += 1;
                Ok(())
            }
            Some(c) if c == close => Ok(()),
            Some(c) => Err(self.unexpected(c)),
            None => Err("header ends inside a bracket".into()),
        }
    }

    fn string(&mut self, quote: u8) -> std::result::Result<Lit, String> {
        self.at += 1;
        let mut out = String::new();
        loop {
            match self.s.get(self.at) {
                None => return Err("header ends inside a string".into()),
                Some(&c) if c == quote => break,
                // An escape: keep the escaped byte as it is.
                Some(b'\\') => self.at += 1,
                // Latin-1 (v1/v2 headers); v3's UTF-8 only matters in
                // field names, which are not supported anyway.
                Some(&c) => {
                    out.push(c as char);
                    self.at += 1;
                }
            }
        }
        self.at += 1;
        Ok(Lit::Str(out))
    }
}

/// `data` laid out with the axes of `shape` reversed (a Fortran-order file
/// read as C order), rearranged into C order for `shape`.
fn fortran_to_c<T: Copy>(data: Vec<T>, shape: &[usize]) -> Vec<T> {
    let n = data.len();
    let nd = shape.len();
    if nd < 2 || n == 0 {
        return data;
    }
    // Fortran strides: axis 0 is contiguous.
    let mut strides = vec![1usize; nd];
    for k in 1..nd {
        strides[k] = strides[k - 1] * shape[k - 1];
    }
    let mut out = Vec::with_capacity(n);
    let mut index = vec![0usize; nd];
    for _ in 0..n {
        let src: usize = index.iter().zip(&strides).map(|(i, s)| i * s).sum();
        out.push(data[src]);
        // Advance the C-order multi-index, last axis fastest.
        for k in (0..nd).rev() {
            index[k] += 1;
            if index[k] < shape[k] {
                break;
            }
            index[k] = 0;
        }
    }
    out
}

/// An element type `.npy` data decodes to.
trait NpyElement: Sized {
    fn decode(bytes: &[u8], big_endian: bool) -> Self;
}

macro_rules! npy_element {
    ($($t:ty),*) => {$(
        impl NpyElement for $t {
            fn decode(bytes: &[u8], big_endian: bool) -> Self {
                let mut b = [0u8; size_of::<$t>()];
                b.copy_from_slice(bytes);
                if big_endian { <$t>::from_be_bytes(b) } else { <$t>::from_le_bytes(b) }
            }
        }
    )*};
}
npy_element!(f32, f64, i32, i64, u8, u16);

impl NpyElement for f16 {
    fn decode(bytes: &[u8], big_endian: bool) -> Self {
        f16::from_bits(u16::decode(bytes, big_endian))
    }
}

/// Reads and decodes the data `h` describes, `CHUNK_BYTES` at a time: the
/// array grows only as bytes arrive, so a header that promises more than
/// the stream holds fails at its end. `sized` says the caller checked the
/// data is there, which allows reserving it all at once.
fn read_data<T: NpyElement + Element>(
    r: &mut impl Read,
    h: &Header,
    sized: bool,
    path: &str,
) -> Result<NDArray> {
    let size = size_of::<T>();
    let alloc_err = |e| io_error("load_npy", path, format!("cannot allocate the data: {e}"));
    let mut data: Vec<T> = Vec::new();
    if sized {
        data.try_reserve_exact(h.data_bytes / size)
            .map_err(alloc_err)?;
    }
    let mut buf = vec![0u8; CHUNK_BYTES.min(h.data_bytes)];
    let mut done = 0;
    while done < h.data_bytes {
        let chunk = &mut buf[..(h.data_bytes - done).min(CHUNK_BYTES)];
        r.read_exact(chunk).map_err(|e| {
            io_error(
                "load_npy",
                path,
                format!(
                    "the data ends before the {} bytes that shape {:?} of {} needs ({e})",
                    h.data_bytes,
                    h.dims,
                    h.dtype.name()
                ),
            )
        })?;
        data.try_reserve(chunk.len() / size).map_err(alloc_err)?;
        data.extend(chunk.chunks_exact(size).map(|b| T::decode(b, h.big_endian)));
        done += chunk.len();
    }
    let data = if h.fortran {
        fortran_to_c(data, &h.dims)
    } else {
        data
    };
    NDArray::from_vec(data, Shape::new(h.dims.clone()))
}

fn write_typed<T: Element + npyz::AutoSerialize, W: Write>(
    x: &NDArray,
    w: W,
    path: &str,
) -> Result<()> {
    let shape: Vec<u64> = x.shape().dims().iter().map(|&d| d as u64).collect();
    let err = |e| io_error("save_npy", path, e);
    let mut writer = npyz::WriteOptions::new()
        .default_dtype()
        .shape(&shape)
        .writer(w)
        .begin_nd()
        .map_err(err)?;
    writer
        .extend(x.as_slice::<T>()?.iter().copied())
        .map_err(err)?;
    writer.finish().map_err(err)
}

impl NDArray {
    /// Writes the array to a `.npy` file at `path` (little-endian,
    /// C-order). `bfloat16` arrays are an error (NumPy has no such dtype).
    pub fn save_npy(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let name = path.display().to_string();
        self.check_npy_dtype()?;
        let file = File::create(path).map_err(|e| io_error("save_npy", &name, e))?;
        let mut w = BufWriter::new(file);
        self.write_npy_named(&mut w, &name)?;
        w.flush().map_err(|e| io_error("save_npy", &name, e))
    }

    /// Reads an array from the `.npy` file at `path`.
    pub fn load_npy(path: impl AsRef<Path>) -> Result<NDArray> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let err = |e| io_error("load_npy", &name, e);
        let file = File::open(path).map_err(err)?;
        let meta = file.metadata().map_err(err)?;
        // Only a regular file's length says how much data there is.
        let available = meta.is_file().then_some(meta.len());
        Self::read_npy_named(BufReader::new(file), &name, available)
    }

    /// Writes the array in `.npy` format to `w`.
    pub fn write_npy(&self, w: impl Write) -> Result<()> {
        self.write_npy_named(w, "<stream>")
    }

    /// Reads an array in `.npy` format from `r`.
    pub fn read_npy(r: impl Read) -> Result<NDArray> {
        Self::read_npy_named(r, "<stream>", None)
    }

    fn check_npy_dtype(&self) -> Result<()> {
        match self.dtype() {
            DType::BF16 => Err(Error::DTypeMismatch {
                op: "save_npy".into(),
                arg: "array".into(),
                expected: "a dtype NumPy has (float32, float64, float16, int32, int64, uint8); \
                           convert bfloat16 with astype(DType::F32)"
                    .into(),
                got: DType::BF16,
            }),
            _ => Ok(()),
        }
    }

    fn write_npy_named(&self, w: impl Write, path: &str) -> Result<()> {
        self.check_npy_dtype()?;
        match self.dtype() {
            DType::F32 => write_typed::<f32, _>(self, w, path),
            DType::F64 => write_typed::<f64, _>(self, w, path),
            DType::F16 => write_typed::<f16, _>(self, w, path),
            DType::I32 => write_typed::<i32, _>(self, w, path),
            DType::I64 => write_typed::<i64, _>(self, w, path),
            DType::U8 => write_typed::<u8, _>(self, w, path),
            DType::BF16 => unreachable!("rejected by check_npy_dtype"),
        }
    }

    /// Reads the header, checks the data it implies is within `available`
    /// bytes when that is known (a regular file), then reads the data.
    fn read_npy_named(mut r: impl Read, path: &str, available: Option<u64>) -> Result<NDArray> {
        let h = read_header(&mut r).map_err(|e| io_error("load_npy", path, e))?;
        if let Some(len) = available {
            let have = len.saturating_sub(h.data_offset);
            if have < h.data_bytes as u64 {
                return Err(io_error(
                    "load_npy",
                    path,
                    format!(
                        "shape {:?} of {} needs {} bytes of data but the file has {have}",
                        h.dims,
                        h.dtype.name(),
                        h.data_bytes
                    ),
                ));
            }
        }
        let sized = available.is_some();
        match h.dtype {
            DType::F32 => read_data::<f32>(&mut r, &h, sized, path),
            DType::F64 => read_data::<f64>(&mut r, &h, sized, path),
            DType::F16 => read_data::<f16>(&mut r, &h, sized, path),
            DType::I32 => read_data::<i32>(&mut r, &h, sized, path),
            DType::I64 => read_data::<i64>(&mut r, &h, sized, path),
            DType::U8 => read_data::<u8>(&mut r, &h, sized, path),
            DType::BF16 => unreachable!("parse_descr never yields bfloat16"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(x: &NDArray) -> NDArray {
        let mut bytes = Vec::new();
        x.write_npy(&mut bytes).unwrap();
        NDArray::read_npy(&bytes[..]).unwrap()
    }

    #[test]
    fn every_supported_dtype_round_trips_bit_for_bit() {
        let values = [0.0, 1.0, -2.5, 3.0, 100.0, -7.0];
        for dtype in [DType::F32, DType::F64, DType::F16] {
            let x = NDArray::from_f64(&values, [2, 3], dtype).unwrap();
            let y = round_trip(&x);
            assert_eq!(y.dtype(), dtype);
            assert_eq!(y.shape(), x.shape());
            assert_eq!(y.to_f64_vec(), values);
        }
        let i = NDArray::from_vec(vec![i32::MIN, -1, 0, i32::MAX], [4]).unwrap();
        assert_eq!(
            round_trip(&i).to_vec::<i32>().unwrap(),
            i.to_vec::<i32>().unwrap()
        );
        let l = NDArray::from_vec(vec![i64::MIN, 5, i64::MAX], [3, 1]).unwrap();
        let l2 = round_trip(&l);
        assert_eq!(l2.shape().dims(), [3, 1]);
        assert_eq!(l2.to_vec::<i64>().unwrap(), l.to_vec::<i64>().unwrap());
        let u = NDArray::from_vec(vec![0u8, 7, 255], [3]).unwrap();
        assert_eq!(round_trip(&u).to_vec::<u8>().unwrap(), [0, 7, 255]);
        // NaN survives bit for bit, and so does a 0-d array.
        let nan = NDArray::from_vec(vec![f32::NAN], Shape::new(vec![])).unwrap();
        let back = round_trip(&nan);
        assert_eq!(back.ndim(), 0);
        assert!(back.to_vec::<f32>().unwrap()[0].is_nan());
    }

    #[test]
    fn files_round_trip_and_missing_files_name_the_path() {
        let dir = std::env::temp_dir().join(format!("simpleop-npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.npy");
        let x = NDArray::from_vec(vec![1.5f64, -2.0, 3.25], [3]).unwrap();
        x.save_npy(&path).unwrap();
        assert_eq!(NDArray::load_npy(&path).unwrap(), x);
        std::fs::remove_dir_all(&dir).unwrap();

        let err = NDArray::load_npy(dir.join("missing.npy")).unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("load_npy: `"), "{msg}");
        assert!(msg.contains("missing.npy"), "{msg}");
    }

    #[test]
    fn bf16_is_refused_with_the_way_out() {
        let x = NDArray::zeros([2], DType::BF16);
        let err = x.write_npy(&mut Vec::new()).unwrap_err();
        assert!(matches!(
            err,
            Error::DTypeMismatch {
                got: DType::BF16,
                ..
            }
        ));
        assert!(err.to_string().contains("astype"), "{err}");
    }

    /// A header written by hand, as NumPy writes it.
    fn npy_bytes(descr: &str, fortran: bool, shape: &str, payload: &[u8]) -> Vec<u8> {
        let mut header = format!(
            "{{'descr': '{descr}', 'fortran_order': {}, 'shape': {shape}, }}",
            if fortran { "True" } else { "False" }
        );
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn big_endian_and_fortran_order_files_load_in_c_order() {
        // [[1, 2, 3], [4, 5, 6]] stored column by column, big-endian i32.
        let payload: Vec<u8> = [1i32, 4, 2, 5, 3, 6]
            .iter()
            .flat_map(|v| v.to_be_bytes())
            .collect();
        let bytes = npy_bytes(">i4", true, "(2, 3)", &payload);
        let x = NDArray::read_npy(&bytes[..]).unwrap();
        assert_eq!(x.shape().dims(), [2, 3]);
        assert_eq!(x.to_vec::<i32>().unwrap(), [1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn bad_files_are_errors_not_panics() {
        let complex = npy_bytes("<c8", false, "(1,)", &[0; 8]);
        let err = NDArray::read_npy(&complex[..]).unwrap_err().to_string();
        assert!(err.contains("unsupported NumPy dtype `<c8`"), "{err}");

        let truncated = npy_bytes("<f4", false, "(4,)", &[0; 7]);
        assert!(matches!(
            NDArray::read_npy(&truncated[..]),
            Err(Error::Io { .. })
        ));
        assert!(matches!(
            NDArray::read_npy(&b"not an npy file"[..]),
            Err(Error::Io { .. })
        ));
    }

    /// A `.npy` file with header `dict` (padded as NumPy pads it) in
    /// format `version` (1, 2 or 3).
    fn npy_versioned(version: u8, dict: &str, payload: &[u8]) -> Vec<u8> {
        let prefix = if version == 1 { 10 } else { 12 };
        let mut header = dict.to_string();
        while !(prefix + header.len() + 1).is_multiple_of(64) {
            header.push(' ');
        }
        header.push('\n');
        let mut out = vec![0x93, b'N', b'U', b'M', b'P', b'Y', version, 0];
        if version == 1 {
            out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        } else {
            out.extend_from_slice(&(header.len() as u32).to_le_bytes());
        }
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(payload);
        out
    }

    /// A reader that records the largest read it was asked for: a reader
    /// cannot see allocations, but a lying header read with `read_exact`
    /// into a buffer of its claimed size shows up here.
    struct Probe<'a> {
        data: &'a [u8],
        largest: usize,
    }

    impl Read for Probe<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.largest = self.largest.max(buf.len());
            self.data.read(buf)
        }
    }

    fn load_err(bytes: &[u8]) -> String {
        NDArray::read_npy(bytes).unwrap_err().to_string()
    }

    #[test]
    fn shapes_whose_size_overflows_are_errors() {
        let big = "(4294967296, 4294967296, 4294967296)";
        let err = load_err(&npy_bytes("<f4", false, big, &[]));
        assert!(err.contains("more than isize::MAX bytes"), "{err}");
        // 2^32 * 2^31 f4 elements: the count fits usize, the bytes do not.
        let err = load_err(&npy_bytes("<f4", true, "(4294967296, 2147483648)", &[]));
        assert!(err.contains("isize::MAX"), "{err}");
        for dim in ["99999999999999999999999", "-1"] {
            let err = load_err(&npy_bytes("<f4", false, &format!("({dim},)"), &[]));
            assert!(err.contains(&format!("dimension {dim} is not")), "{err}");
        }
    }

    #[test]
    fn a_shape_product_that_wraps_is_an_error() {
        // (2^63 + 1) * 2 * 3 wraps to 6 in u64: six elements would then be
        // read and reordered with strides of the real shape.
        let payload = [0u8; 24];
        for fortran in [true, false] {
            let bytes = npy_bytes("<f4", fortran, "(9223372036854775809, 2, 3)", &payload);
            let err = load_err(&bytes);
            assert!(err.contains("isize::MAX"), "{err}");
        }
    }

    #[test]
    fn a_huge_v2_header_length_is_refused_before_reading_it() {
        let mut bytes = b"\x93NUMPY\x02\x00".to_vec();
        bytes.extend_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(bytes.len(), 12);
        let mut probe = Probe {
            data: &bytes,
            largest: 0,
        };
        let err = NDArray::read_npy(&mut probe).unwrap_err().to_string();
        assert!(err.contains("header length 4294967295 exceeds the limit of 65536"));
        assert!(probe.largest <= 8, "asked for {} bytes", probe.largest);
    }

    #[test]
    fn data_shorter_than_the_header_says_is_an_error_naming_both() {
        let bytes = npy_bytes("<f8", false, "(1000,)", &[0; 16]);
        let err = load_err(&bytes);
        assert!(err.contains("ends before the 8000 bytes"), "{err}");
        let dir = std::env::temp_dir().join(format!("simpleop-npy-short-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("short.npy");
        std::fs::write(&path, &bytes).unwrap();
        let err = NDArray::load_npy(&path).unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            err.contains("needs 8000 bytes of data but the file has 16"),
            "{err}"
        );
    }

    #[test]
    fn a_huge_representable_shape_without_data_fails_without_allocating_it() {
        // 2^37 f8 elements: 1 TiB, a valid size for the header to claim.
        let bytes = npy_bytes("<f8", true, "(131072, 1048576)", &[1; 8]);
        let mut probe = Probe {
            data: &bytes,
            largest: 0,
        };
        let start = std::time::Instant::now();
        let err = NDArray::read_npy(&mut probe).unwrap_err().to_string();
        assert!(err.contains("ends before the 1099511627776 bytes"), "{err}");
        assert!(probe.largest <= CHUNK_BYTES, "asked for {}", probe.largest);
        assert!(start.elapsed().as_secs() < 10);
    }

    #[test]
    fn v2_v3_zero_d_empty_and_python2_headers_load() {
        let one = 1.5f32.to_le_bytes();
        for version in [1, 2, 3] {
            let dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (), }";
            let x = NDArray::read_npy(&npy_versioned(version, dict, &one)[..]).unwrap();
            assert_eq!((x.ndim(), x.to_vec::<f32>().unwrap()), (0, vec![1.5]));
        }
        let dict = "{\"descr\": \"|u1\", \"shape\": (2L, 0L), \"fortran_order\": True}";
        let x = NDArray::read_npy(&npy_versioned(2, dict, &[])[..]).unwrap();
        assert_eq!((x.dtype(), x.shape().dims()), (DType::U8, &[2, 0][..]));
    }

    #[test]
    fn malformed_headers_are_errors() {
        let cases = [
            (
                "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,)}",
                "structured",
            ),
            (
                "{'descr': '<f4', 'fortran_order': 0, 'shape': (1,)}",
                "not True or False",
            ),
            ("{'descr': '<f4', 'fortran_order': False}", "no `shape`"),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': 3}",
                "not a tuple",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (1 2)}",
                "unexpected '2'",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}",
                "key",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} junk",
                "unexpected 'j'",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (1,",
                "ends inside",
            ),
            (
                "{'descr': '|f4', 'fortran_order': False, 'shape': (1,)}",
                "no byte order",
            ),
        ];
        for (dict, want) in cases {
            let err = load_err(&npy_versioned(1, dict, &[0; 4]));
            assert!(err.contains(want), "{dict}: {err}");
        }
        let deep = format!("{}{}", "(".repeat(5000), ")".repeat(5000));
        let err = load_err(&npy_versioned(3, &deep, &[]));
        assert!(err.contains("nests deeper than 16"), "{err}");
        let many = format!(
            "{{'descr': '<f4', 'fortran_order': False, 'shape': ({})}}",
            "1,".repeat(65)
        );
        let err = load_err(&npy_versioned(1, &many, &[0; 4]));
        assert!(err.contains("65 dimensions; at most 64"), "{err}");
    }
}
