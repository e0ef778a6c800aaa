"""The project's size rule (issue 15): no Python file over 450 lines and no
function over 80, except where a comment at its top says why. The why is a
comment (or docstring) line that says "over 450 lines" near the top of the
file, or "over 80 lines" in the function's docstring or first lines."""
import ast

from conftest import ROOT, python_files

MAX_FILE, MAX_FUNCTION = 450, 80
FILE_TOP, FUNCTION_TOP = 40, 6  # how far from the top the why may stand, in lines


def long_parts(source: str, name: str) -> list[str]:
    """What in one file breaks the rule, unexplained: 'name: N lines' for the
    file, 'name:line function(): N lines' for each function."""
    lines = source.splitlines()
    out = []
    if len(lines) > MAX_FILE and not any("over 450 lines" in line.lower()
                                         for line in lines[:FILE_TOP]):
        out.append(f"{name}: {len(lines)} lines")
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        length = node.end_lineno - node.lineno + 1
        if length <= MAX_FUNCTION:
            continue
        doc = (ast.get_docstring(node) or "").lower()
        top = "\n".join(lines[node.lineno - 1:node.lineno - 1 + FUNCTION_TOP]).lower()
        if "over 80 lines" not in doc and "over 80 lines" not in top:
            out.append(f"{name}:{node.lineno} {node.name}(): {length} lines")
    return out


def test_no_long_file_or_function_without_a_why():
    files = python_files()
    assert len(files) > 50  # the listing found the project
    found = [part for p in files for part in long_parts((ROOT / p).read_text(), p)]
    assert not found, "too long, and no comment at the top says why:\n" + "\n".join(found)


def test_the_rule_catches_what_it_should():
    body = "".join(f"    x{i} = {i}\n" for i in range(80))
    assert long_parts("def f():\n" + body, "a.py") == ["a.py:1 f(): 81 lines"]
    assert long_parts("def f():\n" + body[:-len("    x79 = 79\n")], "a.py") == []
    assert long_parts('def f():\n    """Over 80 lines: one table."""\n' + body, "a.py") == []
    assert long_parts("def f():\n" + "    pass\n" * 10 + "    # over 80 lines\n" + body,
                      "a.py") == ["a.py:1 f(): 92 lines"]  # a why far down does not count
    long_file = "x = 1\n" * 451
    assert long_parts(long_file, "b.py") == ["b.py: 451 lines"]
    assert long_parts("x = 1\n" * 450, "b.py") == []
    assert long_parts("# Over 450 lines: one table.\n" + long_file, "b.py") == []
