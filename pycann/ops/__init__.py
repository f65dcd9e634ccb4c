"""pycann operator library: definitions, shape inference and kernels (see ``registry``)."""
