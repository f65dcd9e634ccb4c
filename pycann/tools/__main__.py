"""``python -m pycann.tools`` lists the tools."""

print("pycann tools: python -m pycann.tools.atc (atc)")
