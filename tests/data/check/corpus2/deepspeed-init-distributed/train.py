import argparse

import deepspeed
import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--deepspeed_config")
    args = parser.parse_args()
    deepspeed.init_distributed(dist_backend="nccl")
    model = torch.nn.Linear(10, 10)
    engine, _, _, _ = deepspeed.initialize(model=model, config=args.deepspeed_config)


if __name__ == "__main__":
    main()
