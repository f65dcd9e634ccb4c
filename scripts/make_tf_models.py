"""Make the TensorFlow test models (frozen GraphDefs) and TensorFlow's own outputs for them.

Runs under a Python that has TensorFlow (``~/.cache/pycann/tf-venv`` or ``$PYCANN_TF_PYTHON``; the shared
venv does not, see docs/importers.md). pycann's tests start it as a subprocess and read the results,
so TensorFlow is never imported next to pycann. Weights are random (seeded): no download.

    ~/.cache/pycann/tf-venv/bin/python scripts/make_tf_models.py OUT_DIR [name ...]

For each model ``OUT_DIR/<name>/`` gets ``model.pb`` (frozen GraphDef; ``saved_model/`` for the
SavedModel case), ``io.npz`` (inputs ``in:<tf name>`` and TensorFlow outputs ``out:<tf name>``) and
``meta.json`` (input names and shapes, output tensor names). Existing complete folders are kept.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2  # noqa: E402

RNG = np.random.default_rng(0)


def _freeze_keras(model: Any, shape: tuple[int, ...], name: str = "input") -> tuple[Any, list[str], list[str]]:
    """A Keras model as a frozen GraphDef (inputs by placeholder name, outputs by tensor name)."""
    fn = tf.function(lambda x: model(x, training=False))
    concrete = fn.get_concrete_function(tf.TensorSpec(shape, tf.float32, name=name))
    frozen = convert_variables_to_constants_v2(concrete)
    gd = frozen.graph.as_graph_def()
    ins = [t.name.split(":")[0] for t in frozen.inputs if t.dtype != tf.resource]
    outs = [t.name for t in frozen.outputs]
    return gd, ins, outs


def _randomize(model: Any) -> None:
    # keras' default initialisers leave BN statistics at 0/1: random ones test the folding
    for layer in model.layers:
        if isinstance(layer, tf.keras.layers.BatchNormalization):
            g, b, m, v = layer.get_weights()
            layer.set_weights([RNG.uniform(0.5, 1.5, g.shape), RNG.normal(0, 0.1, b.shape),
                               RNG.normal(0, 0.1, m.shape), RNG.uniform(0.5, 1.5, v.shape)])


def mobilenet_v2() -> Any:
    m = tf.keras.applications.MobileNetV2(input_shape=(96, 96, 3), weights=None, classes=100)
    _randomize(m)
    return _freeze_keras(m, (1, 96, 96, 3))


def resnet50() -> Any:
    m = tf.keras.applications.ResNet50(input_shape=(64, 64, 3), weights=None, classes=50)
    _randomize(m)
    return _freeze_keras(m, (1, 64, 64, 3))


def densenet121() -> Any:
    m = tf.keras.applications.DenseNet121(input_shape=(64, 64, 3), weights=None, classes=10)
    _randomize(m)
    return _freeze_keras(m, (1, 64, 64, 3))


def efficientnet_b0() -> Any:
    m = tf.keras.applications.EfficientNetB0(input_shape=(64, 64, 3), weights=None, classes=10)
    _randomize(m)
    return _freeze_keras(m, (1, 64, 64, 3))


def _freeze_fn(fn: Callable[..., Any], specs: list[Any], lower: bool = True) -> tuple[Any, list[str], list[str]]:
    concrete = tf.function(fn).get_concrete_function(*specs)
    frozen = convert_variables_to_constants_v2(concrete, lower_control_flow=lower)
    ins = [t.name.split(":")[0] for t in frozen.inputs if t.dtype != tf.resource]
    return frozen.graph.as_graph_def(), ins, [t.name for t in frozen.outputs]


def _w(*shape: int) -> Any:
    return tf.constant(RNG.normal(0, 0.3, shape).astype(np.float32))


def convnet_ops() -> Any:
    """Detection-style head ops: resizes, pads, slices, concat, pooling, gather, NHWC throughout."""
    w1, dw, bias = _w(3, 3, 3, 8), _w(3, 3, 8, 2), _w(16)
    scale, off = tf.constant(RNG.uniform(0.5, 1.5, 16).astype(np.float32)), _w(16)
    mean, var = _w(16), tf.constant(RNG.uniform(0.5, 1.5, 16).astype(np.float32))

    def f(x: Any) -> Any:
        x = tf.nn.relu6(tf.nn.conv2d(x, w1, 2, "SAME"))
        x = tf.nn.bias_add(tf.nn.depthwise_conv2d(x, dw, [1, 1, 1, 1], "VALID"), bias)
        x, _, _ = tf.compat.v1.nn.fused_batch_norm(x, scale, off, mean, var, is_training=False)
        x = tf.nn.leaky_relu(x, 0.1)
        a = tf.nn.max_pool2d(x, 3, 2, "SAME")
        b = tf.nn.avg_pool2d(x, 2, 2, "VALID")
        up = tf.image.resize(a, (14, 14), method="bilinear")
        nn_up = tf.image.resize(b, (14, 14), method="nearest")
        x = tf.concat([up, nn_up], axis=-1)
        x = tf.pad(x, [[0, 0], [1, 2], [2, 1], [0, 0]])
        x = x[:, 1:15:2, ::-1, 2:]
        x = tf.transpose(x, [0, 3, 1, 2])
        x = tf.gather(x, [3, 1, 0], axis=1)
        x = tf.reduce_max(x, axis=[2], keepdims=False) + tf.reduce_mean(x, axis=2)
        return tf.nn.softmax(tf.reshape(x, (1, -1)))

    return _freeze_fn(f, [tf.TensorSpec((1, 32, 32, 3), tf.float32, name="input")])


def misc_ops() -> Any:
    """Less common converters: transposed conv, LRN, depth/space, splits, stacks, top-k, one-hot..."""
    wt = _w(3, 3, 4, 6)  # conv2d_transpose filter: [H, W, out, in]

    def f(x: Any) -> Any:
        y = tf.nn.conv2d_transpose(x, wt, (1, 16, 16, 4), 2, "SAME")
        y = tf.nn.local_response_normalization(y, depth_radius=2, bias=1.0, alpha=0.1, beta=0.75)
        y = tf.nn.space_to_depth(y, 2)  # [1, 8, 8, 16]
        y = tf.nn.depth_to_space(tf.math.square(y) * tf.math.rsqrt(tf.abs(y) + 1.0), 2)  # [1, 16, 16, 4]
        a, b, c = tf.split(y, [1, -1, 2], axis=3)
        p1, p2 = tf.unstack(tf.reduce_mean(y, axis=[1, 2]) + tf.zeros((2, 4)), axis=0)
        s = tf.stack([p1, p2 * 2.0], axis=1)  # [4, 2]
        t = tf.tile(tf.expand_dims(tf.squeeze(a, 3), 0), [2, 1, 1, 1])  # [2, 1, 16, 16]
        vals, idx = tf.math.top_k(tf.reshape(b, (1, -1)), k=5)
        hot = tf.one_hot(tf.argmax(tf.reshape(c, (16, 32)), axis=1), 32, on_value=2.0, off_value=-1.0)
        sel = tf.where(hot > 0, hot, tf.fill((16, 32), 0.5))
        cum = tf.math.cumsum(tf.slice(sel, [1, 2], [4, -1]), axis=1, exclusive=True)
        return (tf.reduce_sum(t, axis=[2, 3]), s, vals, tf.cast(idx, tf.float32), cum,
                tf.math.floordiv(y, 0.3), tf.math.floormod(y, 0.3), tf.nn.log_softmax(s))

    return _freeze_fn(f, [tf.TensorSpec((1, 8, 8, 6), tf.float32, name="input")])


def transformer_block() -> Any:
    """NLP ops: embedding Gather, attention BatchMatMul, LayerNorm reductions, GELU (Erf)."""
    L = tf.keras.layers
    emb, mha = L.Embedding(100, 32), L.MultiHeadAttention(num_heads=4, key_dim=8)
    ln1, ln2, d1, d2, d3 = (L.LayerNormalization(), L.LayerNormalization(), L.Dense(64, activation="gelu"),
                            L.Dense(32), L.Dense(5, activation="softmax"))

    def f(ids: Any) -> Any:
        x = emb(ids)
        x = ln1(x + mha(x, x, training=False))
        x = ln2(x + d2(d1(x)))
        return d3(x[:, 0, :])

    return _freeze_fn(f, [tf.TensorSpec((2, 16), tf.int32, name="ids")])


def _tf2_loop_fn() -> Callable[[Any], Any]:
    w = _w(6, 6)

    def f(x: Any) -> Any:
        def body(i: Any, v: Any) -> Any:
            v = tf.cond(tf.reduce_sum(v) > 0, lambda: tf.nn.relu(tf.matmul(v, w)), lambda: v * 0.5 + 1.0)
            return i + 1, v

        _, y = tf.while_loop(lambda i, v: i < 4, body, [tf.constant(0), x])
        return y

    return f


def tf2_while_lowered() -> Any:
    """A TF2 tf.function with tf.while_loop and tf.cond: freezing lowers them to TF1 control flow
    (convert_variables_to_constants_v2's default lower_control_flow=True)."""
    return _freeze_fn(_tf2_loop_fn(), [tf.TensorSpec((2, 6), tf.float32, name="x")])


def tf2_functional() -> Any:
    """The same loop frozen with lower_control_flow=False: StatelessWhile / StatelessIf nodes whose
    bodies are FunctionDefs of the graph's library."""
    return _freeze_fn(_tf2_loop_fn(), [tf.TensorSpec((2, 6), tf.float32, name="x")], lower=False)


def _tf1_graph(build: Callable[[], tuple[list[Any], list[Any]]]) -> Any:
    tf.compat.v1.disable_control_flow_v2()
    g = tf.Graph()
    with g.as_default():
        ins, outs = build()
    return g.as_graph_def(), [t.name.split(":")[0] for t in ins], [t.name for t in outs]


def tf1_while() -> Any:
    """tf.compat.v1.while_loop (Enter/Merge/Switch/LoopCond/NextIteration/Exit) with a cond inside."""
    w = RNG.normal(0, 0.3, (8, 8)).astype(np.float32)

    def build() -> tuple[list[Any], list[Any]]:
        x = tf.compat.v1.placeholder(tf.float32, (2, 8), name="x")
        n = tf.compat.v1.placeholder(tf.int32, (), name="n")

        def body(i: Any, h: Any, acc: Any) -> Any:
            h2 = tf.tanh(tf.matmul(h, tf.constant(w)) + 0.1)
            acc2 = tf.compat.v1.cond(tf.equal(i % 2, 0), lambda: acc + h2, lambda: acc - 0.5 * h2)
            return i + 1, h2, acc2

        _, h, acc = tf.compat.v1.while_loop(lambda i, h, acc: i < n, body, [tf.constant(0), x, tf.zeros_like(x)])
        return [x, n], [tf.identity(h, name="h"), tf.identity(acc, name="acc")]

    return _tf1_graph(build)


def tf1_nested_while() -> Any:
    """A while loop inside a while loop (inner frame's Enters live in the outer body)."""
    def build() -> tuple[list[Any], list[Any]]:
        x = tf.compat.v1.placeholder(tf.float32, (3,), name="x")

        def outer(i: Any, v: Any) -> Any:
            _, v2 = tf.compat.v1.while_loop(lambda j, u: j < i + 1, lambda j, u: (j + 1, u * 0.5 + 1.0), [0, v])
            return i + 1, v2 + tf.cast(i, tf.float32)

        _, y = tf.compat.v1.while_loop(lambda i, v: i < 4, outer, [tf.constant(0), x])
        return [x], [tf.identity(y, name="y")]

    return _tf1_graph(build)


def tf1_cond() -> Any:
    def build() -> tuple[list[Any], list[Any]]:
        x = tf.compat.v1.placeholder(tf.float32, (3, 4), name="x")
        flag = tf.compat.v1.placeholder(tf.bool, (), name="flag")
        y = tf.compat.v1.cond(flag, lambda: tf.nn.relu(x) * 2.0, lambda: tf.reduce_sum(x, 1, keepdims=True) - x)
        return [x, flag], [tf.identity(y, name="y")]

    return _tf1_graph(build)


MODELS: dict[str, Callable[[], Any]] = {
    "tf_mobilenet_v2": mobilenet_v2, "tf_resnet50": resnet50, "tf_densenet121": densenet121,
    "tf_efficientnet_b0": efficientnet_b0, "tf_convnet_ops": convnet_ops,
    "tf_transformer_block": transformer_block, "tf_misc_ops": misc_ops, "tf2_while_lowered": tf2_while_lowered,
    "tf2_functional": tf2_functional,
    "tf1_while": tf1_while,
    "tf1_nested_while": tf1_nested_while, "tf1_cond": tf1_cond,
}

FEEDS: dict[str, Callable[[str, tuple[int, ...], Any], np.ndarray]] = {}


def _feed(name: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    if dtype == tf.int32 and shape == ():
        return np.array(5, np.int32)  # the loop count
    if dtype == tf.int32:
        return RNG.integers(0, 100, shape).astype(np.int32)
    if dtype == tf.bool:
        return np.array(True)
    return RNG.normal(0, 1, shape).astype(np.float32)


def _run(gd: Any, ins: list[str], outs: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(gd, name="")
    with tf.compat.v1.Session(graph=g) as s:
        return s.run(outs, {f"{k}:0": v for k, v in feeds.items()})


def make(name: str, out_dir: Path) -> None:
    d = out_dir / name
    if (d / "meta.json").is_file():
        return
    d.mkdir(parents=True, exist_ok=True)
    gd, ins, outs = MODELS[name]()
    nodes = {n.name: n for n in gd.node}
    feeds = {}
    for i in ins:
        a = nodes[i].attr
        shape = tuple(int(x.size) for x in a["shape"].shape.dim)
        feeds[i] = _feed(i, shape, tf.dtypes.as_dtype(a["dtype"].type))
    results = _run(gd, ins, outs, feeds)
    extra: list[np.ndarray] = []
    if name == "tf1_cond":  # the other branch too
        feeds2 = dict(feeds, flag=np.array(False))
        extra = _run(gd, ins, outs, feeds2)
    (d / "model.pb").write_bytes(gd.SerializeToString())
    if name == "tf1_cond":
        _saved_model(gd, d / "saved_model")
    arrays = {f"in:{k}": v for k, v in feeds.items()}
    arrays.update({f"out:{k}": np.asarray(v) for k, v in zip(outs, results)})
    arrays.update({f"out2:{k}": np.asarray(v) for k, v in zip(outs, extra)})
    np.savez(d / "io.npz", **arrays)
    meta = {"inputs": ins, "shapes": {k: list(v.shape) for k, v in feeds.items()}, "outputs": outs,
            "tensorflow": tf.__version__}
    (d / "meta.json").write_text(json.dumps(meta, indent=1))


def _saved_model(gd: Any, path: Path) -> None:
    """A SavedModel whose serve meta graph is the (already frozen) graph."""
    import shutil

    shutil.rmtree(path, ignore_errors=True)
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(gd, name="")
        with tf.compat.v1.Session(graph=g) as s:
            b = tf.compat.v1.saved_model.Builder(str(path))
            b.add_meta_graph_and_variables(s, ["serve"])
            b.save()


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    names = argv[1:] or list(MODELS)
    for n in names:
        make(n, out)
        print(f"made {n}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
