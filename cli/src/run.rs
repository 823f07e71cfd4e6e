//! `simpleop run`: loads a model (MXNet symbol JSON and its weights), binds
//! it with shapes taken from the weights and the inputs, runs forward (and,
//! with `--train`, backward), and writes every output and gradient as
//! `.npy`.
//!
//! Weights come from an MXNet `.params` file (`arg:NAME` / `aux:NAME`, or
//! Gluon's bare names) or a `.safetensors` file, by extension. Every
//! argument the graph has must be an input or a weight; names in the file
//! that are no argument of the graph are skipped, as Gluon's
//! `SymbolBlock.imports` does.
//!
//! Backward runs with a head gradient of ones for each output (the
//! gradient of the sum of all outputs, as MXNet's `backward()` without
//! arguments), and writes the gradient of every float argument.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use simpleop::params::LoadOptions;
use simpleop::symbol::{BindConfig, Executor, GradReq, Symbol};
use simpleop::{DType, Error, NDArray, Result, Shape};

/// What `simpleop run` was asked to do.
pub(crate) struct RunArgs<'a> {
    pub(crate) symbol_json: &'a str,
    pub(crate) params: Option<&'a Path>,
    /// `NAME=FILE.npy` pairs.
    pub(crate) inputs: &'a [String],
    pub(crate) train: bool,
    /// Where output 0 goes; see [`output_paths`].
    pub(crate) output: &'a Path,
    pub(crate) json: bool,
    /// Timed passes; above 1, an untimed warm-up pass runs first.
    pub(crate) repeat: usize,
    /// Binds without fusion (the baseline fused runs are measured against).
    pub(crate) no_fusion: bool,
}

/// Milliseconds of each timed pass, forward and (training) backward.
struct Timings {
    forward: Vec<f64>,
    backward: Vec<f64>,
}

fn median(v: &[f64]) -> Option<f64> {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    (!s.is_empty()).then(|| s[s.len() / 2])
}

/// Runs the passes: one untimed warm-up when `repeat > 1`, then `repeat`
/// timed ones.
fn timed_passes(exec: &mut Executor, train: bool, repeat: usize) -> Result<Timings> {
    let mut t = Timings {
        forward: Vec::new(),
        backward: Vec::new(),
    };
    let warm = usize::from(repeat > 1);
    for pass in 0..warm + repeat {
        let started = Instant::now();
        exec.forward(train)?;
        let forward_ms = started.elapsed().as_secs_f64() * 1e3;
        let started = Instant::now();
        if train {
            exec.backward(&[])?;
        }
        let backward_ms = started.elapsed().as_secs_f64() * 1e3;
        if pass >= warm {
            t.forward.push(forward_ms);
            if train {
                t.backward.push(backward_ms);
            }
        }
    }
    Ok(t)
}

/// Loads, binds, runs and writes; prints the files written (or, with
/// `json`, one JSON object with timings and memory statistics).
pub(crate) fn run_model(a: &RunArgs<'_>, out: &mut dyn Write) -> Result<()> {
    let sym = Symbol::from_json(a.symbol_json)?;
    let arguments = sym.list_arguments();
    let inputs = read_inputs(a.inputs, &arguments)?;
    let weights = match a.params {
        Some(p) => read_weights(p, &arguments, &sym.list_auxiliary_states())?,
        None => Vec::new(),
    };
    let config = BindConfig {
        fusion: !a.no_fusion,
        ..BindConfig::default()
    };
    let mut exec = bind(&sym, &inputs, &weights, a.train, config)?;
    let input_names: Vec<&str> = inputs.iter().map(|(n, _)| n.as_str()).collect();
    let options = LoadOptions {
        inputs: &input_names,
        allow_missing: false,
        ignore_extra: true,
    };
    exec.load_params(&weights, &options)?;
    for (name, array) in &inputs {
        exec.set_arg(name, array)?;
    }
    let timings = timed_passes(&mut exec, a.train, a.repeat.max(1))?;
    let written = write_results(&exec, &arguments, a.train, a.output)?;
    report(&exec, a, &timings, &written, out)
}

/// The `NAME=FILE.npy` inputs, read, each naming an argument.
fn read_inputs(pairs: &[String], arguments: &[String]) -> Result<Vec<(String, NDArray)>> {
    let mut inputs: Vec<(String, NDArray)> = Vec::new();
    for pair in pairs {
        let (name, file) = pair.split_once('=').ok_or_else(|| {
            Error::argument("--input", format!("`{pair}`: expected NAME=FILE.npy"))
        })?;
        if !arguments.iter().any(|a| a == name) {
            return Err(Error::argument(
                "--input",
                format!(
                    "`{name}` is no argument of the graph (arguments: {})",
                    arguments.join(", ")
                ),
            ));
        }
        if inputs.iter().any(|(n, _)| n == name) {
            return Err(Error::argument(
                "--input",
                format!("`{name}` is given twice"),
            ));
        }
        inputs.push((name.to_string(), NDArray::load_npy(file)?));
    }
    Ok(inputs)
}

/// The weight file's entries that name arguments (with or without
/// MXNet's `arg:` prefix) or aux states (`aux:`) of the graph.
fn read_weights(
    path: &Path,
    arguments: &[String],
    aux: &[String],
) -> Result<Vec<(String, NDArray)>> {
    let is_safetensors = path.extension().is_some_and(|e| e == "safetensors");
    let entries = if is_safetensors {
        NDArray::load_safetensors(path)?
    } else {
        NDArray::load_params(path)?
    };
    let wanted = |name: &str| match name.strip_prefix(simpleop::params::AUX_PREFIX) {
        Some(bare) => aux.iter().any(|a| a == bare),
        None => {
            let bare = name
                .strip_prefix(simpleop::params::ARG_PREFIX)
                .unwrap_or(name);
            arguments.iter().chain(aux).any(|a| a == bare)
        }
    };
    Ok(entries.into_iter().filter(|(n, _)| wanted(n)).collect())
}

/// Binds with every argument's shape and dtype taken from the inputs and
/// weights (hints in the JSON fill in the rest); in training, every float
/// argument gets a gradient.
fn bind(
    sym: &Symbol,
    inputs: &[(String, NDArray)],
    weights: &[(String, NDArray)],
    train: bool,
    config: BindConfig,
) -> Result<Executor> {
    let mut shapes: HashMap<String, Shape> = HashMap::new();
    let mut dtypes: HashMap<String, DType> = HashMap::new();
    for (name, array) in weights.iter().chain(inputs) {
        let bare = name
            .strip_prefix(simpleop::params::ARG_PREFIX)
            .or_else(|| name.strip_prefix(simpleop::params::AUX_PREFIX))
            .unwrap_or(name);
        shapes.insert(bare.to_string(), array.shape().clone());
        dtypes.insert(bare.to_string(), array.dtype());
    }
    let inferred = sym.infer_shape(&shapes)?;
    let unknown: Vec<&str> = inferred
        .arguments
        .iter()
        .zip(&inferred.argument_shapes)
        .filter(|(_, s)| s.is_none())
        .map(|(name, _)| name.as_str())
        .collect();
    if let Some(first) = unknown.first() {
        return Err(Error::argument(
            *first,
            format!(
                "is missing: no --input and no weight gives it, and its shape cannot be \
                 inferred (missing: {})",
                unknown.join(", ")
            ),
        ));
    }
    let reqs: HashMap<String, GradReq> = if train {
        let types = sym.infer_type(&dtypes)?;
        types
            .arguments
            .into_iter()
            .zip(types.argument_types)
            .filter(|(_, d)| d.is_none_or(DType::is_float))
            .map(|(name, _)| (name, GradReq::Write))
            .collect()
    } else {
        HashMap::new()
    };
    sym.simple_bind_with(&shapes, &dtypes, reqs, config)
}

/// Where output `i` of `count` goes: `output` itself for a single output,
/// else `STEM-i.npy` beside it. Gradients go to `STEM-grad-NAME.npy`.
fn output_paths(output: &Path, count: usize) -> Vec<PathBuf> {
    if count == 1 {
        return vec![output.to_path_buf()];
    }
    (0..count)
        .map(|i| sibling(output, &i.to_string()))
        .collect()
}

/// `STEM-suffix.npy` in `path`'s directory.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let stem = path
        .file_stem()
        .map_or("output".into(), |s| s.to_string_lossy());
    path.with_file_name(format!("{stem}-{suffix}.npy"))
}

/// Writes the outputs, and in training the gradients; returns the paths.
fn write_results(
    exec: &Executor,
    arguments: &[String],
    train: bool,
    output: &Path,
) -> Result<Vec<PathBuf>> {
    let outputs = exec.outputs();
    let mut written = Vec::new();
    for (array, path) in outputs.iter().zip(output_paths(output, outputs.len())) {
        array.save_npy(&path)?;
        written.push(path);
    }
    if train {
        for name in arguments {
            if let Some(g) = exec.grad(name) {
                let path = sibling(output, &format!("grad-{name}"));
                g.save_npy(&path)?;
                written.push(path);
            }
        }
    }
    Ok(written)
}

/// The files written, one a line, or the JSON summary.
fn report(
    exec: &Executor,
    a: &RunArgs<'_>,
    timings: &Timings,
    written: &[PathBuf],
    out: &mut dyn Write,
) -> Result<()> {
    let io = |e: std::io::Error| Error::argument("output", e.to_string());
    let files: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
    if !a.json {
        for f in &files {
            writeln!(out, "{f}").map_err(io)?;
        }
        return Ok(());
    }
    let stats = if a.train {
        exec.memory_stats()
    } else {
        exec.inference_memory_stats()
    };
    let outputs: Vec<Vec<usize>> = exec
        .outputs()
        .iter()
        .map(|o| o.shape().dims().to_vec())
        .collect();
    let summary = serde_json::json!({
        "train": a.train,
        "forward_ms": median(&timings.forward),
        "backward_ms": median(&timings.backward),
        "forward_ms_all": timings.forward,
        "backward_ms_all": timings.backward,
        "repeat": a.repeat,
        "fusion": !a.no_fusion,
        "outputs": outputs,
        "memory": {
            "planned_bytes": stats.planned_bytes,
            "unplanned_bytes": stats.unplanned_bytes,
            "buffers": stats.buffers,
            "inplace_writes": stats.inplace_writes,
            "fused_values": stats.fused_values,
            "fused_bytes": stats.fused_bytes,
        },
        "files": files,
    });
    writeln!(out, "{summary}").map_err(io)
}
