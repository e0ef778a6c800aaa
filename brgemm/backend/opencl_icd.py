"""Make Intel's CPU OpenCL runtime from PyPI findable. The intel-opencl-rt
wheel installs an ICD file that names a path that does not exist, so the
OpenCL loader finds no CPU device (DESIGN.md section 4). Adding the library the
wheel did install to OCL_ICD_FILENAMES fixes it; the loader reads the variable
once, so this must run before dpctl or a SYCL build of oneDNN first loads."""
import importlib.metadata
import os
import pathlib


def point_icd_loader():
    """Add intel-opencl-rt's libintelocl.so to OCL_ICD_FILENAMES; its path, or
    None when the package is not installed."""
    try:
        files = importlib.metadata.files("intel-opencl-rt") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in files:
        if f.name == "libintelocl.so":
            path = str(pathlib.Path(f.locate()).resolve())
            current = [p for p in os.environ.get("OCL_ICD_FILENAMES", "").split(":") if p]
            if path not in current:
                os.environ["OCL_ICD_FILENAMES"] = ":".join(current + [path])
            return path
    return None
