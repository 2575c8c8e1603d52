"""Schedule templates for OpenCL GPUs (one module per op family) and the generic GPU
schedule every op without a template gets. ops/_all.py imports every module here, which
registers the templates."""
