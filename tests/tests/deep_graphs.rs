//! Deep graphs: every graph walk (drop, JSON, inference, planning, fusion,
//! autodiff, DOT, bind) is iterative, so depth is bounded by memory, not by
//! the stack; and inference is linear. Each test runs on a thread with a
//! small stack, so that a walk turning recursive again overflows at once.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use simpleop::symbol::{GradReq, Symbol};
use simpleop::{Attrs, DType, NDArray, Shape};

/// Far too small for a recursion per node over a few thousand nodes.
const SMALL_STACK: usize = 256 * 1024;

/// Runs `f` on a thread with [`SMALL_STACK`] and returns its result.
fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(SMALL_STACK)
        .spawn(f)
        .unwrap()
        .join()
        .unwrap()
}

/// `x` through `n` nodes of unary op `op`.
fn chain(op: &str, attrs: &Attrs, n: usize) -> Symbol {
    simpleop_ops::link();
    let mut s = Symbol::var("x");
    for _ in 0..n {
        s = Symbol::invoke(op, &[&s], attrs).unwrap();
    }
    s
}

fn shape(dims: &[usize]) -> Shape {
    Shape::new(dims.to_vec())
}

#[test]
fn a_million_node_chain_drops() {
    on_small_stack(|| {
        let s = chain("relu", &Attrs::new(), 1_000_000);
        let copy = s.clone();
        drop(s);
        assert_eq!(copy.list_arguments(), ["x"]);
        drop(copy);
        // A shared tail is not freed by the first owner's drop.
        let tail = chain("relu", &Attrs::new(), 1_000);
        let a = Symbol::invoke("relu", &[&tail], &Attrs::new()).unwrap();
        drop(a);
        assert_eq!(tail.list_arguments(), ["x"]);
    });
}

#[test]
fn a_million_node_chain_through_json_inference_and_dot() {
    on_small_stack(|| {
        const N: usize = 1_000_000;
        let s = chain("relu", &Attrs::new(), N);
        let text = s.to_json();
        let back = Symbol::from_json(&text).unwrap();
        drop(s);
        assert_eq!(back.to_json(), text);
        assert_eq!(back.list_arguments(), ["x"]);
        let known = HashMap::from([("x".to_owned(), shape(&[2]))]);
        let shapes = back.infer_shape(&known).unwrap();
        assert_eq!(shapes.output_shapes, [Some(shape(&[2]))]);
        let types = back
            .infer_type(&HashMap::from([("x".to_owned(), DType::F16)]))
            .unwrap();
        assert_eq!(types.output_types, [Some(DType::F16)]);
        let dot = back.to_dot();
        assert!(dot.contains(&format!("  n{} -> n{N};\n", N - 1)), "edge");
        assert!(dot.ends_with(&format!("  n{N} -> out0;\n}}\n")));
    });
}

/// `x + n` through `n` `_plus_scalar` nodes, bound, run forward and
/// backward; also its planned DOT. `x` is f32 `[2]`.
fn bind_chain(n: usize, fusion: bool) {
    let s = chain("_plus_scalar", &Attrs::new().with("scalar", 1), n);
    let args = HashMap::from([(
        "x".to_owned(),
        NDArray::from_vec(vec![0.5f32, -3.0], [2]).unwrap(),
    )]);
    let grads = HashMap::from([("x".to_owned(), NDArray::zeros([2], DType::F32))]);
    let reqs = HashMap::from([("x".to_owned(), GradReq::Write)]);
    let config = simpleop::symbol::BindConfig {
        fusion,
        ..Default::default()
    };
    let mut exe = s.bind_with(args, grads, reqs, config).unwrap();
    // Fused steps stay small (TVM's `max_fuse_depth`): a program's
    // per-tile work grows with its inputs times its ops.
    let groups = [exe.fusion_groups(), exe.backward_fusion_groups()];
    for g in groups {
        assert_eq!(g.is_empty(), !fusion);
        assert!(g.iter().all(|g| (2..=256).contains(&g.nodes.len())));
    }
    if fusion {
        assert_eq!(exe.fusion_groups().len(), n.div_ceil(256));
    }
    exe.forward(true).unwrap();
    let want = [0.5 + n as f32, -3.0 + n as f32];
    assert_eq!(exe.outputs()[0].to_vec::<f32>().unwrap(), want);
    exe.backward(&[]).unwrap();
    assert_eq!(exe.grad("x").unwrap().to_vec::<f32>().unwrap(), [1.0, 1.0]);
    let dot = exe.to_dot();
    assert!(dot.contains(&format!("n{n} -> out0;")), "planned DOT");
    drop(exe);
    drop(s);
}

#[test]
fn a_deep_chain_binds_and_runs_forward_and_backward() {
    on_small_stack(|| {
        bind_chain(100_000, true);
        bind_chain(100_000, false);
    });
}

/// `v0 + v1 + ... + v{n}`, left to right; only `v{n}` has a `__shape__`
/// (and `__dtype__`) hint.
fn add_chain(n: usize) -> Symbol {
    simpleop_ops::link();
    let mut s = Symbol::var("v0");
    for i in 1..=n {
        let v = if i == n {
            let hints = Attrs::from([("__shape__", "(3,)"), ("__dtype__", "1")]);
            Symbol::var_with_attrs(&format!("v{i}"), hints)
        } else {
            Symbol::var(&format!("v{i}"))
        };
        s = Symbol::invoke("elemwise_add", &[&s, &v], &Attrs::new()).unwrap();
    }
    s
}

/// The fixed point used to move one link per full pass, quadratic in the
/// chain's length; inference must stay linear.
#[test]
fn inference_from_the_last_argument_of_a_long_chain_is_linear() {
    on_small_stack(|| {
        const N: usize = 50_000;
        let s = add_chain(N);
        let start = Instant::now();
        let shapes = s.infer_shape(&HashMap::new()).unwrap();
        let types = s.infer_type(&HashMap::new()).unwrap();
        let took = start.elapsed();
        assert_eq!(shapes.arguments.len(), N + 1);
        assert!(
            shapes
                .argument_shapes
                .iter()
                .all(|a| *a == Some(shape(&[3])))
        );
        assert_eq!(shapes.output_shapes, [Some(shape(&[3]))]);
        assert!(types.argument_types.iter().all(|t| *t == Some(DType::F64)));
        assert_eq!(types.output_types, [Some(DType::F64)]);
        // Generous for a shared machine; the quadratic pass took minutes.
        assert!(took < Duration::from_secs(5), "{took:?}");
        // Binding allocates every argument from the inferred shapes.
        let reqs = HashMap::from([("v0".to_owned(), GradReq::Write)]);
        let mut exe = s
            .simple_bind(&HashMap::new(), &HashMap::new(), reqs)
            .unwrap();
        exe.forward(true).unwrap();
        assert_eq!(exe.outputs()[0].to_f64_vec(), [0.0; 3]);
        exe.backward(&[]).unwrap();
        assert_eq!(exe.grad("v0").unwrap().to_f64_vec(), [1.0; 3]);
    });
}

/// A conflict deep in the chain is still reported, naming the node.
#[test]
fn a_conflict_far_from_the_hint_is_still_an_error() {
    on_small_stack(|| {
        let s = add_chain(20_000);
        let known = HashMap::from([("v3".to_owned(), shape(&[4]))]);
        let err = s.infer_shape(&known).unwrap_err().to_string();
        // `(4,)` spreads from `v3` up the chain and meets the hint last.
        let named = err.contains("elemwise_add");
        assert!(
            named && err.contains("(4,)") && err.contains("(3,)"),
            "{err}"
        );
    });
}

/// The `simpleop graph` command on a 50k-node chain: loaded, drawn, and
/// bound with a training plan.
#[test]
fn the_graph_command_draws_a_deep_chain() {
    let s = chain("relu", &Attrs::new(), 50_000);
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("deep-graphs");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("chain.json");
    std::fs::write(&path, s.to_json()).unwrap();
    drop(s);
    let file = path.to_str().unwrap().to_owned();
    on_small_stack(move || {
        for extra in [&[][..], &["--shape", "x=2", "--train"][..]] {
            let mut out = Vec::new();
            let argv = ["simpleop", "graph", &file]
                .into_iter()
                .chain(extra.iter().copied());
            let code = simpleop_cli::run(argv, &mut out).unwrap();
            assert_eq!(code, 0);
            let dot = String::from_utf8(out).unwrap();
            assert!(dot.starts_with("digraph"), "{}", &dot[..100]);
            assert!(dot.contains("n49999 -> n50000;"), "{extra:?}");
        }
    });
    std::fs::remove_dir_all(&dir).unwrap();
}

/// For the record (`cargo test --release --test deep_graphs -- --ignored
/// --nocapture`): inference over an `add_chain` of a million nodes.
#[test]
#[ignore = "a timing, not a check"]
fn time_inference_of_a_million_node_chain() {
    on_small_stack(|| {
        let links = 500_000;
        let s = add_chain(links);
        for _ in 0..3 {
            let start = Instant::now();
            let shapes = s.infer_shape(&HashMap::new()).unwrap();
            let took = start.elapsed();
            assert!(shapes.is_complete());
            let start = Instant::now();
            let types = s.infer_type(&HashMap::new()).unwrap();
            let took_types = start.elapsed();
            assert!(types.argument_types.iter().all(Option::is_some));
            eprintln!("{links} links: infer_shape {took:?}, infer_type {took_types:?}");
        }
    });
}
