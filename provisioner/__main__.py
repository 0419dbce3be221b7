"""`python -m provisioner` runs the simcluster CLI."""

from provisioner.cli.main import main

main()
