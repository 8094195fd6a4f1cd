"""A PyTorch Lightning regression, automatic or manual optimization.

    python lightning_loop.py [--manual] [--lr X] [--clip X] [--callback STORE] [--steps N]
"""
import argparse

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ap = argparse.ArgumentParser()
ap.add_argument("--manual", action="store_true")
ap.add_argument("--lr", type=float, default=1e-2)
ap.add_argument("--clip", type=float, default=None)
ap.add_argument("--callback")
ap.add_argument("--steps", type=int, default=30)
args = ap.parse_args()

torch.manual_seed(0)
X = torch.randn(1024, 8)
Y = X.sum(1, keepdim=True)


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
        self.automatic_optimization = not args.manual

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        if args.manual:
            opt = self.optimizers()
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=args.lr)


callbacks = []
if args.callback:
    from gradsight.integrations.lightning import GradsightCallback

    callbacks.append(GradsightCallback(args.callback))
trainer = L.Trainer(max_steps=args.steps, logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                    accelerator="cpu", gradient_clip_val=None if args.manual else args.clip, callbacks=callbacks)
trainer.fit(Regressor(), DataLoader(TensorDataset(X, Y), batch_size=16))
print("global_step", trainer.global_step)
