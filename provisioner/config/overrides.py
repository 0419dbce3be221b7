"""The choices that describe a cluster (`up`'s flags) as overrides of the spec's YAML keys.

`up`, `test` and `render` (cli/options.py), the pytest plugin (testing/pool.py) and
`check --run` (check/dryrun.py) all describe a cluster with the same choices;
``spec_overrides`` is the one place that turns them into the dict ``load_spec`` lays over
the YAML. A choice that is None (a switch that is off) is left out, so the YAML's value or
the default stays; everything else is judged by the spec's validation, as if the YAML said it.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Union

from provisioner.errors import UsageError

# argument -> the spec's YAML key
SPEC_KEYS: Dict[str, str] = {
    "name": "name",
    "backend": "backend",
    "nodes": "nodes",
    "gpus": "gpus",
    "fake_gpus": "fakeGpus",
    "cpus": "cpus",
    "memory": "memory",
    "image": "image",
    "privileged": "privileged",
    "accounting": "accounting",
    "rest": "rest",
    "metrics": "metrics",
    "fast_failure": "failureDetection",
    "slurm": "slurm",
    "wait": "wait",
    "users": "users",
    "mig": "mig",
    "shards": "shards",
    "mps": "mps",
}
# On/off choices: on sets the key to this value; off (None, False) leaves the YAML's.
SWITCHES: Dict[str, Any] = {"privileged": True, "accounting": True, "rest": True, "metrics": True,
                           "fast_failure": "fast"}
# Counts that may arrive as text (pytest options and ini values): digits become a number.
COUNTS = ("nodes", "cpus", "shards", "mps")


def fake_gpus_value(value: Union[None, bool, int, str]) -> Union[None, bool, int]:
    """--fake-gpus alone ("all", True) fakes the --gpus list; a count K fakes K GPUs (ids
    0..K-1). Text must be "all" or a positive count; a number is left to the spec's validation."""
    if value is None or value is False:
        return None
    if value is True or value == "all":
        return True
    if isinstance(value, int):
        return value
    if str(value).isdecimal() and int(value) > 0:
        return int(value)
    raise UsageError(f"--fake-gpus expects a positive GPU count, got {value!r}",
                     "use --fake-gpus alone to simulate the --gpus list, or --fake-gpus 2")


def spec_overrides(*, name: Optional[str] = None, backend: Optional[str] = None, nodes: Any = None,
                   gpus: Optional[str] = None, fake_gpus: Union[None, bool, int, str] = None, cpus: Any = None,
                   memory: Any = None, image: Optional[str] = None, privileged: Optional[bool] = None,
                   accounting: Optional[bool] = None, rest: Optional[bool] = None, fast_failure: Optional[bool] = None,
                   slurm: Any = None, wait: Optional[float] = None, users: Any = None,
                   metrics: Optional[bool] = None, mig: Optional[str] = None, shards: Any = None,
                   mps: Any = None) -> Dict[str, Any]:
    """The override dict of ``load_spec`` for these choices (YAML keys; None left out)."""
    given = dict(name=name, backend=backend, nodes=nodes, gpus=gpus, fake_gpus=fake_gpus, cpus=cpus,
                 memory=memory, image=image, privileged=privileged, accounting=accounting,
                 rest=rest, fast_failure=fast_failure, slurm=slurm, wait=wait, users=users, metrics=metrics,
                 mig=mig, shards=shards, mps=mps)
    out: Dict[str, Any] = {}
    for arg, key in SPEC_KEYS.items():
        value = given[arg]
        if arg in SWITCHES:
            value = SWITCHES[arg] if value else None
        elif arg == "fake_gpus":
            value = fake_gpus_value(value)
        elif arg in COUNTS and isinstance(value, str) and value.isdecimal():
            value = int(value)
        elif arg == "slurm" and value is not None:
            value = str(value)  # 22.05 written as a number in a marker or YAML-ish option
        if value is not None:
            out[key] = value
    return out
