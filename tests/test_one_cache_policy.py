"""Issue 15's "one of each" for caches: every cache in brgemm and primitives
evicts through brgemm/lru.py. Checked by ast: outside lru.py no OrderedDict,
functools.lru_cache or functools.cache, no popitem, and no hand-made policy of
the form `if len(d) ... : d.clear()`."""
import ast

from conftest import ROOT, python_files

THE_ONE = "brgemm/lru.py"


def own_policies(source):
    """Lines of `source` that keep a cache's eviction policy of their own."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name) and node.id in ("OrderedDict", "lru_cache"):
            found.append(f"line {node.lineno}: {node.id}")
        if isinstance(node, ast.Attribute) and (
                node.attr in ("OrderedDict", "lru_cache", "popitem") or node.attr == "cache"
                and isinstance(node.value, ast.Name) and node.value.id == "functools"):
            found.append(f"line {node.lineno}: {node.attr}")
        if isinstance(node, ast.ImportFrom) and node.module in ("functools", "collections"):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names
                      if a.name in ("cache", "lru_cache", "OrderedDict")]
        if isinstance(node, ast.If) and any(
                isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "len"
                for n in ast.walk(node.test)) and any(
                isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                and n.func.attr == "clear" for stmt in node.body for n in ast.walk(stmt)):
            found.append(f"line {node.lineno}: clear when full")
    return found


def test_every_cache_evicts_through_lru():
    files = [p for p in python_files() if p.split("/")[0] in ("brgemm", "primitives")
             and p != THE_ONE]
    assert len(files) > 40
    bad = [f"{p} {use}" for p in files for use in own_policies((ROOT / p).read_text())]
    assert not bad, "\n".join(bad)
    assert own_policies((ROOT / THE_ONE).read_text())  # the check sees the one policy


def test_the_check_sees_a_policy():
    assert own_policies("import functools\n@functools.lru_cache(8)\ndef f(g): pass\n")
    assert own_policies("from functools import cache\n@cache\ndef f(g): pass\n")
    assert own_policies("d = collections.OrderedDict()\n")
    assert own_policies("if len(d) > 16:\n    d.clear()\nd[k] = v\n")
    assert not own_policies("d = {}\nif len(d) > 16:\n    raise ValueError('d')\n")
    assert not own_policies("x = self.cache\nbuf.clear()\n")
