"""Schedule templates for OpenCL GPUs (one module per op family) and the generic GPU
schedule every op without a template gets. Importing the package registers them."""

from . import pool, reduce  # noqa: F401  (register their templates)
