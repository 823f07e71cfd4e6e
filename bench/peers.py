#!/usr/bin/env python3
"""simpleop's kernel benchmark side by side with numpy and PyTorch.

    python3 bench/peers.py [--quick] [--rounds 2] [--json] [--isa I] [--binary PATH] [--warm]

Runs `simpleop bench --json` (built with --release, or `--binary`) and the same rows with
numpy and, when installed, PyTorch (2 threads), alternating rounds in one
run so that all three see the same machine. Prints the median over rounds
of each row's median, and simpleop's time over the faster peer's.

The last column gives the range of the per-round ratios (each round's
simpleop time over that round's faster peer), which shows how far the
machine drifted between the programs' turns.

numpy's ufuncs are single-threaded; PyTorch uses 2 threads like simpleop.
simpleop's rows alternate each call with a baseline's over as many bytes,
so every call starts with its data out of the caches. The peers' calls
start the same way: before each, an untimed read of twice the last-level
cache. Timed back to back instead (`--warm`), a call over 128 MB on a
32 MB L3 finds part of its data still cached, which makes the peers look
faster than they are. The rows simpleop times back to back
(stream/copy, dot, dense/dot, tiny/) stay warm on both sides. Compare at the default 16M
elements; --quick (4M) only checks that everything runs.
Rows without a counterpart (bf16 in numpy, the SIMD-off rows) print '-'.

--json prints JSON lines instead of the table (for bench/results.py): first
{"meta": {...}} (CPU model, date, threads, elements, rounds, library
versions and the meta line of simpleop's own bench run), then one object
per row: {"name", "simpleop", "numpy", "torch"} (median ms over rounds,
null where absent; tiny/ rows are ms per call like `simpleop bench`),
"ours_over_best", "per_round" (the per-round ratios) and
"over_torch_copy_normalized": the median over rounds of (simpleop's time
over its `stream/copy`) over (torch's over torch's own copy, `copy_` on 2
threads), each measured by its program in its turn, so that the memory
bandwidth each saw cancels (on a shared VM it drifts up to 2x between
turns): the fair comparison for rows bound by memory.
The torch figures of `chain6/fused`, `row_sq_dist/fused` and `dense/fused`
are the same graphs under `torch.compile` (inductor emits one fused loop,
or a matmul with a fused epilogue), against simpleop's fused executor;
their eager forms are the `/eager` and `/unfused` rows.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

import timing

try:
    import torch

    torch.set_num_threads(2)
    import torch.nn.functional as F
except ImportError:  # PyTorch is optional
    torch = None

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# Runs between a row's timed calls (see `timing.last_level_cache_bytes`);
# set by main() unless --warm.
EVICT = None


def timed(fn, reps, warm=False):
    """Median milliseconds of `reps` calls after a warm-up; each call starts
    with cold caches, as simpleop's paired rows do, unless `warm` (the rows
    simpleop times back to back: stream/copy, dot, dense/dot and the tiny
    calls)."""
    return timing.timed(fn, reps, None if warm else EVICT)[0]


def evictor():
    """A read of twice the last-level cache (untimed, between calls)."""
    buf = np.ones(2 * timing.last_level_cache_bytes() // 4, np.float32)
    return lambda: float(buf.sum())


def ours(quick, meta=None, isa=None, binary=None):
    """simpleop's rows, name -> ms; its {"meta": ...} line goes into `meta`."""
    if binary:
        cmd = [binary, "bench", "--json"]
    else:
        cmd = ["cargo", "run", "--release", "-q", "--bin", "simpleop", "--", "bench", "--json"]
    if quick:
        cmd.append("--quick")
    if isa:
        cmd += ["--isa", isa]
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    rows = {}
    for r in map(json.loads, filter(str.strip, out.splitlines())):
        if "meta" in r:
            if meta is not None:
                meta.update(r["meta"])
        elif "name" in r and "ms" in r:
            rows[r["name"]] = r["ms"]
    return rows


def meta_line(n, rounds, simpleop_meta, cold):
    return {"meta": {
        "cpu": timing.cpu_model(),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "elements": n,
        "rounds": rounds,
        "peers_start_cold": cold,
        "threads": {"simpleop": simpleop_meta.get("threads"), "numpy": 1,
                    "torch": torch.get_num_threads() if torch is not None else None},
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "torch": torch.__version__ if torch is not None else None,
        "simpleop": simpleop_meta,
    }}


def numpy_rows(n, reps):
    rng = np.random.default_rng(1)
    x = rng.uniform(-4, 4, n).astype(np.float32)
    xp = rng.uniform(0.05, 4, n).astype(np.float32)
    y = rng.uniform(-4, 4, n).astype(np.float32)
    o = np.empty_like(x)

    def smooth_l1(v, out=None):
        a = np.abs(v)
        return np.where(a < 1, 0.5 * v * v, a - 0.5)

    def sigmoid(v, out=None):
        return np.divide(1.0, 1.0 + np.exp(-v), out=out)

    unary = {
        "relu": (lambda v, out=None: np.maximum(v, 0, out=out), x),
        "exp": (np.exp, x),
        "tanh": (np.tanh, x),
        "sigmoid": (sigmoid, x),
        "log": (np.log, xp),
        "smooth_l1": (smooth_l1, x),
    }
    rows = {}
    for name, (f, v) in unary.items():
        if name != "smooth_l1":
            rows[f"{name}/f32/out"] = timed(lambda: f(v, out=o), reps)
        rows[f"{name}/f32/fresh"] = timed(lambda: f(v), reps)
    rows["elemwise_add/f32/out"] = timed(lambda: np.add(x, y, out=o), reps)
    rows["elemwise_add/f32/fresh"] = timed(lambda: np.add(x, y), reps)
    oh = np.empty(n, np.float16)
    for name, (f, v) in unary.items():
        vh = v.astype(np.float16)
        # smooth_l1 has no `out=` form: a fresh output
        rows[f"{name}/float16/out"] = timed(lambda: f(vh, out=oh), reps)

    def chain():
        a = x * np.float32(0.5)
        a = a + np.float32(1)
        a = np.maximum(a, 0)
        a = np.tanh(a)
        a = a * y
        return a + x

    rows["chain6/eager"] = timed(chain, reps)
    p = rng.uniform(-4, 4, (n // 1024, 1024)).astype(np.float32)
    q = rng.uniform(-4, 4, (n // 1024, 1024)).astype(np.float32)
    rows["row_sq_dist/unfused"] = timed(lambda: np.square(p - q).sum(1), reps)
    a = rng.uniform(-1, 1, (1024, 1024)).astype(np.float32)
    b = rng.uniform(-1, 1, (1024, 1024)).astype(np.float32)
    rows["dot/1024/f32"] = timed(lambda: np.dot(a, b), reps, warm=True)
    xd = rng.uniform(-1, 1, (n // 1024, 64)).astype(np.float32)
    wd = rng.uniform(-1, 1, (64, 1024)).astype(np.float32)
    bd = rng.uniform(-1, 1, 1024).astype(np.float32)
    od = np.empty((n // 1024, 1024), np.float32)
    rows["dense/dot"] = timed(lambda: np.dot(xd, wd, out=od), reps, warm=True)
    rows["dense/unfused"] = timed(lambda: np.maximum(xd @ wd + bd, 0), reps)
    one = np.array([0.5], np.float32)
    calls = 20000
    rows["tiny/relu/typed"] = timed(lambda: [np.maximum(one, 0) for _ in range(calls)], reps, warm=True) / calls
    return rows


def torch_rows(n, reps):
    g = torch.Generator().manual_seed(1)
    x = torch.rand(n, generator=g) * 8 - 4
    xp = torch.rand(n, generator=g) * 3.95 + 0.05
    y = torch.rand(n, generator=g) * 8 - 4
    zeros = torch.zeros(n)
    o = torch.empty(n)
    unary = {
        "relu": (lambda v, out=None: torch.clamp(v, min=0, out=out) if out is not None else torch.relu(v), x),
        "exp": (torch.exp, x),
        "tanh": (torch.tanh, x),
        "sigmoid": (torch.sigmoid, x),
        "log": (torch.log, xp),
        "smooth_l1": (lambda v, out=None: F.smooth_l1_loss(v, zeros, reduction="none", beta=1.0), x),
    }
    rows = {}
    # the copy baseline, as simpleop's `stream/copy`: what this process
    # gets from memory in this round (see `copy_normalized`)
    rows["stream/copy"] = timed(lambda: o.copy_(x), reps, warm=True)
    for name, (f, v) in unary.items():
        if name != "smooth_l1":
            rows[f"{name}/f32/out"] = timed(lambda: f(v, out=o), reps)
        rows[f"{name}/f32/fresh"] = timed(lambda: f(v), reps)
    rows["elemwise_add/f32/out"] = timed(lambda: torch.add(x, y, out=o), reps)
    rows["elemwise_add/f32/fresh"] = timed(lambda: torch.add(x, y), reps)
    for dt, label in [(torch.float16, "float16"), (torch.bfloat16, "bfloat16")]:
        oh = torch.empty(n, dtype=dt)
        zh = zeros.to(dt)
        for name, (f, v) in unary.items():
            vh = v.to(dt)
            if name == "smooth_l1":
                # no `out=` form: a fresh output
                f = lambda v, out=None: F.smooth_l1_loss(v, zh, reduction="none", beta=1.0)  # noqa: E731
            rows[f"{name}/{label}/out"] = timed(lambda: f(vh, out=oh), reps)

    def chain():
        a = x * 0.5
        a = a + 1
        a = torch.relu(a)
        a = torch.tanh(a)
        a = a * y
        return a + x

    rows["chain6/eager"] = timed(chain, reps)
    compiled = torch.compile(lambda x, y: torch.tanh(torch.relu(x * 0.5 + 1.0)) * y + x)
    for _ in range(2):
        compiled(x, y)  # compile outside the timing
    rows["chain6/fused"] = timed(lambda: compiled(x, y), reps)
    p = torch.rand(n // 1024, 1024, generator=g) * 8 - 4
    q = torch.rand(n // 1024, 1024, generator=g) * 8 - 4
    rows["row_sq_dist/unfused"] = timed(lambda: torch.square(p - q).sum(1), reps)
    sq_dist = torch.compile(lambda p, q: torch.square(p - q).sum(1))
    for _ in range(2):
        sq_dist(p, q)
    rows["row_sq_dist/fused"] = timed(lambda: sq_dist(p, q), reps)
    a = torch.rand(1024, 1024, generator=g) * 2 - 1
    b = torch.rand(1024, 1024, generator=g) * 2 - 1
    rows["dot/1024/f32"] = timed(lambda: torch.mm(a, b), reps, warm=True)
    xd = torch.rand(n // 1024, 64, generator=g) * 2 - 1
    wd = torch.rand(64, 1024, generator=g) * 2 - 1
    bd = torch.rand(1024, generator=g) * 2 - 1
    od = torch.empty(n // 1024, 1024)
    rows["dense/dot"] = timed(lambda: torch.mm(xd, wd, out=od), reps, warm=True)
    rows["dense/unfused"] = timed(lambda: torch.relu(xd @ wd + bd), reps)
    dense = torch.compile(lambda x, w, b: torch.relu(x @ w + b))
    for _ in range(2):
        dense(xd, wd, bd)
    rows["dense/fused"] = timed(lambda: dense(xd, wd, bd), reps)
    one = torch.tensor([0.5])
    calls = 20000
    rows["tiny/relu/typed"] = timed(lambda: [torch.relu(one) for _ in range(calls)], reps, warm=True) / calls
    var = torch.tensor([0.5], requires_grad=True)

    def recorded():
        for _ in range(calls):
            torch.relu(var).backward()
    rows["tiny/relu/recorded"] = timed(recorded, reps, warm=True) / calls
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="4M elements, fewer repetitions")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds (default 2)")
    ap.add_argument("--json", action="store_true", help="JSON lines for bench/results.py instead of the table")
    ap.add_argument("--isa", help="simpleop's instruction set (avx512, avx2, scalar; default the best); "
                    "write each ISA's run to its own file, e.g. bench/out/peers-avx2.jsonl")
    ap.add_argument("--binary", help="a prebuilt simpleop binary to run instead of building with --release, "
                    "e.g. one built with --profile bench (fat LTO), as the RESULTS.md tables are")
    ap.add_argument("--warm", action="store_true", help="time the peers' calls back to back, without reading "
                    "twice the last-level cache before each (the default makes them start cold, as simpleop's do)")
    args = ap.parse_args()
    global EVICT
    EVICT = None if args.warm else evictor()
    n = (1 << 22) if args.quick else (1 << 24)
    reps = 5 if args.quick else 11
    if not args.binary:
        subprocess.run(["cargo", "build", "--release", "-q", "--bin", "simpleop"], cwd=ROOT, check=True)
    runs = {"simpleop": [], "numpy": [], "torch": []}
    simpleop_meta = {}
    for r in range(args.rounds):
        print(f"round {r + 1}/{args.rounds}", file=sys.stderr)
        runs["simpleop"].append(ours(args.quick, simpleop_meta, args.isa, args.binary))
        runs["numpy"].append(numpy_rows(n, reps))
        if torch is not None:
            runs["torch"].append(torch_rows(n, reps))

    def med(who, row):
        vals = [r[row] for r in runs[who] if row in r]
        return statistics.median(vals) if vals else None

    def round_ratios(row):
        """ours / the faster peer within each round: the spread shows how
        much the machine drifted between the round's three runs."""
        out = []
        for k, mine in enumerate(runs["simpleop"]):
            peers = [runs[w][k][row] for w in ("numpy", "torch") if k < len(runs[w]) and row in runs[w][k]]
            if row in mine and peers:
                out.append(mine[row] / min(peers))
        return out

    def copy_normalized(row):
        """Median over rounds of (ours / our `stream/copy`) over (torch's /
        torch's copy), each pair from one process in one round: a ratio of
        two same-run ratios, so the memory bandwidth each program saw on
        its turn cancels out (it drifts by up to 2x between turns on a
        shared VM). Meaningful for rows bound by memory; None without a
        torch copy row."""
        out = []
        for k, mine in enumerate(runs["simpleop"]):
            theirs = runs["torch"][k] if k < len(runs["torch"]) else {}
            if all(row in d and "stream/copy" in d for d in (mine, theirs)):
                out.append((mine[row] / mine["stream/copy"]) / (theirs[row] / theirs["stream/copy"]))
        return statistics.median(out) if out else None

    names = list(runs["simpleop"][0].keys())
    if args.json:
        print(json.dumps(meta_line(n, args.rounds, simpleop_meta, not args.warm)))
        for name in names:
            cells = [med(w, name) for w in ("simpleop", "numpy", "torch")]
            peers = [c for c in cells[1:] if c is not None]
            print(json.dumps({
                "name": name,
                "simpleop": cells[0],
                "numpy": cells[1],
                "torch": cells[2],
                "ours_over_best": cells[0] / min(peers) if peers and cells[0] is not None else None,
                "per_round": round_ratios(name),
                "over_torch_copy_normalized": copy_normalized(name),
            }))
        return
    fmt = "{:<30} {:>10} {:>10} {:>10} {:>9} {:>11}"
    print(f"threads: simpleop 2, numpy 1 (ufuncs), torch {'2' if torch else '-'}; elements {n}")
    print(fmt.format("row", "simpleop", "numpy", "torch", "ours/best", "per round"))
    for name in names:
        cells = [med(w, name) for w in ("simpleop", "numpy", "torch")]
        peers = [c for c in cells[1:] if c is not None]
        ratio = f"{cells[0] / min(peers):.2f}" if peers else "-"
        rr = round_ratios(name)
        spread = f"{min(rr):.2f}-{max(rr):.2f}" if len(rr) > 1 else "-"
        scale, unit = (1e3, "µs") if name.startswith("tiny/") else (1.0, "")
        print(fmt.format(name, *[f"{c * scale:.3f}{unit}" if c is not None else "-" for c in cells], ratio, spread))


if __name__ == "__main__":
    main()
