"""KV-cache decoding: a small GPT-2 with ``past_key_values`` inputs (scripts/torch_models.py's
``GPT2WithPast``, 2 layers / 64 wide, exported by torch like Hugging Face's exporters: Concat of
past K/V on the sequence axis, a sliced causal mask, ``present`` outputs) decoded greedily.
Tokens and logits against ONNX Runtime; plan-cache behaviour (the prompt and every step on the
shape-generic plan, nothing built per step). No timings."""

from __future__ import annotations

import io
import pathlib
import sys
import warnings

import numpy as np
import pytest

from pycann.config import ConfigError, PlanCacheConfig, PlanPolicy
from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "scripts"))
torch_models = pytest.importorskip("torch_models")

LAYERS, HEADS, WIDTH, VOCAB = 2, 4, 64, 97


def _export(layers: int, heads: int, width: int, vocab: int) -> bytes:
    """``GPT2WithPast`` of that size (weights scaled 0.2: greedy tokens vary step to step), exported
    by the TorchScript exporter with Hugging Face's dynamic axes."""
    torch.manual_seed(0)
    cfg = torch_models.GPT2Config(vocab_size=vocab, n_positions=128, n_embd=width, n_layer=layers, n_head=heads)
    base = torch_models.GPT2Like(cfg)
    base.init_weights(0.2)  # larger than GPT-2's 0.02: greedy tokens then vary from step to step
    model = torch_models.GPT2WithPast(base.eval()).eval()
    ids = torch.randint(0, vocab, (2, 3))
    past = [torch.randn(2, heads, 5, width // heads) for _ in range(2 * layers)]
    names = [f"past_{k}_{i}" for i in range(layers) for k in ("key", "value")]
    outs = [f"present_{k}_{i}" for i in range(layers) for k in ("key", "value")]
    axes = {"input_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}}
    axes.update({n: {0: "batch", 2: "past_seq"} for n in names})
    axes.update({n: {0: "batch", 2: "total_seq"} for n in outs})
    buf = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (ids, *past), buf, dynamo=False, opset_version=17, input_names=["input_ids", *names],
                          output_names=["logits", *outs], dynamic_axes=axes)
    return buf.getvalue()


@pytest.fixture(scope="module")
def kv_model() -> bytes:
    return _export(LAYERS, HEADS, WIDTH, VOCAB)


def _decode(run, batch: int, prompt: int, steps: int) -> tuple[list[np.ndarray], list[np.ndarray]]:  # type: ignore[no-untyped-def]
    """Greedy decoding: (tokens per step, last logits per step)."""
    ids = np.random.default_rng(batch).integers(0, VOCAB, (batch, prompt)).astype(np.int64)
    past = [np.zeros((batch, HEADS, 0, WIDTH // HEADS), np.float32) for _ in range(2 * LAYERS)]
    out = run([ids, *past])
    tokens, logits = [], []
    for _ in range(steps):
        logits.append(out[0][:, -1])
        nxt = out[0][:, -1].argmax(-1).astype(np.int64)[:, None]
        tokens.append(nxt[:, 0])
        out = run([nxt, *out[1:]])
        assert out[1].shape == (batch, HEADS, prompt + len(tokens), WIDTH // HEADS)  # present grows by one
    return tokens, logits


@pytest.mark.parametrize("batch", [1, 4])
def test_greedy_tokens_match_ort(kv_model: bytes, batch: int) -> None:
    sess = ort.InferenceSession(kv_model, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    want_tok, want_log = _decode(lambda f: sess.run(None, dict(zip(names, f))), batch, 8, 24)
    lm = LoadedModel.from_compiled(compile_model(kv_model))
    got_tok, got_log = _decode(lm.run, batch, 8, 24)
    for i, (g, w) in enumerate(zip(got_log, want_log)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=f"logits at step {i}")
    assert [t.tolist() for t in got_tok] == [t.tolist() for t in want_tok]
    assert len({int(t[0]) for t in got_tok}) > 1, "the tokens must vary (a test that cannot fail otherwise)"
    st = lm.plan_cache_stats()
    # every signature (the prompt's, then a new past length per step) comes once: all run on the
    # shape-generic plan, nothing is planned or packed per call
    assert (st.built, st.generic_runs, st.evictions) == (0, 25, 0)


def test_specialize_policy_builds_a_plan_per_step_bounded(kv_model: bytes) -> None:
    """The old behaviour (a plan per past length), now bounded: 4 plans at most, LRU-evicted."""
    lm = LoadedModel.from_compiled(compile_model(kv_model),
                                   plan_cache=PlanCacheConfig(max_plans=4, policy=PlanPolicy.SPECIALIZE))
    sess = ort.InferenceSession(kv_model, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    got, _ = _decode(lm.run, 1, 4, 8)
    want, _ = _decode(lambda f: sess.run(None, dict(zip(names, f))), 1, 4, 8)
    assert [t.tolist() for t in got] == [t.tolist() for t in want]
    st = lm.plan_cache_stats()
    assert (st.built, st.plans, st.evictions, st.generic_runs) == (9, 4, 5, 0)


def test_generic_plan_runs_the_shape_arithmetic_as_shape_of_steps(kv_model: bytes) -> None:
    """The exporter's Shape -> Gather -> Unsqueeze -> Concat chains (each Reshape's target, the mask's
    bounds) run as one ShapeOf step per value they feed (ge/run/shape_program.py); the decode above
    checks the values against ORT, this that the chains are gone."""
    lm = LoadedModel.from_compiled(compile_model(kv_model))
    compiled = [n.op_type for n in lm.graph.nodes]
    generic = [n.op_type for n in lm.executor.generic_plan().graph.nodes]
    assert generic.count("ShapeOf") >= 2 * LAYERS and "Shape" not in generic
    assert len(generic) < len(compiled) - compiled.count("Shape") * 2
    assert compiled.count("Shape") > 0 and "ShapeOf" not in compiled  # the compiled graph is untouched


def _ort_run(kv_model: bytes):  # type: ignore[no-untyped-def]
    sess = ort.InferenceSession(kv_model, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    return lambda f: sess.run(None, dict(zip(names, f)))


def test_present_is_appended_in_place_on_the_generic_plan(kv_model: bytes) -> None:
    """``present = Concat(past, new)`` runs as CacheAppend (ge/run/kv_alias.py): each step's presents
    are read-only views of the buffers the previous step's were (no copy of the past), with ORT's
    values; continuing an older past twice (beam search) gives ORT's values for both branches."""
    lm = LoadedModel.from_compiled(compile_model(kv_model))
    generic = [n.op_type for n in lm.executor.generic_plan().graph.nodes]
    assert generic.count("CacheAppend") == 2 * LAYERS and "CacheAppend" not in [n.op_type for n in lm.graph.nodes]
    ref = _ort_run(kv_model)
    ids = np.random.default_rng(7).integers(0, VOCAB, (2, 6)).astype(np.int64)
    past = [np.zeros((2, HEADS, 0, WIDTH // HEADS), np.float32) for _ in range(2 * LAYERS)]
    out = lm.run([ids, *past])
    history = [out]
    for step in range(5):
        nxt = out[0][:, -1].argmax(-1).astype(np.int64)[:, None]
        got, want = lm.run([nxt, *out[1:]]), ref([nxt, *out[1:]])
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=f"step {step}")
        for g, prev in zip(got[1:], out[1:]):
            assert np.shares_memory(g, prev) and not g.flags.writeable
        assert got[0].flags.writeable and got[0].flags.c_contiguous  # the logits are an ordinary output
        out = got
        history.append(out)
    fork = history[2]  # continued once already: a second continuation must not touch the first
    for token in (3, 5):
        nxt = np.full((2, 1), token, np.int64)
        got, want = lm.run([nxt, *fork[1:]]), ref([nxt, *fork[1:]])
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=f"fork token {token}")
    for a, b in zip(history[3][1:], history[4][1:]):  # the later presents kept their rows
        np.testing.assert_array_equal(a, b[:, :, : a.shape[2]])


def test_kv_cache_off_keeps_concat(kv_model: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYCANN_KV_CACHE", "off")
    lm = LoadedModel.from_compiled(compile_model(kv_model))
    assert "CacheAppend" not in [n.op_type for n in lm.executor.generic_plan().graph.nodes]
    ids = np.zeros((1, 3), np.int64)
    out = lm.run([ids, *[np.zeros((1, HEADS, 0, WIDTH // HEADS), np.float32) for _ in range(2 * LAYERS)]])
    out = lm.run([ids[:, :1], *out[1:]])
    assert all(o.flags.writeable and o.flags.c_contiguous for o in out)
    monkeypatch.setenv("PYCANN_KV_CACHE", "sometimes")
    with pytest.raises(ConfigError, match="PYCANN_KV_CACHE='sometimes'"):
        LoadedModel.from_compiled(compile_model(kv_model))


def test_dynamo_exported_decoder_appends_in_place_with_orts_tokens() -> None:
    """The rewrite on a second exporter's graph: torch.onnx's dynamo exporter (torch.export, onnxscript
    ops, its own Concat/Shape spellings) of the same decoder; CacheAppend fires for every K and V."""
    torch.manual_seed(0)
    cfg = torch_models.GPT2Config(vocab_size=VOCAB, n_positions=128, n_embd=WIDTH, n_layer=LAYERS, n_head=HEADS)
    base = torch_models.GPT2Like(cfg)
    base.init_weights(0.2)
    model = torch_models.GPT2WithPast(base.eval()).eval()
    ids = torch.randint(0, VOCAB, (2, 3))
    past = [torch.randn(2, HEADS, 5, WIDTH // HEADS) for _ in range(2 * LAYERS)]
    names = [f"past_{k}_{i}" for i in range(LAYERS) for k in ("key", "value")]
    outs = [f"present_{k}_{i}" for i in range(LAYERS) for k in ("key", "value")]
    b, s = torch.export.Dim("batch", min=1, max=8), torch.export.Dim("seq", min=1, max=64)
    p = torch.export.Dim("past", min=0, max=64)
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            prog = torch.onnx.export(model, (ids, *past), dynamo=True, input_names=["input_ids", *names],
                                     output_names=["logits", *outs],
                                     dynamic_shapes=({0: b, 1: s}, tuple({0: b, 2: p} for _ in names)))
    except Exception as e:  # noqa: BLE001 - an exporter this torch lacks (onnxscript missing): not ours to test
        pytest.skip(f"the dynamo exporter is not usable here: {type(e).__name__}")
    data = prog.model_proto.SerializeToString()
    lm = LoadedModel.from_compiled(compile_model(data))
    assert [n.op_type for n in lm.executor.generic_plan().graph.nodes].count("CacheAppend") == 2 * LAYERS
    got_tok, got_log = _decode(lm.run, 2, 6, 16)
    want_tok, want_log = _decode(_ort_run(data), 2, 6, 16)
    for i, (g, w) in enumerate(zip(got_log, want_log)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=f"logits at step {i}")
    assert [t.tolist() for t in got_tok] == [t.tolist() for t in want_tok]


def test_wide_decoder_moves_its_weights_to_the_gemv_layout_with_orts_tokens() -> None:
    """A decoder wide enough for the packed products (``kernels/weight_layouts.py``): batch-1 steps
    move every weight to the gemv layout after ``GEMV_AFTER`` of them, a batch-4 prompt and steps
    on the same model move them back; tokens and logits as ONNX Runtime's throughout."""
    from pycann.kernels import providers, weight_layouts
    from pycann.kernels.providers import choice_table

    if not (choice_table.has_avx512() and providers.available("onednn")):
        pytest.skip("packed generic GEMMs bind on AVX-512 CPUs with libdnnl only")
    layers, heads, width, vocab = 1, 8, 512, 1000
    onnx_model = _export(layers, heads, width, vocab)
    sess = ort.InferenceSession(onnx_model, providers=["CPUExecutionProvider"])
    lm = LoadedModel.from_compiled(compile_model(onnx_model))

    def forms() -> list[weight_layouts.AdaptiveMatmul]:
        return [k for st in lm.executor.generic_plan().steps if st.bound is not None
                for k in st.bound.keep if isinstance(k, weight_layouts.AdaptiveMatmul)]

    def decode(run, batch: int, steps: int) -> tuple[list[list[int]], list[np.ndarray]]:  # type: ignore[no-untyped-def]
        ids = np.random.default_rng(batch).integers(0, vocab, (batch, 6)).astype(np.int64)
        out = run([ids, *[np.zeros((batch, heads, 0, width // heads), np.float32) for _ in range(2 * layers)]])
        tokens, logits = [], []
        for _ in range(steps):
            logits.append(out[0][:, -1])
            nxt = out[0][:, -1].argmax(-1).astype(np.int64)[:, None]
            tokens.append(nxt[:, 0].tolist())
            out = run([nxt, *out[1:]])
        return tokens, logits

    def ort_run(f):  # type: ignore[no-untyped-def]
        return sess.run(None, dict(zip([i.name for i in sess.get_inputs()], f)))

    for batch, layout in ((1, "gemv"), (4, "packed")):
        steps = weight_layouts.GEMV_AFTER + 8
        got, got_log = decode(lm.run, batch, steps)
        want, want_log = decode(ort_run, batch, steps)
        for i, (g, w) in enumerate(zip(got_log, want_log)):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=f"batch {batch}: logits at step {i}")
        assert got == want
        assert len({t[0] for t in got}) > 1, "the tokens must vary (a test that cannot fail otherwise)"
        assert forms() and {f.layout for f in forms()} == {layout}


def test_layers_share_one_mask_on_the_generic_plan(kv_model: bytes) -> None:
    """The inputs' named dims (every ``past_*`` carries ``past_seq``) let the generic plan read each from
    one input (ge/run/shape_program.py), so every layer's mask bounds are one ShapeOf and the layers'
    equal Slice/Slice/Where mask is computed once (ge/run/dedup.py); the decode gives ORT's values."""
    lm = LoadedModel.from_compiled(compile_model(kv_model))
    compiled = [n.op_type for n in lm.graph.nodes]
    generic = [n.op_type for n in lm.executor.generic_plan().graph.nodes]
    assert compiled.count("Where") == LAYERS and generic.count("Where") == 1
    assert generic.count("Slice") == compiled.count("Slice") // LAYERS
    ref = _ort_run(kv_model)
    ids = np.random.default_rng(3).integers(0, VOCAB, (2, 5)).astype(np.int64)
    out = lm.run([ids, *[np.zeros((2, HEADS, 0, WIDTH // HEADS), np.float32) for _ in range(2 * LAYERS)]])
    for step in range(4):
        nxt = out[0][:, -1].argmax(-1).astype(np.int64)[:, None]
        got, want = lm.run([nxt, *out[1:]]), ref([nxt, *out[1:]])
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=f"step {step}")
        out = got
    assert lm.plan_cache_stats().built == 0


def test_pasts_of_different_lengths_run_the_generic_plan_without_names(kv_model: bytes) -> None:
    """Pasts whose ``past_seq`` differs from layer to layer break the named-dims reading: such calls
    run the generic plan made without the names (ORT's values), built once, not a plan specialised
    per call (a decode loop with such pasts built one each step, twice a step's time); the next
    regular call runs the named generic plan."""
    lm = LoadedModel.from_compiled(compile_model(kv_model), plan_cache=PlanCacheConfig(policy=PlanPolicy.GENERIC))
    ref = _ort_run(kv_model)
    rng = np.random.default_rng(5)
    ids = rng.integers(0, VOCAB, (1, 2)).astype(np.int64)
    past = [rng.standard_normal((1, HEADS, 3 + i // 2, WIDTH // HEADS)).astype(np.float32) for i in range(2 * LAYERS)]
    out = [ids, *past]
    for step in range(4):  # each step a new signature, the layers' pasts still one apart
        got, want = lm.run(out), ref(out)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=f"step {step}")
        out = [got[0][:, -1:].argmax(-1).astype(np.int64), *got[1:]]
    st = lm.plan_cache_stats()
    assert (st.built, st.generic_runs) == (0, 4)
    assert lm.executor._plain is not None and lm.executor._plain is not lm.executor.generic_plan()
    same = [rng.standard_normal((1, HEADS, 4, WIDTH // HEADS)).astype(np.float32) for _ in range(2 * LAYERS)]
    for g, w in zip(lm.run([ids, *same]), ref([ids, *same])):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    assert lm.plan_cache_stats().generic_runs == 5
