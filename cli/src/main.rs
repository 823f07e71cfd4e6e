//! The `simpleop` command line with the standard ops linked in:
//! `cargo run --release --bin simpleop -- check tests/conformance/mxnet-ops.jsonl`.

fn main() -> std::process::ExitCode {
    simpleop_ops::link();
    simpleop_cli::main()
}
