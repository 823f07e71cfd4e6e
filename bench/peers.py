#!/usr/bin/env python3
"""Peer comparisons for `simpleop bench` rows.

Section `chain6`: the six-op elementwise chain of the `chain6/*` rows,
`tanh(relu(0.5 x + 1)) * y + x` on 16M float32 (4M with --quick), under
`torch.compile` (inductor generates one fused loop) against simpleop's
fused executor (`chain6/fused`). Both sides use the same thread count
(torch.set_num_threads / RAYON_NUM_THREADS). The simpleop rows come from
`simpleop bench --json`, built first in release mode so compilation does
not compete with the timing; torch is timed before and after it and the
better median is kept, since the machine is shared. Needs PyTorch; exits
with status 1 when the fused chain is slower than torch.compile.

    python3 bench/peers.py [--quick] [--threads 2] [--reps 15]

Other sections may be added as separate functions.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def simpleop_rows(quick, threads):
    """Builds and runs `simpleop bench --json`; returns rows by name."""
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    subprocess.run(
        ["cargo", "build", "--release", "-p", "simpleop-ops", "--bin", "simpleop"],
        cwd=ROOT,
        env=env,
        check=True,
    )
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    exe = os.path.join(target, "release", "simpleop")
    cmd = [exe, "bench", "--json"] + (["--quick"] if quick else [])
    out = subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    return {r["name"]: r for r in rows}


def torch_chain_ms(n, threads, reps):
    """Median ms of the chain under torch.compile and eagerly."""
    import torch

    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(3)
    x = torch.rand(n, generator=g) * 8 - 4
    y = torch.rand(n, generator=g) * 8 - 4

    def chain(x, y):
        return torch.tanh(torch.relu(x * 0.5 + 1.0)) * y + x

    compiled = torch.compile(chain)

    def median(f):
        for _ in range(3):
            f(x, y)
        t = []
        for _ in range(reps):
            start = time.perf_counter()
            f(x, y)
            t.append((time.perf_counter() - start) * 1e3)
        return statistics.median(t)

    return median(compiled), median(chain)


def chain6(args):
    try:
        import torch  # noqa: F401
    except ImportError:
        print("chain6: PyTorch is not installed; skipped")
        return 0
    n = (1 << 22) if args.quick else (1 << 24)
    before, eager_before = torch_chain_ms(n, args.threads, args.reps)
    rows = simpleop_rows(args.quick, args.threads)
    after, eager_after = torch_chain_ms(n, args.threads, args.reps)
    compiled = min(before, after)
    eager = min(eager_before, eager_after)
    fused = rows["chain6/fused"]["ms"]
    print(f"chain6, {n} float32 elements, {args.threads} threads")
    for name in ["elemwise_add/f32/out", "chain6/fused", "chain6/unfused", "chain6/eager"]:
        print(f"  simpleop {name:<24} {rows[name]['ms']:9.3f} ms")
    print(f"  torch.compile                     {compiled:9.3f} ms (runs: {before:.3f}, {after:.3f})")
    print(f"  torch eager                       {eager:9.3f} ms")
    ratio = fused / compiled
    print(f"  chain6/fused / torch.compile = {ratio:.2f} (target < 1)")
    return 0 if ratio < 1.0 else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="4M elements")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=15)
    args = p.parse_args()
    sys.exit(chain6(args))


if __name__ == "__main__":
    main()
