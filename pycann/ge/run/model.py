"""A compiled model loaded for execution: I/O descriptions, running, gears, dynamic AIPP.

Both ``.om`` files and in-memory ``CompiledModel``s load into ``LoadedModel``; the acl facade
(``pycann.acl``) and ``InferSession`` are thin wrappers over it. Input validation
(``check_feeds``) and ``TensorInfo`` live in ``pycann.ge.run.model_feeds``.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from pycann.config import PlanCacheConfig, plan_cache_config
from pycann.dtypes import TensorDesc, dtype_name, to_numpy
from pycann.errors import InputError, ShapeError
from pycann.gc_pause import gc_paused
from pycann.ge.ir import Graph
from pycann.ge.run.executor import Executor
from pycann.ge.run.model_feeds import FeedChecks, TensorInfo
from pycann.ge.run.plan_cache import CacheStats
from pycann.ge.run.specializer import Specializer, compiled_plan_holds
from pycann.kernels import kv_cache
from pycann.kernels.providers import openmp
from pycann.profiler import hooks
from pycann.runtime import signal_stack
from pycann.runtime.host_allocator import keep_freed_memory

if TYPE_CHECKING:  # the compile side, gears and dynamic AIPP load only when a model has them
    from pycann.ge.aipp.dynamic import DynamicAipp, Params
    from pycann.ge.compile.compiler import CompiledModel
    from pycann.ge.compile.gears import GearTable

log = logging.getLogger("pycann.ge.run.model")

MAX_OVERRIDE_VARIANTS = 8
"""Variants with overridable initializers fed (one per set of fed names) a model keeps, least recently
used first out: a client feeding ever other subsets would otherwise hold one compiled model each."""


UNKNOWN_RANK = -2
"""CANN's dims for a tensor of unknown rank (GE's ``UNKNOWN_RANK``): ``[-2]``, never ``[]``, which is a scalar."""


def _info(name: str, d: TensorDesc | None) -> TensorInfo:
    if d is None:
        return TensorInfo(name, [], 0, "undefined")
    # (an unknown rank reported as [] read as a scalar: get_output_size_by_index gave 4 bytes for any output)
    shape = [UNKNOWN_RANK] if d.shape is None else [x if isinstance(x, int) else -1 for x in d.shape]
    try:
        dt = to_numpy(d.dtype).name
    except TypeError:
        dt = dtype_name(d.dtype).lower()
    return TensorInfo(name, shape, d.dtype, dt)


def _owned(o: Any) -> Any:
    """``o`` with read-only arrays copied (not a KV cache's ``present``: kernels/kv_cache.py); sequences
    (lists) element-wise, empty optionals (None) as is."""
    if o is None:
        return None
    if isinstance(o, list):
        return [_owned(e) for e in o]
    o = np.asarray(o)
    # a KV cache's ``present`` is read-only by design: the next step appends to its buffer in place
    return o if o.flags.writeable or kv_cache.cache_view(o) else o.copy()


def _seed_weight_bounds(graph: Graph, table: Any) -> None:
    """Hand the NaN guard the conv weight bounds ``atc`` recorded (manifest ``weight_bounds``,
    ``compiler.weight_bounds``) for the weights as loaded. Entries that do not name a float32
    initializer of the graph, or whose bound is no number a weight has (a bool, negative, NaN, inf,
    an int past float's range: an edited file), are ignored (the guard then computes the bound itself)."""
    if not isinstance(table, list):
        return
    from pycann.kernels.providers import nan_guard

    for entry in table:
        if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str)
                and isinstance(entry[1], bool) and isinstance(entry[2], (int, float))
                and not isinstance(entry[2], bool)):
            continue
        w = graph.initializers.get(entry[0])
        if isinstance(w, np.ndarray) and w.dtype == np.float32 and not w.flags.writeable:
            try:
                part = float(entry[2])
            except OverflowError:  # (a JSON int of hundreds of digits)
                continue
            nan_guard.seed(w, entry[1], part)


class LoadedModel(FeedChecks):
    """Runs a compiled graph. Thread-safe: several threads may call ``run`` at once."""

    def __init__(
        self, graph: Graph, manifest: Mapping[str, Any] | None = None, path: str = "", *, precompile: bool = True,
        plan_cache: PlanCacheConfig | None = None, release_pages: Callable[[], None] | None = None,
    ) -> None:
        self.manifest = dict(manifest or {})
        self.path = path
        # a graph of a name another live model holds is renamed for profiles and dumps (on a copy where
        # the graph is not this load's own: a CompiledModel's, or one another live model runs)
        self.graph = graph = hooks.claim_graph_name(graph, path, self.manifest)
        self.inputs = [_info(n, graph.descs.get(n)) for n in graph.inputs]
        self.inputs = [replace(i, format=self._layout(i)) for i in self.inputs]  # compile-time format
        self.outputs = [_info(n, graph.descs.get(n)) for n in graph.outputs]
        self._in_descs = [graph.descs.get(n) for n in graph.inputs]
        self._ranges = self.manifest.get("input_ranges", {})
        # dynamic gears (--dynamic_batch_size & co.) and AIPP (--insert_op_conf): docs/aipp.md
        self.gears: GearTable | None = None
        if self.manifest.get("gears"):
            from pycann.ge.compile.gears import GearTable  # (a model without gears never imports it)

            self.gears = GearTable(self.manifest["gears"])
        self.aipp: list[dict[str, Any]] = list(self.manifest.get("aipp", []))
        self._dyn_aipp: DynamicAipp | None = None
        if any(e.get("mode") == "dynamic" for e in self.aipp):
            from pycann.ge.aipp.dynamic import DynamicAipp

            self._dyn_aipp = DynamicAipp(self.aipp)
        self._static_feeds = self._static_signature()
        _seed_weight_bounds(graph, self.manifest.get("weight_bounds"))
        n_gears = len(self.gears.profiles) if self.gears else 0
        self._release_pages = release_pages  # from_file: drops the mapped .om weights' resident pages
        keep_freed_memory()  # the CPU device keeps freed host memory for the next run (no page faults)
        # plan cache bounds and policy: ``plan_cache``, else PYCANN_PLAN_CACHE_* (pycann/config.py);
        # every gear's plan fits whatever the bound
        cfg = plan_cache or plan_cache_config()
        if cfg.max_plans < n_gears + 1:
            cfg = replace(cfg, max_plans=n_gears + 1)
        # a static model compiled here plans on its compiled graph; anything else specialises (compiler)
        planned = self._static_feeds is not None and compiled_plan_holds(graph, self.manifest)
        self.specializer = Specializer([s for _, s in self._static_feeds] if planned and self._static_feeds else None)
        self.executor = Executor(graph, self.specializer, config=cfg, memo=self.specializer)
        self.executor.release_pages = release_pages  # plans that pack weights release the originals as they go
        with gc_paused():
            if precompile and self.gears is not None:
                self.precompile_gears()
            elif precompile and not self.precompile_static():
                self.executor.prepare_generic()  # its setup at load, as ORT's session does, not in the first call
        hooks.on_model_load(self)  # model name for profiles/dumps; PYCANN_PROFILE_DIR (msprof) starts a profiler

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], plan_cache: PlanCacheConfig | None = None) -> LoadedModel:
        """Load an .om (or compile an .onnx in memory). Raises ``OmFormatError`` for bad files.
        ``plan_cache``: bounds and policy of the plan cache (default: ``config.plan_cache_config()``)."""
        p = os.fspath(path)
        if not os.path.isfile(p):  # (open()'s exception types and filename, with what to give instead)
            what, err, code = (("is a folder", IsADirectoryError, errno.EISDIR) if os.path.isdir(p) else
                               ("is not a regular file", OSError, errno.EINVAL) if os.path.exists(p) else
                               ("not found", FileNotFoundError, errno.ENOENT))
            raise err(code, f"model file {what} (working folder {os.getcwd()}; give the path of the .om atc wrote, "
                            "--output=NAME writes NAME.om, or of an .onnx)", p)
        if p.lower().endswith(".onnx"):
            from pycann.ge.compile.compiler import compile_model

            cm = compile_model(p)
            return cls(cm.graph, cm.manifest, p, plan_cache=plan_cache)
        from pycann.ge.om import load_om

        with gc_paused():
            # the weights' CRC runs on another core while the plan is built (their values are
            # only trusted once it matched: a corrupt file fails the load, whatever was built)
            om = load_om(p, verify="background")
            try:
                model = cls(om.graph, om.manifest, p, plan_cache=plan_cache, release_pages=om.release_pages)
            except BaseException:
                om.wait_verified()  # a corrupt file's error wins over what its weights did to the build
                raise
            om.wait_verified()
            if om.release_pages is not None:
                om.release_pages()  # pages the CRC touched after the plan released them
            return model

    @classmethod
    def from_compiled(cls, cm: CompiledModel, plan_cache: PlanCacheConfig | None = None) -> LoadedModel:
        return cls(cm.graph, cm.manifest, plan_cache=plan_cache)

    def run(self, feeds: Sequence[Any] | Mapping[str, Any]) -> list[np.ndarray]:
        """Run with inputs in model order (a dict by name is ``run_dict``'s; a bare array feeds a
        single-input model, as InferSession.infer takes it); returns outputs in model order."""
        signal_stack.ensure()  # (signal handlers off this thread's stack: oneDNN's JIT gemm data lives below it)
        openmp.shield_workers()  # (and none on its OpenMP workers' stacks, which run the same kernels)
        if isinstance(feeds, Mapping):  # iterating it fed its keys: "expected dtype float32, received <U1"
            return self.run_dict(feeds)
        if isinstance(feeds, np.ndarray):  # iterating it fed its rows: "received [3, 640, 640] (rank 3 ...)"
            if len(self.inputs) != 1:
                raise InputError(f"a single array was given, but the model has {len(self.inputs)} inputs "
                                 f"({', '.join(i.name for i in self.inputs)}): pass a list of arrays in that order "
                                 "or a dict by name")
            feeds = [feeds]
        elif isinstance(feeds, (str, bytes)) or not hasattr(feeds, "__len__") or not hasattr(feeds, "__iter__"):
            # (None failed inside the checks: "object of type 'NoneType' has no len()"; a str fed its characters)
            raise InputError(f"feeds must be a list of arrays in input order ({', '.join(i.name for i in self.inputs)}) "
                             f"or a dict by name, not {type(feeds).__name__}")
        built = self.executor._cache.built
        checked = self.check_feeds(feeds)
        try:
            outs = self.executor.run(checked)
        except ShapeError as e:
            if type(e) is not ShapeError:
                raise
            # the node's message says what did not fit; the caller also needs which of its inputs led there
            raise ShapeError(f"{e}; this call's inputs: {self._shapes_text(checked)} (the model takes "
                             f"{self._expected_text()}: a size the graph cannot take reached that node)", e.code) from None
        if self._release_pages is not None and self.executor._cache.built != built:
            # a new plan packed its weights (oneDNN layouts): the mapped originals can leave
            # the resident set; pages numpy kernels still read come back on the next run
            self._release_pages()
        # Never hand out the model's own constant memory (read-only, shared between runs).
        return [_owned(o) for o in outs]

    def plan_cache_stats(self) -> CacheStats:
        """Counters of the plan cache: hits, misses, plans built, generic runs, evictions, bytes."""
        return self.executor.stats()

    def run_dict(self, feeds: Mapping[str, Any]) -> list[np.ndarray]:
        """Run with inputs by name. Raises ``InputError`` naming missing or unknown inputs."""
        names = [i.name for i in self.inputs]
        unknown = [k for k in feeds if k not in names]
        missing = [n for n in names if n not in feeds]
        if unknown and not missing:
            from pycann.ge.ir.overrides import overridable  # only a feed naming a non-input gets here

            if set(unknown) <= overridable(self.graph):
                return self._overriding(unknown).run_dict(feeds)  # ONNX: a feed overrides an initializer
        if unknown or missing:
            from pycann.ge.ir.overrides import overridable

            inits = overridable(self.graph) if unknown else set()
            parts = [f"unknown {[k for k in unknown if k not in inits]}"] if set(unknown) - inits else []
            parts += [f"missing {missing}"] if missing else []
            overrides = [k for k in unknown if k in inits]
            note = f" (initializers fed to override them: {overrides})" if overrides else ""
            raise InputError(
                f"input names do not match the model: {', '.join(parts)}; the model's inputs are {names}{note}"
            )
        return self.run([feeds[n] for n in names])

    def _overriding(self, names: Sequence[str]) -> LoadedModel:
        """The model with the initializers ``names`` as inputs (pycann.ge.ir.overrides; cached)."""
        from pycann.ge.compile.compiler import override_variant

        key = tuple(sorted(names))
        variants: dict[tuple[str, ...], LoadedModel] = self.__dict__.setdefault("_variants", {})
        hit = variants.pop(key, None)  # (re-inserted: the dict's order is least recently used first)
        if hit is None:
            hit = LoadedModel(*override_variant(self.graph, key, self.manifest), self.path,
                              plan_cache=self.executor._cache.config)  # (this model's bounds, policy)
        variants[key] = hit
        while len(variants) > MAX_OVERRIDE_VARIANTS:  # (a dropped variant is freed once no call holds it)
            variants.pop(next(iter(variants)), None)
        return hit

    def timed_run(self, feeds: Sequence[Any]) -> tuple[list[np.ndarray], float]:
        t0 = time.perf_counter()
        out = self.run(feeds)
        return out, (time.perf_counter() - t0) * 1e3

    # ------------------------------------------------------------------ I/O metadata
    @property
    def input_ranges(self) -> dict[str, list[Any]]:
        """``--input_shape`` as recorded in the manifest: per input name, one entry per dim (an int,
        -1 for any, or ``[lo, hi]`` for a ``lo~hi`` range, ``hi`` -1 = unbounded)."""
        return {k: list(v) for k, v in self._ranges.items()}

    @property
    def input_format(self) -> str:
        """The compile-time ``--input_format`` (``NCHW`` when not given, as atc's default)."""
        return str(self.manifest.get("options", {}).get("input_format", "NCHW"))

    def _layout(self, info: TensorInfo) -> str:
        """``TensorInfo.format`` of an input: a 4-D input has ``--input_format`` (NCHW / NHWC; the
        uint8 source of a static AIPP input is NHWC), anything else ND."""
        if len(info.shape) != 4:
            return "ND"
        if any(e.get("input") == info.name for e in self.manifest.get("aipp", [])):
            return "NHWC"
        return self.input_format if self.input_format in ("NCHW", "NHWC") else "ND"

    def max_input_bytes(self, index: int) -> int:
        """Bytes of input ``index`` at its largest allowed shape: the largest gear, else each dynamic
        dim at its ``lo~hi`` upper bound. 0 when a dim is unbounded or the dtype has no fixed size."""
        return self._max_bytes(self.inputs[index], self._in_descs[index], self._ranges.get(self.inputs[index].name))

    def max_output_bytes(self, index: int) -> int:
        """Bytes of output ``index``: its static size, or with gears the largest over the gears'
        plans (all built at load). 0 when unknown (dynamic without gears)."""
        info = self.outputs[index]
        if info.size or self.gears is None:
            return info.size
        sizes = [0]
        names = [i.name for i in self.inputs]
        for g in range(len(self.gears.profiles)):
            feeds = self.gears.fake_feeds(g, names, self._in_descs)
            if feeds is not None:
                desc = self.executor.plan_for(feeds)[0].graph.descs.get(info.name)
                sizes.append((desc.nbytes() or 0) if desc is not None else 0)
        return max(sizes)

    def _max_bytes(self, info: TensorInfo, desc: TensorDesc | None, rng: list[Any] | None) -> int:
        if desc is None or desc.shape is None or desc.kind != "tensor":
            return 0
        try:
            dt = to_numpy(desc.dtype)
        except TypeError:
            return 0
        if dt.hasobject:
            return 0
        item = dt.itemsize
        if self.gears is not None and any(info.name in s for s in self.gears.shapes):
            return max(math.prod(s[info.name]) for s in self.gears.shapes if info.name in s) * item
        n = 1
        for k, d in enumerate(desc.shape):
            r = rng[k] if rng is not None and k < len(rng) else None
            hi = d if isinstance(d, int) else r[1] if isinstance(r, list) else -1
            if hi < 0:
                return 0
            n *= int(hi)
        return n * item

    # ------------------------------------------------------------------ dynamic gears
    def dynamic_gears(self) -> dict[str, Any] | None:
        """The gears recorded at compile time: ``{"kind": "batch" | "image_size" | "dims",
        "profiles": [[...], ...], "shapes": [{input: shape}, ...], "selected": index | None}``."""
        if self.gears is None:
            return None
        g = self.gears
        return {"kind": g.kind, "option": g.option, "profiles": [list(p) for p in g.profiles],
                "shapes": [{k: list(v) for k, v in s.items()} for s in g.shapes], "selected": g.selected}

    def _gears(self, call: str) -> GearTable:
        if self.gears is None:
            raise InputError(f"{call}: the model has no dynamic gears (compile it with --dynamic_batch_size, "
                             "--dynamic_image_size or --dynamic_dims)")
        return self.gears

    def set_dynamic_batch_size(self, batch: int) -> None:
        """Select the ``--dynamic_batch_size`` gear ``batch``. Raises ``InputError`` listing the gears."""
        self._gears("set_dynamic_batch_size").select("batch", [batch])

    def set_dynamic_hw_size(self, height: int, width: int) -> None:
        """Select the ``--dynamic_image_size`` gear ``height x width``."""
        self._gears("set_dynamic_hw_size").select("image_size", [height, width])

    def set_input_dynamic_dims(self, dims: Sequence[int]) -> None:
        """Select the ``--dynamic_dims`` gear ``dims`` (one value per ``-1`` of --input_shape)."""
        self._gears("set_input_dynamic_dims").select("dims", list(dims))

    def precompile_gears(self) -> int:
        """Build every gear's execution plan now (done at load), so each gear's first run is fast.
        Returns the number of plans built."""
        if self.gears is None:
            return 0
        names = [i.name for i in self.inputs]
        built = 0
        for i in range(len(self.gears.profiles)):
            feeds = self.gears.fake_feeds(i, names, self._in_descs)
            if feeds is not None:
                # pinned: under a byte bound smaller than the gears' plans together, each new gear's plan
                # evicted the one before, and every gear was re-planned (its calls on the generic plan
                # meanwhile) on its first call, evicting the next: a build per gear switch
                self.executor.plan_for(feeds, pin=True)
                built += 1
        self._warn_gears_over_budget()
        return built

    def _warn_gears_over_budget(self) -> None:
        """Log (warning) when the pinned gear plans alone hold more than the plan cache's byte bound:
        they stay (every gear keeps its plan), the bound then leaves no room for other plans (a smaller
        team's, ``ge/run/contention.py``); names the knob and a value that fits them."""
        held, cap = self.executor.pinned_bytes(), self.executor.stats().max_bytes
        if held <= cap:
            return
        fits = -(-held // 2**20)  # (MiB, rounded up)
        log.warning("%s: the plans of its %d gears hold %.1f MiB, above the plan cache's %.1f MiB "
                    "(PYCANN_PLAN_CACHE_BYTES, or PlanCacheConfig(max_bytes=...)); they are kept (pinned: no gear "
                    "is re-planned) and other plans find no room beside them; PYCANN_PLAN_CACHE_BYTES=%dM or "
                    "more fits them", self.path or self.graph.name, len(self.gears.profiles) if self.gears else 0,
                    held / 2**20, cap / 2**20, fits)

    def precompile_static(self) -> bool:
        """Build the plan of a fully static model now (done at load, as for gears), so that its first run does
        not pay for specialisation, kernel selection and weight packing. Skipped (returns False) when an input
        is dynamic or steers control flow by its value (a scalar whose plan depends on what is fed)."""
        if self._static_feeds is None or self.executor._control or self._dyn_aipp is not None:
            return False
        feeds = [np.zeros(shape, dtype=dt) for dt, shape in self._static_feeds]
        # its arena too: the first run would otherwise fault in every page of it (~1-2 ms a model)
        self.executor.plan_for(feeds, warm_arena=True)
        return True

    # ------------------------------------------------------------------ dynamic AIPP
    def set_dynamic_aipp(self, index: int, params: Params) -> None:
        """Set the dynamic-AIPP parameters used by the following runs.

        ``index``: the model-input index of the AIPP image input (or of its
        ``ascend_dynamic_aipp_data`` input). ``params``: a mapping of AIPP config keys
        (``input_format``, ``src_image_size_w/h``, ``crop``, ``load_start_pos_*``, ``crop_size_*``,
        ``padding``, ``*_padding_size``, ``csc_switch``, ``matrix_r*c*``, ``input_bias_*``,
        ``rbuv_swap_switch``, ``ax_swap_switch``, ``mean_chn_*``, ``min_chn_*``, ``var_reci_chn_*``)
        for every image, a list with one mapping per batch image, or an already packed
        ``kAippDynamicPara`` uint8 buffer. Raises ``InputError`` (E10001) naming the bad key.
        """
        if self._dyn_aipp is None:
            raise InputError("set_dynamic_aipp: the model has no dynamic AIPP input (aipp_mode: dynamic)")
        self._dyn_aipp.set(int(index), params)

    def aipp_info(self, index: int) -> dict[str, Any] | None:
        """The manifest's AIPP entry for model input ``index`` (image or parameter input), else None."""
        for e in self.aipp:
            if index in (e.get("input_index"), e.get("params_input_index")):
                return dict(e)
        return None
