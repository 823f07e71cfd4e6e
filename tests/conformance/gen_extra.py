"""Conformance cases beyond mxnet-ops.jsonl (gen_mxnet.py), for MXNet behaviours that
users have tripped over (clip's edge cases, where, the comparisons that
Python operators on symbols emit, NaN through relu, maximum and minimum),
and every elementwise, softmax and reduction op at infinities, signed
zeros, NaN, tiny and huge values, and the gradient-stopping ops: run with Apache MXNet 1.9.1, written in the
format of FORMAT.md (this directory).

Usage: python gen_extra.py OUT.jsonl [--seed N]
Needs: pip install mxnet==1.9.1 'numpy<1.24' (a venv keeps numpy 2 for the
benchmarks). Uses gen_mxnet.py's case builder, from this directory.
"""
import json, os, sys
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import mxnet as mx  # noqa: E402
from gen_mxnet import Gen, V  # noqa: E402


def clip_cases(g):
    x = V('x')
    # NaN passes through, and its gradient is the output gradient (MXNet
    # tests the upper bound, then the lower, and compares NaN false)
    data = g.randn(3, 5, scale=2.0)
    data[0, 1] = np.nan
    data[2, 3] = np.nan
    g.case("clip/nan", mx.sym.clip(x, a_min=-1.0, a_max=1.0), {"x": data})
    # bounds the wrong way round: a_max above a_max, a_min at or below it,
    # and a zero gradient everywhere
    data = np.array([[-1.5, -0.5, 0.0, 0.5, 1.5], [-3.0, 0.25, 0.75, 1.0, 2.0]], dtype=np.float32)
    g.case("clip/1,0", mx.sym.clip(x, a_min=1.0, a_max=0.0), {"x": data})
    g.case("clip/float64", mx.sym.clip(x, a_min=-0.5, a_max=0.75),
           {"x": g.randn(4, 6, scale=2.0, dtype=np.float64)})


def where_cases(g):
    c, a, b = V('condition'), V('x'), V('y')
    cond = (g.randn(3, 4) > 0).astype(np.float32)
    cond[0, 0] = 0.5  # any non-zero value picks x
    cond[1, 2] = -2.0
    g.case("where/same_shape", mx.sym.where(c, a, b),
           {"condition": cond, "x": g.randn(3, 4), "y": g.randn(3, 4)},
           no_grad=("condition",))


def comparison_cases(g):
    a, b, x = V('a'), V('b'), V('x')
    # ties on purpose: the relations differ exactly there
    da = np.round(g.randn(3, 4) * 2) / 2
    db = np.round(g.randn(3, 4) * 2) / 2
    da[0, :2] = db[0, :2]
    pair = {"a": da.astype(np.float32), "b": db.astype(np.float32)}
    for name, sym in (("greater", a > b), ("greater_equal", a >= b), ("lesser", a < b),
                      ("lesser_equal", a <= b), ("equal", a == b), ("not_equal", a != b)):
        g.case(f"compare/{name}", sym, pair)
    # the maximum as users write it in MXNet
    g.case("graph/where_greater", mx.sym.where(a > b, a, b), pair)
    dx = (np.round(g.randn(3, 4) * 2) / 2).astype(np.float32)
    dx[1, 1] = 0.5
    for name, sym in (("greater_equal_scalar", x >= 0.5), ("lesser_equal_scalar", x <= 0.5),
                      ("not_equal_scalar", x != 0.5)):
        g.case(f"compare/{name}", sym, {"x": dx})


def nan_cases(g):
    x, a, b = V('x'), V('a'), V('b')
    # NaN propagates through relu, maximum and minimum (from either side);
    # relu's gradient at NaN is NaN, maximum's and minimum's go to neither
    data = g.randn(3, 5, scale=2.0)
    data[0, 1] = np.nan
    data[2, 3] = np.nan
    g.case("relu/nan", mx.sym.relu(x), {"x": data})
    g.case("maximum_scalar/nan", mx.sym.maximum(x, 0.5), {"x": data})
    g.case("minimum_scalar/nan", mx.sym.minimum(x, 0.5), {"x": data})
    da, db = g.randn(3, 5), g.randn(3, 5)
    da[0, 0] = np.nan
    db[1, 2] = np.nan
    da[2, 4] = db[2, 4] = np.nan
    g.case("maximum/nan", mx.sym.maximum(a, b), {"a": da, "b": db})
    g.case("minimum/nan", mx.sym.minimum(a, b), {"a": da, "b": db})
    row = g.randn(1, 5)
    row[0, 3] = np.nan
    g.case("broadcast_maximum/nan", mx.sym.broadcast_maximum(a, b), {"a": da, "b": row})
    g.case("broadcast_minimum/nan", mx.sym.broadcast_minimum(a, b), {"a": da, "b": row})
    # fused into one elementwise group (compiled code on AVX-512)
    big = g.randn(8, 64, scale=2.0)
    big[::3, ::7] = np.nan
    g.case("graph/relu_chain_nan", mx.sym.relu(x * 2.0 + 0.5) * 3.0, {"x": big})


EDGE = [-np.inf, -20.0, -2.0, -1.0, -0.5, -0.0, 0.0, 1e-30, 0.5, 1.0, 2.0, 20.0, 100.0,
        np.inf, np.nan, -1e-30]
UNARY = ['abs', 'sign', 'round', 'ceil', 'floor', 'trunc', 'square', 'sqrt', 'rsqrt', 'cbrt',
         'exp', 'expm1', 'log', 'log1p', 'log2', 'log10', 'sin', 'cos', 'tan', 'arcsin',
         'arccos', 'arctan', 'sinh', 'cosh', 'tanh', 'sigmoid', 'relu', 'softsign', 'negative',
         'reciprocal', 'erf', 'gamma']


def edge_cases(g):
    """Every unary op, seven scalar ops, four binary ops, softmax and the
    reductions at infinities, signed zeros, NaN, tiny and huge values, with
    gradients (edge_more_cases has the rest).

    Left out where simpleop differs from MXNet 1.9.1 (README, "Standard
    ops"): softmax rows holding +inf or NaN (MXNet mixes NaN and numbers
    in the row, here the row is NaN, as in PyTorch); `prod`'s gradient
    where an element is 0, infinite or NaN (MXNet's y / x is NaN there,
    here it is the product of the others, the derivative); `norm`'s
    gradient at a zero vector (MXNet 0 / 0, here 0, as in PyTorch)."""
    x, a, b = V('x'), V('x'), V('y')
    edge = np.array([EDGE], dtype=np.float32)
    for name in UNARY:
        g.case(f"{name}/edge", getattr(mx.sym, name)(x), {"x": edge},
               backward=name != 'gamma')
    for s in (2.0, 0.5, -1.0, 0.0):
        for name, f in (('_plus_scalar', lambda s: x + s), ('_rminus_scalar', lambda s: s - x),
                        ('_mul_scalar', lambda s: x * s), ('_div_scalar', lambda s: x / s),
                        ('_rdiv_scalar', lambda s: s / x), ('_power_scalar', lambda s: x ** s),
                        ('_rpower_scalar', lambda s: s ** x)):
            g.case(f"{name}/edge/scalar={s}", f(s), {"x": edge})
    g.case("smooth_l1/edge", mx.sym.smooth_l1(x, scalar=1.0), {"x": edge})
    lhs = np.array([[-np.inf, -2.0, -1.0, -0.0, 0.0, 0.5, 2.0, np.inf, np.nan, 0.0, -2.0, 3.0]],
                   dtype=np.float32)
    rhs = np.array([[2.0, 0.5, -1.0, 0.0, -0.0, np.inf, -np.inf, 0.0, 1.0, 0.0, 3.0, np.nan]],
                   dtype=np.float32)
    for name, f in (('elemwise_mul', mx.sym.elemwise_mul), ('elemwise_div', mx.sym.elemwise_div),
                    ('_power', mx.sym._internal._power), ('_hypot', mx.sym._internal._hypot)):
        g.case(f"{name}/edge", f(a, b), {"x": lhs, "y": rhs})
    rows = np.array([[-np.inf, 0.0, 1.0, 2.0], [1e30, 1e30, -1e30, 0.0]], dtype=np.float32)
    for name in ('softmax', 'log_softmax'):
        g.case(f"{name}/edge", getattr(mx.sym, name)(x), {"x": rows})
    rows = np.array([[1.0, 2.0, np.inf, -3.0], [-np.inf, 0.5, 1.0, 2.0], [np.nan, 1.0, 2.0, 3.0],
                     [1e30, 1e30, -1e30, 4.0]], dtype=np.float32)
    for name in ('sum', 'mean', 'max', 'min', 'norm'):
        g.case(f"{name}/edge", getattr(mx.sym, name)(x, axis=1), {"x": rows})
    finite = np.array([[1.0, 2.0, -0.5, -3.0], [1e-30, 1e-30, 5.0, 6.0], [1e30, 1e30, -1e30, 4.0]],
                      dtype=np.float32)
    g.case("prod/edge", mx.sym.prod(x, axis=1), {"x": finite})


def nan_selection_cases(g):
    """argmax/argmin, the comparisons and where with NaN, infinities and
    ties; softmax_cross_entropy at huge and infinite logits."""
    x, a, b, c = V('x'), V('a'), V('b'), V('c')
    rows = np.array([[1.0, np.nan, 3.0, 3.0], [2.0, 2.0, -1.0, 0.0],
                     [-np.inf, -np.inf, -5.0, np.inf], [np.nan, np.nan, 1.0, 0.0]], dtype=np.float32)
    for name in ('argmax', 'argmin'):
        g.case(f"{name}/edge", getattr(mx.sym, name)(x, axis=1), {"x": rows}, backward=False)
        g.case(f"{name}/edge/flat", getattr(mx.sym, name)(x), {"x": rows}, backward=False)
    lhs = np.array([[np.nan, 1.0, -0.0, 0.0, np.inf, -np.inf, 2.0, np.nan]], dtype=np.float32)
    rhs = np.array([[1.0, np.nan, 0.0, -0.0, np.inf, np.inf, 2.0, np.nan]], dtype=np.float32)
    for name, sym in (("greater", a > b), ("greater_equal", a >= b), ("lesser", a < b),
                      ("lesser_equal", a <= b), ("equal", a == b), ("not_equal", a != b)):
        g.case(f"compare/{name}/nan", sym, {"a": lhs, "b": rhs})
    for name, sym in (("greater_scalar", x > 0.0), ("greater_equal_scalar", x >= 0.0),
                      ("lesser_scalar", x < 0.0), ("lesser_equal_scalar", x <= 0.0),
                      ("equal_scalar", x == 0.0), ("not_equal_scalar", x != 0.0)):
        g.case(f"compare/{name}/nan", sym, {"x": lhs})
    g.case("where/nan", mx.sym.where(c, a, b), {"c": lhs, "a": rhs, "b": np.ones_like(rhs)},
           no_grad=("c",))
    logits = np.array([[1.0, 2.0, 3.0], [1e30, -1e30, 0.0], [np.inf, 0.0, 1.0]], dtype=np.float32)
    g.case("softmax_cross_entropy/edge",
           mx.sym.softmax_cross_entropy(data=x, label=V('label')),
           {"x": logits, "label": np.array([0, 2, 1], dtype=np.float32)}, no_grad=("label",))


def edge_more_cases(g):
    """The ops edge_cases leaves out: the other scalar ops, the remaining
    same-shape binary ops, every broadcasting arithmetic and extremum op,
    and the reductions (norm with ord 1 too) at ±0, tiny and huge values."""
    x, a, b = V('x'), V('x'), V('y')
    edge = np.array([EDGE], dtype=np.float32)
    for s in (2.0, 0.5, -1.0, 0.0):
        for name, f in (('_minus_scalar', lambda s: x - s),
                        ('_maximum_scalar', lambda s: mx.sym.maximum(x, s)),
                        ('_minimum_scalar', lambda s: mx.sym.minimum(x, s))):
            g.case(f"{name}/edge/scalar={s}", f(s), {"x": edge})
    lhs = np.array([[-np.inf, -2.0, -1.0, -0.0, 0.0, 0.5], [2.0, np.inf, np.nan, 0.0, -2.0, 3.0]],
                   dtype=np.float32)
    rhs = np.array([[2.0, 0.5, -1.0, 0.0, -0.0, np.inf], [-np.inf, 0.0, 1.0, 0.0, 3.0, np.nan]],
                   dtype=np.float32)
    for name, f in (('elemwise_add', mx.sym.elemwise_add), ('elemwise_sub', mx.sym.elemwise_sub),
                    ('_maximum', mx.sym._internal._maximum),
                    ('_minimum', mx.sym._internal._minimum)):
        g.case(f"{name}/edge", f(a, b), {"x": lhs, "y": rhs})
    row = rhs[1:, :]
    for name in ('add', 'sub', 'mul', 'div', 'power', 'maximum', 'minimum'):
        g.case(f"broadcast_{name}/edge", getattr(mx.sym, f"broadcast_{name}")(a, b),
               {"x": lhs, "y": row})
    rows = np.array([[-0.0, 0.0, 1e-30, 100.0], [-1e-30, -0.0, -100.0, 0.5],
                     [np.nan, -0.0, 2.0, -3.0]], dtype=np.float32)
    for name in ('sum', 'mean', 'max', 'min'):
        g.case(f"{name}/edge/zeros", getattr(mx.sym, name)(x, axis=1), {"x": rows})
    g.case("norm/edge/zeros", mx.sym.norm(x, axis=1), {"x": rows[:2] + 1.0})
    g.case("norm/edge/ord=1", mx.sym.norm(x, ord=1, axis=1), {"x": rows})
    g.case("prod/edge/tiny", mx.sym.prod(x, axis=1),
           {"x": np.array([[1e-30, 100.0, -1e-30, 2.0]], dtype=np.float32)})


def gradient_stop_cases(g):
    """BlockGrad (also stop_gradient), zeros_like and ones_like: values pass
    or are constant, and no gradient flows through them, alone and inside
    graphs where the other path's gradient still arrives."""
    x = V('x')
    data = g.randn(3, 4)
    data[0, 0] = np.nan
    for name in ('BlockGrad', 'stop_gradient', 'zeros_like', 'ones_like'):
        g.case(f"{name}", getattr(mx.sym, name)(x), {"x": data})
    data = g.randn(3, 4)
    g.case("BlockGrad/graph", x * mx.sym.BlockGrad(x), {"x": data})
    g.case("stop_gradient/graph", mx.sym.stop_gradient(x * 2.0) + mx.sym.tanh(x), {"x": data})
    g.case("zeros_like/graph", mx.sym.zeros_like(x) + x * x, {"x": data})
    g.case("ones_like/graph", mx.sym.ones_like(x) * mx.sym.exp(x), {"x": data})


if __name__ == "__main__":
    out = sys.argv[1]
    seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else 1
    g = Gen(seed)
    clip_cases(g)
    where_cases(g)
    comparison_cases(g)
    nan_cases(g)
    edge_cases(g)
    nan_selection_cases(g)
    edge_more_cases(g)
    gradient_stop_cases(g)
    with open(out, "w") as f:
        for case in g.cases:
            f.write(json.dumps(case) + "\n")
    print(f"{len(g.cases)} cases written to {out}")
