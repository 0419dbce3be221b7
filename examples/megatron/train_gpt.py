"""A small megatron-core GPTModel trained with tensor parallelism on mock tokens.

GPUs: CUDA + NCCL as megatron-core expects. On CPU-only nodes (a simcluster cluster
without real GPUs) two shims let megatron-core run on CPU with gloo, and the script says
so: torch.cuda.current_device() returns the CPU device, and the model-parallel RNG uses
the inference tracker (no CUDA RNG states). Megatron's own DDP wrapper and distributed
optimizer hard-code CUDA, so this example uses tensor parallelism with a torch optimizer.
"""

import argparse
import os
import warnings

import torch
import torch.distributed as dist

warnings.filterwarnings("ignore", message=".*(Apex|Transformer Engine|CUDA_DEVICE_MAX_CONNECTIONS|cuda_graph_scope).*")
USE_CUDA = torch.cuda.is_available()
if not USE_CUDA:
    torch.cuda.current_device = lambda: torch.device("cpu")

from megatron.core import parallel_state  # noqa: E402
from megatron.core.models.gpt import GPTModel  # noqa: E402
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec  # noqa: E402
from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed  # noqa: E402
from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tensor-model-parallel-size", type=int, default=2)
    p.add_argument("--num-layers", type=int, default=2)
    p.add_argument("--hidden-size", type=int, default=64)
    p.add_argument("--num-attention-heads", type=int, default=4)
    p.add_argument("--seq-length", type=int, default=32)
    p.add_argument("--vocab-size", type=int, default=128)
    p.add_argument("--micro-batch-size", type=int, default=4)
    p.add_argument("--train-iters", type=int, default=30)
    p.add_argument("--lr", type=float, default=3e-3)
    args = p.parse_args()

    if USE_CUDA:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count())
    dist.init_process_group(backend="nccl" if USE_CUDA else "gloo")
    rank = dist.get_rank()
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=args.tensor_model_parallel_size)
    if USE_CUDA:
        model_parallel_cuda_manual_seed(1234)
    else:
        model_parallel_cuda_manual_seed(1234, inference_rng_tracker=True)
        if rank == 0:
            print("no CUDA on this node: megatron-core runs on CPU with gloo (shims: "
                  "torch.cuda.current_device -> cpu, inference RNG tracker)", flush=True)
    device = torch.device("cuda", torch.cuda.current_device()) if USE_CUDA else torch.device("cpu")

    config = TransformerConfig(
        num_layers=args.num_layers, hidden_size=args.hidden_size, num_attention_heads=args.num_attention_heads,
        use_cpu_initialization=True, pipeline_dtype=torch.float32,
        tensor_model_parallel_size=args.tensor_model_parallel_size,
        hidden_dropout=0.0, attention_dropout=0.0, bias_activation_fusion=False, bias_dropout_fusion=False,
        masked_softmax_fusion=False, gradient_accumulation_fusion=False, apply_rope_fusion=False,
        persist_layer_norm=False)
    model = GPTModel(config=config, transformer_layer_spec=get_gpt_layer_local_spec(), vocab_size=args.vocab_size,
                     max_sequence_length=args.seq_length, position_embedding_type="rope").to(device)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    tp_params = sum(p.numel() for p in model.parameters() if getattr(p, "tensor_model_parallel", False))
    print(f"rank {rank} on {os.environ.get('SLURMD_NODENAME')}: tensor-parallel rank "
          f"{parallel_state.get_tensor_model_parallel_rank()}, holds {tp_params} tensor-parallel parameters", flush=True)

    # Mock data: a fixed token sequence the model learns to continue (the same on every
    # tensor-parallel rank, as Megatron's data loader would give them).
    g = torch.Generator().manual_seed(0)
    b, s = args.micro_batch_size, args.seq_length
    tokens = torch.randint(0, args.vocab_size, (b, s + 1), generator=g).to(device)
    inputs, labels = tokens[:, :-1], tokens[:, 1:]
    position_ids = torch.arange(s, device=device).unsqueeze(0).expand(b, -1)
    mask = torch.ones(s, s, device=device).tril().logical_not().view(1, 1, s, s)
    for it in range(args.train_iters):
        loss = model(inputs, position_ids, mask, labels=labels).float().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0 and it % 10 == 0:
            print(f"iteration {it}: lm loss {loss.item():.4f}", flush=True)
    if rank == 0:
        print(f"done: lm loss {loss.item():.4f}", flush=True)
    parallel_state.destroy_model_parallel()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
