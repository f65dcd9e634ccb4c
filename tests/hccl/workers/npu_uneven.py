"""torch_npu.distributed's uneven collectives, as torch_npu code calls them (run under pycann-run's
torchrun); prints 'npu uneven ok'."""

import datetime
import os

import torch
import torch.distributed as dist
import torch_npu

r, w = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.npu.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("hccl", timeout=datetime.timedelta(seconds=20))
assert torch_npu.distributed.is_hccl_available() and dist.is_hccl_available()
from torch_npu.distributed import all_gather_into_tensor_uneven, reduce_scatter_tensor_uneven  # noqa: E402

sizes = [i + 1 for i in range(w)]  # rank i owns i + 1 rows of 2
out = torch.empty(sum(sizes), 2).npu()
all_gather_into_tensor_uneven(out, torch.full((r + 1, 2), float(r)).npu(), output_split_sizes=sizes)
assert out.cpu().tolist() == [[float(i)] * 2 for i in range(w) for _ in range(i + 1)], out
even = torch.empty(2 * w).npu()
work = all_gather_into_tensor_uneven(even, torch.full((2,), float(r)).npu(), async_op=True)
work.wait()
assert even.cpu().tolist() == [float(i) for i in range(w) for _ in range(2)], even

inp = (torch.arange(sum(sizes) * 2, dtype=torch.float32).view(-1, 2) + r).npu()
mine = torch.empty(r + 1, 2).npu()
reduce_scatter_tensor_uneven(mine, inp, input_split_sizes=sizes)
total = sum(torch.arange(sum(sizes) * 2, dtype=torch.float32).view(-1, 2) + i for i in range(w))
assert mine.cpu().tolist() == total.split(sizes)[r].tolist(), mine
m2 = torch.empty(r + 1, 2, dtype=torch.int32).npu()
work = reduce_scatter_tensor_uneven(m2, inp.to(torch.int32), sizes, op=dist.ReduceOp.MAX, async_op=True)
work.wait()
assert m2.cpu().tolist() == (inp.cpu().to(torch.int32) - r + w - 1).split(sizes)[r].tolist(), m2
dist.barrier()
print("npu uneven ok", flush=True)
dist.destroy_process_group()
