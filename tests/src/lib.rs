//! Workspace tests for simpleop: integration tests of the core and the
//! standard ops, compile-fail UI tests of `#[simple_op]`, the CLI, and the
//! MXNet conformance cases (`tests/conformance/*.jsonl`, checked with
//! `simpleop::conformance`). Everything lives under `tests/`; this library
//! is empty.
