//! What a run produces: its rows, the machine they ran on, and the table
//! they print as.

use simpleop::Tuning;

/// One measured row.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// What was measured.
    pub name: String,
    /// Median wall time per call, in ms (µs for `tiny/` rows is `ms × 1000`).
    pub ms: f64,
    /// The row this one is compared with.
    pub baseline: Option<String>,
    /// `ms / baseline ms`.
    pub ratio: Option<f64>,
}

impl Row {
    /// The row as one JSON object (`name`, `ms`, `baseline`, `ratio`).
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "name": self.name,
            "ms": self.ms,
            "baseline": self.baseline,
            "ratio": self.ratio,
        })
        .to_string()
    }
}

/// The machine and run behind the rows, as the JSON object that
/// `simpleop bench --json` prints before them: `{"meta": {"cpu", "isa",
/// "threads", "date", "profile", "elements", "reps"}}`. `cpu` is the model
/// name in `/proc/cpuinfo` ("unknown" without one), `isa` the kernels'
/// active ISA, `date` the UTC day, `profile` "debug" or "release" (the
/// `bench` profile inherits release and reads "release" too).
pub fn meta_json(opts: Options) -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .filter(|l| l.starts_with("model name"))
                .find_map(|l| l.split_once(':').map(|(_, v)| v.trim().to_owned()))
        })
        .unwrap_or_else(|| "unknown".into());
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // The civil date of a day count since 1970-01-01 (Howard Hinnant's
    // `civil_from_days`).
    let z = (secs / 86_400) as i64 + 719_468;
    let (era, doe) = (z.div_euclid(146_097), z.rem_euclid(146_097));
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    serde_json::json!({ "meta": {
        "cpu": cpu,
        "isa": Tuning::current().isa.name(),
        "threads": rayon::current_num_threads(),
        "date": format!("{year:04}-{month:02}-{day:02}"),
        "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
        "elements": opts.elements,
        "reps": opts.reps,
    }})
    .to_string()
}

/// How much to measure.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Elements of the large arrays.
    pub elements: usize,
    /// Timed repetitions per row (the median is reported).
    pub reps: usize,
}

impl Options {
    /// The full benchmark: 16M elements, 15 repetitions.
    pub fn full() -> Self {
        Options {
            elements: 1 << 24,
            reps: 15,
        }
    }
    /// A quick look: 4M elements, 5 repetitions.
    pub fn quick() -> Self {
        Options {
            elements: 1 << 22,
            reps: 5,
        }
    }
}

/// Formats rows as an aligned table.
pub fn table(rows: &[Row]) -> String {
    let mut s = format!(
        "{:<26} {:>10}  {:<22} {:>7}\n",
        "row", "ms", "baseline", "ratio"
    );
    for r in rows {
        let ms = if r.name.starts_with("tiny/") {
            format!("{:.3}µs", r.ms * 1e3)
        } else {
            format!("{:.3}", r.ms)
        };
        s.push_str(&format!(
            "{:<26} {:>10}  {:<22} {:>7}\n",
            r.name,
            ms,
            r.baseline.as_deref().unwrap_or("-"),
            r.ratio.map_or("-".into(), |x| format!("{x:.2}")),
        ));
    }
    s
}
