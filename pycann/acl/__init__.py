"""pyACL-compatible facade (``acl.init``, ``acl.rt``, ``acl.mdl``, ...) and ``InferSession``."""
