#!/usr/bin/env python3
"""Cross-validation of the train_digits recipe on the training rows only.

The 1,500 training rows are cut into 5 contiguous blocks of 300 (so that
a held-out block's writers are mostly unseen, like the test rows'); each
block is scored by a model trained on the other 1,200, for each of
--seeds (the training seed is seed * 100 + fold). The model and training
are bench/train_digits_torch.py's recipe (numpy warps, 1 thread, numpy's
generator for the order as well), and every training is evaluated several
ways: with the weights averaged over the last --average-last of the
epochs, and test-time augmentation over the views below. The test rows are
never read.

    python3 bench/train_digits_cv.py                    # the default recipe (3x3 conv x 8), seeds 1, 2
    python3 bench/train_digits_cv.py --conv-channels 0  # the MLP alone, the previous default
    python3 bench/train_digits_cv.py --conv-channels 0 --epochs 300   # the one before
"""

import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_digits_torch import (  # noqa: E402
    TTA_SHIFTS, WeightAverage, add_recipe_args, deskew, load, make_model, shift_images,
    warp_epoch)

# Evaluation: which views' softmax probabilities are averaged.
EVALS = {
    "plain": lambda v: [v["id"]],
    "5 views (image + 4 shifts)": lambda v: v["shifts"],
    "6 views (+ deskewed)": lambda v: v["shifts"] + [v["desk"]],
    "10 views (+ deskewed and its shifts)": lambda v: v["shifts"] + v["desk_shifts"],
}


def train(args, xtr, ytr, xev, seed):
    import numpy as np
    import torch

    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    mean, sd = xtr.mean(0), xtr.std(0) + 0.1
    model = make_model(args)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
    n = len(ytr)
    steps = n // args.batch
    total = steps * args.epochs
    yt = torch.from_numpy(ytr)
    average, t = WeightAverage(args.epochs, args.average_last), 0
    for epoch in range(args.epochs):
        xa = torch.from_numpy(((warp_epoch(xtr, rng, args) - mean) / sd).astype(np.float32))
        order = torch.from_numpy(rng.permutation(n))
        model.train()
        for s in range(steps):
            for group in opt.param_groups:
                group["lr"] = args.lr * 0.5 * (1.0 + math.cos(math.pi * t / total))
            t += 1
            idx = order[s * args.batch:(s + 1) * args.batch]
            opt.zero_grad(set_to_none=True)
            loss_fn(model(xa[idx]), yt[idx]).backward()
            opt.step()
        average.after_epoch(model, epoch)
    model.eval()
    average.load_into(model)
    with torch.no_grad():

        def probs(x):
            return torch.softmax(model(torch.from_numpy(((x - mean) / sd).astype(np.float32))), 1).numpy()

        xd = deskew(xev)
        views = {
            "id": probs(xev),
            "shifts": [probs(shift_images(xev, dx, dy)) for dx, dy in TTA_SHIFTS],
            "desk": probs(xd),
            "desk_shifts": [probs(shift_images(xd, dx, dy)) for dx, dy in TTA_SHIFTS],
        }
    return {name: sum(pick(views)) / len(pick(views)) for name, pick in EVALS.items()}


def main():
    import numpy as np
    import torch

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_recipe_args(p)
    p.add_argument("--seeds", default="1,2")
    args = p.parse_args()
    torch.set_num_threads(1)
    x, y, _, _ = load()
    seeds = [int(s) for s in args.seeds.split(",")]
    scores = {name: [] for name in EVALS}
    start = time.time()
    for fold in range(5):
        held = np.arange(fold * 300, (fold + 1) * 300)
        kept = np.setdiff1d(np.arange(len(y)), held)
        for seed in seeds:
            out = train(args, x[kept], y[kept], x[held], seed * 100 + fold)
            for name, pr in out.items():
                scores[name].append(float((pr.argmax(1) == y[held]).mean()))
        print(f"fold {fold} done, {time.time() - start:.0f} s", file=sys.stderr, flush=True)
    print(f"5-fold CV over contiguous 300-row blocks of the training rows, seeds {seeds}, "
          f"{args.epochs} epochs"
          + (f", conv {args.conv_kernel}x{args.conv_kernel} stride {args.conv_stride} "
             f"{args.conv_padding} x {args.conv_channels} channels"
             f"{' + raw pixels' if args.conv_raw else ''}, hidden {args.hidden}"
             if args.conv_channels else ""))
    for name, v in scores.items():
        print(f"{name:40s} mean {np.mean(v):.4f}  " + " ".join(f"{a:.3f}" for a in v))


if __name__ == "__main__":
    main()
