"""Data flows one way, primitives -> brgemm -> kernels (issue 15's layering):
brgemm imports neither primitives nor benchmarks; primitives and benchmarks
reach brgemm through its public modules, never brgemm.backend (the seam only
brgemm's own modules talk to) nor a private module or name of brgemm's, and
benchmarks read no private attribute of any object not their own. Checked on
every import statement and attribute, by ast."""
import ast

from conftest import ROOT, python_files


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


def private_uses(path, source=None):
    """brgemm's private parts that `path` names: a module or name with a leading
    underscore imported from brgemm; in benchmarks also `x._name` for any x but
    self and cls (a benchmark owns no brgemm object's insides)."""
    tree = ast.parse(source if source is not None else (ROOT / path).read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.split(".")[0] == "brgemm"]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level \
                and node.module.split(".")[0] == "brgemm":
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            names = []
        found += [f"line {node.lineno}: import {n}" for n in names
                  if any(part.startswith("_") for part in n.split("."))]
        if path.startswith("benchmarks/") and isinstance(node, ast.Attribute) \
                and node.attr.startswith("_") and not node.attr.startswith("__") \
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_primitives_and_benchmarks_use_public_parts_only():
    files = [p for p in python_files() if p.split("/")[0] in ("primitives", "benchmarks")]
    assert len(files) > 30
    bad = [f"{p} {use}" for p in files for use in private_uses(p)]
    assert not bad, "\n".join(bad)


def test_the_check_sees_a_private_use():
    src = ("from brgemm._brgemm_cpu import lib\nimport brgemm._build_cuda\n"
           "from brgemm.kernel import _BY_ADDRESS\nnat = kern._kernel('strd')\n"
           "p = kern._strd_last[1]._k\nself._job = 1\nt = x.__class__\n")
    def lines(path):
        return sorted({int(u.split(":")[0].split()[1]) for u in private_uses(path, src)})
    assert lines("benchmarks/x.py") == [1, 2, 3, 4, 5]
    assert lines("primitives/x.py") == [1, 2, 3]  # a primitive's own objects are its own
    assert private_uses("benchmarks/x.py", "from brgemm import machine\nmachine.amx_peak()") == []
