"""The FPGA accelerator family: its instruction set (isa.py), programs (program.py), the
compiler from loop IR to instruction streams, and the simulator's Python binding.
docs/accel.md is the reference for all of it."""
