"""FSDP2 (fully_shard) training with a torch.distributed.checkpoint save and reload.

GPUs: CUDA + NCCL; CPU-only nodes: gloo. Started by torchrun (train_fsdp.sh).
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard


def build(device) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(128, 128), nn.GELU()) for _ in range(4)], nn.Linear(128, 1))
    model.to(device)
    for block in list(model)[:-1]:
        fully_shard(block)  # each block's parameters are split across all ranks
    fully_shard(model)
    return model


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--checkpoint-dir", default="fsdp_ckpt")
    args = parser.parse_args()

    use_cuda = torch.cuda.is_available()
    dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if use_cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count())
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")

    model = build(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    local = sum(p.to_local().numel() for p in model.parameters())
    full = sum(p.numel() for p in model.parameters())
    print(f"rank {rank}/{world} on {os.environ.get('SLURMD_NODENAME')}: holds {local} of {full} parameters", flush=True)

    gen = torch.Generator().manual_seed(rank)
    w = torch.randn(128, 1, generator=torch.Generator().manual_seed(1))
    for step in range(args.steps):
        x = torch.randn(32, 128, generator=gen)
        x, y = x.to(device), (x @ w).to(device) / 10
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0 and step % 10 == 0:
            print(f"step {step}: loss {loss.item():.4f}", flush=True)

    # Every rank writes its own shards; the files land in one directory (a shared
    # filesystem on a real cluster).
    model_sd, optim_sd = get_state_dict(model, opt)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=args.checkpoint_dir)
    fresh = build(device)
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1e-3)
    model_sd, optim_sd = get_state_dict(fresh, fresh_opt)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=args.checkpoint_dir)
    set_state_dict(fresh, fresh_opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    same = all(torch.equal(a.to_local(), b.to_local()) for a, b in zip(model.parameters(), fresh.parameters()))
    if rank == 0:
        print(f"checkpoint saved to {args.checkpoint_dir} and reloaded: {'identical' if same else 'DIFFERENT'}", flush=True)

    dist.barrier()  # without it, a rank may tear down while another still talks: seen to hang
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
