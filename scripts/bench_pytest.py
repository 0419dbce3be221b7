"""Time to first test with the pytest plugin, and the extra time per factory cluster.

For each case a scratch project is run with `python -m pytest` (in /usr/bin/time) several
times; the first test body writes time.time() to a file, so "time to first test" is from
the moment the pytest process is started to the first line of the first test body, with
the slurm_cluster fixture made before it. The baseline is the same project whose test takes
no fixture (pytest's own start-up with the plugin loaded). The factory case makes and takes
down N clusters one after the other inside one test and reports the time per cluster.

  python scripts/bench_pytest.py --runs 5 --out docs/benchmarks-pytest.md
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

FIRST = '''
    import time
    from pathlib import Path

    def test_first({fixture}):
        Path("first.t").write_text(repr(time.time()))
'''
def run_session(project: Path, home: Path, extra, timeout: float = 900) -> float:
    """Run pytest in ``project``; return its wall time (as /usr/bin/time measured it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SLURM_"))}
    env["SIMCLUSTER_HOME"] = str(home)
    wall = project / "wall.t"
    argv = ["/usr/bin/time", "-f", "%e", "-o", str(wall), sys.executable, "-m", "pytest", "-q", "-p",
            "no:cacheprovider", *extra]
    proc = subprocess.run(argv, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        raise SystemExit(f"pytest failed in {project}:\n{proc.stdout[-3000:]}")
    return float(wall.read_text().split()[-1])


def first_test(root: Path, home: Path, fixture: str, extra, runs: int):
    project = root / f"first-{fixture or 'none'}-{'-'.join(extra) or 'local'}"
    project.mkdir()
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / "test_first.py").write_text(textwrap.dedent(FIRST.format(fixture=fixture)))
    firsts, walls = [], []
    for _ in range(runs):
        t0 = time.time()
        walls.append(run_session(project, home, extra))
        firsts.append(float((project / "first.t").read_text()) - t0)
    return firsts, walls


def factory(root: Path, home: Path, n: int, extra):
    """Seconds per factory cluster: made in the test, taken down at its end, so time the
    whole session against the baseline and divide by n."""
    project = root / f"factory-{'-'.join(extra) or 'local'}"
    project.mkdir()
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / "test_factory.py").write_text(textwrap.dedent(f'''
        def test_factory(slurm_cluster_factory):
            for _ in range({n}):
                c = slurm_cluster_factory()
                assert c.run(["sinfo", "-h", "-o", "%D"]).stdout.split() == ["2"]
    '''))
    (project / "test_one.py").write_text("def test_one(slurm_cluster_factory):\n    slurm_cluster_factory()\n")
    many = run_session(project, home, [*extra, "test_factory.py"])
    one = run_session(project, home, [*extra, "test_one.py"])
    return (many - one) / (n - 1)


def stats(xs):
    return f"{statistics.median(xs):.2f} s (min {min(xs):.2f}, max {max(xs):.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--factory-n", type=int, default=6)
    ap.add_argument("--no-docker", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows = []
    args.load = [os.getloadavg()[0]]  # the machine may be shared: its load goes in the report
    with tempfile.TemporaryDirectory(prefix="bench-pytest-") as tmp:
        root = Path(tmp)
        home = root / "home"
        cases = [("no fixture (pytest + plugin start-up)", "", []),
                 ("slurm_cluster, local, 2 nodes", "slurm_cluster", []),
                 ("slurm_cluster, local, 2 nodes, fake:2 GPUs", "slurm_cluster", ["--simcluster-gpus=fake:2"])]
        if not args.no_docker:
            cases.append(("slurm_cluster, docker, 2 nodes", "slurm_cluster", ["--simcluster-backend=docker"]))
        for label, fixture, extra in cases:
            firsts, walls = first_test(root, home, fixture, extra, args.runs)
            rows.append((label, stats(firsts), stats(walls)))
            print(f"{label}: first test {stats(firsts)}; whole session {stats(walls)}", flush=True)
        per = [("local", factory(root, home, args.factory_n, []))]
        if not args.no_docker:
            per.append(("docker", factory(root, home, args.factory_n, ["--simcluster-backend=docker"])))
        for backend, secs in per:
            print(f"factory, {backend}: {secs:.2f} s per extra 2-node cluster (up + down)", flush=True)
        left = [p.name for p in home.iterdir() if p.is_dir() and not p.name.startswith(".")] if home.is_dir() else []
        left += [f"ownership record {p.name}" for p in (home / ".pytest-owners").glob("*")]
        assert not left, f"clusters left behind: {left}"
    args.load.append(os.getloadavg()[0])
    if args.out:
        write(Path(args.out), rows, per, args)


def write(path: Path, rows, per, args) -> None:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    from provisioner.cluster.model.command_runner import find_binary
    slurm = subprocess.run([find_binary("slurmd") or "slurmd", "-V"], stdout=subprocess.PIPE,
                           text=True).stdout.strip()
    lines = [
        "# Benchmarks: the pytest plugin",
        "",
        f"Measured with `python scripts/bench_pytest.py --runs {args.runs}` on {time.strftime('%Y-%m-%d')}: "
        f"{os.cpu_count()} CPUs ({cpu}), {platform.system()} {platform.release()}, Python "
        f"{platform.python_version()}, {slurm}, pytest from the project's venv. Times are the median of "
        f"{args.runs} runs (min, max). 1-minute load average at the start and the end: "
        f"{args.load[0]:.1f}, {args.load[1]:.1f} (other work shared the machine).",
        "",
        "**Time to first test**: from starting `python -m pytest` to the first line of the first test body, "
        "the `slurm_cluster` fixture (a new cluster) made before it. **Whole session**: the wall time of the "
        "pytest process (`/usr/bin/time -f %e`), including taking the cluster down at the end.",
        "",
        "| session | time to first test | whole session |",
        "|---|---|---|",
        *[f"| {label} | {first} | {wall} |" for label, first, wall in rows],
        "",
        f"**Extra time per factory cluster** (`slurm_cluster_factory()`, 2 nodes, made and taken down in "
        f"the same test): the wall time of a session making {args.factory_n} clusters minus one making 1, "
        f"divided by {args.factory_n - 1}.",
        "",
        "| backend | per extra cluster (up + down) |",
        "|---|---|",
        *[f"| {backend} | {secs:.2f} s |" for backend, secs in per],
        "",
        "For comparison, koesterlab/setup-slurm-action documents up to about two minutes to install and start "
        "its single-node Slurm; pytest-slurm's fixture starts registry containers (not measured here: no "
        "registry is reachable from this machine).",
        "",
    ]
    path.write_text("\n".join(lines))


if __name__ == "__main__":
    main()
