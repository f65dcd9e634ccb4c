"""DVPP (digital vision pre-processing) on the host CPU: JPEG/PNG decode, JPEG encode, VPC resize /
crop / crop-and-paste / colour conversion between CANN's pixel formats, with the device's layout
and alignment rules (cann-interfaces.md §9). ``pycann.acl.media`` is the pyACL facade over it.

Decoders are libraries (libjpeg-turbo through ``simplejpeg`` and Pillow, PNG through Pillow);
resampling and colour conversion are numpy here. Errors are ``DvppError`` with a ``Fault`` kind.
Modules: ``formats`` (pixel formats, layouts, stride rules), ``color``, ``picture`` (buffers <->
arrays), ``resize`` (the interpolations), ``vpc``, ``jpeg``, ``png``, ``fast`` (decode + resize
in one step with libjpeg-turbo's DCT scaling, for input pipelines).
"""

from pycann.dvpp.formats import LAYOUTS, DvppError, Fault, PicDesc, PixelFormat, buffer_size, vpc_strides
from pycann.dvpp.resize import Interpolation
from pycann.dvpp.vpc import Roi

__all__ = ["LAYOUTS", "DvppError", "Fault", "Interpolation", "PicDesc", "PixelFormat", "Roi", "buffer_size",
           "vpc_strides"]
