"""Gluon recurrent layers hybridized and exported by Apache MXNet 1.9.1
with `HybridBlock.export`, in the layout of gen_models.py, into
tests/data/models/: lstm2, an rnn.LSTM (2 layers, bidirectional,
state_size 3, input_size 3), described below, and gru1, an rnn.GRU (1
layer, state_size 3; one state input data1, outputs output and hy) in the
same layout. gru1 is made without input_size, as most Gluon code does: its
i2h weight's `__shape__` hint is then "(9, 0)" (unknown), and binding
needs the weights' shapes besides the data's. lstmz, an rnn.LSTM (1
layer, state_size 3, input_size 3) called without states on a Symbol
(saved with Symbol.save and mx.nd.save): Gluon then makes its initial
states with _zeros of shape (1, 0, 3), 0 = the batch size, unknown; its
only input is data0 and its only output the output.

- lstm2-symbol.json: Gluon's graph: each weight and bias flattened with
  Reshape, packed by _rnn_param_concat, fed to RNN (mode lstm,
  state_outputs) with the initial states as the inputs data1, data2.
- lstm2-0000.params: the weights (arg:lstm0_l0_i2h_weight, ...), random.
- lstm2-expect.json: "inputs" (data0 (T=4, N=2, 3), data1 and data2 (4, 2,
  3)), "outputs" (output, hy, cy in inference mode, flattened, with
  "output_shapes"), "heads" (one per output) and "grads": every parameter's
  and input's gradient of sum(output·head0 + hy·head1 + cy·head2) in a
  training pass (autograd.record; p = 0, so deterministic).

Usage: python gen_rnn_model.py MODEL_DIR [--seed N]
Needs: pip install mxnet==1.9.1 'numpy<1.24'.
"""
import json, os, sys
import numpy as np
import mxnet as mx
from mxnet import autograd
from mxnet.gluon import rnn


def export(net, name, rng, model_dir, with_states=True):
    randn = lambda *s, scale=1.0: (rng.standard_normal(s) * scale).astype(np.float32)  # noqa: E731
    net.initialize()
    net(mx.nd.zeros((4, 2, 3)))  # completes a deferred initialisation
    for _, p in sorted(net.collect_params().items()):
        p.set_data(mx.nd.array(randn(*p.shape, scale=0.5)))
    net.hybridize()
    states = net.begin_state(batch_size=2) if with_states else []
    values = [randn(4, 2, 3)] + [randn(*s.shape, scale=0.5) for s in states]
    names = [f"data{k}" for k in range(len(values))]
    nd = [mx.nd.array(v) for v in values]

    def run():
        if not with_states:  # Gluon makes the states with _zeros
            return [net(nd[0])]
        out, hc = net(nd[0], nd[1:])
        return [out] + list(hc)

    outs = [o.asnumpy() for o in run()]  # inference; builds the exported graph
    if with_states:
        net.export(os.path.join(model_dir, name), epoch=0)
    else:  # a symbolic call, as export does for Symbol inputs: _zeros
        net(mx.sym.var("data0")).save(os.path.join(model_dir, f"{name}-symbol.json"))
        mx.nd.save(os.path.join(model_dir, f"{name}-0000.params"),
                   {f"arg:{k}": p.data() for k, p in net.collect_params().items()})
    heads = [randn(*o.shape) for o in outs]
    for a in nd:
        a.attach_grad()
    with autograd.record():
        trained = run()
    autograd.backward(trained, [mx.nd.array(h) for h in heads])
    flat = lambda a: [float(repr(np.float32(v))) for v in np.asarray(a).ravel()]  # noqa: E731
    grads = {k: flat(p.grad().asnumpy()) for k, p in net.collect_params().items()}
    for k, a in zip(names, nd):
        grads[k] = flat(a.grad.asnumpy())
    expect = {"inputs": {k: {"shape": list(v.shape), "data": flat(v)}
                         for k, v in zip(names, values)},
              "outputs": [flat(o) for o in outs],
              "output_shapes": [list(o.shape) for o in outs],
              "heads": [flat(h) for h in heads],
              "grads": grads}
    with open(os.path.join(model_dir, f"{name}-expect.json"), "w") as f:
        json.dump(expect, f)


def main(model_dir, seed):
    rng = np.random.default_rng(seed)
    lstm = rnn.LSTM(3, num_layers=2, bidirectional=True, input_size=3, prefix="lstm0_")
    export(lstm, "lstm2", rng, model_dir)
    export(rnn.GRU(3, num_layers=1, prefix="gru0_"), "gru1", rng, model_dir)
    lstm = rnn.LSTM(3, num_layers=1, input_size=3, prefix="lstmz_")
    export(lstm, "lstmz", rng, model_dir, with_states=False)


if __name__ == "__main__":
    seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else 37
    main(sys.argv[1], seed)
