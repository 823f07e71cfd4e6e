//! Shared helpers for the workspace tests (conformance case loading).
