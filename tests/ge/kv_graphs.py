"""One attention-over-cache layer as an ONNX graph (onnx.helper), in the spellings exporters write,
and a runner that checks each step against ONNX Runtime: shared by the KV-decoding regression tests.

``attention_layer(...)``: inputs ``x`` [B, S, W] (float32), ``keep`` [B, 1, S, T] (bool: the causal and
padding mask), ``past_key`` / ``past_value`` [B, H, P, D]; outputs ``y`` [B, S, W] and
``present_key`` / ``present_value`` [B, H, T, D] with ``T = P + S``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

W, H = 16, 4
D = W // H


def attention_layer(mask: str = "where", seed: int = 0, guard: float | None = None) -> bytes:
    """``mask``: ``where`` (Where(keep, scores, -inf): torch.where), ``masked_fill`` (Where(not keep,
    -inf, scores): Tensor.masked_fill), ``add`` (scores + Where(keep, 0, -inf)). ``guard``: the
    probabilities go through Where(IsNaN(p), guard, p), as torch exports a boolean-masked SDPA (0)."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.normal(0, 0.5, (W, W)).astype(np.float32), f"w{k}") for k in "qkvo"]
    inits += [numpy_helper.from_array(np.array([0, 0, H, D], np.int64), "heads"),
              numpy_helper.from_array(np.array([0, 0, W], np.int64), "merged"),
              numpy_helper.from_array(np.array(1 / np.sqrt(D), np.float32), "scale"),
              numpy_helper.from_array(np.array(-np.inf, np.float32), "fill"),
              numpy_helper.from_array(np.array(0, np.float32), "zero")]
    n = helper.make_node
    nodes = []
    for k in "qkv":
        nodes += [n("MatMul", ["x", f"w{k}"], [f"{k}2"]), n("Reshape", [f"{k}2", "heads"], [f"{k}3"]),
                  n("Transpose", [f"{k}3"], [f"{k}_new"], perm=[0, 2, 1, 3])]
    nodes += [n("Concat", ["past_key", "k_new"], ["present_key"], axis=2),
              n("Concat", ["past_value", "v_new"], ["present_value"], axis=2),
              n("Transpose", ["present_key"], ["kt"], perm=[0, 1, 3, 2]),
              n("MatMul", ["q_new", "kt"], ["s0"]), n("Mul", ["s0", "scale"], ["s1"])]
    if mask == "where":
        nodes.append(n("Where", ["keep", "s1", "fill"], ["s2"]))
    elif mask == "masked_fill":
        nodes += [n("Not", ["keep"], ["drop"]), n("Where", ["drop", "fill", "s1"], ["s2"])]
    else:
        nodes += [n("Where", ["keep", "zero", "fill"], ["bias"]), n("Add", ["s1", "bias"], ["s2"])]
    nodes.append(n("Softmax", ["s2"], ["p0"], axis=-1))
    if guard is None:
        nodes.append(n("Identity", ["p0"], ["p"]))
    else:
        inits.append(numpy_helper.from_array(np.array(guard, np.float32), "guard"))
        nodes += [n("IsNaN", ["p0"], ["nan"]), n("Where", ["nan", "guard", "p0"], ["p"])]
    nodes += [n("MatMul", ["p", "present_value"], ["o"]),
              n("Transpose", ["o"], ["o2"], perm=[0, 2, 1, 3]), n("Reshape", ["o2", "merged"], ["o3"]),
              n("MatMul", ["o3", "wo"], ["y"])]
    f, b = TensorProto.FLOAT, TensorProto.BOOL
    inputs = [helper.make_tensor_value_info("x", f, ["batch", "seq", W]),
              helper.make_tensor_value_info("keep", b, ["batch", 1, "seq", "total"]),
              helper.make_tensor_value_info("past_key", f, ["batch", H, "past", D]),
              helper.make_tensor_value_info("past_value", f, ["batch", H, "past", D])]
    outputs = [helper.make_tensor_value_info("y", f, ["batch", "seq", W]),
               helper.make_tensor_value_info("present_key", f, ["batch", H, "total", D]),
               helper.make_tensor_value_info("present_value", f, ["batch", H, "total", D])]
    m = helper.make_model(helper.make_graph(nodes, "attention_over_cache", inputs, outputs, inits),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m.SerializeToString()


def keep_mask(pad: Sequence[int], past: int, seq: int, self_attend: bool = True) -> np.ndarray:
    """[B, 1, seq, past + seq]: query ``i`` (position ``past + i``) sees keys up to its position, not
    the ``pad[b]`` left-padding positions of row ``b``; a query on a padding position sees itself, or
    nothing (a fully masked row) without ``self_attend``."""
    t = past + seq
    causal = np.arange(t)[None, :] <= (past + np.arange(seq))[:, None]
    keep = np.repeat(causal[None, None], len(pad), axis=0)
    for b, p in enumerate(pad):
        keep[b, 0, :, :p] = False
        for i in range(seq):
            if past + i < p and self_attend:
                keep[b, 0, i, past + i] = True  # a padding query attends to itself: no row fully masked
    return keep


def decode(run: Callable[[dict[str, np.ndarray]], list[Any]], batch: int, prompt: int, steps: int,
           pad: Sequence[int] = (), past: int = 0, seed: int = 0, self_attend: bool = True) -> list[np.ndarray]:
    """The prompt, then ``steps`` one-token steps each feeding the presents back: each call's ``y``."""
    rng = np.random.default_rng(seed)
    pad = list(pad) or [0] * batch
    pk = rng.standard_normal((batch, H, past, D)).astype(np.float32)
    pv = rng.standard_normal((batch, H, past, D)).astype(np.float32)
    seq, ys = prompt, []
    for _ in range(steps + 1):
        x = rng.standard_normal((batch, seq, W)).astype(np.float32)
        y, pk, pv = run({"x": x, "keep": keep_mask(pad, pk.shape[2], seq, self_attend), "past_key": pk, "past_value": pv})
        ys.append(np.array(y))
        seq = 1
    return ys
