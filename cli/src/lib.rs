//! The `simpleop` command line as a library: conformance checks against
//! MXNet, op listings, graph pictures and the benchmark, over whatever ops
//! are linked into the binary.
//!
//! The standard binary is `cargo run --release --bin simpleop -- …`, with
//! the standard ops. A crate with its own ops gets the same tool, with its
//! ops registered, from a one-line `main`:
//!
//! ```no_run
//! fn main() -> std::process::ExitCode {
//!     // my_ops::link(); // ops are found by name, so link them
//!     simpleop_cli::main()
//! }
//! ```
//!
//! [`conformance`] runs MXNet's cases (the format is
//! `tests/conformance/FORMAT.md` in the repository), and [`mod@bench`] times
//! the kernels against same-run baselines.

#![warn(missing_docs)]

pub mod bench;
mod commands;
pub mod conformance;
mod run;

pub use commands::{DEFAULT_MAX_FILE_BYTES, main, max_file_bytes, read_text, run};
