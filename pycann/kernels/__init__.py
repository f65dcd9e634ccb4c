"""The kernel layer: how each node of a compiled graph is computed.

It sits between ``ops`` (op definitions, shape inference, numpy reference kernels) and ``ge``
(graphs, passes, plans, the executor); ``ops`` never imports it, it never imports ``ge``
(docs/architecture.md, tests/test_layers.py).

* ``algorithm.py``: ``Algorithm`` (provider, name, layout, weight packing, threads, writes_out,
  exact) and the table of every algorithm; the node attribute ``_algo`` holds one.
* ``providers/``: the kernel libraries (numpy's BLAS, oneDNN's C API, PyTorch), their
  implementations of the algorithms, the selection table (``providers.STATIC_TABLE``), ``select``
  and ``resolve``.
* ``table.py``: per op, the kernels a plan runs (``KERNELS``: ``conv.py``, ``gemm.py``,
  ``fused.py``, ``quant.py``, the ops' semantics computed by the providers); ops not listed run
  their numpy reference from ``pycann.ops``.
* ``bind*.py``: plan-time binders, one per op, that fix everything but the data for one static
  signature (a Reshape's target shape, a packed oneDNN conv primitive) and return a
  ``bound.BoundKernel`` (the kernel with typed fields: writes into the arena, in place, threads...).
"""
