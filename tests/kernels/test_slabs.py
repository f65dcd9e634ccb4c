"""The slab runner (pycann/kernels/providers/slabs.py): every part runs once, errors come back,
and the team follows the plan's OpenMP team and the size."""

from __future__ import annotations

import threading

import pytest

from pycann.kernels.providers import slabs


@pytest.mark.parametrize(("extent", "parts"), [(10, 2), (10, 3), (2, 3), (1, 2), (7, 7)])
def test_cuts_cover_the_extent_once(extent: int, parts: int) -> None:
    c = slabs.cuts(extent, parts)
    assert len(c) == min(parts, extent)
    assert [i for lo, hi in c for i in range(lo, hi)] == list(range(extent))
    assert all(hi > lo for lo, hi in c)


def test_every_part_runs_once_the_first_on_the_callers_thread() -> None:
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()

    def part(i: int):  # type: ignore[no-untyped-def]
        def f() -> None:
            with lock:
                seen.append((i, threading.get_ident()))
        return f

    slabs.run([part(i) for i in range(4)])
    assert sorted(i for i, _ in seen) == [0, 1, 2, 3]
    assert dict(seen)[0] == threading.get_ident()
    assert all(t != threading.get_ident() for i, t in seen if i)


def test_an_error_in_a_helper_part_is_raised_after_the_others_ran() -> None:
    ran: list[int] = []

    def bad() -> None:
        raise ValueError("slab 1")

    with pytest.raises(ValueError, match="slab 1"):
        slabs.run([lambda: ran.append(0), bad, lambda: ran.append(2)])
    assert ran == [0, 2]


def test_team_follows_openmp_and_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slabs.openmp, "team", lambda: 2)
    assert slabs.team(slabs.MIN_ELEMENTS) == 2
    assert slabs.team(slabs.MIN_ELEMENTS - 1) == 1
    monkeypatch.setattr(slabs.openmp, "team", lambda: 0)  # no libgomp loaded
    assert slabs.team(1 << 30) == 1
