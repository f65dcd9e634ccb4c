"""nn.SyncBatchNorm's CUDA-only statistics ops on the npu (pycann/torch/_sync_bn.py), against
torch's CPU batch norm over the whole batch: two halves stand in for two ranks."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pycann.torch")


@pytest.mark.parametrize("channels_last", [False, True])
def test_sync_bn_ops_match_batch_norm(channels_last: bool) -> None:
    torch.manual_seed(0)
    x = torch.randn(6, 4, 3, 5)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    w, b, go = torch.rand(4) + 0.5, torch.randn(4), torch.randn(6, 4, 3, 5)
    xr, wr, br = (t.clone().requires_grad_() for t in (x, w, b))
    rm, rv = torch.zeros(4), torch.ones(4)
    ref = torch.nn.functional.batch_norm(xr, rm, rv, wr, br, training=True, momentum=0.1)
    ref.backward(go)

    xs, ws, bs = x.npu(), w.npu(), b.npu()
    rm2, rv2 = torch.zeros(4).npu(), torch.ones(4).npu()
    m1, s1 = torch.batch_norm_stats(xs[:2], 1e-5)
    m2, s2 = torch.batch_norm_stats(xs[2:], 1e-5)
    counts = torch.tensor([2 * 15.0, 4 * 15.0]).npu()
    gm, gs = torch.batch_norm_gather_stats_with_counts(xs, torch.stack([m1, m2]), torch.stack([s1, s2]),
                                                       rm2, rv2, 0.1, 1e-5, counts)
    y = torch.batch_norm_elemt(xs, ws, bs, gm, gs, 1e-5)
    assert y.device.type == "npu" and y.is_contiguous(memory_format=torch.channels_last) == channels_last
    torch.testing.assert_close(y.cpu(), ref.detach(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rm2.cpu(), rm, atol=1e-6, rtol=1e-6)  # running stats: unbiased variance
    torch.testing.assert_close(rv2.cpu(), rv, atol=1e-6, rtol=1e-6)

    sdy, sdyx, gw, gb = torch.batch_norm_backward_reduce(go.npu(), xs, gm, gs, ws, True, True, True)
    gi = torch.batch_norm_backward_elemt(go.npu(), xs, gm, gs, ws, sdy, sdyx,
                                         torch.tensor([30, 60], dtype=torch.int32).npu())
    torch.testing.assert_close(gi.cpu(), xr.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(gw.cpu(), wr.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(gb.cpu(), br.grad, atol=1e-5, rtol=1e-5)
    _, _, gw2, gb2 = torch.batch_norm_backward_reduce(go.npu(), xs, gm, gs, ws, True, False, False)
    assert gw2 is None and gb2 is None


def test_sync_bn_half_input_keeps_float32_statistics() -> None:
    x = torch.randn(4, 3, 5).half()
    mean, invstd = torch.batch_norm_stats(x.npu(), 1e-5)
    assert mean.dtype == torch.float32 and invstd.dtype == torch.float32  # CUDA's accumulation type
    var, ref_mean = torch.var_mean(x.float(), dim=[0, 2], correction=0)
    torch.testing.assert_close(mean.cpu(), ref_mean)
    torch.testing.assert_close(invstd.cpu(), (var + 1e-5).rsqrt())
