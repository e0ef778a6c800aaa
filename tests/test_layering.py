"""Data flows one way, primitives -> brgemm -> kernels (issue 15's layering):
brgemm imports neither primitives nor benchmarks; primitives and benchmarks
reach brgemm through its public modules, never brgemm.backend (the seam only
brgemm's own modules talk to). Checked on every import statement, by ast."""
import ast
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Known exceptions, each with the reason it is not fixed yet (new ones fail)
KNOWN = {}


def imports(path):
    """Every module an import statement in `path` names (from-imports: the module
    and module.name, so `from brgemm import backend` counts as brgemm.backend)."""
    out = []
    for node in ast.walk(ast.parse((ROOT / path).read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    return out


def violations(path, mods):
    top = path.split("/")[0]
    banned = {"brgemm": ("primitives", "benchmarks"),
              "primitives": ("benchmarks", "brgemm.backend"),
              "benchmarks": ("brgemm.backend",)}.get(top, ())
    found = set()
    for m in mods:
        for b in banned:
            if m == b or m.startswith(b + "."):
                found.add(b)
    return found


def python_files():
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "*.py"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    return [p for p in listed if (ROOT / p).is_file()]


def test_layers_import_only_downwards():
    files = [p for p in python_files() if p.split("/")[0] in ("brgemm", "primitives", "benchmarks")]
    assert len(files) > 40
    bad = [f"{p} imports {b}" for p in files for b in sorted(violations(p, imports(p)))
           if (p, b) not in KNOWN]
    assert not bad, "\n".join(bad)


def test_the_check_sees_a_violation():
    assert violations("brgemm/x.py", ["numpy", "primitives.fc"]) == {"primitives"}
    assert violations("primitives/x.py", ["brgemm.plan", "brgemm.backend.cpu"]) == \
        {"brgemm.backend"}
    assert violations("primitives/x.py", ["brgemm", "brgemm.backend"]) == {"brgemm.backend"}
    assert violations("benchmarks/x.py", ["brgemm.machine", "primitives.fc"]) == set()
