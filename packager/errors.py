"""Errors a user can act on. The CLI prints them and exits with code 2."""


class PackagerError(Exception):
    """Bad input: the message names the file, node or field at fault."""


class UnsupportedOpsError(PackagerError):
    """``needs_constant``: when every op missing is one supported with constant inputs
    only (ConstantOfShape, Range), the runtime values that would make them constants."""

    def __init__(self, missing: dict[str, str], model: str, needs_constant=()):
        self.missing = missing
        self.needs_constant = tuple(needs_constant)
        lines = [f"  {op} (first at node '{node}')" for op, node in sorted(missing.items())]
        super().__init__(f"{model}: {len(missing)} unsupported op type(s):\n" + "\n".join(lines))


class NeedsConstantError(PackagerError):
    """A node needs one of its inputs as a constant (a Reshape's shape, a Resize's scales)
    and the model computes it at run time: ``input_name`` says which value."""

    def __init__(self, message: str, input_name: str):
        self.input_name = input_name
        super().__init__(message)
