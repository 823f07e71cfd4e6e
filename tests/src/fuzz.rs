//! A small deterministic fuzzing kit for stable Rust (no cargo-fuzz): a
//! seeded generator, byte and text mutators, and a loop that runs each
//! input under `catch_unwind` and reports panicking inputs so they can be
//! replayed.
//!
//! ```no_run
//! use simpleop_tests::fuzz;
//! let seeds = [b"abc".to_vec()];
//! fuzz::run(
//!     "example",
//!     fuzz::cases(1000),
//!     |_, rng| {
//!         let mut input = rng.pick(&seeds).clone();
//!         fuzz::mutate_bytes(&mut input, rng);
//!         input
//!     },
//!     |input| fuzz::show_bytes(input),
//!     |input| Ok(std::str::from_utf8(input).is_err()),
//! );
//! ```
//!
//! Environment: `SIMPLEOP_FUZZ_CASES=N` sets the number of inputs,
//! `SIMPLEOP_FUZZ_SEED=S` changes the base seed (each input's generator is
//! seeded from the base seed, the driver's name and the input's number, so
//! one input can be regenerated alone), and `SIMPLEOP_FUZZ_TRACE=1` prints
//! each input's number before it runs (an abort cannot be caught, so the
//! last number printed is the culprit).

use std::fmt::Write as _;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

/// A seeded generator (splitmix64): the same seed gives the same sequence.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
    /// One of `items` (which must not be empty).
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// The number of inputs to try: `SIMPLEOP_FUZZ_CASES` if set, else `default`.
pub fn cases(default: usize) -> usize {
    std::env::var("SIMPLEOP_FUZZ_CASES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// The base seed: `SIMPLEOP_FUZZ_SEED` if set, else a fixed value.
pub fn base_seed() -> u64 {
    std::env::var("SIMPLEOP_FUZZ_SEED")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0x5eed)
}

/// The generator of input `i` of driver `name` (what [`run`] hands `gen`).
pub fn case_rng(name: &str, i: usize) -> Rng {
    // FNV-1a of the name keeps drivers' sequences apart.
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    let mut mix = Rng::new(base_seed() ^ h ^ (i as u64).wrapping_mul(0x2545_f491_4f6c_dd1d));
    Rng::new(mix.next_u64())
}

/// Byte values that tend to reach edge cases: extremes, ASCII digits and
/// the delimiters of text formats.
pub const INTERESTING_BYTES: &[u8] = &[
    0x00, 0x01, 0x7f, 0x80, 0xff, 0xfe, b'0', b'1', b'9', b'-', b'(', b')', b',', b'\'', b'"',
    b'{', b'}', b'[', b']', b':', b' ', b'\n', b'e', b'.',
];

/// Applies one to four random edits to `data`: bit flips, bytes set to
/// [`INTERESTING_BYTES`] or random values, runs of digits (which turn a
/// number into a huge one), deletions, duplications, truncation and
/// extension. Never grows `data` by more than a few hundred bytes.
pub fn mutate_bytes(data: &mut Vec<u8>, rng: &mut Rng) {
    for _ in 0..1 + rng.below(4) {
        mutate_once(data, rng);
    }
}

fn mutate_once(data: &mut Vec<u8>, rng: &mut Rng) {
    let len = data.len();
    let at = rng.below(len);
    match rng.below(10) {
        0 if len > 0 => data[at] ^= 1 << rng.below(8),
        1 if len > 0 => data[at] = *rng.pick(INTERESTING_BYTES),
        2 if len > 0 => data[at] = rng.next_u64() as u8,
        3 => {
            let digits: Vec<u8> = (0..1 + rng.below(20))
                .map(|_| b'0' + rng.below(10) as u8)
                .collect();
            let at = rng.below(len + 1);
            data.splice(at..at, digits);
        }
        4 if len > 0 => {
            let end = (at + 1 + rng.below(16)).min(len);
            data.drain(at..end);
        }
        5 if len > 0 => {
            let end = (at + 1 + rng.below(32)).min(len);
            let copy = data[at..end].to_vec();
            let to = rng.below(len + 1);
            data.splice(to..to, copy);
        }
        6 => data.truncate(rng.below(len + 1)),
        7 => data.extend((0..1 + rng.below(64)).map(|_| rng.next_u64() as u8)),
        8 if len > 0 => {
            let b = rng.below(len);
            data.swap(at, b);
        }
        _ => {
            let v = *rng.pick(INTERESTING_BYTES);
            let at = rng.below(len + 1);
            data.insert(at, v);
        }
    }
}

/// The front of `a` joined to the back of `b`, cut at random points.
pub fn splice(a: &[u8], b: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut out = a[..rng.below(a.len() + 1)].to_vec();
    out.extend_from_slice(&b[rng.below(b.len() + 1)..]);
    out
}

/// Numbers that tend to break parsers and shape arithmetic.
pub const INTERESTING_NUMBERS: &[&str] = &[
    "0",
    "1",
    "-1",
    "2",
    "-0",
    "0.5",
    "1e308",
    "-1e308",
    "1e400",
    "5e-324",
    "NaN",
    "nan",
    "inf",
    "-inf",
    "65536",
    "1000000",
    "4294967296",
    "2147483648",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775808",
    "99999999999999999999999",
];

/// `text` with one to four random token edits: numbers replaced by
/// [`INTERESTING_NUMBERS`], tokens deleted, duplicated or swapped,
/// delimiters inserted, and truncation.
pub fn mutate_text(text: &str, rng: &mut Rng) -> String {
    let mut tokens = tokenize(text);
    for _ in 0..1 + rng.below(4) {
        mutate_tokens(&mut tokens, rng);
    }
    tokens.concat()
}

fn mutate_tokens(tokens: &mut Vec<String>, rng: &mut Rng) {
    let len = tokens.len();
    let at = rng.below(len);
    match rng.below(8) {
        0..=2 => {
            // Numbers are where the trouble is: aim at one.
            let numbers: Vec<usize> = (0..len).filter(|&i| is_number(&tokens[i])).collect();
            if !numbers.is_empty() {
                let i = *rng.pick(&numbers);
                tokens[i] = rng.pick(INTERESTING_NUMBERS).to_string();
            }
        }
        3 if len > 0 => {
            tokens.remove(at);
        }
        4 if len > 0 => {
            let t = tokens[at].clone();
            tokens.insert(rng.below(len + 1), t);
        }
        5 if len > 0 => {
            let b = rng.below(len);
            tokens.swap(at, b);
        }
        6 => {
            let t = rng.pick(&["[", "]", "{", "}", ",", ":", "\"", "-", "null", "[]"]);
            tokens.insert(rng.below(len + 1), t.to_string());
        }
        _ => tokens.truncate(rng.below(len + 1)),
    }
}

fn is_number(t: &str) -> bool {
    t.starts_with(|c: char| c.is_ascii_digit() || c == '-')
}

/// Splits text into numbers, words, whitespace runs and single
/// punctuation characters; concatenating the tokens gives `text` back.
pub fn tokenize(text: &str) -> Vec<String> {
    let class = |c: char| {
        if c.is_ascii_digit() || matches!(c, '.' | '-' | '+') {
            0
        } else if c.is_alphanumeric() || c == '_' {
            1
        } else if c.is_whitespace() {
            2
        } else {
            3
        }
    };
    let mut out: Vec<String> = Vec::new();
    let mut last = None;
    for c in text.chars() {
        let k = class(c);
        // A letter after digits stays in the number (`1e5`, `0x1f`).
        let joins = match last {
            Some(0) => k == 0 || (k == 1 && c.is_ascii_alphanumeric()),
            Some(l) => l == k && k != 3,
            None => false,
        };
        if joins {
            out.last_mut().unwrap().push(c);
        } else {
            out.push(c.to_string());
            last = Some(k);
        }
    }
    out
}

/// Bytes as hex (with a lossy text rendering), for failure messages.
pub fn show_bytes(bytes: &[u8]) -> String {
    let mut hex = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        write!(hex, "{b:02x}").unwrap();
    }
    format!(
        "{} bytes, hex {hex}\n  as text: {:?}",
        bytes.len(),
        String::from_utf8_lossy(bytes)
    )
}

/// Text escaped as a Rust string literal, for failure messages.
pub fn show_text(text: &str) -> String {
    format!("{text:?}")
}

/// What a [`run`] saw.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// Inputs tried.
    pub tried: usize,
    /// Inputs that gave `Err` (the check returned `Ok(true)`).
    pub errors: usize,
    /// The slowest input's time and number.
    pub slowest: (Duration, usize),
}

/// Runs `cases` inputs: input `i` is `gen(i, rng)` with `rng` =
/// [`case_rng`]`(name, i)`, then `check(&input)` runs under
/// `catch_unwind`. `check` returns `Ok(true)` when the code under test
/// gave `Err`, `Ok(false)` when it gave `Ok`, and `Err(why)` when it
/// misbehaved without panicking (a wrong result). Prints the tally;
/// panics after the run, showing (with `show`) up to five failing inputs,
/// if any check panicked or returned `Err`.
pub fn run<I>(
    name: &str,
    cases: usize,
    mut generate: impl FnMut(usize, &mut Rng) -> I,
    show: impl Fn(&I) -> String,
    mut check: impl FnMut(&I) -> Result<bool, String>,
) -> Tally {
    let trace = std::env::var("SIMPLEOP_FUZZ_TRACE").is_ok_and(|v| v.trim() == "1");
    let start = Instant::now();
    let mut tally = Tally::default();
    let mut failures = Vec::new();
    let mut failed = 0;
    for i in 0..cases {
        let input = generate(i, &mut case_rng(name, i));
        if trace {
            eprintln!("{name}: input {i}");
        }
        let t = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(|| check(&input)));
        let took = t.elapsed();
        if took > tally.slowest.0 {
            tally.slowest = (took, i);
        }
        tally.tried += 1;
        let why = match outcome {
            Ok(Ok(was_err)) => {
                tally.errors += usize::from(was_err);
                continue;
            }
            Ok(Err(why)) => why,
            Err(payload) => format!("panicked: {}", panic_message(&*payload)),
        };
        failed += 1;
        if failures.len() < 5 {
            failures.push(format!("input {i} {why}\n  {}", show(&input)));
        }
    }
    eprintln!(
        "fuzz {name}: {} inputs, {} gave Err, {failed} failed, {:.1?} total, slowest {:.1?} (input {})",
        tally.tried,
        tally.errors,
        start.elapsed(),
        tally.slowest.0,
        tally.slowest.1,
    );
    assert!(
        failures.is_empty(),
        "fuzz {name}: {failed} of {cases} inputs failed (base seed {}; rerun one with \
         fuzz::case_rng(\"{name}\", i)):\n{}",
        base_seed(),
        failures.join("\n")
    );
    tally
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string payload)".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generator_is_deterministic_and_in_range() {
        let a: Vec<u64> = (0..4).map(|_| Rng::new(7).next_u64()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        let mut r = Rng::new(1);
        assert!((0..1000).all(|_| r.below(10) < 10));
        assert_eq!(r.below(0), 0);
        assert_eq!(case_rng("x", 3).next_u64(), case_rng("x", 3).next_u64());
        assert_ne!(case_rng("x", 3).next_u64(), case_rng("y", 3).next_u64());
    }

    #[test]
    fn tokens_rejoin_to_the_text() {
        let text = r#"{"op": "add", "shape": [2, 3], "x": -1.5e3}"#;
        let tokens = tokenize(text);
        assert_eq!(tokens.concat(), text);
        assert!(tokens.contains(&"-1.5e3".to_string()));
        assert!(tokens.contains(&"shape".to_string()));
    }

    #[test]
    fn mutations_change_inputs_and_stay_bounded() {
        let mut rng = Rng::new(3);
        let seed = b"\x93NUMPY\x01\x00header".to_vec();
        let mut changed = 0;
        for _ in 0..200 {
            let mut m = seed.clone();
            mutate_bytes(&mut m, &mut rng);
            changed += usize::from(m != seed);
            assert!(m.len() <= seed.len() + 4 * 64);
            let t = mutate_text("[1, 2, 3]", &mut rng);
            assert!(t.len() < 200, "{t}");
        }
        assert!(changed > 150, "{changed}");
    }

    #[test]
    fn run_counts_errors_and_reports_panics() {
        let t = run(
            "count",
            10,
            |i, _| i,
            |i| i.to_string(),
            |&i| Ok(i % 2 == 0),
        );
        assert_eq!((t.tried, t.errors), (10, 5));
        let panicked = catch_unwind(|| {
            run(
                "boom",
                3,
                |i, _| i,
                |i| format!("#{i}"),
                |&i| {
                    assert!(i != 1, "one");
                    Ok(false)
                },
            )
        });
        let msg = panic_message(&*panicked.unwrap_err());
        assert!(
            msg.contains("input 1 panicked: one") && msg.contains("#1"),
            "{msg}"
        );
    }
}
