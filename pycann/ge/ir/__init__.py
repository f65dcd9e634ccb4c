"""pycann IR (re-exported)."""

from pycann.ge.ir.context import CompileContext
from pycann.ge.ir.graph import Graph, Node, free_names, node_reads, verify

__all__ = ["CompileContext", "Graph", "Node", "free_names", "node_reads", "verify"]
