"""CTC greedy decoding of PP-OCR rec outputs (PaddleOCR's ``CTCLabelDecode``).

The rec model's ``(N, T, C)`` softmax output: per step the most likely class; repeated classes
collapse to one, class 0 (the CTC blank) is dropped; a line's score is the mean probability of
the steps kept. The character table ships in the rec model (metadata key ``character``, one
character per line, as RapidOCR's models carry it); class 0 is the blank and the last class a
space, PaddleOCR's ``use_space_char``.
"""

from __future__ import annotations

import numpy as np
import onnx


def characters_from_model(path: str) -> list[str]:
    """The class table of a PP-OCR rec ONNX model: ["blank", chars..., " "]. Raises ``ValueError``
    when the model carries none."""
    model = onnx.load(path, load_external_data=False)
    meta = {p.key: p.value for p in model.metadata_props}
    if "character" not in meta:
        raise ValueError(f"{path} has no 'character' metadata; pass the dictionary (ppocr_keys) file")
    return ["blank", *meta["character"].splitlines(), " "]


def characters_from_file(path: str) -> list[str]:
    """The class table from a PaddleOCR dictionary file (one character per line)."""
    with open(path, encoding="utf-8") as f:
        chars = [line.rstrip("\r\n") for line in f]
    return ["blank", *chars, " "]


def ctc_decode(probs: np.ndarray, characters: list[str]) -> list[tuple[str, float]]:
    """``(N, T, C)`` probabilities -> N (text, score) pairs."""
    if probs.ndim != 3 or probs.shape[2] != len(characters):
        raise ValueError(f"rec output {probs.shape} does not match the {len(characters)}-class table")
    idx = probs.argmax(axis=2)
    best = probs.max(axis=2)
    out = []
    for i in range(probs.shape[0]):
        keep = idx[i] != 0
        keep[1:] &= idx[i][1:] != idx[i][:-1]
        text = "".join(characters[c] for c in idx[i][keep])
        out.append((text, float(best[i][keep].mean()) if keep.any() else 0.0))
    return out
