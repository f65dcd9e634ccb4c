""".om mutation fuzzer. Property: a mutated .om either loads and runs (returning arrays) or is
refused with a pycann error (``PycannError``; pyACL then returns a documented code, never
500000) — never another exception type, a crash or a hang."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from pycann.errors import PycannError
from pycann.ge.om import loads_om
from pycann.ge.run.model import LoadedModel
from tests.fuzz import om_mutations as omm
from tests.fuzz.budget import CORPUS, fuzz

pytestmark = pytest.mark.fuzz


def load_and_run(m: omm.Mutation) -> str:
    """``"ran"`` or ``"refused"``; any other exception propagates (a property failure)."""
    data = omm.apply(m)
    try:
        om = loads_om(data)
        lm = LoadedModel(om.graph, om.manifest)
        outs = lm.run(omm.feeds(m.base))
    except PycannError as e:
        assert str(e).strip(), f"{type(e).__name__} without a message"
        return "refused"
    assert all(isinstance(o, (np.ndarray, list)) or o is None for o in outs)
    return "ran"


def _prop(m: omm.Mutation) -> None:
    try:
        load_and_run(m)
    except Exception as e:
        raise AssertionError(f"{type(e).__name__}: {e}\nkeep as tests/fuzz/corpus/om/<name>.json: {m.to_json()}") from e


def test_unmutated_bases_run() -> None:
    for base in omm.BASES:
        assert load_and_run(omm.Mutation(base, "json", [], "dup")) == "ran"  # dup of the root dict: no-op


def test_om_mutation_fuzz() -> None:
    fuzz(omm.mutations(), _prop, examples=60)


CASES = sorted(CORPUS.glob("om/*.json"))


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_om_corpus(path: Path) -> None:
    """Regression cases (found by the fuzzer or by review); ``expect`` pins the verdict."""
    doc = json.loads(path.read_text())
    assert load_and_run(omm.Mutation.from_json(doc)) == doc.get("expect", "refused")


@pytest.fixture()
def acl_context() -> Iterator[None]:
    import pycann.acl as acl
    from pycann.acl import _state

    if _state.initialized:
        acl.finalize()
    assert acl.init() == 0 and acl.rt.set_device(0) == 0
    yield
    acl.finalize()


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_om_corpus_through_pyacl(acl_context: None, path: Path) -> None:
    """The regression cases through pyACL's load_from_mem: success or a documented code, never 500000 (a
    node with its input deleted reached the user as ACL_ERROR_INTERNAL_ERROR)."""
    import pycann.acl as acl
    from pycann.acl import constants as C

    data = omm.apply(omm.Mutation.from_json(json.loads(path.read_text())))
    model_id, ret = acl.mdl.load_from_mem(acl.util.bytes_to_ptr(data), len(data))
    assert ret != C.ACL_ERROR_INTERNAL_ERROR, acl.get_recent_err_msg()
    if ret == 0:
        assert acl.mdl.unload(model_id) == 0


def test_om_mutation_fuzz_through_pyacl(acl_context: None) -> None:
    """pyACL's load_from_mem on mutated files: success, or a documented code (never 500000)."""
    import pycann.acl as acl
    from pycann.acl import constants as C

    def prop(m: omm.Mutation) -> None:
        data = omm.apply(m)
        model_id, ret = acl.mdl.load_from_mem(acl.util.bytes_to_ptr(data), len(data))
        assert ret != C.ACL_ERROR_INTERNAL_ERROR, (acl.get_recent_err_msg(), m.to_json())
        if ret == 0:
            assert acl.mdl.unload(model_id) == 0

    fuzz(omm.mutations(), prop, examples=30)
