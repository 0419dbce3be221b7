import lightning as L

from model import LitModel


def main():
    trainer = L.Trainer(accelerator="gpu", devices=4, num_nodes=4, strategy="ddp")
    trainer.fit(LitModel())


if __name__ == "__main__":
    main()
