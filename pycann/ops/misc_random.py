from pycann.ops.opdef import OpDef

OPS: list[OpDef] = []
