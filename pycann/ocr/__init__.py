"""OCR on pycann: PP-OCR det -> DB boxes -> cls -> rec -> CTC (``pipeline.OcrPipeline``), with
DVPP decoding the image. ``pycann ocr IMAGE`` prints the text; samples/ocr/ has the pyACL and
InferSession applications."""

from pycann.ocr.pipeline import OcrPipeline, TextLine, decode_image

__all__ = ["OcrPipeline", "TextLine", "decode_image"]
