"""kernels/program.accel's table as docs/accel.md lays it out (the C runtime parses
that layout): 96-byte entries from byte 64."""

import struct

from packager.accel.program import AccelConfig, Program, write_programs


def test_table_entries_are_96_bytes_apart():
    finish = {"opcode": 4}
    raw = write_programs(
        [Program("first", 2, [finish]), Program("second", 3, [finish])], AccelConfig()
    )
    for k, (name, n_args) in enumerate([(b"first", 2), (b"second", 3)]):
        at = 64 + 96 * k
        assert raw[at : at + 64].rstrip(b"\0") == name
        assert struct.unpack_from("<4IQ", raw, at + 64)[:2] == (n_args, 1)
    offset = struct.unpack_from("<Q", raw, 64 + 96 + 80)[0]
    assert offset == 64 + 2 * 96 + 16  # after the table (aligned) and the first program
