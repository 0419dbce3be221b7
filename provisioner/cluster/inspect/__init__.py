"""Reading a cluster: `status` (status.py, one typed model on every backend) and the
export-logs bundle (logs.py). Imports the rooms below it (a status says what a repair
would do, and which faults are in place)."""
