"""What a docker cluster's nodes can do with their image and engine
(providers/docker/node_features.py): the line that says why container jobs cannot run."""

from __future__ import annotations

from provisioner.providers.docker.node_features import containers_note


def test_containers_note_names_what_fixes_it():
    ok = lambda: (True, "")  # noqa: E731
    assert containers_note({"io.simcluster.features": "accounting containers"}, "t", "", ok) == ""
    note = containers_note({"io.simcluster.features": "accounting"}, "t", " --slurm 24.11", ok)
    assert note.endswith("rebuild it: simcluster image build --slurm 24.11")
    note = containers_note({"io.simcluster.features": "containers"}, "t", "",
                           lambda: (False, "mount: /tmp/x: permission denied.\n"))
    assert "permission denied" in note and note.endswith("up --privileged gives the nodes every privilege")
    assert "\n" not in note
