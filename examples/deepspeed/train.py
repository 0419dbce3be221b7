"""DeepSpeed ZeRO-3 training of a small MLP; GPUs (NCCL) or CPU-only nodes (gloo).

Launched by srun directly (run.slurm): RANK/LOCAL_RANK/WORLD_SIZE come from Slurm.
On GPUs it trains in bf16 (if supported); on CPU in fp32.
"""

import argparse
import json
import os
import warnings

import torch
import torch.nn as nn

# torch warns on each collective DeepSpeed calls by its old name.
warnings.filterwarnings("ignore", category=FutureWarning)
USE_CUDA = torch.cuda.is_available()
if not USE_CUDA:
    # DeepSpeed JIT-compiles a shared-memory allreduce op for CPU on every start (40-90 s);
    # gloo does the same job here, so skip the build.
    import deepspeed.ops
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
import deepspeed  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--deepspeed_config", default="ds_config.json")
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()

    deepspeed.init_distributed(dist_backend="nccl" if USE_CUDA else "gloo")
    rank = int(os.environ["RANK"])
    config = json.load(open(args.deepspeed_config))
    if USE_CUDA and torch.cuda.is_bf16_supported():
        config["bf16"] = {"enabled": True}

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 256), nn.GELU(), nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 1))
    # torch's AdamW: DeepSpeed's own Adam would be JIT-compiled first (slow on CPU).
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    local = sum(p.ds_tensor.numel() for p in engine.module.parameters())
    full = sum(p.ds_numel for p in engine.module.parameters())
    print(f"rank {rank} on {os.environ.get('SLURMD_NODENAME')}: ZeRO-{engine.zero_optimization_stage()}, "
          f"holds {local} of {full} parameters", flush=True)

    dtype = torch.bfloat16 if config.get("bf16", {}).get("enabled") else torch.float32
    gen = torch.Generator().manual_seed(rank)
    w = torch.randn(32, 1, generator=torch.Generator().manual_seed(1))
    for step in range(args.steps):
        x = torch.randn(16, 32, generator=gen)
        y = x @ w / 4
        x, y = x.to(engine.device, dtype), y.to(engine.device, dtype)
        loss = nn.functional.mse_loss(engine(x), y)
        engine.backward(loss)
        engine.step()
        if rank == 0 and step % 10 == 0:
            print(f"step {step}: loss {loss.item():.4f}", flush=True)
    if rank == 0:
        print(f"done: final loss {loss.item():.4f}", flush=True)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
