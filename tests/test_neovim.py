"""A second real LSP client: headless Neovim's built-in client shows gradsight's diagnostics and hover."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import FAULTS, ROOT
from .lsp_helpers import line_of, workspace_with_run

NVIM = shutil.which("nvim")


@pytest.mark.skipif(NVIM is None and not os.environ.get("GRADSIGHT_REQUIRE_NVIM"), reason="Neovim is not installed (./run test installs it)")
def test_neovim_shows_hover_and_diagnostics(tmp_path: Path):
    assert NVIM is not None, "GRADSIGHT_REQUIRE_NVIM is set but nvim is missing"
    ws = workspace_with_run(tmp_path / "ws", FAULTS, "--fault", "grad_explode", "--at", "30", "--steps", "60")
    script = ws / "train.py"
    out = tmp_path / "nvim.json"
    env = {**os.environ, "GS_PYTHON": sys.executable, "GS_ROOT": str(ws), "GS_FILE": str(script), "GS_OUT": str(out),
           "GS_LINE": str(line_of(script.read_text(), "self.fc1 = nn.Linear")), "PYTHONPATH": str(ROOT / "pyserver"),
           "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "cfg"), "XDG_DATA_HOME": str(tmp_path / "data"),
           "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    r = subprocess.run([NVIM, "--headless", "--clean", "-c", f"luafile {ROOT / 'tests' / 'nvim' / 'hover.lua'}"], cwd=ws, env=env,
                       capture_output=True, text=True, timeout=180)
    assert out.exists(), f"nvim wrote nothing: rc={r.returncode} {r.stderr[-2000:]}"
    seen = json.loads(out.read_text())
    assert not seen.get("error"), seen["error"]  # nil fields are left out of Lua's JSON
    text = script.read_text()
    fc1 = line_of(text, "self.fc1 = nn.Linear")
    assert any(d["line"] == fc1 and d["source"] == "gradsight" and d["severity"] == 1 for d in seen["diagnostics"]), seen["diagnostics"]
    assert any("root cause" in d["message"] for d in seen["diagnostics"])
    assert "`fc1` (Linear)" in seen["hover"] and "health **" in seen["hover"]
    assert seen["float_lines"] > 3
