//! The `simpleop` command (`check`, `ops`, `graph`) with this crate's ops
//! registered: `simpleop-examples-cli ops softplus`.

fn main() -> std::process::ExitCode {
    // The CLI looks ops up by name only, so link them explicitly.
    simpleop_examples::link();
    simpleop_cli::main()
}
