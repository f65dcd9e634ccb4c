"""Custom operator development in CANN's operator-project style (reference 1.15-1.17).

``opdef`` is the op prototype (``ops::OpDef``: Input/Output/Attr, DataType/Format lists,
SetInferShape, AICore().SetTiling/AddConfig, OP_ADD); ``context`` the host contexts
(TilingContext, InferShapeContext, gert.Shape, PlatformAscendC); ``runner`` executes one op on
the twin; ``vendor`` finds installed vendor packages through ASCEND_CUSTOM_OPP_PATH; ``project``
scaffolds, builds and installs projects (the ``msopgen`` tool). pycann.ops.custom turns the
installed ops into entries of pycann's op table.
"""
