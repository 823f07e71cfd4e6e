#!/usr/bin/env python3
"""Times simpleop's `dot` against numpy on NxN float32 (default 1024), in one run.

The issue (37) asks that `dot` take at most 0.8x numpy's time, on AVX-512
and on AVX2. Both sides use two threads (OPENBLAS_NUM_THREADS /
OMP_NUM_THREADS for numpy, RAYON_NUM_THREADS for simpleop), 3 warm-up
calls, and write into a preallocated output. The machine is shared, so the
sides are measured in alternating rounds (the order rotating each round)
and each side's median is taken over all of its samples; the result is the
ratio of the medians.

    python3 bench/dot_vs_numpy.py [--rounds 3] [--runs 20] [--threads 2]
                                  [--size 1024] [--isa avx2|avx512]
                                  [--baseline PATH] [--json]

`--isa avx2` runs simpleop with SIMPLEOP_ISA=avx2 and numpy's OpenBLAS with
OPENBLAS_CORETYPE=Zen (its AVX2 "Haswell" kernels), so that both sides use
AVX2 on an AVX-512 machine; `--isa avx512` asks for SkylakeX, which is what
OpenBLAS picks by itself there. The OpenBLAS kernel in use is printed.

Our side is `cargo bench -p simpleop-ops --bench dot` (ops/benches/dot.rs,
bench profile = release, fat LTO), which prints `dot_<N>_f32_ms <median>`
and its samples. It is built before anything is timed so compilation does
not compete with either measurement. `--baseline PATH` also times a
prebuilt binary of that bench (for example one built before a change,
copied out of target/release/deps) in the same rounds, and prints its
ratio to numpy too. Exits with status 1 when simpleop's ratio exceeds 0.8
(except with --json, whose output is data for a file: status 0).

`--json` prints JSON lines for bench/results.py instead of the table (the
rounds go to stderr): {"meta": {...}} (CPU model, date, ISA, threads, size,
rounds, runs, numpy's version, BLAS and kernel), then one object per side:
{"name": "dot/<N>/f32", "impl", "ms" (median over all samples), "min_ms",
"max_ms", "gflops", "over_numpy", "per_round" (each round's median over
numpy's median in that round)}.
"""

import argparse
import ctypes
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import time

import timing

TARGET = 0.8
CORETYPE = {"avx2": "Zen", "avx512": "SkylakeX"}


def bench_round(cmd, root, n):
    out = subprocess.run(cmd, cwd=root, check=True, capture_output=True, text=True).stdout
    m = re.search(rf"^dot_{n}_f32_samples_ms\s+(.*)$", out, re.M)
    if not m or not re.search(rf"^dot_{n}_f32_ms\s", out, re.M):
        sys.stderr.write(out)
        raise SystemExit(f"no `dot_{n}_f32_ms` lines in the output of {cmd[0]}")
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


def openblas_core(np):
    """The kernel family numpy's bundled OpenBLAS chose, or '?'."""
    libs = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    for path in glob.glob(os.path.join(libs, "libscipy_openblas*.so*")):
        try:
            lib = ctypes.CDLL(path)  # already loaded by numpy: the same instance
            for name in ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename"):
                if hasattr(lib, name):
                    f = getattr(lib, name)
                    f.restype = ctypes.c_char_p
                    return f().decode()
        except OSError:
            pass
    return "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=20, help="timed calls per side per round")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--size", type=int, default=1024, help="N of the NxN product")
    ap.add_argument("--isa", choices=sorted(CORETYPE),
                    help="instruction set of both sides (default: each picks the best)")
    ap.add_argument("--baseline", help="a prebuilt `dot` bench binary to time in the same rounds")
    ap.add_argument("--json", action="store_true", help="JSON lines for bench/results.py instead of the table")
    args = ap.parse_args()

    n = args.size
    threads = str(args.threads)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = threads  # before numpy loads its BLAS
    os.environ["RAYON_NUM_THREADS"] = threads
    os.environ["DOT_BENCH_RUNS"] = str(args.runs)
    os.environ["DOT_BENCH_SIZE"] = str(n)
    if args.isa:
        os.environ["SIMPLEOP_ISA"] = args.isa
        os.environ["OPENBLAS_CORETYPE"] = CORETYPE[args.isa]  # read when numpy loads it

    try:
        import numpy as np
    except ImportError:
        subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "numpy"])
        import numpy as np

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bench = ["cargo", "bench", "-q", "-p", "simpleop-ops", "--bench", "dot"]
    # cargo's own output goes to stderr; keep stdout for --json
    subprocess.check_call(bench + ["--no-run"], cwd=root, stdout=sys.stderr)

    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    b = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    c = np.empty((n, n), np.float32)

    sides = {
        "simpleop": lambda: bench_round(bench, root, n),
        "numpy": lambda: numpy_round(np, a, b, c, args.runs),
    }
    if args.baseline:
        base = os.path.abspath(args.baseline)
        sides["baseline"] = lambda: bench_round([base], root, n)
    names = list(sides)
    samples = {k: [] for k in names}
    per_round = {k: [] for k in names}
    log = sys.stderr if args.json else sys.stdout
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        meds = {}
        for k in order:
            s = sides[k]()
            samples[k] += s
            meds[k] = statistics.median(s)
        for k in names:
            per_round[k].append(meds[k] / meds["numpy"])
        print(f"round {r + 1}: " + ", ".join(f"{k} median {meds[k]:7.3f} ms" for k in names)
              + f"; simpleop/numpy {meds['simpleop'] / meds['numpy']:.3f}", file=log)

    blas = "?"
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]["name"]
    except Exception:  # older numpy
        pass
    isa = os.environ.get("SIMPLEOP_ISA", "best")
    kernel = openblas_core(np)
    med = {k: statistics.median(samples[k]) for k in names}
    gflops = {k: 2 * n**3 / (med[k] * 1e-3) / 1e9 for k in names}
    if args.json:
        print(json.dumps({"meta": {
            "cpu": timing.cpu_model(), "date": time.strftime("%Y-%m-%d", time.gmtime()),
            "isa": isa, "threads": args.threads, "size": n, "rounds": args.rounds, "runs": args.runs,
            "numpy": np.__version__, "blas": blas, "kernel": kernel}}))
        for k in names:
            print(json.dumps({
                "name": f"dot/{n}/f32", "impl": k, "ms": med[k], "min_ms": min(samples[k]),
                "max_ms": max(samples[k]), "gflops": gflops[k], "over_numpy": med[k] / med["numpy"],
                "per_round": per_round[k]}))
    else:
        print(f"\n{n}x{n} float32, threads {threads}, {args.rounds} rounds x {args.runs} runs, "
              f"simpleop ISA {isa}, numpy {np.__version__} ({blas}, kernel {kernel})")
        print("| impl     | median ms | min ms  | max ms  | GFLOP/s | / numpy |")
        print("| -------- | --------- | ------- | ------- | ------- | ------- |")
        for k in names:
            s, m = samples[k], med[k]
            print(f"| {k:8} | {m:9.3f} | {min(s):7.3f} | {max(s):7.3f} | {gflops[k]:7.1f} | "
                  f"{m / med['numpy']:7.3f} |")
    ratio = med["simpleop"] / med["numpy"]
    verdict = "PASS" if ratio <= TARGET else "FAIL"
    print(f"\nratio simpleop/numpy = {ratio:.3f} (target <= {TARGET}): {verdict}", file=log)
    return 0 if args.json or ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
