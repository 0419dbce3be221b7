"""Write a conf into a scratch directory and mirror it."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional

import pytest

from provisioner.like import mirror
from tests.unit.conftest import spec_from


@pytest.fixture
def mirror_of(tmp_path):
    """mirror_of(slurm_conf_text, gres=None, files=None, **mirror_kw) -> Mirror of that conf."""
    def _mirror(text: str, gres: Optional[str] = None, files: Optional[Dict[str, str]] = None, **kw):
        (tmp_path / "slurm.conf").write_text(text)
        if gres is not None:
            (tmp_path / "gres.conf").write_text(gres)
        for name, body in (files or {}).items():
            (tmp_path / name).write_text(body)
        return mirror(str(tmp_path / "slurm.conf"), **kw)
    return _mirror


@pytest.fixture
def spec_of(mirror_of):
    """spec_of(text, ...) -> the validated ClusterSpec of the mirror (host facts pinned)."""
    def _spec(text: str, **kw):
        return spec_from(mirror_of(text, **kw).raw)
    return _spec


def dropped(m) -> Dict[str, str]:
    return m.report.dropped_keys()


def kept(m):
    return m.report.kept_keys()


HERE = Path(__file__).resolve().parent
