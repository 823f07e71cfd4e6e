#!/usr/bin/env python3
"""Scaling of `train_digits_dist` on this machine: 1 and 2 ranks x 1 thread,
the same global batch, alternated round by round in one run so that both
see the same machine.

    cargo build --release -p simpleop-dist --example train_digits_dist
    python3 bench/dist_scaling.py [--exe target/release/examples/train_digits_dist]
        [--rounds 3] [--epochs 20] [--global-batch 50]

Writes every run's JSON (with a meta line: date, CPU, load, Open MPI) to
`bench/out/dist-scaling.jsonl` and prints the markdown table of
`docs/distributed.md`'s "Scaling on this machine". Standard library only.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def openmpi_version():
    out = subprocess.run(["mpirun", "--version"], capture_output=True, text=True).stdout
    return out.splitlines()[0].split()[-1] if out else "unknown"


def run(exe, ranks, epochs, global_batch, extra):
    env = dict(os.environ, RAYON_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = ["mpirun", "-np", str(ranks), "--oversubscribe", exe, "--epochs", str(epochs),
           "--batch", str(global_batch // ranks), "--json",
           "--data", os.path.join(HERE, "..", "examples", "data", "digits.csv")] + extra
    meta = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpu": cpu_model(),
            "cores": os.cpu_count(), "openmpi": openmpi_version(),
            "loadavg_before": " ".join(f"{x:.2f}" for x in os.getloadavg()),
            "ranks": ranks, "rayon_threads": 1,
            "command": " ".join(["mpirun", "-np", str(ranks), "train_digits_dist"] + cmd[5:])}
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    result = json.loads([l for l in out.splitlines() if l.startswith("{")][-1])
    return meta, result


def table(results):
    rows = ["| ranks × threads | batch per rank | ms per step | of it in the reducer | samples/s | speed-up |",
            "| --- | --- | --- | --- | --- | --- |"]
    one = statistics.median(r["samples_per_s"] for r in results[1])
    for ranks in sorted(results):
        rs = results[ranks]
        def span(key, fmt):
            lo, hi = (fmt.format(f(r[key] for r in rs)) for f in (min, max))
            return lo if lo == hi else f"{lo}–{hi}"

        speed = statistics.median(r["samples_per_s"] for r in rs) / one
        rows.append(f"| {ranks} × 1 | {rs[0]['batch_per_rank']} | {span('ms_per_step', '{:.3f}')} | "
                    f"{span('ms_allreduce_per_step', '{:.3f}')} | {span('samples_per_s', '{:,.0f}')} | {speed:.2f} |")
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--exe", default=os.path.join(HERE, "..", "target", "release", "examples", "train_digits_dist"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--global-batch", type=int, default=50)
    ap.add_argument("--out", default=os.path.join(HERE, "out", "dist-scaling.jsonl"))
    ap.add_argument("extra", nargs="*", help="more arguments for train_digits_dist (after --)")
    a = ap.parse_args()
    if a.global_batch % 2:
        sys.exit("--global-batch must be even (it is split over 2 ranks)")
    results = {1: [], 2: []}
    with open(a.out, "w") as f:
        for _ in range(a.rounds):
            for ranks in (1, 2):
                meta, result = run(a.exe, ranks, a.epochs, a.global_batch, a.extra)
                results[ranks].append(result)
                f.write(json.dumps({"meta": meta}) + "\n" + json.dumps(result) + "\n")
    print(table(results))


if __name__ == "__main__":
    main()
