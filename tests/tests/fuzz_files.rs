//! Mutation fuzzing of the file formats simpleop reads: `.npy` bytes
//! (`NDArray::read_npy`) and conformance case files (`parse_cases`, then
//! each case run along both paths). Each input must give `Ok` or `Err`; a
//! panic fails the test and prints the input (hex for `.npy`, text for
//! cases). `.npy` reading must also never make one allocation much larger
//! than its input: a header cannot buy memory it does not bring.
//!
//! A short run is part of `cargo test`; for a long one:
//! `SIMPLEOP_FUZZ_CASES=200000 cargo test --release --test fuzz_files -- --nocapture`
//! (see `simpleop_tests::fuzz` for the seed and trace variables).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use simpleop::{DType, NDArray};
use simpleop_cli::conformance::{self, Path};
use simpleop_tests::fuzz::{self, Rng};

/// Records the largest allocation each thread asks for, so a driver can
/// bound what one input costs.
struct Tracking;

thread_local! {
    // const-initialised with no destructor: safe to touch from `alloc`.
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
}

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged, so `System`'s guarantees hold; `note` neither allocates nor
// unwinds.
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: forwarded as received; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: `ptr` and `layout` come from this allocator, which got
        // them from `System`; the caller upholds `realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Tracking = Tracking;

/// A `.npy` file with header `dict`, padded as NumPy pads it, in format
/// `version` (1, 2 or 3).
fn npy(version: u8, dict: &str, payload: &[u8]) -> Vec<u8> {
    let prefix = if version == 1 { 10 } else { 12 };
    let mut header = dict.to_string();
    while !(prefix + header.len() + 1).is_multiple_of(64) {
        header.push(' ');
    }
    header.push('\n');
    let mut out = vec![0x93, b'N', b'U', b'M', b'P', b'Y', version, 0];
    match version {
        1 => out.extend_from_slice(&(header.len() as u16).to_le_bytes()),
        _ => out.extend_from_slice(&(header.len() as u32).to_le_bytes()),
    }
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(payload);
    out
}

/// Valid files: every dtype written by `write_npy`, and by hand in both
/// byte orders, both axis orders, all three versions, 0-d and empty.
fn npy_corpus() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let values: Vec<f64> = (0..12).map(|i| i as f64 * 1.5 - 4.0).collect();
    for dtype in [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::I32,
        DType::I64,
        DType::U8,
    ] {
        for shape in [&[12][..], &[3, 4], &[2, 3, 2]] {
            let x = NDArray::from_f64(&values, shape, dtype).unwrap();
            let mut bytes = Vec::new();
            x.write_npy(&mut bytes).unwrap();
            out.push(bytes);
        }
    }
    let descrs = [
        ("f4", 4),
        ("f8", 8),
        ("f2", 2),
        ("i4", 4),
        ("i8", 8),
        ("u1", 1),
    ];
    let shapes = [
        ("(2, 3)", 6),
        ("()", 1),
        ("(0,)", 0),
        ("(3, 0, 2)", 0),
        ("(1, 2, 1, 3)", 6),
    ];
    let mut i = 0u8;
    for (code, size) in descrs {
        for order in ["<", ">", "|"] {
            if order == "|" && size > 1 {
                continue;
            }
            for (shape, n) in shapes {
                i = i.wrapping_add(1);
                let fortran = if i.is_multiple_of(2) { "True" } else { "False" };
                let dict = format!(
                    "{{'descr': '{order}{code}', 'fortran_order': {fortran}, 'shape': {shape}, }}"
                );
                let payload: Vec<u8> = (0..n * size).map(|b| (b as u8).wrapping_mul(37)).collect();
                out.push(npy(1 + i % 3, &dict, &payload));
            }
        }
    }
    out
}

/// Edits aimed at the header: a shape dimension made huge, the header
/// length field changed, or the version byte changed.
fn mutate_header(bytes: &mut Vec<u8>, rng: &mut Rng) {
    match rng.below(3) {
        0 => {
            // A digit run inside the shape tuple grows or becomes huge.
            let Some(open) = bytes.windows(8).position(|w| w == b"'shape':") else {
                return;
            };
            let digits: Vec<usize> = (open..bytes.len().min(open + 60))
                .filter(|&i| bytes[i].is_ascii_digit())
                .collect();
            if let Some(&at) = digits.get(rng.below(digits.len())) {
                let big = *rng.pick(&["4294967296", "9223372036854775809", "99999", "65536"]);
                bytes.splice(at..at, big.bytes());
            }
        }
        1 if bytes.len() >= 12 => {
            let field = *rng.pick(&[[0xff, 0xff], [0x00, 0x00], [0xff, 0x7f], [0x01, 0x00]]);
            let at = 8 + rng.below(if bytes[6] == 1 { 2 } else { 4 });
            bytes[at] = field[rng.below(2)];
        }
        _ if bytes.len() >= 8 => bytes[6] = *rng.pick(&[1, 2, 3, 0, 4, 255]),
        _ => {}
    }
}

fn npy_input(corpus: &[Vec<u8>], rng: &mut Rng) -> Vec<u8> {
    let mut bytes = rng.pick(corpus).clone();
    match rng.below(10) {
        0..=5 => fuzz::mutate_bytes(&mut bytes, rng),
        6..=7 => mutate_header(&mut bytes, rng),
        8 => {
            let other: &Vec<u8> = rng.pick(corpus);
            bytes = fuzz::splice(&bytes, other, rng);
        }
        _ => {
            mutate_header(&mut bytes, rng);
            fuzz::mutate_bytes(&mut bytes, rng);
        }
    }
    bytes
}

/// Reads `bytes`; `Ok(true)` for an `Err`. A loaded array must round-trip
/// through `write_npy`, and no allocation may exceed 1 MiB plus four times
/// the input's size.
fn check_npy(bytes: &[u8]) -> Result<bool, String> {
    LARGEST.with(|l| l.set(0));
    let read = NDArray::read_npy(bytes);
    let largest = LARGEST.with(Cell::get);
    if largest > (1 << 20) + 4 * bytes.len() {
        return Err(format!(
            "allocated {largest} bytes for a {}-byte input",
            bytes.len()
        ));
    }
    let Ok(x) = read else {
        return Ok(true);
    };
    let mut again = Vec::new();
    x.write_npy(&mut again)
        .map_err(|e| format!("write_npy: {e}"))?;
    let y = NDArray::read_npy(&again[..]).map_err(|e| format!("re-read: {e}"))?;
    let mut third = Vec::new();
    y.write_npy(&mut third)
        .map_err(|e| format!("write_npy: {e}"))?;
    if third != again || y.shape() != x.shape() {
        return Err("loaded array does not round-trip".into());
    }
    Ok(false)
}

#[test]
fn npy_bytes_give_ok_or_err() {
    let corpus = npy_corpus();
    // Every seed is valid: the mutations start from files that load.
    for (i, seed) in corpus.iter().enumerate() {
        assert_eq!(
            check_npy(seed),
            Ok(false),
            "seed {i}: {}",
            fuzz::show_bytes(seed)
        );
    }
    let tally = fuzz::run(
        "npy",
        fuzz::cases(100_000),
        |_, rng| npy_input(&corpus, rng),
        |b| fuzz::show_bytes(b),
        |b| check_npy(b),
    );
    // Most mutations break the file, but not all.
    assert!(
        tally.errors > tally.tried / 4 && tally.errors < tally.tried,
        "{tally:?}"
    );
}

const CASES: &str = include_str!("../conformance/mxnet-ops.jsonl");

/// A number inside a `"shape"` list or attribute made huge or odd.
fn mutate_shape(text: &str, rng: &mut Rng) -> String {
    let starts: Vec<usize> = text.match_indices("shape").map(|(i, _)| i).collect();
    let Some(&start) = starts.get(rng.below(starts.len())) else {
        return text.to_string();
    };
    let window = &text[start..text.len().min(start + 40)];
    let digits: Vec<usize> = window
        .char_indices()
        .filter(|(_, c)| c.is_ascii_digit())
        .map(|(i, _)| start + i)
        .collect();
    let Some(&at) = digits.get(rng.below(digits.len())) else {
        return text.to_string();
    };
    let with = *rng.pick(&[
        "100000",
        "4294967296",
        "9223372036854775807",
        "0",
        "-1",
        "1e9",
    ]);
    format!("{}{with}{}", &text[..at], &text[at + 1..])
}

fn case_input(lines: &[&str], rng: &mut Rng) -> String {
    let mut text = rng.pick(lines).to_string();
    if rng.chance(10) {
        text = format!("{text}\n{}", rng.pick(lines));
    }
    match rng.below(10) {
        0..=5 => fuzz::mutate_text(&text, rng),
        6..=8 => mutate_shape(&text, rng),
        _ => {
            let bytes = fuzz::splice(text.as_bytes(), rng.pick(lines).as_bytes(), rng);
            String::from_utf8_lossy(&bytes).into_owned()
        }
    }
}

/// Parses and runs `text`; `Ok(true)` when parsing failed or any case
/// failed along either path. Counts the inputs that parsed in `parsed`.
fn check_cases(text: &str, parsed: &mut usize) -> Result<bool, String> {
    let Ok(cases) = conformance::parse_cases(text) else {
        return Ok(true);
    };
    *parsed += 1;
    let mut failed = false;
    for case in &cases {
        for path in [
            Path::Executor {
                memory_planning: true,
            },
            Path::Eager,
        ] {
            failed |= conformance::run(case, path).is_err();
        }
    }
    Ok(failed)
}

#[test]
fn conformance_case_files_give_ok_or_err() {
    simpleop_ops::link();
    let lines: Vec<&str> = CASES.lines().filter(|l| !l.trim().is_empty()).collect();
    // The unmutated cases pass: a failure below comes from the mutation.
    assert!(conformance::check(&conformance::parse_cases(CASES).unwrap()).ok());
    let mut parsed = 0;
    let tally = fuzz::run(
        "cases",
        fuzz::cases(20_000),
        |_, rng| case_input(&lines, rng),
        |t| fuzz::show_text(t),
        |t| check_cases(t, &mut parsed),
    );
    eprintln!("fuzz cases: {parsed} inputs parsed (and were run)");
    assert!(
        tally.errors < tally.tried && parsed > tally.tried / 10,
        "{tally:?}"
    );
}
