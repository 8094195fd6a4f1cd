import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

IMG = 12
N_CLASSES = 6
BATCH = 32
STEPS = 150
MAX_LR = 0.05
GRAD_CLIP = 5.0


def make_pixels(n, seed=2):
    g = torch.Generator().manual_seed(seed)
    coarse = torch.rand(N_CLASSES, 1, 3, 3, generator=g)
    templates = F.interpolate(coarse, size=(IMG, IMG), mode="bilinear", align_corners=False)
    labels = torch.randint(0, N_CLASSES, (n,), generator=g)
    noise = torch.randn(n, 1, IMG, IMG, generator=g) * 0.6
    shift = torch.randint(-1, 2, (n,), generator=g)
    imgs = templates[labels] + noise
    for s in (-1, 1):
        imgs[shift == s] = torch.roll(imgs[shift == s], s, dims=-1)
    pixels = (imgs.clamp(0, 1) * 255).round()
    return pixels, labels


class SmallCNN(nn.Module):
    def __init__(self, n_classes):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(16 * 3 * 3, 64),
            nn.ReLU(),
            nn.Linear(64, n_classes),
        )

    def forward(self, x):
        self.last_features = self.features(x).detach()
        return self.classifier(self.last_features)


class Trainer:
    def __init__(self, model, max_lr, steps, grad_clip):
        self.model = model
        self.grad_clip = grad_clip
        self.steps = steps
        self.optimizer = torch.optim.SGD(model.parameters(), lr=max_lr, momentum=0.9, nesterov=True,
                                         weight_decay=5e-4)
        self.scheduler = torch.optim.lr_scheduler.OneCycleLR(self.optimizer, max_lr=max_lr, total_steps=steps,
                                                             pct_start=0.25)
        self.criterion = nn.CrossEntropyLoss()
        self.history = []

    def training_step(self, xb, yb):
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = self.model(xb)
        loss = self.criterion(logits.float(), yb)
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        return loss.item()

    def fit(self, x, y, batch_size):
        g = torch.Generator().manual_seed(3)
        for _ in range(self.steps):
            idx = torch.randint(0, x.shape[0], (batch_size,), generator=g)
            self.history.append(self.training_step(x[idx], y[idx]))
        return self.history


def normalize(pixels):
    x = pixels / 255.0
    return (x - x.mean()) / x.std()


def main():
    pixels, labels = make_pixels(4096)
    x = normalize(pixels)
    model = SmallCNN(N_CLASSES)
    trainer = Trainer(model, MAX_LR, STEPS, GRAD_CLIP)
    losses = trainer.fit(x, labels, BATCH)

    def fmt(v):
        return f"{v:.4f}" if math.isfinite(v) else "nan"

    first = sum(losses[:5]) / 5
    last = sum(losses[-5:]) / 5
    print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")


if __name__ == "__main__":
    main()
