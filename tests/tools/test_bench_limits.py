"""bench/profile_ops.py --limits (issue 23 item 3): each node is held to the roofline of the measured
limits (FMA rate or memory traffic, whichever its FLOPs per byte make the lower one) and the time spent
below the item's bars is summed; bench/machine_limits.py measures positive limits with oneDNN."""

from __future__ import annotations

from typing import Any

import pytest

from pycann.kernels.providers import onednn
from tests.tools.scripts import load_script

LIMITS = {"copy_gbs": 40.0, "fma_gflops": 400.0}


def _profile_ops() -> Any:
    return load_script("bench/profile_ops.py", "bench_profile_ops")


def _node(op: str, ms: float, gflop: float, gbytes: float) -> dict[str, Any]:
    return {"op_type": op, "name": op, "out": "", "ms": ms, "gflop": gflop, "gbytes": gbytes}


def test_roofline_picks_the_binding_limit() -> None:
    po = _profile_ops()
    # 1 GFLOP over 10 MB: 100 FLOPs a byte, attainable min(400, 100 x 40) = 400 GFLOP/s; 4 ms -> 250 = 62.5 %
    assert po.rate(_node("Conv", 4.0, 1.0, 0.01), LIMITS) == ("FMA", pytest.approx(0.625))
    # a depthwise conv: 0.01 GFLOP over 0.01 GB, 1 FLOP a byte -> 40 GFLOP/s attainable; 0.5 ms -> 20 = 50 %
    assert po.rate(_node("Conv", 0.5, 0.01, 0.01), LIMITS) == ("memory", pytest.approx(0.5))
    # an op without FLOPs: 0.02 GB in 1 ms = 20 GB/s of 40
    assert po.rate(_node("Concat", 1.0, 0.0, 0.02), LIMITS) == ("memory", pytest.approx(0.5))
    assert po.rate(_node("Reshape", 0.0, 0.0, 0.0), LIMITS) is None


def test_time_below_the_bars_is_summed_per_op_type() -> None:
    po = _profile_ops()
    nodes = [_node("Conv", 4.0, 1.0, 0.01),   # 62.5 % of FMA: below 70 %
             _node("Conv", 2.0, 1.0, 0.01),   # 125 %: above
             _node("Concat", 1.0, 0.0, 0.03),  # 75 % of traffic: above 60 %
             _node("Add", 0.5, 0.0, 0.005)]   # 25 %: below
    text = po.against_limits({"nodes": nodes}, LIMITS)
    assert "| Conv | 6.00 | FMA | 83% | 4.00 |" in text
    assert "| Add | 0.50 | memory | 25% | 0.50 |" in text
    assert "| Concat | 1.00 | memory | 75% | 0.00 |" in text
    assert "Nodes below their bar: 4.50 of 7.50 ms of kernel time (60%)." in text


@pytest.mark.skipif(not onednn.available(), reason="libdnnl missing")
@pytest.mark.usefixtures("default_providers")  # (oneDNN allowed: the source names it)
def test_machine_limits_measures_positive_rates() -> None:
    ml = load_script("bench/machine_limits.py", "bench_machine_limits")
    lim = ml.measure(repeats=1, copy_mib=4, gemm=128)
    assert lim.copy_gbs > 0 and lim.fma_gflops > 0 and "oneDNN 128x128" in lim.source
    assert ml.main(["--repeats", "1", "--copy-mib", "2", "--gemm", "64"]) == 0
    with pytest.raises(SystemExit):
        ml.main(["--repeats", "0"])


def test_profile_ops_refuses_zero_runs() -> None:
    with pytest.raises(SystemExit):
        _profile_ops().main(["--model", "resnet50", "--runs", "0"])
