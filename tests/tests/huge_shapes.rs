//! Shapes that are representable but far too big for any machine, and
//! zero-element arrays with huge nominal dimensions: every path returns
//! `Err` (or a correct empty result) instead of aborting in the allocator.

use std::collections::HashMap;

use simpleop::symbol::{GradReq, Symbol};
use simpleop::{Attrs, DType, Error, NDArray, Shape, eager};

const HUGE: usize = 1 << 30;

fn is_alloc(e: &Error) -> bool {
    match e {
        Error::Alloc { .. } => true,
        Error::InNode { cause, .. } => is_alloc(cause),
        _ => false,
    }
}

#[test]
fn try_zeros_of_a_huge_shape_is_an_alloc_error_naming_op_and_size() {
    let e = NDArray::try_zeros([HUGE, HUGE], DType::F32).unwrap_err();
    assert!(is_alloc(&e), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("NDArray::zeros") && msg.contains("4611686018427387904 bytes"),
        "{msg}"
    );
    // Past what one allocation may span: a shape error, with no
    // saturated count in the message.
    let e = NDArray::try_zeros([HUGE, HUGE, HUGE], DType::F64).unwrap_err();
    assert!(e.to_string().contains("more than isize::MAX bytes"), "{e}");
    assert!(!e.to_string().contains("18446744073709551615"), "{e}");
}

#[test]
fn arange_too_long_for_memory_is_an_error() {
    let e = NDArray::arange(0.0, 1e12, 1.0, DType::F32).unwrap_err();
    assert!(is_alloc(&e), "{e}");
    // A count past usize saturates, and fails as a shape past isize::MAX.
    let e = NDArray::arange(0.0, 1e300, 1.0, DType::F32).unwrap_err();
    assert!(e.to_string().contains("isize::MAX"), "{e}");
    let a = NDArray::arange(1.0, 2.0, 0.25, DType::F64).unwrap();
    assert_eq!(a.to_vec::<f64>().unwrap(), [1.0, 1.25, 1.5, 1.75]);
}

#[test]
fn source_and_broadcast_ops_with_huge_shapes_are_errors() {
    simpleop_ops::link();
    let huge = "(1073741824, 1073741824)";
    let e = eager::invoke("_random_uniform", &[], &Attrs::new().with("shape", huge)).unwrap_err();
    assert!(is_alloc(&e), "{e}");
    let x = NDArray::zeros([1, 1], DType::F32);
    let e = eager::invoke("broadcast_to", &[&x], &Attrs::new().with("shape", huge)).unwrap_err();
    assert!(is_alloc(&e), "{e}");
}

#[test]
fn reductions_of_zero_element_arrays_with_huge_axes_allocate_nothing_big() {
    simpleop_ops::link();
    let x = NDArray::zeros([0, 1 << 40], DType::F32);
    assert_eq!(x.shape().size(), 0);
    for (op, attrs) in [
        ("sum", Attrs::new().with("axis", 1)),
        ("softmax", Attrs::new()),
        ("log_softmax", Attrs::new()),
        ("max", Attrs::new().with("axis", 1)),
        ("norm", Attrs::new().with("axis", 1)),
    ] {
        let y = eager::invoke(op, &[&x], &attrs).unwrap_or_else(|e| panic!("{op}: {e}"));
        assert_eq!(y.shape().size(), 0, "{op}");
    }
}

#[test]
fn huge_shapes_in_graphs_are_errors_at_bind() {
    simpleop_ops::link();
    let x = Symbol::var("x");
    let y = Symbol::invoke("relu", &[&x], &Attrs::new()).unwrap();
    let shapes = HashMap::from([("x".to_string(), Shape::new([HUGE, HUGE]))]);
    let reqs = HashMap::from([("x".to_string(), GradReq::Write)]);
    let e = y
        .simple_bind(&shapes, &HashMap::new(), reqs)
        .map(|_| ())
        .unwrap_err();
    assert!(is_alloc(&e), "{e}");
}

#[test]
fn planned_buffers_too_big_for_memory_are_errors_at_bind() {
    simpleop_ops::link();
    // Small argument and output; the broadcast in between is 4 TiB.
    let x = Symbol::var("x");
    let attrs = Attrs::new().with("shape", "(1048576, 1048576)");
    let b = Symbol::invoke("broadcast_to", &[&x], &attrs).unwrap();
    // softmax: an op no fused program absorbs, so its buffers are planned.
    let s = Symbol::invoke("softmax", &[&b], &Attrs::new()).unwrap();
    let y = Symbol::invoke("sum", &[&s], &Attrs::new()).unwrap();
    let shapes = HashMap::from([("x".to_string(), Shape::new([1, 1]))]);
    let e = y
        .simple_bind(&shapes, &HashMap::new(), HashMap::new())
        .map(|_| ())
        .unwrap_err();
    assert!(is_alloc(&e), "{e}");
    assert!(e.to_string().contains("bind"), "{e}");
}

/// A graph file with one argument `x` (its `__shape__` hint `hint`, if
/// any) through `relu`.
fn graph_file(name: &str, hint: Option<&str>) -> std::path::PathBuf {
    let attrs = hint.map_or(String::new(), |h| {
        format!(r#", "attrs": {{"__shape__": "{h}"}}"#)
    });
    let json = format!(
        r#"{{"nodes": [{{"op": "null", "name": "x"{attrs}, "inputs": []}}, {{"op": "relu", "name": "r", "inputs": [[0, 0, 0]]}}], "arg_nodes": [0], "node_row_ptr": [0, 1, 2], "heads": [[1, 0, 0]], "attrs": {{"mxnet_version": ["int", 10901]}}}}"#
    );
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("huge-shapes");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, json).unwrap();
    path
}

fn cli(args: &[&str]) -> simpleop::Result<u8> {
    simpleop_ops::link();
    let argv = std::iter::once("simpleop").chain(args.iter().copied());
    simpleop_cli::run(argv, &mut Vec::new())
}

#[test]
fn cli_graph_with_huge_shapes_is_an_error() {
    let plain = graph_file("plain.json", None);
    let plain = plain.to_str().unwrap();
    let e = cli(&["graph", plain, "--shape", "x=1073741824,1073741824"]).unwrap_err();
    assert!(is_alloc(&e), "{e}");
    assert!(e.to_string().contains("4611686018427387904 bytes"), "{e}");
    // Past usize: refused while parsing the flag.
    let e = cli(&[
        "graph",
        plain,
        "--shape",
        "x=4294967296,4294967296,4294967296",
    ])
    .unwrap_err();
    assert!(
        e.to_string().contains("--shape") && e.to_string().contains("usize::MAX"),
        "{e}"
    );
    // The same shape as a `__shape__` hint in the file.
    let hinted = graph_file("hinted.json", Some("(1073741824, 1073741824)"));
    let e = cli(&["graph", hinted.to_str().unwrap()]).unwrap_err();
    assert!(is_alloc(&e), "{e}");
    // A sane shape still binds and draws.
    assert_eq!(cli(&["graph", plain, "--shape", "x=2,3"]).unwrap(), 0);
}

#[test]
fn zero_element_arrays_with_huge_dimensions_allocate_nothing() {
    simpleop_ops::link();
    let x = NDArray::try_zeros([0, 1 << 40, 1 << 40], DType::F64).unwrap();
    assert_eq!((x.size(), x.ndim()), (0, 3));
    let y = eager::invoke("relu", &[&x], &Attrs::new()).unwrap();
    assert_eq!(y.shape().dims(), [0, 1 << 40, 1 << 40]);
    let attrs = Attrs::new().with("shape", "(0, 1099511627776)");
    let r = eager::invoke("_random_uniform", &[], &attrs).unwrap();
    assert_eq!(r.shape().dims(), [0, 1 << 40]);
    // Gradients of a zero-element input are zero-element too.
    let def = eager::lookup("softmax").unwrap().def;
    let env = (def.parse)(def, &Attrs::new()).unwrap();
    let z = NDArray::zeros([0, 1 << 40], DType::F32);
    let g = eager::gradient(def, &env, &[&z], &z).unwrap();
    assert_eq!(g[0].shape().dims(), [0, 1 << 40]);
}

#[test]
#[should_panic(expected = "cannot allocate")]
fn the_infallible_zeros_panics_with_the_alloc_message() {
    let _ = NDArray::zeros([HUGE, HUGE], DType::F32);
}
