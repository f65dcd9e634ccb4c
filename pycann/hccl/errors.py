"""HCCL's failures as exceptions carrying an ``HcclResult`` code.

The C-style API (``pycann.hccl.api``) turns them into return codes; the torch backend lets them
propagate (they subclass ``RuntimeError``, as torch's own collective errors do).
"""

from __future__ import annotations

from pycann.hccl.constants import HcclResult


class HcclError(RuntimeError):
    """A failed HCCL call: ``code`` is its ``HcclResult``."""

    def __init__(self, code: HcclResult, message: str) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.detail = message


class HcclTimeout(HcclError):
    """A peer did not arrive within the configured timeout (names the missing ranks)."""

    def __init__(self, message: str) -> None:
        super().__init__(HcclResult.HCCL_E_TIMEOUT, message)


class HcclRemoteError(HcclError):
    """A peer failed or disappeared during a collective."""

    def __init__(self, message: str) -> None:
        super().__init__(HcclResult.HCCL_E_REMOTE, message)


class HcclMismatch(HcclError):
    """Ranks called different collectives (op, shape, dtype, root or reduce op differ)."""

    def __init__(self, message: str) -> None:
        super().__init__(HcclResult.HCCL_E_PARA, message)
