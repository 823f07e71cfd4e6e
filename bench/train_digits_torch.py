#!/usr/bin/env python3
"""The train_digits model in PyTorch, timed against simpleop in one run.

Same data split (first 1,500 rows train, last 297 test, pixels / 16), same
recipe: the model (a 3x3 convolution with --conv-channels channels, relu,
then -> hidden -> softplus -> dropout -> 10; see ConvFront), the
initialisation scheme (N(0, 1/fan_in) weights, zero biases), the batch (last
partial batch dropped), the augmentation (each epoch, each training image is
warped with probability --augment-prob by a random affine transform:
rotation, scale, shear, shift about the centre, bilinear, zero outside; the
same formula as the Rust example, drawn from numpy's generator instead of
splitmix64), the per-pixel standardisation ((x - mean) / (sd + 0.1) over the
training rows), label smoothing, the optimizer (SGD with momentum 0.9,
MXNet's and PyTorch's forms being equal at a given learning rate; or Adam)
with the cosine learning-rate decay over the epochs, 2 threads (--threads), and the
evaluation (the mean of the weights at the end of each of the last
--average-last of the epochs; test-time augmentation: softmax probabilities
averaged over the test image and its one-pixel shifts left, right, up and
down, and the deskewed image, unless --no-tta). The evaluation is not timed.
Time per step is the median wall time of one step: gather the batch, set
the learning rate, forward (with dropout), backward, update; as in the Rust
example, each epoch's warping is done before its steps and not timed. The
two sides alternate for --rounds rounds in one run (the machine is shared)
and each side's best round is compared.

    python3 bench/train_digits_torch.py            # both, then the ratio
    python3 bench/train_digits_torch.py --torch-only
    python3 bench/train_digits_torch.py --conv-channels 0   # the MLP alone

--conv-channels C (8, the example's default; 0 is the MLP alone) puts a
convolutional front-end before the MLP, torch's conv2d as the example
runs simpleop's Convolution op (see ConvFront): --conv-kernel k x k
windows (3) at --conv-stride (1), --conv-padding valid|same (zero padding
of the standardised image), relu, flattened channel-major, and --conv-raw
concatenates the 64 pixels to them (other than 3, 1, valid and no raw
pixels: --torch-only).

The simpleop side is `cargo run --release --example train_digits -- --json`
with the same arguments.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "examples", "data", "digits.csv")
TRAIN_ROWS = 1500


def load():
    import numpy as np

    raw = np.loadtxt(DATA, delimiter=",", skiprows=1, dtype=np.float32)
    y = raw[:, 0].astype(np.int64)
    x = raw[:, 1:] / 16.0
    return x[:TRAIN_ROWS], y[:TRAIN_ROWS], x[TRAIN_ROWS:], y[TRAIN_ROWS:]


def bilinear(img, sx, sy):
    """Images img (n x 8 x 8) read bilinearly at source coordinates (sx, sy)
    (n x 8 x 8 each), zero outside: the Rust example's bilinear read.
    Returns n x 64 float32 rows."""
    import numpy as np

    n = img.shape[0]
    x0, y0 = np.floor(sx).astype(int), np.floor(sy).astype(int)
    fx, fy = sx - x0, sy - y0
    pad = np.zeros((n, 10, 10), np.float64)
    pad[:, 1:9, 1:9] = img
    rows = np.arange(n)[:, None, None]

    def at(yi, xi):
        return pad[rows, np.clip(yi + 1, 0, 9), np.clip(xi + 1, 0, 9)]

    out = (at(y0, x0) * (1 - fx) * (1 - fy) + at(y0, x0 + 1) * fx * (1 - fy)
           + at(y0 + 1, x0) * (1 - fx) * fy + at(y0 + 1, x0 + 1) * fx * fy)
    return out.reshape(n, 64).astype(np.float32)


def warp_epoch(x, rng, args):
    """Each row of x (n x 64, 8x8 images) warped with probability
    args.augment_prob: x' = A^-1 (p - c - t) + c sampled bilinearly, with
    A = s R(theta) [[1, sh], [0, 1]], as in the Rust example."""
    import numpy as np

    n = x.shape[0]
    img = x.reshape(n, 8, 8)
    theta = np.deg2rad(rng.uniform(-args.rotate, args.rotate, n))
    s = 1.0 + rng.uniform(-args.scale, args.scale, n)
    sh = rng.uniform(-args.shear, args.shear, n)
    tx = rng.uniform(-args.translate, args.translate, n)
    ty = rng.uniform(-args.translate, args.translate, n)
    c, si = np.cos(theta), np.sin(theta)
    a00, a01, a10, a11 = c * s, (c * sh - si) * s, si * s, (si * sh + c) * s
    det = a00 * a11 - a01 * a10
    i00, i01, i10, i11 = (v[:, None, None] for v in (a11 / det, -a01 / det, -a10 / det, a00 / det))
    yy, xx = np.mgrid[0:8, 0:8].astype(np.float64)
    u = xx[None] - 3.5 - tx[:, None, None]
    v = yy[None] - 3.5 - ty[:, None, None]
    sx = i00 * u + i01 * v + 3.5
    sy = i10 * u + i11 * v + 3.5
    out = bilinear(img, sx, sy)
    keep = rng.uniform(size=n) >= args.augment_prob
    out[keep] = x[keep]
    return out


def shift_images(x, dx, dy):
    """Rows of x (n x 64) shifted by whole pixels, zero filled: the Rust
    example's Affine::shift(dx, dy) (bilinear at integer offsets)."""
    import numpy as np

    img = x.reshape(-1, 8, 8)
    out = np.zeros_like(img)
    ys, yd = (slice(0, 8 - dy), slice(dy, 8)) if dy >= 0 else (slice(-dy, 8), slice(0, 8 + dy))
    xs, xd = (slice(0, 8 - dx), slice(dx, 8)) if dx >= 0 else (slice(-dx, 8), slice(0, 8 + dx))
    out[:, yd, xd] = img[:, ys, xs]
    return out.reshape(-1, 64)


def deskew(x):
    """Rows of x (n x 64) with their slant removed, as the Rust example's
    deskew: with the ink's centroid (cx, cy), vertical variance var_y and
    covariance cov_xy, output pixel (x, y) reads the source bilinearly at
    (x + a (y - cy), y), a = cov_xy / var_y (0 when var_y is ~0), zero
    outside."""
    import numpy as np

    n = x.shape[0]
    img = x.reshape(n, 8, 8).astype(np.float64)
    yy, xx = np.mgrid[0:8, 0:8].astype(np.float64)
    m = img.sum((1, 2)) + 1e-9
    cx = (img * xx).sum((1, 2)) / m
    cy = (img * yy).sum((1, 2)) / m
    dy = yy[None] - cy[:, None, None]
    var_y = (img * dy ** 2).sum((1, 2)) / m
    cov = (img * (xx[None] - cx[:, None, None]) * dy).sum((1, 2)) / m
    a = np.where(var_y > 1e-6, cov / np.maximum(var_y, 1e-6), 0.0)[:, None, None]
    sx = xx[None] + a * dy
    sy = np.broadcast_to(yy[None], (n, 8, 8))
    return bilinear(img, sx, sy)


TTA_SHIFTS = [(0, 0), (1, 0), (-1, 0), (0, 1), (0, -1)]


class ConvFront:
    """Builds the --conv-channels model: conv = relu(conv2d(image, W, b))
    on the standardised (and, in training, warped) 1 x 8 x 8 image (k x k,
    the stride, zero padding (k - 1) // 2 for 'same'), flattened
    channel-major as the example's Reshape does, then -> hidden ->
    softplus -> dropout -> 10 as the MLP (optionally with the 64
    standardised pixels concatenated to the conv features, --conv-raw)."""

    @staticmethod
    def build(args):
        import torch

        k, stride = args.conv_kernel, args.conv_stride
        pad = (k - 1) // 2 if args.conv_padding == "same" else 0
        side = (8 + 2 * pad - k) // stride + 1
        channels = args.conv_channels
        features = side * side * channels + (64 if args.conv_raw else 0)

        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.conv_w = torch.nn.Parameter(torch.empty(channels, 1, k, k).normal_(0.0, (1.0 / (k * k)) ** 0.5))
                self.conv_b = torch.nn.Parameter(torch.zeros(channels))
                self.head = torch.nn.Sequential(
                    torch.nn.Linear(features, args.hidden),
                    torch.nn.Softplus(),
                    torch.nn.Dropout(args.dropout),
                    torch.nn.Linear(args.hidden, 10),
                )
                with torch.no_grad():
                    for layer in (self.head[0], self.head[3]):
                        layer.weight.normal_(0.0, (1.0 / layer.in_features) ** 0.5)
                        layer.bias.zero_()

            def forward(self, x):
                n = x.shape[0]
                img = x.reshape(n, 1, 8, 8)
                conv = torch.nn.functional.conv2d(img, self.conv_w, self.conv_b, stride=stride, padding=pad)
                h = torch.relu(conv).reshape(n, -1)
                if args.conv_raw:
                    h = torch.cat([h, x], 1)
                return self.head(h)

        return Model()


def make_model(args):
    """64 -> hidden -> softplus -> dropout -> 10, weights N(0, 1/fan_in),
    zero biases (draws from torch's global generator); with
    --conv-channels C > 0, a convolutional front-end first (ConvFront)."""
    import torch

    if getattr(args, "conv_channels", 0):
        return ConvFront.build(args)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, args.hidden),
        torch.nn.Softplus(),
        torch.nn.Dropout(args.dropout),
        torch.nn.Linear(args.hidden, 10),
    )
    with torch.no_grad():
        for layer in (model[0], model[3]):
            layer.weight.normal_(0.0, (1.0 / layer.in_features) ** 0.5)
            layer.bias.zero_()
    return model


class WeightAverage:
    """Sums the parameters after each epoch in the last `fraction` of
    `epochs`, and loads their mean into the model (nothing summed, nothing
    loaded). Shared with train_digits_cv.py."""

    def __init__(self, epochs, fraction):
        self.start = epochs * (1.0 - fraction) if fraction > 0 else float("inf")
        self.sum, self.count = None, 0

    def after_epoch(self, model, epoch):
        import torch

        if epoch < self.start:
            return
        with torch.no_grad():
            params = [p.detach().double() for p in model.parameters()]
            self.sum = params if self.sum is None else [a + p for a, p in zip(self.sum, params)]
        self.count += 1

    def load_into(self, model):
        import torch

        if not self.count:
            return
        with torch.no_grad():
            for p, a in zip(model.parameters(), self.sum):
                p.copy_((a / self.count).float())


def add_recipe_args(p):
    """The recipe's options, shared with train_digits_cv.py."""
    p.add_argument("--epochs", type=int, default=600)
    p.add_argument("--batch", type=int, default=50)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--dropout", type=float, default=0.2)
    p.add_argument("--label-smoothing", type=float, default=0.1)
    p.add_argument("--augment-prob", type=float, default=0.5)
    p.add_argument("--rotate", type=float, default=15.0)
    p.add_argument("--scale", type=float, default=0.15)
    p.add_argument("--shear", type=float, default=0.25)
    p.add_argument("--translate", type=float, default=1.0)
    p.add_argument("--average-last", type=float, default=0.2)
    p.add_argument("--conv-channels", type=int, default=8,
                   help="convolutional front-end with this many channels (0: none, the MLP)")
    p.add_argument("--conv-kernel", type=int, default=3)
    p.add_argument("--conv-stride", type=int, default=1)
    p.add_argument("--conv-padding", choices=["valid", "same"], default="valid")
    p.add_argument("--conv-raw", action="store_true",
                   help="concatenate the standardised pixels to the conv features")


def train_torch(args):
    import torch

    import math

    import numpy as np

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    xtr_raw, ytr, xte, yte = load()
    mean, sd = xtr_raw.mean(0), xtr_raw.std(0) + 0.1
    if args.no_standardize:
        mean, sd = 0.0, 1.0
    ytr = torch.from_numpy(ytr)
    shifts = TTA_SHIFTS[:1] if args.no_tta else TTA_SHIFTS
    images = [shift_images(xte, dx, dy) for dx, dy in shifts]
    if not args.no_tta:
        images.append(deskew(xte))
    views = [torch.from_numpy(((v - mean) / sd).astype(np.float32)) for v in images]
    plain_view = views[0]
    yte = torch.from_numpy(yte)

    model = make_model(args)
    if args.optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)

    gen = torch.Generator().manual_seed(args.seed)
    steps = TRAIN_ROWS // args.batch
    total_steps = steps * args.epochs
    times, losses = [], []
    t = 0
    model.train()
    average = WeightAverage(args.epochs, args.average_last)
    for epoch in range(args.epochs):
        order = torch.randperm(TRAIN_ROWS, generator=gen)
        xep = xtr_raw if args.no_augment else warp_epoch(xtr_raw, rng, args)
        xtr = torch.from_numpy(((xep - mean) / sd).astype(np.float32))
        total = 0.0
        for s in range(steps):
            t0 = time.perf_counter()
            lr = args.lr
            if not args.constant_lr:
                lr = args.lr * 0.5 * (1.0 + math.cos(math.pi * t / total_steps))
            for group in opt.param_groups:
                group["lr"] = lr
            t += 1
            idx = order[s * args.batch:(s + 1) * args.batch]
            xb, yb = xtr[idx], ytr[idx]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
            times.append(time.perf_counter() - t0)
            total += loss.item()
        losses.append(total / steps)
        average.after_epoch(model, epoch)
    model.eval()
    average.load_into(model)
    with torch.no_grad():
        probs = sum(torch.softmax(model(v), 1) for v in views) / len(views)
        acc = (probs.argmax(1) == yte).float().mean().item()
        plain = (model(plain_view).argmax(1) == yte).float().mean().item()
    return {
        "test_accuracy": acc,
        "test_accuracy_no_tta": plain,
        "ms_per_step": 1e3 * statistics.median(times),
        "final_loss": losses[-1],
        "steps": len(times),
        "torch": torch.__version__,
    }


def run_simpleop(args, eager=False):
    cmd = [
        "cargo", "run", "--quiet", "--release", "--example", "train_digits", "--",
        "--json", "--epochs", str(args.epochs), "--batch", str(args.batch),
        "--conv-channels", str(args.conv_channels),
        "--hidden", str(args.hidden), "--lr", str(args.lr), "--seed", str(args.seed),
        "--optimizer", args.optimizer, "--dropout", str(args.dropout),
        "--label-smoothing", str(args.label_smoothing),
        "--augment-prob", str(args.augment_prob), "--rotate", str(args.rotate),
        "--scale", str(args.scale), "--shear", str(args.shear),
        "--translate", str(args.translate),
    ] + (["--no-augment"] if args.no_augment else []) \
      + (["--no-standardize"] if args.no_standardize else []) \
      + (["--constant-lr"] if args.constant_lr else []) \
      + (["--no-tta"] if args.no_tta else []) + ["--average-last", str(args.average_last)] \
      + (["--eager"] if eager else [])
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_recipe_args(p)
    p.add_argument("--constant-lr", action="store_true")
    p.add_argument("--no-augment", action="store_true")
    p.add_argument("--no-standardize", action="store_true")
    p.add_argument("--no-tta", action="store_true")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--torch-only", action="store_true")
    p.add_argument("--eager", action="store_true",
                   help="also time simpleop's eager-autograd loop (train_digits --eager)")
    p.add_argument("--threads", type=int, default=2, help="PyTorch's intra-op threads")
    args = p.parse_args()
    if args.conv_channels and not args.torch_only and (
            args.conv_kernel, args.conv_stride, args.conv_padding, args.conv_raw) != (3, 1, "valid", False):
        sys.exit("the simpleop example's convolution is 3x3, stride 1, valid, without raw pixels: "
                 "use --torch-only for other front-ends")

    ours_rounds, eager_rounds, theirs_rounds = [], [], []
    for _ in range(max(1, args.rounds)):
        if not args.torch_only:
            try:
                ours_rounds.append(run_simpleop(args))
                if args.eager:
                    eager_rounds.append(run_simpleop(args, eager=True))
            except subprocess.CalledProcessError as e:
                sys.exit(f"simpleop run failed:\n{e.stderr}")
        theirs_rounds.append(train_torch(args))
    best = lambda rounds: min(rounds, key=lambda r: r["ms_per_step"]) if rounds else None
    ours, theirs = best(ours_rounds), best(theirs_rounds)
    print("rounds ms/step: pytorch " + ", ".join(f"{r['ms_per_step']:.4f}" for r in theirs_rounds)
          + ("; simpleop " + ", ".join(f"{r['ms_per_step']:.4f}" for r in ours_rounds) if ours_rounds else ""))

    print(f"config: epochs {args.epochs}, batch {args.batch}, hidden {args.hidden}, "
          f"{args.optimizer} lr {args.lr}{'' if args.constant_lr else ' cosine'}, "
          f"dropout {args.dropout}, label smoothing {args.label_smoothing}, "
          f"augment {'off' if args.no_augment else args.augment_prob}, "
          f"weights averaged over the last {args.average_last:.0%} of epochs, "
          f"TTA {'off' if args.no_tta else f'{len(TTA_SHIFTS) + 1} views'}, seed {args.seed}, {args.threads} threads"
          + (f", conv {args.conv_kernel}x{args.conv_kernel} stride {args.conv_stride} "
             f"{args.conv_padding} x {args.conv_channels} channels"
             f"{' + raw pixels' if args.conv_raw else ''}" if args.conv_channels else ""))
    print(f"pytorch {theirs['torch']}: {theirs['ms_per_step']:.4f} ms/step, "
          f"test accuracy {theirs['test_accuracy']:.4f}, final loss {theirs['final_loss']:.4f}")
    if ours is not None:
        print(f"simpleop: {ours['ms_per_step']:.4f} ms/step, "
              f"test accuracy {ours['test_accuracy']:.4f}, final loss {ours['final_loss']:.4f}, "
              f"peak {ours['peak_bytes']} bytes")
        ratio = ours["ms_per_step"] / theirs["ms_per_step"]
        print(f"time ratio simpleop / pytorch (best rounds): {ratio:.3f} (target <= 0.5)")
        result = {"simpleop": ours, "pytorch": theirs, "ratio": ratio, "meta": run_meta(args)}
        eager = best(eager_rounds)
        if eager is not None:
            result["simpleop_eager"] = eager
            result["eager_ratio"] = eager["ms_per_step"] / theirs["ms_per_step"]
            rounds = ", ".join(f"{r['ms_per_step']:.4f}" for r in eager_rounds)
            print(f"simpleop eager: {eager['ms_per_step']:.4f} ms/step (rounds {rounds}), "
                  f"test accuracy {eager['test_accuracy']:.4f}; eager / pytorch "
                  f"{result['eager_ratio']:.3f} (target <= 0.5)")
        print(json.dumps(result))


def run_meta(args):
    """The machine and date for bench/results.py (the CPU model from
    /proc/cpuinfo, or "unknown")."""
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name") and ":" in l), cpu)
    except OSError:
        pass
    return {"cpu": cpu, "date": time.strftime("%Y-%m-%d", time.gmtime()), "threads": args.threads,
            "rounds": args.rounds, "epochs": args.epochs, "batch": args.batch,
            "conv_channels": args.conv_channels, "hidden": args.hidden}


if __name__ == "__main__":
    main()
