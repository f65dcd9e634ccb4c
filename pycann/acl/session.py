"""``InferSession``: ais_bench's high-level Python API (cann-interfaces.md §6.1), plus an
ONNX Runtime-style ``run(output_names, feeds)``. A facade: the work is in ``pycann.ge.run.model``.

Modes of ``infer`` (§6.1): ``static`` runs the feeds as given; ``dymbatch`` / ``dymhw`` /
``dymdims`` need a model with dynamic dims and record the batch / H,W / dims the feeds carry;
``dymshape`` also checks each output against ``custom_sizes`` (bytes), as ais_bench's output
buffers would. On a gear model (``--dynamic_batch_size`` / ``--dynamic_image_size`` /
``--dynamic_dims``) the setting must be one of its gears (``dymbatch`` needs batch gears,
``dymhw`` image-size gears, ``dymdims`` the shapes of any gear): otherwise ``RuntimeError``
listing the gears. The session never selects a gear on the model (``LoadedModel`` matches the
feeds against its gears), so sessions sharing nothing stay independent. A model compiled with
``-1`` / ``lo~hi`` ranges runs any shape it accepts in every dynamic mode.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pycann.errors import InputError
from pycann.ge.run.model import LoadedModel, TensorInfo

MODES = ("static", "dymbatch", "dymhw", "dymdims", "dymshape")
_ACL_JSON_APPLIED = [False]
_ACL_JSON_LOCK = threading.Lock()  # (two sessions made at once apply one acl.json once)


def _apply_acl_json(cfg: Any) -> None:
    """ais_bench hands ``acl_json_path`` to ``aclInit``, once until its ``aclFinalize``
    (``InferSession.finalize``): start the dump and the profiler its acl.json asks for, as
    ``acl.init(path)`` does (docs/profiling.md)."""
    with _ACL_JSON_LOCK:
        if _ACL_JSON_APPLIED[0]:
            return
        _ACL_JSON_APPLIED[0] = True
    if cfg.profiling_enabled:
        from pycann import profiler

        profiler.configure_from_acl_json(cfg.raw)
    if cfg.dump_enabled:
        from pycann.profiler import dump

        dump.configure_from_acl_json(cfg.raw)


@dataclass
class Summary:
    """``exec_time_list``: (start, end) pairs in ms since the session started, one per infer."""

    exec_time_list: list[tuple[float, float]] = field(default_factory=list)

    def times_ms(self) -> list[float]:
        """Duration of each run in ms."""
        return [end - start for start, end in self.exec_time_list]

    def stats(self) -> dict[str, float]:
        """``min``, ``max``, ``mean``, ``median``, ``p99`` of the run times (ms), as ais_bench reports."""
        return latency_stats(self.times_ms())


def latency_stats(times: Sequence[float]) -> dict[str, float]:
    """ais_bench's summary numbers for a list of ms (all 0 for an empty list)."""
    if not times:
        return {"min": 0.0, "max": 0.0, "mean": 0.0, "median": 0.0, "p99": 0.0}
    a = np.asarray(times, dtype=np.float64)
    return {"min": float(a.min()), "max": float(a.max()), "mean": float(a.mean()),
            "median": float(np.median(a)), "p99": float(np.percentile(a, 99))}


def parse_dims(text: str) -> dict[str, list[int]]:
    """``"x:1,3,224,224;y:1,16"`` (ais_bench ``--dymDims`` / ``--dymShape``) -> {name: dims}."""
    out: dict[str, list[int]] = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        name, sep, dims = part.rpartition(":")
        if not sep:
            raise ValueError(f"invalid dims '{part}': expected name:d1,d2,...")
        values = []
        for d in filter(None, (d.strip() for d in dims.split(","))):
            try:
                v = int(d)
            except ValueError:
                raise ValueError(f"invalid dims '{part}': '{d}' is not an integer (expected name:d1,d2,...)") from None
            if v < 0:  # (a concrete shape: -1 "any" is atc's --input_shape, not a shape to run)
                raise ValueError(f"invalid dims '{part}': {v} is negative (give the concrete shape to run)")
            values.append(v)
        out[name] = values
    return out


class InferSession:
    """Load a model (``.om``, or ``.onnx`` compiled in memory) on a device and run it.

    ``InferSession(device_id, model_path, acl_json_path=None, debug=False, loop=1)`` as in
    ais_bench. Only device 0 (the host CPU) exists. Raises ``OmFormatError`` for a bad file,
    ``InputError`` for wrong inputs at ``infer``/``run`` time.
    """

    def __init__(
        self,
        device_id: int,
        model_path: str | os.PathLike[str],
        acl_json_path: str | None = None,
        debug: bool = False,
        loop: int = 1,
    ) -> None:
        if isinstance(device_id, bool) or not isinstance(device_id, (int, np.integer)):
            raise TypeError(f"device_id must be an int (a device number, e.g. 0), not {type(device_id).__name__} "
                            f"{device_id!r}")
        from pycann.config import device_count

        count = device_count()  # (acl.rt's and torch.npu's devices: all run on the host CPU)
        if not 0 <= int(device_id) < count:
            raise ValueError(f"device {device_id} does not exist: there are {count} device(s), ids 0..{count - 1} "
                             "(PYCANN_DEVICE_COUNT sets how many)")
        self.device_id = device_id
        self.model_path = os.fspath(model_path)
        self.loop = max(1, int(loop))
        self.debug = debug
        self.acl_config: Any = None
        if acl_json_path:
            from pycann.acl._config import parse_config

            self.acl_config = parse_config(acl_json_path)
            _apply_acl_json(self.acl_config)
        self._model: LoadedModel | None = LoadedModel.from_file(self.model_path)
        self._summary = Summary()
        self._t0 = time.perf_counter()
        self.dym: dict[str, Any] = {}
        self.custom_outsize: list[int] = []

    def __repr__(self) -> str:
        """``<InferSession 'm.om' device 0: inputs x float32[1,3,-1,-1]; outputs y float32[1,5]>``."""
        if self._model is None:
            return f"<InferSession {self.model_path!r} (freed)>"

        def io(infos: list[TensorInfo]) -> str:
            return "; ".join(f"{i.name} {i.datatype}[{','.join(str(d) for d in i.shape)}]" for i in infos)
        return (f"<InferSession {self.model_path!r} device {self.device_id}: inputs {io(self.get_inputs())}; "
                f"outputs {io(self.get_outputs())}>")

    @property
    def model(self) -> LoadedModel:
        if self._model is None:
            raise RuntimeError("the session's resources were freed (free_resource was called)")
        return self._model

    def get_inputs(self) -> list[TensorInfo]:
        """Inputs with ``name``, ``shape`` (-1 for dynamic dims), ``datatype``, ``format``, ``size``."""
        return list(self.model.inputs)

    def get_outputs(self) -> list[TensorInfo]:
        """Outputs, described as ``get_inputs``."""
        return list(self.model.outputs)

    def _dynamic_positions(self) -> list[tuple[int, int]]:
        return [(i, k) for i, info in enumerate(self.model.inputs) for k, d in enumerate(info.shape) if d == -1]

    def _check_mode(self, mode: str, shapes: list[tuple[int, ...]], custom_sizes: Any) -> list[int]:
        """Checks ``mode`` against the model and records its setting; returns the output byte caps
        of a ``dymshape`` call (``[]`` for other modes)."""
        if mode not in MODES:
            raise RuntimeError(f"wrong infer_mode:{mode}, only support {', '.join(MODES)}")
        if mode == "static":
            self.set_staticbatch()
            return []
        dyn = self._dynamic_positions()
        if not dyn and mode != "dymshape":
            raise RuntimeError(f"infer mode {mode} needs a model with dynamic dims; this model is static")
        if mode == "dymbatch":
            if not any(k == 0 for _, k in dyn):
                raise RuntimeError("dymbatch: no input of the model has a dynamic batch dim")
            self.set_dynamic_batchsize(shapes[0][0] if shapes and shapes[0] else 1)
        elif mode == "dymhw":
            four = [(s, info) for s, info in zip(shapes, self.model.inputs) if len(s) == 4]
            if not four:
                raise RuntimeError("dymhw: the feeds have no 4-D (NCHW / NHWC) input")
            shape, info = four[0]
            # (the input's own layout: an AIPP input is NHWC whatever --input_format says)
            hi, wi = (1, 2) if info.format == "NHWC" else (2, 3)
            self.set_dynamic_hw(shape[wi], shape[hi])
        else:
            text = ";".join(f"{info.name}:{','.join(map(str, s))}" for info, s in zip(self.model.inputs, shapes))
            if mode == "dymdims":
                self.set_dynamic_dims(text)
            else:
                self.set_dynamic_shape(text)
                if isinstance(custom_sizes, int):
                    custom_sizes = [custom_sizes] * len(self.model.outputs)
                elif not isinstance(custom_sizes, list):
                    raise RuntimeError(f"custom_sizes:{custom_sizes} type:{type(custom_sizes)} invalid")
                elif len(custom_sizes) < len(self.model.outputs):
                    # (each output's buffer is sized by its entry: a missing one was never checked)
                    raise RuntimeError(f"custom_sizes gives {len(custom_sizes)} sizes for the model's "
                                       f"{len(self.model.outputs)} outputs "
                                       f"({', '.join(o.name for o in self.model.outputs)}): give one per "
                                       "output, or one int for all")
                self.set_custom_outsize(custom_sizes)
                return [int(c) for c in custom_sizes]
        return []

    def infer(
        self,
        feeds: Sequence[Any] | Mapping[str, Any],
        mode: str = "static",
        custom_sizes: int | list[int] = 100000,
        out_array: bool = True,
    ) -> list[np.ndarray]:
        """Run once (``loop`` times, keeping the last result). ``feeds`` in model input order or by name.
        ``mode``: see the module doc; a wrong mode raises ``RuntimeError`` as in ais_bench."""
        feeds = self._bare(feeds)
        if mode == "static":  # the common case: no feed shapes needed (this runs on every call)
            caps = self._check_mode(mode, [], custom_sizes)
        else:
            names = [i.name for i in self.model.inputs]
            listed = [feeds[n] for n in names if n in feeds] if isinstance(feeds, Mapping) else list(feeds)
            caps = self._check_mode(mode, [tuple(np.shape(x)) for x in listed], custom_sizes)
        outs: list[np.ndarray] = []
        for _ in range(self.loop):
            start = (time.perf_counter() - self._t0) * 1e3
            if isinstance(feeds, Mapping):
                outs = self.model.run_dict(feeds)
            else:
                outs = self.model.run(list(feeds))
            self._summary.exec_time_list.append((start, (time.perf_counter() - self._t0) * 1e3))
        if mode == "dymshape":
            # (this call's own caps: ``self.custom_outsize`` is the session's, which another thread's
            # infer may have set to its sizes meanwhile)
            for j, (o, cap) in enumerate(zip(outs, caps)):
                if np.asarray(o).nbytes > cap:
                    raise RuntimeError(f"output {j} ({self.model.outputs[j].name}) needs {np.asarray(o).nbytes} "
                                       f"bytes, more than custom_sizes {cap}; pass a larger custom_sizes "
                                       "(the bench: --outputSize)")
        return outs

    def _bare(self, feeds: Any) -> Any:
        """A bare array feeds a single-input model (as ais_bench accepts); for a model with more
        inputs it is an error naming them (iterating it would feed its rows as inputs)."""
        if not isinstance(feeds, np.ndarray):
            if isinstance(feeds, Mapping):
                return feeds
            # (None failed as "'NoneType' object is not iterable", a str fed its characters: LoadedModel.run's
            # error, before ``list(feeds)`` here)
            if isinstance(feeds, (str, bytes)) or not hasattr(feeds, "__len__") or not hasattr(feeds, "__iter__"):
                raise InputError(f"feeds must be a list of arrays in input order "
                                 f"({', '.join(i.name for i in self.model.inputs)}) or a dict by name, "
                                 f"not {type(feeds).__name__}")
            return feeds
        if len(self.model.inputs) == 1:
            return [feeds]
        raise InputError(f"a single array was given, but the model has {len(self.model.inputs)} inputs "
                         f"({', '.join(i.name for i in self.model.inputs)}): pass a list of arrays in that order "
                         "or a dict by name")

    def infer_pipeline(self, feeds_list: Sequence[Sequence[Any]], mode: str = "static",
                       custom_sizes: int | list[int] = 100000) -> list[list[np.ndarray]]:
        """``infer`` for each feed set in turn."""
        return [self.infer(f, mode, custom_sizes) for f in feeds_list]

    def infer_iteration(self, feeds: Sequence[Any] | Mapping[str, Any], in_out_list: Sequence[int] | None = None,
                        iteration_times: int = 1, mode: str = "static", custom_sizes: int | list[int] = 100000,
                        mem_copy: bool = True) -> list[np.ndarray]:
        """ais_bench's ``infer_iteration``: ``infer`` ``iteration_times`` times; before each later run,
        input ``i`` becomes the previous run's output ``in_out_list[i]`` (-1 keeps input ``i``'s feed).
        ``in_out_list`` needs one entry per input (``RuntimeError``; a non-int ``TypeError``, one outside
        -1 .. outputs-1 ``IndexError``), as ais_bench checks it. ``mem_copy`` has no effect."""
        if isinstance(iteration_times, bool) or not isinstance(iteration_times, int):
            raise TypeError(f"value:{iteration_times} is not a integer!")
        if iteration_times <= 0:
            raise ValueError(f"input value:{iteration_times} is out of range. Please check.")
        links = list(in_out_list or [])
        names = [i.name for i in self.model.inputs]
        if len(links) != len(names):
            raise RuntimeError(f"inputs' amount and length of in_out_list not matched! in_out_list has {len(links)} "
                               f"entries, the model has {len(names)} inputs ({', '.join(names)})")
        for j in links:
            if isinstance(j, bool) or not isinstance(j, int):
                raise TypeError(f"in_out_list reused_index:{j} is not a integer!")
            if not -1 <= j < len(self.model.outputs):
                raise IndexError(f"in_out_list[{links}] out of range, length range is (-1, {len(self.model.outputs)})")
        feeds = self._bare(feeds)
        current = [feeds[n] for n in names if n in feeds] if isinstance(feeds, Mapping) else list(feeds)
        outs = self.infer(current, mode, custom_sizes)
        for _ in range(iteration_times - 1):
            current = [outs[j] if j >= 0 else x for x, j in zip(current, links)]
            outs = self.infer(current, mode, custom_sizes)
        return outs

    def run(self, output_names: Any, input_feed: Any = None, *, out_array: bool | None = None) -> list[np.ndarray]:
        """ONNX Runtime style ``run(output_names, {name: array})`` (all outputs if ``output_names``
        is None), or ais_bench's low-level ``run(feeds, out_array=False)``, its flag given by position
        or by name (results are host arrays either way)."""
        if out_array is not None:
            if input_feed is not None:
                raise TypeError("run(feeds, out_array=...) is ais_bench's form: it takes no input_feed; "
                                "ONNX Runtime's form is run(output_names, {name: array})")
            input_feed = bool(out_array)
        if isinstance(output_names, Mapping) and (input_feed is None or isinstance(input_feed, bool)):
            return self.model.run_dict(output_names)  # run({name: array}): the feeds, all outputs
        if input_feed is None or isinstance(input_feed, bool):
            return self.model.run(list(self._bare(output_names)))
        outs = self.model.run_dict(input_feed)
        if not output_names:
            return outs
        names = [o.name for o in self.model.outputs]
        missing = [n for n in output_names if n not in names]
        if missing:
            raise InputError(f"unknown output names {missing}; the model's outputs are {names}")
        return [outs[names.index(n)] for n in output_names]

    def _gear(self, what: str, kind: str | None, values: list[int] | None = None,
              shapes: Mapping[str, Sequence[int]] | None = None) -> dict[str, Any]:
        """``{"gear": index}`` of the gear with profile ``values`` (of ``kind``) or these input
        ``shapes``; ``{}`` without gears. Raises ``RuntimeError`` listing the gears."""
        g = self.model.gears
        if g is None:
            return {}
        if kind is not None and g.kind != kind:
            from pycann.ge.compile.gears import OPTION

            raise RuntimeError(f"{what}: the model was compiled with {g.option}, not {OPTION[kind]}; "
                               f"its gears are: {g.listing()}")
        for i, (profile, gear) in enumerate(zip(g.profiles, g.shapes)):
            if values is not None and profile == values:
                return {"gear": i}
            if shapes is not None and all(gear.get(n, tuple(s)) == tuple(s) for n, s in shapes.items()) \
                    and any(n in gear for n in shapes):
                return {"gear": i}
        raise RuntimeError(f"{what} matches no gear of this model ({g.option}); the gears are: {g.listing()}")

    # ais_bench's setters: they record the dynamic setting (the feeds carry the actual shapes)
    def set_staticbatch(self) -> None:
        self.dym = {}

    def set_dynamic_batchsize(self, batch: int) -> None:
        """Record batch ``batch`` (a gear model must have it as a ``--dynamic_batch_size`` gear)."""
        self.dym = {"batch": int(batch), **self._gear(f"batch {int(batch)}", "batch", values=[int(batch)])}

    def set_dynamic_hw(self, w: int, h: int) -> None:
        """Record H, W (a gear model must have them as a ``--dynamic_image_size`` gear)."""
        self.dym = {"hw": (int(h), int(w)), **self._gear(f"hw {int(h)}x{int(w)}", "image_size", values=[int(h), int(w)])}

    def _named_inputs(self, text: str, option: str) -> dict[str, list[int]]:
        """``parse_dims(text)``; raises ``InputError`` for a name that is no input of the model
        (ignored, it left the input it meant unset, and the run failed on that one instead)."""
        parsed = parse_dims(text)
        names = [i.name for i in self.model.inputs]
        unknown = [n for n in parsed if n not in names]
        if unknown:
            raise InputError(f"{option} '{text}': {', '.join(repr(n) for n in unknown)} is no input of the model; "
                             f"its inputs are {names}")
        return parsed

    def set_dynamic_dims(self, dims: str) -> None:
        """Record ``"name:d1,d2;..."`` shapes (a gear model must have them as one of its gears)."""
        parsed = self._named_inputs(dims, "dymDims")
        self.dym = {"dims": parsed, **self._gear(f"dims {dims}", None, shapes=parsed)}

    def set_dynamic_shape(self, shape: str) -> None:
        self.dym = {"shape": self._named_inputs(shape, "dymShape")}

    def set_custom_outsize(self, sizes: list[int]) -> None:
        self.custom_outsize = [int(s) for s in sizes]

    def set_loop_count(self, loop: int) -> None:
        self.loop = max(1, int(loop))

    def get_max_dym_batchsize(self) -> int:
        """The largest batch gear, or the upper bound of the batch range given at compile time
        (-1 if unbounded or static)."""
        g = self.model.gears
        if g is not None:
            return max(p[0] for p in g.profiles) if g.kind == "batch" else -1
        for info in self.model.inputs:
            r = self.model.input_ranges.get(info.name, [])
            if info.shape and info.shape[0] == -1 and r and isinstance(r[0], list):
                return int(r[0][1])
        return -1

    def input_shapes(self) -> list[list[int]]:
        """Concrete input shapes under the current dynamic setting (what bench feeds); -1 stays
        where nothing set it."""
        shapes = []
        gear = self.model.gears.shapes[self.dym["gear"]] if "gear" in self.dym and self.model.gears else {}
        for info in self.model.inputs:
            s = list(info.shape)
            if info.name in gear:
                shapes.append(list(gear[info.name]))
                continue
            if "batch" in self.dym and s and s[0] == -1:
                s[0] = self.dym["batch"]
            if "hw" in self.dym and len(s) == 4:
                hi, wi = (1, 2) if self.model.input_format == "NHWC" else (2, 3)
                s[hi] = self.dym["hw"][0] if s[hi] == -1 else s[hi]
                s[wi] = self.dym["hw"][1] if s[wi] == -1 else s[wi]
            for key in ("dims", "shape"):
                if info.name in self.dym.get(key, {}):
                    s = list(self.dym[key][info.name])
            shapes.append(s)
        return shapes

    # ais_bench's tensor helpers: its low-level calls (``run``, ``infer(out_array=False)``) return
    # aclruntime Tensors on the device, which apps move with these; pycann's results are numpy arrays
    # in host memory already, so they pass through
    @staticmethod
    def convert_tensors_to_host(tensors: Sequence[Any]) -> None:
        """ais_bench's ``Tensor.to_host`` on each: nothing to move (the results are host arrays)."""

    @staticmethod
    def convert_tensors_to_arrays(tensors: Sequence[Any]) -> list[np.ndarray]:
        """The results as numpy arrays (``np.array(tensor)`` in ais_bench)."""
        return [np.asarray(t) for t in tensors]

    def create_tensor_from_arrays_to_device(self, arrays: Any) -> np.ndarray:
        """A feed for ``run`` / ``infer``: the array, contiguous (ais_bench copies it to the device)."""
        return np.ascontiguousarray(arrays)

    def set_context(self) -> None:
        """ais_bench makes the session's ACL context current for the calling thread; pycann's
        sessions need none."""
        _ = self.model  # (a freed session raises, as any call on it)

    def summary(self) -> Summary:
        return self._summary

    def reset_summaryinfo(self) -> None:
        self._summary = Summary()

    def free_resource(self) -> None:
        """Release the model; later calls raise ``RuntimeError``."""
        self._model = None

    @staticmethod
    def finalize() -> None:
        """ais_bench's process-wide cleanup (its ``aclFinalize``): writes what a dump or profiler
        started from ``acl_json_path`` collected (else that happens at interpreter exit)."""
        with _ACL_JSON_LOCK:
            applied, _ACL_JSON_APPLIED[0] = _ACL_JSON_APPLIED[0], False  # (a later session applies its acl.json again)
        if applied:
            from pycann import profiler

            profiler.finalize()
