//! Weight files: round trips of every dtype, bit for bit; files written by
//! MXNet 1.9.1 (`tests/conformance/gen_params.py`) read as MXNet reads them
//! and written back byte for byte; the legacy layouts; bad files; the
//! executor's weights out and in.

use std::collections::HashMap;
use std::io::Read;
use std::path::PathBuf;

use super::ParamFile;
use super::io::CHUNK_BYTES;
use crate::params::LoadOptions;
use crate::symbol::Symbol;
use crate::{DType, Error, NDArray, Shape, bf16, dispatch_any, f16};

/// `tests/data/params/NAME` in the workspace.
pub(super) fn data_file(name: &str) -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/data/params/"
    ))
    .join(name)
}

/// The array's elements as little-endian bytes.
pub(super) fn le_bytes(a: &NDArray) -> Vec<u8> {
    let mut out: Vec<u8> =
        dispatch_any!(a.dtype(), T => bytemuck::cast_slice(a.as_slice::<T>().unwrap()).to_vec());
    if cfg!(target_endian = "big") {
        for e in out.chunks_exact_mut(a.dtype().size()) {
            e.reverse();
        }
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One array of every dtype, with the bit patterns that a conversion
/// would lose: NaN payloads, signed zeros, subnormals, extremes.
pub(super) fn every_dtype() -> Vec<(String, NDArray)> {
    let f32s = vec![
        0.0f32,
        -0.0,
        f32::from_bits(0x7fc0_1234),
        f32::from_bits(0xff80_0001),
        f32::INFINITY,
        f32::MIN_POSITIVE / 8.0,
    ];
    let f64s = vec![
        f64::from_bits(0x7ff8_0000_dead_beef),
        -0.0,
        5e-324,
        f64::MAX,
    ];
    let f16s: Vec<f16> = [0x7e01u16, 0x8000, 0x0001, 0x7bff, 0xfc00, 0x3c00]
        .map(f16::from_bits)
        .to_vec();
    let bf16s: Vec<bf16> = [0x7fc1u16, 0x8000, 0x0001, 0x7f7f]
        .map(bf16::from_bits)
        .to_vec();
    vec![
        ("f32".into(), NDArray::from_vec(f32s, [2, 3]).unwrap()),
        ("f64".into(), NDArray::from_vec(f64s, [4]).unwrap()),
        ("f16".into(), NDArray::from_vec(f16s, [3, 1, 2]).unwrap()),
        ("bf16".into(), NDArray::from_vec(bf16s, [2, 2]).unwrap()),
        (
            "i32".into(),
            NDArray::from_vec(vec![i32::MIN, -1, 0, i32::MAX], [4]).unwrap(),
        ),
        (
            "i64".into(),
            NDArray::from_vec(vec![i64::MIN, (1 << 53) + 1, i64::MAX], [3]).unwrap(),
        ),
        (
            "u8".into(),
            NDArray::from_vec(vec![0u8, 1, 128, 255], [2, 2]).unwrap(),
        ),
        ("empty".into(), NDArray::zeros([0, 3], DType::F32)),
    ]
}

/// Same names, dtypes, shapes and bits.
fn assert_same(got: &[(String, NDArray)], want: &[(String, NDArray)]) {
    assert_eq!(got.len(), want.len());
    for ((gn, g), (wn, w)) in got.iter().zip(want) {
        assert_eq!(gn, wn);
        assert_eq!((g.dtype(), g.shape()), (w.dtype(), w.shape()), "{gn}");
        assert_eq!(le_bytes(g), le_bytes(w), "{gn}");
    }
}

fn params_bytes(entries: &[(String, NDArray)]) -> Vec<u8> {
    let mut out = Vec::new();
    NDArray::write_params(&mut out, entries).unwrap();
    out
}

/// A temporary directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let dir =
            std::env::temp_dir().join(format!("simpleop-params-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
    fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn every_dtype_round_trips_bit_for_bit_in_both_formats() {
    let entries = every_dtype();
    let bytes = params_bytes(&entries);
    assert_same(&NDArray::read_params(&bytes[..]).unwrap(), &entries);
    assert_same(&NDArray::read_params_bytes(&bytes).unwrap(), &entries);

    let mut st = Vec::new();
    NDArray::write_safetensors(&mut st, &entries).unwrap();
    // safetensors keeps no order: compare by name.
    let mut back = NDArray::read_safetensors_bytes(&st).unwrap();
    back.sort_by(|a, b| a.0.cmp(&b.0));
    let mut want = entries.clone();
    want.sort_by(|a, b| a.0.cmp(&b.0));
    assert_same(&back, &want);
    let mut streamed = NDArray::read_safetensors(&st[..]).unwrap();
    streamed.sort_by(|a, b| a.0.cmp(&b.0));
    assert_same(&streamed, &want);

    // A 0-d array makes the list use MXNet's NumPy layout (V3), which
    // reads back as 0-d.
    let mut with_scalar = entries.clone();
    with_scalar.push((
        "s".into(),
        NDArray::from_vec(vec![2.5f64], Shape::new(vec![])).unwrap(),
    ));
    let bytes = params_bytes(&with_scalar);
    assert_eq!(&bytes[24..28], &0xF993_FACAu32.to_le_bytes());
    assert_same(&NDArray::read_params_bytes(&bytes).unwrap(), &with_scalar);
}

#[test]
fn files_round_trip_atomically_and_errors_name_the_file() {
    let dir = TempDir::new("files");
    let entries = every_dtype();
    let path = dir.0.join("w.params");
    NDArray::save_params(&path, &entries).unwrap();
    assert_same(&NDArray::load_params(&path).unwrap(), &entries);
    let st = dir.0.join("w.safetensors");
    NDArray::save_safetensors(&st, &entries).unwrap();
    assert_eq!(NDArray::load_safetensors(&st).unwrap().len(), entries.len());
    // Only the two files: no temporary file is left behind.
    assert_eq!(dir.names(), ["w.params", "w.safetensors"]);

    // A save that fails leaves the old file as it was, and no temporary.
    let before = std::fs::read(&st).unwrap();
    let x = NDArray::zeros([1], DType::F32);
    let err = NDArray::save_safetensors(&st, &[("a", &x), ("a", &x)]).unwrap_err();
    assert!(err.to_string().contains("`a` is given twice"), "{err}");
    assert_eq!(std::fs::read(&st).unwrap(), before);
    assert_eq!(dir.names(), ["w.params", "w.safetensors"]);

    let missing = dir.0.join("nope/w.params");
    let err = NDArray::save_params(&missing, &entries)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("save_params: `") && err.contains("nope"),
        "{err}"
    );
    let err = NDArray::load_params(dir.0.join("missing.params"))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("load_params: `") && err.contains("missing.params"),
        "{err}"
    );
    let err = NDArray::load_safetensors(&path).unwrap_err().to_string();
    assert!(
        err.starts_with("load_safetensors: `") && err.contains("w.params"),
        "{err}"
    );
}

#[derive(serde::Deserialize)]
struct Expected {
    entries: Option<Vec<ExpectedEntry>>,
    error: Option<Vec<String>>,
}

#[derive(serde::Deserialize)]
struct ExpectedEntry {
    name: String,
    dtype: String,
    shape: Vec<usize>,
    hex: String,
}

fn expected() -> HashMap<String, Expected> {
    let text = std::fs::read_to_string(data_file("expected.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn mxnet_files_load_as_mxnet_reads_them() {
    let expected = expected();
    assert!(expected.len() >= 7);
    for (file, want) in &expected {
        let got = NDArray::load_params(data_file(file));
        if let Some(needles) = &want.error {
            let err = got.unwrap_err().to_string();
            assert!(err.contains(file.as_str()), "{err}");
            for n in needles {
                assert!(err.contains(n.as_str()), "{file}: {err} lacks {n}");
            }
            continue;
        }
        let got = got.unwrap_or_else(|e| panic!("{file}: {e}"));
        let want = want.entries.as_ref().unwrap();
        assert_eq!(got.len(), want.len(), "{file}");
        for ((name, a), w) in got.iter().zip(want) {
            assert_eq!(name, &w.name, "{file}");
            assert_eq!(a.dtype().name(), w.dtype, "{file}: {name}");
            assert_eq!(a.shape().dims(), &w.shape[..], "{file}: {name}");
            assert_eq!(hex(&le_bytes(a)), w.hex, "{file}: {name}");
        }
        // The same from a stream, and from bytes.
        let bytes = std::fs::read(data_file(file)).unwrap();
        assert_same(&NDArray::read_params(&bytes[..]).unwrap(), &got);
        assert_same(&NDArray::read_params_bytes(&bytes).unwrap(), &got);
    }
}

#[test]
fn files_written_here_are_byte_for_byte_mxnets() {
    for file in [
        "dtypes.params",
        "unnamed.params",
        "numpy.params",
        "gluon.params",
        "dense-0000.params",
    ] {
        let mxnet = std::fs::read(data_file(file)).unwrap();
        let entries = NDArray::read_params_bytes(&mxnet).unwrap();
        assert_eq!(params_bytes(&entries), mxnet, "{file}");
    }
}

#[test]
fn an_export_splits_into_args_and_aux() {
    let p = ParamFile::load(data_file("dense-0000.params")).unwrap();
    let args: Vec<&str> = p.args.keys().map(String::as_str).collect();
    let aux: Vec<&str> = p.aux.keys().map(String::as_str).collect();
    assert_eq!(
        args,
        [
            "batchnorm0_beta",
            "batchnorm0_gamma",
            "dense2_bias",
            "dense2_weight",
            "dense3_bias",
            "dense3_weight"
        ]
    );
    assert_eq!(aux, ["batchnorm0_running_mean", "batchnorm0_running_var"]);
    assert_eq!(p.args["dense2_weight"].shape().dims(), [3, 4]);
    // Back to prefixed entries, and through a file.
    let dir = TempDir::new("split");
    let path = dir.0.join("p.params");
    p.save(&path).unwrap();
    assert_eq!(ParamFile::load(&path).unwrap(), p);
    let names: Vec<String> = p.to_entries().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names[0], "arg:batchnorm0_beta");
    assert_eq!(names[7], "aux:batchnorm0_running_var");

    // Gluon's bare names are arguments; a name twice is an error.
    let g = ParamFile::load(data_file("gluon.params")).unwrap();
    assert!(g.aux.is_empty() && g.args.contains_key("0.weight"));
    let x = NDArray::zeros([1], DType::F32);
    let err = ParamFile::from_entries([("arg:w".into(), x.clone()), ("w".into(), x)]).unwrap_err();
    assert!(err.to_string().contains("`w`: occurs twice"), "{err}");
}

/// A list of raw array records, with `names` (none for an unnamed list).
fn list(arrays: &[Vec<u8>], names: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&0x112u64.to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(&(arrays.len() as u64).to_le_bytes());
    for a in arrays {
        out.extend_from_slice(a);
    }
    out.extend_from_slice(&(names.len() as u64).to_le_bytes());
    for n in names {
        out.extend_from_slice(&(n.len() as u64).to_le_bytes());
        out.extend_from_slice(n.as_bytes());
    }
    out
}

/// A V2/V3 array record with storage type `stype` and `dims` (i64).
fn record(magic: u32, stype: i32, dims: &[i64], flag: i32, data: &[u8]) -> Vec<u8> {
    let mut out = magic.to_le_bytes().to_vec();
    out.extend_from_slice(&stype.to_le_bytes());
    out.extend_from_slice(&(dims.len() as i32).to_le_bytes());
    for d in dims {
        out.extend_from_slice(&d.to_le_bytes());
    }
    out.extend_from_slice(&1i32.to_le_bytes());
    out.extend_from_slice(&0i32.to_le_bytes());
    out.extend_from_slice(&flag.to_le_bytes());
    out.extend_from_slice(data);
    out
}

/// An array record of unknown shape: MXNet writes nothing after it.
fn unknown(magic: u32, dims: &[i64]) -> Vec<u8> {
    let mut out = magic.to_le_bytes().to_vec();
    out.extend_from_slice(&0i32.to_le_bytes());
    out.extend_from_slice(&(dims.len() as i32).to_le_bytes());
    for d in dims {
        out.extend_from_slice(&d.to_le_bytes());
    }
    out
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn load_err(bytes: &[u8]) -> String {
    let sized = NDArray::read_params_bytes(bytes).unwrap_err().to_string();
    assert!(
        NDArray::read_params(bytes).is_err(),
        "the stream read agrees"
    );
    sized
}

#[test]
fn legacy_layouts_load() {
    // V1: a magic number, no storage type, 64-bit dimensions.
    let mut v1 = 0xF993_FAC8u32.to_le_bytes().to_vec();
    v1.extend_from_slice(&2i32.to_le_bytes());
    v1.extend_from_slice(&1i64.to_le_bytes());
    v1.extend_from_slice(&2i64.to_le_bytes());
    v1.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
    v1.extend_from_slice(&0i32.to_le_bytes());
    v1.extend_from_slice(&f32_bytes(&[1.0, 2.0]));
    // Before V1: the first word is the number of dimensions, each a u32.
    let mut v0 = 1u32.to_le_bytes().to_vec();
    v0.extend_from_slice(&3u32.to_le_bytes());
    v0.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
    v0.extend_from_slice(&4i32.to_le_bytes());
    for v in [7i32, 8, 9] {
        v0.extend_from_slice(&v.to_le_bytes());
    }
    let got = NDArray::read_params_bytes(&list(&[v1, v0], &["a", "b"])).unwrap();
    assert_eq!(got[0].1.shape().dims(), [1, 2]);
    assert_eq!(got[0].1.to_vec::<f32>().unwrap(), [1.0, 2.0]);
    assert_eq!(got[1].1.to_vec::<i32>().unwrap(), [7, 8, 9]);
}

#[test]
fn what_simpleop_cannot_hold_is_an_error_naming_the_array() {
    let ok = record(0xF993_FAC9, 0, &[1], 0, &f32_bytes(&[1.0]));
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            list(
                &[ok.clone(), record(0xF993_FAC9, 1, &[1], 0, &[])],
                &["a", "b"],
            ),
            "array 1: row_sparse storage (storage type 1) is not supported",
        ),
        (
            list(&[record(0xF993_FAC9, 2, &[1], 0, &[])], &[]),
            "array 0: csr storage",
        ),
        (
            list(
                &[record(0xF993_FAC9, 0, &[2], 9, &[0; 4]), ok.clone()],
                &["u", "v"],
            ),
            "array 0 (`u`): uint16 (MXNet type flag 9) has no simpleop dtype",
        ),
        (
            list(&[record(0xF993_FAC9, 0, &[2], 42, &[0; 4])], &["x"]),
            "array 0: unknown MXNet type flag 42",
        ),
        (
            // An empty NDArray: legacy semantics, no dimensions, nothing
            // after them.
            list(&[ok.clone(), unknown(0xF993_FAC9, &[])], &["a", "none"]),
            "array 1 (`none`): its shape is unknown",
        ),
        (
            // NumPy semantics: an unknown dimension.
            list(&[unknown(0xF993_FACA, &[2, -1]), ok.clone()], &["u", "v"]),
            "array 0 (`u`): its shape is unknown",
        ),
        (
            list(&[record(0xF993_FAC9, 0, &[-2], 0, &[])], &["n"]),
            "array 0 has a negative dimension -2",
        ),
        (
            list(std::slice::from_ref(&ok), &["a", "b"]),
            "the file has 1 arrays but 2 names",
        ),
        (
            list(std::slice::from_ref(&ok), &[])
                .into_iter()
                .take(4)
                .collect(),
            "the file ends inside the list's magic number",
        ),
        (
            b"\x13\x01\0\0\0\0\0\0".to_vec(),
            "magic number 0x113, expected 0x112",
        ),
        (
            list(&[0xdead_beefu32.to_le_bytes().to_vec()], &[]),
            "starts with 0xdeadbeef: not an NDArray magic number",
        ),
        (
            list(&[record(0xF993_FAC9, 0, &[1 << 40, 1 << 40], 0, &[])], &[]),
            "more than isize::MAX bytes",
        ),
        (
            list(&[record(0xF993_FAC9, 0, &[1 << 30], 1, &[0; 16])], &[]),
            "needs 8589934592 bytes at byte 56 but the file has 24 left",
        ),
    ];
    for (bytes, want) in cases {
        let err = load_err(&bytes);
        assert!(err.contains(want), "{err}\n  wanted: {want}");
        assert!(err.starts_with("load_params: `<bytes>`: "), "{err}");
    }
    // A name that is not UTF-8.
    let mut bad = list(&[ok], &["ab"]);
    let n = bad.len();
    bad[n - 1] = 0xff;
    assert!(load_err(&bad).contains("name 0 is not UTF-8"));
}

/// A reader that records the largest read it was asked for.
struct Probe<'a> {
    data: &'a [u8],
    largest: usize,
}

impl Read for Probe<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.largest = self.largest.max(buf.len());
        self.data.read(buf)
    }
}

#[test]
fn a_stream_that_promises_more_than_it_holds_costs_only_what_it_holds() {
    // 2^37 f64 elements (1 TiB) declared, 8 bytes present.
    let huge = list(
        &[record(0xF993_FAC9, 0, &[1 << 17, 1 << 20], 1, &[0; 8])],
        &[],
    );
    let mut probe = Probe {
        data: &huge,
        largest: 0,
    };
    let start = std::time::Instant::now();
    let err = NDArray::read_params(&mut probe).unwrap_err().to_string();
    assert!(err.contains("the file ends inside array 0's data"), "{err}");
    assert!(probe.largest <= CHUNK_BYTES, "asked for {}", probe.largest);
    assert!(start.elapsed().as_secs() < 10);
    let err = load_err(&huge);
    assert!(err.contains("needs 1099511627776 bytes"), "{err}");

    // A 2^40-byte name.
    let mut big_name = list(&[record(0xF993_FAC9, 0, &[1], 0, &[0; 4])], &[]);
    let n = big_name.len();
    big_name[n - 8..].copy_from_slice(&1u64.to_le_bytes());
    big_name.extend_from_slice(&(1u64 << 40).to_le_bytes());
    big_name.extend_from_slice(b"abc");
    let mut probe = Probe {
        data: &big_name,
        largest: 0,
    };
    let err = NDArray::read_params(&mut probe).unwrap_err().to_string();
    assert!(err.contains("the file ends inside name 0"), "{err}");
    assert!(probe.largest <= CHUNK_BYTES);
    let err = load_err(&big_name);
    assert!(err.contains("name 0 needs 1099511627776 bytes"), "{err}");
}

#[test]
fn safetensors_files_match_the_crate_and_bad_ones_fail() {
    use ::safetensors::{Dtype, serialize, tensor::TensorView};
    let a = NDArray::from_vec(vec![1.0f32, -2.0, 3.5, 0.25], [2, 2]).unwrap();
    let b = NDArray::from_vec(vec![7i64, -8], [2]).unwrap();
    let c = NDArray::from_vec(vec![1u8, 2, 3], [3]).unwrap();
    let ours = {
        let mut v = Vec::new();
        NDArray::write_safetensors(&mut v, &[("a", &a), ("b", &b), ("c", &c)]).unwrap();
        v
    };
    let (ab, bb, cb) = (le_bytes(&a), le_bytes(&b), le_bytes(&c));
    let theirs = serialize(
        [
            ("a", TensorView::new(Dtype::F32, vec![2, 2], &ab).unwrap()),
            ("b", TensorView::new(Dtype::I64, vec![2], &bb).unwrap()),
            ("c", TensorView::new(Dtype::U8, vec![3], &cb).unwrap()),
        ],
        None,
    )
    .unwrap();
    assert_eq!(ours, theirs, "the crate's own layout");
    // In file (offset) order: widest dtype first.
    let names: Vec<String> = NDArray::read_safetensors_bytes(&theirs)
        .unwrap()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, ["b", "a", "c"]);

    let st_err = |bytes: &[u8]| {
        let sized = NDArray::read_safetensors_bytes(bytes)
            .unwrap_err()
            .to_string();
        assert!(NDArray::read_safetensors(bytes).is_err());
        sized
    };
    let i8s = [1u8, 2];
    let other = serialize(
        [("q", TensorView::new(Dtype::I8, vec![2], &i8s).unwrap())],
        None,
    )
    .unwrap();
    assert!(st_err(&other).contains("tensor `q`: dtype I8 has no simpleop dtype"));
    let mut trailing = theirs.clone();
    trailing.push(0);
    assert!(st_err(&trailing).contains("1 bytes follow"));
    assert!(st_err(&theirs[..theirs.len() - 1]).contains("needs"));
    let mut huge = u64::MAX.to_le_bytes().to_vec();
    huge.extend_from_slice(b"{}");
    assert!(st_err(&huge).contains("exceeds the limit"));
    let bad_json = b"\x02\0\0\0\0\0\0\0{x";
    assert!(st_err(bad_json).contains("not a safetensors header"));
    let x = NDArray::zeros([1], DType::F32);
    let err = NDArray::write_safetensors(Vec::new(), &[("__metadata__", &x)]).unwrap_err();
    assert!(err.to_string().contains("reserved"), "{err}");
}

/// A graph of variables only (the core has no ops of its own): binding it
/// gives an executor whose arguments are `w`, `b` and `data`.
fn executor() -> crate::symbol::Executor {
    let g = Symbol::group(&[Symbol::var("w"), Symbol::var("b"), Symbol::var("data")]);
    let args = HashMap::from([
        ("w".to_owned(), NDArray::zeros([2, 3], DType::F32)),
        ("b".to_owned(), NDArray::zeros([3], DType::F16)),
        ("data".to_owned(), NDArray::zeros([4, 2], DType::F32)),
    ]);
    g.bind(args, HashMap::new(), HashMap::new()).unwrap()
}

#[test]
fn an_executor_hands_its_weights_out_and_takes_them_back() {
    let mut exe = executor();
    let w = NDArray::from_vec(
        vec![1.0f32, -0.0, f32::from_bits(0x7fc0_0001), 4.0, 5.0, 6.0],
        [2, 3],
    )
    .unwrap();
    let b = NDArray::from_vec(
        [0x3c00u16, 0x8000, 0x0001].map(f16::from_bits).to_vec(),
        [3],
    )
    .unwrap();
    exe.set_arg("w", &w).unwrap();
    exe.set_arg("b", &b).unwrap();

    let named = exe.named_args();
    let names: Vec<&str> = named.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["w", "b", "data"]);
    let params = exe.params(&["data"]);
    let names: Vec<&str> = params.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["arg:w", "arg:b"]);

    let dir = TempDir::new("exe");
    let path = dir.0.join("m.params");
    exe.save_params(&path, &["data"]).unwrap();
    let loaded = NDArray::load_params(&path).unwrap();
    let mut fresh = executor();
    let strict = LoadOptions {
        inputs: &["data"],
        ..LoadOptions::default()
    };
    fresh.load_params(&loaded, &strict).unwrap();
    assert_eq!(le_bytes(fresh.arg("w").unwrap()), le_bytes(&w));
    assert_eq!(le_bytes(fresh.arg("b").unwrap()), le_bytes(&b));
    // The handed-out copies keep their values when the executor changes.
    let mut exe = exe;
    exe.arg_mut("w").unwrap().as_slice_mut::<f32>().unwrap()[0] = 9.0;
    assert_eq!(named[0].1.to_vec::<f32>().unwrap()[0], 1.0);

    // Bare names (Gluon's) work as well.
    let bare: Vec<(String, NDArray)> = vec![("w".into(), w.clone()), ("b".into(), b.clone())];
    executor().load_params(&bare, &strict).unwrap();
}

#[test]
fn loading_weights_checks_everything_before_changing_anything() {
    let w = NDArray::ones([2, 3], DType::F32);
    let b = NDArray::ones([3], DType::F16);
    let strict = LoadOptions {
        inputs: &["data"],
        ..LoadOptions::default()
    };
    let load = |entries: Vec<(&str, &NDArray)>, options: &LoadOptions<'_>| {
        let mut exe = executor();
        let r = exe.load_params(&entries, options);
        (exe, r)
    };
    let unchanged = |exe: &crate::symbol::Executor| {
        exe.arg("w").unwrap().to_f64_vec().iter().all(|&v| v == 0.0)
    };

    // Missing: an error naming every missing parameter, unless allowed.
    let (exe, r) = load(vec![("arg:w", &w)], &strict);
    let err = r.unwrap_err().to_string();
    assert!(
        err.contains("argument `b`: is missing") && err.contains("missing: b)"),
        "{err}"
    );
    assert!(unchanged(&exe));
    let (exe, r) = load(vec![("arg:w", &w)], &LoadOptions::default());
    assert!(r.unwrap_err().to_string().contains("missing: b, data"));
    assert!(unchanged(&exe));
    let (exe, r) = load(
        vec![("arg:w", &w)],
        &LoadOptions {
            allow_missing: true,
            ..strict
        },
    );
    r.unwrap();
    assert!(!unchanged(&exe));

    // Extra names, aux states among them: errors unless ignored.
    for extra in ["arg:nope", "aux:bn_moving_mean", "nope"] {
        let (exe, r) = load(vec![("arg:w", &w), ("arg:b", &b), (extra, &b)], &strict);
        let err = r.unwrap_err().to_string();
        assert!(
            err.contains(&format!(
                "`{extra}`: is in the parameter list but is no argument"
            )),
            "{err}"
        );
        assert!(unchanged(&exe));
        let (exe, r) = load(
            vec![("arg:w", &w), ("arg:b", &b), (extra, &b)],
            &LoadOptions {
                ignore_extra: true,
                ..strict
            },
        );
        r.unwrap();
        assert!(!unchanged(&exe));
    }

    // A shape or dtype that differs from the bound one; a name twice.
    let (exe, r) = load(vec![("arg:w", &w), ("arg:b", &w)], &strict);
    assert!(matches!(r, Err(Error::Argument { ref arg, .. }) if arg == "b"));
    assert!(unchanged(&exe));
    let b32 = NDArray::ones([3], DType::F32);
    let (_, r) = load(vec![("arg:w", &w), ("arg:b", &b32)], &strict);
    assert!(
        r.unwrap_err()
            .to_string()
            .contains("is bound as (3,) float16, got (3,) float32")
    );
    let (_, r) = load(vec![("arg:w", &w), ("w", &w), ("arg:b", &b)], &strict);
    assert!(
        r.unwrap_err()
            .to_string()
            .contains("argument `w` is given twice")
    );
}
