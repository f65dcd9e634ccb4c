"""pycann-run: an unmodified pyACL application (``import acl``) runs on pycann; nothing is
shadowed outside the run."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pycann.tools import run as pycann_run

from .conftest import small_ref

ROOT = Path(__file__).resolve().parents[2]

APP = textwrap.dedent('''
    """A pyACL sample, untouched: its own constants, plain `import acl`."""
    import subprocess
    import sys

    import numpy as np

    import acl

    ACL_MEM_MALLOC_HUGE_FIRST = 0
    ACL_MEMCPY_HOST_TO_DEVICE = 1
    ACL_MEMCPY_DEVICE_TO_HOST = 2
    NPY_FLOAT32 = 11


    def check(ret, what):
        if ret != 0:
            raise Exception(f"{what} failed ret={ret}")


    def main(om, out_path):
        check(acl.init(), "init")
        check(acl.rt.set_device(0), "set_device")
        context, ret = acl.rt.create_context(0)
        check(ret, "create_context")
        model_id, ret = acl.mdl.load_from_file(om)
        check(ret, "load")
        desc = acl.mdl.create_desc()
        check(acl.mdl.get_desc(desc, model_id), "get_desc")
        x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
        size = acl.mdl.get_input_size_by_index(desc, 0)
        dev, ret = acl.rt.malloc(size, ACL_MEM_MALLOC_HUGE_FIRST)
        check(acl.rt.memcpy(dev, size, acl.util.numpy_to_ptr(x), x.nbytes, ACL_MEMCPY_HOST_TO_DEVICE), "h2d")
        ind = acl.mdl.create_dataset()
        acl.mdl.add_dataset_buffer(ind, acl.create_data_buffer(dev, size))
        outd = acl.mdl.create_dataset()
        outs = []
        for i in range(acl.mdl.get_num_outputs(desc)):
            n = acl.mdl.get_output_size_by_index(desc, i)
            p, ret = acl.rt.malloc(n, ACL_MEM_MALLOC_HUGE_FIRST)
            acl.mdl.add_dataset_buffer(outd, acl.create_data_buffer(p, n))
            outs.append((p, n))
        check(acl.mdl.execute(model_id, ind, outd), "execute")
        host, ret = acl.rt.malloc_host(outs[1][1])
        check(acl.rt.memcpy(host, outs[1][1], outs[1][0], outs[1][1], ACL_MEMCPY_DEVICE_TO_HOST), "d2h")
        z = acl.util.ptr_to_numpy(host, (2, 3), NPY_FLOAT32).copy()
        np.save(out_path, z)
        child = subprocess.run([sys.executable, "-c", "import acl; print(acl.__name__)"],
                               capture_output=True, text=True)
        print("child sees", child.stdout.strip())
        print("module is", acl.__name__, "argv", sys.argv[1:])
        acl.rt.free_host(host)
        for p, _ in outs:
            acl.rt.free(p)
        acl.rt.free(dev)
        acl.mdl.unload(model_id)
        acl.mdl.destroy_desc(desc)
        acl.rt.destroy_context(context)
        acl.rt.reset_device(0)
        acl.finalize()


    if __name__ == "__main__":
        main(sys.argv[1], sys.argv[2])
''')


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def test_pycann_run_subprocess(small_om: Path, tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    app.write_text(APP)
    out = tmp_path / "z.npy"
    cmd = [sys.executable, "-m", "pycann.tools.run", str(app), str(small_om), str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "module is pycann.acl" in r.stdout and "child sees pycann.acl" in r.stdout
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_allclose(np.load(out), small_ref(x)[1], rtol=1e-6)


def test_no_shadowing_without_pycann_run(tmp_path: Path) -> None:
    code = "import importlib.util, pycann.acl; s = importlib.util.find_spec('acl'); print(s and s.origin)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=60)
    assert r.returncode == 0, r.stderr
    assert "pycann" not in r.stdout


def test_in_process_run_restores_state(small_om: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    app = tmp_path / "app.py"
    app.write_text(APP.replace("child = subprocess.run(", "child = None and subprocess.run(")
                   .replace('print("child sees", child.stdout.strip())', ""))
    path_before, env_before = list(sys.path), os.environ.get("PYTHONPATH")
    rc = pycann_run.main([str(app), str(small_om), str(tmp_path / "z.npy")])
    assert rc == 0
    assert "module is pycann.acl argv" in capsys.readouterr().out
    spec = importlib.util.find_spec("acl")
    assert "acl" not in sys.modules and (spec is None or "pycann" not in str(spec.origin))
    assert sys.path == path_before and os.environ.get("PYTHONPATH") == env_before


def test_exit_codes(tmp_path: Path) -> None:
    app = tmp_path / "fail.py"
    app.write_text("import acl, sys\nsys.exit(3 if acl.init() == 0 else 4)\n")
    assert pycann_run.main([str(app)]) == 3
    from .conftest import force_finalize

    force_finalize()
    assert pycann_run.main([str(tmp_path / "missing.py")]) == 2
    assert pycann_run.main([]) == 2
    assert pycann_run.main(["-m"]) == 2


def test_run_module(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "myapp.py").write_text("import acl.rt\nprint('rt is', acl.rt.__name__)\n")
    monkeypatch.chdir(tmp_path)
    assert pycann_run.main(["-m", "myapp"]) == 0
    assert "rt is pycann.acl.rt" in capsys.readouterr().out
    sys.modules.pop("myapp", None)


def test_python_prefix_and_dash_c(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`pycann-run python app.py` and `pycann-run -c CODE` work as with the interpreter (argv, cwd on sys.path)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "helper_mod.py").write_text("VALUE = 42\n")
    app = tmp_path / "app.py"
    app.write_text("import sys, acl\nprint('app', acl.__name__, sys.argv[1:])\n")
    assert pycann_run.main(["python3", str(app), "x"]) == 0
    assert pycann_run.main(["-c", "import sys, acl, helper_mod; print('code', acl.__name__, helper_mod.VALUE, sys.argv)",
                            "y"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == ["app pycann.acl ['x']", "code pycann.acl 42 ['-c', 'y']"]
    assert pycann_run.main(["-c"]) == 2


def test_ais_bench_api_and_cli_are_pycanns(small_om: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """An ais_bench script (`from ais_bench.infer.interface import InferSession`) and its command line
    (`python -m ais_bench --model m.om`) ran into "No module named ais_bench" under pycann-run."""
    monkeypatch.chdir(tmp_path)
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    app = tmp_path / "ais_app.py"
    app.write_text("import sys, numpy as np\nfrom ais_bench.infer.interface import InferSession\n"
                   "s = InferSession(0, sys.argv[1])\nnp.save(sys.argv[3], s.infer([np.load(sys.argv[2])])[1])\n")
    assert pycann_run.main([str(app), str(small_om), str(tmp_path / "x.npy"), str(tmp_path / "z.npy")]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "z.npy"), small_ref(x)[1], rtol=1e-6)
    rc = pycann_run.main(["-m", "ais_bench", "--model", str(small_om), "--input", str(tmp_path / "x.npy"),
                          "--output", str(tmp_path), "--output_dirname", "o", "--outfmt", "NPY"])
    assert rc == 0, capsys.readouterr()
    assert "throughput 1000*batchsize.mean(2)" in capsys.readouterr().out
    np.testing.assert_allclose(np.load(tmp_path / "o" / "x_0.npy"), small_ref(x)[0], rtol=1e-6)
    assert pycann_run.main(["-m", "ais_bench", "--model", str(tmp_path / "missing.om")]) == 1
    assert not any(k == "ais_bench" or k.startswith("ais_bench.") for k in sys.modules)
