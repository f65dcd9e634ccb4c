"""pycann: Huawei CANN's stack (ATC, Graph Engine, AscendCL runtime) in Python, on the host CPU."""

__version__ = "0.1.0"
