"""The library uses public PyTorch only: no private ops, hook tables or module internals."""

import pathlib
import re

PRIVATE = re.compile(r"torch\._[a-z]|\._global_[a-z_]*hooks|_non_persistent_buffers_set|\._version\b|_foreach_"
                     r"|def _apply\(|def _load_from_state_dict\(|\._(forward|backward)(_pre)?_hooks|\._modules\b")


def test_the_library_uses_no_private_pytorch_api():
    root = pathlib.Path(__file__).resolve().parent.parent / "marlparts"
    found = [f"{path.relative_to(root.parent)}:{number}: {line.strip()}"
             for path in sorted(root.rglob("*.py"))
             for number, line in enumerate(path.read_text().splitlines(), start=1) if PRIVATE.search(line)]
    assert found == []
    assert PRIVATE.search("torch._fused_adam_(params)") and PRIVATE.search("owner._non_persistent_buffers_set")
