from nemo.collections.nlp.models.language_modeling.megatron_gpt_model import MegatronGPTModel
from nemo.core.config import hydra_runner
from pytorch_lightning import Trainer


@hydra_runner(config_path="conf", config_name="megatron_gpt_config")
def main(cfg):
    trainer = Trainer(**cfg.trainer)
    MegatronGPTModel(cfg.model, trainer)
