"""Ascend C samples in the style of CANN's sample set, runnable on the CPU twin.

``python -m pycann.ascendc.samples.<name>`` runs one and checks it against numpy:
matmul_custom (Matmul high-level API + MultiCoreMatmulTiling), matmul_tiled (cube instructions,
double-buffered, 1024x512 x 512x2048 fp16), softmax_custom, layernorm_custom.
"""
