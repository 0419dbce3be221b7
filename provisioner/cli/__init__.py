"""The simcluster command line: one module per command, each a thin click function."""
