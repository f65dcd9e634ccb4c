"""GE's compile side: importers -> pass pipelines -> ``CompiledModel`` (docs/architecture.md, "Inside ge")."""
