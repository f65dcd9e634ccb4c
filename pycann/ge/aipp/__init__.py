"""AIPP (AI pre-processing, cann-interfaces.md §3): config files, graph insertion, dynamic parameters.

``config`` parses and validates ``--insert_op_conf`` files; ``pycann.ge.compile.passes.insert_aipp``
inserts the ``Aipp`` op (``pycann.ops.aipp``); ``dynamic`` packs run-time parameters for
``aipp_mode: dynamic`` models. User guide: docs/aipp.md.
"""
