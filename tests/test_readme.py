"""The README's promises that code can check: it starts with the two commands
(.ci/run takes the test command from there), and its first example runs."""
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_starts_with_the_two_commands():
    first = README.split("```")[1]
    assert first.strip().splitlines() == [
        "sh", "./setup.sh && .venv/bin/python -m benchmarks all --quick",
        "./setup.sh && .venv/bin/python -m pytest -q"]


def test_the_first_example_runs():
    block = re.search(r"## A first example\n\n```python\n(.*?)```", README, re.S)
    assert block, "README: no '## A first example' python block"
    out = subprocess.run([sys.executable, "-c", block.group(1)], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "torch.Size([1, 8, 14, 14])" in out.stdout
