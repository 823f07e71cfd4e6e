//! The `simpleop` command line, in process: `check` on the MXNet cases and
//! on a case that must fail, `ops` listings, `graph` DOT output, and every
//! `bench` row on small arrays.

use std::path::PathBuf;

const CASES: &str = include_str!("../conformance/mxnet-ops.jsonl");

fn run(args: &[&str]) -> (u8, String) {
    simpleop_ops::link();
    let mut out = Vec::new();
    let argv = std::iter::once("simpleop").chain(args.iter().copied());
    let code = simpleop_cli::run(argv, &mut out).unwrap();
    (code, String::from_utf8(out).unwrap())
}

fn run_err(args: &[&str]) -> simpleop::Error {
    simpleop_ops::link();
    let argv = std::iter::once("simpleop").chain(args.iter().copied());
    simpleop_cli::run(argv, &mut Vec::new()).unwrap_err()
}

/// A file under the target directory's temp area (rewritten each run).
fn temp_file(name: &str, contents: &str) -> PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

fn case_line(name: &str) -> serde_json::Value {
    CASES
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|c| c["name"] == name)
        .unwrap()
}

#[test]
fn check_passes_every_mxnet_case_through_both_paths() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/conformance/mxnet-ops.jsonl");
    let (code, out) = run(&["check", path]);
    assert_eq!(out.lines().last(), Some("141 passed, 0 failed"), "{out}");
    assert_eq!(code, 0);
}

#[test]
fn check_reports_a_wrong_case_on_both_paths_and_fails() {
    let mut case = case_line("graph/mlp_loss");
    case["name"] = "broken/mlp_loss".into();
    // Shift the expected gradient of w2 far outside the tolerance.
    let v = case["expect"]["grads"]["w2"]["data"][3].as_f64().unwrap();
    case["expect"]["grads"]["w2"]["data"][3] = (v + 1.0).into();
    let good = case_line("relu/float32");
    let text = format!("{case}\n\n{good}\n");
    let path = temp_file("broken.jsonl", &text);
    let (code, out) = run(&["check", path.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[0].starts_with("FAIL broken/mlp_loss [executor]: grad w2: element 3: got"));
    assert!(lines[1].starts_with("FAIL broken/mlp_loss [eager]: grad w2: element 3: got"));
    assert_eq!(lines[2], "1 passed, 1 failed");
}

#[test]
fn check_rejects_a_malformed_file_naming_the_line() {
    let path = temp_file("malformed.jsonl", "{\"name\": \"x\"}\n{not json\n");
    let err = run_err(&["check", path.to_str().unwrap()]).to_string();
    assert!(
        err.contains("malformed.jsonl") && err.contains("line 1"),
        "{err}"
    );
    let missing = run_err(&["check", "/nonexistent/cases.jsonl"]).to_string();
    assert!(missing.contains("cannot read"), "{missing}");
}

#[test]
fn ops_lists_every_op_and_describes_one() {
    let (code, out) = run(&["ops"]);
    assert_eq!(code, 0);
    let registry = simpleop::Registry::global().unwrap();
    assert_eq!(out.lines().count(), registry.len() + 1);
    assert_eq!(
        out.lines().last().unwrap(),
        format!("{} ops", registry.len())
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("smooth_l1 ") && l.contains("unary"))
    );

    let (_, relu) = run(&["ops", "relu"]);
    assert!(
        relu.contains("gradient   T1 (reads output gradient, output)"),
        "{relu}"
    );
    assert!(
        relu.contains("inplace    forward InOut, gradient OutIn"),
        "{relu}"
    );
    assert!(relu.contains("pattern    elementwise"), "{relu}");
    let (_, sgd) = run(&["ops", "sgd_mom_update"]);
    assert!(sgd.contains("params     kwargs"), "{sgd}");
    assert!(sgd.contains("mutates    mom"), "{sgd}");
    let (_, dot) = run(&["ops", "dot"]);
    assert!(dot.contains("pattern    out_elemwise_fusable"), "{dot}");
    assert!(dot.contains("form       blob"), "{dot}");

    let err = run_err(&["ops", "relux"]).to_string();
    assert!(err.contains("did you mean `relu`"), "{err}");
}

#[test]
fn graph_writes_dot_with_and_without_a_memory_plan() {
    let case = case_line("graph/mlp_loss");
    let path = temp_file("mlp.json", &case["symbol"].to_string());
    let file = path.to_str().unwrap();
    let (code, dot) = run(&["graph", file]);
    assert_eq!(code, 0);
    assert!(dot.starts_with("digraph"), "{dot}");
    assert!(dot.contains("softmax_cross_entropy"), "{dot}");
    assert!(!dot.contains("buf 0"), "no plan without shapes");

    let shapes = [
        "--shape", "x=6,8", "--shape", "w1=8,16", "--shape", "b1=16", "--shape", "w2=16,4",
        "--shape", "b2=4", "--shape", "label=6",
    ];
    let mut args = vec!["graph", file];
    args.extend(shapes);
    args.push("--train");
    let out = temp_file("mlp.dot", "");
    args.extend(["-o", out.to_str().unwrap()]);
    let (code, printed) = run(&args);
    assert_eq!((code, printed.as_str()), (0, ""));
    let planned = std::fs::read_to_string(&out).unwrap();
    assert!(planned.contains("(6, 16) float32"), "{planned}");
    assert!(planned.contains("buf 0"), "{planned}");

    // MXNet's `__shape__`/`__dtype__` hints give the shapes by themselves
    let hinted = r#"{"nodes": [{"op": "null", "name": "x", "attrs": {"__dtype__": "2", "__shape__": "(2, 3)"}, "inputs": []}, {"op": "exp", "name": "exp0", "inputs": [[0, 0, 0]]}], "arg_nodes": [0], "node_row_ptr": [0, 1, 2], "heads": [[1, 0, 0]], "attrs": {"mxnet_version": ["int", 10901]}}"#;
    let hinted = temp_file("hinted.json", hinted);
    let (code, dot) = run(&["graph", hinted.to_str().unwrap(), "--train"]);
    assert_eq!(code, 0);
    assert!(dot.contains("(2, 3) float16"), "{dot}");
    assert!(dot.contains("memory:"), "{dot}");

    let err = run_err(&["graph", file, "--shape", "x=6;8"]).to_string();
    assert!(err.contains("--shape") && err.contains("x=6;8"), "{err}");
    let err = run_err(&["graph", file, "--shape", "x"]).to_string();
    assert!(err.contains("NAME=VALUE"), "{err}");
}

#[test]
fn usage_errors_exit_with_2() {
    let (code, _) = run(&["frobnicate"]);
    assert_eq!(code, 2);
    let (code, _) = run(&["check"]);
    assert_eq!(code, 2);
    let (code, help) = run(&["--help"]);
    assert_eq!(code, 0);
    assert!(help.contains("check") && help.contains("graph"), "{help}");
}

#[test]
fn endless_and_oversized_input_files_are_refused_quickly() {
    let start = std::time::Instant::now();
    // Without the cap this read /dev/zero until memory ran out.
    let err = run_err(&["graph", "/dev/zero"]).to_string();
    assert!(err.contains("/dev/zero"), "{err}");
    // 268435456 (256 MiB) unless SIMPLEOP_MAX_FILE_BYTES says otherwise.
    let cap = simpleop_cli::max_file_bytes();
    assert!(err.contains(&format!("limit of {cap} bytes")), "{err}");
    assert!(err.contains("--max-file-bytes"), "{err}");
    let err = run_err(&["graph", "/dev/zero", "--max-file-bytes", "1000"]).to_string();
    assert!(err.contains("limit of 1000 bytes"), "{err}");
    assert!(start.elapsed().as_secs() < 30, "{:?}", start.elapsed());

    // The flag also caps case files, and goes before the subcommand too.
    let good = case_line("relu/float32").to_string();
    let path = temp_file("capped.jsonl", &good);
    let len = good.len().to_string();
    let short = (good.len() - 1).to_string();
    let (code, out) = run(&["--max-file-bytes", &len, "check", path.to_str().unwrap()]);
    assert_eq!((code, out.as_str()), (0, "1 passed, 0 failed\n"));
    let err = run_err(&["check", path.to_str().unwrap(), "--max-file-bytes", &short]);
    let err = err.to_string();
    assert!(err.contains("capped.jsonl") && err.contains(&format!("limit of {short} bytes")));
}

/// Every bench row runs on small arrays, each reported once as it is
/// measured, and every ratio compares with a row measured before it.
#[test]
fn bench_runs_every_row_on_small_arrays() {
    simpleop_ops::link();
    let opts = simpleop_cli::bench::Options {
        elements: 1 << 12,
        reps: 1,
    };
    let mut reported = Vec::new();
    let rows = simpleop_cli::bench::run(opts, |r| reported.push(r.name.clone())).unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(reported, names);
    // 3 STREAM baselines, 21 f32 unary (4 of them in-cache), 2 binary,
    // 14 half, 1 eager chain, 5 fused chain, 2 composed smooth_l1, 4 row
    // reductions, 10 backward (5 hand-written, 5 derived by autodiff),
    // 1 dot, 3 dense, 4 tiny (typed, by name, recorded by autograd alone
    // and in a chain).
    assert_eq!(rows.len(), 70, "{names:?}");
    for (i, r) in rows.iter().enumerate() {
        assert!(r.ms.is_finite() && r.ms >= 0.0, "{r:?}");
        assert_eq!(r.baseline.is_some(), r.ratio.is_some(), "{r:?}");
        if let (Some(base), Some(ratio)) = (&r.baseline, r.ratio) {
            assert!(names[..i].contains(&base.as_str()), "{r:?}");
            assert!(ratio.is_finite() && ratio > 0.0, "{r:?}");
        }
    }
    for row in [
        "relu/bfloat16/out",
        "chain6/fused/interpreted",
        "dense/unfused",
    ] {
        assert!(names.contains(&row), "{row} missing from {names:?}");
    }
    assert!(simpleop_cli::bench::table(&rows).lines().count() == rows.len() + 1);
}
