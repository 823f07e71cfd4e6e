"""Conformance cases for MXNet's Pooling, UpSampling (nearest) and Pad, run
with Apache MXNet 1.9.1 and written in the format of FORMAT.md (this
directory).

Usage: python gen_pool.py OUT.jsonl [--seed N]
Needs: pip install mxnet==1.9.1 'numpy<1.24'. Uses gen_multi.py's MultiGen
(itself gen_mxnet.py's Gen) and arr, from this directory.

MXNet 1.9.1 behaviours these cases pin down:
- Pooling output sizes: valid 1 + floor((in + 2 pad - k) / s), full
  1 + ceil(...), same (1-D only, no pad) ceil(in / s); global_pool pools
  each whole plane to 1. 'same' needs pad=(0, 0, 0) in MXNet 1.9.1 (its
  shape check reads pad[1] and pad[2], failing on a 1-entry pad), and
  its oneDNN path cannot run 'same' at all ("could not create a descriptor
  for a pooling forward propagation primitive"). This script therefore
  runs MXNet's own CPU kernels (pool.h), MXNET_MKLDNN_ENABLED=0, unless
  the variable is already set. Checked by hand: on the other cases the
  oneDNN build gives the same outputs and gradients (max/avg with full
  and padding, count_include_pad=False, sum, lp), except that it refuses
  pad >= kernel ("Check failed: pad_l[0] < kernel[0]"), the window-in-the-
  padding case "Pooling/max/empty_window_k1_p1", which the CPU kernels run.
- Max pooling ignores the padding (windows are clipped to the input); a
  window holding no input element gives the dtype's lowest finite value
  (-3.4028235e38 for float32) and no gradient. On a tie the gradient goes
  to the FIRST element of the window in row-major order equal to the
  maximum, once per window ("max/ties_*").
- avg divides by the window's size clipped to in + pad (count_include_pad,
  the default) or by its number of input elements (count_include_pad=False).
- lp pooling is (sum x^p)^(1/p) without absolute values (p = 3 keeps the
  sign: cube root of a sum of cubes); its gradient dy * (x / y)^(p - 1).
- UpSampling nearest repeats each element scale x scale times; with several
  inputs each is scaled to the first's output size and they are
  concatenated along channels (or summed, multi_input_mode='sum').
- Pad pads only axes 2.. of 4-D and 5-D data; reflect does not repeat the
  edge (numpy's 'reflect'); the gradient of edge and reflect sums into the
  source elements.

Left out on purpose:
- Pooling with channel-last layouts (NWC, NHWC, NDHWC): refused by
  simpleop; MXNet 1.9.1's CPU path supports them only with oneDNN.
- UpSampling bilinear (a Deconvolution with a weight input): refused.
"""
import json, os, sys
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault("MXNET_MKLDNN_ENABLED", "0")
import mxnet as mx  # noqa: E402
from gen_mxnet import V  # noqa: E402
from gen_multi import MultiGen  # noqa: E402

F64 = dict(rtol=1e-9, atol=1e-11)
F16 = dict(rtol=2e-3, atol=2e-3)


class PoolGen(MultiGen):
    """MultiGen with random values on a 1/16 grid (inputs and head
    gradients), which keeps the file small: they print in a few digits."""

    def randn(self, *shape, scale=1.0, dtype=np.float32):
        return (np.round(self.rng.standard_normal(shape) * scale * 16) / 16).astype(dtype)

    def uniform(self, lo, hi, *shape, dtype=np.float32):
        return (np.round(self.rng.uniform(lo, hi, shape) * 16) / 16).astype(dtype)


def distinct(g, *shape, dtype=np.float32):
    """Values without ties (max pooling's gradient is then unambiguous)."""
    n = int(np.prod(shape))
    v = (g.rng.permutation(n) - n // 2) * 0.25 + 0.125
    return v.reshape(shape).astype(dtype)


def pool(**kw):
    return mx.sym.Pooling(V('x'), **kw)


def max_cases(g):
    x4 = distinct(g, 1, 2, 5, 6)
    g.case("Pooling/max/k2_s2_valid", pool(kernel=(2, 2), stride=(2, 2)), {"x": x4})
    g.case("Pooling/max/k3_s2_p1_valid", pool(kernel=(3, 3), stride=(2, 2), pad=(1, 1)), {"x": x4})
    g.case("Pooling/max/k3_s2_p1_full",
           pool(kernel=(3, 3), stride=(2, 2), pad=(1, 1), pooling_convention='full'), {"x": x4})
    g.case("Pooling/max/k2x3_s1x2_full", pool(kernel=(2, 3), stride=(1, 2), pooling_convention='full'),
           {"x": x4})
    g.case("Pooling/max/1d_k3_s2_p1", pool(kernel=(3,), stride=(2,), pad=(1,)), {"x": distinct(g, 2, 3, 9)})
    g.case("Pooling/max/1d_same_k3_s2", pool(kernel=(3,), stride=(2,), pooling_convention='same', pad=(0, 0, 0)),
           {"x": distinct(g, 1, 2, 9)})
    g.case("Pooling/max/global", pool(kernel=(1, 1), global_pool=True), {"x": distinct(g, 2, 3, 3, 4)})
    # Ties: the first maximum in row-major order of each window gets dy.
    ties = g.rng.integers(0, 3, (1, 2, 4, 5)).astype(np.float32)
    g.case("Pooling/max/ties_k2_s1", pool(kernel=(2, 2)), {"x": ties})
    g.case("Pooling/max/ties_k3_s2_p1_full",
           pool(kernel=(3, 3), stride=(2, 2), pad=(1, 1), pooling_convention='full'), {"x": ties})
    g.case("Pooling/max/ties_constant_1d", pool(kernel=(3,), stride=(1,)),
           {"x": np.ones((1, 1, 5), np.float32)})
    # A window entirely in the padding: lowest float32, no gradient.
    g.case("Pooling/max/empty_window_k1_p1", pool(kernel=(1,), pad=(1,)), {"x": distinct(g, 1, 2, 3)})
    g.case("Pooling/max/f64_k2_s1_p1", pool(kernel=(2, 2), pad=(1, 1)),
           {"x": distinct(g, 1, 2, 4, 3, dtype=np.float64)}, **F64)
    g.case("Pooling/max/grad_add", pool(kernel=(2, 2), stride=(2, 1)), {"x": x4},
           grad_req={"x": "add"}, grad_init={"x": g.randn(*x4.shape)})
    g.case("Pooling/max/3d_k2_s2_p1", pool(kernel=(2, 2, 2), stride=(2, 2, 2), pad=(1, 0, 1)),
           {"x": distinct(g, 1, 2, 3, 4, 3)})


def avg_cases(g):
    x4 = g.randn(1, 2, 5, 6)
    for incl in (True, False):
        for conv in ('valid', 'full'):
            g.case(f"Pooling/avg/k3_s2_p1_{conv}_include_pad={incl}",
                   pool(kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type='avg',
                        pooling_convention=conv, count_include_pad=incl), {"x": x4})
    g.case("Pooling/avg/k2_default", pool(kernel=(2, 2), pool_type='avg'), {"x": x4})
    g.case("Pooling/avg/1d_k3_s2_p1_full_exclude",
           pool(kernel=(3,), stride=(2,), pad=(1,), pool_type='avg', pooling_convention='full',
                count_include_pad=False), {"x": g.randn(2, 2, 8)})
    g.case("Pooling/avg/1d_same_k4_s3", pool(kernel=(4,), stride=(3,), pool_type='avg',
                                              pooling_convention='same', pad=(0, 0, 0)), {"x": g.randn(1, 2, 10)})
    g.case("Pooling/avg/global", pool(kernel=(2, 2), pool_type='avg', global_pool=True), {"x": x4})
    g.case("Pooling/avg/global_1d", pool(kernel=(1,), pool_type='avg', global_pool=True),
           {"x": g.randn(2, 3, 7)})
    g.case("Pooling/avg/f64_k3_s1_p1_exclude",
           pool(kernel=(3, 3), pad=(1, 1), pool_type='avg', count_include_pad=False),
           {"x": g.randn(1, 2, 4, 4, dtype=np.float64)}, **F64)
    g.case("Pooling/avg/grad_add", pool(kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type='avg'),
           {"x": x4}, grad_req={"x": "add"}, grad_init={"x": g.randn(*x4.shape)})
    g.case("Pooling/avg/3d_k2_s1_p1", pool(kernel=(2, 2, 2), pad=(1, 1, 1), pool_type='avg'),
           {"x": g.randn(1, 1, 3, 3, 3)})
    half = np.round(g.randn(1, 2, 4, 4) * 8).astype(np.float16) / np.float16(8)
    g.case("Pooling/avg/f16_k2_s2", pool(kernel=(2, 2), stride=(2, 2), pool_type='avg'),
           {"x": half}, **F16)


def sum_lp_cases(g):
    x4 = g.randn(1, 2, 5, 6)
    g.case("Pooling/sum/k2_s1_p1", pool(kernel=(2, 2), pad=(1, 1), pool_type='sum'), {"x": x4})
    g.case("Pooling/sum/1d_k3_s2_full", pool(kernel=(3,), stride=(2,), pool_type='sum',
                                              pooling_convention='full'), {"x": g.randn(2, 2, 8)})
    g.case("Pooling/sum/global", pool(kernel=(1, 1), pool_type='sum', global_pool=True), {"x": x4})
    pos = g.uniform(0.5, 2.0, 1, 2, 4, 4)
    for p in (1, 2, 3):
        g.case(f"Pooling/lp/p{p}_k2_s2", pool(kernel=(2, 2), stride=(2, 2), pool_type='lp', p_value=p),
               {"x": pos}, rtol=1e-4, atol=1e-5)
    g.case("Pooling/lp/p3_signed_k3_s2_p1",
           pool(kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type='lp', p_value=3),
           {"x": x4}, rtol=1e-4, atol=1e-5)
    g.case("Pooling/lp/p2_1d_k3_s1", pool(kernel=(3,), pool_type='lp', p_value=2),
           {"x": g.randn(2, 2, 6)}, rtol=1e-4, atol=1e-5)
    g.case("Pooling/lp/p2_f64_global", pool(kernel=(1, 1), pool_type='lp', p_value=2, global_pool=True),
           {"x": g.randn(2, 2, 3, 3, dtype=np.float64)}, **F64)


def upsampling_cases(g):
    up = mx.sym.UpSampling
    g.case("UpSampling/nearest_s2", up(V('x'), scale=2, sample_type='nearest'), {"x": g.randn(2, 3, 2, 3)})
    g.case("UpSampling/nearest_s3", up(V('x'), scale=3, sample_type='nearest'), {"x": g.randn(1, 2, 3, 2)})
    g.case("UpSampling/nearest_s1", up(V('x'), scale=1, sample_type='nearest'), {"x": g.randn(1, 2, 2, 2)})
    g.case("UpSampling/nearest_f64", up(V('x'), scale=2, sample_type='nearest'),
           {"x": g.randn(1, 2, 2, 3, dtype=np.float64)}, **F64)
    g.case("UpSampling/nearest_grad_add", up(V('x'), scale=2, sample_type='nearest'),
           {"x": g.randn(1, 2, 2, 2)}, grad_req={"x": "add"}, grad_init={"x": g.randn(1, 2, 2, 2)})
    two = {"a": g.randn(2, 2, 2, 3), "b": g.randn(2, 1, 4, 6)}
    g.case("UpSampling/nearest_two_concat",
           up(V('a'), V('b'), scale=2, sample_type='nearest', num_args=2), two)
    two_sum = {"a": g.randn(1, 2, 2, 2), "b": g.randn(1, 2, 1, 1), "c": g.randn(1, 2, 4, 4)}
    g.case("UpSampling/nearest_three_sum",
           up(V('a'), V('b'), V('c'), scale=2, sample_type='nearest', num_args=3,
              multi_input_mode='sum'), two_sum)


def pad_cases(g):
    pad = lambda **kw: mx.sym.Pad(V('x'), **kw)  # noqa: E731
    x4 = g.randn(1, 2, 3, 4)
    g.case("Pad/constant_4d", pad(mode='constant', pad_width=(0, 0, 0, 0, 1, 2, 2, 1), constant_value=1.5),
           {"x": x4})
    g.case("Pad/constant_4d_zero_default", pad(mode='constant', pad_width=(0, 0, 0, 0, 0, 1, 3, 0)),
           {"x": x4})
    g.case("Pad/edge_4d", pad(mode='edge', pad_width=(0, 0, 0, 0, 2, 1, 1, 3)), {"x": x4})
    g.case("Pad/reflect_4d", pad(mode='reflect', pad_width=(0, 0, 0, 0, 2, 1, 1, 3)), {"x": x4})
    x5 = g.randn(1, 2, 3, 2, 3)
    g.case("Pad/constant_5d", pad(mode='constant', pad_width=(0, 0, 0, 0, 1, 0, 1, 1, 0, 2),
                                  constant_value=-2.0), {"x": x5})
    g.case("Pad/edge_5d", pad(mode='edge', pad_width=(0, 0, 0, 0, 2, 1, 1, 0, 0, 2)), {"x": x5})
    g.case("Pad/reflect_5d", pad(mode='reflect', pad_width=(0, 0, 0, 0, 1, 2, 1, 1, 2, 1)), {"x": x5})
    g.case("Pad/edge_f64", pad(mode='edge', pad_width=(0, 0, 0, 0, 1, 1, 2, 2)),
           {"x": g.randn(1, 1, 2, 3, dtype=np.float64)}, **F64)
    g.case("Pad/reflect_grad_add", pad(mode='reflect', pad_width=(0, 0, 0, 0, 1, 1, 2, 2)),
           {"x": x4}, grad_req={"x": "add"}, grad_init={"x": g.randn(*x4.shape)})


def graph_cases(g):
    x = V('x')
    h = mx.sym.Pooling(mx.sym.Activation(x, act_type='relu'), kernel=(2, 2), stride=(2, 2))
    h = mx.sym.UpSampling(h, scale=2, sample_type='nearest')
    h = mx.sym.Pad(h, mode='edge', pad_width=(0, 0, 0, 0, 1, 1, 1, 1))
    g.case("graph/relu_maxpool_upsample_pad", mx.sym.sum(h * h), {"x": distinct(g, 1, 2, 4, 4)})


if __name__ == "__main__":
    out = sys.argv[1]
    seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else 41
    g = PoolGen(seed)
    max_cases(g)
    avg_cases(g)
    sum_lp_cases(g)
    upsampling_cases(g)
    pad_cases(g)
    graph_cases(g)
    with open(out, "w") as f:
        for case in g.cases:
            f.write(json.dumps(case) + "\n")
    print(f"{len(g.cases)} cases written to {out}")
