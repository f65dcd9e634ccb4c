"""pyACL's model loaders return the documented file error codes for .om defects
(cann-interfaces.md 1.8): PARSE_MODEL for an intact container describing no runnable model,
DESERIALIZE_MODEL for a damaged container, READ_MODEL_FAILURE / GE_EXEC_MODEL_PATH_INVALID for
paths; never ACL_ERROR_INTERNAL_ERROR (500000)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import pycann
from pycann.ge.om import dumps_om
from tests.ge.test_om_check import _reverse, _set, chain_model, mutated


@pytest.fixture(scope="module")
def good() -> bytes:
    cm = pycann.compile_model(chain_model())
    return dumps_om(cm.graph, cm.manifest)


def test_acl_file_error_codes(tmp_path: Path, good: bytes, acl_ready: Any) -> None:
    import pycann.acl as acl
    from pycann.acl import constants as C

    cases = {
        "reversed.om": (mutated(good, _reverse), C.ACL_ERROR_PARSE_MODEL),
        "options.om": (mutated(good, _set("options", "NCHW")), C.ACL_ERROR_PARSE_MODEL),
        "gears.om": (mutated(good, _set("gears", [1, 2])), C.ACL_ERROR_PARSE_MODEL),
        "aipp.om": (mutated(good, _set("aipp", {"mode": "static"})), C.ACL_ERROR_PARSE_MODEL),
        "truncated.om": (good[:300], C.ACL_ERROR_DESERIALIZE_MODEL),
    }
    for name, (data, code) in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        assert acl.mdl.load_from_file(str(p)) == (0, code), name
        ptr = acl.util.bytes_to_ptr(data)
        assert acl.mdl.load_from_mem(ptr, len(data)) == (0, code), name
    assert acl.mdl.load_from_file(str(tmp_path)) == (0, C.ACL_ERROR_GE_EXEC_MODEL_PATH_INVALID)
    assert "is a directory" in acl.get_recent_err_msg()
    unreadable = tmp_path / "unreadable.om"
    unreadable.write_bytes(good)
    unreadable.chmod(0)
    try:
        open(unreadable, "rb").close()
    except PermissionError:
        assert acl.mdl.load_from_file(str(unreadable)) == (0, C.ACL_ERROR_READ_MODEL_FAILURE)
    finally:
        unreadable.chmod(0o644)
