"""Running one generated OpenCL kernel on this machine's OpenCL device from Python (through
the ICD loader, with ctypes): for the op tests and for measuring candidates locally.

It follows the runtime's kernel ABI (codegen/opencl.py): each array argument is a buffer
and an element offset (always 0 here). ``PACKAGER_OPENCL_DEVICE`` picks a device by a
substring of its name, as in the runtime; otherwise the first GPU, else the first device.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from dataclasses import dataclass, field

import numpy as np

from .errors import PackagerError

_DEVICE_TYPE_GPU = 1 << 2
_DEVICE_TYPE_ALL = 0xFFFFFFFF
_DEVICE_NAME = 0x102B
_PROGRAM_BUILD_LOG = 0x1183
_MEM_READ_WRITE = 1 << 0
_MEM_COPY_HOST_PTR = 1 << 5
_QUEUE_PROFILING_ENABLE = 1 << 1
_PROFILING_START = 0x1282
_PROFILING_END = 0x1283

_ERRORS = {
    -1: "CL_DEVICE_NOT_FOUND",
    -4: "CL_MEM_OBJECT_ALLOCATION_FAILURE",
    -5: "CL_OUT_OF_RESOURCES",
    -6: "CL_OUT_OF_HOST_MEMORY",
    -11: "CL_BUILD_PROGRAM_FAILURE",
    -30: "CL_INVALID_VALUE",
    -38: "CL_INVALID_MEM_OBJECT",
    -46: "CL_INVALID_KERNEL_NAME",
    -48: "CL_INVALID_KERNEL",
    -49: "CL_INVALID_ARG_INDEX",
    -50: "CL_INVALID_ARG_VALUE",
    -51: "CL_INVALID_ARG_SIZE",
    -52: "CL_INVALID_KERNEL_ARGS",
    -54: "CL_INVALID_WORK_GROUP_SIZE",
    -55: "CL_INVALID_WORK_ITEM_SIZE",
    -63: "CL_INVALID_GLOBAL_WORK_SIZE",
    -1001: "CL_PLATFORM_NOT_FOUND_KHR",
}

_vp = ctypes.c_void_p
_sz = ctypes.c_size_t
_i32 = ctypes.c_int32


def _lib() -> ctypes.CDLL:
    name = ctypes.util.find_library("OpenCL") or "libOpenCL.so.1"
    try:
        return ctypes.CDLL(name)
    except OSError as e:
        raise PackagerError(
            f"no OpenCL ICD loader on this machine ({e}); scripts/setup.sh installs "
            "ocl-icd-opencl-dev and pocl-opencl-icd"
        ) from e


def _check(rc: int, call: str) -> None:
    if rc != 0:
        raise PackagerError(f"OpenCL: {call} failed: {_ERRORS.get(rc, rc)}")


@dataclass
class Run:
    outputs: list[np.ndarray]
    kernel_ms: float  # from the kernel's profiling event (the median of ``samples``)
    samples: list[float] = field(default_factory=list)  # ms of each launch


class Device:
    """One OpenCL device with a context and a profiling queue."""

    def __init__(self) -> None:
        cl = self.cl = _lib()
        cl.clCreateContext.restype = _vp
        cl.clCreateCommandQueue.restype = _vp
        cl.clCreateProgramWithSource.restype = _vp
        cl.clCreateKernel.restype = _vp
        cl.clCreateBuffer.restype = _vp
        n = ctypes.c_uint32()
        _check(cl.clGetPlatformIDs(0, None, ctypes.byref(n)), "clGetPlatformIDs")
        if n.value == 0:
            raise PackagerError("OpenCL: no platform (is pocl-opencl-icd installed?)")
        plats = (_vp * n.value)()
        _check(cl.clGetPlatformIDs(n.value, plats, None), "clGetPlatformIDs")
        self.device, self.name = self._pick(plats)
        err = _i32()
        dev = _vp(self.device)
        self.ctx = cl.clCreateContext(None, 1, ctypes.byref(dev), None, None, ctypes.byref(err))
        _check(err.value, "clCreateContext")
        self.queue = cl.clCreateCommandQueue(
            _vp(self.ctx), dev, ctypes.c_uint64(_QUEUE_PROFILING_ENABLE), ctypes.byref(err)
        )
        _check(err.value, "clCreateCommandQueue")
        self._programs: dict[str, int] = {}

    def _pick(self, plats) -> tuple[int, str]:
        want = os.environ.get("PACKAGER_OPENCL_DEVICE", "")
        found: list[tuple[int, str, bool]] = []
        for p in plats:
            for kind, gpu in ((_DEVICE_TYPE_GPU, True), (_DEVICE_TYPE_ALL, False)):
                n = ctypes.c_uint32()
                if self.cl.clGetDeviceIDs(_vp(p), ctypes.c_uint64(kind), 0, None, ctypes.byref(n)):
                    continue
                devs = (_vp * n.value)()
                self.cl.clGetDeviceIDs(_vp(p), ctypes.c_uint64(kind), n.value, devs, None)
                found += [(d, self._name(d), gpu) for d in devs]
        for d, name, _gpu in sorted(found, key=lambda f: not f[2]):
            if want in name:
                return d, name
        names = ", ".join(sorted({f[1] for f in found})) or "none"
        raise PackagerError(f"OpenCL: no device matching {want!r} (devices: {names})")

    def _name(self, dev) -> str:
        buf = ctypes.create_string_buffer(256)
        self.cl.clGetDeviceInfo(_vp(dev), ctypes.c_uint32(_DEVICE_NAME), 256, buf, None)
        return buf.value.decode(errors="replace")

    def program(self, source: str) -> int:
        got = self._programs.get(source)
        if got is not None:
            return got
        cl, err = self.cl, _i32()
        src = ctypes.c_char_p(source.encode())
        prog = cl.clCreateProgramWithSource(
            _vp(self.ctx), 1, ctypes.byref(src), None, ctypes.byref(err)
        )
        _check(err.value, "clCreateProgramWithSource")
        dev = _vp(self.device)
        rc = cl.clBuildProgram(_vp(prog), 1, ctypes.byref(dev), b"", None, None)
        if rc != 0:
            log = ctypes.create_string_buffer(1 << 16)
            cl.clGetProgramBuildInfo(
                _vp(prog), dev, ctypes.c_uint32(_PROGRAM_BUILD_LOG), 1 << 16, log, None
            )
            raise PackagerError(
                f"OpenCL: program build failed ({_ERRORS.get(rc, rc)}):\n"
                f"{log.value.decode(errors='replace')[-3000:]}"
            )
        self._programs[source] = prog
        return prog

    def forget(self, source: str) -> None:
        """Release the program built from ``source`` (a tuning run builds many)."""
        prog = self._programs.pop(source, None)
        if prog is not None:
            self.cl.clReleaseProgram(_vp(prog))

    def run(
        self, source: str, name: str, arrays: list[np.ndarray], n_out: int, launch, repeat=1
    ) -> Run:
        """Run kernel ``name`` of ``source`` on ``arrays`` (inputs, then outputs whose
        contents are the initial values) with ``launch`` (codegen.opencl.Launch), ``repeat``
        times; returns the outputs and the kernel's times."""
        cl, err = self.cl, _i32()
        kern = cl.clCreateKernel(_vp(self.program(source)), name.encode(), ctypes.byref(err))
        _check(err.value, f"clCreateKernel({name})")
        bufs = []
        try:
            for k, a in enumerate(arrays):
                a = np.ascontiguousarray(a)
                size = max(a.nbytes, 1)
                host = a.ctypes.data_as(_vp) if a.nbytes else None
                flags = _MEM_READ_WRITE | (_MEM_COPY_HOST_PTR if a.nbytes else 0)
                buf = cl.clCreateBuffer(
                    _vp(self.ctx), ctypes.c_uint64(flags), _sz(size), host, ctypes.byref(err)
                )
                _check(err.value, "clCreateBuffer")
                bufs.append(buf)
                mem = _vp(buf)
                _check(cl.clSetKernelArg(_vp(kern), 2 * k, _sz(8), ctypes.byref(mem)), "arg")
                off = ctypes.c_uint64(0)
                _check(cl.clSetKernelArg(_vp(kern), 2 * k + 1, _sz(8), ctypes.byref(off)), "arg")
            samples = [self._launch(kern, name, launch) for _ in range(repeat)]
            outs = []
            for a, buf in zip(
                arrays[len(arrays) - n_out :], bufs[len(arrays) - n_out :], strict=True
            ):
                out = np.empty_like(np.ascontiguousarray(a))
                if out.nbytes:
                    rc = cl.clEnqueueReadBuffer(
                        _vp(self.queue),
                        _vp(buf),
                        1,
                        _sz(0),
                        _sz(out.nbytes),
                        out.ctypes.data_as(_vp),
                        0,
                        None,
                        None,
                    )
                    _check(rc, "clEnqueueReadBuffer")
                outs.append(out)
            return Run(outs, sorted(samples)[len(samples) // 2], samples)
        finally:
            for b in bufs:
                cl.clReleaseMemObject(_vp(b))
            cl.clReleaseKernel(_vp(kern))

    def _launch(self, kern, name: str, launch) -> float:
        """One launch of ``kern``, waited for; its time in ms from the profiling event."""
        cl = self.cl
        gsz = (_sz * 3)(*launch.global_size)
        lsz = (_sz * 3)(*launch.local_size)
        ev = _vp()
        rc = cl.clEnqueueNDRangeKernel(
            _vp(self.queue), _vp(kern), 3, None, gsz, lsz, 0, None, ctypes.byref(ev)
        )
        _check(
            rc,
            f"clEnqueueNDRangeKernel({name}, global {launch.global_size}, "
            f"local {launch.local_size})",
        )
        try:
            _check(cl.clWaitForEvents(1, ctypes.byref(ev)), "clWaitForEvents")
            t0, t1 = ctypes.c_uint64(), ctypes.c_uint64()
            cl.clGetEventProfilingInfo(
                ev, ctypes.c_uint32(_PROFILING_START), 8, ctypes.byref(t0), None
            )
            cl.clGetEventProfilingInfo(
                ev, ctypes.c_uint32(_PROFILING_END), 8, ctypes.byref(t1), None
            )
        finally:
            cl.clReleaseEvent(ev)
        return (t1.value - t0.value) / 1e6


_DEVICE: Device | None = None


def device() -> Device:
    """The process's OpenCL device (made on first use)."""
    global _DEVICE
    if _DEVICE is None:
        _DEVICE = Device()
    return _DEVICE
