"""ONNX model fuzzer. Property: compiling a random small model (tests/fuzz/onnx_models.py) and
running it either works or raises a pycann error (``PycannError``: ModelError, ShapeError,
UnsupportedOpError, KernelError, InputError ...) — never another exception type or a crash.
When pycann runs a model that ONNX Runtime also runs, the outputs agree in shape, dtype and value
(``agree``: float16 within 1e-2 relative, since pycann rounds between ops where ONNX Runtime's
inserted float32 casts do not; wider floats within 1e-3; integers and bools exactly; NaN where NaN).
A value-comparing run found Reduce's keepdims=2 read one way here and another by ORT."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from pycann.errors import PycannError
from pycann.ge.compile.compiler import compile_model
from pycann.ge.om import dumps_om, loads_om
from pycann.ge.run.model import LoadedModel
from tests.fuzz.budget import CORPUS, fuzz
from tests.fuzz.onnx_models import feed_for, models

pytestmark = [pytest.mark.fuzz, pytest.mark.filterwarnings("ignore")]


def compile_and_run(model: onnx.ModelProto) -> str:
    """``"ran"`` or ``"refused"``; any other exception propagates (a property failure)."""
    feeds = feed_for(model)
    try:
        cm = compile_model(model)
        om = loads_om(dumps_om(cm.graph, cm.manifest))
        outs = LoadedModel(om.graph, om.manifest).run(list(feeds.values()))
    except PycannError as e:
        assert str(e).strip(), f"{type(e).__name__} without a message"
        return "refused"
    ref = _ort(model, feeds)
    if ref is not None:
        assert [np.shape(o) for o in outs] == [np.shape(r) for r in ref], (outs, ref)
        for i, (o, r) in enumerate(zip(outs, ref)):
            agree(np.asarray(o), np.asarray(r), f"output {i}")
    return "ran"


def agree(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """``got`` (pycann) equals ONNX Runtime's ``want`` in dtype and value, within the tolerances of the
    module docstring."""
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, ONNX Runtime {want.dtype}"
    if want.dtype.kind not in "fc":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    rtol, atol = (1e-2, 1e-3) if want.dtype.itemsize <= 2 else (1e-3, 1e-4)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol,
                               equal_nan=True, err_msg=what)


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray] | None:
    try:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.log_severity_level = 4
        sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        return list(sess.run(None, feeds))
    except Exception:  # noqa: BLE001 - ORT refusing is no verdict on pycann
        return None


def _prop(model: onnx.ModelProto) -> None:
    try:
        compile_and_run(model)
    except Exception as e:
        raise AssertionError(f"{type(e).__name__}: {e}\nkeep as tests/fuzz/corpus/onnx/<name>.onnx:\n"
                             f"{onnx.helper.printable_graph(model.graph)}") from e


def test_onnx_model_fuzz() -> None:
    fuzz(models(), _prop, examples=60)


CASES = sorted(CORPUS.glob("onnx/*.onnx"))


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_onnx_corpus(path: Path) -> None:
    """Regression models found by the fuzzer; the verdict is in the name (``*-refused`` / ``*-ran``)."""
    want = path.stem.rsplit("-", 1)[-1]
    assert compile_and_run(onnx.load(path)) == want
