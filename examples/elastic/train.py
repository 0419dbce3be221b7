"""An elastic training loop for `torchrun --nnodes=MIN:MAX`: it resumes from its checkpoint
whenever torchrun restarts the workers (a node joined or left) and logs the world size.

Each step all-reduces a gradient (gloo on CPU, NCCL on GPUs) of a tiny linear model, so
every rank takes part; rank 0 writes "step S world W" to $ELASTIC_DIR/progress.log and
the checkpoint to $ELASTIC_DIR/ckpt.pt after each step.
"""

import os
import time

import torch
import torch.distributed as dist


def main() -> None:
    out = os.environ.get("ELASTIC_DIR", ".")
    steps = int(os.environ.get("ELASTIC_STEPS", "40"))
    step_s = float(os.environ.get("ELASTIC_STEP_S", "0.5"))
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = torch.nn.Linear(8, 1)
    ckpt = os.path.join(out, "ckpt.pt")
    start = 0
    if os.path.exists(ckpt):  # a restart after the world changed: go on where it was
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        start = state["step"]
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(start, steps):
        x = torch.randn(16, 8)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():  # DDP by hand: average the gradients over the world
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        if rank == 0:
            torch.save({"model": model.state_dict(), "step": step + 1}, ckpt + ".tmp")
            os.replace(ckpt + ".tmp", ckpt)
            with open(os.path.join(out, "progress.log"), "a") as fh:
                fh.write(f"step {step + 1} world {world} host {os.uname().nodename}\n")
        time.sleep(step_s)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
