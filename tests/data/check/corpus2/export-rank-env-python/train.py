import os

import torch
import torch.distributed as dist

dist.init_process_group("nccl", init_method="env://")
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
