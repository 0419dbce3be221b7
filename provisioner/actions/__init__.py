"""The ordered steps of `simcluster up`, each small and backend-agnostic where it can be."""

from provisioner.actions.context import UpContext

__all__ = ["UpContext"]
