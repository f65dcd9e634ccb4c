"""The ``pycann`` console script: one entry point dispatching to the tools.

``pycann compare ...`` (accuracy comparison with ONNX Runtime, tools/compare.py),
``pycann msprof ...`` (profiling, tools/msprof.py, cann-interfaces.md §4.1),
``pycann atc ...`` (the compiler, tools/atc.py, §2),
``pycann aoe ...`` (tuning and the knowledge bank, tools/aoe.py, §5),
``pycann ocr IMAGE`` (PP-OCR text, tools/ocr.py).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

USAGE = """usage: pycann <command> [options]

commands:
  compare   compare a pycann model with ONNX Runtime node by node (pycann compare --help)
  msprof    profile an application (msprof --output=DIR --application="python app.py")
  atc       compile an ONNX, TensorFlow or Caffe model into a .om (atc --help)
  aoe       tune a model's operators or GE choices into the knowledge bank (aoe --help)
  ocr       print the text in an image with PP-OCR (pycann ocr IMAGE)
"""


def _command(name: str) -> Callable[[Sequence[str]], int] | None:
    if name == "compare":
        from pycann.tools.compare import main as compare_main

        return compare_main
    if name == "msprof":
        from pycann.tools.msprof import main as msprof_main

        return msprof_main
    if name == "atc":
        from pycann.tools.atc import main as atc_main

        return atc_main
    if name == "aoe":
        from pycann.tools.aoe import main as aoe_main

        return aoe_main
    if name == "ocr":
        from pycann.tools.ocr import main as ocr_main

        return ocr_main
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``pycann``; returns the sub-command's exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE, end="")
        return 0 if argv else 2
    fn = _command(argv[0])
    if fn is None:
        print(f"pycann: unknown command {argv[0]!r}\n{USAGE}", end="", file=sys.stderr)
        return 2
    return int(fn(argv[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
