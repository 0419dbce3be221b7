"""Load a cluster spec from a YAML file and/or command-line flags (flags win)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Optional


from provisioner.config.types import ClusterSpec
from provisioner.config.validate import validate
from provisioner.errors import ConfigError, UsageError


def host_cpus() -> int:
    return os.cpu_count() or 1


def host_memory_mb() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 1024


def read_yaml(path: str) -> Dict[str, Any]:
    """Read a spec file; a missing file or YAML syntax error is one clear line."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"config file {path} does not exist", "check the path given to --config")
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = "it is not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else (exc.strerror or str(exc))
        raise UsageError(f"cannot read config file {path}: {reason}") from None
    import yaml  # lazy: most commands read no YAML (~15 ms of each start)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UsageError(f"{path} is not valid YAML{where}: {problem}") from None
    if data is None:
        raise ConfigError(["the file is empty"], source=str(path))
    if not isinstance(data, dict):
        raise ConfigError([f"expected a mapping at the top level, got {type(data).__name__}"], source=str(path))
    return data


def load_spec(config_path: Optional[str] = None, overrides: Optional[Dict[str, Any]] = None,
              cpus: Optional[int] = None, memory_mb: Optional[int] = None, base: Optional[Dict[str, Any]] = None,
              source: Optional[str] = None) -> ClusterSpec:
    """Build a ClusterSpec: YAML file (if any) or ``base`` (a raw spec made by other means,
    e.g. `--like`'s mirror of a slurm.conf), then flag overrides, then defaults. ``source``
    names the spec in errors (default: the file)."""
    raw: Dict[str, Any] = read_yaml(config_path) if config_path else dict(base or {})
    for key, value in (overrides or {}).items():
        if value is not None:
            raw[key] = value
    source = source or (str(config_path) if config_path else "cluster spec")
    return validate(raw, host_cpus=cpus or host_cpus(), host_memory_mb=memory_mb or host_memory_mb(),
                    source=source)
