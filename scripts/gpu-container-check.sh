#!/usr/bin/env bash
# Real GPUs inside container jobs (docs/containers.md, "What a task sees"), checked on a
# machine with NVIDIA GPUs, as root, with Slurm, squashfs-tools and the plugin
# (`make setup-containers`): a 1-node local cluster with one real GPU, a squashfs image,
# then inside a container `nvidia-smi -L` must list exactly the step's one GPU, and where
# the image has a CUDA build of torch, torch.cuda must see it and run a kernel on it.
#
#   scripts/gpu-container-check.sh [IMAGE]
#
# IMAGE: a .sqsh file, or dockerd://IMAGE (default: dockerd://simcluster/node:0.1.0-train,
# built by `simcluster image build --train`, imported to a .sqsh first). GPU=<id> picks the
# physical GPU (default 0). Exit 0: every check passed; the cluster goes down either way.
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${1:-dockerd://simcluster/node:0.1.0-train}
GPU=${GPU:-0}
NAME=gpucheck$$
WORK=$(mktemp -d /tmp/simcluster-gpu-check.XXXXXX)
export SIMCLUSTER_HOME=$WORK/home
SC=(.venv/bin/simcluster)
[ -x "${SC[0]}" ] || SC=(simcluster)
fail() { echo "FAIL: $*" >&2; exit 1; }
cleanup() { "${SC[@]}" down --name "$NAME" >/dev/null 2>&1 || true; rm -rf "$WORK"; }
trap cleanup EXIT

[ "$(id -u)" = 0 ] || fail "run as root (container jobs mount per task)"
[ -c /dev/nvidiactl ] || fail "no /dev/nvidiactl: this machine has no NVIDIA driver loaded"
command -v nvidia-smi >/dev/null || fail "no nvidia-smi on this machine"
echo "host: $(nvidia-smi -L | head -n 1); nvidia-container-cli: $(command -v nvidia-container-cli || echo 'none (ldconfig -p path)')"

if [[ $IMAGE == dockerd://* ]]; then
  echo "importing $IMAGE"
  "${SC[@]}" image import "$IMAGE" -o "$WORK/image.sqsh"
  IMAGE=$WORK/image.sqsh
fi
"${SC[@]}" up --name "$NAME" --nodes 1 --gpus "$GPU"
eval "$("${SC[@]}" env --name "$NAME")"
cd "$WORK"

echo "== nvidia-smi -L in a container, --gpus=1"
out=$(srun -N1 --gpus=1 --container-image="$IMAGE" nvidia-smi -L)
echo "$out"
[ "$(grep -c '^GPU ' <<<"$out")" = 1 ] || fail "expected exactly 1 GPU inside the container, got: $out"
grep -q "$(nvidia-smi -i "$GPU" --query-gpu=uuid --format=csv,noheader)" <<<"$out" \
  || fail "the GPU inside is not physical GPU $GPU"

echo "== the driver's libraries inside"
srun -N1 --gpus=1 --container-image="$IMAGE" sh -c 'ldconfig -p | grep -E "libcuda.so|libnvidia-ml.so"' \
  || fail "libcuda / libnvidia-ml are not in the container's loader cache"

# simcluster/node:*-train has torch's CPU wheel: torch.version.cuda is None there, and the
# check needs an image with a CUDA build (e.g. a .sqsh of NVIDIA's pytorch image).
if srun -N1 --container-image="$IMAGE" sh -c 'command -v python3 >/dev/null && python3 -c "import torch, sys; sys.exit(torch.version.cuda is None)"' 2>/dev/null; then
  echo "== torch.cuda in a container"
  srun -N1 --gpus=1 --container-image="$IMAGE" python3 -c '
import torch
assert torch.cuda.is_available(), "torch.cuda.is_available() is False"
assert torch.cuda.device_count() == 1, torch.cuda.device_count()
x = torch.ones(1024, device="cuda")
print("torch", torch.__version__, torch.cuda.get_device_name(0), "sum", float((x * 2).sum()))
assert float((x * 2).sum()) == 2048.0
' || fail "torch could not use the GPU inside the container"
else
  echo "== torch with CUDA: not in the image, skipped"
fi
echo "OK: real GPUs inside containers"
