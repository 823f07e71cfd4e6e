//! NumPy `.npy` files, read and written with the `npyz` crate.
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

use npyz::{Order, TypeChar, WriterBuilder};

use crate::{DType, Element, Error, NDArray, Result, Shape, f16};

/// An I/O or format error of `op`, with the file (or stream) it concerns.
fn io_error(op: &str, path: &str, e: impl std::fmt::Display) -> Error {
    Error::Io {
        op: op.into(),
        path: path.into(),
        reason: e.to_string(),
    }
}

/// The simpleop dtype of a NumPy plain dtype, if supported.
fn dtype_of(descr: &npyz::DType) -> Option<DType> {
    let npyz::DType::Plain(ts) = descr else {
        return None;
    };
    match (ts.type_char(), ts.size_field()) {
        (TypeChar::Float, 4) => Some(DType::F32),
        (TypeChar::Float, 8) => Some(DType::F64),
        (TypeChar::Float, 2) => Some(DType::F16),
        (TypeChar::Int, 4) => Some(DType::I32),
        (TypeChar::Int, 8) => Some(DType::I64),
        (TypeChar::Uint, 1) => Some(DType::U8),
        _ => None,
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

fn read_typed<T: Element + npyz::Deserialize, R: Read>(
    file: npyz::NpyFile<R>,
    dims: Vec<usize>,
    fortran: bool,
    path: &str,
) -> Result<NDArray> {
    let data: Vec<T> = file.into_vec().map_err(|e| io_error("load_npy", path, e))?;
    let data = if fortran {
        fortran_to_c(data, &dims)
    } else {
        data
    };
    NDArray::from_vec(data, Shape::new(dims))
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
        let file = File::open(path).map_err(|e| io_error("load_npy", &name, e))?;
        Self::read_npy_named(BufReader::new(file), &name)
    }

    /// Writes the array in `.npy` format to `w`.
    pub fn write_npy(&self, w: impl Write) -> Result<()> {
        self.write_npy_named(w, "<stream>")
    }

    /// Reads an array in `.npy` format from `r`.
    pub fn read_npy(r: impl Read) -> Result<NDArray> {
        Self::read_npy_named(r, "<stream>")
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

    fn read_npy_named(r: impl Read, path: &str) -> Result<NDArray> {
        let file = npyz::NpyFile::new(r).map_err(|e| io_error("load_npy", path, e))?;
        let descr = file.dtype();
        let dtype = dtype_of(&descr).ok_or_else(|| {
            io_error(
                "load_npy",
                path,
                format!(
                    "unsupported NumPy dtype `{}`; supported: float32, float64, float16, \
                     int32, int64, uint8",
                    descr.descr().trim_matches('\'')
                ),
            )
        })?;
        let mut dims = Vec::with_capacity(file.shape().len());
        for &d in file.shape() {
            let d = usize::try_from(d)
                .map_err(|_| io_error("load_npy", path, format!("dimension {d} is too large")))?;
            dims.push(d);
        }
        let fortran = file.order() == Order::Fortran;
        match dtype {
            DType::F32 => read_typed::<f32, _>(file, dims, fortran, path),
            DType::F64 => read_typed::<f64, _>(file, dims, fortran, path),
            DType::F16 => read_typed::<f16, _>(file, dims, fortran, path),
            DType::I32 => read_typed::<i32, _>(file, dims, fortran, path),
            DType::I64 => read_typed::<i64, _>(file, dims, fortran, path),
            DType::U8 => read_typed::<u8, _>(file, dims, fortran, path),
            DType::BF16 => unreachable!("dtype_of never yields bfloat16"),
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
}
