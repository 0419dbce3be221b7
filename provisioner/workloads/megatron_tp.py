"""megatron-core smoke training: a small GPTModel with tensor parallel 2 across 2 nodes.

Proves: megatron-core's model-parallel groups form across nodes, the attention and MLP
weights are split between the two tensor-parallel ranks (each holds half of every
column/row-parallel weight), the replicated weights stay identical, and loss goes down
when the model learns a fixed token sequence. Run by torchrun (one per node, as
Megatron jobs usually are).

megatron-core assumes CUDA. On a node without a GPU two shims make it run on CPU with
gloo, and the result line says so ("cpu_shims"):
  - torch.cuda.current_device() returns the CPU device (megatron-core asks for it when
    it allocates weights and buffers);
  - model_parallel_cuda_manual_seed(seed, inference_rng_tracker=True): the inference RNG
    tracker does not fork CUDA RNG states.
Megatron's own DDP wrapper and distributed optimizer hard-code CUDA, so this test uses
tensor parallelism only (data-parallel size 1) with a torch optimizer.
"""

from __future__ import annotations

import os
import time
import warnings

import torch

import _common as c

# megatron-core says at import that Apex / Transformer Engine are missing: expected here.
warnings.filterwarnings("ignore", message=".*(Apex|Transformer Engine|CUDA_DEVICE_MAX_CONNECTIONS|cuda_graph_scope).*")
CUDA = torch.cuda.is_available() and torch.cuda.device_count() > 0
SHIMS = []
if not CUDA:
    torch.cuda.current_device = lambda: torch.device("cpu")  # type: ignore[assignment]
    SHIMS.append("torch.cuda.current_device->cpu")


def main() -> None:
    t0 = time.time()
    # lazy: timed as part of the start-up this workload reports (t0 above)
    from megatron.core import parallel_state
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed
    from megatron.core.transformer.transformer_config import TransformerConfig

    steps = int(os.environ.get("SIMCLUSTER_STEPS", "30"))
    tp = int(os.environ.get("SIMCLUSTER_TP", "2"))
    dev = c.pick_device()
    device = dev["device"]
    c.init(dev["backend"])
    world = c.dist.get_world_size()
    where = c.placement()

    parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=1)
    if CUDA:
        model_parallel_cuda_manual_seed(123)
    else:
        model_parallel_cuda_manual_seed(123, inference_rng_tracker=True)
        SHIMS.append("model_parallel_cuda_manual_seed(inference_rng_tracker=True)")
    torch.manual_seed(123)

    vocab, seq, batch = 64, 16, 4
    config = TransformerConfig(
        num_layers=2, hidden_size=64, num_attention_heads=4, ffn_hidden_size=128,
        use_cpu_initialization=True, pipeline_dtype=torch.float32, params_dtype=torch.float32,
        tensor_model_parallel_size=tp, hidden_dropout=0.0, attention_dropout=0.0,
        bias_dropout_fusion=False, gradient_accumulation_fusion=False, masked_softmax_fusion=False,
        bias_activation_fusion=False, apply_rope_fusion=False, persist_layer_norm=False,
    )
    model = GPTModel(config=config, transformer_layer_spec=get_gpt_layer_local_spec(),
                     vocab_size=vocab, max_sequence_length=seq,
                     pre_process=True, post_process=True, parallel_output=True,
                     share_embeddings_and_output_weights=True, position_embedding_type="learned_absolute")
    model.to(device)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)

    # The same batch on both tensor-parallel ranks (they must see identical inputs).
    g = torch.Generator().manual_seed(5)
    tokens = torch.randint(0, vocab, (batch, seq + 1), generator=g).to(device)
    inputs, labels = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    position_ids = torch.arange(seq, device=device).unsqueeze(0).expand(batch, -1).contiguous()
    mask = torch.tril(torch.ones(seq, seq, device=device)).logical_not().view(1, 1, seq, seq)

    losses = []
    for step in range(steps):
        c.maybe_break(step)
        per_token = model(inputs, position_ids, mask, labels=labels)
        loss = per_token.float().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(c.mean_across_ranks(loss.item(), device))

    # Sharding facts: tensor-parallel weights carry tensor_model_parallel=True.
    split = {n: list(p.shape) for n, p in model.named_parameters() if getattr(p, "tensor_model_parallel", False)}
    replicated = [p for p in model.parameters() if not getattr(p, "tensor_model_parallel", False)]
    full_qkv = 3 * config.hidden_size  # linear_qkv output rows before the split (MHA)
    qkv_rows = [s[0] for n, s in split.items() if n.endswith("linear_qkv.weight")]
    c.emit({
        "workload": "megatron", "world_size": world, "tensor_parallel": tp,
        "tp_rank_of": c.gather(parallel_state.get_tensor_model_parallel_rank()),
        "backend": dev["backend"], "device": str(device.type), "cpu_shims": SHIMS,
        "steps": steps, "loss_first": losses[0], "loss_last": losses[-1],
        "tp_split_params": len(split), "qkv_rows_local": qkv_rows, "qkv_rows_full": full_qkv,
        "replicated_checksums": c.gather(c.checksum(replicated)),
        "placement": where, "seconds": round(time.time() - t0, 2),
    })
    parallel_state.destroy_model_parallel()
    c.finish()


if __name__ == "__main__":
    main()
