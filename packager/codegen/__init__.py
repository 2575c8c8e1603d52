"""Code generation from the loop IR (C first) and the build helpers."""

from .build import build_kernel, compile_shared, load_kernel  # noqa: F401
from .c import codegen_c  # noqa: F401
