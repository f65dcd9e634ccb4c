"""An inference service on pycann: several threads sharing one session / model id, bad dynamic
settings, and what a call in flight may meet. Each test reproduces a defect found by driving
pycann as a service would (values checked against numpy's reference of the small models)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pycann import InferSession
from tests.acl.conftest import small_ref


def test_dymshape_caps_are_per_call_not_per_session(dyn_om: Path) -> None:
    """Two threads share one session with their own ``custom_sizes``: each call's outputs are
    checked against its own sizes. (The check read the session's latest sizes: a batch-8 call
    whose run overlapped a batch-1 call with ``custom_sizes=12`` failed, "needs 96 bytes, more
    than custom_sizes 12".)"""
    s = InferSession(0, dyn_om)
    run = s.model.run
    small_done = threading.Event()

    def run_after_small(feeds: Any) -> Any:
        if np.shape(feeds[0])[0] == 8:  # the big call's run overlaps the whole small call
            assert small_done.wait(10)
        return run(feeds)

    s.model.run = run_after_small  # type: ignore[method-assign]
    big = np.ones((8, 4), np.float32)
    got: list[Any] = []
    t = threading.Thread(target=lambda: got.append(s.infer([big], mode="dymshape", custom_sizes=96)))
    t.start()
    small = s.infer([np.ones((1, 4), np.float32)], mode="dymshape", custom_sizes=12)
    small_done.set()
    t.join(20)
    assert not t.is_alive()
    assert got, "the batch-8 call failed (see the thread's exception above)"
    for o, want in zip(got[0], small_ref(big)):
        np.testing.assert_allclose(o, want, rtol=1e-6)
    assert small[0].shape == (1, 3)
    with pytest.raises(RuntimeError, match="more than custom_sizes 12"):  # a call's own caps still hold
        s.infer([big], mode="dymshape", custom_sizes=12)
