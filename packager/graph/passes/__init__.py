"""Graph passes: each module holds one pass, a function ``(graph, ctx) -> graph``."""
