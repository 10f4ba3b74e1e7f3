"""The Mesos backend imports httpx without its command line and without trio
(``tfdeclare.backends.mesos.httpximport``), and leaves both importable afterwards."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

_PROBE = """
import json, sys
import tfdeclare.backends.mesos.client
sys.modules["httpx"].Client().close()  # imports httpcore
seen = {name: name in sys.modules for name in ("httpx", "httpx._main", "trio", "rich", "click")}
import httpx
client = httpx.Client()  # the synchronous client works
client.close()
import trio
import httpx._main
seen["trio_after"] = trio.__name__ == "trio"
seen["main_after"] = callable(httpx._main.main)
print(json.dumps(seen))
"""


@pytest.mark.skipif(
    not all(importlib.util.find_spec(name) for name in ("trio", "rich", "click")),
    reason="trio, rich and click are not all installed",
)
def test_backend_imports_httpx_without_its_cli_and_trio_and_leaves_them_importable() -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True)
    seen = json.loads(out.stdout)
    assert seen == {
        "httpx": True,
        "httpx._main": False,
        "trio": False,
        "rich": False,
        "click": False,
        "trio_after": True,
        "main_after": True,
    }


def test_an_httpx_imported_before_is_left_as_it_is() -> None:
    probe = (
        "import sys, httpx; before = sys.modules['httpx']\n"
        "import tfdeclare.backends.mesos.client as c\n"
        "assert c.httpx is before; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"
