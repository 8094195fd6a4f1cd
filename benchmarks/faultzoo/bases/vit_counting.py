"""Tiny vision transformer that counts bright patches, in a Lightning-like module style.

Family: vision transformer (Conv2d patch embedding, a learned [CLS] token and
positions, nn.TransformerEncoder of 2 built-in nn.TransformerEncoderLayer,
norm_first), 4-class CrossEntropyLoss (how many of the 16 patches are lit),
AdamW with a StepLR stepped every 30 optimizer steps.
Style: a model class with `training_step(batch)` and `configure_optimizers()`
(as in PyTorch Lightning, without Lightning) driven by a small generic loop.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def counting_images(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = 0.3 * torch.rand(n, 1, 16, 16, generator=g)
    y = torch.randint(0, 4, (n,), generator=g)
    for i in range(n):
        for p in torch.randperm(16, generator=g)[: int(y[i]) + 1].tolist():
            r, c = divmod(p, 4)
            x[i, 0, 4 * r:4 * r + 4, 4 * c:4 * c + 4] += 0.7
    return x, y


class PatchCounter(nn.Module):
    def __init__(self, dim=32, depth=2, heads=2, n_classes=4, lr=2e-3):
        super().__init__()
        self.lr = lr
        self.patch = nn.Conv2d(1, dim, kernel_size=4, stride=4)  # zoo: layer name=patch first=1 init=1
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(0.02 * torch.randn(1, 17, dim))
        layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=2 * dim, dropout=0.0, batch_first=True, norm_first=True)  # zoo: dropout modules=encoder.layers.0.dropout,encoder.layers.0.dropout1,encoder.layers.0.dropout2,encoder.layers.1.dropout,encoder.layers.1.dropout1,encoder.layers.1.dropout2
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)  # zoo: layer name=encoder.layers.1.linear1 init=1 relu=encoder.layers.1.linear1
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, n_classes)  # zoo: layer name=head head=1 init=1 new="nn.Linear(32, 4)"

    def forward(self, images):
        tokens = self.patch(images).flatten(2).transpose(1, 2)  # zoo: cut var=tokens upstream=patch
        tokens = torch.cat([self.cls.expand(len(images), -1, -1), tokens], dim=1) + self.pos
        h = self.encoder(tokens)  # zoo: cut var=h upstream=patch,encoder | skip module=encoder replace="h = tokens"
        return self.head(self.norm(h[:, 0]))  # zoo: logits

    def training_step(self, batch):
        images, labels = batch
        logits = self(images)  # zoo: forward
        return F.cross_entropy(logits, labels)  # zoo: loss kind=ce pred=logits target=labels classes=4 fn=1 ret=1

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.lr, weight_decay=0.05)  # zoo: optimizer var=optimizer kind=adamw
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=30, gamma=0.5)  # zoo: sched var=scheduler per=batch
        return optimizer, scheduler


def fit(module, images, labels, steps=100, batch_size=32, seed=0):
    optimizer, scheduler = module.configure_optimizers()
    g = torch.Generator().manual_seed(seed)
    module.train()  # zoo: train_mode
    for step in range(steps):  # zoo: loop
        idx = torch.randint(0, len(labels), (batch_size,), generator=g)
        loss = module.training_step((images[idx], labels[idx]))
        optimizer.zero_grad()  # zoo: zero_grad
        loss.backward()  # zoo: backward
        optimizer.step()  # zoo: step per=batch
        scheduler.step()  # zoo: sched_step per=batch
        if step % 20 == 0:
            print(f"step {step}: loss {loss.item():.3f}")


if __name__ == "__main__":
    torch.manual_seed(0)
    images, labels = counting_images(768)
    model = PatchCounter()  # zoo: model var=model attn=encoder.layers.0.self_attn,encoder.layers.1.self_attn q=encoder.layers.0.self_attn,encoder.layers.1.self_attn inproj=32
    fit(model, images, labels)
