"""Failure injection for the plan build's weight packing (``kernels/providers/background_pack.py``)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from pycann.kernels.providers import background_pack
from pycann.kernels.providers import onednn_capi as capi

_queued = threading.local()


def fail_queued_reorders(monkeypatch: pytest.MonkeyPatch, when: Callable[[], bool] = lambda: True) -> None:
    """Every primitive executed by a queued job (a reorder a plan build queued, run by the helper or,
    at the block's end, by the building thread beside it) raises while ``when()``."""
    real_submit = background_pack._Packer.submit

    def submit(self: Any, job: Callable[[], object], keep: Any) -> background_pack.Ticket:
        def flagged() -> object:
            _queued.on = True
            try:
                return job()
            finally:
                _queued.on = False

        return real_submit(self, flagged, keep)

    real = capi.Primitive.execute

    def failing(self: capi.Primitive) -> None:
        if getattr(_queued, "on", False) and when():
            raise capi.DnnlError("dnnl_primitive_execute", 5)
        real(self)

    monkeypatch.setattr(background_pack._Packer, "submit", submit)
    monkeypatch.setattr(capi.Primitive, "execute", failing)
