#!/usr/bin/env python3
"""Writes bench/RESULTS.md from benchmark output (JSON lines).

    python3 bench/results.py                       # the inputs in bench/out/
    python3 bench/results.py --bench a.jsonl --bench b.jsonl --peers p.jsonl \\
        --train t.jsonl -o bench/RESULTS.md

Inputs (each optional; a missing or empty file skips its section):
  --bench   `simpleop bench --json` output, one file per run (default:
            bench/out/bench*.jsonl). With several runs the ms and ratio
            columns show the range over the runs.
  --peers   `python3 bench/peers.py --json` output (default:
            bench/out/peers.jsonl).
  --train   the last JSON line of `python3 bench/train_digits_torch.py`, or
            `cargo run --release --example train_digits -- --json` alone
            (default: bench/out/train_digits.jsonl).
  --dot     `python3 bench/dot_vs_numpy.py --json` output, one file per ISA
            (default: bench/out/dot*.jsonl).
  --models  `python3 bench/models.py --json` output, one file per run
            (default: bench/out/models*.jsonl; the part of the name after
            `models-` labels a run whose meta names no ISA).

A `{"meta": {...}}` line names the machine (CPU model, ISA, threads, date);
rows missing from the input print as "—", a table whose rows are all
missing is replaced by a note, and lines that are not JSON objects are
skipped. Standard library only.
"""

import argparse
import glob
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "bench", "out")
DASH = "—"
FULL_ELEMENTS = 1 << 24

UNARY = ["relu", "exp", "tanh", "sigmoid", "log", "smooth_l1"]
HALF = ["float16", "bfloat16"]
# The ops whose hand-written gradient is timed against the derived one.
AUTODIFF = ["relu", "tanh", "sigmoid", "smooth_l1", "elemwise_mul"]


def _f32_rows():
    rows = []
    for op in UNARY:
        out = f"{op}/f32/out"
        rows.append((out, "stream/copy" if op == "relu" else "relu/f32/out"))
        rows.append((f"{op}/f32/fresh", out))
        if op in ("relu", "exp", "tanh"):
            rows.append((f"{op}/f32/no-prefetch", out))
        if op in ("exp", "tanh", "sigmoid", "log"):
            rows.append((f"{op}/f32/in-cache", "relu/f32/out"))
        if op in ("relu", "smooth_l1"):
            rows.append((f"{op}/f32/scalar-isa", out))
    rows.append(("elemwise_add/f32/out", "stream/triad"))
    rows.append(("elemwise_add/f32/fresh", "elemwise_add/f32/out"))
    return rows


def _half_rows():
    rows = []
    for dt in HALF:
        for op in UNARY:
            rows.append((f"{op}/{dt}/out", f"{op}/f32/out"))
            if op == "tanh":
                rows.append((f"{op}/{dt}/computed", f"{op}/{dt}/out"))
    return rows


# The tables of `simpleop bench` (cli/src/bench.rs): title, what the
# ratios mean, and (row, baseline) in the order the bench runs them.
BENCH_TABLES = [
    ("Memory baselines", "STREAM-style loops over the same bytes as the ops; absolute times.", [
        ("stream/copy", None), ("stream/triad", None), ("stream/read2", None),
    ]),
    ("f32 elementwise", "Each op's time over its baseline's, timed in alternating pairs "
     "(the median of the pairs' ratios). `in-cache`: the same element count computed in "
     "calls over a 4 MB array that stays in the last-level cache, over relu's memory-bound time: "
     "the op's compute alone, a floor under its `out` row.", _f32_rows()),
    ("Half types", "f16 / bf16 over the same op in f32 (half the bytes); `computed`: "
     "lookup tables off, over the table route.", _half_rows()),
    ("Fusion", "Fused graphs over one `elemwise_add` or the bandwidth baseline; "
     "unfused / interpreted / slab routes over the fused row.", [
        ("chain6/eager", "elemwise_add/f32/out"),
        ("chain6/fused", "elemwise_add/f32/out"),
        ("chain6/fused/bandwidth", "stream/triad"),
        ("chain6/fused/cached-stores", "chain6/fused"),
        ("chain6/fused/interpreted", "chain6/fused"),
        ("chain6/unfused", "chain6/fused"),
        ("smooth_l1/composed-fused", "smooth_l1/f32/out"),
        ("smooth_l1/composed-interpreted", "smooth_l1/composed-fused"),
        ("row_sq_dist/fused", "elemwise_add/f32/out"),
        ("row_sq_dist/fused/bandwidth", "stream/read2"),
        ("row_sq_dist/fused-slabs", "row_sq_dist/fused"),
        ("row_sq_dist/unfused", "row_sq_dist/fused"),
    ]),
    ("Derived gradients", "`<op>/f32/backward`: the hand-written gradient (absolute time); "
     "`-autodiff`: the gradient `#[simple_op(autodiff)]` derives by dual numbers, over it.",
     [r for op in AUTODIFF for r in ((f"{op}/f32/backward", None),
                                      (f"{op}/f32/backward-autodiff", f"{op}/f32/backward"))]),
    ("Matrix products", "`dot` and a dense layer; fused / unfused over the plain product.", [
        ("dot/1024/f32", None),
        ("dense/dot", None),
        ("dense/fused", "dense/dot"),
        ("dense/unfused", "dense/fused"),
    ]),
    ("Dispatch on one element", "µs per call.", [
        ("tiny/relu/typed", None),
        ("tiny/relu/by-name", "tiny/relu/typed"),
        ("tiny/relu/recorded", "tiny/relu/typed"),
        ("tiny/relu/recorded-chain8", "tiny/relu/typed"),
    ]),
]

# Targets: row -> (what is compared, bound). "ratio": the row's ratio to its
# baseline; "us": µs per call.
TARGETS = {
    "relu/f32/out": ("ratio", 1.15),
    "relu/f32/fresh": ("ratio", 1.2),
    "exp/f32/out": ("ratio", 1.3),
    "tanh/f32/out": ("ratio", 1.3),
    "sigmoid/f32/out": ("ratio", 1.3),
    "log/f32/out": ("ratio", 1.3),
    "elemwise_add/f32/out": ("ratio", 1.15),
    "chain6/fused": ("ratio", 1.5),
    "smooth_l1/composed-fused": ("ratio", 1.2),
    "tiny/relu/typed": ("us", 0.1),
    "tiny/relu/by-name": ("us", 0.2),
    "tiny/relu/recorded": ("us", 1.0),
}
TARGETS.update({f"{op}/{dt}/out": ("ratio", 0.6) for dt in HALF for op in UNARY})
TARGETS.update({f"{op}/f32/backward-autodiff": ("ratio", 1.5) for op in AUTODIFF})

# The rows bench/peers.py times with numpy and/or PyTorch.
PEER_ROWS = (
    [r for op in UNARY for r in ([f"{op}/f32/out"] if op != "smooth_l1" else []) + [f"{op}/f32/fresh"]]
    + ["elemwise_add/f32/out", "elemwise_add/f32/fresh"]
    + [f"{op}/{dt}/out" for dt in HALF for op in UNARY]
    + ["chain6/eager", "chain6/fused", "row_sq_dist/fused", "row_sq_dist/unfused",
       "dot/1024/f32", "dense/dot", "dense/fused", "dense/unfused", "tiny/relu/typed",
       "tiny/relu/recorded"]
)


# ---------------------------------------------------------------- reading


class Input:
    """One JSON-lines file: its meta object, its rows and what was skipped."""

    def __init__(self, path):
        self.path = path
        self.meta = None
        self.objects = []
        self.skipped = 0
        self.error = None
        # (meta, objects) per `meta` line: `simpleop bench --isa a,b`
        # writes one block per instruction set
        self.blocks = []
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
        except OSError as e:
            self.error = e.strerror or str(e)
            return
        for line in lines:
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                self.skipped += 1
                continue
            if not isinstance(obj, dict):
                self.skipped += 1
            elif set(obj) == {"meta"}:
                if isinstance(obj["meta"], dict):
                    if self.meta is None:
                        self.meta = obj["meta"]
                    self.blocks.append((obj["meta"], []))
            else:
                self.objects.append(obj)
                if self.blocks:
                    self.blocks[-1][1].append(obj)

    def split(self):
        """One Input per `meta` block (the file itself when it has one or none)."""
        if len(self.blocks) < 2:
            return [self]
        out = []
        for meta, objects in self.blocks:
            part = Input.__new__(Input)
            part.path, part.meta, part.objects = self.path, meta, objects
            part.skipped, part.error, part.blocks = 0, None, [(meta, objects)]
            out.append(part)
        out[0].skipped = self.skipped
        return out

    def rows(self):
        """name -> row object, for objects with a string `name`."""
        return {o["name"]: o for o in self.objects if isinstance(o.get("name"), str)}

    def rel(self):
        full = os.path.abspath(self.path)
        return os.path.relpath(full, ROOT) if full.startswith(ROOT + os.sep) else full


def num(v):
    """v as a float if it is a finite number, else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if v == v and abs(v) != float("inf") else None


def get(d, *keys):
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


# ---------------------------------------------------------------- formatting


def fmt_num(v, digits=3):
    return DASH if v is None else f"{v:.{digits}f}"


def fmt_range(vals, digits=3, unit=""):
    vals = [v for v in vals if v is not None]
    if not vals:
        return DASH
    lo, hi = min(vals), max(vals)
    if len(vals) == 1 or f"{lo:.{digits}f}" == f"{hi:.{digits}f}":
        return f"{lo:.{digits}f}{unit}"
    return f"{lo:.{digits}f}–{hi:.{digits}f}{unit}"


def is_tiny(name):
    return name.startswith("tiny/")


def code(name):
    return f"`{name}`"


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


def join_unique(vals, missing="not recorded"):
    seen = []
    for v in vals:
        v = missing if v in (None, "") else str(v)
        if v not in seen:
            seen.append(v)
    return ", ".join(seen) if seen else missing


def machine_line(metas, runs_label=None, extra=()):
    """One line naming CPU, ISA, threads and date from the meta objects."""
    metas = [m for m in metas if isinstance(m, dict)]
    if not metas:
        return " · ".join(["*Machine: not recorded in the input (no `meta` line)"]
                          + [p for p in extra if p]) + ".*"
    threads = []
    for m in metas:
        t = m.get("threads")
        if isinstance(t, dict):
            t = ", ".join(f"{k} {v}" for k, v in t.items() if v is not None)
        threads.append(t)
    parts = [
        f"CPU **{join_unique(m.get('cpu') for m in metas)}**",
        f"ISA {join_unique(m.get('isa') or get(m, 'simpleop', 'isa') for m in metas)}",
        f"threads {join_unique(threads)}",
        f"date {join_unique(m.get('date') for m in metas)} (UTC)",
    ]
    if any(m.get("commit") for m in metas):
        parts.append(f"commit {join_unique(m.get('commit') for m in metas)}")
    parts += [p for p in extra if p]
    if runs_label:
        parts.append(runs_label)
    return "*Machine: " + " · ".join(parts) + ".*"


# ---------------------------------------------------------------- sections


def bench_section(inputs, isa=None):
    lines = [f"## `simpleop bench` ({isa})" if isa else "## `simpleop bench`", ""]
    present = [i for i in inputs if i.error is None and (i.objects or i.meta)]
    notes = [f"- `{i.rel()}`: not read ({i.error})." if i.error is not None else f"- `{i.rel()}`: empty."
             for i in inputs if i not in present]
    if notes:
        lines += ["Inputs skipped:", ""] + notes + [""]
    if not present:
        return lines + ["No `simpleop bench --json` output to show: section skipped.", ""]
    runs = [(i, i.rows()) for i in present]
    metas = [i.meta for i in present]
    n = len(runs)
    elements = [num(get(m, "elements")) for m in metas if m]
    quick = any(e is not None and e < FULL_ELEMENTS for e in elements)
    extra = [
        f"{join_unique(get(m, 'profile') for m in metas if m)} build",
        f"{join_unique(f'{int(e):,}' for e in elements if e is not None)} elements" if elements else None,
    ]
    no_meta = sum(m is None for m in metas)
    if no_meta:
        extra.append(f"no `meta` line in {no_meta} of {n} inputs")
    header_line = machine_line(metas, f"{n} run{'s' if n > 1 else ''}", extra)
    lines += [f"Input: {', '.join(f'`{i.rel()}`' for i in present)}.", ""]
    if quick:
        lines += ["**Quick run (`--quick`, fewer than 16M elements): a smoke test of the "
                  "harness, not a measurement to compare.**", ""]
    lines += ["Ratios are the row's time over its baseline's, each the median of "
              "alternating pairs within one run; with several runs a cell shows the "
              "range over the runs. Tiny rows are in µs per call.", ""]

    known = set()
    footnote_quotient = False
    for title, about, spec in BENCH_TABLES:
        known.update(name for name, _ in spec)
        body, filled = [], 0
        for name, expected_base in spec:
            cells, has, quot = bench_row(name, expected_base, runs)
            footnote_quotient |= quot
            filled += has
            body.append(cells)
        lines += [f"### {title}", "", header_line, ""]
        if filled == 0:
            lines += [f"All {len(spec)} rows of this table are missing from the input: table skipped.", ""]
            continue
        lines += [about, ""]
        lines += table(["row", "ms", "baseline", "ratio", "target"], body)
        missing = len(spec) - filled
        lines += ["", f"{filled} of {len(spec)} rows measured" + (f", {missing} missing (—)." if missing else "."), ""]

    extra_rows = []
    for _, rows in runs:
        for name in rows:
            if name not in known and name not in extra_rows:
                extra_rows.append(name)
    if extra_rows:
        body = []
        for name in extra_rows:
            cells, _, quot = bench_row(name, None, runs)
            footnote_quotient |= quot
            body.append(cells)
        lines += ["### Other rows", "", header_line, "",
                  "Rows in the input that this script does not know yet (add them to "
                  "`BENCH_TABLES` in `bench/results.py`).", ""]
        lines += table(["row", "ms", "baseline", "ratio", "target"], body) + [""]
    if footnote_quotient:
        lines += ["† no paired ratio in the input: the quotient of the row's and its "
                  "baseline's medians in the same run.", ""]
    return lines


def bench_row(name, expected_base, runs):
    """Cells of one bench row over the runs, whether any run has it, and
    whether a ratio had to be computed as a quotient."""
    tiny = is_tiny(name)
    scale, unit = (1e3, " µs") if tiny else (1.0, "")
    ms_vals, ratios, bases, quotient, seen = [], [], [], False, 0
    for _, rows in runs:
        r = rows.get(name)
        if not isinstance(r, dict):
            continue
        seen += 1
        ms = num(r.get("ms"))
        ms_vals.append(ms * scale if ms is not None else None)
        base = r.get("baseline") if isinstance(r.get("baseline"), str) else expected_base
        bases.append(base)
        ratio = num(r.get("ratio"))
        if ratio is None and base and ms is not None:
            b = num(get(rows.get(base), "ms"))
            if b:
                ratio, quotient = ms / b, True
        ratios.append(ratio)
    base = join_unique([b for b in bases if b] or [expected_base], missing="")
    ms_cell = fmt_range(ms_vals, 3, unit)
    ratio_cell = fmt_range(ratios, 2, "†" if quotient else "")
    if ratio_cell == DASH and seen and not base:
        ratio_cell = ""  # a baseline itself, or an absolute figure
    if seen and seen < len(runs):
        ms_cell += f" ({seen} of {len(runs)} runs)"
    cells = [code(name), ms_cell, code(base) if base else "", ratio_cell, target_cell(name, ms_vals, ratios)]
    return cells, seen > 0, quotient


def target_cell(name, ms_vals, ratios):
    t = TARGETS.get(name)
    if t is None:
        return ""
    kind, bound = t
    vals = [v for v in (ratios if kind == "ratio" else ms_vals) if v is not None]
    label = f"≤ {bound:g}" + (" µs" if kind == "us" else "")
    if not vals:
        return label
    over = sum(v > bound for v in vals)
    if over == 0:
        return f"{label} ✓"
    if over == len(vals):
        return f"{label} ✗"
    return f"{label} ✗ ({over} of {len(vals)} runs)"


def streams(name):
    """Whether a peers row streams arrays larger than the caches (its
    copy-normalized ratio means something): not the warm and small ones."""
    return not (is_tiny(name) or name.startswith(("stream/", "dot/")) or name == "dense/dot")


def peers_section(inp):
    isa = get(inp.meta, "simpleop", "isa") if inp is not None and inp.meta else None
    title = f" ({isa})" if isa else ""
    lines = [f"## Against numpy and PyTorch (`bench/peers.py`){title}", ""]
    if inp is None:
        return lines + ["No peers input was given: section skipped.", ""]
    if inp.error is not None:
        return lines + [f"`{inp.rel()}` not read ({inp.error}): section skipped. "
                        "It comes from `python3 bench/peers.py --json`.", ""]
    rows = inp.rows()
    if not rows:
        return lines + [f"`{inp.rel()}` holds no rows: section skipped.", ""]
    m = inp.meta or {}
    versions = []
    for lib in ("numpy", "torch"):
        v = m.get(lib)
        versions.append(f"{lib} {v if isinstance(v, str) else 'absent'}")
    extra = versions + [
        f"{int(num(m.get('elements'))):,} elements" if num(m.get("elements")) else None,
        f"{m.get('rounds')} alternating rounds" if m.get("rounds") is not None else None,
    ]
    lines += [f"Input: `{inp.rel()}`.", "", machine_line([inp.meta] if inp.meta else [], None, extra), ""]
    if num(m.get("elements")) is not None and num(m.get("elements")) < FULL_ELEMENTS:
        lines += ["**Quick run: the working sets sit at the L3's size; a smoke test, not a comparison.**", ""]
    cold = m.get("peers_start_cold")
    start = {True: "The peers' calls start with cold caches (an untimed read of twice the "
                   "last-level cache before each), as simpleop's alternating rows do; "
                   "`stream/copy`, `dot`, `dense/dot` and `tiny/` rows run back to back on both sides. ",
             False: "The peers' calls ran back to back (`--warm`): their large rows found part "
                    "of their data cached, simpleop's did not. "}.get(cold, "")
    if any(num(r.get("over_torch_copy_normalized")) is not None for r in rows.values() if isinstance(r, dict)):
        start += ("\"Each over its copy\": the median over rounds of (simpleop's time over its "
                  "`stream/copy`) over (torch's over torch's `copy_`), each pair timed by one program "
                  "in its turn, so the bandwidth each saw cancels out; the fair figure for rows bound "
                  "by memory (shown for the rows over 16M elements only), where the per-round spread "
                  "shows the drift between turns. ")
    lines += [("Medians over the rounds, in ms (µs per call for tiny rows). Ratios are "
              "simpleop's time over the peer's (below 1: simpleop is faster); the "
              "torch figures of the `fused` rows are `torch.compile`. " + start).rstrip(), ""]
    names = list(PEER_ROWS)
    for name, r in rows.items():
        if name not in names and (num(r.get("numpy")) is not None or num(r.get("torch")) is not None):
            names.append(name)
    body, filled = [], 0
    for name in names:
        r = rows.get(name) if isinstance(rows.get(name), dict) else {}
        scale, unit = (1e3, " µs") if is_tiny(name) else (1.0, "")
        ours, np_, th = (num(r.get(k)) for k in ("simpleop", "numpy", "torch"))
        filled += ours is not None and (np_ is not None or th is not None)
        rr = [num(v) for v in r.get("per_round", [])] if isinstance(r.get("per_round"), list) else []
        body.append([
            code(name),
            *(fmt_num(v * scale if v is not None else None) + (unit if v is not None else "") for v in (ours, np_, th)),
            fmt_num(ours / np_ if ours is not None and np_ else None, 2),
            fmt_num(ours / th if ours is not None and th else None, 2),
            fmt_num(num(r.get("over_torch_copy_normalized")), 2) if streams(name) else "",
            fmt_range(rr, 2),
        ])
    if filled == 0:
        return lines + ["No row has both a simpleop and a peer time: table skipped.", ""]
    lines += table(["row", "simpleop", "numpy", "torch", "ours / numpy", "ours / torch",
                    "ours / torch, each over its copy", "ours / best, per round"], body)
    lines += ["", f"{filled} of {len(names)} rows with a peer time; — where the peer or the row is absent.", ""]
    return lines


def dot_section(inp):
    """bench/dot_vs_numpy.py's run: simpleop's `dot` and numpy's BLAS in
    alternating rounds of one process's turns."""
    isa = get(inp.meta, "isa") if inp.meta else None
    lines = [f"## `dot` against numpy's BLAS (`bench/dot_vs_numpy.py`)" + (f" ({isa})" if isa else ""), ""]
    if inp.error is not None:
        return lines + [f"`{inp.rel()}` not read ({inp.error}): section skipped.", ""]
    rows = [o for o in inp.objects if isinstance(o.get("impl"), str)]
    if not rows:
        return lines + [f"`{inp.rel()}` holds no rows: section skipped.", ""]
    m = inp.meta or {}
    extra = [f"numpy {m.get('numpy', '?')} ({m.get('blas', '?')}, kernel {m.get('kernel', '?')})",
             f"{m.get('rounds', '?')} alternating rounds × {m.get('runs', '?')} calls"]
    lines += [f"Input: `{inp.rel()}`.", "", machine_line([m] if m else [], None, extra), ""]
    lines += ["Medians over every call of the rounds; the last columns are the time over "
              "numpy's, overall and per round (target ≤ 0.8).", ""]
    body = []
    for r in rows:
        ratio = num(r.get("over_numpy"))
        per = r.get("per_round") if isinstance(r.get("per_round"), list) else []
        verdict = "" if r["impl"] == "numpy" or ratio is None else (" ✓" if ratio <= 0.8 else " ✗")
        body.append([code(str(r.get("name", "?"))), r["impl"], fmt_num(num(r.get("ms"))),
                     f"{fmt_num(num(r.get('min_ms')))}–{fmt_num(num(r.get('max_ms')))}",
                     fmt_num(num(r.get("gflops")), 1), fmt_num(ratio) + verdict,
                     fmt_range([num(v) for v in per], 3)])
    lines += table(["row", "impl", "median ms", "min–max ms", "GFLOP/s", "over numpy", "per round"], body)
    lines += ["", "Both sides run close to the FMA units' peak (cores × clock × f32 lanes × 2 FMA "
              "units × 2), which caps how far either can beat the other; see `docs/ops.md`."]
    return lines + [""]


def train_section(inp):
    lines = ["## Training: `train_digits` against PyTorch", ""]
    if inp is None:
        return lines + ["No training input was given: section skipped.", ""]
    if inp.error is not None:
        return lines + [f"`{inp.rel()}` not read ({inp.error}): section skipped. "
                        "It comes from `python3 bench/train_digits_torch.py | tail -n 1`.", ""]
    # The last object that looks like either script's output.
    obj = None
    for o in inp.objects:
        if isinstance(o.get("simpleop"), dict) or isinstance(o.get("pytorch"), dict) or "ms_per_step" in o:
            obj = o
    if obj is None:
        return lines + [f"`{inp.rel()}` holds no training result: section skipped.", ""]
    if "ms_per_step" in obj and not isinstance(obj.get("simpleop"), dict):
        obj = {"simpleop": obj}
    ours = obj.get("simpleop") if isinstance(obj.get("simpleop"), dict) else {}
    theirs = obj.get("pytorch") if isinstance(obj.get("pytorch"), dict) else {}
    meta = obj.get("meta") if isinstance(obj.get("meta"), dict) else inp.meta
    cfg = ours or theirs
    config = ", ".join(f"{k} {cfg[k]}" for k in ("epochs", "batch", "conv_channels", "hidden") if k in cfg)
    extra = [f"torch {theirs['torch']}" if isinstance(theirs.get("torch"), str) else None,
             config or None]
    lines += [f"Input: `{inp.rel()}`.", "", machine_line([meta] if meta else [], None, extra), ""]
    ratio = num(obj.get("ratio"))
    a, b = num(ours.get("ms_per_step")), num(theirs.get("ms_per_step"))
    if ratio is None and a is not None and b:
        ratio = a / b
    eager = obj.get("simpleop_eager") if isinstance(obj.get("simpleop_eager"), dict) else None
    body = []
    for label, key, digits in [("ms per step", "ms_per_step", 4), ("test accuracy", "test_accuracy", 4),
                               ("test accuracy without TTA", "test_accuracy_no_tta", 4),
                               ("final loss", "final_loss", 4), ("steps", "steps", 0),
                               ("peak bytes", "peak_bytes", 0)]:
        row = [label, fmt_num(num(ours.get(key)), digits)]
        if eager is not None:
            row.append(fmt_num(num(eager.get(key)), digits))
        body.append(row + [fmt_num(num(theirs.get(key)), digits)])
    heads = ["", "simpleop"] + (["simpleop `--eager`"] if eager is not None else []) + ["PyTorch"]
    lines += table(heads, body)
    mark = lambda r: "" if r is None else (" ✓" if r <= 0.5 else " ✗")
    lines += ["", f"Time per step, simpleop / PyTorch (best rounds): {fmt_num(ratio)} (target ≤ 0.5{mark(ratio)})."]
    if eager is not None:
        e = num(obj.get("eager_ratio"))
        lines += [f"The eager-autograd loop (`train_digits --eager`) / PyTorch: {fmt_num(e)} "
                  f"(target ≤ 0.5{mark(e)})."]
    return lines + [""]


# The targets per row: simpleop's time over the faster PyTorch
# layout (and, for the training step, the bound).
MODEL_TARGETS = {
    "resnet18_v1/infer/b16": 1.0,
    "mobilenet0.25/infer/b16": 1.0,
    "lenet/train/b64": 0.7,
}
MODEL_FRAMEWORKS = [("simpleop", "simpleop"), ("mxnet", "MXNet"), ("torch", "PyTorch"),
                    ("torch_cl", "PyTorch channels-last")]


def reps_text(reps):
    """A count, or the range of per-row counts."""
    if isinstance(reps, dict):
        counts = [v for v in reps.values() if isinstance(v, int)]
        return f"{min(counts)}–{max(counts)}" if counts else DASH
    return str(reps)


def models_section(inp):
    label = os.path.basename(inp.path)[len("models"):].strip("-_").rsplit(".", 1)[0]
    isa = get(inp.meta, "isa") if inp.meta else None
    title = isa if isa and not str(isa).startswith("default") else (label or isa)
    lines = [f"## CNN models against PyTorch and MXNet ({title})" if title else
             "## CNN models against PyTorch and MXNet", ""]
    if inp.error is not None:
        return lines + [f"`{inp.rel()}` not read ({inp.error}): section skipped.", ""]
    rows = [o for o in inp.objects if "name" in o and isinstance(o.get("ms"), dict)]
    if not rows:
        return lines + [f"`{inp.rel()}` holds no rows: section skipped.", ""]
    meta = dict(inp.meta or {})
    if label and not meta.get("isa"):
        meta["isa"] = label
    peak = meta.get("peak_estimate") if isinstance(meta.get("peak_estimate"), dict) else {}
    versions = [f"mxnet {get(meta, 'mxnet', 'mxnet')}" if get(meta, "mxnet", "mxnet") else None,
                f"torch {get(meta, 'torch', 'torch')}" if get(meta, "torch", "torch") else None,
                f"{meta.get('rounds')} rounds × {reps_text(meta.get('reps'))} repetitions"
                if meta.get("rounds") else None]
    lines += [f"Input: `{inp.rel()}`.", "", machine_line([meta] if meta else [], None, versions), ""]
    body = []
    for r in rows:
        ms = r["ms"]
        ours = num(ms.get("simpleop"))
        torch_best = min([v for v in (num(ms.get("torch")), num(ms.get("torch_cl"))) if v is not None],
                         default=None)
        ratio = ours / torch_best if ours is not None and torch_best else None
        mx = num(ms.get("mxnet"))
        target = MODEL_TARGETS.get(r["name"])
        verdict = DASH if target is None or ratio is None else (
            f"≤ {target} {'✓' if ratio <= target else '✗'}")
        gf = num(get(r, "gflops", "simpleop"))
        of_peak = f"{100 * gf / peak['gflops']:.0f} %" if gf and num(peak.get("gflops")) else DASH
        body.append([code(r["name"]), fmt_num(num(r.get("gflop")), 2)]
                    + [fmt_num(num(ms.get(k)), 1) for k, _ in MODEL_FRAMEWORKS]
                    + [fmt_num(ratio, 2), verdict, fmt_num(ours / mx if ours and mx else None, 2),
                       fmt_num(gf, 1), of_peak])
    header = ["row", "GFLOP"] + [f"{n} ms" for _, n in MODEL_FRAMEWORKS] + [
        "simpleop / best PyTorch", "target", "simpleop / MXNet", "simpleop GFLOP/s", "of the peak estimate"]
    lines += table(header, body)
    if peak:
        note = (f"The FMA peak is an estimate, not a measurement: {fmt_num(num(peak.get('gflops')), 0)} "
                f"GFLOP/s ({peak.get('assumes', '')}).")
        rates = [num(v) for r in rows for v in (r.get("gflops") or {}).values()]
        if num(peak.get("gflops")) and any(v and v > peak["gflops"] for v in rates):
            note += " A row above it means the clock ran faster than /proc/cpuinfo's figure."
        lines += ["", note]
    if "avx2" in str(title):
        lines += ["", "`SIMPLEOP_ISA=avx2` restricts simpleop's own kernels (im2col, depthwise, "
                  "elementwise, fused programs) and, since f32/f64 products moved to "
                  "`private-gemm-x86` (merge 2413a05), those products too. Runs made before that "
                  "ran their convolution GEMMs on the `gemm` crate, which picks AVX-512 from the "
                  "CPU whatever the setting says, and are faster than an AVX2-only CPU's would be."]
    lines += [""]
    return lines


# ---------------------------------------------------------------- main

INTRO = """# Measurements

**Generated by `bench/results.py` from benchmark output: do not edit by
hand.** Every figure below comes from the JSON-lines files named in its
table's heading, together with the machine (CPU model, the ISA the kernels
dispatch to, threads) and the UTC date those runs recorded. Ratios within
one run are what to compare: absolute times drift on a shared machine.

To refresh (see `bench/README.md`):

```
cargo run --profile bench --bin simpleop -- bench --json --isa avx512,avx2 > bench/out/bench-1.jsonl   # and -2, -3
python3 bench/peers.py --json --binary target/release/simpleop > bench/out/peers.jsonl   # needs numpy; PyTorch optional
python3 bench/peers.py --json --isa avx2 --binary target/release/simpleop > bench/out/peers-avx2.jsonl
python3 bench/dot_vs_numpy.py --json --rounds 5 --isa avx512 > bench/out/dot-avx512.jsonl   # and --isa avx2
python3 bench/train_digits_torch.py --eager | tail -n 1 > bench/out/train_digits.jsonl   # needs PyTorch
python3 bench/models.py --json > bench/out/models-avx512.jsonl   # MXNet and PyTorch (see its docs)
SIMPLEOP_ISA=avx2 python3 bench/models.py --json > bench/out/models-avx2.jsonl
target/libtorch_relu > bench/out/libtorch.jsonl                  # built from bench/libtorch_relu.cpp
python3 bench/results.py                                         # rewrites this file
```

Earlier hand-written measurements and their analysis are in this file's
git history (`git log -p bench/RESULTS.md`).
"""


def libtorch_section(path):
    """bench/libtorch_relu.cpp's one line: libtorch's relu on one element,
    plain and recorded with its backward, next to the `tiny/relu/*` rows."""
    lines = ["## One-element relu in libtorch (C++)", ""]
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.loads(f.read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError) as e:
        return lines + [f"`{os.path.relpath(path, ROOT)}` not read ({e}): section skipped. "
                        "It comes from `bench/libtorch_relu.cpp` (build command in its header).", ""]
    rows = [["relu", fmt_num(num(obj.get("relu_us")), 3)],
            ["relu recorded, then backward", fmt_num(num(obj.get("recorded_relu_backward_us")), 3)]]
    lines += [f"Input: `{os.path.relpath(path, ROOT)}` (libtorch {obj.get('libtorch', '?')}, "
              f"2 threads, best of 5 rounds of 200,000 calls, on the machine of the tables above).", ""]
    lines += table(["call", "µs per call"], rows)
    return lines + ["", "Compare `tiny/relu/typed` and `tiny/relu/recorded` in the dispatch table.", ""]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", action="append", metavar="FILE",
                    help="simpleop bench --json output (repeatable; default bench/out/bench*.jsonl)")
    ap.add_argument("--peers", action="append", metavar="FILE",
                    help="peers.py --json output (repeatable, one per ISA; default bench/out/peers*.jsonl)")
    ap.add_argument("--train", metavar="FILE",
                    help="train_digits JSON output (default bench/out/train_digits.jsonl)")
    ap.add_argument("--dot", action="append", metavar="FILE",
                    help="dot_vs_numpy.py --json output (repeatable, one per ISA; default bench/out/dot*.jsonl)")
    ap.add_argument("--models", action="append", metavar="FILE",
                    help="models.py --json output (repeatable; default bench/out/models*.jsonl)")
    ap.add_argument("-o", "--output", default=os.path.join(ROOT, "bench", "RESULTS.md"),
                    help="where to write (default bench/RESULTS.md; '-' for stdout)")
    args = ap.parse_args()

    bench_paths = args.bench if args.bench else sorted(glob.glob(os.path.join(OUT_DIR, "bench*.jsonl")))
    peers_paths = args.peers or sorted(glob.glob(os.path.join(OUT_DIR, "peers*.jsonl"))) \
        or [os.path.join(OUT_DIR, "peers.jsonl")]
    train_path = args.train or os.path.join(OUT_DIR, "train_digits.jsonl")

    bench = [part for p in bench_paths for part in Input(p).split()]
    peers = [Input(p) for p in peers_paths]
    train = Input(train_path)
    model_paths = args.models if args.models else sorted(glob.glob(os.path.join(OUT_DIR, "models*.jsonl")))
    models = [Input(p) for p in model_paths]
    dots = [Input(p) for p in (args.dot or sorted(glob.glob(os.path.join(OUT_DIR, "dot*.jsonl"))))]
    for i in bench + peers + [train] + models + dots:
        if i.skipped:
            print(f"results.py: {i.rel()}: skipped {i.skipped} line(s) that are not JSON objects", file=sys.stderr)

    doc = [INTRO]
    # One set of tables per instruction set: runs under SIMPLEOP_ISA=avx2
    # are not mixed into the ranges of AVX-512 runs.
    by_isa = {}
    for i in bench:
        by_isa.setdefault(get(i.meta, "isa") if i.meta else None, []).append(i)
    for isa, inputs in (by_isa or {None: []}).items():
        doc += bench_section(inputs, isa if len(by_isa) > 1 else None)
    for p in peers:
        doc += peers_section(p)
    for d in dots:
        doc += dot_section(d)
    doc += libtorch_section(os.path.join(OUT_DIR, "libtorch.jsonl"))
    doc += train_section(train)
    for m in models:
        doc += models_section(m)
    text = "\n".join(doc).rstrip("\n") + "\n"
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"results.py: wrote {os.path.relpath(args.output)}", file=sys.stderr)


if __name__ == "__main__":
    main()
