import numpy as np

from tests.ops.oracle import check_op


def test_add_broadcast() -> None:
    rng = np.random.default_rng(0)
    check_op("Add", [rng.standard_normal((2, 3, 4)).astype(np.float32), rng.standard_normal((4,)).astype(np.float32)])


def test_relu() -> None:
    check_op("Relu", [np.array([[-1.0, 0.0, 2.5]], dtype=np.float32)])
