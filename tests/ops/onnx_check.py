"""One-node ONNX models through the frontend and the op library, checked against onnx's
reference evaluator: tests converters (attrs, opset differences, constant inputs) and
computes together, through the te interpreter (run_graph) and the generated C kernels
(CKernels)."""

from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from packager import te
from packager.codegen import codegen_c, compile_shared, load_kernel
from packager.codegen.build import have_compiler
from packager.frontend.importer import import_onnx
from packager.graph.ir import np_dtype
from packager.ops.registry import get_op

from .harness import run_op_numpy


def one_node_model(op_type, inputs, attrs=None, consts=(), opset=17, n_out=1):
    """Input k is named xk ('' where inputs[k] is None); those in ``consts`` are
    initializers, the others graph inputs."""
    names = ["" if a is None else f"x{k}" for k, a in enumerate(inputs)]
    inits, graph_inputs = [], []
    for k, (name, a) in enumerate(zip(names, inputs, strict=True)):
        if a is None:
            continue
        if k in consts:
            inits.append(numpy_helper.from_array(np.asarray(a), name))
        else:
            elem = helper.np_dtype_to_tensor_dtype(a.dtype)
            graph_inputs.append(helper.make_tensor_value_info(name, elem, a.shape))
    outs = [f"y{k}" for k in range(n_out)]
    node = helper.make_node(op_type, names, outs, name=f"{op_type.lower()}_node", **(attrs or {}))
    out_infos = [helper.make_value_info(o, helper.TypeProto()) for o in outs]
    graph = helper.make_graph([node], "g", graph_inputs, out_infos, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def run_graph(graph, feeds: dict) -> list[np.ndarray]:
    """Every node of an imported graph, in order, through the te interpreter."""
    vals = {n: v.data for n, v in graph.values.items() if v.is_const}
    vals.update(feeds)
    for node in graph.nodes:
        outs = run_op_numpy(node.op, [vals[i] for i in node.inputs], node.attrs)
        vals.update((name, o) for name, o in zip(node.outputs, outs, strict=True) if name)
    return [vals[o] for o in graph.outputs]


def prepare(op_type, inputs, attrs=None, opset=17, consts=(), n_out=1):
    """(imported graph, feeds, reference outputs) of a one-node model."""
    inputs = [None if a is None else np.asarray(a) for a in inputs]
    model = one_node_model(op_type, inputs, attrs, consts, opset, n_out)
    feeds = {f"x{k}": a for k, a in enumerate(inputs) if a is not None and k not in consts}
    with np.errstate(all="ignore"):
        want = [np.asarray(w) for w in ReferenceEvaluator(model).run(None, feeds)]
    return import_onnx("test.onnx", model=model), feeds, want


def assert_matches(got, want, tol=1e-5):
    for w, g in zip(want, got, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


class CKernels:
    """The generated C kernels of many graphs, built by one compile_shared call (objects
    compile in parallel and are cached by source), then run node by node."""

    def __init__(self, graphs: dict):
        self.plans, self.errors, sources = {}, {}, {}
        for key, graph in graphs.items():
            try:
                self.plans[key] = [self._lower(graph, node, sources) for node in graph.nodes]
            except Exception as e:  # reported by the test of this graph only
                self.errors[key] = e
        self.lib = compile_shared(sources) if sources else None

    @staticmethod
    def _lower(graph, node, sources):
        values = graph.values
        phs = [
            te.placeholder(values[i].shape, values[i].dtype, f"in{k}")
            for k, i in enumerate(node.inputs)
        ]
        outs = list(get_op(node.op).compute(phs, node.attrs))
        name = f"k_case{len(sources)}"
        func = te.lower(te.default_schedule(outs), phs + outs, name)
        sources[name] = codegen_c(func)
        return node, name, [(t.shape, np_dtype(t.dtype)) for t in outs]

    def run(self, key, graph, feeds: dict) -> list[np.ndarray]:
        if key in self.errors:
            raise self.errors[key]
        vals = {n: v.data for n, v in graph.values.items() if v.is_const}
        vals.update(feeds)
        for node, name, out_types in self.plans[key]:
            outs = [np.empty(shape, dtype) for shape, dtype in out_types]
            args = [_contiguous(vals[i]) for i in node.inputs]
            load_kernel(self.lib, name)(*args, *outs)
            vals.update((n, o) for n, o in zip(node.outputs, outs, strict=True) if n)
        return [vals[o] for o in graph.outputs]


def prepare_all(cases: dict) -> dict:
    """id -> prepare(*case), or the exception it raised (reported by that case's test)."""
    out = {}
    for key, case in cases.items():
        try:
            out[key] = prepare(*case)
        except Exception as e:
            out[key] = e
    return out


def check_case(key, prepared: dict, kernels: CKernels | None) -> None:
    """A prepared case through the te interpreter and, if built, the C kernels."""
    if isinstance(prepared[key], Exception):
        raise prepared[key]
    graph, feeds, want = prepared[key]
    assert_matches(run_graph(graph, feeds), want)
    if kernels is not None:
        assert_matches(kernels.run(key, graph, feeds), want)


def build_kernels(prepared: dict) -> CKernels | None:
    if not have_compiler():
        return None
    return CKernels({k: p[0] for k, p in prepared.items() if not isinstance(p, Exception)})


def _contiguous(a) -> np.ndarray:
    # Not np.ascontiguousarray: it turns a 0-d array into a 1-d one.
    a = np.asarray(a)
    return a if a.flags.c_contiguous else a.copy()
