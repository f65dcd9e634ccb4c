"""``torch_npu.distributed`` under pycann-run: torch_npu's additions to torch.distributed for the
``hccl`` backend.

* ``is_hccl_available()``: whether the backend is registered (also ``torch.distributed.is_hccl_available``).
* ``all_gather_into_tensor_uneven(output, input, output_split_sizes=None, group=None, async_op=False)``:
  rank i's ``input`` (``output_split_sizes[i]`` rows) lands in the i-th block of rows of ``output``.
* ``reduce_scatter_tensor_uneven(output, input, input_split_sizes=None, op=SUM, group=None, async_op=False)``:
  ``output`` on rank i becomes the reduction over ranks of their i-th block of ``input`` rows
  (``input_split_sizes[i]`` rows).

Split sizes count rows (dimension 0), one per rank of the group, summing to that tensor's rows;
without them the blocks are equal. Unequal blocks run as torch's ``all_gather`` into a list of
views of ``output`` (one broadcast per rank) and as one ``reduce`` per rank; ``async_op=True``
returns a finished work.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from pycann.hccl.torch_backend import is_hccl_available

__all__ = ["all_gather_into_tensor_uneven", "is_hccl_available", "reduce_scatter_tensor_uneven"]


def _splits(t: torch.Tensor, sizes: Sequence[int] | None, group: Any, what: str) -> list[int]:
    n = dist.get_world_size(group)
    rows = t.shape[0] if t.dim() else 1
    if not sizes:
        if rows % n:
            raise ValueError(f"{what}: {rows} rows do not split evenly over {n} ranks; give the split sizes")
        return [rows // n] * n
    out = [int(s) for s in sizes]
    if len(out) != n or sum(out) != rows or min(out) < 0:
        raise ValueError(f"{what}: split sizes {out} must be {n} non-negative row counts (one per rank) "
                         f"summing to the {rows} rows of the split tensor")
    return out


def _done(async_op: bool, outputs: list[torch.Tensor]) -> Any:
    """``None``, or for ``async_op`` a work that is already finished."""
    if not async_op:
        return None
    fut: torch.futures.Future = torch.futures.Future()
    fut.set_result(outputs)
    return torch._C._distributed_c10d._create_work_from_future(fut)  # type: ignore[attr-defined]


def all_gather_into_tensor_uneven(output: torch.Tensor, input: torch.Tensor,
                                  output_split_sizes: Sequence[int] | None = None, group: Any = None,
                                  async_op: bool = False) -> Any:
    """torch_npu's ``all_gather_into_tensor`` with blocks of rows that may differ per rank (see
    the module docstring)."""
    sizes = _splits(output, output_split_sizes, group, "all_gather_into_tensor_uneven")
    work = dist.all_gather(list(output.split(sizes)), input, group=group, async_op=async_op)
    return work if async_op else None


def reduce_scatter_tensor_uneven(output: torch.Tensor, input: torch.Tensor,
                                 input_split_sizes: Sequence[int] | None = None,
                                 op: Any = dist.ReduceOp.SUM, group: Any = None, async_op: bool = False) -> Any:
    """torch_npu's ``reduce_scatter_tensor`` with blocks of rows that may differ per rank (see
    the module docstring)."""
    sizes = _splits(input, input_split_sizes, group, "reduce_scatter_tensor_uneven")
    if len(set(sizes)) == 1:
        return dist.reduce_scatter_tensor(output, input, op=op, group=group, async_op=async_op)
    me = dist.get_rank(group)
    for i, block in enumerate(input.split(sizes)):
        buf = block.clone()
        dist.reduce(buf, group_dst=i, op=op, group=group)
        if i == me:
            with torch.no_grad():
                output.copy_(buf.reshape(output.shape))
    return _done(async_op, [output])
