#!/usr/bin/env python3
"""The alpha-beta model of simpleop-dist at larger scale (issue 39).

Fits the latency (alpha) and inverse bandwidth (beta) of one all-reduce
from `allreduce_bench --json` runs on this machine, builds the gradient
buckets of ResNet-18 and of the digits model the way `GradReducer` (and
PyTorch DDP) packs them, and projects the weak-scaling efficiency of a
training step to more ranks on a measured or an assumed network:

    ring all-reduce of a bucket of S bytes over N ranks
        T(S, N) = 2 (N - 1) alpha + 2 (N - 1) / N * S * beta
    step time   t(N) = t_compute + exposed communication
    efficiency  E(N) = t_compute / t(N)          (per-rank batch fixed)

Exposed communication is either all of it (no overlap: the all-reduces
start after backward) or the ideal-overlap bound of DDP: every bucket
but the last hides behind backward, so
    exposed = max(0, sum of the other buckets' T - t_backward) + T(last).

From the repository root:

    mpirun -np 2 --oversubscribe target/release/examples/allreduce_bench --json \\
        >> bench/out/allreduce-loopback.jsonl       # a few times
    mpirun -np 1 target/release/examples/train_digits_dist --epochs 5 --json \\
        > bench/out/digits-dist.jsonl
    python3 bench/dist_projection.py                # table on stdout, JSON to bench/out
    python3 bench/dist_projection.py --check        # the self-test

Standard library only. Every assumption is a named constant below and is
repeated in the JSON output.
"""

import argparse
import json
import math
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

F32 = 4
MIB = 1 << 20
# GradReducer's default bucket (DistConfig), which is PyTorch DDP's default.
BUCKET_BYTES = 25 * MIB
RANKS = [1, 8, 64, 256]
# The loopback fit: alpha from messages up to SMALL_BYTES, beta from those
# of LARGE_BYTES and more.
SMALL_BYTES = 16 << 10
LARGE_BYTES = 1 << 20

# Assumptions (stated in docs/distributed.md).
# Latency per ring step of kernel TCP between two machines.
ALPHA_TCP = 20e-6
# Networks: name -> bits per second at line rate (no protocol overhead).
NETWORKS = {"10 Gbit/s": 10e9, "100 Gbit/s": 100e9}
# Backward's share of a training step (backward costs about twice forward).
BACKWARD_SHARE = 2.0 / 3.0
# A training step costs about three forwards.
TRAIN_OVER_FORWARD = 3.0
# The per-rank batch of the ResNet runs.
RESNET_BATCH = 32
# Published one-GPU V100 training throughput of ResNet-50 in images/s (NVIDIA
# DeepLearningExamples, the PyTorch ResNet50 recipe's DGX-1 table; cited in
# docs/distributed.md), scaled to ResNet-18 by the ratio of forward MACs.
V100_RESNET50 = {"V100 FP32": 367.0, "V100 mixed precision": 1200.0}
# The Horovod benchmark's scale and network (cited in docs/distributed.md).
HOROVOD_RANKS = 512
HOROVOD_BITS = 25e9


# ---------------------------------------------------------------------------
# the models' parameters, in forward order, and their forward multiply-adds

def _conv_out(hw, k, s, p):
    return (hw + 2 * p - k) // s + 1


class Net:
    """Parameter tensors (name, elements) in forward order and forward MACs."""

    def __init__(self):
        self.params = []
        self.macs = 0

    def conv(self, name, hw, cin, cout, k, s=1, p=0, bias=False):
        out = _conv_out(hw, k, s, p)
        self.params.append((name + ".weight", cout * cin * k * k))
        if bias:
            self.params.append((name + ".bias", cout))
        self.macs += out * out * cout * cin * k * k
        return out

    def bn(self, name, c):
        self.params += [(name + ".gamma", c), (name + ".beta", c)]

    def dense(self, name, cin, cout):
        self.params += [(name + ".weight", cin * cout), (name + ".bias", cout)]
        self.macs += cin * cout

    def elements(self):
        return sum(n for _, n in self.params)


def resnet(depth, hw=224, classes=1000):
    """torchvision's ResNet of `depth` (parameter shapes and MACs)."""
    blocks, bottleneck = {
        18: ([2, 2, 2, 2], False),
        50: ([3, 4, 6, 3], True),
        101: ([3, 4, 23, 3], True),
    }[depth]
    net = Net()
    hw = net.conv("conv1", hw, 3, 64, 7, 2, 3)
    net.bn("bn1", 64)
    hw = _conv_out(hw, 3, 2, 1)
    cin = 64
    for stage, (width, count) in enumerate(zip([64, 128, 256, 512], blocks)):
        cout = width * (4 if bottleneck else 1)
        for b in range(count):
            name = "layer%d.%d" % (stage + 1, b)
            s = 2 if (b == 0 and stage > 0) else 1
            if bottleneck:
                h = net.conv(name + ".conv1", hw, cin, width, 1)
                net.bn(name + ".bn1", width)
                h = net.conv(name + ".conv2", h, width, width, 3, s, 1)
                net.bn(name + ".bn2", width)
                h = net.conv(name + ".conv3", h, width, cout, 1)
                net.bn(name + ".bn3", cout)
            else:
                h = net.conv(name + ".conv1", hw, cin, width, 3, s, 1)
                net.bn(name + ".bn1", width)
                h = net.conv(name + ".conv2", h, width, width, 3, 1, 1)
                net.bn(name + ".bn2", width)
            if b == 0 and (s != 1 or cin != cout):
                net.conv(name + ".downsample", hw, cin, cout, 1, s)
                net.bn(name + ".downsample.bn", cout)
            hw, cin = h, cout
    net.dense("fc", cin, classes)
    return net


def vgg16(hw=224, classes=1000):
    net = Net()
    cin = 3
    cfg = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]
    for i, c in enumerate(cfg):
        if c == "M":
            hw //= 2
        else:
            hw = net.conv("features.%d" % i, hw, cin, c, 3, 1, 1, bias=True)
            cin = c
    net.dense("fc6", cin * hw * hw, 4096)
    net.dense("fc7", 4096, 4096)
    net.dense("fc8", 4096, classes)
    return net


def digits(conv_channels=8, hidden=128):
    """train_digits' model: a 3x3 convolution on 8x8 images, then an MLP
    (shapes from `shapes` in examples/examples/train_digits/trainer.rs)."""
    net = Net()
    side, window, classes = 8, 3, 10
    positions = (side - window + 1) ** 2
    net.params += [("wc", conv_channels * window * window), ("bc", conv_channels)]
    net.params += [("w1", positions * conv_channels * hidden), ("b1", hidden)]
    net.params += [("w2", hidden * classes), ("b2", classes)]
    net.macs = positions * conv_channels * window * window + positions * conv_channels * hidden
    net.macs += hidden * classes
    return net


def buckets(net, bucket_bytes=BUCKET_BYTES):
    """Bucket sizes in bytes, in ready order (the reverse of the forward's
    parameter order), packed as GradReducer::plan packs them: add
    gradients until the bucket holds at least `bucket_bytes`, then close it."""
    cap = bucket_bytes // F32
    out, filled = [], 0
    for _, n in reversed(net.params):
        filled += n
        if filled >= cap:
            out.append(filled * F32)
            filled = 0
    if filled:
        out.append(filled * F32)
    return out


# ---------------------------------------------------------------------------
# the cost model

def ring(size, n, alpha, beta):
    """Seconds of one ring all-reduce of `size` bytes over `n` ranks."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * size * beta


def exposed(sizes, n, alpha, beta, t_backward):
    """(no overlap, ideal overlap) exposed communication, seconds."""
    times = [ring(s, n, alpha, beta) for s in sizes]
    total = sum(times)
    if not times:
        return 0.0, 0.0
    hidden_part = sum(times[:-1])
    return total, max(0.0, hidden_part - t_backward) + times[-1]


def halving_doubling(size, n, alpha, beta):
    """Seconds of a latency-optimal all-reduce (recursive halving, then
    doubling: a logarithmic number of steps, the ring's bytes), which MPI
    libraries pick for small messages; for comparison with `ring`."""
    if n <= 1:
        return 0.0
    return 2 * math.ceil(math.log2(n)) * alpha + 2 * (n - 1) / n * size * beta


def line(points, weights=None):
    """Least-squares intercept and slope of t = a + b * bytes (weighted)."""
    w = weights or [1.0] * len(points)
    sw = sum(w)
    sx = sum(wi * x for wi, (x, _) in zip(w, points))
    sy = sum(wi * t for wi, (_, t) in zip(w, points))
    sxx = sum(wi * x * x for wi, (x, _) in zip(w, points))
    sxy = sum(wi * x * t for wi, (x, t) in zip(w, points))
    b = (sw * sxy - sx * sy) / (sw * sxx - sx * sx)
    return (sy - b * sx) / sw, b


def worst_residual(points, a, b):
    return max(abs(a + b * x - t) / t for x, t in points)


def fit(points, small=SMALL_BYTES, large=LARGE_BYTES):
    """The model's alpha and beta, and the single-line fit for reference.

    One line fits shared memory badly: messages beyond the cache run at
    memory speed. So alpha is the intercept of a least-squares line over
    the small messages (latency-bound), and beta the slope of one over
    the large messages (the size of real buckets). The single line is a
    least-squares fit of the relative error over all sizes."""
    lo = [p for p in points if p[0] <= small]
    hi = [p for p in points if p[0] >= large]
    alpha, _ = line(lo)
    _, beta = line(hi)
    a1, b1 = line(points, [1.0 / (t * t) for _, t in points])
    return {
        "alpha_s": alpha,
        "beta_s_per_byte": beta,
        "worst_residual_small": worst_residual(lo, alpha, line(lo)[1]),
        "worst_residual_large": worst_residual(hi, line(hi)[0], beta),
        "single_line": {"alpha_s": a1, "beta_s_per_byte": b1,
                        "worst_residual": worst_residual(points, a1, b1)},
        "small_max_bytes": small,
        "large_min_bytes": large,
    }


# ---------------------------------------------------------------------------
# inputs

def read_jsonl(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows


def loopback(path):
    """Per size, the median over runs of each run's median seconds; and
    the runs' metadata lines."""
    rows = read_jsonl(path)
    meta = [r["meta"] for r in rows if "meta" in r]
    by_size = {}
    for r in rows:
        if "bytes" in r:
            by_size.setdefault(r["bytes"], []).append(r["median_s"])
    ranks = {r["ranks"] for r in rows if "ranks" in r}
    if ranks != {2}:
        sys.exit("dist_projection: %s: expected two-rank runs, got ranks %s" % (path, sorted(ranks)))
    points = sorted((b, statistics.median(ts)) for b, ts in by_size.items())
    spread = {b: (min(ts), max(ts), len(ts)) for b, ts in by_size.items()}
    return points, spread, meta


def resnet18_cpu_gflops(path):
    """The best simpleop GFLOP/s of the `resnet18_v1/infer/b16` rows of
    RESULTS.md (GFLOP and simpleop ms columns)."""
    best = None
    with open(path) as f:
        for line in f:
            if not line.startswith("| `resnet18_v1/infer/b16`"):
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            gflop, ms = float(cells[1]), float(cells[2])
            rate = gflop / (ms / 1e3)
            if best is None or rate > best[0]:
                best = (rate, gflop, ms)
    if best is None:
        sys.exit("dist_projection: no resnet18_v1/infer/b16 row in " + path)
    return best


# ---------------------------------------------------------------------------
# the projection

def project(cases, networks):
    out = []
    for case in cases:
        for net_name, (alpha, beta) in networks.items():
            row = {
                "model": case["model"],
                "compute": case["compute"],
                "network": net_name,
                "t_compute_ms": case["t_compute"] * 1e3,
                "ranks": {},
            }
            for n in RANKS:
                t_b = case["t_compute"] * BACKWARD_SHARE
                none, ideal = exposed(case["buckets"], n, alpha, beta, t_b)
                row["ranks"][str(n)] = {
                    "comm_ms": none * 1e3,
                    "exposed_overlap_ms": ideal * 1e3,
                    "eff_no_overlap": case["t_compute"] / (case["t_compute"] + none),
                    "eff_overlap": case["t_compute"] / (case["t_compute"] + ideal),
                }
            out.append(row)
    return out


def pct(x):
    return "%.0f %%" % (100 * x) if x < 0.995 else "%.1f %%" % (100 * x)


def fmt_ms(x):
    return "%.3g" % x if x < 100 else "%.0f" % x


def markdown(rows, shown=(8, 64, 256)):
    head = "| model | compute per step | network | " + " | ".join("N = %d" % n for n in shown) + " |"
    lines = [head, "| --- | --- | --- |" + " --- |" * len(shown)]
    for r in rows:
        cells = []
        for n in shown:
            c = r["ranks"][str(n)]
            cells.append("%s / %s" % (pct(c["eff_no_overlap"]), pct(c["eff_overlap"])))
        lines.append(
            "| %s | %s ms (%s) | %s | %s |"
            % (r["model"], fmt_ms(r["t_compute_ms"]), r["compute"], r["network"], " | ".join(cells))
        )
    return "\n".join(lines)


def comm_table(rows, cases, networks, shown=(8, 256)):
    """All-reduce time per step (no overlap) by model and network, and at
    the largest N with the latency-optimal algorithm instead of the ring."""
    seen, lines = set(), []
    big = shown[-1]
    lines.append("| model | network | " + " | ".join("ring, N = %d" % n for n in shown)
                 + " | halving-doubling, N = %d |" % big)
    lines.append("| --- | --- |" + " --- |" * (len(shown) + 1))
    for r in rows:
        key = (r["model"], r["network"])
        if key in seen:
            continue
        seen.add(key)
        sizes = next(c["buckets"] for c in cases if c["model"] == r["model"])
        alpha, beta = networks[r["network"]]
        hd = sum(halving_doubling(b, big, alpha, beta) for b in sizes) * 1e3
        r["halving_doubling_ms_at_%d" % big] = hd
        cells = [fmt_ms(r["ranks"][str(n)]["comm_ms"]) for n in shown] + [fmt_ms(hd)]
        lines.append("| %s | %s | %s |" % (r["model"], r["network"], " | ".join(cells)))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", default=os.path.join(HERE, "out", "allreduce-loopback.jsonl"))
    ap.add_argument("--digits", default=os.path.join(HERE, "out", "digits-dist.jsonl"))
    ap.add_argument("--results", default=os.path.join(HERE, "RESULTS.md"))
    ap.add_argument("-o", "--out", default=os.path.join(HERE, "out", "dist_projection.json"))
    ap.add_argument("--check", action="store_true", help="run the self-test and exit")
    args = ap.parse_args()
    if args.check:
        check()
        return

    points, spread, meta = loopback(args.bench)
    f = fit(points)
    a2, b2 = f["alpha_s"], f["beta_s_per_byte"]
    # With two ranks the ring costs two latencies plus the bucket once at
    # beta: the fitted intercept is two ring steps' latency, the slope beta.
    alpha_lb, beta_lb = a2 / 2, b2
    networks = {"loopback (measured)": (alpha_lb, beta_lb)}
    for name, bits in NETWORKS.items():
        networks[name] = (ALPHA_TCP, 8.0 / bits)

    r18, r50, dg = resnet(18), resnet(50), digits()
    rate, gflop_b16, ms_b16 = resnet18_cpu_gflops(args.results)
    flop_step = TRAIN_OVER_FORWARD * 2 * r18.macs * RESNET_BATCH
    cases = [
        {
            "model": "ResNet-18",
            "compute": "this CPU",
            "t_compute": flop_step / (rate * 1e9),
            "buckets": buckets(r18),
        }
    ]
    for label, r50_rate in V100_RESNET50.items():
        imgs = r50_rate * r50.macs / r18.macs
        cases.append(
            {
                "model": "ResNet-18",
                "compute": label,
                "t_compute": RESNET_BATCH / imgs,
                "buckets": buckets(r18),
            }
        )
    dig = [r for r in read_jsonl(args.digits) if "ms_per_step" in r]
    if not dig:
        sys.exit("dist_projection: no train_digits_dist --json line in " + args.digits)
    # The step without its (one-rank) all-reduce, median over the runs.
    t_digits = statistics.median(r["ms_per_step"] - r["ms_allreduce_per_step"] for r in dig) / 1e3
    cases.append(
        {
            "model": "digits",
            "compute": "this CPU",
            "t_compute": t_digits,
            "buckets": buckets(dg),
        }
    )
    rows = project(cases, networks)
    comm = comm_table(rows, cases, networks)

    # The published setups' models, for the comparison: ResNet-50 with the
    # published V100 compute; ResNet-101 and VGG-16 on the Horovod
    # benchmark's network (no compute figure: communication alone).
    r50_cases = [
        {"model": "ResNet-50", "compute": label, "t_compute": RESNET_BATCH / rate50,
         "buckets": buckets(r50)}
        for label, rate50 in V100_RESNET50.items()
    ]
    r50_rows = project(r50_cases, {"100 Gbit/s": networks["100 Gbit/s"]})
    horovod = []
    for name, net in (("ResNet-101", resnet(101)), ("VGG-16", vgg16())):
        n, bits = HOROVOD_RANKS, HOROVOD_BITS
        t = sum(ring(b, n, ALPHA_TCP, 8.0 / bits) for b in buckets(net))
        horovod.append({"model": name, "ranks": n, "gbits": bits / 1e9, "comm_ms": t * 1e3,
                        "grad_mb": net.elements() * F32 / 1e6, "buckets": len(buckets(net))})

    models = {}
    for name, net in (("ResNet-18", r18), ("digits", dg), ("ResNet-50", r50)):
        models[name] = {
            "parameters": net.elements(),
            "gradient_bytes": net.elements() * F32,
            "forward_macs_per_image": net.macs,
            "buckets_bytes": buckets(net),
        }
    out = {
        "fit": dict(f, points=[{"bytes": b, "median_s": t, "min_s": spread[b][0],
                                 "max_s": spread[b][1], "runs": spread[b][2]} for b, t in points],
                    alpha_ring_s=alpha_lb),
        "meta": meta,
        "assumptions": {
            "alpha_tcp_s": ALPHA_TCP,
            "networks_bits_per_s": NETWORKS,
            "backward_share": BACKWARD_SHARE,
            "train_over_forward": TRAIN_OVER_FORWARD,
            "resnet_batch_per_rank": RESNET_BATCH,
            "v100_resnet50_images_per_s": V100_RESNET50,
            "resnet18_cpu_gflops": rate,
            "resnet18_cpu_row": {"gflop": gflop_b16, "ms": ms_b16},
            "digits_runs": dig,
            "bucket_bytes": BUCKET_BYTES,
        },
        "models": models,
        "projection": rows,
        "resnet50_v100": r50_rows,
        "horovod_setups": horovod,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=1)
        fh.write("\n")

    one = f["single_line"]
    print("Loopback, two ranks, %d sizes, %d runs: alpha %.2f µs (sizes up to %d bytes, worst residual %.0f %%),"
          % (len(points), spread[points[0][0]][2], a2 * 1e6, SMALL_BYTES, 100 * f["worst_residual_small"])
          + " beta %.3f ns/byte = %.2f GB/s (sizes from %d bytes, worst residual %.0f %%); ring alpha %.2f µs."
          % (b2 * 1e9, 1 / b2 / 1e9, LARGE_BYTES, 100 * f["worst_residual_large"], alpha_lb * 1e6))
    print("One line over all sizes (relative least squares): %.2f µs + %.3f ns/byte, worst residual %.0f %%."
          % (one["alpha_s"] * 1e6, one["beta_s_per_byte"] * 1e9, 100 * one["worst_residual"]))
    print()
    print("| bytes | " + " | ".join(str(b) for b, _ in points) + " |")
    print("| --- |" + " --- |" * len(points))
    print("| µs (median of runs) | " + " | ".join("%.3g" % (t * 1e6) for _, t in points) + " |")
    print("| µs, one line | " + " | ".join(
        "%.3g" % ((one["alpha_s"] + one["beta_s_per_byte"] * b) * 1e6) for b, _ in points) + " |")
    print()
    for name, m in models.items():
        print("%s: %d parameters, %.1f MB of gradients, buckets (MB, ready order) %s, forward %.3g GMAC/image"
              % (name, m["parameters"], m["gradient_bytes"] / 1e6,
                 ", ".join("%.2f" % (b / 1e6) for b in m["buckets_bytes"]),
                 m["forward_macs_per_image"] / 1e9))
    print()
    print("Efficiency, no overlap / ideal overlap:")
    print()
    print(markdown(rows))
    print()
    print(comm)
    print()
    print(markdown(r50_rows, shown=(64, 256)))
    print()
    print("| model | ranks | network | gradient MB | buckets | ring all-reduce ms per step |")
    print("| --- | --- | --- | --- | --- | --- |")
    for p in horovod:
        print("| %s | %d | %g Gbit/s | %.1f | %d | %s |"
              % (p["model"], p["ranks"], p["gbits"], p["grad_mb"], p["buckets"], fmt_ms(p["comm_ms"])))
    print()
    print("wrote " + os.path.relpath(args.out, ROOT))


def check():
    # The ring formula by hand: four ranks, a bucket of a thousand bytes,
    # alpha one microsecond, beta one nanosecond per byte: six latencies
    # (six microseconds) plus one and a half times the bucket's bytes at
    # beta (one and a half microseconds).
    assert math.isclose(ring(1000, 4, 1e-6, 1e-9), 7.5e-6, rel_tol=1e-12)
    assert ring(1000, 1, 1e-6, 1e-9) == 0.0
    # Two ranks: two latencies plus the bucket once at beta, the form the
    # two-rank fit is mapped onto.
    assert math.isclose(ring(10_000, 2, 3e-6, 2e-9), 2 * 3e-6 + 10_000 * 2e-9, rel_tol=1e-12)
    # Overlap bound: a first bucket of three seconds hides two of them
    # behind a two-second backward, and the last one-second bucket never
    # hides; without overlap all four seconds show. With one bucket
    # nothing hides.
    none, ideal = exposed([3e9, 1e9], 2, 0.0, 1e-9, 2.0)
    assert math.isclose(none, 4.0) and math.isclose(ideal, 2.0)
    none, ideal = exposed([3e9], 2, 0.0, 1e-9, 10.0)
    assert none == ideal == 3.0
    # The fit recovers an exact line.
    pts = [(b, 4e-6 + 3e-9 * b) for b in (64, 1024, 1 << 14, 1 << 20, 1 << 24)]
    f = fit(pts)
    assert math.isclose(f["alpha_s"], 4e-6, rel_tol=1e-6)
    assert math.isclose(f["beta_s_per_byte"], 3e-9, rel_tol=1e-9)
    assert f["single_line"]["worst_residual"] < 1e-9
    # The latency-optimal algorithm: a logarithmic number of latencies.
    assert math.isclose(halving_doubling(1000, 4, 1e-6, 1e-9), 4e-6 + 1.5e-6, rel_tol=1e-12)
    # The models: torchvision's parameter counts, models.py's MACs, the
    # digits gradient of the docs, and GradReducer's packing.
    import models

    assert resnet(18).elements() == 11_689_512
    assert resnet(50).elements() == 25_557_032
    assert resnet(101).elements() == 44_549_160
    assert vgg16().elements() == 138_357_544
    assert resnet(18).macs == models.macs_resnet18()
    assert digits().elements() * F32 == 153_448
    assert buckets(digits()) == [153_448]
    tiny = Net()
    tiny.params = [("a", 3), ("b", 2), ("c", 2), ("d", 1)]
    # Ready order d, c, b, a with a cap of three elements: d and c close
    # the first bucket, b and a are the rest.
    assert buckets(tiny, 3 * F32) == [3 * F32, 5 * F32]
    print("dist_projection: self-test passed")


if __name__ == "__main__":
    main()
