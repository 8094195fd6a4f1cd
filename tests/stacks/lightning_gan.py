"""A GAN in Lightning: a generator and a discriminator, each with its own Adam, stepped by manual optimization.

    python lightning_gan.py [--callback STORE] [--steps N]
"""
import argparse

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ap = argparse.ArgumentParser()
ap.add_argument("--callback")
ap.add_argument("--steps", type=int, default=30)
args = ap.parse_args()

torch.manual_seed(0)
REAL = torch.randn(1024, 2) * torch.tensor([0.5, 2.0]) + torch.tensor([1.0, -1.0])


class GAN(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.netG = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))
        self.netD = nn.Sequential(nn.Linear(2, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        (real,) = batch
        opt_g, opt_d = self.optimizers()
        bce = nn.functional.binary_cross_entropy_with_logits
        fake = self.netG(torch.randn(len(real), 4))
        d_loss = bce(self.netD(real), torch.ones(len(real), 1)) + bce(self.netD(fake.detach()), torch.zeros(len(real), 1))
        opt_d.zero_grad()
        self.manual_backward(d_loss)
        opt_d.step()
        g_loss = bce(self.netD(fake), torch.ones(len(real), 1))
        opt_g.zero_grad()
        self.manual_backward(g_loss)
        opt_g.step()
        self.log_dict({"d_loss": d_loss, "g_loss": g_loss})

    def configure_optimizers(self):
        return (torch.optim.Adam(self.netG.parameters(), lr=2e-3, betas=(0.5, 0.999)),
                torch.optim.Adam(self.netD.parameters(), lr=2e-3, betas=(0.5, 0.999)))


callbacks = []
if args.callback:
    from gradsight.integrations.lightning import GradsightCallback

    callbacks.append(GradsightCallback(args.callback))
trainer = L.Trainer(max_steps=args.steps, logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                    accelerator="cpu", callbacks=callbacks)
trainer.fit(GAN(), DataLoader(TensorDataset(REAL), batch_size=32))
print("global_step", trainer.global_step)
