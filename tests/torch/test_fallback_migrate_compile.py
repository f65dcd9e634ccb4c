"""CPU fallback (torch_npu's warning text, TORCH_NPU_FALLBACK_CPU_DISABLE, the report), the CUDA
migration and pycann-run's torch_npu shim (subprocesses: the migration patches torch), and
torch.compile(backend="npu") against eager CPU results."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import pycann.torch  # noqa: E402
from pycann.torch import FallbackDisabledError, Provider  # noqa: E402
from pycann.torch.compile import graph_report, reset_graph_report  # noqa: E402
from tests.shared_paths import shared  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = shared("samples/torch_npu")


def _fallback_op() -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.arange(1.0, 7.0).reshape(2, 3)
    return x, torch.special.i0e(x)  # aten::special_i0e: no pycann op, falls back


def test_fallback_warns_once_with_torch_npu_text_and_is_reported() -> None:
    pycann.torch.reset()
    x, ref = _fallback_op()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got = torch.special.i0e(x.npu())
        torch.special.i0e(x.npu())
    msgs = [str(m.message) for m in w if "CAUTION" in str(m.message)]
    assert len(msgs) == 1 and "is not currently supported on the NPU backend and will fall back to run on the CPU" in msgs[0]
    assert "(function npu_cpu_fallback)" in msgs[0]
    torch.testing.assert_close(got.cpu(), ref)
    fb = [s for s in pycann.torch.report().fallbacks if "i0e" in s.name]
    assert fb and fb[0].calls == 2 and fb[0].provider is Provider.FALLBACK
    assert "i0e" in pycann.torch.report().format()
    rep = pycann.torch.report()
    assert 0.0 < rep.share(fb[0].name) == rep.share(fb[0]) <= 1.0  # by name, as the table prints it
    with pytest.raises(KeyError, match="no op named"):
        rep.share("aten::not_an_op")


def test_fallback_disabled_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_NPU_FALLBACK_CPU_DISABLE", "1")
    x, _ = _fallback_op()
    with pytest.raises(FallbackDisabledError, match="ERR01007.*i0e"):
        torch.special.i0e(x.npu())
    torch.relu(x.npu())  # ops with a kernel still run


def _run(code_or_args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    e = dict(os.environ, PYTHONPATH=str(ROOT), PYCANN_TORCH_REPORT="0", **(env or {}))
    return subprocess.run([sys.executable, *code_or_args], capture_output=True, text=True, env=e, timeout=300)


MIGRATION = r"""
import torch, pycann.torch
from pycann.torch.contrib import transfer_to_npu  # noqa: F401
assert torch.cuda.is_available() and torch.cuda.device_count() == torch.npu.device_count()
t = torch.ones(2).to(0)                       # .to(int) means a device index
assert t.device == torch.device("npu", 0), t.device
d = torch.device("cuda:0")
assert torch.zeros(2, device=d).device.type == "npu"
assert torch.ones(2).to("cuda").is_cuda and torch.ones(2).cuda().device.type == "npu"
m = torch.nn.Linear(2, 2).cuda()
assert m.weight.device.type == "npu"
with torch.cuda.amp.autocast():
    assert (t[None] @ t[:, None]).dtype == torch.float16
import io
buf = io.BytesIO()
torch.save({"w": torch.arange(3.0)}, buf)
for loc in ("cuda:0", "cuda", torch.device("cuda"), lambda s, l: s.cuda(), {"cpu": "cuda:0"}):
    buf.seek(0)
    w = torch.load(buf, map_location=loc)["w"]
    assert w.device.type == "npu" and torch.equal(w.cpu(), torch.arange(3.0)), (loc, w.device)
assert isinstance(torch.cuda.device(0), torch.cuda.device) and torch.cuda.device(0).idx == 0
assert torch.UntypedStorage(4).cuda().device.type == "npu"
from pycann.torch.migrate import map_backend
assert map_backend("nccl") == "hccl" and map_backend("cpu:gloo,cuda:nccl") == "cpu:gloo,npu:hccl"
@torch.jit.script
def f(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1
assert torch.equal(f(torch.ones(2)), torch.full((2,), 3.0))
import torch.distributed as dist
assert getattr(dist.init_process_group, "__wrapped__", None) is not None
print("OK")
"""


def test_migration_traps(tmp_path: Path) -> None:
    app = tmp_path / "migrated.py"  # a file: torch.jit.script reads the function's source
    app.write_text(MIGRATION, encoding="utf-8")
    r = _run([str(app)])
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-3000:]


def test_pycann_run_migrate_sample() -> None:
    sample = SAMPLES / "migrate_cuda.py"
    if not sample.exists():
        pytest.skip("shared samples not present")
    r = _run(["-m", "pycann.tools.run", str(sample)])
    assert r.returncode == 0, r.stderr[-3000:]
    assert "device of parameters: npu:0" in r.stdout


def test_pycann_run_shim_names() -> None:
    code = ("import torch_npu, torch, torchair\nfrom torch_npu.contrib import transfer_to_npu\n"
            "import pycann.torch\nassert torch_npu.npu is torch.npu and torch_npu.report is pycann.torch.report\n"
            "assert callable(torchair.get_npu_backend(compiler_config=torchair.CompilerConfig()))\n"
            "import importlib.util\nassert importlib.util.find_spec('torch_npu') is not None  # HF-style detection\n"
            "assert torch.npu.is_available() and torch.accelerator.current_accelerator().type == 'npu'\n"
            "print('OK')\n")
    app = ROOT / "tests" / "torch" / "_shim_app.py"
    app.write_text(code, encoding="utf-8")
    try:
        r = _run(["-m", "pycann.tools.run", str(app)])
    finally:
        app.unlink()
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-3000:]


def test_compile_backend_matches_eager() -> None:
    torch._dynamo.reset()  # a fresh Dynamo cache: else earlier compiles of Sequential make shapes symbolic
    reset_graph_report()
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                            torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 4)).eval()
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        ref = m(x)
        got = torch.compile(m.npu(), backend="npu")(x.npu())
    assert got.device.type == "npu"
    torch.testing.assert_close(got.cpu(), ref, rtol=1e-4, atol=1e-5)
    recs = graph_report()
    assert recs and recs[0].compiled and recs[0].calls == 1 and isinstance(recs[0].compile_seconds, float)



class _Positions(torch.nn.Module):
    """GPT-2's position embedding: a tensor the graph makes on its input's device."""

    def __init__(self) -> None:
        super().__init__()
        self.wte = torch.nn.Embedding(10, 4)
        self.wpe = torch.nn.Embedding(6, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        return self.wte(ids) + self.wpe(pos) + torch.ones(4, device="npu")


def test_compile_lowers_tensors_made_on_the_npu_inside_the_graph() -> None:
    """Dynamo records ``device=ids.device`` as ``npu:0``; the export runs on host tensors, so the
    lowering must make those tensors there too (they made every GPT-2 / BERT graph run eagerly,
    reported as "ONNX lowering failed: ... npu:0 and cpu!")."""
    torch._dynamo.reset()
    reset_graph_report()
    torch.manual_seed(0)
    m = _Positions().eval()
    ids = torch.tensor([[1, 2, 3, 9, 0]])
    with torch.no_grad():
        ref = m.wte(ids) + m.wpe(torch.arange(5).unsqueeze(0)) + 1
        got = torch.compile(m.npu(), backend="npu")(ids.npu())
    assert got.device.type == "npu"
    torch.testing.assert_close(got.cpu(), ref)
    recs = graph_report()
    assert recs and all(r.compiled for r in recs), pycann.torch.compile.format_graph_report()


def test_a_graph_break_on_npu_tensors_breaks_as_on_cpu() -> None:
    """``float(y.sum())`` breaks the graph; the ops around it run eagerly through pycann's Python
    kernel, which Dynamo must not try to compile (it did: more graphs than on the CPU, and
    "does not know how to trace" warnings)."""
    import warnings

    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        s = float(y.sum())
        return y + s

    graphs = {}
    for dev in ("cpu", "npu"):
        torch._dynamo.reset()
        count = [0]

        def backend(gm: torch.fx.GraphModule, example: object, count: list[int] = count) -> object:
            count[0] += 1
            return gm.forward

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = torch.compile(f, backend=backend)(torch.arange(4.0, device=dev))
        torch.testing.assert_close(out.cpu(), torch.arange(4.0) * 2 + 12)
        graphs[dev] = (count[0], [str(w.message)[:80] for w in caught])
    assert graphs["npu"] == graphs["cpu"], graphs


def test_compile_builds_dict_tag_guards_and_restores_dynamo_setting() -> None:
    """The npu backend has Dynamo build its frame's guards with recursive dict tags (cheaper
    per call, pycann/torch/compile ``_cheap_module_guards``), and only its frames: the setting is
    back to the user's value after each compile. A new input shape still recompiles, right values."""
    import torch._dynamo.config as dynamo_config
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.bn = torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.bn(self.conv(x)))

    torch._dynamo.reset()
    reset_graph_report()
    torch.manual_seed(0)
    m = Net().eval()
    before = dynamo_config.use_recursive_dict_tags_for_guards
    x1, x2 = torch.randn(1, 3, 8, 8), torch.randn(1, 3, 10, 10)
    with torch.no_grad():
        ref1, ref2 = m(x1), m(x2)
        c = torch.compile(m.npu(), backend="npu")
        got1 = c(x1.npu())
        assert dynamo_config.use_recursive_dict_tags_for_guards == before
        got2 = c(x2.npu())  # a second shape: Dynamo's input guards fail, a new graph
        assert dynamo_config.use_recursive_dict_tags_for_guards == before
    torch.testing.assert_close(got1.cpu(), ref1, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got2.cpu(), ref2, rtol=1e-4, atol=1e-5)
    entries = _debug_get_cache_entry_list(Net.forward.__code__)
    assert entries and all("tag_safe=(True, True)" in str(e.guard_manager) for e in entries)
    assert len(graph_report()) == 2

def test_compile_follows_weights_changed_after_compiling() -> None:
    """The GE plan embeds the parameters as constants; Dynamo guards them by metadata only. After
    an in-place write (optimizer step, ``load_state_dict``), a ``.data`` swap or a replaced
    Parameter, the compiled model must give eager's new answer (it gave the old weights' answer,
    off by 13 on ResNet-50), and an unchanged model must not rebuild its plan."""
    torch._dynamo.reset()
    reset_graph_report()
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                            torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 4)).eval().npu()
    other = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 4)).eval()
    x = torch.randn(2, 3, 8, 8).npu()
    c = torch.compile(m, backend="npu")

    def check() -> None:
        with torch.no_grad():
            torch.testing.assert_close(c(x).cpu(), m(x).cpu(), rtol=1e-4, atol=1e-4)

    with torch.no_grad():
        check()
        check()
        assert sum(r.relowers for r in graph_report()) == 0  # same weights: the plan is reused
        m[0].weight.mul_(2.0)  # in place, as an optimizer step under no_grad
        with pytest.warns(UserWarning, match="rebuilt with the new values"):
            check()
        m[1].running_mean.add_(0.5)  # a buffer
        check()
        m.load_state_dict(other.state_dict())  # copy_ into every parameter and buffer
        check()
        m[4].weight.data = torch.randn(4, 8 * 6 * 6).npu()  # storage swapped, version unchanged
        check()
        m[0].weight = torch.nn.Parameter(torch.randn(8, 3, 3, 3).npu())  # a new Parameter object
        check()
    recs = graph_report()
    assert all(r.compiled for r in recs)
    assert sum(r.relowers for r in recs) + len(recs) - 1 >= 4  # each change rebuilt a plan or recompiled
    assert "weights changed after compiling" in pycann.torch.compile.format_graph_report()


def test_compile_reports_graph_breaks_and_unsupported_ops_per_op() -> None:
    """A graph break splits the function into two graphs, both reported, with Dynamo's reason;
    a graph holding an op GE lacks runs eagerly and names the op."""
    torch._dynamo.reset()
    reset_graph_report()

    def f(x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(x) * 2
        torch._dynamo.graph_break()
        return torch.special.i0e(y) + 1  # no ONNX export / GE op for i0e: eager, reported

    x = torch.randn(4, 5)
    with torch.no_grad():
        got = torch.compile(f, backend="npu")(x.npu())
    torch.testing.assert_close(got.cpu(), torch.special.i0e(torch.relu(x) * 2) + 1)
    from pycann.torch.compile import format_graph_report, graph_breaks

    recs = graph_report()
    assert len(recs) == 2, format_graph_report()
    assert recs[0].compiled and not recs[1].compiled and recs[1].reason
    assert sum(graph_breaks().values()) >= 1
    text = format_graph_report()
    assert "graph break x" in text and "eager (" in text


MIGRATION_TWO_DEVICES = r"""
import torch, pycann.torch
from pycann.torch.contrib import transfer_to_npu  # noqa: F401
assert torch.cuda.device_count() == 2
assert torch.zeros(1, device="cuda:1").device == torch.device("npu", 1)
assert torch.ones(1).to(torch.device("cuda", 1)).device == torch.device("npu", 1)
assert torch.ones(1).cuda(1).device == torch.device("npu", 1) and torch.ones(1).to(1).device.index == 1
torch.cuda.set_device(1)
assert torch.cuda.current_device() == 1 and torch.ones(1).cuda().device == torch.device("npu", 1)
from pycann.torch.migrate import map_device
assert [map_device(d) for d in ("cuda:1", torch.device("cuda", 0), "cpu")] == [
    torch.device("npu", 1), torch.device("npu", 0), "cpu"]
import os, socket
import torch.distributed as dist, torch.nn.parallel as par
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(s.getsockname()[1]))
dist.init_process_group("nccl", rank=0, world_size=1)  # nccl -> hccl
assert dist.get_backend() == "hccl"
m = torch.nn.Linear(2, 2).cuda(1)
d = par.DistributedDataParallel(m, device_ids=["cuda:1"], output_device="cuda:1")
assert d.device_ids == [1] and d.device == torch.device("npu", 1)
d(torch.ones(3, 2).cuda(1)).sum().backward()
assert m.weight.grad is not None and m.weight.grad.device == torch.device("npu", 1)
dist.destroy_process_group()
print("OK")
"""


def test_migration_to_a_second_device() -> None:
    r = _run(["-c", MIGRATION_TWO_DEVICES], env={"PYCANN_DEVICE_COUNT": "2"})
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-3000:]


def test_openmp_wait_policy_is_set_before_torch_loads_libgomp() -> None:
    """torch's libgomp reads OMP_WAIT_POLICY once, when ``import torch`` loads it: under pycann-run
    (and when pycann.torch is imported first) pycann's policy is in place by then; an app that
    imports torch itself first is told so by ``OMP_POLICY_LATE``."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT",
                                                            "PYCANN_OMP_WAIT_POLICY")}
    from pycann.config import BRIEF_SPINCOUNT

    spin = str(BRIEF_SPINCOUNT)  # the default policy (brief) is libgomp's GOMP_SPINCOUNT
    code = "import os, torch, torch_npu, pycann.torch as t; print(os.environ.get('GOMP_SPINCOUNT'), t.OMP_POLICY_LATE)"
    r = subprocess.run([sys.executable, "-m", "pycann.tools.run", "-c", code], capture_output=True, text=True,
                       env=dict(env, PYTHONPATH=str(ROOT)), timeout=300)
    assert r.returncode == 0 and r.stdout.split()[-2:] == [spin, "False"], r.stderr[-2000:]
    r = subprocess.run([sys.executable, "-c", code.replace("torch, torch_npu,", "pycann.torch, torch,")],
                       capture_output=True, text=True, env=dict(env, PYTHONPATH=str(ROOT)), timeout=300)
    assert r.returncode == 0 and r.stdout.split()[-2:] == [spin, "False"], r.stderr[-2000:]
    r = subprocess.run([sys.executable, "-c", code.replace(", torch_npu", "")], capture_output=True, text=True,
                       env=dict(env, PYTHONPATH=str(ROOT)), timeout=300)
    assert r.returncode == 0 and r.stdout.split()[-2:] == [spin, "True"], r.stderr[-2000:]


def test_compile_a_module_after_the_cuda_migration() -> None:
    """After ``transfer_to_npu``, ``torch.cuda.StreamContext`` is torch.npu's, which Dynamo reads with
    ``isinstance`` while tracing: it must be a class (it was a function, and every module compile
    failed with a TypeError). The compiled module equals eager; StreamContext and stream work."""
    code = (
        "import torch, pycann.torch\n"
        "from pycann.torch.contrib import transfer_to_npu  # noqa: F401\n"
        "torch.manual_seed(0)\n"
        "m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).cuda()\n"
        "x = torch.randn(3, 4).cuda()\n"
        "y = torch.compile(m, backend='npu')(x)\n"
        "assert y.device.type == 'npu' and torch.allclose(y.cpu(), m(x).cpu(), atol=1e-6)\n"
        "assert isinstance(torch.cuda.StreamContext, type)\n"
        "s = torch.cuda.Stream()\n"
        "with torch.cuda.StreamContext(s) as got:\n"
        "    assert got is s and torch.cuda.current_stream() == s\n"
        "with torch.cuda.stream(s):\n"
        "    assert torch.cuda.current_stream() == s\n"
        "assert torch.cuda.current_stream() != s\n"
        "print('OK')\n")
    r = _run(["-c", code])
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-3000:]
