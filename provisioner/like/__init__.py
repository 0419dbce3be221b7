"""`--like PATH`: a cluster spec that mirrors a production slurm.conf (docs/like.md).

``mirror(path)`` reads the conf (its includes, and a gres.conf beside it or given),
maps what jobs can see into the raw spec a YAML file would say (validated by
provisioner.config.validate like any other), and reports what it kept and dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from provisioner.like.gres import parse_gres
from provisioner.like.mapping import parse_conf
from provisioner.like.production import apply_gres, choose_nodes, gpu_ids, settle_sharing, to_raw
from provisioner.like.reader import LikeError, display_path, read_conf
from provisioner.like.report import Report

if TYPE_CHECKING:
    from provisioner.config.types import ClusterSpec

__all__ = ["LikeError", "Mirror", "like_spec", "mirror"]


@dataclass
class Mirror:
    """The raw spec of a mirrored conf, and the report of what it kept and dropped."""

    raw: Dict[str, Any]
    report: Report


def mirror(path: str, gres_conf: Optional[str] = None, max_nodes: Optional[int] = None,
           gpus: Optional[List[int]] = None) -> Mirror:
    """Mirror the slurm.conf at ``path``.

    ``gres_conf``: its gres.conf (default: gres.conf beside it, if there is one);
    ``max_nodes``: keep a subset of at most this many nodes with every partition's shapes;
    ``gpus``: this host's GPU ids for the nodes' GPUs (default: fake GPUs).
    Raises LikeError (one line, FILE:LINE where there is a line) for what cannot be mirrored.
    """
    conf_path = Path(path)
    source = display_path(conf_path) if conf_path.is_absolute() else str(path)
    conf = read_conf(conf_path, source)
    report = Report(source=source)
    gres_path: Optional[Path] = None
    if gres_conf is not None:
        gres_path = Path(gres_conf)
        if not gres_path.is_file():
            raise LikeError(f"gres.conf {gres_conf} does not exist", "check the path given to --gres-conf")
    elif (conf_path.parent / "gres.conf").is_file() and conf_path.name != "gres.conf":
        gres_path = conf_path.parent / "gres.conf"
    parsed = parse_conf(conf, report, source)
    if gres_path is not None:
        # Read after slurm.conf: a gres.conf line without NodeName= means every node.
        gres_file = read_conf(gres_path, str(gres_conf) if gres_conf else display_path(gres_path))
        apply_gres(parsed, parse_gres(gres_file, list(parsed.nodes)), report)
    settle_sharing(parsed, report)
    fake = gpus is None
    keep = choose_nodes(parsed, max_nodes, report, source, fake_gpus=fake)
    ids = gpu_ids([parsed.nodes[n] for n in keep], gpus, source)
    raw = to_raw(parsed, keep, ids, fake)
    if raw.get("accounting"):
        report.note("accounting: true (slurmdbd and MariaDB): accounts "
                    f"{', '.join(a['name'] for a in raw.get('accounts', [])) or 'none named'}; QoS "
                    f"{', '.join(q['name'] for q in raw.get('qos', [])) or 'none named'}; your user is in "
                    "every account")
    return Mirror(raw=raw, report=report)


def like_spec(path: str, gres_conf: Optional[str] = None, max_nodes: Optional[int] = None,
              gpus: Optional[List[int]] = None, name: Optional[str] = None,
              overrides: Optional[Dict[str, Any]] = None) -> Tuple["ClusterSpec", Report]:
    """The validated ClusterSpec mirroring ``path`` (``mirror``'s raw spec with ``overrides``,
    YAML keys, laid over it and ``name`` as its name), and the report."""
    from provisioner.config import load_spec  # lazy: validation loads the provider registry
    mirrored = mirror(path, gres_conf=gres_conf, max_nodes=max_nodes, gpus=gpus)
    given = dict(overrides or {})
    if name is not None:
        given["name"] = name
    spec = load_spec(None, given, base=mirrored.raw, source=f"spec mirrored from {mirrored.report.source}")
    return spec, mirrored.report
