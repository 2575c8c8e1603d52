"""The ONNX importer on its own: folding, shapes from computes, errors."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from packager.errors import PackagerError, UnsupportedOpsError
from packager.frontend.importer import import_onnx


def model(nodes, inputs, outputs, inits=(), opset=13):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def vi(name, dims, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, dims)


def test_shape_subgraph_is_folded_into_a_constant_reshape():
    # y = Reshape(x, Concat(Gather(Shape(x), 0), [-1])): flatten all but the batch dim
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array([0], np.int64), "axes"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
    ]
    g = import_onnx("m", None, model=model(nodes, [vi("x", [2, 3, 4])], [vi("y", None)], inits))
    assert [n.op for n in g.nodes] == ["reshape"]
    assert g.values["y"].shape == (2, 12)
    assert g.values["shape"].data.tolist() == [2, -1]


def test_weight_generators_become_constants():
    nodes = [
        helper.make_node(
            "ConstantOfShape",
            ["wshape"],
            ["w"],
            value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.5]),
        ),
        helper.make_node("Add", ["x", "w"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array([3], np.int64), "wshape")]
    g = import_onnx("m", None, model=model(nodes, [vi("x", [2, 3])], [vi("y", None)], inits))
    assert [n.op for n in g.nodes] == ["add"]
    assert g.values["w"].is_const and g.values["w"].data.tolist() == [0.5] * 3
    assert g.values["y"].shape == (2, 3) and g.values["y"].dtype == "float32"


def test_input_shape_override_and_mismatch():
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", ["n", 4])], [vi("y", None)])
    assert import_onnx("m", {"x": [5, 4]}, model=m).values["y"].shape == (5, 4)
    with pytest.raises(PackagerError, match=r"x=5,3 does not match the model's dims \[n, 4\]"):
        import_onnx("m", {"x": [5, 3]}, model=m)
    with pytest.raises(PackagerError, match="names 'z', which is not an input"):
        import_onnx("m", {"z": [1]}, model=m)


def test_unsupported_ops_all_listed():
    nodes = [
        helper.make_node("NonZero", ["x"], ["a"], name="nz"),
        helper.make_node("Relu", ["x"], ["b"], name="r"),
        helper.make_node("Foo", ["b"], ["c"], name="foo", domain="acme"),
    ]
    m = model(nodes, [vi("x", [2])], [vi("a", None), vi("c", None)])
    m.opset_import.append(helper.make_opsetid("acme", 1))
    with pytest.raises(UnsupportedOpsError) as e:
        import_onnx("m.onnx", None, model=m)
    assert e.value.missing == {"NonZero": "nz", "acme.Foo": "foo"}
    assert str(e.value).startswith("m.onnx: 2 unsupported op type(s):")


def test_shape_error_names_the_node():
    nodes = [helper.make_node("Add", ["x", "z"], ["y"], name="bad_add")]
    m = model(nodes, [vi("x", [2, 3]), vi("z", [4])], [vi("y", None)])
    with pytest.raises(PackagerError, match="node 'bad_add'"):
        import_onnx("m", None, model=m)


def test_runtime_value_where_a_constant_is_needed():
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"], name="rs")]
    m = model(nodes, [vi("x", [2, 3]), vi("s", [2], TensorProto.INT64)], [vi("y", None)])
    with pytest.raises(
        PackagerError, match="node 'rs' \\(Reshape\\): input 1 .* must be a constant"
    ):
        import_onnx("m", None, model=m)


def test_value_shaped_op_with_runtime_input_is_explained():
    nodes = [helper.make_node("ConstantOfShape", ["s"], ["y"], name="cos")]
    m = model(nodes, [vi("s", [2], TensorProto.INT64)], [vi("y", None)])
    with pytest.raises(UnsupportedOpsError, match="ConstantOfShape with runtime inputs"):
        import_onnx("m", None, model=m)
