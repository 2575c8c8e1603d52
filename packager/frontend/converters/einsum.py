"""Einsum: the equations that are a (batched) matrix product or a transpose.

``bij,bjk->bik``, ``ij,kj->ik``, ``i,i`` (an inner product), ``ij->ji`` and the like
become transposes, reshapes and one matmul (whose transposes the graph pass folds into
its indexing). Equations that sum an operand's own axis away, take diagonals (a letter
twice in one term), use an ellipsis, have three or more operands, or contract more than
one letter are refused by name.
"""

from __future__ import annotations

from ._common import check_attrs
from .registry import converter


def _parse(ctx, node) -> tuple[list[str], str]:
    eq = str(ctx.attr(node, "equation", "")).replace(" ", "")
    if "..." in eq:
        ctx.fail(node, f"equation '{eq}': an ellipsis is not supported")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if not arrow:  # implicit output: the letters used once, in alphabetical order
        letters = "".join(terms)
        out = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    for t in [*terms, out]:
        if len(set(t)) != len(t) or not t.isalpha() and t:
            ctx.fail(node, f"equation '{eq}': term '{t}' repeats a letter (a diagonal)")
    if len(terms) != len(node.input):
        ctx.fail(node, f"equation '{eq}' has {len(terms)} operand(s), the node {len(node.input)}")
    for t, name in zip(terms, node.input, strict=True):
        if len(t) != len(ctx.value(name).shape):
            ctx.fail(
                node,
                f"equation '{eq}': term '{t}' for input '{name}' of rank "
                f"{len(ctx.value(name).shape)}",
            )
    return terms, out


class _Emit:
    """Transposes and reshapes that are left out when they would change nothing."""

    def __init__(self, ctx, node):
        self.ctx, self.node, self.nodes = ctx, node, []

    def op(self, op: str, x: str, last: bool, **attrs) -> str:
        out = self.node.output[0] if last else self.ctx.fresh(self.node.output[0])
        self.nodes.append(self.ctx.node(op, self.node, [x], outputs=[out], **attrs))
        return out

    def transpose(self, x: str, have: str, want: str, last=False) -> str:
        if have == want and not last:
            return x
        return self.op("transpose", x, last, perm=[have.index(c) for c in want])

    def reshape(self, x: str, have: list[int], shape: list[int], last=False) -> str:
        if have == shape and not last:
            return x
        return self.op("reshape", x, last, shape=shape)


@converter("Einsum")
def einsum(ctx, node):
    check_attrs(ctx, node, {"equation"})
    terms, out = _parse(ctx, node)
    em = _Emit(ctx, node)
    if len(terms) == 1:
        if sorted(terms[0]) != sorted(out):
            ctx.fail(
                node, f"'{terms[0]}->{out}' sums over an axis: one operand can only be transposed"
            )
        em.transpose(node.input[0], terms[0], out, last=True)
        return em.nodes
    if len(terms) != 2:
        ctx.fail(node, f"{len(terms)} operands: only one (a transpose) or two are supported")
    return _product(ctx, node, em, *terms, out)


def _product(ctx, node, em: _Emit, ta: str, tb: str, out: str):
    sa, sb = ctx.value(node.input[0]).shape, ctx.value(node.input[1]).shape
    size_b = dict(zip(tb, sb, strict=True))
    size = {**size_b, **dict(zip(ta, sa, strict=True))}
    batch = [c for c in out if c in ta and c in tb]
    k = [c for c in ta if c in tb and c not in out]
    i = [c for c in ta if c not in tb and c in out]
    j = [c for c in tb if c not in ta and c in out]
    alone = [c for c in ta + tb if c not in out and not (c in ta and c in tb)]
    if alone:
        ctx.fail(node, f"letter(s) {''.join(alone)} summed within one operand: not supported")
    if len(k) != 1 or len(i) > 1 or len(j) > 1:
        ctx.fail(
            node,
            f"'{ta},{tb}->{out}' is not a matrix product (one contracted letter, at most one "
            "free letter per operand)",
        )
    for c in batch + k:
        if size[c] != size_b[c]:
            ctx.fail(node, f"letter '{c}' has sizes {size[c]} and {size_b[c]} (no broadcasting)")
    dims = lambda letters: [size[c] for c in letters]  # noqa: E731
    a = em.transpose(node.input[0], ta, "".join(batch + i + k))
    a = em.reshape(a, dims(batch + i + k), dims(batch) + (dims(i) or [1]) + dims(k))
    b = em.transpose(node.input[1], tb, "".join(batch + k + j))
    b = em.reshape(b, dims(batch + k + j), dims(batch) + dims(k) + (dims(j) or [1]))
    y = ctx.fresh(node.output[0])
    em.nodes.append(ctx.node("matmul", node, [a, b], outputs=[y]))
    flat = "".join(batch + i + j)
    have = dims(batch) + (dims(i) or [1]) + (dims(j) or [1])
    if flat == out:
        em.reshape(y, have, dims(flat), last=True)
    else:
        em.transpose(em.reshape(y, have, dims(flat)), flat, out, last=True)
    return em.nodes
