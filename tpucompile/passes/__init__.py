"""Graph-to-graph passes over the float IR; each module has ``run(graph) -> graph``."""
