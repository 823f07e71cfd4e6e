//! Mutation fuzzing of the weight-file readers, in the manner of the
//! workspace's drivers (`tests/src/fuzz.rs`, which the core's unit tests
//! cannot depend on): valid `.params` files (MXNet's own, from
//! `tests/data/params/`, and ones written here in every layout) and
//! safetensors files, mutated with bit flips, interesting bytes, huge
//! counts, dimensions and lengths spliced in, deletions, duplications,
//! truncation and splicing of two files. Each input is read from bytes
//! (length known) and from a stream (length unknown); both must give `Ok`
//! or `Err` and agree, never panic, and never make one allocation larger
//! than 1 MiB plus four times the input. Every truncation of every seed is
//! an error.
//!
//! A short run is part of `cargo test`; for a long one:
//! `SIMPLEOP_FUZZ_CASES=1000000 cargo test -p simpleop --lib params::fuzz -- --nocapture`
//! (the test profile runs a million inputs of each driver in seconds).
//! As in the workspace's drivers, `SIMPLEOP_FUZZ_SEED=S` picks other
//! inputs and `SIMPLEOP_FUZZ_TRACE=1` prints each input's number first.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use super::tests::{data_file, every_dtype, le_bytes};
use crate::{NDArray, Result};

/// Records the largest allocation each thread asks for.
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

/// A seeded generator (splitmix64), as `simpleop_tests::fuzz::Rng`.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

fn env_number(var: &str) -> Option<u64> {
    std::env::var(var).ok().and_then(|v| v.trim().parse().ok())
}

/// The generator of input `i` of driver `name`: the base seed, the name
/// and `i` alone, as `simpleop_tests::fuzz::case_rng`.
fn case_rng(name: &str, i: usize) -> Rng {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    let base = env_number("SIMPLEOP_FUZZ_SEED").unwrap_or(0x5eed);
    let mut mix = Rng(base ^ h ^ (i as u64).wrapping_mul(0x2545_f491_4f6c_dd1d));
    Rng(mix.next_u64())
}

/// Numbers that make counts, dimensions and lengths huge, negative or
/// off by one, and the format's magic numbers, as little-endian words.
const WORDS: &[u64] = &[
    0,
    1,
    2,
    64,
    65,
    0x7f,
    0xff,
    0xffff,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    1 << 32,
    1 << 40,
    1 << 62,
    i64::MAX as u64,
    1 << 63,
    u64::MAX,
    u64::MAX - 1,
    0x112,
    0xF993_FAC8,
    0xF993_FAC9,
    0xF993_FACA,
    100_000_000,
];

const BYTES: &[u8] = &[
    0x00, 0x01, 0x7f, 0x80, 0xff, 0xfe, b'{', b'}', b'"', b'[', b']', b',',
];

fn mutate(data: &mut Vec<u8>, rng: &mut Rng) {
    for _ in 0..1 + rng.below(4) {
        let len = data.len();
        let at = rng.below(len);
        match rng.below(9) {
            0 if len > 0 => data[at] ^= 1 << rng.below(8),
            1 if len > 0 => data[at] = *rng.pick(BYTES),
            2 if len > 0 => data[at] = rng.next_u64() as u8,
            3 | 4 => {
                // A 4- or 8-byte field overwritten with a huge or odd value,
                // at an offset the format's fields use (multiples of 4).
                let width = if rng.below(2) == 0 { 4 } else { 8 };
                let at = rng.below(len / 4 + 1) * 4;
                let word = rng.pick(WORDS).to_le_bytes();
                for (k, b) in word[..width].iter().enumerate() {
                    if let Some(d) = data.get_mut(at + k) {
                        *d = *b;
                    }
                }
            }
            5 if len > 0 => {
                let end = (at + 1 + rng.below(16)).min(len);
                data.drain(at..end);
            }
            6 if len > 0 => {
                let end = (at + 1 + rng.below(32)).min(len);
                let copy = data[at..end].to_vec();
                let to = rng.below(len + 1);
                data.splice(to..to, copy);
            }
            7 => data.truncate(rng.below(len + 1)),
            _ => data.extend((0..1 + rng.below(16)).map(|_| rng.next_u64() as u8)),
        }
    }
}

/// Numbers for a safetensors header's shapes and offsets.
const NUMBERS: &[&str] = &[
    "0",
    "1",
    "-1",
    "7",
    "4294967296",
    "9223372036854775807",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999",
    "1e5",
    "null",
];

/// Edits a safetensors file's JSON header (a number replaced, a byte run
/// deleted or duplicated) and, mostly, fixes its length field so that the
/// edit reaches the header's validation rather than its framing.
fn mutate_header(data: &mut Vec<u8>, rng: &mut Rng) {
    let Some(n) = data
        .get(..8)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap()) as usize)
    else {
        return;
    };
    if data.len() < 8 + n {
        return;
    }
    let mut header = data[8..8 + n].to_vec();
    let body = data[8 + n..].to_vec();
    for _ in 0..1 + rng.below(3) {
        let digits: Vec<usize> = (0..header.len())
            .filter(|&i| header[i].is_ascii_digit())
            .collect();
        match rng.below(3) {
            0 if !digits.is_empty() => {
                let mut at = *rng.pick(&digits);
                while at > 0 && header[at - 1].is_ascii_digit() {
                    at -= 1;
                }
                let mut end = at;
                while end < header.len() && header[end].is_ascii_digit() {
                    end += 1;
                }
                header.splice(at..end, rng.pick(NUMBERS).bytes());
            }
            1 if !header.is_empty() => {
                let at = rng.below(header.len());
                let end = (at + 1 + rng.below(12)).min(header.len());
                header.drain(at..end);
            }
            _ if !header.is_empty() => {
                let at = rng.below(header.len());
                let end = (at + 1 + rng.below(24)).min(header.len());
                let copy = header[at..end].to_vec();
                let to = rng.below(header.len() + 1);
                header.splice(to..to, copy);
            }
            _ => {}
        }
    }
    let len = if rng.below(5) == 0 { n } else { header.len() };
    data.clear();
    data.extend_from_slice(&(len as u64).to_le_bytes());
    data.extend_from_slice(&header);
    data.extend_from_slice(&body);
}

fn show(bytes: &[u8]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{} bytes, hex {hex}", bytes.len())
}

/// Valid files: `.params` first, then safetensors.
fn seeds() -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let mut params = Vec::new();
    for name in [
        "dtypes.params",
        "unnamed.params",
        "numpy.params",
        "gluon.params",
        "dense-0000.params",
        "int8.params",
        "bool.params",
    ] {
        params.push(std::fs::read(data_file(name)).unwrap());
    }
    let entries = every_dtype();
    let mut ours = Vec::new();
    NDArray::write_params(&mut ours, &entries).unwrap();
    params.push(ours);
    let scalar = NDArray::from_vec(vec![1.5f32], crate::Shape::new(vec![])).unwrap();
    let mut v3 = Vec::new();
    NDArray::write_params(&mut v3, &[("s", &scalar), ("t", &entries[4].1)]).unwrap();
    params.push(v3);
    let mut st = Vec::new();
    NDArray::write_safetensors(&mut st, &entries).unwrap();
    let mut small = Vec::new();
    NDArray::write_safetensors(&mut small, &[("s", &scalar)]).unwrap();
    (params, vec![st, small])
}

/// A reader under test.
type Reader = fn(&[u8]) -> Result<Vec<(String, NDArray)>>;

/// Reads `input` from bytes and from a stream with `read`, checking that
/// they agree and that no allocation was absurd. `Ok(true)` when both gave
/// `Err`.
fn check(
    input: &[u8],
    from_bytes: Reader,
    from_stream: Reader,
) -> std::result::Result<bool, String> {
    let limit = (1 << 20) + 4 * input.len();
    LARGEST.with(|l| l.set(0));
    let sized = from_bytes(input);
    let largest_sized = LARGEST.with(Cell::get);
    LARGEST.with(|l| l.set(0));
    let streamed = from_stream(input);
    let largest_streamed = LARGEST.with(Cell::get);
    if largest_sized.max(largest_streamed) > limit {
        return Err(format!(
            "allocated {largest_sized} (bytes) / {largest_streamed} (stream) bytes at once, \
             over the limit of {limit}"
        ));
    }
    match (sized, streamed) {
        (Ok(a), Ok(b)) => {
            let same = a.len() == b.len()
                && a.iter().zip(&b).all(|((na, xa), (nb, xb))| {
                    na == nb && xa.shape() == xb.shape() && le_bytes(xa) == le_bytes(xb)
                });
            if same {
                Ok(false)
            } else {
                Err("the byte and stream reads loaded different arrays".into())
            }
        }
        (Err(_), Err(_)) => Ok(true),
        (a, b) => Err(format!(
            "the byte read gave {:?} but the stream read {:?}",
            a.map(|v| v.len()),
            b.map(|v| v.len())
        )),
    }
}

fn read_params_bytes(b: &[u8]) -> Result<Vec<(String, NDArray)>> {
    NDArray::read_params_bytes(b)
}
fn read_params_stream(b: &[u8]) -> Result<Vec<(String, NDArray)>> {
    NDArray::read_params(b)
}
fn read_st_bytes(b: &[u8]) -> Result<Vec<(String, NDArray)>> {
    NDArray::read_safetensors_bytes(b)
}
fn read_st_stream(b: &[u8]) -> Result<Vec<(String, NDArray)>> {
    NDArray::read_safetensors(b)
}

/// Runs `cases` mutated inputs of driver `name` through `check`.
fn run(
    name: &str,
    cases: usize,
    gen_input: impl Fn(&mut Rng) -> Vec<u8>,
    check: impl Fn(&[u8]) -> std::result::Result<bool, String>,
) {
    let trace = std::env::var("SIMPLEOP_FUZZ_TRACE").is_ok_and(|v| v.trim() == "1");
    let start = Instant::now();
    let (mut errors, mut slowest) = (0, (Duration::ZERO, 0));
    let mut failures = Vec::new();
    for i in 0..cases {
        let input = gen_input(&mut case_rng(name, i));
        if trace {
            eprintln!("{name}: input {i}");
        }
        let t = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(|| check(&input)));
        if t.elapsed() > slowest.0 {
            slowest = (t.elapsed(), i);
        }
        let why = match outcome {
            Ok(Ok(was_err)) => {
                errors += usize::from(was_err);
                continue;
            }
            Ok(Err(why)) => why,
            Err(_) => "panicked".to_owned(),
        };
        if failures.len() < 5 {
            failures.push(format!("input {i} {why}\n  {}", show(&input)));
        }
    }
    eprintln!(
        "fuzz {name}: {cases} inputs, {errors} gave Err, {} failed, {:.1?} total, slowest {:.1?} (input {})",
        failures.len(),
        start.elapsed(),
        slowest.0,
        slowest.1
    );
    assert!(failures.is_empty(), "fuzz {name}:\n{}", failures.join("\n"));
}

fn cases(default: usize) -> usize {
    env_number("SIMPLEOP_FUZZ_CASES").map_or(default, |n| n as usize)
}

/// A reader that allocates 64 MiB at once, whatever its input.
fn greedy(_: &[u8]) -> Result<Vec<(String, NDArray)>> {
    let big: Vec<u8> = Vec::with_capacity(64 << 20);
    std::hint::black_box(&big);
    Ok(Vec::new())
}

#[test]
fn the_allocation_bound_is_watched() {
    let err = check(b"tiny", greedy, read_params_stream).unwrap_err();
    assert!(err.contains("allocated 67108864 (bytes)"), "{err}");
}

#[test]
fn every_truncation_of_a_valid_file_is_an_error() {
    let (params, st) = seeds();
    for file in &params {
        for len in 0..file.len() {
            let got = check(&file[..len], read_params_bytes, read_params_stream);
            assert_eq!(got, Ok(true), "{len} of {}", show(file));
        }
    }
    for file in &st {
        for len in 0..file.len() {
            let got = check(&file[..len], read_st_bytes, read_st_stream);
            assert_eq!(got, Ok(true), "{len} of {}", show(file));
        }
    }
}

#[test]
fn mutated_params_files_fail_cleanly() {
    let (params, _) = seeds();
    run(
        "params",
        cases(20_000),
        |rng| {
            let mut input = rng.pick(&params).clone();
            if rng.below(8) == 0 {
                let other = rng.pick(&params);
                input.truncate(rng.below(input.len() + 1));
                input.extend_from_slice(&other[rng.below(other.len() + 1)..]);
            }
            mutate(&mut input, rng);
            input
        },
        |input| check(input, read_params_bytes, read_params_stream),
    );
}

#[test]
fn mutated_safetensors_files_fail_cleanly() {
    let (_, st) = seeds();
    run(
        "safetensors",
        cases(10_000),
        |rng| {
            let mut input = rng.pick(&st).clone();
            if rng.below(2) == 0 {
                mutate_header(&mut input, rng);
            }
            if rng.below(2) == 0 {
                mutate(&mut input, rng);
            }
            input
        },
        |input| check(input, read_st_bytes, read_st_stream),
    );
}
