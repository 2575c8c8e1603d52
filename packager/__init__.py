"""Ahead-of-time deployment packager: ONNX models to self-contained C bundles."""

__version__ = "0.1.0"
