"""Which commands launch training processes, and with which launcher options.

torchrun and its module forms (`python -m torch.distributed.run`, the deprecated
`python -m torch.distributed.launch`), deepspeed, `accelerate launch`, and plain
`python script.py` / `python -m module`. Shared by the rules and the --run recorder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

# launcher options that take a value (as --opt=value or --opt value), normalized to '_'
TORCHRUN_VALUE_OPTS = {
    "nproc_per_node", "nnodes", "node_rank", "master_addr", "master_port", "rdzv_backend", "rdzv_endpoint",
    "rdzv_id", "rdzv_conf", "max_restarts", "monitor_interval", "start_method", "role", "log_dir", "redirects",
    "tee", "local_addr", "logs_specs", "local_ranks_filter", "rdzv_timeout",
}
DEEPSPEED_VALUE_OPTS = {"num_gpus", "num_nodes", "hostfile", "include", "exclude", "master_addr", "master_port",
                        "launcher", "node_rank", "module", "ssh_port"}
ACCELERATE_VALUE_OPTS = {"num_processes", "num_machines", "machine_rank", "main_process_ip", "main_process_port",
                         "config_file", "mixed_precision", "rdzv_backend", "gpu_ids", "dynamo_backend",
                         "gradient_accumulation_steps", "max_restarts", "tee", "rdzv_conf", "monitor_interval",
                         "role", "log_dir", "num_cpu_threads_per_process", "mpirun_hostfile",
                         "deepspeed_config_file", "zero_stage", "offload_optimizer_device", "offload_param_device",
                         "deepspeed_hostfile", "deepspeed_multinode_launcher", "zero3_init_flag",
                         "zero3_save_16bit_model", "fsdp_sharding_strategy", "fsdp_auto_wrap_policy",
                         "fsdp_transformer_layer_cls_to_wrap", "fsdp_backward_prefetch", "fsdp_state_dict_type",
                         "fsdp_cpu_ram_efficient_loading", "fsdp_sync_module_states", "fsdp_use_orig_params",
                         "fsdp_offload_params", "fsdp_min_num_params", "fsdp_version", "main_training_function"}
PYTHON_FLAGS_WITH_ARG = {"-W", "-X", "-Q"}
# launchers that start the worker processes themselves
SPAWNING = ("torchrun", "torch.distributed.launch", "deepspeed", "accelerate")


@dataclass
class Launch:
    kind: str                  # torchrun | torch.distributed.launch | deepspeed | accelerate | python
    opts: Dict[str, Tuple[str, int]] = field(default_factory=dict)  # option -> (value as written, index)
    program: str = ""          # the training script or module
    program_index: int = 0     # where the training script starts in the words

    @property
    def spawns(self) -> bool:
        return self.kind in SPAWNING

    def opt(self, *names: str) -> Optional[str]:
        for n in names:
            if n in self.opts:
                return self.opts[n][0]
        return None


def _basename(word: str) -> str:
    return word.rsplit("/", 1)[-1]


def is_python(word: str) -> bool:
    name = _basename(word)
    return name in ("python", "python3") or (name.startswith("python3.") and name[8:].isdigit())


def classify(words: Sequence[str]) -> Optional[Launch]:
    """The launch that ``words`` (a command's argv, expansions kept as written) makes, or None
    (not a training launch: `python -c ...`, `python -m pip`, any other program)."""
    if not words:
        return None
    name = _basename(words[0])
    if name == "torchrun":
        return _options(Launch("torchrun"), words, 1, TORCHRUN_VALUE_OPTS)
    if name == "deepspeed":
        return _options(Launch("deepspeed"), words, 1, DEEPSPEED_VALUE_OPTS)
    if name == "accelerate":
        if len(words) > 1 and words[1] == "launch":
            return _options(Launch("accelerate"), words, 2, ACCELERATE_VALUE_OPTS)
        return None
    if not is_python(words[0]):
        return None
    i = 1
    while i < len(words) and words[i].startswith("-"):
        flag = words[i]
        if flag == "-c" or flag == "-" or flag in ("-V", "--version", "-h", "--help"):
            return None
        if flag == "-m":
            if i + 1 >= len(words):
                return None
            module = words[i + 1]
            rest = i + 2
            if module in ("torch.distributed.run", "torch.distributed.launch"):
                kind = "torchrun" if module.endswith(".run") else "torch.distributed.launch"
                return _options(Launch(kind), words, rest, TORCHRUN_VALUE_OPTS)
            if module in ("deepspeed.launcher.runner",):
                return _options(Launch("deepspeed"), words, rest, DEEPSPEED_VALUE_OPTS)
            if module in ("accelerate.commands.launch",):
                return _options(Launch("accelerate"), words, rest, ACCELERATE_VALUE_OPTS)
            if module.split(".")[0] in ("pip", "venv", "ensurepip", "site", "json", "http", "compileall", "pytest"):
                return None
            return Launch("python", program=module, program_index=i + 1)
        if flag in PYTHON_FLAGS_WITH_ARG:
            i += 1
        i += 1
    if i >= len(words):
        return None
    return Launch("python", program=words[i], program_index=i)


def _options(launch: Launch, words: Sequence[str], start: int, value_opts) -> Launch:
    i = start
    while i < len(words):
        w = words[i]
        if w == "--":
            i += 1
            break
        if not w.startswith("-"):
            break
        key, eq, value = w.lstrip("-").partition("=")
        key = key.replace("-", "_")
        if key == "local_rank" or key == "use_env":
            pass
        if not eq and key in value_opts and i + 1 < len(words):
            value = words[i + 1]
            launch.opts[key] = (value, i)
            i += 2
            continue
        launch.opts[key] = (value if eq else "", i)
        i += 1
    launch.program_index = i
    launch.program = words[i] if i < len(words) else ""
    return launch


def parse_nnodes(value: Optional[str]) -> Tuple[Optional[int], Optional[int]]:
    """torchrun --nnodes 'N' or 'MIN:MAX' -> (min, max); None where not a literal."""
    if value is None:
        return 1, 1
    lo, _, hi = value.partition(":")
    try:
        a = int(lo)
        b = int(hi) if hi else a
        return a, b
    except ValueError:
        return None, None


def words_of(words: List[str]) -> str:
    return " ".join(words)
