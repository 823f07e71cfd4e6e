//! What both weight formats share: a reader that knows how many bytes its
//! input still holds (so that no size read from a file is allocated before
//! the bytes behind it are known to exist), and a writer that replaces a
//! file only once the new one is complete.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use std::borrow::Borrow;

use crate::{Element, Error, NDArray, Result};

/// Bytes read at a time when the input's length is unknown (a stream), so
/// that a header promising more than the stream holds costs only what it
/// really holds.
pub(super) const CHUNK_BYTES: usize = 64 * 1024;

/// An I/O or format error of `op` (`load_params`, ...) about `path`.
pub(super) fn io_error(op: &str, path: &str, reason: impl std::fmt::Display) -> Error {
    Error::Io {
        op: op.into(),
        path: path.into(),
        reason: reason.to_string(),
    }
}

/// A file opened for reading, and its length when it is a regular file
/// (only then does the length say how much data there is).
pub(super) fn open(path: &Path, op: &str) -> Result<(File, Option<u64>)> {
    let name = path.display().to_string();
    let file = File::open(path).map_err(|e| io_error(op, &name, e))?;
    let meta = file.metadata().map_err(|e| io_error(op, &name, e))?;
    let len = meta.is_file().then_some(meta.len());
    Ok((file, len))
}

/// A reader that counts what it reads and, when the input's length is
/// known, refuses any read or allocation larger than what is left.
pub(super) struct Input<R> {
    r: R,
    /// Bytes read so far: error messages give positions.
    at: u64,
    /// The input's length, when known.
    len: Option<u64>,
    op: &'static str,
    path: String,
}

impl<R: Read> Input<R> {
    /// Reads `r` for `op`; `path` names it in errors, `len` is its length
    /// if known.
    pub(super) fn new(r: R, op: &'static str, path: &str, len: Option<u64>) -> Self {
        Input {
            r,
            at: 0,
            len,
            op,
            path: path.to_owned(),
        }
    }

    /// A format error at the current position.
    pub(super) fn error(&self, reason: impl std::fmt::Display) -> Error {
        io_error(self.op, &self.path, reason)
    }

    /// Whether the input's length is known (then [`Input::check_left`]
    /// has already refused anything larger than the input).
    pub(super) fn sized(&self) -> bool {
        self.len.is_some()
    }

    /// The input's name in errors: its path, or `<stream>`.
    pub(super) fn path(&self) -> &str {
        &self.path
    }

    /// Bytes left, when the input's length is known.
    pub(super) fn left(&self) -> Option<u64> {
        self.len.map(|len| len.saturating_sub(self.at))
    }

    /// Whether the input has nothing more (reads one byte to find out).
    pub(super) fn at_end(&mut self) -> Result<bool> {
        let mut probe = [0u8; 1];
        loop {
            match self.r.read(&mut probe) {
                Ok(n) => return Ok(n == 0),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(self.error(format!("cannot read: {e}"))),
            }
        }
    }

    /// Bytes read so far.
    pub(super) fn position(&self) -> u64 {
        self.at
    }

    /// An error unless `n` more bytes may be there: always true for a
    /// stream of unknown length (its reads then fail where it ends).
    pub(super) fn check_left(&self, n: u64, what: &str) -> Result<()> {
        if let Some(left) = self.left()
            && n > left
        {
            return Err(self.error(format!(
                "{what} needs {n} bytes at byte {} but the file has {left} left",
                self.at
            )));
        }
        Ok(())
    }

    /// Fills `buf`, or fails naming `what` and where the input ended.
    pub(super) fn fill(&mut self, buf: &mut [u8], what: &str) -> Result<()> {
        match self.r.read_exact(buf) {
            Ok(()) => {
                self.at += buf.len() as u64;
                Ok(())
            }
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => Err(self.error(format!(
                "the file ends inside {what} (at or after byte {})",
                self.at
            ))),
            Err(e) => Err(self.error(format!("cannot read {what}: {e}"))),
        }
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let mut b = [0u8; N];
        self.fill(&mut b, what)?;
        Ok(b)
    }

    /// A little-endian `u32`.
    pub(super) fn u32(&mut self, what: &str) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }

    /// A little-endian `i32`.
    pub(super) fn i32(&mut self, what: &str) -> Result<i32> {
        self.array(what).map(i32::from_le_bytes)
    }

    /// A little-endian `u64`.
    pub(super) fn u64(&mut self, what: &str) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// A little-endian `i64`.
    pub(super) fn i64(&mut self, what: &str) -> Result<i64> {
        self.array(what).map(i64::from_le_bytes)
    }

    /// The next `n` bytes. Checked against what is left when that is
    /// known, else read `CHUNK_BYTES` at a time, so memory grows only with
    /// bytes that arrive.
    pub(super) fn bytes(&mut self, n: u64, what: &str) -> Result<Vec<u8>> {
        self.check_left(n, what)?;
        let n = usize::try_from(n)
            .map_err(|_| self.error(format!("{what} of {n} bytes does not fit in memory")))?;
        let mut out: Vec<u8> = Vec::new();
        let alloc = |e| self.error(format!("cannot allocate {what} of {n} bytes: {e}"));
        if self.sized() {
            out.try_reserve_exact(n).map_err(alloc)?;
        }
        while out.len() < n {
            let chunk = (n - out.len()).min(CHUNK_BYTES);
            let start = out.len();
            out.try_reserve(chunk)
                .map_err(|e| self.error(format!("cannot allocate {what} of {n} bytes: {e}")))?;
            out.resize(start + chunk, 0);
            self.fill(&mut out[start..], what)?;
        }
        Ok(out)
    }

    /// Reads and drops the next `n` bytes.
    pub(super) fn skip(&mut self, n: u64, what: &str) -> Result<()> {
        self.check_left(n, what)?;
        let mut buf = vec![0u8; CHUNK_BYTES.min(usize::try_from(n).unwrap_or(CHUNK_BYTES))];
        let mut left = n;
        while left > 0 {
            let chunk = usize::try_from(left).map_or(buf.len(), |l| l.min(buf.len()));
            self.fill(&mut buf[..chunk], what)?;
            left -= chunk as u64;
        }
        Ok(())
    }
}

/// Distinguishes the temporary files of one process's concurrent saves.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes the file at `path` through `write`, never leaving a partial file
/// there: the bytes go to a new temporary file in the same directory,
/// which is flushed to disk and then renamed over `path`. On any error the
/// temporary file is removed and `path` is as it was.
pub(super) fn write_atomically(
    path: &Path,
    op: &str,
    write: impl FnOnce(&mut BufWriter<&File>, &str) -> Result<()>,
) -> Result<()> {
    let name = path.display().to_string();
    let err = |e: std::io::Error| io_error(op, &name, e);
    let file_name = path
        .file_name()
        .ok_or_else(|| io_error(op, &name, "not a file name"))?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let temp = temp_path(dir, file_name);
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temp)
        .map_err(|e| {
            io_error(
                op,
                &name,
                format!("cannot create `{}` to write to: {e}", temp.display()),
            )
        })?;
    let written = (|| {
        let mut w = BufWriter::new(&file);
        write(&mut w, &name)?;
        w.flush().map_err(err)?;
        drop(w);
        file.sync_all().map_err(err)?;
        drop(file);
        std::fs::rename(&temp, path).map_err(err)
    })();
    if written.is_err() {
        // Best effort: the error being reported is the write's.
        let _ = std::fs::remove_file(&temp);
    }
    written
}

/// `.NAME.PID.N.tmp` beside the target: hidden, and unique within the
/// process and across processes.
fn temp_path(dir: &Path, file_name: &std::ffi::OsStr) -> PathBuf {
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut temp = std::ffi::OsString::from(".");
    temp.push(file_name);
    temp.push(format!(".{}.{n}.tmp", std::process::id()));
    dir.join(temp)
}

/// `(name, array)` pairs as borrowed strings: what both savers take.
pub(super) fn as_entries<S: AsRef<str>, A: Borrow<NDArray>>(
    entries: &[(S, A)],
) -> Vec<(&str, &NDArray)> {
    entries
        .iter()
        .map(|(n, a)| (n.as_ref(), a.borrow()))
        .collect()
}

/// Writes elements little-endian (both formats store them so).
pub(super) fn write_le<T: Element>(w: &mut impl Write, data: &[T]) -> std::io::Result<()> {
    let bytes: &[u8] = bytemuck::cast_slice(data);
    if cfg!(target_endian = "little") || size_of::<T>() == 1 {
        return w.write_all(bytes);
    }
    let mut buf = Vec::with_capacity(CHUNK_BYTES);
    for chunk in bytes.chunks(CHUNK_BYTES) {
        buf.clear();
        buf.extend_from_slice(chunk);
        for e in buf.chunks_exact_mut(size_of::<T>()) {
            e.reverse();
        }
        w.write_all(&buf)?;
    }
    Ok(())
}

/// Little-endian element bytes, in place, to the machine's order.
pub(super) fn from_le<T>(bytes: &mut [u8]) {
    if cfg!(target_endian = "big") && size_of::<T>() > 1 {
        for e in bytes.chunks_exact_mut(size_of::<T>()) {
            e.reverse();
        }
    }
}
