//! [`Checkpointer`]: `.params` checkpoints that rank 0 writes and every
//! rank resumes from.

use std::path::{Path, PathBuf};

use simpleop::NDArray;

use crate::{Dist, DistError, Result};

/// The step counter's entry in a checkpoint file (int64, one element).
const STEP: &str = "meta:step";
/// The epoch counter's entry.
const EPOCH: &str = "meta:epoch";

/// The state a job resumes from.
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    /// Steps completed when it was written.
    pub step: u64,
    /// The epoch counter when it was written.
    pub epoch: u64,
    /// The saved arrays (parameters, optimizer state, ...) by name, as
    /// given to [`Checkpointer::save`].
    pub arrays: Vec<(String, NDArray)>,
}

impl Checkpoint {
    /// The array saved as `name`.
    pub fn get(&self, name: &str) -> Result<&NDArray> {
        self.arrays
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, a)| a)
            .ok_or_else(|| DistError::invalid("Checkpoint::get", name, "not in the checkpoint"))
    }
}

/// Writes `DIR/ckpt-STEP.params` (MXNet's `.params` format via
/// [`NDArray::save_params`]: a temporary file renamed over the target, so
/// a crash never leaves a partial checkpoint), keeps the newest `keep`,
/// and finds the newest to resume from.
#[derive(Clone, Debug)]
pub struct Checkpointer {
    dir: PathBuf,
    keep: usize,
}

impl Checkpointer {
    /// Checkpoints in `dir` (created by the first save), the newest
    /// `keep` (at least 1) kept.
    pub fn new(dir: impl Into<PathBuf>, keep: usize) -> Checkpointer {
        Checkpointer {
            dir: dir.into(),
            keep: keep.max(1),
        }
    }

    /// The file of the checkpoint after `step` steps.
    pub fn path(&self, step: u64) -> PathBuf {
        self.dir.join(format!("ckpt-{step:010}.params"))
    }

    /// On rank 0, writes `arrays` with the counters and removes
    /// checkpoints older than the newest `keep`; returns the file. Other
    /// ranks write nothing (every rank holds the same values) and return
    /// `None`. Names must not start with `meta:`.
    pub fn save(
        &self,
        dist: &Dist,
        step: u64,
        epoch: u64,
        arrays: &[(&str, &NDArray)],
    ) -> Result<Option<PathBuf>> {
        if let Some((name, _)) = arrays.iter().find(|(n, _)| n.starts_with("meta:")) {
            return Err(DistError::invalid(
                "Checkpointer::save",
                *name,
                "the `meta:` prefix is the checkpoint's own",
            ));
        }
        if !dist.is_root() {
            return Ok(None);
        }
        std::fs::create_dir_all(&self.dir).map_err(|e| self.io_error("save", &self.dir, e))?;
        let counters = [
            (STEP, NDArray::from_vec(vec![step as i64], [1])?),
            (EPOCH, NDArray::from_vec(vec![epoch as i64], [1])?),
        ];
        let mut entries: Vec<(&str, &NDArray)> = arrays.to_vec();
        entries.extend(counters.iter().map(|(n, a)| (*n, a)));
        let path = self.path(step);
        NDArray::save_params(&path, &entries)?;
        for (_, old) in self.list()?.into_iter().rev().skip(self.keep) {
            // Best effort: a checkpoint that stays is harmless.
            let _ = std::fs::remove_file(old);
        }
        Ok(Some(path))
    }

    /// The checkpoints in the directory, oldest first (none if it does not
    /// exist).
    pub fn list(&self) -> Result<Vec<(u64, PathBuf)>> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(self.io_error("list", &self.dir, e)),
        };
        let mut found = Vec::new();
        for entry in entries {
            let path = entry
                .map_err(|e| self.io_error("list", &self.dir, e))?
                .path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let step = name
                .strip_prefix("ckpt-")
                .and_then(|s| s.strip_suffix(".params"))
                .and_then(|s| s.parse::<u64>().ok());
            if let Some(step) = step {
                found.push((step, path));
            }
        }
        found.sort();
        Ok(found)
    }

    /// The newest checkpoint, on every rank: rank 0 reads it (skipping,
    /// with a warning, files that do not parse) and broadcasts its bytes.
    /// `None` when there is none: a fresh start. Every rank must call it.
    pub fn resume(&self, dist: &mut Dist) -> Result<Option<Checkpoint>> {
        let bytes = if dist.is_root() {
            self.newest_bytes()?
        } else {
            Vec::new()
        };
        let bytes = dist.broadcast_bytes("Checkpointer::resume", bytes)?;
        if bytes.is_empty() {
            return Ok(None);
        }
        let mut arrays = NDArray::read_params_bytes(&bytes)?;
        let step = take_counter(&mut arrays, STEP)?;
        let epoch = take_counter(&mut arrays, EPOCH)?;
        Ok(Some(Checkpoint {
            step,
            epoch,
            arrays,
        }))
    }

    /// The newest readable checkpoint's bytes, or none.
    fn newest_bytes(&self) -> Result<Vec<u8>> {
        for (_, path) in self.list()?.into_iter().rev() {
            let bytes = std::fs::read(&path).map_err(|e| self.io_error("resume", &path, e))?;
            match NDArray::read_params_bytes(&bytes) {
                Ok(_) => return Ok(bytes),
                Err(e) => eprintln!("simpleop-dist: skipping checkpoint {}: {e}", path.display()),
            }
        }
        Ok(Vec::new())
    }

    fn io_error(&self, what: &str, path: &Path, e: std::io::Error) -> DistError {
        simpleop::Error::Io {
            op: format!("Checkpointer::{what}"),
            path: path.display().to_string(),
            reason: e.to_string(),
        }
        .into()
    }
}

/// Removes the counter `name` from `arrays` and returns its value.
fn take_counter(arrays: &mut Vec<(String, NDArray)>, name: &str) -> Result<u64> {
    let op = "Checkpointer::resume";
    let at = arrays
        .iter()
        .position(|(n, _)| n == name)
        .ok_or_else(|| DistError::invalid(op, name, "missing from the checkpoint"))?;
    let (_, value) = arrays.remove(at);
    match value.as_slice::<i64>() {
        Ok(&[v]) if v >= 0 => Ok(v as u64),
        _ => Err(DistError::invalid(
            op,
            name,
            "expected one non-negative int64",
        )),
    }
}
