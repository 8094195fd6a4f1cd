"""A LightningModule that keeps its residual blocks in a plain Python list: they run and get gradients, but
self.parameters() (and so configure_optimizers) never holds them. ``--callback DB`` watches it with gradsight's
Lightning callback instead of ``gradsight trace``."""
import sys

import lightning as L
import torch
from torch import nn

torch.manual_seed(0)


class Reg(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 32)
        self.blocks = [nn.Linear(32, 32) for _ in range(3)]
        self.out = nn.Linear(32, 1)

    def forward(self, x):
        h = torch.relu(self.inp(x))
        for b in self.blocks:
            h = h + torch.tanh(b(h))
        return self.out(h)

    def training_step(self, batch, _):
        x, y = batch
        loss = nn.functional.mse_loss(self(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=3e-3)


X = torch.randn(512, 8)
Y = torch.sin(X[:, :1] * 2) + X[:, 1:2] * X[:, 2:3]
dl = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, Y), batch_size=32)
CB = []
if "--callback" in sys.argv:
    from gradsight.integrations.lightning import GradsightCallback

    CB = [GradsightCallback(sys.argv[sys.argv.index("--callback") + 1])]
trainer = L.Trainer(max_epochs=4, logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, callbacks=CB)
trainer.fit(Reg(), dl)
print(f"final loss {trainer.callback_metrics['loss'].item():.4f}")
