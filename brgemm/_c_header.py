"""A C header as cffi's cdef reads it. Imports nothing from brgemm: the CPU
build script (brgemm/_build_cpu.py) loads this file by path before the package
can be imported, and the CUDA driver binding imports it at run time."""
import pathlib


def cdef_text(header: pathlib.Path) -> str:
    """The header without preprocessor lines and its C++-only blocks."""
    kept, in_cplusplus = [], False
    for line in header.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("#ifdef __cplusplus"):
            in_cplusplus = True
        elif in_cplusplus:
            in_cplusplus = not stripped.startswith("#endif")
        elif not stripped.startswith("#"):
            kept.append(line)
    return "\n".join(kept)
