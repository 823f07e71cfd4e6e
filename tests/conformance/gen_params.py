"""MXNet NDArray list files (.params) written by Apache MXNet 1.9.1 itself,
for simpleop's reader (simpleop/src/params/tests.rs), and the values each
file must load as.

Writes into OUT_DIR (tests/data/params/):
- dtypes.params: mx.nd.save of a dict, one array per dtype simpleop has
  (float32, float64, float16, uint8, int32, int64) with edge values:
  infinities, NaN, signed zeros, subnormals, integer extremes;
- unnamed.params: mx.nd.save of a list (a file with no names);
- int8.params, bool.params: dtypes simpleop lacks (loading is an error
  naming the array);
- numpy.params: npx.save under npx.set_np() (the V3 layout): a 0-d array
  and a zero-size one, which only NumPy semantics express;
- gluon.params: HybridSequential.save_parameters of a tiny Dense net
  (bare parameter names);
- dense-symbol.json, dense-0000.params: HybridBlock.export of a tiny
  Dense + BatchNorm net (arg:/aux: names);
- expected.json: per file, its entries in file order, each with its
  name, dtype, shape and data as little-endian hex (exact, NaN payloads
  included), or the error the file must give.

Usage: python gen_params.py OUT_DIR
Needs: pip install mxnet==1.9.1 'numpy<1.24' (a venv keeps numpy 2 for the
benchmarks). The output is deterministic (seeded).
"""
import json, os, sys
import numpy as np
import mxnet as mx


def entry(name, a):
    a = np.require(a, requirements="C")  # keeps 0-d arrays 0-d
    return {"name": name, "dtype": str(a.dtype), "shape": list(a.shape),
            "hex": a.astype(a.dtype.newbyteorder('<')).tobytes().hex()}


def main(out):
    os.makedirs(out, exist_ok=True)
    expected = {}

    f32 = np.array([[0.0, -0.0, 1.5, -2.25], [np.inf, -np.inf, np.nan, 1e-45],
                    [3.4028235e38, -1.1754944e-38, 0.1, 7.0]], dtype=np.float32)
    f64 = np.array([5e-324, -0.0, np.pi, -1e308, np.nan, 2.0 ** 60], dtype=np.float64)
    f16 = np.array([[65504.0, -6e-8, 0.333], [np.inf, -0.0, 1.0]], dtype=np.float16)
    u8 = np.array([0, 1, 127, 128, 255], dtype=np.uint8)
    i32 = np.array([[-2 ** 31, -1], [0, 2 ** 31 - 1]], dtype=np.int32)
    i64 = np.array([-2 ** 63, -1, 0, 2 ** 53 + 1, 2 ** 63 - 1], dtype=np.int64)
    arrays = {"f32": f32, "f64": f64, "f16": f16, "u8": u8, "i32": i32, "i64": i64}
    # mx.nd.array goes through float32 for some dtypes: build each array
    # from its bytes' dtype directly.
    nd = {k: mx.nd.array(v, dtype=v.dtype) for k, v in arrays.items()}
    for k, v in arrays.items():
        got = nd[k].asnumpy()
        assert got.dtype == v.dtype and got.tobytes() == v.tobytes(), k
    mx.nd.save(os.path.join(out, "dtypes.params"), nd)
    loaded = mx.nd.load(os.path.join(out, "dtypes.params"))
    # A dict is saved in its iteration order.
    expected["dtypes.params"] = {"entries": [entry(k, loaded[k].asnumpy()) for k in nd]}
    for k in nd:
        assert loaded[k].asnumpy().tobytes() == arrays[k].tobytes(), k

    lst = [mx.nd.array([1.5, -2.0], dtype=np.float32), mx.nd.array([[7]], dtype=np.int32)]
    mx.nd.save(os.path.join(out, "unnamed.params"), lst)
    back = mx.nd.load(os.path.join(out, "unnamed.params"))
    assert isinstance(back, list)
    expected["unnamed.params"] = {"entries": [entry("", a.asnumpy()) for a in back]}

    mx.nd.save(os.path.join(out, "int8.params"),
               {"arg:ok": mx.nd.array([1.0]), "arg:small": mx.nd.array([-3, 4], dtype=np.int8)})
    expected["int8.params"] = {"error": ["array 1 (`arg:small`)", "int8 (MXNet type flag 5)"]}
    mx.nd.save(os.path.join(out, "bool.params"), {"mask": mx.nd.array([1, 0], dtype=np.bool_)})
    expected["bool.params"] = {"error": ["array 0 (`mask`)", "bool (MXNet type flag 7)"]}

    # NumPy semantics: a 0-d array and a zero-size one (the V3 layout).
    from mxnet import npx, np as mnp
    npx.set_np()
    scalar = mnp.array(2.5, dtype=np.float32)
    empty = mnp.zeros((0, 3), dtype=np.float64)
    vec = mnp.array([1, 2, 3], dtype=np.int64)
    npx.save(os.path.join(out, "numpy.params"), {"scalar": scalar, "empty": empty, "vec": vec})
    back = npx.load(os.path.join(out, "numpy.params"))
    expected["numpy.params"] = {"entries": [entry(k, back[k].asnumpy()) for k in ["scalar", "empty", "vec"]]}
    npx.reset_np()

    mx.random.seed(7)
    np.random.seed(7)
    from mxnet.gluon import nn
    net = nn.HybridSequential()
    net.add(nn.Dense(3, in_units=4, activation="relu"), nn.Dense(2, in_units=3))
    net.initialize(mx.init.Uniform(1.0))
    net.save_parameters(os.path.join(out, "gluon.params"))
    raw = mx.nd.load(os.path.join(out, "gluon.params"))
    params = net._collect_params_with_prefix()
    for k, v in raw.items():
        assert v.asnumpy().tobytes() == params[k].data().asnumpy().tobytes(), k
    expected["gluon.params"] = {"entries": [entry(k, v.asnumpy()) for k, v in raw.items()]}

    net = nn.HybridSequential()
    net.add(nn.Dense(3, in_units=4), nn.BatchNorm(in_channels=3), nn.Dense(2, in_units=3))
    net.initialize(mx.init.Uniform(1.0))
    # Non-trivial running statistics: one training step.
    with mx.autograd.record():
        net(mx.nd.array(np.random.uniform(-1, 1, (5, 4)).astype(np.float32)))
    net.hybridize()
    net(mx.nd.zeros((1, 4)))
    net.export(os.path.join(out, "dense"), epoch=0)
    raw = mx.nd.load(os.path.join(out, "dense-0000.params"))
    assert any(k.startswith("aux:") for k in raw) and any(k.startswith("arg:") for k in raw)
    expected["dense-0000.params"] = {"entries": [entry(k, v.asnumpy()) for k, v in raw.items()]}

    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
