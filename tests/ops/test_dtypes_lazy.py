"""pycann.dtypes imports ml_dtypes only when one of its types is asked for (pycann/dtypes.py): the
tables answer the same as with it imported, and a float32 process never imports it."""

from __future__ import annotations

import json
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from pycann.dtypes import _ML_DTYPES, DType, bfloat16, from_numpy, is_bfloat16, to_numpy


@pytest.mark.parametrize("t", sorted(_ML_DTYPES, key=int))
def test_every_ml_dtypes_type_maps_both_ways(t: DType) -> None:
    dt = np.dtype(getattr(ml_dtypes, _ML_DTYPES[t]))
    assert to_numpy(int(t)) == dt and from_numpy(dt) == t and from_numpy(np.zeros(2, dt).dtype) == t


def test_bfloat16_checks() -> None:
    assert bfloat16() == np.dtype(ml_dtypes.bfloat16) and is_bfloat16(np.dtype(ml_dtypes.bfloat16))
    for dt in (np.float32, np.float16, np.int8, np.bool_, object, [("a", np.int32)], np.dtype("V4")):
        assert not is_bfloat16(np.dtype(dt))
    with pytest.raises(TypeError):
        from_numpy(np.dtype("V4"))
    with pytest.raises(TypeError):
        to_numpy(999)


def test_a_fresh_process_imports_ml_dtypes_only_when_asked() -> None:
    code = (
        "import json, sys, numpy as np\n"
        "from pycann.dtypes import DType, from_numpy, is_bfloat16, to_numpy\n"
        "r = {'f32': [str(to_numpy(1)), int(from_numpy(np.float32)), is_bfloat16(np.dtype(np.float16))]}\n"
        "r['before'] = 'ml_dtypes' in sys.modules\n"
        "r['bf16'] = str(to_numpy(int(DType.BFLOAT16)))\n"
        "r['after'] = 'ml_dtypes' in sys.modules\n"
        "print(json.dumps(r))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    r = json.loads(out.stdout)
    assert r == {"f32": ["float32", 1, False], "before": False, "bf16": "bfloat16", "after": True}, out.stderr
