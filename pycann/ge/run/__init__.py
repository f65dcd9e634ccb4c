"""GE's run side: a loaded model, its execution plans, their cache and the executor (docs/architecture.md)."""
