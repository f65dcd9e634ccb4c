"""``pycann-run app.py [args...]``: run an unmodified pyACL application on pycann.

For that run only, ``import acl`` (and ``acl.rt``, ``acl.mdl``, ...) resolves to ``pycann.acl``,
``import torch_npu`` to ``pycann.torch`` (the npu device; ``torch_npu.npu`` is ``torch.npu``,
``from torch_npu.contrib import transfer_to_npu`` applies pycann's CUDA migration) and
``import torchair`` to ``pycann.torch.torchair``, ``import amct_onnx`` to ``pycann.amct`` (AMCT's
ONNX API: ``create_quant_config``, ``quantize_model``, ``save_model``, ...) and ``ais_bench`` to pycann's
InferSession (``from ais_bench.infer.interface import InferSession``) and bench (``-m ais_bench
--model m.om``): a temporary directory holding these shim
packages goes first on ``sys.path`` and on ``PYTHONPATH`` (so child processes of the app see
them too) and is deleted afterwards. Nothing is shadowed outside ``pycann-run``
(and hccl-run's workers, which get the same shims).
``pycann-run -m package.module`` runs a module instead.
"""

from __future__ import annotations

import contextlib
import os
import runpy
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence

from pycann import config

SHIM = '''"""pycann-run shim: this run's ``import acl`` is pycann's pyACL facade."""
import sys

import pycann.acl as _acl

for _name in _acl.SUBMODULES:
    sys.modules[__name__ + "." + _name] = getattr(_acl, _name)
sys.modules[__name__] = _acl
'''

# torch_npu, torchair and amct_onnx shims: files of small packages whose modules *are* pycann's (aliased in
# sys.modules), so each pycann module is imported once whichever name the app uses.
TORCH_SHIMS = {
    "torch_npu/__init__.py": '''"""pycann-run shim: this run's ``import torch_npu`` is pycann's PyTorch adaptor."""
import sys

import pycann.torch as _t
import pycann.torch.npu as _npu

sys.modules[__name__ + ".npu"] = _npu
npu = _npu
from pycann.torch import *  # noqa: E402,F401,F403
from pycann.torch import report, reset  # noqa: E402,F401
from torch_npu import distributed as distributed  # noqa: E402,F401  (torch_npu imports it too)
from pycann.torch import __getattr__ as __getattr__  # noqa: E402,F401  (missing npu_* ops: a clear error)
__version__ = "2.13.0+pycann"
''',
    "torch_npu/contrib/__init__.py": '"""pycann-run shim: torch_npu.contrib."""\n',
    "torch_npu/distributed/__init__.py": ('"""pycann-run shim: torch_npu.distributed is pycann.hccl.npu_distributed."""\n'
                                          "import sys\n\nimport pycann.hccl.npu_distributed as _m\n\n"
                                          "sys.modules[__name__] = _m\n"),
    "torch_npu/contrib/transfer_to_npu.py": ('"""pycann-run shim: apply pycann\'s CUDA -> npu migration."""\n'
                                             "import sys\n\nimport pycann.torch.contrib.transfer_to_npu as _m\n\n"
                                             "sys.modules[__name__] = _m\n"),
    "torchair/__init__.py": ('"""pycann-run shim: torchair is pycann.torch.torchair."""\n'
                             "import sys\n\nimport pycann.torch.torchair as _m\n\nsys.modules[__name__] = _m\n"),
    # ais_bench: its Python API (``from ais_bench.infer.interface import InferSession``) is pycann's
    # InferSession, and ``python -m ais_bench --model m.om ...`` is pycann's bench
    "ais_bench/__init__.py": '"""pycann-run shim: ais_bench is pycann\'s InferSession and bench."""\n',
    "ais_bench/__main__.py": ('"""pycann-run shim: ``python -m ais_bench ...`` is ``python -m pycann.tools.bench ...``."""\n'
                              "import sys\n\nfrom pycann.tools.bench import main\n\nsys.exit(main(sys.argv[1:]))\n"),
    "ais_bench/infer/__init__.py": '"""pycann-run shim: ais_bench.infer."""\n',
    "ais_bench/infer/interface.py": ('"""pycann-run shim: ais_bench.infer.interface is pycann.acl.session."""\n'
                                     "import sys\n\nimport pycann.acl.session as _m\n\nsys.modules[__name__] = _m\n"),
    # AMCT's Python package for ONNX models is pycann.amct (the same module object)
    "amct_onnx/__init__.py": ('"""pycann-run shim: this run\'s ``import amct_onnx`` is pycann.amct."""\n'
                              "import sys\n\nimport pycann.amct as _m\n\nsys.modules[__name__] = _m\n"),
}
SHIM_ROOTS = ("acl", "torch_npu", "torchair", "amct_onnx", "ais_bench")

USAGE = ("usage: pycann-run [python] app.py [args...] | pycann-run [python] -m module [args...] | "
         "pycann-run [python] -c code [args...]")


def make_shim_dir() -> str:
    """A new temporary directory containing the ``acl``, ``torch_npu``, ``torchair``, ``amct_onnx`` and
    ``ais_bench`` shims."""
    d = tempfile.mkdtemp(prefix="pycann-run-")
    os.makedirs(os.path.join(d, "acl"))
    with open(os.path.join(d, "acl", "__init__.py"), "w", encoding="utf-8") as f:
        f.write(SHIM)
    for rel, text in TORCH_SHIMS.items():
        path = os.path.join(d, *rel.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    return d


@contextlib.contextmanager
def shims_for_children() -> Iterator[str]:
    """pycann-run's environment for the processes started inside the block (hccl-run's workers):
    the shims first on ``PYTHONPATH`` (``import torch_npu`` / ``acl`` / ``torchair`` / ``amct_onnx``
    are pycann's there) and the OpenMP wait policy set before their ``import torch``; both undone
    afterwards. Yields the shim directory."""
    shim = make_shim_dir()
    from pycann.config import apply_omp_wait_policy

    apply_omp_wait_policy()
    pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    saved_env = config.environment().get("PYTHONPATH")
    config.set_environ("PYTHONPATH", os.pathsep.join(p for p in (shim, pkg_root, saved_env) if p))
    try:
        yield shim
    finally:
        config.set_environ("PYTHONPATH", saved_env)
        shutil.rmtree(shim, ignore_errors=True)


def _shadowed(name: str) -> bool:
    return any(name == r or name.startswith(r + ".") for r in SHIM_ROOTS)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the app; returns its exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    if os.path.basename(args[0]).startswith("python") and len(args) > 1:
        args = args[1:]  # `pycann-run python app.py` as `msprof --application="python app.py"` takes it
    as_module, as_code = args[0] == "-m", args[0] == "-c"
    if (as_module or as_code) and len(args) < 2:
        print(USAGE, file=sys.stderr)
        return 2
    target = args[1] if (as_module or as_code) else args[0]
    if not (as_module or as_code) and not os.path.isfile(target):
        print(f"pycann-run: {target}: no such file", file=sys.stderr)
        return 2
    # (the shims on PYTHONPATH for the app's child processes, and the OpenMP wait policy set before the
    # app's ``import torch`` loads torch's libgomp, which reads it once: spinning workers cost
    # torch.compile's GE plans 4x on a busy host, docs/torch.md)
    with shims_for_children() as shim:
        saved_argv, saved_path = list(sys.argv), list(sys.path)
        stale = {k: sys.modules.pop(k) for k in list(sys.modules) if _shadowed(k)}
        try:
            if as_code:  # `pycann-run -c CODE`, as `python -c`: argv[0] is "-c", the current folder on sys.path
                sys.argv = ["-c"] + args[2:]
                sys.path[:0] = [shim, os.getcwd()]
                exec(compile(target, "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
            elif as_module:
                sys.argv = [target] + args[2:]
                sys.path[:0] = [shim, os.getcwd()]
                runpy.run_module(target, run_name="__main__", alter_sys=True)
            else:
                sys.argv = [target] + args[1:]
                sys.path[:0] = [shim, os.path.dirname(os.path.abspath(target))]
                runpy.run_path(target, run_name="__main__")
            return 0
        except SystemExit as e:
            code = e.code
            if code is None or isinstance(code, int):
                return code or 0
            print(code, file=sys.stderr)
            return 1
        finally:
            sys.argv, sys.path[:] = saved_argv, saved_path
            for k in [k for k in sys.modules if _shadowed(k)]:
                del sys.modules[k]
            sys.modules.update(stale)

if __name__ == "__main__":
    sys.exit(main())
