"""Dynamic gears: ``--dynamic_batch_size``, ``--dynamic_image_size``, ``--dynamic_dims``
(cann-interfaces.md §2.1), at compile time and at run time.

In pycann a gear ("profile") is one allowed set of concrete input shapes. Each ``-1`` in
``--input_shape`` is a gear position: the N axis (batch), the H and W axes (image size) or every
``-1`` in order (dims). Compilation checks the options with CANN's error codes (E10009,
E10018-E10020, E10031, E10035-E10040, E10045, E10047), specialises the optimised graph for each
gear (so a gear that cannot run fails at ``atc`` time, as in CANN) and records the gears in the
.om manifest under ``"gears"``. ``GearTable`` is the run-time side: gear selection
(``set_dynamic_batch_size`` & co. on ``LoadedModel``), the check that inputs match a gear, and the
shapes to precompile plans for at load time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pycann.dtypes import TensorDesc, to_numpy
from pycann.errors import InputError, OptionError, PycannError, ShapeError
from pycann.ge.ir import Graph
from pycann.ge.planning.memory import plan_memory

MIN_PROFILES, MAX_PROFILES = 2, 100
OPTION = {"batch": "--dynamic_batch_size", "image_size": "--dynamic_image_size", "dims": "--dynamic_dims"}


def _err(code: str, message: str) -> OptionError:
    return OptionError(f"{code}: {message}", code=code)


def _ints(text: str, option: str) -> list[int]:
    out = []
    for tok in (t.strip() for t in text.split(",")):
        try:
            v = int(tok)
        except ValueError:
            raise _err("E10001", f"Value [{text}] for parameter [{option}] is invalid. Reason: [{tok}] is not an "
                       "integer.") from None
        if v <= 0:
            raise _err("E10038", f"Dimension size {v} is invalid. The value must be greater than 0 ({option}).")
        out.append(v)
    return out


def parse_dynamic_batch_size(text: str) -> list[int]:
    """``"1,2,4,8"`` -> [1, 2, 4, 8]."""
    return _ints(text.strip().strip(","), "--dynamic_batch_size")


def parse_dynamic_image_size(text: str) -> list[list[int]]:
    """``"224,224;448,448"`` -> [[224, 224], [448, 448]] (height, width per profile)."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        hw = _ints(part, "--dynamic_image_size")
        if len(hw) != 2:
            raise _err("E10020", f"Value {text} for parameter --dynamic_image_size is invalid. The value must be "
                       "formatted as \"h1,w1;h2,w2\"; each profile has two dimensions.")
        out.append(hw)
    return out


def parse_dynamic_dims(text: str) -> list[list[int]]:
    """``"1,16;2,32"`` -> [[1, 16], [2, 32]] (one value per ``-1`` of --input_shape, in order)."""
    return [_ints(p, "--dynamic_dims") for p in filter(None, (p.strip() for p in text.split(";")))]


@dataclass
class GearPlan:
    """Compile-time gears: kind, profiles, and the (input, axis) each profile value binds."""

    kind: str
    profiles: list[list[int]]
    positions: list[tuple[str, int]] = field(default_factory=list)
    symbols: list[Any] = field(default_factory=list)  # the symbolic dim at each position


def gear_kind(options: Any) -> str | None:
    """Which gear option is set (None if none). Raises E10009 when several are."""
    kinds = [k for k, attr in (("batch", "dynamic_batch_size"), ("image_size", "dynamic_image_size"),
                               ("dims", "dynamic_dims")) if getattr(options, attr, None)]
    if len(kinds) > 1:
        raise _err("E10009", "--dynamic_batch_size, --dynamic_image_size, --input_shape_range, and --dynamic_dims "
                   f"are mutually exclusive (given: {', '.join(OPTION[k] for k in kinds)}).")
    return kinds[0] if kinds else None


def plan_gears(graph: Graph, options: Any) -> GearPlan | None:
    """Check the gear options against ``--input_shape`` (CANN's rules and codes) and bind each
    profile value to an input axis. Call after ``--input_shape`` is applied, before AIPP."""
    kind = gear_kind(options)
    if kind is None:
        return None
    option = OPTION[kind]
    raw = {"batch": options.dynamic_batch_size, "image_size": options.dynamic_image_size,
           "dims": options.dynamic_dims}[kind]
    profiles = [[int(v)] for v in raw] if kind == "batch" else [[int(v) for v in p] for p in raw]
    if len(profiles) < MIN_PROFILES:
        raise _err("E10035", f"{option} has {len(profiles)} profiles, which is less than the minimum {MIN_PROFILES}.")
    if len(profiles) > MAX_PROFILES:
        raise _err("E10036", f"{option} has {len(profiles)} profiles, which is greater than the maximum {MAX_PROFILES}.")
    if any(len(p) != len(profiles[0]) for p in profiles):
        lens = sorted({len(p) for p in profiles})
        raise _err("E10037", f"The profiles configured in {option} have inconsistent dimension counts. A profile has "
                   f"{lens[0]} dimensions while another has {lens[-1]} dimensions.")
    if any(v <= 0 for p in profiles for v in p):
        bad = next(v for p in profiles for v in p if v <= 0)
        raise _err("E10038", f"Dimension size {bad} is invalid. The value must be greater than 0 ({option}).")
    if len({tuple(p) for p in profiles}) != len(profiles):
        raise _err("E10039", f"The {option} argument has duplicate profiles.")
    if getattr(options, "insert_op_conf", None) and kind != "batch":
        raise _err("E10047", f"--{option.lstrip('-')} and --insert_op_conf are mutually exclusive"
                   + (" (pycann does not combine AIPP with image-size gears)." if kind == "image_size" else "."))
    layout = getattr(options, "input_format", "NCHW")
    if kind == "dims" and layout != "ND":
        raise _err("E10001", f"Value [{layout}] for parameter [--input_format] is invalid. Reason: --dynamic_dims "
                   "requires --input_format=ND.")
    if kind == "image_size" and layout not in ("NCHW", "NHWC"):
        raise _err("E10001", f"Value [{layout}] for parameter [--input_format] is invalid. Reason: "
                   "--dynamic_image_size requires --input_format NCHW or NHWC.")
    positions = _positions(options.input_shape, kind, layout, option)
    if kind == "dims" and len(positions) != len(profiles[0]):
        raise _err("E10045", f"--input_shape has {len(positions)} -1 axes but each --dynamic_dims profile gives "
                   f"{len(profiles[0])} dimensions; they must match.")
    plan = GearPlan(kind, profiles, [(_input_name(graph, k), ax) for k, ax in positions])
    for name, ax in plan.positions:
        d = graph.descs.get(name)
        if d is None or d.shape is None or isinstance(d.shape[ax], int):
            raise _err("E10040", f"{option}: input {name} axis {ax} is not dynamic after --input_shape.")
        plan.symbols.append(d.shape[ax])
    return plan


def _input_name(graph: Graph, key: str) -> str:
    if key not in graph.inputs and key.isdigit() and int(key) < len(graph.inputs):
        return graph.inputs[int(key)]
    return key


def _positions(shapes: Mapping[str, list[Any]], kind: str, layout: str, option: str) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for name, dims in shapes.items():
        if any(isinstance(d, (tuple, list)) for d in dims):
            raise _err("E10040", f"As the {option} argument is included, the corresponding nodes specified in "
                       f"--input_shape must have -1 axes and cannot have '~' (input {name}).")
        dyn = [i for i, d in enumerate(dims) if d == -1]
        if not dyn:
            continue
        if kind == "batch" and dyn != [0]:
            raise _err("E10018", f"Value {','.join(map(str, dims))} for shape {name} is invalid. When "
                       "--dynamic_batch_size is included, only batch size N can be -1 in --input_shape.")
        if kind == "image_size":
            hw = [2, 3] if layout == "NCHW" else [1, 2]
            if len(dims) != 4 or dyn != hw:
                raise _err("E10019", "When --dynamic_image_size is included, only the height and width axes can be "
                           f"-1 in --input_shape (input {name}: {','.join(map(str, dims))}, layout {layout}).")
        out.extend((name, i) for i in dyn)
    if not out:
        if kind == "batch":
            raise _err("E10031", "--dynamic_batch_size is included, but none of the nodes specified in --input_shape "
                       "has a batch size equaling -1.")
        raise _err("E10040", f"As the {option} argument is included, the corresponding nodes specified in "
                   "--input_shape must have -1 axes and cannot have '~'.")
    return out


def _values(plan: GearPlan, profile: list[int]) -> list[int]:
    if plan.kind == "batch":
        return profile * len(plan.positions)
    if plan.kind == "image_size":
        return profile * (len(plan.positions) // 2)
    return profile


def record_gears(
    plan: GearPlan | None,
    graph: Graph,
    specialize: Callable[[Graph, Sequence[tuple[int, ...] | None]], Graph],
    log: Callable[[str], None] = lambda line: None,
) -> dict[str, Any] | None:
    """The manifest's ``"gears"`` entry: concrete input shapes per profile of the final graph.

    Gear values bind the symbolic dims recorded by ``plan_gears`` (AIPP keeps N's symbol on its
    new input). Every gear is specialised once to prove it compiles.
    """
    if plan is None:
        return None
    gear_shapes: list[dict[str, list[int]]] = []
    arenas: list[int] = []  # each gear's activation arena (bytes): aclmdlQuerySize / atc --mode=6 give the largest
    for profile in plan.profiles:
        env: dict[Any, int] = {}
        for sym, v in zip(plan.symbols, _values(plan, profile)):
            if env.setdefault(sym, v) != v:
                raise _err("E10001", f"Value [{','.join(map(str, profile))}] for parameter [{OPTION[plan.kind]}] is "
                           f"invalid. Reason: it gives the dim '{sym}' two values ({env[sym]} and {v}).")
        shapes: dict[str, list[int]] = {}
        for name in graph.inputs:
            d = graph.descs.get(name)
            if d is None or d.shape is None or d.kind != "tensor":
                continue
            dims = [env.get(x, x) if not isinstance(x, int) else x for x in d.shape]
            if not all(isinstance(x, int) for x in dims):
                raise _err("E10001", f"Value [{d}] for parameter [input {name} shape] is invalid. Reason: with "
                           f"{OPTION[plan.kind]} every other dim must be static; set it in --input_shape.")
            shapes[name] = [int(x) for x in dims]  # type: ignore[arg-type]
        gear_shapes.append(shapes)
        try:
            g = specialize(graph, [tuple(shapes[n]) if n in shapes else None for n in graph.inputs])
            arenas.append(plan_memory(g).peak_bytes)
        except PycannError as e:
            raise ShapeError(f"{OPTION[plan.kind]} gear {','.join(map(str, profile))} does not compile: {e}") from e
    log(f"[Gears] {len(plan.profiles)} {OPTION[plan.kind]} gears compiled: "
        + "; ".join(_label(plan.kind, p) for p in plan.profiles))
    return {"kind": plan.kind, "option": OPTION[plan.kind], "profiles": plan.profiles,
            "inputs": sorted({n for n, _ in plan.positions}), "shapes": gear_shapes, "arena_bytes": arenas}


def _label(kind: str, profile: Sequence[int]) -> str:
    if kind == "batch":
        return f"batch {profile[0]}"
    if kind == "image_size":
        return f"hw {profile[0]}x{profile[1]}"
    return "dims " + ",".join(map(str, profile))


class GearTable:
    """Run-time gears of a loaded model (manifest ``"gears"``): selection and input checks.

    The selected gear is state of the model object, like the gear set on a dataset in pyACL; with
    no selection any gear's shapes are accepted.
    """

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.kind: str = str(spec["kind"])
        self.option: str = str(spec.get("option", OPTION.get(self.kind, "")))
        self.profiles: list[list[int]] = [list(p) for p in spec["profiles"]]
        self.inputs: list[str] = list(spec.get("inputs", []))
        self.shapes: list[dict[str, tuple[int, ...]]] = [
            {k: tuple(v) for k, v in s.items()} for s in spec["shapes"]
        ]
        self.selected: int | None = None

    def label(self, i: int) -> str:
        return _label(self.kind, self.profiles[i])

    def describe(self, i: int) -> str:
        shapes = ", ".join(f"{k}:[{','.join(map(str, self.shapes[i][k]))}]" for k in self.inputs if k in self.shapes[i])
        return f"{self.label(i)} ({shapes})"

    def listing(self) -> str:
        return "; ".join(self.describe(i) for i in range(len(self.profiles)))

    def select(self, kind: str, values: Sequence[int]) -> int:
        """Select the gear ``values`` of ``kind``. Raises ``InputError`` listing the gears."""
        calls = {"batch": "set_dynamic_batch_size", "image_size": "set_dynamic_hw_size", "dims": "set_input_dynamic_dims"}
        if kind != self.kind:
            raise InputError(f"{calls[kind]} does not apply: the model was compiled with {self.option}; "
                             f"use {calls[self.kind]} (gears: {self.listing()})")
        want = [int(v) for v in values]
        for i, p in enumerate(self.profiles):
            if p == want:
                self.selected = i
                return i
        raise InputError(f"{_label(kind, want)} is not a gear of this model ({self.option}); the gears are: "
                         f"{self.listing()}")

    def check(self, names: Sequence[str], shapes: Sequence[tuple[int, ...] | None]) -> int:
        """Index of the gear these input shapes match. Raises ``InputError`` listing the gears."""
        got = {n: tuple(s) for n, s in zip(names, shapes) if s is not None}
        if self.selected is not None:
            gear = self.shapes[self.selected]
            diff = [n for n in self.inputs if n in gear and got.get(n) != gear[n]]
            if diff:
                rec = ", ".join(f"{n}:{list(got.get(n, ()))}" for n in diff)
                raise InputError(f"the selected gear {self.describe(self.selected)} does not match the inputs "
                                 f"received ({rec}); select another gear or reshape the inputs")
            return self.selected
        for i, gear in enumerate(self.shapes):
            if all(got.get(n) == gear[n] for n in self.inputs if n in gear):
                return i
        rec = ", ".join(f"{n}:{list(got.get(n, ()))}" for n in self.inputs)
        raise InputError(f"input shapes {rec} match no gear of this model ({self.option}); the gears are: "
                         f"{self.listing()}")

    def fake_feeds(self, i: int, names: Sequence[str], descs: Sequence[TensorDesc | None]) -> list[Any] | None:
        """Zero-stride arrays with gear ``i``'s shapes (for ``Executor.plan_for``); None when an
        input's shape is not known without data."""
        feeds: list[Any] = []
        for name, d in zip(names, descs):
            if d is None or d.kind != "tensor":
                return None
            shape = self.shapes[i].get(name)
            if shape is None:
                if not d.is_static:
                    return None
                shape = tuple(int(x) for x in d.shape or ())  # type: ignore[arg-type]
            feeds.append(np.broadcast_to(np.zeros((), to_numpy(d.dtype)), shape))
        return feeds
