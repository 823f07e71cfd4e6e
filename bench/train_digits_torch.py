#!/usr/bin/env python3
"""The train_digits model in PyTorch, timed against simpleop in one run.

Same data split (first 1,500 rows train, last 297 test, pixels / 16), same
model (64 -> hidden -> softplus -> 10, cross-entropy), same initialisation
scheme (N(0, 1/fan_in) weights, zero biases), same batch (last partial batch
dropped), same optimizer (SGD with momentum 0.9, MXNet's and PyTorch's forms
being equal at a constant learning rate; or Adam), same epochs, 2 threads.
Time per step is the median wall time of one step: gather the batch,
forward, backward, update. The two sides alternate for --rounds rounds in
one run (the machine is shared) and each side's best round is compared.

    python3 bench/train_digits_torch.py            # both, then the ratio
    python3 bench/train_digits_torch.py --torch-only

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


def train_torch(args):
    import torch

    torch.set_num_threads(2)
    torch.manual_seed(args.seed)
    xtr, ytr, xte, yte = load()
    xtr, ytr = torch.from_numpy(xtr), torch.from_numpy(ytr)
    xte, yte = torch.from_numpy(xte), torch.from_numpy(yte)

    model = torch.nn.Sequential(
        torch.nn.Linear(64, args.hidden),
        torch.nn.Softplus(),
        torch.nn.Linear(args.hidden, 10),
    )
    with torch.no_grad():
        for layer in (model[0], model[2]):
            layer.weight.normal_(0.0, (1.0 / layer.in_features) ** 0.5)
            layer.bias.zero_()
    if args.optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = torch.nn.CrossEntropyLoss()

    gen = torch.Generator().manual_seed(args.seed)
    steps = TRAIN_ROWS // args.batch
    times, losses = [], []
    for _ in range(args.epochs):
        order = torch.randperm(TRAIN_ROWS, generator=gen)
        total = 0.0
        for s in range(steps):
            t0 = time.perf_counter()
            idx = order[s * args.batch:(s + 1) * args.batch]
            xb, yb = xtr[idx], ytr[idx]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
            times.append(time.perf_counter() - t0)
            total += loss.item()
        losses.append(total / steps)
    with torch.no_grad():
        acc = (model(xte).argmax(1) == yte).float().mean().item()
    return {
        "test_accuracy": acc,
        "ms_per_step": 1e3 * statistics.median(times),
        "final_loss": losses[-1],
        "steps": len(times),
        "torch": torch.__version__,
    }


def run_simpleop(args):
    cmd = [
        "cargo", "run", "--quiet", "--release", "--example", "train_digits", "--",
        "--json", "--epochs", str(args.epochs), "--batch", str(args.batch),
        "--hidden", str(args.hidden), "--lr", str(args.lr), "--seed", str(args.seed),
        "--optimizer", args.optimizer,
    ]
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--batch", type=int, default=50)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--torch-only", action="store_true")
    args = p.parse_args()

    ours_rounds, theirs_rounds = [], []
    for _ in range(max(1, args.rounds)):
        if not args.torch_only:
            try:
                ours_rounds.append(run_simpleop(args))
            except subprocess.CalledProcessError as e:
                sys.exit(f"simpleop run failed:\n{e.stderr}")
        theirs_rounds.append(train_torch(args))
    best = lambda rounds: min(rounds, key=lambda r: r["ms_per_step"]) if rounds else None
    ours, theirs = best(ours_rounds), best(theirs_rounds)
    print("rounds ms/step: pytorch " + ", ".join(f"{r['ms_per_step']:.4f}" for r in theirs_rounds)
          + ("; simpleop " + ", ".join(f"{r['ms_per_step']:.4f}" for r in ours_rounds) if ours_rounds else ""))

    print(f"config: epochs {args.epochs}, batch {args.batch}, hidden {args.hidden}, "
          f"{args.optimizer} lr {args.lr}, seed {args.seed}, 2 threads")
    print(f"pytorch {theirs['torch']}: {theirs['ms_per_step']:.4f} ms/step, "
          f"test accuracy {theirs['test_accuracy']:.4f}, final loss {theirs['final_loss']:.4f}")
    if ours is not None:
        print(f"simpleop: {ours['ms_per_step']:.4f} ms/step, "
              f"test accuracy {ours['test_accuracy']:.4f}, final loss {ours['final_loss']:.4f}, "
              f"peak {ours['peak_bytes']} bytes")
        ratio = ours["ms_per_step"] / theirs["ms_per_step"]
        print(f"time ratio simpleop / pytorch (best rounds): {ratio:.3f} (target <= 0.5)")
        print(json.dumps({"simpleop": ours, "pytorch": theirs, "ratio": ratio}))


if __name__ == "__main__":
    main()
