"""LSTM / GRU / RNN against ONNX Runtime (ONNX spec Operators.md#LSTM, #GRU, #RNN)."""

from __future__ import annotations

import numpy as np
import pytest

from pycann.errors import ShapeError
from tests.ops.oracle import check_op, run_ort, run_pycann_op, single_node_model

RTOL, ATOL = 1e-4, 1e-5


def _rnn_inputs(
    rng: np.random.Generator,
    gates: int,
    seq: int = 5,
    batch: int = 3,
    inp: int = 4,
    hidden: int = 6,
    num_dir: int = 1,
    *,
    bias: bool = True,
    lens: list[int] | None = None,
    init: int = 0,
    peep: bool = False,
    layout: int = 0,
    dtype: type = np.float32,
) -> list[np.ndarray | None]:
    def r(*s: int) -> np.ndarray:
        return (rng.standard_normal(s) * 0.5).astype(dtype)

    x = r(seq, batch, inp) if layout == 0 else r(batch, seq, inp)
    ins: list[np.ndarray | None] = [
        x, r(num_dir, gates * hidden, inp), r(num_dir, gates * hidden, hidden),
        r(num_dir, 2 * gates * hidden) if bias else None,
        None if lens is None else np.array(lens, np.int32),
    ]
    for _ in range(init):
        ins.append(r(num_dir, batch, hidden) if layout == 0 else r(batch, num_dir, hidden))
    if peep:
        while len(ins) < 7:
            ins.append(None)
        ins.append(r(num_dir, 3 * hidden))
    while ins and ins[-1] is None:
        ins.pop()
    return ins


def _layout1_golden(op: str, ins: list[np.ndarray | None], attrs: dict, n_out: int) -> list[np.ndarray]:
    """ORT lacks layout=1: run the layout-0 form on transposed inputs and transpose back."""
    t = list(ins)
    t[0] = ins[0].transpose(1, 0, 2)
    for k in (5, 6):
        if len(t) > k and t[k] is not None:
            t[k] = t[k].transpose(1, 0, 2)
    a0 = {k: v for k, v in attrs.items() if k != "layout"}
    model, feeds = single_node_model(op, t, a0, n_out, 14)
    outs = run_ort(model, feeds)
    return [outs[0].transpose(2, 0, 1, 3)] + [o.transpose(1, 0, 2) for o in outs[1:]]


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("opset", [7, 14])
def test_lstm_directions(direction: str, opset: int) -> None:
    rng = np.random.default_rng(0)
    nd = 2 if direction == "bidirectional" else 1
    ins = _rnn_inputs(rng, 4, num_dir=nd, init=2)
    check_op("LSTM", ins, {"direction": direction, "hidden_size": 6}, n_outputs=3, opset=opset,
             rtol=RTOL, atol=ATOL)


def test_lstm_silero_shape() -> None:
    # batch 1, hidden 128, seq 1, forward: the Silero VAD configuration.
    rng = np.random.default_rng(1)
    ins = _rnn_inputs(rng, 4, seq=1, batch=1, inp=128, hidden=128, init=2)
    check_op("LSTM", ins, {"hidden_size": 128}, n_outputs=3, rtol=RTOL, atol=ATOL)


def test_lstm_minimal_inputs() -> None:
    rng = np.random.default_rng(2)
    ins = _rnn_inputs(rng, 4, bias=False)
    check_op("LSTM", ins, {"hidden_size": 6}, n_outputs=3, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_lstm_sequence_lens(direction: str) -> None:
    rng = np.random.default_rng(3)
    nd = 2 if direction == "bidirectional" else 1
    ins = _rnn_inputs(rng, 4, num_dir=nd, lens=[5, 2, 3], init=2)
    check_op("LSTM", ins, {"direction": direction, "hidden_size": 6}, n_outputs=3, rtol=RTOL, atol=ATOL)


def test_lstm_peephole_clip_input_forget() -> None:
    rng = np.random.default_rng(4)
    ins = _rnn_inputs(rng, 4, init=2, peep=True)
    ins = [None if a is None else a * 3 for a in ins[:4]] + ins[4:]
    check_op("LSTM", ins, {"hidden_size": 6, "clip": 0.7}, n_outputs=3, rtol=RTOL, atol=ATOL)
    check_op("LSTM", ins, {"hidden_size": 6, "input_forget": 1}, n_outputs=3, rtol=RTOL, atol=ATOL)
    check_op("LSTM", ins, {"hidden_size": 6, "clip": 1.5, "input_forget": 1, "direction": "reverse"},
             n_outputs=3, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_lstm_layout1(direction: str) -> None:
    rng = np.random.default_rng(5)
    nd = 2 if direction == "bidirectional" else 1
    ins = _rnn_inputs(rng, 4, num_dir=nd, init=2, layout=1, lens=[5, 3, 4])
    attrs = {"direction": direction, "hidden_size": 6, "layout": 1}
    check_op("LSTM", ins, attrs, n_outputs=3, opset=14, rtol=RTOL, atol=ATOL,
             expected=_layout1_golden("LSTM", ins, attrs, 3))


@pytest.mark.parametrize(
    "acts,alpha,beta",
    [
        (["Relu", "Tanh", "Sigmoid"], None, None),
        (["HardSigmoid", "Softsign", "Softplus"], [0.3], [0.4]),
        (["Sigmoid", "LeakyRelu", "ScaledTanh"], [0.1, 0.8], [1.2]),
        (["Sigmoid", "Affine", "Elu"], [0.5, 0.9], [0.1]),
        (["Sigmoid", "ThresholdedRelu", "Tanh"], [0.2], None),
    ],
)
def test_lstm_activations(acts: list[str], alpha: list[float] | None, beta: list[float] | None) -> None:
    rng = np.random.default_rng(6)
    ins = _rnn_inputs(rng, 4, init=2)
    attrs: dict = {"hidden_size": 6, "activations": acts}
    if alpha is not None:
        attrs["activation_alpha"] = alpha
    if beta is not None:
        attrs["activation_beta"] = beta
    check_op("LSTM", ins, attrs, n_outputs=3, rtol=RTOL, atol=ATOL)


def test_lstm_double() -> None:
    rng = np.random.default_rng(7)
    ins = _rnn_inputs(rng, 4, init=2, dtype=np.float64)
    outs, _ = run_pycann_op("LSTM", ins, {"hidden_size": 6}, 3, 14)
    assert all(o.dtype == np.float64 for o in outs)
    # float64 golden: same op in float32 through ORT, compared loosely.
    ins32 = [None if a is None else a.astype(np.float32) for a in ins]
    check_op("LSTM", ins32, {"hidden_size": 6}, n_outputs=3, expected=None, rtol=RTOL, atol=ATOL)
    ref, _ = run_pycann_op("LSTM", ins32, {"hidden_size": 6}, 3, 14)
    for a, b in zip(outs, ref):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_lstm_zero_batch() -> None:
    rng = np.random.default_rng(8)
    ins = _rnn_inputs(rng, 4, batch=0)
    outs, descs = run_pycann_op("LSTM", ins, {"hidden_size": 6}, 3, 14)
    assert outs[0].shape == (5, 1, 0, 6) and outs[1].shape == (1, 0, 6)
    assert descs[0].shape == (5, 1, 0, 6)


@pytest.mark.parametrize("lbr", [0, 1])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_gru(direction: str, lbr: int) -> None:
    rng = np.random.default_rng(10)
    nd = 2 if direction == "bidirectional" else 1
    ins = _rnn_inputs(rng, 3, num_dir=nd, init=1)
    check_op("GRU", ins, {"direction": direction, "hidden_size": 6, "linear_before_reset": lbr},
             n_outputs=2, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("lbr", [0, 1])
def test_gru_seq_lens_clip_layout(lbr: int) -> None:
    rng = np.random.default_rng(11)
    ins = _rnn_inputs(rng, 3, num_dir=2, lens=[1, 5, 4], init=1)
    check_op("GRU", ins, {"direction": "bidirectional", "hidden_size": 6, "linear_before_reset": lbr,
                          "clip": 0.5}, n_outputs=2, rtol=RTOL, atol=ATOL)
    ins = _rnn_inputs(rng, 3, init=1, layout=1, bias=False)
    attrs = {"hidden_size": 6, "layout": 1, "linear_before_reset": lbr}
    check_op("GRU", ins, attrs, n_outputs=2, opset=14, rtol=RTOL, atol=ATOL,
             expected=_layout1_golden("GRU", ins, attrs, 2))


def test_gru_activations() -> None:
    rng = np.random.default_rng(12)
    ins = _rnn_inputs(rng, 3, init=1)
    check_op("GRU", ins, {"hidden_size": 6, "activations": ["HardSigmoid", "Relu"],
                          "activation_alpha": [0.25], "activation_beta": [0.45]},
             n_outputs=2, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_rnn(direction: str) -> None:
    rng = np.random.default_rng(20)
    nd = 2 if direction == "bidirectional" else 1
    ins = _rnn_inputs(rng, 1, num_dir=nd, init=1, lens=[3, 5, 1])
    check_op("RNN", ins, {"direction": direction, "hidden_size": 6}, n_outputs=2, rtol=RTOL, atol=ATOL)
    acts = ["Relu", "Sigmoid"][:nd]
    check_op("RNN", ins[:4], {"direction": direction, "hidden_size": 6, "activations": acts, "clip": 0.4},
             n_outputs=2, rtol=RTOL, atol=ATOL)


def test_rnn_layout1_symbolic_infer() -> None:
    rng = np.random.default_rng(21)
    ins = _rnn_inputs(rng, 1, init=1, layout=1)
    attrs = {"hidden_size": 6, "layout": 1}
    check_op("RNN", ins, attrs, n_outputs=2, opset=14, rtol=RTOL, atol=ATOL,
             expected=_layout1_golden("RNN", ins, attrs, 2))
    from pycann.dtypes import TensorDesc
    from pycann.ops.opdef import InferContext
    from pycann.ops.registry import lookup

    op = lookup("RNN", "", 14)
    descs = [TensorDesc(1, ("B", "S", 4)), TensorDesc(1, (1, 6, 4)), TensorDesc(1, (1, 6, 6))]
    ctx = InferContext("n", "RNN", op.with_defaults({"layout": 1}), descs, [None] * 3, 14, 2)
    y, yh = op.infer(ctx)
    assert y.shape == ("B", "S", 1, 6) and yh.shape == ("B", 1, 6)
    ctx = InferContext("n", "RNN", op.with_defaults({}), [TensorDesc(1, None)] + descs[1:], [None] * 3, 14, 2)
    y, _ = op.infer(ctx)
    assert y.shape == (None, 1, None, 6)


@pytest.mark.parametrize(
    "attrs,msg",
    [
        ({"direction": "sideways"}, "direction"),
        ({"direction": "bidirectional"}, "directions"),
        ({"hidden_size": 5}, "hidden_size"),
        ({"activations": ["Tanh", "Nope", "Tanh"]}, "Nope".lower()),
        ({"activations": ["Tanh"]}, "activations"),
    ],
)
def test_lstm_infer_errors(attrs: dict, msg: str) -> None:
    from pycann.dtypes import TensorDesc
    from pycann.ops.opdef import InferContext
    from pycann.ops.registry import lookup

    op = lookup("LSTM", "", 14)
    descs = [TensorDesc(1, (5, 2, 4)), TensorDesc(1, (1, 24, 4)), TensorDesc(1, (1, 24, 6))]
    ctx = InferContext("n", "LSTM", op.with_defaults(attrs), descs, [None] * 3, 14, 3)
    with pytest.raises(ShapeError, match=msg):
        op.infer(ctx)


@pytest.mark.parametrize("op,gates,n_out", [("LSTM", 4, 3), ("GRU", 3, 2), ("RNN", 1, 2)])
def test_zero_length_sequence(op: str, gates: int, n_out: int) -> None:
    # ORT: an empty sequence yields zero Y and zero final states (not the initial state).
    rng = np.random.default_rng(30)
    ins = _rnn_inputs(rng, gates, num_dir=2, lens=[0, 3, 5], init=n_out - 1)
    check_op(op, ins, {"direction": "bidirectional", "hidden_size": 6}, n_outputs=n_out, rtol=RTOL, atol=ATOL)
