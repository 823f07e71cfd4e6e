//! The subcommands and their arguments.
//!
//! Subcommands:
//! * `check FILE...` runs every conformance case through the executor and op
//!   by op through the NDArray API, prints one line per failure and ends
//!   with `N passed, M failed`; the exit code is 1 when a case failed.
//! * `ops [NAME]` lists the registered ops, or describes one.
//! * `graph FILE.json [--shape NAME=2,3]... [--train] [-o OUT.dot]` writes
//!   Graphviz DOT; with shapes (given, or all from the file's `__shape__`
//!   hints) it binds the graph and draws the memory plan.
//! * `bench [--quick] [--json] [--isa avx512,avx2]` times the kernels against same-run
//!   baselines ([`crate::bench`]).
//! * `run MODEL-symbol.json [--params FILE] --input NAME=X.npy... [--train]
//!   [-o OUT.npy] [--json] [--repeat N]` runs a model and writes its outputs (and
//!   gradients) as `.npy` ([`crate::run`]).
//!
//! Input files (case files, graph JSON) larger than [`max_file_bytes`]
//! (default [`DEFAULT_MAX_FILE_BYTES`], or `SIMPLEOP_MAX_FILE_BYTES`, or
//! the `--max-file-bytes` flag) are refused after reading one byte past
//! the cap, so `simpleop graph /dev/zero` ends with an error.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use simpleop::symbol::{GradReq, Symbol};
use simpleop::{DType, Error, ParamKind, Registry, Result, Shape};

use crate::conformance;

#[derive(Parser, Debug)]
#[command(
    name = "simpleop",
    version,
    about = "Define tensor ops once; run them everywhere."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Largest input file read, in bytes (default: SIMPLEOP_MAX_FILE_BYTES,
    /// or 268435456 = 256 MiB).
    #[arg(long, global = true, value_name = "BYTES")]
    max_file_bytes: Option<u64>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run conformance cases (.jsonl) through the executor and eagerly.
    Check {
        /// Case files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// List the registered ops, or describe one.
    Ops {
        /// An op name (or alias).
        name: Option<String>,
    },
    /// Write a symbol JSON graph as Graphviz DOT.
    Graph {
        /// MXNet symbol JSON.
        file: PathBuf,
        /// Argument shapes, `NAME=D0,D1,...`; with them the graph is bound
        /// and the DOT shows shapes, buffers and in-place writes.
        #[arg(long = "shape", value_name = "NAME=DIMS")]
        shapes: Vec<String>,
        /// Argument dtypes, `NAME=float32` (default float32).
        #[arg(long = "dtype", value_name = "NAME=DTYPE")]
        dtypes: Vec<String>,
        /// Plan for training (every float argument with grad_req write).
        #[arg(long)]
        train: bool,
        /// Output file (default: standard output).
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Run a model: bind it with shapes from its weights and inputs, run
    /// forward (and backward with --train), write outputs and gradients
    /// as .npy.
    Run {
        /// MXNet symbol JSON (`model-symbol.json`).
        file: PathBuf,
        /// Weights: an MXNet `.params` file or a `.safetensors` file.
        #[arg(long, value_name = "FILE")]
        params: Option<PathBuf>,
        /// An input, `NAME=FILE.npy` (repeatable).
        #[arg(long = "input", value_name = "NAME=FILE")]
        inputs: Vec<String>,
        /// Run forward in training mode, then backward with head gradients
        /// of ones, and write every float argument's gradient.
        #[arg(long)]
        train: bool,
        /// Where the output goes; several outputs go to `STEM-0.npy`, ...,
        /// gradients to `STEM-grad-NAME.npy` beside it.
        #[arg(short, long, default_value = "output.npy")]
        output: PathBuf,
        /// Print one JSON object: timings, output shapes, memory stats and
        /// the files written.
        #[arg(long)]
        json: bool,
        /// Time N passes after one warm-up pass; the reported times are
        /// their median (the JSON lists every pass). Outputs are written
        /// from the last pass.
        #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        repeat: u32,
        /// Bind without fusion: every op runs alone, as the unfused
        /// executor does (to measure what fusion gains).
        #[arg(long)]
        no_fusion: bool,
    },
    /// Time the kernels against baselines measured in the same run.
    Bench {
        /// 4M elements and 5 repetitions instead of 16M and 15.
        #[arg(long)]
        quick: bool,
        /// One JSON object per row (`name`, `ms`, `baseline`, `ratio`).
        #[arg(long)]
        json: bool,
        /// Instruction sets to run every row under, one after the other
        /// (`avx512,avx2`), each after its own `meta` line; default: the
        /// active one (`SIMPLEOP_ISA`, or the best the CPU has).
        #[arg(long, value_delimiter = ',')]
        isa: Vec<String>,
    },
}

/// Runs the command line of this process and reports errors on stderr.
pub fn main() -> ExitCode {
    let mut buf = Vec::new();
    let result = run(std::env::args_os(), &mut buf);
    // A closed pipe (`simpleop ops | head`) is not an error worth reporting.
    let _ = std::io::stdout().lock().write_all(&buf);
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// Runs the command line `args` (program name first), writing to `out`,
/// and returns the exit code: 0 on success, 1 when a conformance case
/// failed, 2 for a usage error (clap's message goes to stderr).
pub fn run<I, T>(args: I, out: &mut dyn Write) -> Result<u8>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            if e.use_stderr() {
                eprint!("{e}");
            } else {
                write!(out, "{e}").map_err(io_error)?;
            }
            return Ok(code);
        }
    };
    let cap = cli.max_file_bytes.unwrap_or_else(max_file_bytes);
    match cli.command {
        Command::Check { files } => check(&files, cap, out),
        Command::Ops { name } => ops(name.as_deref(), out).map(|()| 0),
        Command::Graph {
            file,
            shapes,
            dtypes,
            train,
            output,
        } => {
            let text = read_text(&file, cap)?;
            graph(&text, &shapes, &dtypes, train, output.as_deref(), out).map(|()| 0)
        }
        Command::Bench { quick, json, isa } => bench(quick, json, &isa, out).map(|()| 0),
        Command::Run {
            file,
            params,
            inputs,
            train,
            output,
            json,
            repeat,
            no_fusion,
        } => {
            let text = read_text(&file, cap)?;
            let args = crate::run::RunArgs {
                symbol_json: &text,
                params: params.as_deref(),
                inputs: &inputs,
                train,
                output: &output,
                json,
                repeat: repeat as usize,
                no_fusion,
            };
            crate::run::run_model(&args, out).map(|()| 0)
        }
    }
}

fn bench(quick: bool, json: bool, isas: &[String], out: &mut dyn Write) -> Result<()> {
    let opts = if quick {
        crate::bench::Options::quick()
    } else {
        crate::bench::Options::full()
    };
    let isas = bench_isas(isas)?;
    for isa in isas {
        let _active = simpleop::Tuning::scoped(|t| t.isa = isa)?;
        eprintln!(
            "simd: {}, threads: {}, elements: {}",
            isa.name(),
            rayon::current_num_threads(),
            opts.elements
        );
        let rows = crate::bench::run(opts, |r| {
            eprintln!("  {} {:.4} ms", r.name, r.ms);
        })?;
        if json {
            writeln!(out, "{}", crate::bench::meta_json(opts)).map_err(io_error)?;
            for r in &rows {
                writeln!(out, "{}", r.to_json()).map_err(io_error)?;
            }
        } else {
            writeln!(out, "ISA {}", isa.name()).map_err(io_error)?;
            write!(out, "{}", crate::bench::table(&rows)).map_err(io_error)?;
        }
    }
    Ok(())
}

/// `--isa`'s sets, each checked to run here; the active one without any.
fn bench_isas(names: &[String]) -> Result<Vec<simpleop::Isa>> {
    if names.is_empty() {
        return Ok(vec![simpleop::Tuning::current().isa]);
    }
    names
        .iter()
        .map(|n| {
            let isa = simpleop::Isa::from_name(n.trim()).ok_or_else(|| {
                Error::argument(
                    "--isa",
                    format!("expected scalar, neon, avx2 or avx512, got {n:?}"),
                )
            })?;
            if !isa.is_supported() {
                return Err(Error::argument(
                    "--isa",
                    format!("{} is not supported by this CPU", isa.name()),
                ));
            }
            Ok(isa)
        })
        .collect()
}

fn io_error(e: std::io::Error) -> Error {
    Error::argument("output", e.to_string())
}

/// The default of [`max_file_bytes`]: 256 MiB, far above any graph or
/// case file, far below what would exhaust memory.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 256 << 20;

/// The largest input file the CLI reads: `SIMPLEOP_MAX_FILE_BYTES` if set
/// to a number, else [`DEFAULT_MAX_FILE_BYTES`]. (`--max-file-bytes`
/// overrides both.)
pub fn max_file_bytes() -> u64 {
    cap_from(std::env::var("SIMPLEOP_MAX_FILE_BYTES").ok())
}

/// The cap a `SIMPLEOP_MAX_FILE_BYTES` value gives (the default when it
/// is unset or not a number, as with the other `SIMPLEOP_*` variables).
fn cap_from(var: Option<String>) -> u64 {
    var.and_then(|v| v.trim().parse().ok())
        .unwrap_or(DEFAULT_MAX_FILE_BYTES)
}

/// The UTF-8 text of the file at `path`, or an error naming the file when
/// it holds more than `cap` bytes: at most `cap + 1` bytes are read, so a
/// device or pipe that never ends cannot hang the reader or fill memory.
pub fn read_text(path: &std::path::Path, cap: u64) -> Result<String> {
    let name = path.display().to_string();
    let cannot = |e: std::io::Error| Error::argument(&name, format!("cannot read: {e}"));
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(cannot)?
        .take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(cannot)?;
    if bytes.len() as u64 > cap {
        return Err(Error::argument(
            &name,
            format!(
                "larger than the limit of {cap} bytes on input files; raise it with \
                 --max-file-bytes or SIMPLEOP_MAX_FILE_BYTES"
            ),
        ));
    }
    String::from_utf8(bytes).map_err(|e| Error::argument(&name, format!("not UTF-8 text: {e}")))
}

fn check(files: &[PathBuf], cap: u64, out: &mut dyn Write) -> Result<u8> {
    let mut cases = Vec::new();
    for f in files {
        let text = read_text(f, cap)?;
        cases.extend(
            conformance::parse_cases(&text)
                .map_err(|e| Error::argument(f.display().to_string(), e.to_string()))?,
        );
    }
    let report = conformance::check(&cases);
    for failure in &report.failures {
        writeln!(out, "{failure}").map_err(io_error)?;
    }
    writeln!(out, "{}", report.summary()).map_err(io_error)?;
    Ok(if report.ok() { 0 } else { 1 })
}

fn ops(name: Option<&str>, out: &mut dyn Write) -> Result<()> {
    let registry = Registry::global()?;
    let Some(name) = name else {
        let width = registry.iter().map(|o| o.def.name.len()).max().unwrap_or(0);
        for op in registry.iter() {
            let d = op.def;
            let summary = d.description.lines().next().unwrap_or("");
            writeln!(
                out,
                "{:width$}  {}  {summary}",
                d.name,
                arity_name(d.num_inputs())
            )
            .map_err(io_error)?;
        }
        writeln!(out, "{} ops", registry.len()).map_err(io_error)?;
        return Ok(());
    };
    let d = registry.get(name)?.def;
    let mut w = |k: &str, v: String| writeln!(out, "{k:<11}{v}").map_err(io_error);
    w("op", d.name.to_string())?;
    if !d.aliases.is_empty() {
        w("aliases", d.aliases.join(", "))?;
    }
    w(
        "inputs",
        format!("{} ({})", d.inputs.join(", "), arity_name(d.num_inputs())),
    )?;
    w(
        "params",
        match d.params {
            ParamKind::None => "none".into(),
            ParamKind::Scalar => "scalar".into(),
            ParamKind::Kwargs { type_name, fields } => {
                format!("kwargs {type_name} {{ {} }}", fields().join(", "))
            }
        },
    )?;
    w("form", format!("{:?}", d.form).to_lowercase())?;
    w(
        "gradient",
        match d.gradient {
            None => "none".into(),
            Some(g) => {
                let mut reads = vec!["output gradient".to_string()];
                if g.needs_output {
                    reads.push("output".into());
                }
                reads.extend(
                    (0..d.num_inputs())
                        .filter(|&i| g.needs_input(i))
                        .map(|i| d.input_name(i).to_string()),
                );
                format!("{:?} (reads {})", g.kind(), reads.join(", "))
            }
        },
    )?;
    let inplace = [
        d.inplace.forward.map(|f| format!("forward {f:?}")),
        d.inplace.gradient.map(|g| format!("gradient {g:?}")),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>();
    w(
        "inplace",
        if inplace.is_empty() {
            "none".into()
        } else {
            inplace.join(", ")
        },
    )?;
    w("pattern", d.pattern.name().into())?;
    let mut res = Vec::new();
    if d.resources.rng {
        res.push("rng");
    }
    if d.resources.temp {
        res.push("temp space");
    }
    if !res.is_empty() {
        w("resources", res.join(", "))?;
    }
    if !d.mutate_inputs.is_empty() {
        let names: Vec<&str> = d.mutate_inputs.iter().map(|&i| d.input_name(i)).collect();
        w("mutates", names.join(", "))?;
    }
    w("defined at", d.location.into())?;
    writeln!(out, "\n{}", d.description).map_err(io_error)
}

fn arity_name(n: usize) -> &'static str {
    match n {
        0 => "source",
        1 => "unary",
        2 => "binary",
        3 => "ternary",
        _ => "n-ary",
    }
}

fn parse_pair<'a>(flag: &str, s: &'a str) -> Result<(&'a str, &'a str)> {
    s.split_once('=')
        .ok_or_else(|| Error::argument(flag, format!("`{s}`: expected NAME=VALUE")))
}

fn graph(
    json: &str,
    shapes: &[String],
    dtypes: &[String],
    train: bool,
    output: Option<&std::path::Path>,
    out: &mut dyn Write,
) -> Result<()> {
    let sym = Symbol::from_json(json)?;
    let mut known = HashMap::new();
    for s in shapes {
        let (name, dims) = parse_pair("--shape", s)?;
        let dims: Vec<usize> = dims
            .split(',')
            .filter(|d| !d.trim().is_empty())
            .map(|d| d.trim().parse::<usize>())
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| Error::argument("--shape", format!("`{s}`: {e}")))?;
        let shape = Shape::new(dims);
        if shape.checked_size().is_none() {
            let why = "more than usize::MAX elements";
            return Err(Error::argument("--shape", format!("`{s}`: {why}")));
        }
        known.insert(name.to_string(), shape);
    }
    let mut types = HashMap::new();
    for s in dtypes {
        let (name, dt) = parse_pair("--dtype", s)?;
        let dt = DType::from_name(dt)
            .ok_or_else(|| Error::argument("--dtype", format!("`{s}`: unknown dtype")))?;
        types.insert(name.to_string(), dt);
    }
    // Bound (drawn with its plan) when shapes are given, or when the
    // file's `__shape__` hints give every one.
    let bind = !known.is_empty() || sym.infer_shape(&known).is_ok_and(|s| s.is_complete());
    let dot = if !bind {
        sym.to_dot()
    } else {
        let reqs: HashMap<String, GradReq> = if train {
            let inferred = sym.infer_type(&types)?;
            inferred
                .arguments
                .into_iter()
                .zip(inferred.argument_types)
                .filter(|(_, d)| d.is_none_or(DType::is_float))
                .map(|(a, _)| (a, GradReq::Write))
                .collect()
        } else {
            HashMap::new()
        };
        sym.simple_bind(&known, &types, reqs)?.to_dot()
    };
    match output {
        Some(path) => std::fs::write(path, dot)
            .map_err(|e| Error::argument(path.display().to_string(), format!("cannot write: {e}"))),
        None => out.write_all(dot.as_bytes()).map_err(io_error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reading_stops_one_byte_past_the_cap() {
        let dir = std::env::temp_dir().join(format!("simpleop-cap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ten.txt");
        std::fs::write(&path, "0123456789").unwrap();
        assert_eq!(read_text(&path, 10).unwrap(), "0123456789");
        assert_eq!(read_text(&path, u64::MAX).unwrap(), "0123456789");
        let err = read_text(&path, 9).unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(err.contains("ten.txt"), "{err}");
        assert!(err.contains("limit of 9 bytes"), "{err}");
        assert!(
            err.contains("--max-file-bytes or SIMPLEOP_MAX_FILE_BYTES"),
            "{err}"
        );
        // An endless device: the cap ends the read.
        let err = read_text(std::path::Path::new("/dev/zero"), 4096).unwrap_err();
        assert!(err.to_string().contains("limit of 4096 bytes"), "{err}");
    }

    #[test]
    fn the_cap_is_256_mib_unless_the_variable_says_otherwise() {
        assert_eq!(DEFAULT_MAX_FILE_BYTES, 268_435_456);
        assert_eq!(cap_from(None), DEFAULT_MAX_FILE_BYTES);
        assert_eq!(cap_from(Some(" 1000\n".into())), 1000);
        assert_eq!(cap_from(Some("0".into())), 0);
        assert_eq!(cap_from(Some("lots".into())), DEFAULT_MAX_FILE_BYTES);
        assert_eq!(cap_from(Some("-1".into())), DEFAULT_MAX_FILE_BYTES);
    }
}
