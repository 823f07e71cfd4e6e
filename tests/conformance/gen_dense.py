"""MXNet 1.9.1 cases for `FullyConnected` (flatten on and off, dtypes,
`add` requests, fused with a bias-free tail), and a Gluon MLP exported by
`HybridBlock.export` with its inputs and MXNet's outputs and gradients, in
the format of FORMAT.md (this directory).

Usage: python gen_dense.py OUT.jsonl MODEL_DIR [--seed N]
Needs: pip install mxnet==1.9.1 'numpy<1.24'. Uses gen_mxnet.py's case
builder, from this directory. MODEL_DIR receives `mlp-symbol.json`,
`mlp-0000.params`, `mlp-input.npy` and `mlp-expect.json` (the forward
output, and the gradient of `sum(output · head)` for each parameter).
"""
import json, os, sys
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import mxnet as mx  # noqa: E402
from gen_mxnet import Gen, V  # noqa: E402


def fc_cases(g):
    x, w, b = V('x'), V('w'), V('b')
    fc = lambda **kw: mx.sym.FullyConnected(x, w, b, **kw)  # noqa: E731
    g.case("FullyConnected/flatten", fc(num_hidden=4),
           {"x": g.randn(3, 2, 3), "w": g.randn(4, 6), "b": g.randn(4)})
    g.case("FullyConnected/no_flatten", fc(num_hidden=3, flatten=False),
           {"x": g.randn(2, 3, 5), "w": g.randn(3, 5), "b": g.randn(3)})
    g.case("FullyConnected/float64", fc(num_hidden=5),
           {"x": g.randn(4, 7, dtype=np.float64), "w": g.randn(5, 7, dtype=np.float64),
            "b": g.randn(5, dtype=np.float64)})
    g.case("FullyConnected/add", fc(num_hidden=2),
           {"x": g.randn(3, 4), "w": g.randn(2, 4), "b": g.randn(2)},
           grad_req={"x": "add", "w": "add", "b": "add"},
           grad_init={"x": g.randn(3, 4), "w": g.randn(2, 4), "b": g.randn(2)})
    g.case("FullyConnected/relu", mx.sym.relu(fc(num_hidden=6)),
           {"x": g.randn(5, 8), "w": g.randn(6, 8), "b": g.randn(6)})
    g.case("FullyConnected/data_null", fc(num_hidden=3),
           {"x": g.randn(2, 4), "w": g.randn(3, 4), "b": g.randn(3)}, no_grad=("x",))


def mlp_export(g, model_dir):
    """A Gluon MLP, hybridized and exported: Dense layers with their
    activations (relu, tanh) and a plain last layer."""
    from mxnet.gluon import nn
    net = nn.HybridSequential(prefix="mlp_")
    with net.name_scope():
        net.add(nn.Dense(16, activation="relu"))
        net.add(nn.Dense(8, activation="tanh"))
        net.add(nn.Dense(3))
    net.initialize(mx.init.Normal(0.5))
    net.hybridize()
    x = g.randn(4, 12)
    head = g.randn(4, 3)
    xd = mx.nd.array(x)
    params = net.collect_params()
    for p in params.values():
        p.grad_req = "write"
    with mx.autograd.record():
        out = net(xd)
        loss = (out * mx.nd.array(head)).sum()
    loss.backward()
    net.export(os.path.join(model_dir, "mlp"), epoch=0)
    np.save(os.path.join(model_dir, "mlp-input.npy"), x)
    expect = {"output": out.asnumpy().ravel().tolist(), "output_shape": list(out.shape),
              "head": head.ravel().tolist(),
              "grads": {p.name: p.grad().asnumpy().ravel().tolist() for p in params.values()}}
    with open(os.path.join(model_dir, "mlp-expect.json"), "w") as f:
        json.dump(expect, f)


if __name__ == "__main__":
    out, model_dir = sys.argv[1], sys.argv[2]
    seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else 1
    g = Gen(seed)
    fc_cases(g)
    os.makedirs(model_dir, exist_ok=True)
    mlp_export(g, model_dir)
    with open(out, "w") as f:
        for case in g.cases:
            f.write(json.dumps(case) + "\n")
    print(f"{len(g.cases)} cases written to {out}; the MLP export is in {model_dir}")
