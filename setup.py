"""Build configuration that pyproject.toml cannot express: the top-level directories that
`up`, `image build` and `deploy` read at run time (ansible/, docker/, configs/templates/)
are the sources in the checkout, and the build maps each one into the package as
provisioner/data/<the same path> (a package-dir mapping), so a wheel installed anywhere needs
no checkout. The sdist carries the top-level directories themselves (MANIFEST.in) and builds
the same wheel. Everything else is in pyproject.toml.

An editable install runs from the checkout, where provisioner/paths.py reads the top-level
directories themselves.
"""

import os

from setuptools import find_namespace_packages, setup

# package under provisioner.data -> the top-level directory it is built from
# (provisioner/paths.py: RUN_TIME_DIRS).
RUN_TIME_DIRS = {"provisioner.data.ansible": "ansible", "provisioner.data.docker": "docker",
                 "provisioner.data.configs.templates": "configs/templates", "provisioner.data.spank": "spank"}


def data_packages():
    """Every directory of the mapped trees as a package (its files as package data), so
    that setuptools finds each one listed."""
    for package, src in RUN_TIME_DIRS.items():
        for root, dirs, _ in os.walk(src):
            # spank/build: the plugin `make setup-containers` compiles for this host, not a source.
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not (src == "spank" and d == "build"))
            rel = os.path.relpath(root, src)
            yield package if rel == "." else package + "." + rel.replace(os.sep, ".")


DATA_PACKAGES = list(data_packages())

if __name__ == "__main__":  # the build backend runs this file as __main__; tests import it
    setup(
        packages=find_namespace_packages(include=["provisioner", "provisioner.*"]) + DATA_PACKAGES,
        package_dir=RUN_TIME_DIRS,
        package_data={"provisioner": ["py.typed", "workloads/*"], **{package: ["*"] for package in DATA_PACKAGES}},
        exclude_package_data={"": ["*.pyc"]},
    )
