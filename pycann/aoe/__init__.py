"""pycann.aoe: CANN's Ascend Optimization Engine on pycann (issue 19 item 4; docs/aoe.md).

* ``bank``: the knowledge bank on disk (sqlite), a leaf module: GE and the op layer read it on
  every compile, so it imports nothing of pycann but ``config`` and ``errors``;
* ``space``, ``search``: a discrete search space and the search strategies (exhaustive, guided);
* ``tiling``: the fp16 MatMul tiling space of ``costmodel.matmul_sample`` priced on the cost model;
* ``op_tuning`` (``--job_type=2``): tilings on the cost model, kernel choices by measurement;
* ``subgraph_tuning`` (``--job_type=1``): GE's fusion, layout and kernel choices by measurement;
* ``report``: the progress line and the before/after report (text and JSON).

This file imports nothing, so that ``pycann.aoe.bank`` stays as light as it is.
"""
