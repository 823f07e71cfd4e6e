"""Conformance cases for MXNet's Convolution (1-D, 2-D, 3-D) and
Deconvolution (1-D, 2-D), and small graphs with them, run with Apache
MXNet 1.9.1 and written in the format of FORMAT.md (this directory, with
its "Several outputs, aux states" section for the BatchNorm graph).

Usage: python gen_conv.py OUT.jsonl [--seed N]
Needs: pip install mxnet==1.9.1 'numpy<1.24'. Uses gen_pool.py's PoolGen
(itself gen_multi.py's MultiGen and gen_mxnet.py's Gen) with a coarser
grid, and gen_mxnet.py's V, from this directory.

How the file is made: the script runs itself twice, as workers, once with
MXNET_MKLDNN_ENABLED=0 (MXNet's own im2col + gemm kernels, "native") and
once with MXNET_MKLDNN_ENABLED=1 (oneDNN), on the same inputs, and keeps
for each case the run of its preferred path (native unless noted below).
It prints every case where the two disagree, and checks every single-op
case against a float64 NumPy implementation written here from the
definitions (below): a case whose kept result differs from it fails the
run. Inputs, weights, biases and head gradients are multiples of 1/4 and
small, so every product is a multiple of 1/16 and every sum is exact in
float32: outputs and gradients are exact whatever the summation order,
both paths give the same bits, and the numbers print short (float32
values are written with the fewest digits that give the same float32).

Definitions (d = dilate, s = stride, p = pad, k = kernel, per spatial
axis; dk = d (k - 1) + 1, the dilated kernel's extent):
- Convolution: data (N, C, *in), weight (F, C/G, *k), bias (F,) unless
  no_bias (default False). out = floor((in + 2p - dk) / s) + 1; the pad is
  symmetric (p zeros before and after each axis); MXNet refuses
  dk > in + 2p ("kernel size exceed input"). Output channel f is in group
  g = f // (F/G) and reads input channels g C/G .. (g+1) C/G - 1 with
  weight[f]. Depthwise is G = C; with F = 2C ("channel multiplier 2")
  output channels 2c and 2c+1 read input channel c.
- Deconvolution: data (N, C, *in), weight (C, F/G, *k) (input channels
  first), bias (F,) only with no_bias=False (the default is no_bias=True:
  the symbol has no bias argument). It is the transpose of Convolution:
  its forward is Convolution's data gradient, its data gradient is a
  Convolution forward with the same weight. out = s (in - 1) + dk - 2p +
  adj; adj adds rows at the END of each axis (after the symmetric crop of
  p), and MXNet requires adj < s ("adj(y) must be samller than stride").
  Input channel c (group g = c // (C/G)) writes output channels
  g F/G .. (g+1) F/G - 1 with weight[c].
- target_shape (Deconvolution): if ANY entry is non-zero, pad and adj are
  ignored for EVERY axis and recomputed: t = s (in - 1) + dk - target
  (MXNet refuses t < 0, "too big target shape"), adj = t % 2,
  pad = ceil(t / 2) = (t + 1) / 2. The adj < s check still applies to
  that computed adj, so with stride 1 only targets with t even work
  ("Deconvolution/2d/target_shape_stride1"). An entry of 0 next to a
  non-zero one is not "unset": shape inference then gives a 0-sized axis
  (target_shape=(0, 9) on 5x5 gives (N, F, 0, 9)); not recorded.
- Gradients: data and weight gradients are the usual transposes; the bias
  gradient sums the output gradient over every axis but 1. grad_req
  write/add/null are honoured per argument on both paths.

MXNet 1.9.1 behaviours found on the way (the PyPI CPU build, with oneDNN):
- float16: neither path runs Convolution or Deconvolution in float16 on
  CPU ("FP16 gemm on cpu not implemented!", forward and backward, also
  depthwise). The "/float16" cases are therefore MXNet's float32 results
  on float16-representable inputs, each rounded once to float16 (what an
  implementation accumulating in float32 gives), with a loose tolerance
  (1e-2) that also admits float16 accumulation. MXNet itself would
  refuse them.
- The native Deconvolution FORWARD is wrong when an axis has both
  stride > 1 and dilate > 1: the kernel taps land in the wrong places and
  some are lost (1-D, weight (1, 10, 100), one input 1 at position 1,
  s = 2, d = 2: native gives 1, 10, 100 at output positions 3, 5, 6
  instead of 2, 4, 6). Its backward (data and weight gradients) is right,
  and oneDNN's forward agrees with the definition: those cases
  ("..._s2_d2...") are taken from oneDNN. stride 1 with dilate > 1, and
  stride > 1 with dilate 1, agree on both paths.
- oneDNN cannot run Deconvolution with a target_shape smaller than the
  full output, t > 0 above ("could not create a descriptor for a dilated
  deconvolution forward propagation primitive"); those cases come from
  the native path (none of them has an axis with both stride > 1 and
  dilate > 1, where the native forward is wrong).
- Native Deconvolution is 1-D and 2-D only ("Only 1D or 2D Deconvolution
  is natively supported"); oneDNN runs 3-D, not recorded here.
- Convolution: only layouts NCW, NCHW and NCDHW on CPU ("Only support
  NCW, NCHW and NCDHW layout" natively; oneDNN fails to create the
  primitive for NHWC); a 4-D kernel is refused at symbol creation
  ("4D convolution not supported"). layout, workspace, cudnn_tune and
  cudnn_off are accepted and change nothing on CPU.
- pad >= kernel is accepted by both paths (unlike Pooling's oneDNN path):
  the border is bias only ("k1_p1", "k2_p2").
- Everything else recorded here agrees bit for bit between the two paths
  (the BatchNorm graphs within their tolerance).

Left out on purpose:
- Channel-last layouts (NWC, NHWC, NDHWC): MXNet 1.9.1 refuses them on
  CPU, see above.
- 3-D Deconvolution (native refuses it) and float16 as MXNet computes it
  (it does not, on CPU).
- num_filter or channels not divisible by num_group: shape errors.
"""
import ast, json, os, subprocess, sys, tempfile, zlib
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
WORKER = "--worker" in sys.argv
if WORKER:
    os.environ.setdefault("MXNET_STORAGE_FALLBACK_LOG_VERBOSE", "0")
    import mxnet as mx  # noqa: E402
    from gen_mxnet import V  # noqa: E402
    from gen_pool import PoolGen  # noqa: E402
else:
    mx = V = None

F64 = dict(rtol=1e-9, atol=1e-11)
F16 = dict(rtol=1e-2, atol=1e-2)
NORM = dict(rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------
# cases

if WORKER:
    class ConvGen(PoolGen):
        """PoolGen whose cases also carry the path to keep ("prefer") and
        may be float16 from a float32 run ("half"). A case that MXNet
        refuses is recorded as an error, and its head gradients come from
        a generator of its own (seeded by its name), so that both workers
        draw the same inputs for every later case."""

        def __init__(self, seed):
            super().__init__(seed)
            self.seed = seed

        def randn(self, *shape, scale=1.0, dtype=np.float32):
            """Normal values on a 1/4 grid: products are multiples of 1/16
            and print in a few digits."""
            return (np.round(self.rng.standard_normal(shape) * scale * 4) / 4 + 0.0).astype(dtype)

        def case(self, name, sym, inputs, prefer="native", half=False, **kw):
            main = self.rng
            self.rng = np.random.default_rng([self.seed, zlib.crc32(name.encode())])
            n = len(self.cases)
            try:
                super().case(name, sym, inputs, **kw)
                if half:
                    self.cases[-1] = to_half(self.cases[-1])
                self.cases[-1]["_prefer"] = prefer
            except mx.base.MXNetError as e:
                del self.cases[n:]
                msg = [ln for ln in str(e).splitlines() if "Error" in ln or "Check" in ln]
                self.cases.append({"name": name + ("/float16" if half else ""), "_error": msg[:2],
                                   "_prefer": prefer})
            finally:
                self.rng = main


def to_half(c):
    """A float32 case as float16: inputs, head gradients and grad_init are
    float16 values already (checked); outputs and gradients are rounded."""
    def conv(a, exact):
        v = np.array(a["data"], dtype=np.float64)
        h = v.astype(np.float16)
        assert not exact or np.array_equal(h.astype(np.float64), v), c["name"]
        return {"shape": a["shape"], "dtype": "float16", "data": [float(t) for t in h]}
    c = dict(c)
    c["name"] += "/float16"
    c["inputs"] = {k: conv(a, True) for k, a in c["inputs"].items()}
    if "head_grads" in c:
        c["head_grads"] = [conv(a, True) for a in c["head_grads"]]
    if "grad_init" in c:
        c["grad_init"] = {k: conv(a, True) for k, a in c["grad_init"].items()}
    e = dict(c["expect"])
    e["outputs"] = [conv(a, False) for a in e["outputs"]]
    if "grads" in e:
        e["grads"] = {k: conv(a, False) for k, a in e["grads"].items()}
    c["expect"] = e
    c["rtol"], c["atol"] = F16["rtol"], F16["atol"]
    return c


def conv_inputs(g, data, num_filter, kernel, group=1, bias=True, dtype=np.float32, names="xwb"):
    x, w, b = names
    i = {x: g.randn(*data, dtype=dtype),
         w: g.randn(num_filter, data[1] // group, *kernel, scale=0.5, dtype=dtype)}
    if bias:
        i[b] = g.randn(num_filter, scale=0.5, dtype=dtype)
    return i


def deconv_inputs(g, data, num_filter, kernel, group=1, bias=False, dtype=np.float32):
    i = {"x": g.randn(*data, dtype=dtype),
         "w": g.randn(data[1], num_filter // group, *kernel, scale=0.5, dtype=dtype)}
    if bias:
        i["b"] = g.randn(num_filter, scale=0.5, dtype=dtype)
    return i


def conv(bias=True, **kw):
    args = [V('x'), V('w')] + ([V('b')] if bias else [])
    return mx.sym.Convolution(*args, no_bias=not bias, **kw)


def deconv(bias=False, **kw):
    args = [V('x'), V('w')] + ([V('b')] if bias else [])
    return mx.sym.Deconvolution(*args, no_bias=not bias, **kw)


def C(g, name, data, num_filter, kernel, group=1, bias=True, dtype=np.float32, tol=None, **kw):
    """A Convolution case on x, w (and b)."""
    if group != 1:
        kw["num_group"] = group
    i = conv_inputs(g, data, num_filter, kernel, group, bias, dtype)
    case_kw = {k: kw.pop(k) for k in ("grad_req", "grad_init", "no_grad", "backward", "train", "half",
                                      "prefer") if k in kw}
    if callable(case_kw.get("grad_init")):
        case_kw["grad_init"] = case_kw["grad_init"](i)
    g.case(f"Convolution/{name}", conv(bias, kernel=kernel, num_filter=num_filter, **kw), i,
           **(tol or (F64 if dtype == np.float64 else {})), **case_kw)


def D(g, name, data, num_filter, kernel, group=1, bias=False, dtype=np.float32, tol=None, **kw):
    """A Deconvolution case on x, w (and b)."""
    if group != 1:
        kw["num_group"] = group
    i = deconv_inputs(g, data, num_filter, kernel, group, bias, dtype)
    case_kw = {k: kw.pop(k) for k in ("grad_req", "grad_init", "no_grad", "backward", "train", "half",
                                      "prefer") if k in kw}
    if callable(case_kw.get("grad_init")):
        case_kw["grad_init"] = case_kw["grad_init"](i)
    g.case(f"Deconvolution/{name}", deconv(bias, kernel=kernel, num_filter=num_filter, **kw), i,
           **(tol or (F64 if dtype == np.float64 else {})), **case_kw)


def init_like(g, *names):
    """grad_init for `names`, the shapes of the case's inputs."""
    return lambda i: {k: g.randn(*i[k].shape, dtype=i[k].dtype) for k in names}


def conv2d_cases(g):
    C(g, "2d/k1", (2, 3, 4, 4), 2, (1, 1))
    C(g, "2d/k3", (2, 3, 5, 5), 3, (3, 3))
    C(g, "2d/k3_p1", (2, 2, 4, 4), 3, (3, 3), pad=(1, 1))
    C(g, "2d/k5_p2", (2, 2, 5, 5), 2, (5, 5), pad=(2, 2))
    C(g, "2d/k7_s2_p3", (2, 1, 7, 7), 2, (7, 7), stride=(2, 2), pad=(3, 3))
    C(g, "2d/k2x3", (2, 2, 4, 5), 2, (2, 3))
    C(g, "2d/k3x1_s2x1_p1x0", (2, 2, 5, 4), 2, (3, 1), stride=(2, 1), pad=(1, 0))
    C(g, "2d/k3_s2", (2, 2, 5, 5), 2, (3, 3), stride=(2, 2))
    C(g, "2d/k3_s2_p1_even_input", (2, 2, 6, 6), 3, (3, 3), stride=(2, 2), pad=(1, 1))
    C(g, "2d/k3_d2_p2", (2, 2, 5, 5), 2, (3, 3), dilate=(2, 2), pad=(2, 2))
    C(g, "2d/k3x2_s2x1_p1x2_d2x1", (2, 2, 5, 4), 3, (3, 2), stride=(2, 1), pad=(1, 2), dilate=(2, 1))
    C(g, "2d/k2_s3", (2, 2, 7, 5), 2, (2, 2), stride=(3, 3))
    C(g, "2d/k1_s2", (2, 3, 5, 4), 2, (1, 1), stride=(2, 2))
    C(g, "2d/k1_p1", (2, 2, 3, 3), 2, (1, 1), pad=(1, 1))
    C(g, "2d/k2_p2", (1, 2, 3, 4), 2, (2, 2), pad=(2, 2))
    C(g, "2d/k3_whole_input", (2, 3, 3, 3), 2, (3, 3))
    C(g, "2d/k4_s2_p1", (1, 2, 6, 6), 2, (4, 4), stride=(2, 2), pad=(1, 1))
    C(g, "2d/k3x5_s1x2_p0x2_d1x2", (1, 2, 4, 11), 2, (3, 5), stride=(1, 2), pad=(0, 2), dilate=(1, 2))
    C(g, "2d/batch1", (1, 3, 5, 5), 2, (3, 3), pad=(1, 1))
    C(g, "2d/batch4", (4, 2, 4, 4), 2, (3, 3), stride=(2, 2), pad=(1, 1))
    C(g, "2d/no_bias", (2, 3, 4, 4), 3, (3, 3), bias=False, pad=(1, 1))
    C(g, "2d/no_bias_s2", (2, 2, 4, 4), 2, (2, 2), bias=False, stride=(2, 2))
    # group convolution and depthwise
    C(g, "2d/group2", (2, 4, 4, 4), 4, (3, 3), group=2, pad=(1, 1))
    C(g, "2d/group4_k1", (2, 8, 3, 3), 4, (1, 1), group=4)
    C(g, "2d/group2_s2_d2_no_bias", (2, 4, 5, 5), 4, (3, 3), group=2, bias=False, stride=(2, 2),
      dilate=(2, 2), pad=(2, 2))
    C(g, "2d/depthwise_k3_p1", (2, 4, 4, 4), 4, (3, 3), group=4, pad=(1, 1))
    C(g, "2d/depthwise_k3_s2_p1", (2, 4, 5, 5), 4, (3, 3), group=4, stride=(2, 2), pad=(1, 1))
    C(g, "2d/depthwise_multiplier2", (2, 2, 4, 4), 4, (3, 3), group=2, pad=(1, 1))
    C(g, "2d/depthwise_k3_d2_p2", (1, 3, 6, 6), 3, (3, 3), group=3, dilate=(2, 2), pad=(2, 2))
    C(g, "2d/depthwise_k5x3_no_bias", (2, 3, 5, 4), 3, (5, 3), group=3, bias=False, pad=(2, 1))
    # attributes that must be accepted and change nothing
    C(g, "2d/attrs_layout_workspace_cudnn", (2, 2, 4, 4), 2, (3, 3), pad=(1, 1), layout='NCHW',
      workspace=256, cudnn_tune='fastest', cudnn_off=True)
    C(g, "2d/attrs_cudnn_tune_off", (2, 2, 4, 4), 2, (3, 3), cudnn_tune='off', cudnn_off=False,
      workspace=1024)
    C(g, "2d/attrs_limited_workspace_group2", (1, 4, 4, 4), 4, (3, 3), group=2, pad=(1, 1),
      cudnn_tune='limited_workspace', layout='NCHW')
    # grad_req
    C(g, "2d/grad_add", (2, 2, 4, 4), 3, (3, 3), pad=(1, 1),
      grad_req={"x": "add", "w": "add", "b": "add"}, grad_init=init_like(g, "x", "w", "b"))
    C(g, "2d/grad_x_null_w_add_b_write", (2, 2, 5, 5), 2, (3, 3), stride=(2, 2),
      no_grad=("x",), grad_req={"w": "add"}, grad_init=init_like(g, "w"))
    C(g, "2d/grad_w_b_null", (2, 2, 4, 4), 2, (3, 3), pad=(1, 1), no_grad=("w", "b"))
    C(g, "2d/grad_x_add_w_null", (2, 2, 4, 4), 3, (3, 3), bias=False, no_grad=("w",),
      grad_req={"x": "add"}, grad_init=init_like(g, "x"))
    C(g, "2d/depthwise_grad_add", (2, 3, 4, 4), 3, (3, 3), group=3, pad=(1, 1),
      grad_req={"x": "add", "w": "add", "b": "add"}, grad_init=init_like(g, "x", "w", "b"))
    C(g, "2d/group2_grad_w_add", (2, 4, 3, 3), 4, (3, 3), group=2, pad=(1, 1),
      grad_req={"w": "add"}, grad_init=init_like(g, "w"))
    C(g, "2d/inference", (2, 2, 4, 4), 3, (3, 3), pad=(1, 1), backward=False)
    # float64, float16
    C(g, "2d/float64_k3_p1", (2, 2, 4, 4), 3, (3, 3), pad=(1, 1), dtype=np.float64)
    C(g, "2d/float64_group2_s2", (2, 4, 5, 5), 4, (3, 3), group=2, stride=(2, 2), dtype=np.float64)
    C(g, "2d/float64_depthwise_d2", (2, 3, 5, 5), 3, (3, 3), group=3, dilate=(2, 2), pad=(2, 2),
      dtype=np.float64)
    C(g, "2d/k3_p1", (2, 2, 4, 4), 3, (3, 3), pad=(1, 1), half=True)
    C(g, "2d/depthwise_s2_p1", (2, 3, 4, 4), 3, (3, 3), group=3, stride=(2, 2), pad=(1, 1),
      half=True)
    C(g, "2d/k1_no_bias", (2, 4, 3, 3), 3, (1, 1), bias=False, half=True)
    # MXNet's own variable names: conv_weight, conv_bias
    s = mx.sym.Convolution(V('data'), kernel=(3, 3), num_filter=3, pad=(1, 1), name='conv')
    g.case("Convolution/2d/implicit_variables", s,
           conv_inputs(g, (2, 2, 4, 4), 3, (3, 3), names=("data", "conv_weight", "conv_bias")))


def conv1d_cases(g):
    C(g, "1d/k3", (2, 3, 8), 4, (3,))
    C(g, "1d/k1", (2, 4, 6), 3, (1,))
    C(g, "1d/k5_s2_p2", (2, 3, 11), 2, (5,), stride=(2,), pad=(2,))
    C(g, "1d/k3_d2_p2", (2, 2, 9), 3, (3,), dilate=(2,), pad=(2,))
    C(g, "1d/k7_s3_p1", (2, 2, 12), 3, (7,), stride=(3,), pad=(1,))
    C(g, "1d/k2_no_bias", (3, 2, 5), 2, (2,), bias=False)
    C(g, "1d/group2", (2, 4, 7), 4, (3,), group=2, pad=(1,))
    C(g, "1d/depthwise_s2", (2, 4, 9), 4, (3,), group=4, stride=(2,), pad=(1,))
    C(g, "1d/depthwise_multiplier2", (2, 3, 6), 6, (3,), group=3, pad=(1,))
    C(g, "1d/layout_NCW_attrs", (2, 3, 7), 2, (3,), layout='NCW', workspace=64, cudnn_off=True)
    C(g, "1d/grad_add", (2, 3, 6), 2, (3,), pad=(1,),
      grad_req={"x": "add", "w": "add", "b": "add"}, grad_init=init_like(g, "x", "w", "b"))
    C(g, "1d/float64_k3_s2_d2", (2, 3, 10), 3, (3,), stride=(2,), dilate=(2,), pad=(1,),
      dtype=np.float64)
    C(g, "1d/k3_p1", (2, 3, 8), 2, (3,), pad=(1,), half=True)


def conv3d_cases(g):
    C(g, "3d/k3_p1", (2, 2, 3, 3, 3), 2, (3, 3, 3), pad=(1, 1, 1))
    C(g, "3d/k2x3x1_s2x1x1_p1x1x0_d1x1x2", (2, 2, 3, 4, 3), 2, (2, 3, 1), stride=(2, 1, 1),
      pad=(1, 1, 0), dilate=(1, 1, 2))
    C(g, "3d/k2_s2_no_bias", (1, 3, 4, 4, 4), 2, (2, 2, 2), bias=False, stride=(2, 2, 2))
    C(g, "3d/group2_layout_NCDHW", (2, 4, 2, 3, 3), 4, (2, 2, 2), group=2, layout='NCDHW')
    C(g, "3d/depthwise_k3_p1", (1, 3, 3, 3, 4), 3, (3, 3, 3), group=3, pad=(1, 1, 1))
    C(g, "3d/grad_add_w_null", (2, 2, 3, 3, 3), 2, (2, 2, 2), pad=(1, 0, 1),
      no_grad=("w",), grad_req={"x": "add", "b": "add"}, grad_init=init_like(g, "x", "b"))
    C(g, "3d/float64_k2_s2_p1", (2, 2, 3, 3, 3), 2, (2, 2, 2), stride=(2, 2, 2), pad=(1, 1, 1),
      dtype=np.float64)


def deconv2d_cases(g):
    D(g, "2d/k3", (2, 2, 3, 4), 2, (3, 3))
    D(g, "2d/k3_bias", (2, 3, 3, 3), 2, (3, 3), bias=True)
    D(g, "2d/k3_s2_p1", (2, 2, 3, 3), 2, (3, 3), stride=(2, 2), pad=(1, 1))
    D(g, "2d/k3_s2_p1_adj1_bias", (2, 2, 3, 3), 2, (3, 3), bias=True, stride=(2, 2), pad=(1, 1),
      adj=(1, 1))
    D(g, "2d/k4_s2_p1", (2, 2, 3, 3), 2, (4, 4), stride=(2, 2), pad=(1, 1))
    D(g, "2d/k2_s2", (2, 3, 2, 3), 2, (2, 2), stride=(2, 2))
    D(g, "2d/k2x3_s2x3_p0x1_adj1x2", (2, 2, 2, 3), 2, (2, 3), stride=(2, 3), pad=(0, 1), adj=(1, 2))
    D(g, "2d/k1_s3_adj2", (1, 3, 2, 3), 2, (1, 1), stride=(3, 3), adj=(2, 2))
    D(g, "2d/k3_d2", (2, 2, 3, 3), 2, (3, 3), dilate=(2, 2))
    D(g, "2d/k3_d2_p2", (2, 2, 3, 4), 2, (3, 3), dilate=(2, 2), pad=(2, 2), bias=True)
    D(g, "2d/k3_s2_d2", (2, 2, 3, 3), 2, (3, 3), stride=(2, 2), dilate=(2, 2), prefer="onednn")
    D(g, "2d/k3x2_s2x1_p1x1_d2x2_adj1x0", (1, 2, 3, 4), 2, (3, 2), stride=(2, 1), pad=(1, 1),
      dilate=(2, 2), adj=(1, 0), bias=True, prefer="onednn")
    D(g, "2d/k3_p2_crops_to_1x1", (2, 2, 3, 3), 2, (3, 3), pad=(2, 2))
    D(g, "2d/k5_s1_p2", (1, 2, 4, 4), 2, (5, 5), pad=(2, 2))
    D(g, "2d/batch4_k3_s2", (4, 2, 2, 2), 2, (3, 3), stride=(2, 2))
    # target_shape: pad and adj from the target (native only, see above);
    # on 4x4 with s = 2, k = 3 the full output is 9
    for ts, note in (((6, 6), "t3_pad2_adj1"), ((7, 7), "t2_pad1_adj0"), ((8, 8), "t1_pad1_adj1"),
                     ((9, 9), "t0_pad0_adj0")):
        D(g, f"2d/target_shape_{ts[0]}x{ts[1]}_{note}", (1, 2, 4, 4), 2, (3, 3), stride=(2, 2),
          target_shape=ts)
    D(g, "2d/target_shape_ignores_pad_adj", (2, 2, 3, 3), 2, (3, 3), stride=(2, 2), pad=(2, 2),
      adj=(1, 1), target_shape=(6, 5), bias=True)
    D(g, "2d/target_shape_k4x3_s3x2", (1, 2, 3, 4), 2, (4, 3), stride=(3, 2), target_shape=(9, 8))
    D(g, "2d/target_shape_stride1", (2, 2, 4, 4), 2, (3, 3), target_shape=(4, 4))
    D(g, "2d/target_shape_d2", (1, 2, 3, 4), 2, (3, 3), stride=(2, 1), dilate=(1, 2),
      target_shape=(6, 6))
    D(g, "2d/target_shape_group2", (1, 4, 3, 3), 4, (3, 3), group=2, stride=(2, 2),
      target_shape=(6, 6))
    # groups, depthwise
    D(g, "2d/group2", (2, 4, 3, 3), 4, (3, 3), group=2, stride=(2, 2), pad=(1, 1))
    D(g, "2d/group2_bias_k2_s2", (2, 4, 2, 3), 4, (2, 2), group=2, stride=(2, 2), bias=True)
    D(g, "2d/depthwise_k3_s2_p1_adj1", (2, 3, 3, 3), 3, (3, 3), group=3, stride=(2, 2), pad=(1, 1),
      adj=(1, 1))
    D(g, "2d/depthwise_multiplier2_k4_s2_p1", (1, 2, 3, 3), 4, (4, 4), group=2, stride=(2, 2),
      pad=(1, 1), bias=True)
    # attributes, grad_req, dtypes, implicit names
    D(g, "2d/attrs_layout_workspace_cudnn", (2, 2, 3, 3), 2, (3, 3), stride=(2, 2), layout='NCHW',
      workspace=128, cudnn_tune='limited_workspace', cudnn_off=True)
    D(g, "2d/grad_add", (2, 2, 3, 3), 2, (3, 3), stride=(2, 2), pad=(1, 1), bias=True,
      grad_req={"x": "add", "w": "add", "b": "add"}, grad_init=init_like(g, "x", "w", "b"))
    D(g, "2d/grad_x_null_w_add", (2, 3, 3, 3), 2, (3, 3), stride=(2, 2), no_grad=("x",),
      grad_req={"w": "add"}, grad_init=init_like(g, "w"))
    D(g, "2d/grad_w_null_b_add", (2, 2, 3, 3), 2, (2, 2), stride=(2, 2), bias=True, no_grad=("w",),
      grad_req={"b": "add"}, grad_init=init_like(g, "b"))
    D(g, "2d/inference", (2, 3, 3, 3), 2, (3, 3), stride=(2, 2), pad=(1, 1), adj=(1, 1),
      backward=False)
    D(g, "2d/float64_k3_s2_p1_adj1", (2, 2, 3, 3), 2, (3, 3), stride=(2, 2), pad=(1, 1),
      adj=(1, 0), dtype=np.float64)
    D(g, "2d/float64_group2_bias", (1, 4, 2, 2), 4, (3, 3), group=2, stride=(2, 2), bias=True,
      dtype=np.float64)
    D(g, "2d/k4_s2_p1", (2, 2, 3, 3), 2, (4, 4), stride=(2, 2), pad=(1, 1), half=True)
    # MXNet's own names: up_weight, and no bias argument (no_bias defaults to True)
    s = mx.sym.Deconvolution(V('data'), kernel=(2, 2), stride=(2, 2), num_filter=2, name='up')
    g.case("Deconvolution/2d/implicit_variables_default_no_bias", s,
           {"data": g.randn(2, 3, 2, 3), "up_weight": g.randn(3, 2, 2, 2, scale=0.5)})


def deconv1d_cases(g):
    D(g, "1d/k3", (2, 3, 5), 2, (3,))
    D(g, "1d/k3_s2_p1_adj1", (2, 3, 5), 2, (3,), stride=(2,), pad=(1,), adj=(1,))
    D(g, "1d/k4_s2_bias", (2, 2, 4), 3, (4,), stride=(2,), bias=True)
    D(g, "1d/k3_d3_p1", (2, 2, 5), 2, (3,), dilate=(3,), pad=(1,))
    D(g, "1d/k3_s2_d2", (2, 2, 4), 2, (3,), stride=(2,), dilate=(2,), prefer="onednn")
    D(g, "1d/target_shape_12", (2, 2, 4), 2, (4,), stride=(3,), target_shape=(12,))
    D(g, "1d/target_shape_9_bias", (2, 2, 4), 3, (3,), stride=(2,), target_shape=(9,), bias=True)
    D(g, "1d/group2", (2, 4, 4), 4, (3,), group=2, stride=(2,), pad=(1,))
    D(g, "1d/depthwise_k4_s2_p1", (2, 3, 5), 3, (4,), group=3, stride=(2,), pad=(1,), bias=True)
    D(g, "1d/grad_add", (2, 3, 4), 2, (3,), stride=(2,), bias=True,
      grad_req={"x": "add", "w": "add", "b": "add"}, grad_init=init_like(g, "x", "w", "b"))
    D(g, "1d/float64_k3_s3_adj2", (2, 2, 4), 2, (3,), stride=(3,), adj=(2,), dtype=np.float64)


def graph_cases(g):
    """Convolution in graphs: a BatchNorm block in training (aux states)
    and in inference, a residual block, depthwise separable, and an
    encoder-decoder through Deconvolution."""
    x = V('x')
    h = mx.sym.Convolution(x, V('w1'), V('b1'), kernel=(3, 3), pad=(1, 1), num_filter=3, name='c1')
    h = mx.sym.BatchNorm(h, V('gamma'), V('beta'), V('moving_mean'), V('moving_var'), fix_gamma=False,
                         name='bn')
    h = mx.sym.Pooling(mx.sym.Activation(h, act_type='relu'), kernel=(2, 2), stride=(2, 2), pool_type='max')

    def bn_block_inputs():
        i = {"x": g.randn(2, 2, 4, 4), "w1": g.randn(3, 2, 3, 3, scale=0.5), "b1": g.randn(3, scale=0.5),
             "gamma": g.uniform(0.5, 1.5, 3), "beta": g.randn(3, scale=0.5)}
        a = {"moving_mean": g.randn(3, scale=0.5), "moving_var": g.uniform(0.5, 2.0, 3)}
        return i, a
    i, a = bn_block_inputs()
    g.case("graph/conv_bn_relu_maxpool/train", h, i, aux=a, **NORM)
    i, a = bn_block_inputs()
    g.case("graph/conv_bn_relu_maxpool/inference", h, i, aux=a, backward=False, train=False, **NORM)
    # residual: relu(x + conv(relu(conv(x))))
    r = mx.sym.Convolution(x, V('w1'), V('b1'), kernel=(3, 3), pad=(1, 1), num_filter=2, name='c1')
    r = mx.sym.Convolution(mx.sym.relu(r), V('w2'), kernel=(3, 3), pad=(1, 1), num_filter=2, no_bias=True,
                           name='c2')
    r = mx.sym.relu(mx.sym.elemwise_add(x, r))
    g.case("graph/residual_block", r,
           {"x": g.randn(2, 2, 4, 4), "w1": g.randn(2, 2, 3, 3, scale=0.5), "b1": g.randn(2, scale=0.5),
            "w2": g.randn(2, 2, 3, 3, scale=0.5)})
    # residual with a strided 1x1 projection on the shortcut
    m = mx.sym.Convolution(x, V('w1'), kernel=(3, 3), stride=(2, 2), pad=(1, 1), num_filter=3, no_bias=True,
                           name='c1')
    sc = mx.sym.Convolution(x, V('wp'), kernel=(1, 1), stride=(2, 2), num_filter=3, no_bias=True, name='proj')
    g.case("graph/residual_projection_s2", mx.sym.relu(mx.sym.elemwise_add(mx.sym.relu(m), sc)),
           {"x": g.randn(2, 2, 4, 4), "w1": g.randn(3, 2, 3, 3, scale=0.5), "wp": g.randn(3, 2, 1, 1, scale=0.5)})
    # depthwise separable: depthwise 3x3, relu, pointwise 1x1
    d = mx.sym.Convolution(x, V('wd'), kernel=(3, 3), pad=(1, 1), num_filter=3, num_group=3, no_bias=True,
                           name='dw')
    d = mx.sym.Convolution(mx.sym.relu(d), V('wpw'), V('bpw'), kernel=(1, 1), num_filter=4, name='pw')
    g.case("graph/depthwise_separable", d,
           {"x": g.randn(2, 3, 4, 4), "wd": g.randn(3, 1, 3, 3, scale=0.5), "wpw": g.randn(4, 3, 1, 1, scale=0.5),
            "bpw": g.randn(4, scale=0.5)})
    # encoder-decoder: strided conv down, deconv back up to the input size
    e = mx.sym.Convolution(x, V('we'), V('be'), kernel=(3, 3), stride=(2, 2), pad=(1, 1), num_filter=3,
                           name='enc')
    u = mx.sym.Deconvolution(mx.sym.relu(e), V('wu'), kernel=(3, 3), stride=(2, 2), pad=(1, 1), adj=(1, 1),
                             num_filter=2, name='dec')
    g.case("graph/conv_deconv_autoencoder", mx.sym.elemwise_sub(u, x),
           {"x": g.randn(2, 2, 4, 4), "we": g.randn(3, 2, 3, 3, scale=0.5), "be": g.randn(3, scale=0.5),
            "wu": g.randn(3, 2, 3, 3, scale=0.5)})


# ---------------------------------------------------------------------------
# the float64 reference (single-op cases)

def _windows(kernel, stride, dilate, out):
    """(kernel offset, slice of the padded input per spatial axis)."""
    for k in np.ndindex(*kernel):
        yield k, tuple(slice(k[a] * dilate[a], k[a] * dilate[a] + stride[a] * (out[a] - 1) + 1, stride[a])
                       for a in range(len(kernel)))


def ref_conv(x, w, stride, pad, dilate, group):
    n, c = x.shape[:2]
    f, kernel = w.shape[0], w.shape[2:]
    out = [(x.shape[2 + a] + 2 * pad[a] - dilate[a] * (kernel[a] - 1) - 1) // stride[a] + 1
           for a in range(len(kernel))]
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in pad])
    wg = w.reshape((group, f // group, c // group) + tuple(kernel))
    y = np.zeros((n, group, f // group) + tuple(out))
    for k, sl in _windows(kernel, stride, dilate, out):
        xs = xp[(slice(None), slice(None)) + sl].reshape((n, group, c // group) + tuple(out))
        y += np.einsum('ngc...,gfc->ngf...', xs, wg[(Ellipsis,) + k])
    return y.reshape((n, f) + tuple(out))


def ref_conv_grads(x, w, dy, stride, pad, dilate, group):
    """(dx, dw) of sum(conv(x, w) * dy)."""
    n, c = x.shape[:2]
    f, kernel = w.shape[0], w.shape[2:]
    out = dy.shape[2:]
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in pad])
    dxp = np.zeros_like(xp)
    wg = w.reshape((group, f // group, c // group) + tuple(kernel))
    dyg = dy.reshape((n, group, f // group, -1))
    dw = np.zeros_like(wg)
    for k, sl in _windows(kernel, stride, dilate, out):
        xs = xp[(slice(None), slice(None)) + sl].reshape((n, group, c // group, -1))
        dw[(Ellipsis,) + k] = np.einsum('ngcp,ngfp->gfc', xs, dyg)
        dxs = np.einsum('ngfp,gfc->ngcp', dyg, wg[(Ellipsis,) + k])
        dxp[(slice(None), slice(None)) + sl] += dxs.reshape((n, c) + tuple(out))
    crop = tuple(slice(p, p + s) for p, s in zip(pad, x.shape[2:]))
    return dxp[(slice(None), slice(None)) + crop], dw.reshape(w.shape)


def deconv_pad_adj(a, in_shape, kernel):
    """MXNet's effective (pad, adj) of a Deconvolution (attrs `a`)."""
    nd = len(kernel)
    s, d = a["stride"], a["dilate"]
    if any(a["target_shape"]):
        t = [s[i] * (in_shape[i] - 1) + d[i] * (kernel[i] - 1) + 1 - a["target_shape"][i] for i in range(nd)]
        return [(v + 1) // 2 for v in t], [v % 2 for v in t]
    return a["pad"], a["adj"]


def ref_deconv(x, w, a, group):
    kernel = w.shape[2:]
    pad, adj = deconv_pad_adj(a, x.shape[2:], kernel)
    s, d = a["stride"], a["dilate"]
    out = [s[i] * (x.shape[2 + i] - 1) + d[i] * (kernel[i] - 1) + 1 - 2 * pad[i] + adj[i]
           for i in range(len(kernel))]
    z = np.zeros((x.shape[0], w.shape[1] * group) + tuple(out))
    dz, _ = ref_conv_grads(z, w, x, s, pad, d, group)
    return dz, pad


def parse_attrs(node, nd):
    a = {k: (ast.literal_eval(v) if v not in ("None",) and v[:1] in "(-0123456789TF" else v)
         for k, v in node.get("attrs", {}).items()}
    for k, default in (("stride", 1), ("dilate", 1), ("pad", 0), ("adj", 0), ("target_shape", 0)):
        v = a.get(k, ())
        a[k] = tuple(v) if v else (default,) * nd
    a["num_group"] = int(a.get("num_group", 1))
    a["no_bias"] = bool(a.get("no_bias", node["op"] == "Deconvolution"))
    return a


def array(d):
    return np.array(d["data"], dtype=np.float64).reshape(d["shape"])


def reference(c):
    """The case's outputs and gradients from the float64 reference, or
    None for a graph case."""
    nodes = c["symbol"]["nodes"]
    ops = [n for n in nodes if n["op"] != "null"]
    if len(ops) != 1 or ops[0]["op"] not in ("Convolution", "Deconvolution"):
        return None
    node = ops[0]
    names = [nodes[i[0]]["name"] for i in node["inputs"]]
    vals = [array(c["inputs"][n]) for n in names]
    x, w = vals[0], vals[1]
    nd = x.ndim - 2
    a = parse_attrs(node, nd)
    g = a["num_group"]
    if node["op"] == "Convolution":
        y = ref_conv(x, w, a["stride"], a["pad"], a["dilate"], g)
    else:
        y, _ = ref_deconv(x, w, a, g)
    if not a["no_bias"]:
        y = y + vals[2].reshape((1, -1) + (1,) * nd)
    want = {"outputs": [y]}
    if "head_grads" in c:
        dy = array(c["head_grads"][0])
        if node["op"] == "Convolution":
            dx, dw = ref_conv_grads(x, w, dy, a["stride"], a["pad"], a["dilate"], g)
        else:
            _, pad = ref_deconv(x, w, a, g)
            dx = ref_conv(dy, w, a["stride"], pad, a["dilate"], g)
            _, dw = ref_conv_grads(dy, w, x, a["stride"], pad, a["dilate"], g)
        grads = {names[0]: dx, names[1]: dw}
        if not a["no_bias"]:
            grads[names[2]] = dy.sum(axis=tuple(i for i in range(dy.ndim) if i != 1))
        want["grads"] = {}
        for k, v in grads.items():
            req = c["grad_req"].get(k, "write")
            if req == "add":
                v = v + array(c["grad_init"][k])
            if req != "null":
                want["grads"][k] = v
    return want


def worst(got, want, rtol, atol):
    """The largest |a - e| / (atol + rtol |e|) over the elements (<= 1:
    within tolerance)."""
    a, e = array(got), np.asarray(want, dtype=np.float64)
    if a.shape != e.shape:
        return float("inf")
    return float(np.max(np.abs(a - e) / (atol + rtol * np.abs(e)), initial=0.0))


def compare(c, want):
    """The worst tolerance ratio of case c's expectations against `want`
    (a case's "expect", or the reference's)."""
    r, t = c["rtol"], c["atol"]
    ex = c["expect"]
    wo = want["outputs"]
    ratios = [worst(g, w if isinstance(w, np.ndarray) else array(w), r, t)
              for g, w in zip(ex["outputs"], wo)]
    if len(ex["outputs"]) != len(wo):
        return float("inf")
    for key in ("grads", "aux"):
        mine, theirs = ex.get(key, {}), want.get(key, {})
        if set(mine) != set(theirs):
            return float("inf")
        for k in mine:
            w = theirs[k]
            ratios.append(worst(mine[k], w if isinstance(w, np.ndarray) else array(w), r, t))
    return max(ratios, default=0.0)


# ---------------------------------------------------------------------------
# driver

def worker(out, seed):
    g = ConvGen(seed)
    conv2d_cases(g)
    conv1d_cases(g)
    conv3d_cases(g)
    deconv2d_cases(g)
    deconv1d_cases(g)
    graph_cases(g)
    with open(out, "w") as f:
        for c in g.cases:
            f.write(json.dumps(c) + "\n")


def shorten(c):
    """float32 and float16 values written with the fewest digits that
    give the same value in that type (arr writes them as float64)."""
    def short(a):
        if not isinstance(a, dict) or a.get("dtype") not in ("float32", "float16"):
            return a
        t = np.float32 if a["dtype"] == "float32" else np.float16
        data = [v if isinstance(v, str) else float(repr(t(v))) for v in a["data"]]
        return dict(a, data=data)

    def walk(v):
        if isinstance(v, dict) and "dtype" in v:
            return short(v)
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v
    return {k: (v if k == "symbol" else walk(v)) for k, v in c.items()}


def run_worker(path, seed, onednn):
    env = dict(os.environ, MXNET_MKLDNN_ENABLED="1" if onednn else "0",
               MXNET_STORAGE_FALLBACK_LOG_VERBOSE="0")
    subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", path, "--seed", str(seed)],
                   env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(path) as f:
        return [json.loads(line) for line in f]


def main(out, seed):
    with tempfile.TemporaryDirectory() as tmp:
        native = run_worker(os.path.join(tmp, "native.jsonl"), seed, False)
        onednn = run_worker(os.path.join(tmp, "onednn.jsonl"), seed, True)
    assert [c["name"] for c in native] == [c["name"] for c in onednn]
    kept, failed, differ, only, same = [], [], [], [], []
    for a, b in zip(native, onednn):
        name, prefer = a["name"], a["_prefer"]
        pick = a if prefer == "native" else b
        other = b if prefer == "native" else a
        if "_error" in pick:
            failed.append(f"{name}: MXNet ({prefer}) refused it: {pick['_error']}")
            continue
        if "_error" in other:
            only.append(f"{name}: only {prefer} runs it; the other path: {other['_error'][0][:100]}")
        else:
            # the two paths saw the same inputs and head gradients
            assert other["inputs"] == pick["inputs"] and other.get("head_grads") == pick.get("head_grads")
            ratio = compare(pick, other["expect"])
            if pick["expect"] == other["expect"]:
                same.append(name)
            if ratio > 1:
                differ.append(f"{name}: native and oneDNN differ (worst {ratio:.3g} x tolerance), kept {prefer}")
        want = reference(pick)
        if want is not None:
            ratio = compare(pick, want)
            if ratio > 1:
                failed.append(f"{name}: MXNet ({prefer}) differs from the float64 reference "
                              f"(worst {ratio:.3g} x tolerance)")
        kept.append(shorten({k: v for k, v in pick.items() if not k.startswith("_")}))
    for line in only + differ:
        print(line)
    if failed:
        sys.exit("\n".join(failed))
    with open(out, "w") as f:
        for c in kept:
            f.write(json.dumps(c, separators=(",", ":")) + "\n")
    checked = sum(reference(c) is not None for c in kept)
    both = len(kept) - len(only)
    print(f"{len(kept)} cases written to {out} ({checked} checked against the float64 reference); "
          f"{len(same)} of the {both} that both paths run give identical results")
    for name in sorted(set(c["name"] for c in kept) - set(same) - set(s.split(":")[0] for s in only)):
        print("  not identical:", name)


if __name__ == "__main__":
    seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else 43
    if WORKER:
        worker(sys.argv[sys.argv.index("--worker") + 1], seed)
    else:
        main(sys.argv[1], seed)
