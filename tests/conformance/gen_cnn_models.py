"""Small convolutional Gluon models, hybridized and exported by Apache
MXNet 1.9.1 with `HybridBlock.export`, with their inputs and MXNet's
outputs, gradients and BatchNorm moving statistics, into
tests/data/models/ in the layout of gen_models.py's bnmlp0:

- lenet: Conv2D(1 -> 4, 5x5, relu) -> MaxPool2D(2) -> Conv2D(4 -> 8, 5x5,
  relu) -> MaxPool2D(2) -> Dense(32, relu) -> Dense(10) (Dense flattens),
  input (2, 1, 28, 28). No BatchNorm, so no aux states.
- resnet_tiny: ResNet v1 style (as Gluon's model zoo BasicBlockV1): stem
  Conv2D(3 -> 4, 3x3, pad 1, no bias) -> BatchNorm -> relu; BasicBlock(4,
  stride 1): conv3x3 -> BN -> relu -> conv3x3 -> BN, + the block's input,
  relu; BasicBlock(8, stride 2) with the shortcut through a 1x1 stride-2
  conv (no bias) + BN; GlobalAvgPool2D -> Dense(10). Input (2, 3, 16, 16).
- mobilenet_tiny: MobileNet v1 style (as the model zoo's MobileNet): stem
  Conv2D(3 -> 4, 3x3, stride 2, pad 1, no bias) -> BN -> relu, then two
  depthwise separable blocks, each a depthwise 3x3 conv (groups = its
  channels, no bias) -> BN -> relu -> pointwise 1x1 conv (no bias) -> BN
  -> relu: 4 -> 8 (stride 1), 8 -> 8 (stride 2); GlobalAvgPool2D ->
  Flatten -> Dense(10). Input (2, 3, 16, 16).

Each NAME gets NAME-symbol.json, NAME-0000.params (arg:/aux: names; the
moving statistics as they were before any training pass), NAME-input.npy
(float32; the input variable is "data") and NAME-expect.json with the
fields of bnmlp0-expect.json: "output" (inference mode, flattened) and
"output_shape"; "head" and "grads" (each parameter's gradient of
sum(output * head) in a training pass, flattened); and, for the nets with
BatchNorm, "train_output" (the training pass's output, batch statistics),
"aux_passes" (2) and "aux_after_train" (the moving statistics after that
many training passes, each a forward and a backward with the same input
and head; MXNet 1.9.1 updates them in the backward pass). No Dropout, so
every pass is deterministic. Numbers are written with the fewest digits
that give the same float32.

Weights are random (a seeded NumPy generator): conv and dense weights
normal with std 1/sqrt(fan-in), so activations stay of order 1; biases,
BatchNorm gamma/beta and moving statistics as gen_models.py's Weights.

The expectations come from MXNet's own CPU kernels (MXNET_MKLDNN_ENABLED=0
unless the variable is set), as gen_conv.py keeps for most cases. Checked
by hand: with MXNET_MKLDNN_ENABLED=1 (oneDNN) every expect field of the
three models agrees with these within the tolerances of
tests/tests/run_models.rs (largest relative difference about 1e-6).

Usage: python gen_cnn_models.py MODEL_DIR [--seed N]
Needs: pip install mxnet==1.9.1 'numpy<1.24'. Uses gen_models.py's
Weights and expectations, from this directory.
"""
import json, os, sys
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault("MXNET_MKLDNN_ENABLED", "0")
import mxnet as mx  # noqa: E402
from mxnet.gluon import nn, HybridBlock  # noqa: E402
from gen_models import Weights, expectations  # noqa: E402


class ConvWeights(Weights):
    """gen_models.Weights with conv and dense weights scaled by
    1/sqrt(fan-in)."""

    def fill(self, net):
        super().fill(net)
        for name, p in sorted(net.collect_params().items()):
            if name.endswith("weight") and len(p.shape) >= 2:
                fan_in = int(np.prod(p.shape[1:]))
                p.set_data(mx.nd.array(self.randn(*p.shape, scale=1.0 / np.sqrt(fan_in))))


def lenet():
    net = nn.HybridSequential(prefix="lenet_")
    with net.name_scope():
        net.add(nn.Conv2D(4, kernel_size=5, activation="relu"))
        net.add(nn.MaxPool2D(pool_size=2))
        net.add(nn.Conv2D(8, kernel_size=5, activation="relu"))
        net.add(nn.MaxPool2D(pool_size=2))
        net.add(nn.Dense(32, activation="relu"))
        net.add(nn.Dense(10))
    return net


class BasicBlock(HybridBlock):
    """ResNet v1 basic block: two 3x3 convs with BatchNorm, the shortcut
    through a 1x1 conv + BatchNorm when `downsample`."""

    def __init__(self, channels, stride, downsample, **kw):
        super().__init__(**kw)
        with self.name_scope():
            self.body = nn.HybridSequential(prefix="")
            self.body.add(nn.Conv2D(channels, 3, strides=stride, padding=1, use_bias=False))
            self.body.add(nn.BatchNorm())
            self.body.add(nn.Activation("relu"))
            self.body.add(nn.Conv2D(channels, 3, strides=1, padding=1, use_bias=False))
            self.body.add(nn.BatchNorm())
            if downsample:
                self.downsample = nn.HybridSequential(prefix="")
                self.downsample.add(nn.Conv2D(channels, 1, strides=stride, use_bias=False))
                self.downsample.add(nn.BatchNorm())
            else:
                self.downsample = None

    def hybrid_forward(self, F, x):
        residual = x
        x = self.body(x)
        if self.downsample is not None:
            residual = self.downsample(residual)
        return F.Activation(x + residual, act_type="relu")


def resnet_tiny():
    net = nn.HybridSequential(prefix="resnet_tiny_")
    with net.name_scope():
        net.add(nn.Conv2D(4, 3, strides=1, padding=1, use_bias=False))
        net.add(nn.BatchNorm())
        net.add(nn.Activation("relu"))
        net.add(BasicBlock(4, 1, False, prefix="stage1_"))
        net.add(BasicBlock(8, 2, True, prefix="stage2_"))
        net.add(nn.GlobalAvgPool2D())
        net.add(nn.Dense(10))
    return net


def conv_bn_relu(net, channels, kernel, stride, pad, groups=1):
    net.add(nn.Conv2D(channels, kernel, strides=stride, padding=pad, groups=groups, use_bias=False))
    net.add(nn.BatchNorm())
    net.add(nn.Activation("relu"))


def mobilenet_tiny():
    net = nn.HybridSequential(prefix="mobilenet_tiny_")
    with net.name_scope():
        conv_bn_relu(net, 4, 3, 2, 1)
        for dw, pw, stride in ((4, 8, 1), (8, 8, 2)):
            conv_bn_relu(net, dw, 3, stride, 1, groups=dw)   # depthwise
            conv_bn_relu(net, pw, 1, 1, 0)                   # pointwise
        net.add(nn.GlobalAvgPool2D())
        net.add(nn.Flatten())
        net.add(nn.Dense(10))
    return net


def short(v):
    """Lists of float32 values with the fewest digits that round-trip."""
    if isinstance(v, list):
        return [short(x) for x in v]
    if isinstance(v, dict):
        return {k: short(x) for k, x in v.items()}
    if isinstance(v, float):
        return float(repr(np.float32(v)))
    return v


def make(name, net, x, w, model_dir):
    net.initialize()
    xd = mx.nd.array(x)
    net(xd)  # shapes
    w.fill(net)
    net.hybridize()
    net(xd)  # builds the graph that export writes
    net.export(os.path.join(model_dir, name), epoch=0)  # before training moves the stats
    has_aux = any(p.grad_req == "null" for p in net.collect_params().values())
    expect = expectations(net, x, w, train_passes=2 if has_aux else 0)
    np.save(os.path.join(model_dir, f"{name}-input.npy"), x)
    with open(os.path.join(model_dir, f"{name}-expect.json"), "w") as f:
        json.dump(short(expect), f)


def main(model_dir, seed):
    os.makedirs(model_dir, exist_ok=True)
    w = ConvWeights(seed)
    make("lenet", lenet(), w.randn(2, 1, 28, 28), w, model_dir)
    make("resnet_tiny", resnet_tiny(), w.randn(2, 3, 16, 16), w, model_dir)
    make("mobilenet_tiny", mobilenet_tiny(), w.randn(2, 3, 16, 16), w, model_dir)


if __name__ == "__main__":
    model_dir = sys.argv[1]
    seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else 44
    main(model_dir, seed)
    print(f"lenet, resnet_tiny and mobilenet_tiny written to {model_dir}")
