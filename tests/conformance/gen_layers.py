"""Conformance cases for MXNet's layer, loss-head, indexing, init and ordering
ops (issue 34's single-output ops): Activation, LeakyReLU, SoftmaxOutput, the
regression outputs, Embedding, take, pick, one_hot, SwapAxis, _zeros, _ones,
_full, sort, argsort, InstanceNorm and LayerNorm; forward and gradients with
random head gradients, several attribute settings, float64 and float16 where
MXNet supports them. Run with Apache MXNet 1.9.1, written in the format of
FORMAT.md (this directory).

Usage: python gen_layers.py OUT.jsonl [--seed N]
Needs: pip install mxnet==1.9.1 'numpy<1.24' (a venv keeps numpy 2 for the
benchmarks). Uses gen_mxnet.py's case builder, from this directory.

Left out on purpose (simpleop differs from MXNet 1.9.1, see the README):
LeakyReLU selu's gradient (MXNet's is lambda * (alpha + y) below 0, not the
derivative), elu and leaky with a negative slope on MXNet's non-oneDNN path,
rrelu in training mode (random slopes), SoftmaxOutput with out_grad=True
(MXNet 1.9.1 multiplies by the output instead of the head gradient) and
with 3-D data without multi_output or preserve_shape.
"""
import json, os, sys
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import mxnet as mx  # noqa: E402
from gen_mxnet import Gen, V  # noqa: E402

F16 = dict(rtol=2e-3, atol=2e-3)


def activation_cases(g):
    x = V('x')
    data = g.randn(3, 5, scale=2.0)
    data[0, :3] = [25.0, -25.0, 0.5]  # softrelu's cut-off at 20, saturation
    for act in ('relu', 'sigmoid', 'tanh', 'softrelu', 'softsign'):
        g.case(f"Activation/{act}", mx.sym.Activation(x, act_type=act), {"x": data})
    for act in ('relu', 'softrelu', 'softsign'):
        g.case(f"Activation/{act}/float64", mx.sym.Activation(x, act_type=act),
               {"x": g.randn(3, 4, scale=2.0, dtype=np.float64)})
    for act in ('sigmoid', 'tanh'):
        g.case(f"Activation/{act}/float16", mx.sym.Activation(x, act_type=act),
               {"x": g.randn(3, 4, scale=2.0).astype(np.float16)}, **F16)
    # in a chain, where fusion groups it with its neighbours
    g.case("graph/activation_chain", mx.sym.Activation(x * 2.0 + 1.0, act_type='tanh') * 3.0,
           {"x": g.randn(4, 6)})


def leaky_relu_cases(g):
    x = V('x')
    data = g.randn(3, 5, scale=2.0)
    g.case("LeakyReLU/default", mx.sym.LeakyReLU(x), {"x": data})
    g.case("LeakyReLU/leaky/slope=0.1", mx.sym.LeakyReLU(x, act_type='leaky', slope=0.1), {"x": data})
    g.case("LeakyReLU/elu", mx.sym.LeakyReLU(x, act_type='elu', slope=0.5), {"x": data})
    g.case("LeakyReLU/gelu", mx.sym.LeakyReLU(x, act_type='gelu'), {"x": data})
    g.case("LeakyReLU/selu", mx.sym.LeakyReLU(x, act_type='selu'), {"x": data}, backward=False)
    # selu's gradient where MXNet's is the derivative: x > 0
    g.case("LeakyReLU/selu/positive", mx.sym.LeakyReLU(x, act_type='selu'),
           {"x": np.abs(data) + 0.1})
    # rrelu at inference: slope (lower_bound + upper_bound) / 2; MXNet's
    # rrelu also shows its mask, an output simpleop's single-output op lacks
    g.case("LeakyReLU/rrelu", mx.sym.LeakyReLU(x, act_type='rrelu', lower_bound=0.1, upper_bound=0.3)[0],
           {"x": data}, backward=False)
    g.case("LeakyReLU/leaky/float64", mx.sym.LeakyReLU(x, act_type='leaky', slope=0.2),
           {"x": g.randn(3, 4, scale=2.0, dtype=np.float64)})
    g.case("LeakyReLU/gelu/float64", mx.sym.LeakyReLU(x, act_type='gelu'),
           {"x": g.randn(3, 4, scale=2.0, dtype=np.float64)}, rtol=1e-5, atol=1e-6)
    g.case("LeakyReLU/elu/float16", mx.sym.LeakyReLU(x, act_type='elu', slope=1.0),
           {"x": g.randn(3, 4, scale=2.0).astype(np.float16)}, **F16)


def softmax_output_cases(g):
    x, l = V('x'), V('label')
    no = ("label",)
    data = g.randn(4, 5, scale=2.0)
    lab = np.array([0, 3, 4, 1], dtype=np.float32)
    g.case("SoftmaxOutput/default", mx.sym.SoftmaxOutput(x, l), {"x": data, "label": lab}, no_grad=no)
    g.case("SoftmaxOutput/Softmax", mx.sym.Softmax(x, l), {"x": data, "label": lab}, no_grad=no)
    g.case("SoftmaxOutput/grad_scale/batch",
           mx.sym.SoftmaxOutput(x, l, grad_scale=0.5, normalization='batch'),
           {"x": data, "label": lab}, no_grad=no)
    ign = np.array([0, -1, 4, -1], dtype=np.float32)
    g.case("SoftmaxOutput/use_ignore/valid",
           mx.sym.SoftmaxOutput(x, l, use_ignore=True, ignore_label=-1, normalization='valid'),
           {"x": data, "label": ign}, no_grad=no)
    # without use_ignore, -1 matches no class; valid still does not count it
    g.case("SoftmaxOutput/valid", mx.sym.SoftmaxOutput(x, l, normalization='valid'),
           {"x": data, "label": ign}, no_grad=no)
    # labels are truncated (2.7 -> 2), and one beyond the classes matches none
    g.case("SoftmaxOutput/truncated_labels", mx.sym.SoftmaxOutput(x, l),
           {"x": data, "label": np.array([2.7, 0.2, 7.0, 1.0], dtype=np.float32)}, no_grad=no)
    g.case("SoftmaxOutput/smooth_alpha", mx.sym.SoftmaxOutput(x, l, smooth_alpha=0.1),
           {"x": data, "label": lab}, no_grad=no)
    g.case("SoftmaxOutput/smooth_alpha/use_ignore",
           mx.sym.SoftmaxOutput(x, l, smooth_alpha=0.2, use_ignore=True, ignore_label=3),
           {"x": data, "label": np.array([3, 0, 3, 2], dtype=np.float32)}, no_grad=no)
    d3 = g.randn(2, 3, 4, scale=2.0)
    l3 = np.array([[0, 1, 2, 1], [2, 2, 0, 1]], dtype=np.float32)
    g.case("SoftmaxOutput/multi_output", mx.sym.SoftmaxOutput(x, l, multi_output=True),
           {"x": d3, "label": l3}, no_grad=no)
    l3i = l3.copy()
    l3i[0, 1] = -1
    g.case("SoftmaxOutput/multi_output/ignore/batch",
           mx.sym.SoftmaxOutput(x, l, multi_output=True, use_ignore=True, normalization='batch'),
           {"x": d3, "label": l3i}, no_grad=no)
    g.case("SoftmaxOutput/multi_output/valid",
           mx.sym.SoftmaxOutput(x, l, multi_output=True, use_ignore=True, normalization='valid',
                                grad_scale=2.0),
           {"x": d3, "label": l3i}, no_grad=no)
    g.case("SoftmaxOutput/multi_output/label_n1s",
           mx.sym.SoftmaxOutput(x, l, multi_output=True),
           {"x": d3, "label": l3.reshape(2, 1, 4)}, no_grad=no)
    g.case("SoftmaxOutput/preserve_shape", mx.sym.SoftmaxOutput(x, l, preserve_shape=True),
           {"x": d3, "label": np.array([[0, 3, 1], [2, 2, 0]], dtype=np.float32)}, no_grad=no)
    probs = np.abs(g.randn(4, 5))
    probs = (probs / probs.sum(axis=1, keepdims=True)).astype(np.float32)
    g.case("SoftmaxOutput/probability_labels", mx.sym.SoftmaxOutput(x, l, grad_scale=3.0),
           {"x": data, "label": probs}, no_grad=no)
    g.case("SoftmaxOutput/float64", mx.sym.SoftmaxOutput(x, l, normalization='batch'),
           {"x": data.astype(np.float64), "label": lab.astype(np.float64)}, no_grad=no)
    g.case("SoftmaxOutput/float16", mx.sym.SoftmaxOutput(x, l),
           {"x": data.astype(np.float16), "label": lab.astype(np.float16)}, no_grad=no, **F16)


def regression_cases(g):
    x, l = V('x'), V('label')
    no = ("label",)
    data = g.randn(4, 3)
    lab = g.randn(4, 3)
    lab[1, 1] = data[1, 1]  # MAE's tie: -grad_scale / m
    for name in ('LinearRegressionOutput', 'LogisticRegressionOutput', 'MAERegressionOutput'):
        f = getattr(mx.sym, name)
        g.case(f"{name}", f(x, l), {"x": data, "label": lab}, no_grad=no)
        g.case(f"{name}/grad_scale=2", f(x, l, grad_scale=2.0), {"x": data, "label": lab}, no_grad=no)
        g.case(f"{name}/n1_label_n", f(x, l), {"x": data[:, :1].copy(), "label": lab[:, 0].copy()},
               no_grad=no)
    g.case("LinearRegressionOutput/float64", mx.sym.LinearRegressionOutput(x, l),
           {"x": data.astype(np.float64), "label": lab.astype(np.float64)}, no_grad=no)
    g.case("LogisticRegressionOutput/float16", mx.sym.LogisticRegressionOutput(x, l),
           {"x": data.astype(np.float16), "label": np.abs(lab).astype(np.float16) / 4},
           no_grad=no, **F16)
    # 3-D data: m is label.size / label.shape[0]
    g.case("LinearRegressionOutput/3d", mx.sym.LinearRegressionOutput(x, l, grad_scale=1.5),
           {"x": g.randn(2, 3, 2), "label": g.randn(2, 6)}, no_grad=no)


def embedding_cases(g):
    d, w = V('data'), V('weight')
    idx = np.array([[0, 2, 4], [2, 2.7, 1]], dtype=np.float32)
    weight = g.randn(5, 4)
    sym = mx.sym.Embedding(d, w, input_dim=5, output_dim=4)
    g.case("Embedding", sym, {"data": idx, "weight": weight}, no_grad=("data",))
    # out of range: clipped
    g.case("Embedding/clip", sym, {"data": np.array([7, -1, 3], dtype=np.float32), "weight": weight},
           no_grad=("data",))
    g.case("Embedding/float64", mx.sym.Embedding(d, w, input_dim=5, output_dim=4, dtype='float64'),
           {"data": idx.astype(np.float64), "weight": weight.astype(np.float64)}, no_grad=("data",))
    g.case("Embedding/float16", mx.sym.Embedding(d, w, input_dim=5, output_dim=4, dtype='float16'),
           {"data": idx, "weight": weight.astype(np.float16)}, no_grad=("data",), **F16)
    g.case("Embedding/add", sym, {"data": idx, "weight": weight}, no_grad=("data",),
           grad_req={"weight": "add"}, grad_init={"weight": g.randn(5, 4)})


def take_cases(g):
    a, i = V('a'), V('indices')
    no = ("indices",)
    arr = g.randn(4, 3)
    g.case("take/clip", mx.sym.take(a, i), {"a": arr, "indices": np.array([0, 3, 5, -2, 1, 1], dtype=np.float32)},
           no_grad=no)
    g.case("take/axis=1/wrap", mx.sym.take(a, i, axis=1, mode='wrap'),
           {"a": arr, "indices": np.array([[0, -1], [4, 2]], dtype=np.float32)}, no_grad=no)
    g.case("take/raise", mx.sym.take(a, i, mode='raise'),
           {"a": arr, "indices": np.array([3, 0, 2, 2], dtype=np.float32)}, no_grad=no)
    g.case("take/axis=-1/3d", mx.sym.take(a, i, axis=-1),
           {"a": g.randn(2, 3, 4), "indices": np.array([3, 0, 3], dtype=np.float32)}, no_grad=no)
    g.case("take/axis=1/3d", mx.sym.take(a, i, axis=1),
           {"a": g.randn(2, 3, 4), "indices": np.array([[2, 0], [1, 2]], dtype=np.float32)}, no_grad=no)
    g.case("take/float64", mx.sym.take(a, i),
           {"a": arr.astype(np.float64), "indices": np.array([1, 0, 1], dtype=np.float64)}, no_grad=no)
    g.case("take/float16", mx.sym.take(a, i),
           {"a": arr.astype(np.float16), "indices": np.array([1, 3, 1], dtype=np.float16)}, no_grad=no, **F16)
    g.case("take/int32_indices", mx.sym.take(a, i),
           {"a": arr, "indices": np.array([2, 0, 9], dtype=np.int32)}, no_grad=no)


def pick_cases(g):
    d, i = V('data'), V('index')
    no = ("index",)
    data = g.randn(3, 4)
    g.case("pick/axis=-1", mx.sym.pick(d, i), {"data": data, "index": np.array([0, 3, 9], dtype=np.float32)},
           no_grad=no)
    g.case("pick/axis=0", mx.sym.pick(d, i, axis=0),
           {"data": data, "index": np.array([0, 2, 1, 2], dtype=np.float32)}, no_grad=no)
    g.case("pick/keepdims", mx.sym.pick(d, i, axis=1, keepdims=True),
           {"data": data, "index": np.array([[1], [0], [3]], dtype=np.float32)}, no_grad=no)
    g.case("pick/wrap", mx.sym.pick(d, i, axis=1, mode='wrap'),
           {"data": data, "index": np.array([-1, 5, 2], dtype=np.float32)}, no_grad=no)
    g.case("pick/3d", mx.sym.pick(d, i, axis=1),
           {"data": g.randn(2, 3, 4), "index": np.array([[0, 1, 2, 1], [2, 2, 0, 0]], dtype=np.float32)},
           no_grad=no)
    g.case("pick/float64", mx.sym.pick(d, i),
           {"data": data.astype(np.float64), "index": np.array([1, 2, 3], dtype=np.float64)}, no_grad=no)
    g.case("pick/float16", mx.sym.pick(d, i),
           {"data": data.astype(np.float16), "index": np.array([1, 2, 3], dtype=np.float16)},
           no_grad=no, **F16)


def one_hot_cases(g):
    i = V('indices')
    idx = np.array([[0, 3, 5], [-1, 1.7, 2]], dtype=np.float32)
    g.case("one_hot", mx.sym.one_hot(i, depth=4), {"indices": idx})
    g.case("one_hot/values", mx.sym.one_hot(i, depth=3, on_value=2.5, off_value=-1.0),
           {"indices": idx})
    g.case("one_hot/float64", mx.sym.one_hot(i, depth=4, dtype='float64'), {"indices": idx})
    g.case("one_hot/int32", mx.sym.one_hot(i, depth=4, dtype='int32'), {"indices": idx}, backward=False)
    g.case("graph/one_hot_loss", mx.sym.sum(mx.sym.one_hot(V('label'), depth=5) * mx.sym.log_softmax(V('x'))),
           {"label": np.array([0, 3, 4, 1], dtype=np.float32), "x": g.randn(4, 5)}, no_grad=("label",))


def swapaxis_cases(g):
    x = V('x')
    data = g.randn(2, 3, 4)
    g.case("SwapAxis", mx.sym.SwapAxis(x, dim1=0, dim2=2), {"x": data})
    g.case("swapaxes/negative", mx.sym.swapaxes(x, dim1=1, dim2=-1), {"x": data})
    g.case("SwapAxis/same", mx.sym.SwapAxis(x, dim1=1, dim2=1), {"x": data})
    g.case("SwapAxis/float64", mx.sym.SwapAxis(x, dim1=0, dim2=1), {"x": data.astype(np.float64)})
    g.case("SwapAxis/float16", mx.sym.SwapAxis(x, dim1=0, dim2=1), {"x": data.astype(np.float16)}, **F16)


def init_cases(g):
    x = V('x')
    g.case("_zeros", mx.sym.zeros(shape=(2, 3)), {}, backward=False)
    g.case("_ones/int32", mx.sym.ones(shape=(2, 3), dtype='int32'), {}, backward=False)
    g.case("_full/float16", mx.sym.full(shape=(3,), val=2.5, dtype='float16'), {}, backward=False)
    g.case("_full/float64", mx.sym.full(shape=(2, 2), val=-1.25, dtype='float64'), {}, backward=False)
    g.case("graph/zeros_plus", mx.sym.zeros(shape=(2, 3)) + x * 2.0, {"x": g.randn(2, 3)})
    g.case("graph/ones_times", mx.sym.ones(shape=(2, 3)) * mx.sym.exp(x), {"x": g.randn(2, 3)})
    g.case("graph/full_times", mx.sym.full(shape=(2, 3), val=0.5) * x, {"x": g.randn(2, 3)})


def ordering_cases(g):
    x = V('x')
    data = (np.round(g.randn(3, 5) * 2) / 2).astype(np.float32)  # ties on purpose
    data[0, :3] = [1.0, 1.0, 1.0]
    data[1, 1] = data[1, 3]
    for asc in (True, False):
        g.case(f"sort/is_ascend={asc}", mx.sym.sort(x, axis=-1, is_ascend=asc), {"x": data})
        g.case(f"argsort/is_ascend={asc}", mx.sym.argsort(x, is_ascend=asc), {"x": data})
    g.case("sort/axis=0", mx.sym.sort(x, axis=0), {"x": data})
    g.case("argsort/axis=0/int32", mx.sym.argsort(x, axis=0, dtype='int32'), {"x": data}, backward=False)
    g.case("sort/axis=None", mx.sym.sort(x, axis=None, is_ascend=False), {"x": data[:2, :4].copy()})
    g.case("argsort/axis=None", mx.sym.argsort(x, axis=None), {"x": data[:2, :4].copy()})
    g.case("sort/float64", mx.sym.sort(x, axis=-1), {"x": g.randn(2, 6, dtype=np.float64)})
    # MXNet 1.9.1's CPU sort refuses float16 data; float16 indices are fine
    g.case("argsort/dtype=float16", mx.sym.argsort(x, dtype='float16'), {"x": g.randn(2, 6)},
           backward=False)


def norm_cases(g):
    x, ga, be = V('x'), V('gamma'), V('beta')
    d = g.randn(2, 3, 4, scale=2.0) + 1.0
    gamma, beta = g.randn(3), g.randn(3)
    g.case("InstanceNorm", mx.sym.InstanceNorm(x, ga, be), {"x": d, "gamma": gamma, "beta": beta},
           rtol=1e-4, atol=1e-5)
    g.case("InstanceNorm/eps/4d", mx.sym.InstanceNorm(x, ga, be, eps=0.1),
           {"x": g.randn(2, 2, 2, 3), "gamma": g.randn(2), "beta": g.randn(2)}, rtol=1e-4, atol=1e-5)
    g.case("LayerNorm", mx.sym.LayerNorm(x, ga, be),
           {"x": g.randn(3, 5, scale=2.0), "gamma": g.randn(5), "beta": g.randn(5)}, rtol=1e-4, atol=1e-5)
    g.case("LayerNorm/axis=1", mx.sym.LayerNorm(x, ga, be, axis=1, eps=1e-3),
           {"x": d, "gamma": gamma, "beta": beta}, rtol=1e-4, atol=1e-5)
    g.case("LayerNorm/axis=0", mx.sym.LayerNorm(x, ga, be, axis=0),
           {"x": g.randn(4, 3), "gamma": g.randn(4), "beta": g.randn(4)}, rtol=1e-4, atol=1e-5)
    g.case("LayerNorm/float64", mx.sym.LayerNorm(x, ga, be),
           {"x": g.randn(3, 5, dtype=np.float64), "gamma": g.randn(5, dtype=np.float64),
            "beta": g.randn(5, dtype=np.float64)})
    g.case("LayerNorm/float16", mx.sym.LayerNorm(x, ga, be),
           {"x": g.randn(3, 8).astype(np.float16), "gamma": g.randn(8).astype(np.float16),
            "beta": g.randn(8).astype(np.float16)}, rtol=5e-3, atol=5e-3)


def graph_cases(g):
    """A small classifier built from these ops: Embedding, LayerNorm,
    Activation, a dot, SoftmaxOutput; every weight's gradient."""
    tok, emb, ga, be, w, lab = V('tokens'), V('emb'), V('gamma'), V('beta'), V('w'), V('label')
    h = mx.sym.Embedding(tok, emb, input_dim=6, output_dim=4)         # (3, 4)
    h = mx.sym.LayerNorm(h, ga, be)
    h = mx.sym.Activation(h, act_type='tanh')
    logits = mx.sym.dot(h, w)                                          # (3, 5)
    out = mx.sym.SoftmaxOutput(logits, lab, normalization='batch')
    g.case("graph/embedding_layernorm_softmaxoutput", out,
           {"tokens": np.array([1, 5, 2], dtype=np.float32), "emb": g.randn(6, 4),
            "gamma": g.randn(4), "beta": g.randn(4), "w": g.randn(4, 5),
            "label": np.array([4, 0, 2], dtype=np.float32)},
           no_grad=("tokens", "label"), rtol=1e-4, atol=1e-5)
    x, y = V('x'), V('y')
    g.case("graph/leaky_regression", mx.sym.LinearRegressionOutput(
        mx.sym.LeakyReLU(mx.sym.SwapAxis(x, dim1=0, dim2=1), slope=0.1), y),
        {"x": g.randn(3, 2), "y": g.randn(2, 3)}, no_grad=("y",))


if __name__ == "__main__":
    out = sys.argv[1]
    seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else 34
    g = Gen(seed)
    activation_cases(g)
    leaky_relu_cases(g)
    softmax_output_cases(g)
    regression_cases(g)
    embedding_cases(g)
    take_cases(g)
    pick_cases(g)
    one_hot_cases(g)
    swapaxis_cases(g)
    init_cases(g)
    ordering_cases(g)
    norm_cases(g)
    graph_cases(g)
    with open(out, "w") as f:
        for case in g.cases:
            f.write(json.dumps(case) + "\n")
    print(f"{len(g.cases)} cases written to {out}")
