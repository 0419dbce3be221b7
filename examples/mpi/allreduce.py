"""An MPI allreduce across nodes: every rank adds its rank+1, every rank gets the sum.

Runs with Debian's mpi4py over Open MPI (python3-mpi4py) and the system python3; started
by run.slurm with `srun --mpi=pmix`, so there is no mpirun and no hostfile.
"""

import os
import socket

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
node = os.environ.get("SLURMD_NODENAME", socket.gethostname())
total = comm.allreduce(rank + 1, op=MPI.SUM)
nodes = sorted(set(comm.allgather(node)))
assert total == size * (size + 1) // 2, f"rank {rank}: allreduce gave {total}"
print(f"rank {rank}/{size} on {node}: allreduce sum={total} over {','.join(nodes)}", flush=True)
if rank == 0:
    print(f"{MPI.Get_library_version().splitlines()[0]}", flush=True)
