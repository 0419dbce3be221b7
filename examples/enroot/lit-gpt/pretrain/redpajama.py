"""Stand-in for lit-gpt's pretrain/redpajama.py: the workflow launcher's command line, a tiny DDP run.

It takes the workflow's arguments as written (model, steps and precision are read and ignored:
the run is a few steps of a small linear model on CPU with gloo, or NCCL where CUDA is
there), joins the process group from the launcher's ranks and MASTER_ADDR/MASTER_PORT, and
checks what a real run depends on: every rank is distinct, the world size and the node and
local ranks agree with Slurm's, and after the steps every rank holds the same weights.
Rank 0 writes the summary to out/redpajama-<job>.json (out/ is the workflow's output mount).
"""

import argparse
import json
import os
import socket
import sys

import torch
import torch.distributed as dist


def main() -> None:
    p = argparse.ArgumentParser()
    for name in ("name", "model_name", "precision", "parallel_strategy"):
        p.add_argument(f"--{name}")
    for name in ("max_steps", "decay_steps", "micro_batch_size", "batch_size", "world_size", "num_nodes",
                 "devices_per_node", "global_rank", "node_rank", "local_rank"):
        p.add_argument(f"--{name}", type=int)
    p.add_argument("--lr", type=float)
    args, _ = p.parse_known_args()

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo", rank=args.global_rank, world_size=args.world_size)
    device = torch.device("cuda", args.local_rank % torch.cuda.device_count()) if cuda else torch.device("cpu")
    torch.manual_seed(int(os.environ.get("GPT_GLOBAL_SEED", "0")))
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 1).to(device))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    gen = torch.Generator().manual_seed(args.global_rank)  # each rank its own data
    for _ in range(int(os.environ.get("REDPAJAMA_STEPS", "3"))):
        x = torch.randn(args.micro_batch_size, 16, generator=gen).to(device)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    # What every rank saw, gathered on rank 0.
    mine = {"rank": dist.get_rank(), "global_rank": args.global_rank, "node_rank": args.node_rank,
            "local_rank": args.local_rank, "host": socket.gethostname(), "world": dist.get_world_size(),
            "weights": [round(v, 6) for v in model.module.weight.detach().cpu().flatten().tolist()],
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "python": sys.executable}
    seen = [None] * dist.get_world_size()
    dist.all_gather_object(seen, mine)
    if dist.get_rank() == 0:
        ok = (sorted(s["rank"] for s in seen) == list(range(args.world_size))
              and all(s["rank"] == s["global_rank"] for s in seen)
              and len({json.dumps(s["weights"]) for s in seen}) == 1)
        summary = {"ok": ok, "world_size": args.world_size, "num_nodes": args.num_nodes,
                   "hosts": sorted({s["host"] for s in seen}), "ranks": seen}
        out = os.path.join("out", f"redpajama-{os.environ.get('SLURM_JOB_ID', 'local')}.json")
        with open(out, "w") as f:
            json.dump(summary, f, indent=1)
        print(f"redpajama: {args.world_size} ranks on {len(summary['hosts'])} nodes, weights equal: {ok}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
