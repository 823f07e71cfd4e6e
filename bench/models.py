#!/usr/bin/env python3
"""CNN models in simpleop, PyTorch and Apache MXNet 1.9.1, side by side.

    python3 bench/models.py [--quick] [--rounds 3] [--reps N] [--json]
        [--mx-python PY] [--torch-python PY] [--simpleop BIN]

Rows (float32, 2 threads everywhere):
  resnet18_v1/infer/b1     ResNet-18 v1, inference, 1 x 3 x 224 x 224
  resnet18_v1/infer/b16    the same, batch 16
  mobilenet0.25/infer/b16  MobileNet v1 0.25, inference, 16 x 3 x 224 x 224
  lenet/train/b64          a LeNet (Conv 20 5x5, relu, MaxPool 2, Conv 50 5x5,
                           relu, MaxPool 2, Dense 500 relu, Dense 10), forward
                           in training mode + backward with a head gradient
                           of ones, 64 x 1 x 28 x 28

Each framework runs in a worker process of its own, started once and kept
warm, so that MXNet (which needs numpy < 1.24) and PyTorch can live in
different environments: --mx-python and --torch-python name their Python
interpreters (default: the one running this script; PyTorch's CPU build
from PyPI installs with `pip install torch`). This script itself needs
only the standard library. The rounds alternate: in every round each row
is measured once by every framework, the frameworks' order rotating from
round to round, so all of them see the same machine. A cell is the median
over rounds of each round's median over --reps repetitions (after one
warm-up call; every worker warms each model up twice when it builds it).

- simpleop: the MXNet worker exports the Gluon model-zoo nets
  (`resnet18_v1()`, `mobilenet0_25()`, random initialisation, nothing
  downloaded) and the LeNet with hybridize() + export() to a temporary
  directory and writes the input as .npy; then each round runs
  `BIN run MODEL-symbol.json --params MODEL-0000.params --input data=X.npy
  --json --repeat N` (with --train for lenet), which prints one JSON
  object whose forward_ms (and backward_ms) is the median of N runs after
  one warm-up. BIN defaults to target/release/simpleop (build it first:
  `cargo build --release --bin simpleop`); RAYON_NUM_THREADS=2. When the
  binary is missing or fails, the row shows the error and the rest goes on.
- MXNet: the same Gluon nets, hybridized, MXNet's default CPU path
  (oneDNN), OMP_NUM_THREADS=2; inference waits for the output; the
  training step records with autograd (train_mode) and runs backward, the
  input's gradient included, as simpleop's --train computes it.
- PyTorch: the same architectures written here in plain torch.nn (no
  torchvision), torch.set_num_threads(2); inference under torch.no_grad();
  "torch" is the default NCHW layout, "torch_cl" channels_last (model and
  input). The training step computes the input's gradient too.

GFLOP/s: 2 x the multiply-adds of the model's convolutions and dense
layers, counted analytically (flops_* below; pooling, BatchNorm and
activations are not counted), over the time; a training step counts 3 x
the forward (the weight and the data gradient each cost one more
forward's worth). The peak is an ESTIMATE: cores x GHz (/proc/cpuinfo's
current "cpu MHz") x float32 FMA lanes per cycle x 2, with two FMA units
per core of 16 lanes (avx512f) or 8 (avx2), except AMD family 0x19 (Zen 3,
Zen 4), which executes 512-bit FMAs in two halves (2 x 8 lanes). Under a
hypervisor "cpu MHz" is often the base clock: a row above the estimate
means the cores run faster than that (boost).

The machine must be otherwise idle: the meta line records the load
average before and after, and the table warns when it was above 0.5 at
the start. PyTorch's OpenMP threads in particular slow down many times
over when another process holds a core.

--json prints JSON lines instead of the table: first {"meta": {...}} (CPU
model, date, threads, rounds, repetitions, versions, the peak estimate),
then one object per row: {"name", "batch", "gflop" (per call), "ms": {
framework: median ms or null}, "gflops": {framework: GFLOP/s or null},
"per_round": {framework: [ms, ...]}, "errors": {framework: message}}.
--quick runs 1 round of 2 repetitions: it only checks that everything
runs.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

from timing import timed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
THREADS = 2

# name -> (model, batch, training step?, default repetitions)
ROWS = {
    "resnet18_v1/infer/b1": ("resnet18_v1", 1, False, 10),
    "resnet18_v1/infer/b16": ("resnet18_v1", 16, False, 5),
    "mobilenet0.25/infer/b16": ("mobilenet0.25", 16, False, 10),
    "lenet/train/b64": ("lenet", 64, True, 10),
}
FRAMEWORKS = ["simpleop", "mxnet", "torch", "torch_cl"]


# ---------------------------------------------------------------------------
# analytic FLOP counts (2 x multiply-adds of convolutions and dense layers)

def _conv(hw, cin, cout, k, s=1, p=0, groups=1):
    out = (hw + 2 * p - k) // s + 1
    return out, out * out * cout * (cin // groups) * k * k


def macs_resnet18(hw=224, classes=1000):
    hw, total = _conv(hw, 3, 64, 7, 2, 3)
    hw = (hw + 2 - 3) // 2 + 1  # max pool 3x3 stride 2 pad 1
    cin = 64
    for c, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        for block in range(2):
            s = stride if block == 0 else 1
            out, m1 = _conv(hw, cin, c, 3, s, 1)
            _, m2 = _conv(out, c, c, 3, 1, 1)
            total += m1 + m2
            if block == 0 and (s != 1 or cin != c):
                total += _conv(hw, cin, c, 1, s, 0)[1]
            hw, cin = out, c
    return total + 512 * classes


def macs_mobilenet(multiplier=0.25, hw=224, classes=1000):
    hw, total = _conv(hw, 3, int(32 * multiplier), 3, 2, 1)
    dw = [int(x * multiplier) for x in [32, 64] + [128] * 2 + [256] * 2 + [512] * 6 + [1024]]
    pw = [int(x * multiplier) for x in [64] + [128] * 2 + [256] * 2 + [512] * 6 + [1024] * 2]
    strides = [1, 2] * 3 + [1] * 5 + [2, 1]
    for d, c, s in zip(dw, pw, strides):
        hw, m = _conv(hw, d, d, 3, s, 1, groups=d)
        total += m + _conv(hw, d, c, 1)[1]
    return total + pw[-1] * classes


def macs_lenet(hw=28):
    hw, total = _conv(hw, 1, 20, 5)
    hw //= 2
    hw, m = _conv(hw, 20, 50, 5)
    hw //= 2
    return total + m + 50 * hw * hw * 500 + 500 * 10


MACS = {"resnet18_v1": macs_resnet18(), "mobilenet0.25": macs_mobilenet(), "lenet": macs_lenet()}


def gflop(row):
    model, batch, train, _ = ROWS[row]
    return 2 * MACS[model] * batch * (3 if train else 1) / 1e9


# ---------------------------------------------------------------------------
# the machine

def cpuinfo():
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if ":" in line:
                    k, v = (s.strip() for s in line.split(":", 1))
                    info.setdefault(k, v)
    except OSError:
        pass
    return info


def peak_estimate(threads):
    """cores x GHz x f32 FMA lanes per cycle x 2, with its assumptions."""
    info = cpuinfo()
    flags = set(info.get("flags", "").split())
    try:
        ghz = float(info["cpu MHz"]) / 1e3
    except (KeyError, ValueError):
        return None
    cores = min(threads, os.cpu_count() or 1)
    amd_half = info.get("vendor_id") == "AuthenticAMD" and info.get("cpu family") == "25"
    if "avx512f" in flags and not amd_half:
        lanes, isa = 2 * 16, "avx512f, 2 FMA units x 16 lanes"
    elif "avx512f" in flags:
        lanes, isa = 2 * 8, "avx512f executed as 2 x 256 bits (AMD family 0x19), 2 FMA units x 8 lanes"
    elif "avx2" in flags and "fma" in flags:
        lanes, isa = 2 * 8, "avx2+fma, 2 FMA units x 8 lanes"
    else:
        return None
    return {"gflops": cores * ghz * lanes * 2, "cores": cores, "ghz": ghz, "lanes_per_cycle": lanes,
            "assumes": isa, "note": "an estimate, not a measurement"}


# ---------------------------------------------------------------------------
# workers (run under --mx-python / --torch-python)

def mx_models():
    """The Gluon nets, by model name: the model zoo's resnet18_v1 and
    mobilenet0_25 (random initialisation), and the LeNet."""
    from mxnet.gluon import nn
    from mxnet.gluon.model_zoo import vision

    def lenet():
        net = nn.HybridSequential(prefix="lenet_")
        with net.name_scope():
            net.add(nn.Conv2D(20, kernel_size=5, activation="relu"), nn.MaxPool2D(2),
                    nn.Conv2D(50, kernel_size=5, activation="relu"), nn.MaxPool2D(2),
                    nn.Dense(500, activation="relu"), nn.Dense(10))
        return net

    return {"resnet18_v1": vision.resnet18_v1, "mobilenet0.25": vision.mobilenet0_25, "lenet": lenet}


def mx_worker(tmp):
    import numpy as np
    import mxnet as mx
    from mxnet import autograd
    nets = mx_models()
    built = {}
    rng = np.random.default_rng(0)

    def setup(row):
        model, batch, train, _ = ROWS[row]
        hw, ch = (28, 1) if model == "lenet" else (224, 3)
        x = rng.standard_normal((batch, ch, hw, hw)).astype(np.float32)
        net = nets[model]()
        net.initialize(mx.init.Xavier())
        net.hybridize(static_alloc=True, static_shape=True)
        xd = mx.nd.array(x)
        net(xd).wait_to_read()
        stem = os.path.join(tmp, row.replace("/", "_").replace(".", ""))
        net.export(stem, epoch=0)
        np.save(stem + "-input.npy", x)
        if train:
            xd.attach_grad()

            def step():
                with autograd.record(train_mode=True):
                    y = net(xd)
                y.backward()
                mx.nd.waitall()
            fn = step
        else:
            def fn():
                net(xd).wait_to_read()
        fn()
        fn()
        built[row] = fn
        return {"symbol": stem + "-symbol.json", "params": stem + "-0000.params", "input": stem + "-input.npy"}

    meta = {"mxnet": mx.__version__, "numpy": np.__version__, "python": sys.version.split()[0],
            "onednn": mx.runtime.Features().is_enabled("MKLDNN"),
            "MXNET_MKLDNN_ENABLED": os.environ.get("MXNET_MKLDNN_ENABLED", "unset (on)")}
    return meta, setup, built


def torch_models():
    """The PyTorch nets, by model name: the architectures of Gluon's
    resnet18_v1 and mobilenet0_25 and of mx_models' lenet."""
    import torch
    from torch import nn

    def cbr(cin, cout, k, s, p, groups=1):
        return [nn.Conv2d(cin, cout, k, s, p, groups=groups, bias=False), nn.BatchNorm2d(cout),
                nn.ReLU(inplace=True)]

    class BasicBlockV1(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.body = nn.Sequential(*cbr(cin, cout, 3, stride, 1),
                                      nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            r = x if self.downsample is None else self.downsample(x)
            return torch.relu(self.body(x) + r)

    def resnet18_v1(classes=1000):
        layers = cbr(3, 64, 7, 2, 3) + [nn.MaxPool2d(3, 2, 1)]
        cin = 64
        for c, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [BasicBlockV1(cin, c, stride), BasicBlockV1(c, c, 1)]
            cin = c
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes)]
        return nn.Sequential(*layers)

    def mobilenet_v1(multiplier=0.25, classes=1000):
        layers = cbr(3, int(32 * multiplier), 3, 2, 1)
        dw = [int(x * multiplier) for x in [32, 64] + [128] * 2 + [256] * 2 + [512] * 6 + [1024]]
        pw = [int(x * multiplier) for x in [64] + [128] * 2 + [256] * 2 + [512] * 6 + [1024] * 2]
        strides = [1, 2] * 3 + [1] * 5 + [2, 1]
        for d, c, s in zip(dw, pw, strides):
            layers += cbr(d, d, 3, s, 1, groups=d) + cbr(d, c, 1, 1, 0)
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(pw[-1], classes)]
        return nn.Sequential(*layers)

    def lenet():
        return nn.Sequential(nn.Conv2d(1, 20, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(20, 50, 5), nn.ReLU(),
                             nn.MaxPool2d(2), nn.Flatten(), nn.Linear(800, 500), nn.ReLU(), nn.Linear(500, 10))

    return {"resnet18_v1": resnet18_v1, "mobilenet0.25": lambda: mobilenet_v1(0.25), "lenet": lenet}


def torch_worker(tmp):
    import torch
    torch.set_num_threads(THREADS)
    nets = torch_models()
    built = {}
    gen = torch.Generator().manual_seed(0)

    def setup(row, channels_last):
        model, batch, train, _ = ROWS[row]
        hw, ch = (28, 1) if model == "lenet" else (224, 3)
        x = torch.randn(batch, ch, hw, hw, generator=gen)
        net = nets[model]()
        if channels_last:
            net = net.to(memory_format=torch.channels_last)
            x = x.contiguous(memory_format=torch.channels_last)
        if train:
            net.train()
            x.requires_grad_(True)

            def fn():
                net.zero_grad(set_to_none=True)
                x.grad = None
                y = net(x)
                y.backward(torch.ones_like(y))
        else:
            net.eval()

            def fn():
                with torch.no_grad():
                    net(x)
        fn()
        fn()
        built[(row, channels_last)] = fn

    meta = {"torch": torch.__version__, "python": sys.version.split()[0], "threads": torch.get_num_threads(),
            "mkldnn": torch.backends.mkldnn.is_available()}
    return meta, setup, built


def worker(kind, tmp):
    """Answers JSON requests on stdin, one a line: {"setup": row} or
    {"time": row, "reps": n}; replies one JSON line each."""
    out = sys.stdout
    sys.stdout = sys.stderr  # library chatter must not reach the protocol
    try:
        meta, setup, built = (mx_worker if kind == "mxnet" else torch_worker)(tmp)
        reply = {"meta": meta}
    except Exception as e:  # noqa: BLE001
        reply = {"error": f"{type(e).__name__}: {e}"}
    out.write(json.dumps(reply) + "\n")
    out.flush()
    if "error" in reply:
        return
    for line in sys.stdin:
        req = json.loads(line)
        try:
            if "setup" in req:
                if kind == "mxnet":
                    reply = {"files": setup(req["setup"])}
                else:
                    setup(req["setup"], req.get("channels_last", False))
                    reply = {}
            else:
                key = req["time"] if kind == "mxnet" else (req["time"], req.get("channels_last", False))
                ms, samples = timed(built[key], req["reps"])
                reply = {"ms": ms, "all": samples}
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            reply = {"error": f"{type(e).__name__}: {e}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()


# ---------------------------------------------------------------------------
# the driver

class Worker:
    """A worker process; every request returns a dict (with "error" when
    something failed, the process included)."""

    def __init__(self, kind, python, tmp):
        env = dict(os.environ, OMP_NUM_THREADS=str(THREADS), MKL_NUM_THREADS=str(THREADS),
                   MXNET_OMP_MAX_THREADS=str(THREADS), MXNET_STORAGE_FALLBACK_LOG_VERBOSE="0")
        self.kind = kind
        self.log = open(os.path.join(tmp, f"{kind}-worker.log"), "w+")  # noqa: SIM115
        try:
            self.proc = subprocess.Popen([python, os.path.abspath(__file__), "--worker", kind, "--tmp", tmp],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                         text=True, env=env)
            self.hello = self._read()
        except OSError as e:
            self.proc, self.hello = None, {"error": f"cannot start {python}: {e}"}
        self.error = self.hello.get("error")

    def _read(self):
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            self.log.seek(0)
            err = self.log.read().strip().splitlines()
            return {"error": f"{self.kind} worker exited: " + (err[-1] if err else "no message")}
        return json.loads(line)

    def ask(self, req):
        if self.error:
            return {"error": self.error}
        try:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
        except OSError as e:
            self.error = f"{self.kind} worker: {e}"
            return {"error": self.error}
        reply = self._read()
        if "error" in reply and "exited" in reply["error"]:
            self.error = reply["error"]
        return reply

    def close(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if self.proc is not None:
            self.proc.stdout.close()
        self.log.close()


def simpleop_time(binary, files, train, reps, tmp):
    """simpleop's median ms (forward, plus backward with --train), or an
    error message."""
    if not os.path.exists(binary):
        return None, f"{binary} not found (cargo build --release --bin simpleop)"
    cmd = [binary, "run", files["symbol"], "--params", files["params"], "--input", f"data={files['input']}",
           "--json", "--repeat", str(reps), "-o", os.path.join(tmp, "simpleop-out.npy")]
    if train:
        cmd.append("--train")
    env = dict(os.environ, RAYON_NUM_THREADS=str(THREADS))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        msg = [m for m in (p.stderr + p.stdout).splitlines() if m.strip()]
        first = [m for m in msg if "error" in m.lower()] or msg or ["no message"]
        return None, f"exit {p.returncode}: " + " | ".join(first[:3])[:300]
    try:
        r = json.loads(p.stdout.strip().splitlines()[-1])
        ms = r["forward_ms"] + (r["backward_ms"] if train else 0.0)
    except (ValueError, KeyError, IndexError, TypeError) as e:
        return None, f"unreadable output ({e}): {p.stdout[:200]}"
    return ms, None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1 round of 2 repetitions: checks that everything runs")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    ap.add_argument("--reps", type=int, help="repetitions per measurement (default: per row, 5 to 10)")
    ap.add_argument("--json", action="store_true", help="JSON lines instead of the table")
    ap.add_argument("--mx-python", default=sys.executable, help="Python with mxnet 1.9.1 (default: this one)")
    ap.add_argument("--torch-python", default=sys.executable, help="Python with torch (default: this one)")
    ap.add_argument("--simpleop", default=os.path.join(ROOT, "target", "release", "simpleop"),
                    help="the simpleop binary (default: target/release/simpleop)")
    ap.add_argument("--rows", help="comma-separated row names (default: all)")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.reps = 1, 2
    rows = args.rows.split(",") if args.rows else list(ROWS)
    for r in rows:
        if r not in ROWS:
            ap.error(f"unknown row {r} (rows: {', '.join(ROWS)})")
    reps = {r: args.reps or ROWS[r][3] for r in rows}
    log = lambda *a: print(*a, file=sys.stderr, flush=True)  # noqa: E731

    with tempfile.TemporaryDirectory(prefix="simpleop-models-") as tmp:
        log("starting the MXNet and PyTorch workers")
        mxw = Worker("mxnet", args.mx_python, tmp)
        tw = Worker("torch", args.torch_python, tmp)
        errors = {r: {} for r in rows}
        files = {}
        for r in rows:
            log(f"building {r}")
            rep = mxw.ask({"setup": r})
            if "error" in rep:
                errors[r]["mxnet"] = rep["error"]
                errors[r]["simpleop"] = "no export: " + rep["error"]
            else:
                files[r] = rep["files"]
            for cl in (False, True):
                rep = tw.ask({"setup": r, "channels_last": cl})
                if "error" in rep:
                    errors[r]["torch_cl" if cl else "torch"] = rep["error"]
        runs = {r: {f: [] for f in FRAMEWORKS} for r in rows}
        started, load_before = time.time(), os.getloadavg()
        for k in range(args.rounds):
            log(f"round {k + 1}/{args.rounds}")
            order = FRAMEWORKS[k % len(FRAMEWORKS):] + FRAMEWORKS[:k % len(FRAMEWORKS)]
            for r in rows:
                for f in order:
                    if f in errors[r]:
                        continue
                    if f == "simpleop":
                        ms, err = simpleop_time(args.simpleop, files[r], ROWS[r][2], reps[r], tmp)
                    else:
                        w = mxw if f == "mxnet" else tw
                        req = {"time": r, "reps": reps[r]}
                        if f.startswith("torch"):
                            req["channels_last"] = f == "torch_cl"
                        rep = w.ask(req)
                        ms, err = rep.get("ms"), rep.get("error")
                    if err:
                        errors[r][f] = err
                    else:
                        runs[r][f].append(ms)
        mxw.close()
        tw.close()

    meta = {
        "cpu": cpuinfo().get("model name", "unknown"),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "threads": THREADS,
        "isa": os.environ.get("SIMPLEOP_ISA") or "default (the best the CPU has)",
        "rounds": args.rounds,
        "reps": reps,
        "seconds": round(time.time() - started, 1),
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "peak_estimate": peak_estimate(THREADS),
        "mxnet": mxw.hello.get("meta") or {"error": mxw.hello.get("error")},
        "torch": tw.hello.get("meta") or {"error": tw.hello.get("error")},
        "simpleop": os.path.relpath(args.simpleop, ROOT) if args.simpleop.startswith(ROOT) else args.simpleop,
        "macs_per_sample": MACS,
    }
    table = []
    for r in rows:
        ms = {f: (statistics.median(runs[r][f]) if runs[r][f] and f not in errors[r] else None)
              for f in FRAMEWORKS}
        g = gflop(r)
        table.append({"name": r, "batch": ROWS[r][1], "gflop": g, "ms": ms,
                      "gflops": {f: (g / (v / 1e3) if v else None) for f, v in ms.items()},
                      "per_round": {f: runs[r][f] for f in FRAMEWORKS}, "errors": errors[r]})
    if args.json:
        print(json.dumps({"meta": meta}))
        for row in table:
            print(json.dumps(row))
        return
    peak = meta["peak_estimate"]
    print(f"cpu: {meta['cpu']}; threads {THREADS}; {args.rounds} round(s); "
          f"mxnet {meta['mxnet'].get('mxnet', '-')}, torch {meta['torch'].get('torch', '-')}")
    if load_before[0] > 0.5:
        print(f"warning: load average {load_before[0]:.2f} at the start: the machine was not idle")
    if peak:
        print(f"FMA peak estimate (not measured): {peak['gflops']:.0f} GFLOP/s = {peak['cores']} cores x "
              f"{peak['ghz']:.2f} GHz x {peak['lanes_per_cycle']} lanes x 2 ({peak['assumes']})")
    fmt = "{:<24} {:>8}  " + "  ".join(["{:>17}"] * len(FRAMEWORKS))
    print(fmt.format("row (ms, GFLOP/s)", "GFLOP", *FRAMEWORKS))
    for row in table:
        cells = []
        for f in FRAMEWORKS:
            v = row["ms"][f]
            cells.append(f"{v:9.2f} {row['gflops'][f]:6.1f}" if v else ("error" if f in row["errors"] else "-"))
        print(fmt.format(row["name"], f"{row['gflop']:.3f}", *cells))
    for row in table:
        for f, e in row["errors"].items():
            print(f"  {row['name']} {f}: {e}")


if __name__ == "__main__":
    if "--worker" in sys.argv:
        worker(sys.argv[sys.argv.index("--worker") + 1], sys.argv[sys.argv.index("--tmp") + 1])
    else:
        main()
