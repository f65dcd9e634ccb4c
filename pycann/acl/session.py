"""``InferSession``: ais_bench's high-level Python API (cann-interfaces.md §6.1), plus an
ONNX Runtime-style ``run(output_names, feeds)``. A facade: the work is in ``pycann.ge.model``."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from pycann.errors import InputError
from pycann.ge.model import LoadedModel, TensorInfo

MODES = ("static", "dymbatch", "dymhw", "dymdims", "dymshape")


@dataclass
class Summary:
    """``exec_time_list``: (start, end) pairs in ms since the session started, one per infer."""

    exec_time_list: list[tuple[float, float]] = field(default_factory=list)


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
        if device_id != 0:
            raise ValueError(f"device {device_id} does not exist: pycann's CPU device is device 0")
        self.device_id = device_id
        self.model_path = os.fspath(model_path)
        self.loop = max(1, int(loop))
        self.debug = debug
        self._model: LoadedModel | None = LoadedModel.from_file(self.model_path)
        self._summary = Summary()
        self._t0 = time.perf_counter()

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

    def infer(
        self,
        feeds: Sequence[Any] | Mapping[str, Any],
        mode: str = "static",
        custom_sizes: int | list[int] = 100000,
        out_array: bool = True,
    ) -> list[np.ndarray]:
        """Run once (``loop`` times, keeping the last result). ``feeds`` in model input order or by name."""
        if mode not in MODES:
            raise RuntimeError(f"wrong infer_mode:{mode}, only support {', '.join(MODES)}")
        outs: list[np.ndarray] = []
        for _ in range(self.loop):
            start = (time.perf_counter() - self._t0) * 1e3
            if isinstance(feeds, Mapping):
                outs = self.model.run_dict(feeds)
            else:
                outs = self.model.run(list(feeds))
            self._summary.exec_time_list.append((start, (time.perf_counter() - self._t0) * 1e3))
        return outs

    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any]) -> list[np.ndarray]:
        """ONNX Runtime style: outputs named in ``output_names`` (all if None) for named inputs."""
        outs = self.model.run_dict(input_feed)
        if not output_names:
            return outs
        names = [o.name for o in self.model.outputs]
        missing = [n for n in output_names if n not in names]
        if missing:
            raise InputError(f"unknown output names {missing}; the model's outputs are {names}")
        return [outs[names.index(n)] for n in output_names]

    def summary(self) -> Summary:
        return self._summary

    def reset_summaryinfo(self) -> None:
        self._summary = Summary()

    def free_resource(self) -> None:
        """Release the model; later calls raise ``RuntimeError``."""
        self._model = None
