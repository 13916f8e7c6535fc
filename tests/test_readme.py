"""The README's first example runs as written."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_readme_first_kernel_runs():
  text = (ROOT / "README.md").read_text()
  blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "mc.placeholder" in b]
  assert blocks, "README has no tensor-expression example"
  ns: dict = {}
  exec(compile(blocks[0], "README.md", "exec"), ns)   # asserts against numpy inside
  assert "kern" in ns and ns["kern"].launches[0][2] == (16, 16, 1)
