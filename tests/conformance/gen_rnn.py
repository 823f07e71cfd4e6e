"""Conformance cases for MXNet's fused RNN op (lstm, gru, rnn_tanh, rnn_relu;
1 and 2 layers, bidirectional, state_outputs, float64, head gradients on the
final states only, grad_req add/null, dropout at inference) and for
_rnn_param_concat packing per-layer weights into RNN's `parameters` as
Gluon's exports do. Written in the format of FORMAT.md with its "Several
outputs, aux states" section; uses gen_multi.py's MultiGen.

Usage: python gen_rnn.py OUT.jsonl [--seed N]
Needs: pip install mxnet==1.9.1 'numpy<1.24'.

Left out on purpose: dropout p > 0 in training (MXNet's mask cannot be
reproduced), projection_size, use_sequence_length and lstm_state_clip_*
(MXNet 1.9.1's CPU kernel ignores the clip; simpleop refuses all three).
"""
import json, os, sys
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import mxnet as mx  # noqa: E402
from gen_mxnet import V  # noqa: E402
from gen_multi import MultiGen  # noqa: E402

F32 = dict(rtol=1e-4, atol=1e-5)
F64 = dict(rtol=1e-9, atol=1e-11)
# MXNet 1.9.1's float64 rnn_relu rounds its outputs to float32 (every
# output value of that case is a float32 value; its gradients are off by
# about 1e-7 relative too): float32-level tolerances for that case only.
F64_RELU = dict(rtol=1e-6, atol=1e-7)


def shorten(node):
    """float32 arrays written with the shortest decimals that round-trip
    to the same float32 (the file stays small); float64 ones untouched."""
    if isinstance(node, dict):
        if node.get("dtype") == "float32" and isinstance(node.get("data"), list):
            node["data"] = [float(repr(np.float32(v))) if not isinstance(v, str) else v
                            for v in node["data"]]
        for v in node.values():
            shorten(v)
    elif isinstance(node, list):
        for v in node:
            shorten(v)


def rnn_sym(mode, **kw):
    args = [V('data'), V('parameters'), V('state')]
    if mode == 'lstm':
        args.append(V('state_cell'))
    return mx.sym.RNN(*args, mode=mode, name='rnn', **kw)


def rnn_inputs(g, sym, mode, t, n, i, dtype=np.float32):
    shapes, _, _ = sym.infer_shape_partial(data=(t, n, i))
    names = sym.list_arguments()
    shapes = dict(zip(names, shapes))
    inputs = {"data": g.randn(t, n, i, dtype=dtype),
              "parameters": g.randn(*shapes["parameters"], scale=0.6, dtype=dtype),
              "state": g.randn(*shapes["state"], scale=0.5, dtype=dtype)}
    if mode == 'lstm':
        inputs["state_cell"] = g.randn(*shapes["state_cell"], scale=0.5, dtype=dtype)
    return inputs


def rnn_cases(g):
    for mode in ('lstm', 'gru', 'rnn_tanh', 'rnn_relu'):
        for name, kw in (("1layer", dict(state_size=2, num_layers=1)),
                         ("bidirectional", dict(state_size=2, num_layers=1, bidirectional=True)),
                         ("2layers/bidirectional/state_outputs",
                          dict(state_size=2, num_layers=2, bidirectional=True, state_outputs=True))):
            if name == "bidirectional" and mode.startswith('rnn_'):
                continue  # the 2-layer bidirectional case stands for it (file size)
            s = rnn_sym(mode, **kw)
            g.case(f"RNN/{mode}/{name}", s, rnn_inputs(g, s, mode, 3, 2, 2), **F32)
        s = rnn_sym(mode, state_size=2, num_layers=2, state_outputs=True)
        g.case(f"RNN/{mode}/float64", s, rnn_inputs(g, s, mode, 3, 2, 2, dtype=np.float64),
               **(F64_RELU if mode == 'rnn_relu' else F64))
        if mode.startswith('rnn_'):
            continue  # the lstm and gru inference cases stand for them
        s = rnn_sym(mode, state_size=2, num_layers=2, state_outputs=True)
        g.case(f"RNN/{mode}/inference", s, rnn_inputs(g, s, mode, 3, 2, 2),
               backward=False, train=False, **F32)
    for mode in ('lstm', 'gru'):
        # head gradients on the final states only: `output` gets none
        s = rnn_sym(mode, state_size=2, num_layers=1, bidirectional=True, state_outputs=True)
        heads = mx.sym.Group([s[k] for k in range(1, len(s.list_outputs()))])
        g.case(f"RNN/{mode}/state_heads_only", heads, rnn_inputs(g, s, mode, 3, 2, 3), **F32)
        s = rnn_sym(mode, state_size=2, num_layers=2, p=0.4, state_outputs=True)
        g.case(f"RNN/{mode}/dropout/inference", s, rnn_inputs(g, s, mode, 3, 2, 3),
               backward=False, train=False, **F32)
        s = rnn_sym(mode, state_size=2, num_layers=1)
        i = rnn_inputs(g, s, mode, 3, 2, 2)
        g.case(f"RNN/{mode}/add", s, i,
               grad_req={k: "add" for k in i},
               grad_init={k: g.randn(*v.shape) for k, v in i.items()}, **F32)
        if mode == 'lstm':
            g.case(f"RNN/{mode}/data_null", s, rnn_inputs(g, s, mode, 3, 2, 2), no_grad=("data",),
                   **F32)


def param_concat_cases(g):
    """Gluon's packing: each weight flattened, then _rnn_param_concat."""
    h, i = 2, 3
    names = ["l0_i2h_weight", "l0_h2h_weight", "l0_i2h_bias", "l0_h2h_bias"]
    shapes = [(4 * h, i), (4 * h, h), (4 * h,), (4 * h,)]
    flat = [mx.sym.reshape(V(nm), shape=(-1,)) for nm in names]
    packed = mx.sym._internal._rnn_param_concat(*flat, num_args=4, dim=0)
    s = mx.sym.RNN(V('data'), packed, V('state'), V('state_cell'), mode='lstm',
                   state_size=h, num_layers=1, state_outputs=True, name='rnn')
    inputs = {"data": g.randn(3, 2, i)}
    inputs.update({nm: g.randn(*sh, scale=0.6) for nm, sh in zip(names, shapes)})
    inputs["state"] = g.randn(1, 2, h)
    inputs["state_cell"] = g.randn(1, 2, h)
    g.case("RNN/lstm/_rnn_param_concat", s, inputs, **F32)
    p = mx.sym._internal._rnn_param_concat(V('a'), V('b'), num_args=2, dim=1)
    g.case("_rnn_param_concat/dim=1", p, {"a": g.randn(2, 3), "b": g.randn(2, 1)})


if __name__ == "__main__":
    out = sys.argv[1]
    seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else 36
    g = MultiGen(seed)
    rnn_cases(g)
    param_concat_cases(g)
    with open(out, "w") as f:
        for case in g.cases:
            shorten(case)
            f.write(json.dumps(case) + "\n")
    print(f"{len(g.cases)} cases written to {out}")
