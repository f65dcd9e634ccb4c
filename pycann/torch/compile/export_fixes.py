"""The TorchScript ONNX exporter's known value errors, for ``torch.compile(backend="npu")``.

Found by differential tests against eager torch (tests/torch/test_compile_differential.py) and
confirmed with ONNX Runtime on the exported models, so the exporter, not GE, is wrong.
``fix_export`` rewrites the nodes it can into equivalents the exporter exports right;
``misexported`` says why a graph must run eagerly instead (the ops it cannot rewrite).
``quiet_onnx_log`` keeps the exporter from printing a failed graph's whole TorchScript IR.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["call_arg", "fix_export", "misexported", "misexported_op", "quiet_onnx_log", "target_name"]


_PAD = (torch._C._nn.pad, torch.nn.functional.pad)
_FLOORDIV = (operator.floordiv, torch.floor_divide)
_FLOORDIV_INPLACE = (operator.ifloordiv,)
_CUMSUM = (torch.cumsum,)


def _value(a: Any) -> Any:
    return a.meta.get("example_value") if isinstance(a, torch.fx.Node) else a


def _pad_args(node: torch.fx.Node) -> tuple[Any, Any, Any]:
    """(input, pads, mode) of an ``F.pad`` node."""
    args, kw = node.args, node.kwargs
    x = args[0] if args else kw.get("input")
    pads = args[1] if len(args) > 1 else kw.get("pad")
    mode = args[2] if len(args) > 2 else kw.get("mode", "constant")
    return x, pads, mode


def _is_floordiv(node: torch.fx.Node) -> bool:
    return ((node.op == "call_function" and node.target in _FLOORDIV)
            or (node.op == "call_method" and node.target in ("floor_divide", "__floordiv__")))


def _narrow_int(v: Any) -> bool:
    """An integer or bool tensor other than int64 (cumsum/cumprod promote them to int64)."""
    return isinstance(v, torch.Tensor) and (v.dtype == torch.bool or (not v.dtype.is_floating_point
                                                                      and not v.dtype.is_complex
                                                                      and v.dtype != torch.int64))


def misexported(gm: torch.fx.GraphModule) -> str | None:
    """Why the TorchScript ONNX exporter (opset 17) would export ``gm`` with other values than
    eager's, for the ops ``fix_export`` cannot rewrite; None when it exports faithfully as far as
    is known. Found by differential tests against eager torch, confirmed with ONNX Runtime on
    the exported model (so the exporter, not GE, is wrong):

    * ``floor_divide`` / ``//`` is exported as a truncating ``Div`` (PyTorch's pre-1.13
      semantics): ``-6 // 5`` gives -1, eager -2, for integer and float tensors alike.
      ``fix_export`` rewrites ``t // s`` as ``torch.div(t, s, rounding_mode="floor")`` (exported
      right); a number divided by a tensor (``3 // t``) and the in-place ``t //= s`` stay here.
    * ``mean`` / ``var`` / ``std`` (and ``var_mean``, ``std_mean``) over an empty dimension give 0
      (eager: NaN); ``F.softplus`` with a ``threshold`` other than 20 ignores it;
      ``F.logsigmoid`` is exported as ``Log(Sigmoid(x))``: -inf below about -88 (eager: x);
      ``F.embedding`` with ``max_norm`` ignores it (eager renormalizes the rows, and the weight);
      ``index_put(..., accumulate=True)`` and ``index_add`` become a ``ScatterND`` without
      reduction, so repeated indices keep the last value instead of the sum.
    * circular ``F.pad`` with a negative pad (a crop) is exported as wrong slices:
      ``pad([1, 2, 3, 4], (-1, 2), "circular")`` gives ``[1, 2]`` (eager ``[2, 3, 4, 2, 3]``).
      ``fix_export`` rewrites constant-int pads as a crop then a circular pad (PyTorch's own
      order: ``_pad_circular`` crops, then wraps the cropped tensor); pads computed at run time
      stay here. Reflect and replicate pads with negative pads export right.
    """
    for node in gm.graph.nodes:
        wrong = misexported_op(node)
        if wrong:
            return wrong
        if node.op == "call_function" and node.target in _FLOORDIV_INPLACE and isinstance(_value(node), torch.Tensor):
            return "in-place floor division (the ONNX export truncates instead of flooring)"
        if node.op == "call_method" and node.target in ("floor_divide_", "__ifloordiv__", "__rfloordiv__"):
            return f"Tensor.{node.target} (the ONNX export truncates instead of flooring)"
        if _is_floordiv(node) and isinstance(_value(node), torch.Tensor) and not isinstance(_value(node.args[0]),
                                                                                            torch.Tensor):
            return "a number floor-divided by a tensor (the ONNX export truncates instead of flooring)"
        if node.op == "call_function" and node.target in _PAD:
            _, pads, mode = _pad_args(node)
            if mode == "circular" and not (isinstance(pads, (tuple, list)) and all(type(p) is int for p in pads)):
                return "circular pad with pads computed at run time (the ONNX export gets negative ones wrong)"
    return None


_EMPTY_NAN = frozenset({"mean", "var", "std", "var_mean", "std_mean", "nanmean"})
_INDEX_ACCUMULATE = frozenset({"index_put", "index_put_"})
_INDEX_ADD = frozenset({"index_add", "index_add_"})


def target_name(node: torch.fx.Node) -> str:
    if node.op == "call_method":
        return str(node.target)
    if node.op == "call_function":
        return str(getattr(node.target, "__name__", ""))
    return ""


def call_arg(node: torch.fx.Node, pos: int, name: str, default: Any = None) -> Any:
    """An argument of a torch-level call node, by position (counting the tensor ``self``) or keyword."""
    if name in node.kwargs:
        return node.kwargs[name]
    return node.args[pos] if len(node.args) > pos else default


_INT_DIVISION = frozenset({"floordiv", "floor_divide", "div", "divide", "remainder", "fmod", "mod", "__mod__",
                           "__floordiv__", "__rfloordiv__", "__rmod__", "truediv", "true_divide"})


def _int_division_by_tensor(node: torch.fx.Node, name: str) -> bool:
    """An integer division or remainder whose divisor is a tensor (its zeros are only known at run
    time): eager raises ZeroDivisionError for a zero divisor, a plan returned 0."""
    if name not in _INT_DIVISION or len(node.args) < 2:
        return False
    out = _value(node)
    if not isinstance(out, torch.Tensor) or out.dtype.is_floating_point or out.dtype.is_complex or out.dtype == torch.bool:
        return False
    divisor = node.args[0] if name in ("__rfloordiv__", "__rmod__") else node.args[1]
    d = _value(divisor)
    return isinstance(d, torch.Tensor) or d == 0


def misexported_op(node: torch.fx.Node) -> str:
    """Why the exporter gets this one node's values wrong (``misexported``); "" when it does not."""
    name = target_name(node)
    if not name:
        return ""
    if _int_division_by_tensor(node, name):
        return (f"integer {name} by a tensor (GE's Div/Mod give 0 for a zero divisor, ONNX leaves it undefined; "
                "eager raises ZeroDivisionError)")
    if name in _EMPTY_NAN:
        x, out = _value(node.args[0]) if node.args else None, _value(node)
        outs = out if isinstance(out, (tuple, list)) else [out]
        if isinstance(x, torch.Tensor) and x.numel() == 0 and any(isinstance(o, torch.Tensor) and o.numel() > 0
                                                                  for o in outs):
            return f"{name} over an empty dimension (the ONNX export gives 0, eager NaN)"
    elif name == "softplus" and node.op == "call_function":
        if call_arg(node, 2, "threshold", 20) != 20:
            return "softplus with a threshold other than 20 (the ONNX export ignores it)"
    elif name in ("log_sigmoid", "logsigmoid"):
        return "logsigmoid (the ONNX export's Log(Sigmoid(x)) is -inf below about -88)"
    elif name == "embedding" and node.op == "call_function":
        if call_arg(node, 3, "max_norm") is not None:
            return "embedding with max_norm (the ONNX export ignores it)"
    elif name in _INDEX_ACCUMULATE:
        if call_arg(node, 3, "accumulate", False) is not False:  # (self, indices, values, accumulate)
            return f"{name} with accumulate=True (the ONNX export drops the sum over repeated indices)"
    elif name in _INDEX_ADD:
        return f"{name} (the ONNX export drops the sum over repeated indices)"
    return ""


def fix_export(graph: torch.fx.Graph) -> bool:
    """Rewrite, in place, the nodes the TorchScript exporter gets wrong into equivalents it
    exports right (see ``misexported``); True when something changed. Also gives
    ``cumsum`` of an integer or bool tensor without ``dtype`` the int64 PyTorch promotes it to
    (the exporter kept int32: wrong dtype and overflow; bool: a model ONNX refuses)."""
    changed = False
    for node in list(graph.nodes):
        if _is_floordiv(node) and isinstance(_value(node), torch.Tensor) and isinstance(_value(node.args[0]),
                                                                                        torch.Tensor):
            node.op, node.target, changed = "call_function", torch.div, True
            node.kwargs = {**node.kwargs, "rounding_mode": "floor"}
        elif node.op == "call_function" and node.target in _PAD:
            x, pads, mode = _pad_args(node)
            if mode == "circular" and isinstance(pads, (tuple, list)) and any(type(p) is int and p < 0 for p in pads):
                with graph.inserting_before(node):
                    crop = graph.call_function(torch._C._nn.pad, (x, [min(p, 0) for p in pads], "constant", None))
                crop.meta = dict(node.meta)
                node.args, node.kwargs = (crop, [max(p, 0) for p in pads], "circular", None), {}
                changed = True
        elif ((node.op == "call_function" and node.target in _CUMSUM) or (node.op == "call_method"
                                                                            and node.target == "cumsum")):
            if node.kwargs.get("dtype") is None and node.args and _narrow_int(_value(node.args[0])):
                node.kwargs = {**node.kwargs, "dtype": torch.int64}
                changed = True
    return changed


@contextlib.contextmanager
def _log_off(verbose: bool) -> Iterator[None]:
    """``setup_onnx_logging`` as meant: ONNX logging on only for ``verbose=True``, then put back."""
    was = torch._C._jit_is_onnx_log_enabled()
    torch._C._jit_set_onnx_log_enabled(bool(was or verbose))
    try:
        yield
    finally:
        torch._C._jit_set_onnx_log_enabled(was)


@contextlib.contextmanager
def quiet_onnx_log() -> Iterator[None]:
    """Run a ``torch.onnx.export(..., verbose=False)`` without its log.

    The TorchScript exporter's ``setup_onnx_logging`` tests ``_C._jit_is_onnx_log_enabled``
    without calling it (always true), so every export turns ONNX logging on for good, and an
    export that fails (an op with no ONNX symbolic, which the backend reports and runs eagerly)
    printed the graph's whole TorchScript IR ("Torch IR graph at exception: ...", a hundred lines
    for a two-layer transformer) on stdout. This swaps in the intended context manager while
    the export runs and leaves the log flag as it found it.
    """
    from torch.onnx._internal.torchscript_exporter import utils

    orig = utils.setup_onnx_logging
    was = torch._C._jit_is_onnx_log_enabled()
    utils.setup_onnx_logging = _log_off  # type: ignore[assignment]  # the deprecated wrapper's signature
    try:
        yield
    finally:
        utils.setup_onnx_logging = orig
        torch._C._jit_set_onnx_log_enabled(was)
