"""Layering rule (docs/architecture.md): imports go downward only."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "pycann"
# package -> packages it must never import
FORBIDDEN = {
    "ops": ("pycann.kernels", "pycann.ge", "pycann.acl", "pycann.tools", "pycann.runtime"),
    # the kernel layer sits between ops (below) and ge (above): providers, binders, the kernel table
    "kernels": ("pycann.ge", "pycann.acl", "pycann.tools", "pycann.runtime", "pycann.torch", "pycann.amct",
                "pycann.aoe"),
    "ge": ("pycann.acl", "pycann.tools"),
    "runtime": ("pycann.ge", "pycann.acl", "pycann.tools", "pycann.ops"),
    "acl": ("pycann.tools",),
    # the PyTorch adaptor sits beside acl: it uses ge/ops/runtime, never acl or the tools
    "torch": ("pycann.acl", "pycann.tools"),
    # hccl sits beside runtime (collectives over torch.distributed); it uses acl's buffers and streams
    "hccl": ("pycann.ge", "pycann.ops", "pycann.tools"),
    # AMCT sits beside acl, above ge: it compiles and runs models, never the tools or the facade
    "amct": ("pycann.acl", "pycann.tools"),
    "dvpp": ("pycann.ge", "pycann.acl", "pycann.tools", "pycann.runtime", "pycann.ops"),
    "ocr": ("pycann.tools",),
    # the kernel kit sits below ops: it never sees graphs, the op table or the runtime
    "ascendc": ("pycann.ge", "pycann.acl", "pycann.tools", "pycann.runtime", "pycann.ops"),
    "tbe": ("pycann.ge", "pycann.acl", "pycann.tools", "pycann.runtime", "pycann.ops"),
    # the cost model reads the kit's traces; it never sees graphs, ACL or the command-line tools
    "costmodel": ("pycann.ge", "pycann.acl", "pycann.tools", "pycann.runtime"),
    # AOE sits beside amct, above ge and the cost model: it compiles, runs and prices, never the facade
    "aoe": ("pycann.acl", "pycann.tools", "pycann.torch", "pycann.hccl"),
}


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


@pytest.mark.parametrize("pkg", sorted(FORBIDDEN))
def test_layer_imports_go_downward(pkg: str) -> None:
    bad = []
    for path in (ROOT / pkg).rglob("*.py"):
        for name in _imports(path):
            if name.startswith(FORBIDDEN[pkg]):
                bad.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not bad, "\n".join(bad)


# Inside ge (docs/architecture.md, "Inside ge"): folder -> the other ge folders (or modules) it may import.
# ir/ is the shared graph; planning/ (arena lifetimes) and aipp/ (the AIPP key table) serve both sides;
# om/ stores a compiled graph; compile/ may write an .om; run/ may read one. run/ imports four compile
# modules, and only these, on purpose: ``compile.specialize`` runs SIGNATURE_PIPELINE once
# per symbolic signature, then shape inference, folding and SHAPE_CHOICES for a new input shape, and
# ``compile_model`` compiles an .onnx handed to ``LoadedModel.from_file``; ``compile.gears`` is the gear
# table a model's manifest carries; ``compile.passes.infer_shapes`` checks the shapes of a static .om that
# plans on its compiled graph (ge/run/specializer.py). run/ imports no other pass and no importer.
GE_ALLOWED = {
    "ir": (),
    "planning": ("ir",),
    "aipp": (),
    "om": ("ir",),
    "compile": ("ir", "om", "planning", "aipp"),
    "run": ("ir", "om", "planning", "aipp", "compile.compiler", "compile.specialize", "compile.gears",
            "compile.passes.infer_shapes"),
}


def _ge_targets(path: Path) -> list[str]:
    """The ge modules ``path`` imports, relative to ``pycann.ge`` (``from pycann.ge import x`` -> ``x``)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module == "pycann.ge":
            out += [f"pycann.ge.{a.name}" for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.append(node.module)
    return [n.removeprefix("pycann.ge.") for n in out if n.startswith("pycann.ge.")]


def test_ge_folders_are_known() -> None:
    """Every ge module sits in one of the folders above (only ``ge/__init__.py`` at the top): a new
    module has to choose its side."""
    ge = ROOT / "ge"
    loose = [p.name for p in ge.glob("*.py") if p.name != "__init__.py"]
    assert not loose, f"modules directly under pycann/ge: {loose}; put each in one of {sorted(GE_ALLOWED)}"
    folders = {p.name for p in ge.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == set(GE_ALLOWED), folders ^ set(GE_ALLOWED)


@pytest.mark.parametrize("folder", sorted(GE_ALLOWED))
def test_ge_imports_follow_compile_om_run(folder: str) -> None:
    allowed = (folder, *GE_ALLOWED[folder])
    bad = []
    for path in (ROOT / "ge" / folder).rglob("*.py"):
        for name in _ge_targets(path):
            if not any(name == a or name.startswith(a + ".") for a in allowed):
                bad.append(f"{path.relative_to(ROOT)} imports pycann.ge.{name}")
    assert not bad, "\n".join(bad)


def test_nothing_below_ge_imports_ge() -> None:
    """The layers GE builds on (ops, kernels, runtime, the kernel kit, the cost model) never see it."""
    below = ("ops", "kernels", "runtime", "ascendc", "tbe", "costmodel")
    for pkg in below:
        assert "pycann.ge" in FORBIDDEN[pkg], pkg
        assert (ROOT / pkg).is_dir(), pkg


def test_no_pickle_in_package() -> None:
    for path in ROOT.rglob("*.py"):
        for name in _imports(path):
            assert name.split(".")[0] not in ("pickle", "dill", "cloudpickle"), f"{path} imports {name}"
        assert "allow_pickle=True" not in path.read_text(encoding="utf-8"), path


def test_framework_importers_need_no_framework() -> None:
    """The TensorFlow and Caffe importers read files with protobuf + the frameworks' .proto files
    only (docs/importers.md): they never import TensorFlow, Caffe or the ONNX package, and, as
    the first stage of the compiler, never the stages after them."""
    banned = ("tensorflow", "caffe", "onnx", "pycann.ge.compile.compiler", "pycann.ge.run", "pycann.ge.om",
              "pycann.tools")
    folder = ROOT / "ge" / "compile" / "importers"
    paths = [*folder.glob("tensorflow*.py"), *folder.glob("caffe*.py")]
    assert len(paths) >= 5, f"no importers found under {folder}"  # a moved folder must not pass vacuously
    for path in paths:
        for name in _imports(path):
            assert not name.startswith(banned), f"{path.name} imports {name}"


def test_knowledge_bank_is_a_leaf() -> None:
    """GE reads the AOE knowledge bank on every compile: ``pycann.aoe.bank`` imports no other pycann
    module than the package's version, config, errors and the host identity, and the layers below AOE import nothing
    else of ``pycann.aoe`` (docs/aoe.md)."""
    allowed = {"pycann", "pycann.config", "pycann.errors", "pycann.host"}
    for name in _imports(ROOT / "aoe" / "bank.py"):
        assert not name.startswith("pycann") or name in allowed, f"aoe/bank.py imports {name}"
    for name in _imports(ROOT / "aoe" / "__init__.py"):
        assert not name.startswith("pycann"), f"aoe/__init__.py imports {name} (keep pycann.aoe.bank light)"
    bad = []
    for pkg in sorted(set(FORBIDDEN) - {"aoe", "acl", "torch", "amct", "hccl", "ocr"}):
        for path in (ROOT / pkg).rglob("*.py"):
            bad += [f"{path.relative_to(ROOT)} imports {n}" for n in _imports(path)
                    if n.startswith("pycann.aoe") and n != "pycann.aoe.bank"]
    assert not bad, "\n".join(bad)


def test_environment_is_read_in_config_only() -> None:
    """Environment variables are read (and written) only in ``pycann/config.py``: one declared,
    documented function per knob (docs/architecture.md)."""
    bad = []
    for path in ROOT.rglob("*.py"):
        if path == ROOT / "config.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = ""
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "putenv", "environb"):
                name = node.attr
            elif isinstance(node, ast.ImportFrom) and node.module == "os":
                name = ",".join(a.name for a in node.names if a.name in ("environ", "getenv", "putenv"))
            if name:
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno} uses os.{name}")
    assert not bad, "\n".join(bad)
