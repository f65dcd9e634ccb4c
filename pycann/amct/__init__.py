"""AMCT (Ascend Model Compression Toolkit) for ONNX models: INT8 post-training quantisation with
AMCT's API names (``import pycann.amct as amct``; under ``pycann-run``, ``import amct_onnx as amct``).
See docs/amct.md. Implementation: ``config`` (the config file), ``observers`` (calibration
statistics), ``graph`` (layers, BN folding, QDQ), ``quantize`` (the flow), ``accuracy`` (reports
and accuracy-based calibration)."""

from pycann.amct.accuracy import AccuracyReport, accuracy_based_auto_calibration, compare_models
from pycann.amct.config import QuantConfig
from pycann.amct.quantize import calibrate, create_quant_config, quantize_model, save_model

__all__ = [
    "AccuracyReport",
    "QuantConfig",
    "accuracy_based_auto_calibration",
    "calibrate",
    "compare_models",
    "create_quant_config",
    "quantize_model",
    "save_model",
]
