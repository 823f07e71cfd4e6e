"""Gluon models with multi-output and aux-state ops, exported by Apache MXNet
1.9.1 with `HybridBlock.export`, with their inputs and MXNet's outputs and
gradients, beside gen_dense.py's `mlp` in tests/data/models/:

- bnmlp: Dense(8) -> BatchNorm -> relu -> Dropout(0.5) -> Dense(3), input
  (4, 6). Its expect file has the inference output only: in a training pass
  MXNet's dropout mask is random and cannot be reproduced.
- bnmlp0: the same net and weights (the same parameter names), with the
  Dropout node's p = 0 (a Dropout op, not Gluon's identity for rate 0), so
  training is deterministic. Its expect file adds the training pass:
  "train_output" (batch statistics), "head", "grads", and
  "aux_after_train", the BatchNorm moving statistics after "aux_passes" (2)
  training passes, each a forward and a backward with the same input and
  head (MXNet 1.9.1 updates them in the backward pass).
- concatsplit: Dense(6) -> split into 3 -> Dense(3, tanh) / relu(Dense(3)) /
  the third part as it is -> concat -> Dense(2), input (4, 5).
- tblock: a transformer-style block on token ids (2, 4), vocabulary 10,
  width 8: Embedding -> q, k, v Dense(8, flatten=False) -> batch_dot(q, k^T)
  / sqrt(8) -> softmax -> batch_dot(., v) -> + embedding -> LayerNorm ->
  Dense(5, flatten=False).

Each NAME gets NAME-symbol.json, NAME-0000.params (arg:/aux: names),
NAME-input.npy (float32; the input variable is "data") and NAME-expect.json
laid out as mlp-expect.json: "output" (inference mode, flattened),
"output_shape", "head" and "grads" (each parameter's gradient of
sum(output * head), training mode, flattened).

Usage: python gen_models.py MODEL_DIR [--seed N]
Needs: pip install mxnet==1.9.1 'numpy<1.24'. Deterministic: the weights
come from a seeded NumPy generator.
"""
import json, os, sys
import numpy as np
import mxnet as mx
from mxnet.gluon import nn, HybridBlock


class Weights:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def randn(self, *shape, scale=1.0):
        return (self.rng.standard_normal(shape) * scale).astype(np.float32)

    def fill(self, net):
        """Gives every parameter (and the BatchNorm moving statistics) a
        random value, so that none is at its default."""
        for name, p in sorted(net.collect_params().items()):
            shape = p.shape
            if name.endswith("running_var"):
                v = self.rng.uniform(0.5, 2.0, shape).astype(np.float32)
            elif name.endswith("running_mean"):
                v = self.randn(*shape, scale=0.3)
            elif name.endswith("gamma"):
                v = self.rng.uniform(0.5, 1.5, shape).astype(np.float32)
            elif name.endswith("beta") or name.endswith("bias"):
                v = self.randn(*shape, scale=0.2)
            else:
                v = self.randn(*shape, scale=0.5)
            p.set_data(mx.nd.array(v))


def flat(a):
    return a.asnumpy().ravel().tolist()


class Dropout0(nn.Dropout):
    """nn.Dropout that writes a Dropout node even for rate 0 (Gluon's own
    writes _copy)."""

    def hybrid_forward(self, F, x):
        return F.Dropout(x, p=self._rate, axes=self._axes, name='fwd', cudnn_off=False)


def bnmlp(rate, dropout=nn.Dropout):
    net = nn.HybridSequential(prefix="bnmlp_")
    with net.name_scope():
        net.add(nn.Dense(8))
        net.add(nn.BatchNorm())
        net.add(nn.Activation("relu"))
        net.add(dropout(rate, prefix="dropout0_"))
        net.add(nn.Dense(3))
    return net


class ConcatSplit(HybridBlock):
    def __init__(self, **kw):
        super().__init__(**kw)
        with self.name_scope():
            self.d0 = nn.Dense(6)
            self.da = nn.Dense(3, activation="tanh")
            self.db = nn.Dense(3)
            self.out = nn.Dense(2)

    def hybrid_forward(self, F, x):
        h = self.d0(x)
        a, b, c = F.split(h, num_outputs=3, axis=1)
        cat = F.concat(self.da(a), F.relu(self.db(b)), c, dim=1)
        return self.out(cat)


class TBlock(HybridBlock):
    def __init__(self, vocab=10, width=8, out=5, **kw):
        super().__init__(**kw)
        self.scale = 1.0 / np.sqrt(width)
        with self.name_scope():
            self.emb = nn.Embedding(vocab, width)
            self.q = nn.Dense(width, flatten=False)
            self.k = nn.Dense(width, flatten=False)
            self.v = nn.Dense(width, flatten=False)
            self.ln = nn.LayerNorm()
            self.out = nn.Dense(out, flatten=False)

    def hybrid_forward(self, F, tokens):
        h = self.emb(tokens)
        s = F.batch_dot(self.q(h), self.k(h), transpose_b=True) * self.scale
        o = F.batch_dot(F.softmax(s, axis=-1), self.v(h))
        return self.out(self.ln(o + h))


def expectations(net, x, w, train_passes=0, expect_train=True):
    """MXNet's expectations for `net` (weights already set): its
    inference output; with expect_train also the training-mode gradients
    of sum(output * head) and, when the net has aux states, the aux states
    after `train_passes` training passes."""
    net.hybridize()
    xd = mx.nd.array(x)
    out = net(xd)  # inference mode; builds the graph export writes
    expect = {"output": flat(out), "output_shape": list(out.shape)}
    if expect_train:
        params = {k: p for k, p in net.collect_params().items() if p.grad_req != "null"}
        aux = {k: p for k, p in net.collect_params().items() if p.grad_req == "null"}
        head = w.randn(*out.shape)
        expect["head"] = head.ravel().tolist()
        grads, train_out = None, None
        for _ in range(max(train_passes, 1)):
            with mx.autograd.record(train_mode=True):
                y = net(xd)
                loss = (y * mx.nd.array(head)).sum()
            loss.backward()
            mx.nd.waitall()  # BatchNorm's backward writes the aux states
            if grads is None:
                grads = {k: flat(p.grad()) for k, p in params.items()}
                train_out = y
        expect["grads"] = grads
        if aux:
            expect["train_output"] = flat(train_out)
            expect["aux_passes"] = train_passes
            expect["aux_after_train"] = {k: flat(p.data()) for k, p in aux.items()}
    return expect


def save(net, x, expect, model_dir, name):
    net.export(os.path.join(model_dir, name), epoch=0)
    np.save(os.path.join(model_dir, f"{name}-input.npy"), x)
    with open(os.path.join(model_dir, f"{name}-expect.json"), "w") as f:
        json.dump(expect, f)


def main(model_dir, seed):
    os.makedirs(model_dir, exist_ok=True)
    w = Weights(seed)

    # bnmlp and bnmlp0: the same weights; the export of bnmlp happens before
    # bnmlp0's training passes change the moving statistics.
    x = w.randn(4, 6, scale=2.0) + 0.5
    net = bnmlp(0.5)
    net.initialize()
    net(mx.nd.array(x))  # shapes
    w.fill(net)
    values = {k: p.data().copy() for k, p in net.collect_params().items()}
    save(net, x, expectations(net, x, w, expect_train=False), model_dir, "bnmlp")

    net0 = bnmlp(0.0, dropout=Dropout0)
    net0.initialize()
    net0(mx.nd.array(x))
    for k, p in net0.collect_params().items():
        p.set_data(values[k])
    net0.hybridize()
    net0(mx.nd.array(x))
    net0.export(os.path.join(model_dir, "bnmlp0"), epoch=0)  # before training moves the stats
    expect = expectations(net0, x, w, train_passes=2)
    np.save(os.path.join(model_dir, "bnmlp0-input.npy"), x)
    with open(os.path.join(model_dir, "bnmlp0-expect.json"), "w") as f:
        json.dump(expect, f)

    x = w.randn(4, 5)
    net = ConcatSplit(prefix="concatsplit_")
    net.initialize()
    net(mx.nd.array(x))
    w.fill(net)
    save(net, x, expectations(net, x, w), model_dir, "concatsplit")

    x = w.rng.integers(0, 10, (2, 4)).astype(np.float32)
    net = TBlock(prefix="tblock_")
    net.initialize()
    net(mx.nd.array(x))
    w.fill(net)
    save(net, x, expectations(net, x, w), model_dir, "tblock")


if __name__ == "__main__":
    model_dir = sys.argv[1]
    seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else 36
    main(model_dir, seed)
    print(f"bnmlp, bnmlp0, concatsplit and tblock written to {model_dir}")
