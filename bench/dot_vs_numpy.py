#!/usr/bin/env python3
"""Times simpleop's `dot` against numpy on 1024x1024 float32, in one run.

The issue asks that `dot` take at most 0.7x numpy's time. Both sides use two
threads (OPENBLAS_NUM_THREADS / OMP_NUM_THREADS for numpy, RAYON_NUM_THREADS
for simpleop's `gemm`), 3 warm-up calls, and write into a preallocated
output. The machine is shared, so the two are measured in alternating
rounds (simpleop, numpy, simpleop, numpy, ...) and each side's median is
taken over all of its samples; the result is the ratio of the medians.

    python3 bench/dot_vs_numpy.py [--rounds 3] [--runs 20] [--threads 2]

Our side is `cargo bench -p simpleop-ops --bench dot` (ops/benches/dot.rs,
bench profile = release), which prints `dot_1024_f32_ms <median>` and its
samples. It is built before anything is timed so compilation does not
compete with either measurement. Exits with status 1 when the ratio
exceeds 0.7.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

N = 1024
TARGET = 0.7


def ours_round(bench, root):
    out = subprocess.run(bench, cwd=root, check=True, capture_output=True, text=True).stdout
    m = re.search(r"^dot_1024_f32_samples_ms\s+(.*)$", out, re.M)
    if not m or not re.search(r"^dot_1024_f32_ms\s", out, re.M):
        sys.stderr.write(out)
        raise SystemExit("no `dot_1024_f32_ms` lines in the bench output")
    return [float(v) for v in m.group(1).split()]


def numpy_round(np, a, b, c, runs):
    for _ in range(3):
        np.dot(a, b, out=c)
    samples = []
    for _ in range(runs):
        t = time.perf_counter()
        np.dot(a, b, out=c)
        samples.append((time.perf_counter() - t) * 1e3)
    return samples


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=20, help="timed calls per side per round")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    threads = str(args.threads)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = threads  # before numpy loads its BLAS
    os.environ["RAYON_NUM_THREADS"] = threads
    os.environ["DOT_BENCH_RUNS"] = str(args.runs)

    try:
        import numpy as np
    except ImportError:
        subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "numpy"])
        import numpy as np

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bench = ["cargo", "bench", "-q", "-p", "simpleop-ops", "--bench", "dot"]
    subprocess.check_call(bench + ["--no-run"], cwd=root)

    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (N, N)).astype(np.float32)
    b = rng.uniform(-1, 1, (N, N)).astype(np.float32)
    c = np.empty((N, N), np.float32)

    ours, theirs = [], []
    for r in range(args.rounds):
        o = ours_round(bench, root)
        t = numpy_round(np, a, b, c, args.runs)
        print(f"round {r + 1}: simpleop median {statistics.median(o):7.3f} ms, "
              f"numpy median {statistics.median(t):7.3f} ms")
        ours += o
        theirs += t

    blas = "?"
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]["name"]
    except Exception:  # older numpy
        pass
    mo, mt = statistics.median(ours), statistics.median(theirs)
    ratio = mo / mt
    print(f"\n{N}x{N} float32, threads {threads}, {args.rounds} rounds x {args.runs} runs, "
          f"numpy {np.__version__} ({blas})")
    print("| impl     | median ms | min ms  | max ms  | GFLOP/s |")
    print("| -------- | --------- | ------- | ------- | ------- |")
    for name, s, m in (("simpleop", ours, mo), ("numpy", theirs, mt)):
        gf = 2 * N**3 / (m * 1e-3) / 1e9
        print(f"| {name:8} | {m:9.3f} | {min(s):7.3f} | {max(s):7.3f} | {gf:7.1f} |")
    verdict = "PASS" if ratio <= TARGET else "FAIL"
    print(f"\nratio simpleop/numpy = {ratio:.3f} (target <= {TARGET}): {verdict}")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
