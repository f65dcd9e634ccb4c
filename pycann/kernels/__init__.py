"""The kernel layer: how each node of a compiled graph is computed.

It sits between ``ops`` (op definitions, shape inference, numpy reference kernels) and ``ge``
(graphs, passes, plans, the executor); ``ops`` never imports it, it never imports ``ge``
(docs/architecture.md, tests/test_layers.py).

* ``providers/``: the kernel libraries (numpy's BLAS, oneDNN's C API, PyTorch) and their
  algorithms, with the selection table (``providers.STATIC_TABLE``) and ``select``.
* ``bind*.py``: plan-time binders, one per op, that fix everything but the data for one static
  signature (a Reshape's target shape, a packed oneDNN conv primitive).
"""
