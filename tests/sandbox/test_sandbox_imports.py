import ast
from pathlib import Path

import entrodrop.sandbox

# The sandbox sits below the evaluation and the tasks that call it: it must work (and be reviewed)
# without them, and an import from above would let evaluation code into the trusted harness.
ABOVE = ("entrodrop.eval", "entrodrop.tasks", "entrodrop.analysis", "entrodrop.train", "recipes")


def imported(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            yield ("." * node.level) + (node.module or "")


def test_the_sandbox_imports_nothing_from_the_rooms_above_it():
    files = sorted(Path(entrodrop.sandbox.__file__).parent.rglob("*.py"))
    assert files
    found = {f"{f.name}: {name}" for f in files for name in imported(f)
             if name.startswith(ABOVE) or name.startswith("..")}
    assert found == set()
