"""Execution plans: a graph flattened into typed steps (``ge/run/plan_steps.py``) over integer slots.

A ``Plan`` gives each node its kernel from the kernel layer (``kernels.table.run_kernel``, or a
``BoundKernel`` bound at plan time for a static signature, ``kernels/bind.py``), lays out one
arena for the outputs the memory plan places, and runs the steps: as generated straight-line
code (one local per slot), or with control flow, observers or to report an error, in one
interpreter loop. Intermediate tensors are released right after their last reader, so memory
follows the memory plan's lifetimes. ``ge/run/executor.py`` builds and caches plans per signature.
The arena itself is ``ge/run/plan_arena.py``; which outputs a run copies before handing them out,
``ge/run/plan_outputs.py``.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import to_numpy
from pycann.errors import KernelError, ModelError, OperandError, PycannError
from pycann.ge.ir import Graph, free_names, node_reads
from pycann.ge.planning.candidates import INPLACE
from pycann.ge.planning.memory import MemoryPlan
from pycann.ge.run.plan_arena import Arena, ViewSpec, _warm_buffer
from pycann.ge.run.plan_outputs import _independent, _off_arena
from pycann.ge.run.plan_steps import ARENA, NORMAL, SCOPED, Step
from pycann.kernels import algorithm
from pycann.kernels.algorithm import INTERIM_CONV_TRANSPOSE, Algorithm
from pycann.kernels.bind import PREPARE
from pycann.kernels.bind_generic import PREPARE_GENERIC
from pycann.kernels.bound import BoundKernel, bound
from pycann.kernels.providers import (
    arena_ok,
    available,
    background_pack,
    nan_guard,
    omp_fork,
    openmp,
)
from pycann.kernels.providers.thread_pools import blas_single_thread, runtime_openmp, uses_openmp
from pycann.kernels.table import into_kernel, run_kernel
from pycann.ops.registry import lookup
from pycann.profiler import hooks

# The algorithm the interim plan (``interim``: the shape-generic plan serving a new signature's
# calls while that signature's own plan is built in the background) gives these ops: numpy's
# where creating a oneDNN primitive for the shape costs more than numpy's run
# (``providers.INTERIM_NUMPY_FLOPS``). On PP-OCRv4 det at 128 x 160 its two deconvolutions'
# primitives took ~10 of a ~30 ms first call (ORT runs the model in ~2 ms); the signature's own
# plan creates its primitives anyway, off the caller.
INTERIM_ALGOS: dict[tuple[str, str], Algorithm] = {
    ("", "ConvTranspose"): INTERIM_CONV_TRANSPOSE,
    ("pycann", "FusedConvTranspose"): INTERIM_CONV_TRANSPOSE,
}
_RELEASE_EVERY = 16 << 20  # bytes of packed weights between two releases of the mapped .om pages
_PATCH_OPS = frozenset({"ConvTranspose", "FusedConvTranspose"})


def _warm_patch_gemm() -> None:
    """``onednn_pointwise.warm`` when oneDNN is in use here; best effort (a load never fails on it)."""
    try:
        if available("onednn"):
            from pycann.kernels.providers import onednn_pointwise

            onednn_pointwise.warm()
    except Exception:  # noqa: BLE001 - the first call then pays the JIT, as before
        pass


class PlanClosedError(RuntimeError):
    """A run asked of a plan that was evicted and closed before the run began (the executor had
    fetched it from the cache just before another thread's build pushed it out): look it up again."""


class Plan:
    """A compiled, reusable execution plan for one (sub)graph. Thread-safe to ``run``.

    With a ``memory`` plan (static shapes), nodes whose op has an ``out_kernel`` write their
    outputs into one arena allocated once; concurrent runs each take an arena from a pool.
    ``release`` drops the mapped .om pages of weights that prepared kernels packed (every 16 MiB
    packed). ``generic_bind``: the shape-generic plan (no ``memory``) binds the constant-weight
    GEMMs of ``kernels.bind_generic.PREPARE_GENERIC`` (packed once, a primitive per row count).
    ``interim``: that plan serves new signatures only until their own plans are built: the ops
    of ``INTERIM_ALGOS`` skip per-shape primitive creation where it costs more than the call.
    """

    def __init__(self, graph: Graph, outer_names: Sequence[str] = (), memory: MemoryPlan | None = None,
                 release: Callable[[], None] | None = None, generic_bind: bool = False,
                 interim: bool = False, warm_arena: bool = False) -> None:
        self.graph = graph
        # the OpenMP team its oneDNN primitives get: oneDNN fixes it when they are created, here
        self.team = openmp.team()
        slots: dict[str, int] = {"": 0}  # slot 0 swallows omitted outputs

        def slot(name: str) -> int:
            if name not in slots:
                slots[name] = len(slots)
            return slots[name]

        self.outer = [(slot(n), n) for n in outer_names]
        self.input_slots = [slot(n) for n in graph.inputs]
        consts = [(slot(k), v) for k, v in graph.initializers.items()]
        steps: list[Step] = []
        self.arena_layout: list[list[ViewSpec]] = []
        self.arena_bytes = memory.peak_bytes if memory is not None else 0
        self._arenas: list[Arena] = []
        self.arenas_made = 0  # arenas allocated (one per concurrent run): counted in ``nbytes``
        self.const_bytes = 0  # constants this plan owns (folded for its shapes; set by Executor)
        self._arena_lock = omp_fork.fork_safe(threading.Lock())  # (a run in flight at a fork)
        self._runs = 0  # runs in flight (under ``_arena_lock``): ``close`` leaves their objects to the last
        self._closed = False
        _LIVE_PLANS.add(self)  # (its count of runs in flight is reset in a forked child)
        self.nodes = list(graph.nodes)
        self.subplans: dict[int, dict[str, Plan]] = {}
        self.overwritten: dict[int, int] = {}  # step -> input slot position its kernel writes over
        packed = 0  # constant bytes bound into prepared kernels since the last page release
        # weight reorders run on a helper thread beside the binding (kernels/providers/background_pack.py)
        with background_pack.packing():
            for idx, n in enumerate(graph.nodes):
                op = lookup(n.op_type, n.domain, n.opset, n.label())
                attrs = op.with_defaults(n.attrs, f"node {n.label()}")
                attrs["_n_outputs"] = len(n.outputs)
                choice = INTERIM_ALGOS.get((n.domain, n.op_type)) if interim else None
                if choice is not None and n.inputs and getattr(graph.descs.get(n.inputs[0]), "dtype", None) == 1:
                    attrs["_algo"] = choice  # float32 only: the bf16 modes keep oneDNN's bf16 numbers
                ins = tuple(slot(i) if i else 0 for i in n.inputs)
                for sub_attr, sub in n.subgraphs.items():
                    self.subplans.setdefault(idx, {})[sub_attr] = Plan(sub, sorted(free_names(sub)))
                if op.scoped:
                    # free names of the bodies must have slots here so run_body can read them
                    for sp in self.subplans.get(idx, {}).values():
                        for _, name in sp.outer:
                            slot(name)
                outs = tuple(slot(o) if o else 0 for o in n.outputs)
                # a kernel bound at plan time (static signature) wins over the arena: it returns its own output
                bk: BoundKernel | None = None
                prep = PREPARE.get((n.domain, n.op_type)) if memory is not None else None
                # the shape-generic plan: constant-weight GEMMs packed once, a primitive per row count
                prep_g = PREPARE_GENERIC.get((n.domain, n.op_type)) if memory is None and generic_bind else None
                # an output planned over an input's buffer needs a kernel that computes in place
                shared = memory is not None and any(o in memory.shared for o in n.outputs)
                if shared and prep is not None:
                    attrs["_in_place"] = True  # (a oneDNN conv then builds only its in-place primitive)
                if prep is not None or prep_g is not None:
                    node_consts = [graph.initializers.get(i) if i else None for i in n.inputs]
                    in_descs = [graph.descs.get(i) if i else None for i in n.inputs]
                    out_descs = [graph.descs.get(o) if o else None for o in n.outputs]
                    try:
                        bk = bound(prep(attrs, in_descs, node_consts, out_descs) if prep is not None
                                   else prep_g(attrs, in_descs, node_consts, out_descs, run_kernel(op)))  # type: ignore[misc,arg-type]
                    except PycannError:
                        raise
                    except Exception as e:  # a binder reading an input the node lacks (an edited .om): name it
                        raise ModelError(f"node {n.label()}: no kernel binds to inputs {[str(d) for d in in_descs]} "
                                         f"and outputs {[str(d) for d in out_descs]} ({type(e).__name__}: {e}); "
                                         "the node does not match its op (a damaged .om? compile the model again)") from e
                    packed += sum(c.nbytes for c in node_consts if bk is not None and isinstance(c, np.ndarray))
                    if release is not None and packed >= _RELEASE_EVERY:
                        background_pack.submit(release)  # after the queued reorders that read those pages
                        packed = 0
                # a bound kernel that can write into given outputs (``writes_out``) gets the arena too
                into = into_kernel(op) if bk is None else bk.run if bk.writes_out else None
                shared_ok = not shared or (bk is not None and bk.inplace)
                if into is not None and memory is not None and not op.scoped and n.outputs and shared_ok \
                        and all(o in memory.offsets for o in n.outputs) and arena_ok(algorithm.of(attrs)):
                    if shared:  # observers must see the input as it was before the kernel overwrote it
                        self.overwritten[len(steps)] = INPLACE[(n.domain, n.op_type)][1]
                    nhwc = attrs.get("_layout") == "NHWC"
                    steps.append(Step(into, ins, outs, attrs, n, ARENA, len(self.arena_layout), bound=bk))
                    self.arena_layout.append([self._view_spec(graph, o, memory, nhwc) for o in n.outputs])
                    continue
                kernel = bk.run if bk is not None else run_kernel(op)
                steps.append(Step(kernel, ins, outs, attrs, n, SCOPED if op.scoped else NORMAL, bound=bk))
            if memory is not None and any(n.op_type in _PATCH_OPS for n in graph.nodes):
                # ConvTransposes run unbound, on PatchDeconv's run-time-dims GEMMs: their shared
                # kernels are JIT-compiled on first use in a process (~25 ms: PP-OCRv4 det's first run
                # 56 -> 38 ms), here on the packing thread beside the binding
                background_pack.submit(_warm_patch_gemm)
            if release is not None and packed:
                # the last packed weights' mapped pages, before the first run adds its arena
                background_pack.submit(release)
        if warm_arena and memory is not None and self.arena_layout:
            # the first run's arena, its pages written now by this thread: the first run would fault
            # them in one by one, and finds them in this core's cache (GoogLeNet's first run 21.7 ->
            # 16.4 ms for +2 ms of load; written by the packing thread instead: no faster than none)
            self._arenas.append(Arena(self.arena_bytes, self.arena_layout, _warm_buffer(self.arena_bytes)))
            self.arenas_made = 1
        self.output_slots = [slot(o) for o in graph.outputs]
        self.n_slots = len(slots)
        self.slots = slots
        # release each intermediate after its last reader
        keep = set(self.output_slots) | {s for s, _ in consts} | {0}
        last: dict[int, int] = {}
        for idx, n in enumerate(graph.nodes):
            for name in node_reads(n):
                if name in slots:
                    last[slots[name]] = idx
        frees: dict[int, list[int]] = {}
        for s, idx in last.items():
            if s not in keep:
                frees.setdefault(idx, []).append(s)
        for i, st in enumerate(steps):
            st.release = tuple(frees.get(i, ()))
        self.steps = steps
        template: list[Any] = [None] * self.n_slots
        for s, v in consts:
            template[s] = v
        self.template = template
        self._fast = self._generate(set(s for s, _ in consts))
        const_slots = {s for s, _ in consts}
        self.const_outputs = {i for i, s in enumerate(self.output_slots) if s in const_slots}
        # outputs of CacheAppend (ge/run/kv_alias.py): read-only views of a KV cache buffer that the
        # next step's ``past`` is meant to be, handed out as they are (``_independent``)
        made_by = graph.producers()
        self.cache_outputs = {i for i, o in enumerate(graph.outputs)
                              if o in made_by and (made_by[o].domain, made_by[o].op_type) == ("pycann", "CacheAppend")}
        algos = [algorithm.of(st.attrs) for st in self.steps]
        # a shape-generic plan's MatMul/Conv with no recorded algorithm picks oneDNN or torch per call
        dispatched = memory is None and runtime_openmp(st.node.op_type for st, a in zip(self.steps, algos) if a is None)
        # kernels bound to oneDNN (LayerNorm, attention, pooling) say so themselves (``threads``)
        self.torch_pool = uses_openmp(algos) or any(st.openmp for st in self.steps) or dispatched
        # torch's OpenMP pool may be created inside a run of these, so the caller is never pinned
        # around them (ge/run/generic_runs._pinned_run: a pool made then would inherit the one CPU)
        self.torch_kernels = any(a is not None and a.provider == "torch" for a in algos) \
            or (dispatched and not available("onednn"))

    def _generate(self, const_slots: set[int]) -> Callable[..., list[Any]] | None:
        """Straight-line Python for the whole plan: one local variable per slot, kernels, attrs
        and constants bound as globals of the generated function. It removes the interpreter
        loop's per-step list and tuple handling (~1 us a node). Plans with control flow or
        outer-scope reads keep the loop. On any exception the caller reruns the loop, whose
        error names the node."""
        if self.outer or any(st.kind is SCOPED for st in self.steps):
            return None
        glb: dict[str, Any] = {}

        def ref(slot: int) -> str:
            if slot == 0:
                return "None"
            if slot in const_slots:
                glb[f"c{slot}"] = self.template[slot]
                return f"c{slot}"
            return f"s{slot}"

        lines = ["def _fast(feeds, views):"]
        for i, slot in enumerate(self.input_slots):
            lines.append(f"    s{slot} = feeds[{i}]")
        for i, st in enumerate(self.steps):
            glb[f"k{i}"], glb[f"a{i}"] = st.run, st.attrs
            args = "[" + ", ".join(ref(x) for x in st.inputs) + "]"
            if st.kind is ARENA:
                lines.append(f"    r = views[{st.view}]")
                lines.append(f"    k{i}({args}, a{i}, r)")
            else:
                lines.append(f"    r = k{i}({args}, a{i})")
            for j, o in enumerate(st.outputs):  # the output hand-off, as in ``_loop``
                if o and o not in const_slots:
                    lines.append(f"    s{o} = r[{j}]")
            released = [f"s{f}" for f in st.release if f not in const_slots]
            if released:
                lines.append("    " + " = ".join(released) + " = None")
        lines.append("    return [" + ", ".join(ref(x) for x in self.output_slots) + "]")
        code = "\n".join(lines)
        try:
            exec(compile(code, f"<pycann plan {self.graph.name}>", "exec"), glb)  # noqa: S102 - our own generated code
        except (SyntaxError, RecursionError, MemoryError):
            return None
        return glb["_fast"]  # type: ignore[no-any-return]

    @staticmethod
    def _view_spec(graph: Graph, name: str, memory: MemoryPlan, nhwc: bool = False) -> ViewSpec:
        d = graph.descs[name]
        shape = tuple(int(x) for x in d.shape or ())  # type: ignore[union-attr, arg-type]
        return memory.offsets[name][0], to_numpy(d.dtype), shape, nhwc and len(shape) == 4

    @property
    def nbytes(self) -> int:
        """Bytes this plan holds beyond the model: arenas, folded constants and what its bound
        kernels own (``plan_bytes``: e.g. Winograd-transformed weights). Shared packed weights
        (``onednn_packed``) belong to the model and are not counted."""
        own = sum(st.plan_bytes for st in self.steps)
        arenas = max(self.arenas_made, 1) if self.arena_layout else 0  # (the first run's, before it runs)
        return self.arena_bytes * arenas + self.const_bytes + own

    def close(self) -> None:
        """Drop the arenas, bound kernels and generated code (the plan was evicted): their native
        memory (oneDNN primitives, arena buffers) goes with the last reference. A run still in
        flight on another thread finishes on the objects it already holds: the last one to end drops
        them; a run that begins after ``close`` raises ``PlanClosedError``."""
        with self._arena_lock:
            self._arenas = []
            self._closed = True
            if self._runs:
                return
        self._drop()

    def _drop(self) -> None:
        self.steps = []
        self._fast = None
        self.template = []
        self.subplans = {}

    def _take_arena(self) -> Arena | None:
        if not self.arena_layout:
            return None
        with self._arena_lock:
            if self._arenas:
                return self._arenas.pop()
            self.arenas_made += 1
        return Arena(self.arena_bytes, self.arena_layout)

    def _give_back(self, arena: Arena | None) -> None:
        if arena is not None:
            with self._arena_lock:
                if not self._closed:  # (a closed plan's pool stays empty)
                    self._arenas.append(arena)

    def _end_run(self) -> None:
        with self._arena_lock:
            self._runs = max(0, self._runs - 1)  # (0 after a fork: ``_after_fork_in_child``)
            last = self._closed and not self._runs
        if last:
            self._drop()  # closed while this run was in flight

    def run(self, feeds: Sequence[np.ndarray], outer_env: dict[str, Any] | None = None) -> list[np.ndarray]:
        """Execute with ``feeds`` bound to the graph inputs (in order); returns the outputs. Raises
        ``PlanClosedError`` when the plan was closed (evicted) before the run began."""
        if omp_fork.stale():  # a forked child's forking thread: its libgomp pool is the parent's (hangs)
            return omp_fork.run_fresh(self.run, feeds, outer_env)
        with self._arena_lock:
            if self._closed:
                raise PlanClosedError("the plan was evicted before this run began")
            self._runs += 1
        nan_guard.new_run()  # the NaN guard's bounds proven in an earlier run (or loop iteration) stop counting
        try:
            return self._run_arena(feeds, outer_env)
        finally:
            nan_guard.end_run()
            self._end_run()

    def _run_arena(self, feeds: Sequence[np.ndarray], outer_env: dict[str, Any] | None) -> list[np.ndarray]:
        arena = self._take_arena()
        try:
            if self.torch_pool and outer_env is None:
                with blas_single_thread():  # one spinning thread pool at a time (providers doc)
                    outs = self._run(feeds, outer_env, arena)
            else:
                outs = self._run(feeds, outer_env, arena)
            if arena is not None:
                # an output may be a view of arena memory that the next run reuses: hand out a
                # copy, made before the arena goes back to the pool (another thread may take it)
                buffer = arena.buffer
                outs = [_off_arena(o, buffer) for o in outs]
        finally:
            self._give_back(arena)
        if outer_env is None:
            # callers get C-order arrays, as from ONNX Runtime (a channels-last chain may end here)
            # (a KV cache's ``present`` stays the strided view of its buffer: kernels/kv_cache.py)
            cache = self.cache_outputs
            outs = [np.ascontiguousarray(o) if isinstance(o, np.ndarray) and not o.flags.c_contiguous
                    and i not in cache else o for i, o in enumerate(outs)]
            outs = _independent(outs, feeds, self.const_outputs, cache)
        return outs

    def _run(self, feeds: Sequence[np.ndarray], outer_env: dict[str, Any] | None, arena: Arena | None) -> list[np.ndarray]:
        observers = hooks.OBSERVERS
        views = arena.views if arena is not None else []
        if self._fast is not None and not observers and len(feeds) == len(self.input_slots):
            try:
                return self._fast(feeds, views)
            except Exception:  # noqa: BLE001 - rerun on the loop below, whose error names the node
                pass
        return self._loop(feeds, outer_env, views, observers)

    def _env(self, feeds: Sequence[Any], outer_env: dict[str, Any] | None) -> list[Any]:
        """The slot list for one run: constants, then the feeds, then outer-scope values."""
        env = self.template.copy()
        for s, v in zip(self.input_slots, feeds):
            env[s] = v
        if outer_env is not None:
            for s, name in self.outer:
                env[s] = outer_env[name]
        return env

    def _loop(self, feeds: Sequence[np.ndarray], outer_env: dict[str, Any] | None, views: list[list[np.ndarray]],
              observers: tuple[hooks.NodeObserver, ...]) -> list[np.ndarray]:
        """Run the steps in order: the plan's one interpreter loop (the generated ``_fast`` is
        the same steps as straight-line code). With ``observers`` (profiler, dumper) each node is
        timed and reported; intermediates are then released only after they have seen them."""
        env = self._env(feeds, outer_env)
        clock = time.perf_counter_ns
        run_start = clock() if observers else 0
        step_index = 0
        try:
            for step_index, st in enumerate(self.steps):
                args = [env[i] for i in st.inputs]
                body = self._body_runner(step_index, env) if st.kind is SCOPED else None
                if not observers:
                    res = st.call(args, views, body)
                else:
                    seen = args
                    if step_index in self.overwritten:  # an in-place step: keep what it read
                        pos = self.overwritten[step_index]
                        seen = list(args)
                        if pos < len(seen) and isinstance(seen[pos], np.ndarray):
                            seen[pos] = seen[pos].copy()
                    t0 = clock()
                    res = st.call(args, views, body)
                    t1 = clock()
                    for obs in observers:
                        obs.on_node(st.node, seen, list(res)[: len(st.outputs)], t0, t1, self.graph.name)
                for o, r in zip(st.outputs, res):  # the output hand-off
                    env[o] = r
                for f in st.release:
                    env[f] = None
        except OperandError as e:
            if str(e).startswith("node "):
                raise
            # a kernel's operand check (native_args, operand_checks) knows the op, not the node
            n = self.nodes[step_index]
            raise OperandError(f"node {n.name} ({n.op_type}, opset {n.opset}): {e}", e.code) from e
        except PycannError:
            raise
        except Exception as e:
            raise self._kernel_error(step_index, env, e) from e
        if observers:
            run_end = clock()
            for obs in observers:
                obs.on_run(self.graph.name, run_start, run_end)
        return [env[s] for s in self.output_slots]

    def _body_runner(self, step_index: int, env: list[Any]) -> Callable[[str, Sequence[np.ndarray]], list[np.ndarray]]:
        subplans = self.subplans[step_index]

        def run_body(attr: str, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
            sp = subplans[attr]
            outer = {name: env[self.slots[name]] for _, name in sp.outer}
            return sp.run(feeds, outer)

        return run_body

    def _kernel_error(self, step_index: int, env: list[Any], e: Exception) -> KernelError:
        n = self.nodes[step_index]
        descr = []
        for name in n.inputs:
            v = env[self.slots[name]] if name and name in self.slots else None
            descr.append(f"{name}: {v.dtype}{list(v.shape)}" if isinstance(v, np.ndarray) else f"{name}: -")
        return KernelError(
            f"node {n.name} ({n.op_type}, opset {n.opset}) failed at run time with inputs "
            f"[{', '.join(descr)}]: {type(e).__name__}: {e}"
        )


_LIVE_PLANS: weakref.WeakSet[Plan] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """The runs a parent thread had in flight at the fork never end in the child (that thread is not
    there): they no longer count, so a ``close`` in the child drops the plan's kernels and arenas
    (it left them to the last run, which never came: every plan in flight at the fork leaked its
    native memory in the child), and a plan closed in the parent during such a run is dropped now."""
    for p in list(_LIVE_PLANS):
        p._runs = 0
        if p._closed:
            p._drop()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
