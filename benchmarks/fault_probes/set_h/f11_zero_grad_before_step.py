"""Small CNN on synthetic colour-cast images, trained by a reusable Trainer with callbacks."""
import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

NUM_CLASSES = 6
IMG = 16


def make_images(n, gen):
    """uint8 images: each class has its own colour cast and light direction, under heavy pixel noise."""
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, IMG), torch.linspace(-1, 1, IMG), indexing="ij")
    colours = torch.randn(NUM_CLASSES, 3, generator=gen)
    angles = torch.rand(NUM_CLASSES, generator=gen) * 2 * math.pi
    labels = torch.randint(0, NUM_CLASSES, (n,), generator=gen)
    ramp = torch.cos(angles)[labels, None, None] * xx + torch.sin(angles)[labels, None, None] * yy
    brightness = 0.1 * torch.randn(n, 1, 1, 1, generator=gen)
    img = 0.5 + brightness + 0.06 * colours[labels][:, :, None, None] + 0.1 * ramp[:, None]
    img = img + 0.3 * torch.randn(n, 3, IMG, IMG, generator=gen)
    img = (img.clamp(0, 1) * 255).round().to(torch.uint8)
    return img, labels


def preprocess(img_u8):
    x = img_u8.float() / 255.0
    return (x - 0.5) / 0.25


class SmallCNN(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(64, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(m.bias)

    def forward(self, x):
        return self.head(self.pool(self.features(x)).flatten(1))


class Callback:
    def on_train_begin(self, trainer):
        pass

    def on_step_end(self, trainer, step, loss):
        pass

    def on_train_end(self, trainer):
        pass


class EMACallback(Callback):
    """Keeps an exponential moving average of the weights, used for evaluation."""

    def __init__(self, decay=0.99):
        self.decay = decay
        self.shadow = None
        self.backup = None

    def on_train_begin(self, trainer):
        self.shadow = copy.deepcopy(trainer.model.state_dict())

    @torch.no_grad()
    def on_step_end(self, trainer, step, loss):
        for name, value in trainer.model.state_dict().items():
            if value.dtype.is_floating_point:
                self.shadow[name].mul_(self.decay).add_(value, alpha=1.0 - self.decay)
            else:
                self.shadow[name].copy_(value)

    def apply_shadow(self, model):
        self.backup = {k: v.detach().clone() for k, v in model.state_dict().items()}
        model.load_state_dict(self.shadow)

    def restore(self, model):
        model.load_state_dict(self.backup)
        self.backup = None


class LoggingCallback(Callback):
    """Prints the running loss and the validation accuracy of the EMA weights."""

    def __init__(self, ema, val_images, val_labels, every=25):
        self.ema = ema
        self.val_images = val_images
        self.val_labels = val_labels
        self.every = every
        self.history = []

    def on_step_end(self, trainer, step, loss):
        self.history.append(loss)
        if (step + 1) % self.every == 0:
            recent = self.history[-self.every:]
            self.ema.apply_shadow(trainer.model)
            acc = trainer.evaluate(trainer.model, self.val_images, self.val_labels)
            self.ema.restore(trainer.model)
            print(f"step {step + 1:4d} loss {sum(recent) / len(recent):.4f} "
                  f"lr {trainer.optimizer.param_groups[0]['lr']:.4f} grad_norm {trainer.last_grad_norm:.3f} "
                  f"ema val acc {acc:.3f}")


class Trainer:
    def __init__(self, model, optimizer, scheduler, accum_steps=4, max_grad_norm=1.0, callbacks=()):
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.accum_steps = accum_steps
        self.max_grad_norm = max_grad_norm
        self.callbacks = list(callbacks)
        self.last_grad_norm = 0.0

    def _call(self, hook, *args):
        for cb in self.callbacks:
            getattr(cb, hook)(self, *args)

    def train_step(self, images, labels):
        self.model.train()
        total = 0.0
        mb = images.shape[0] // self.accum_steps
        for i in range(self.accum_steps):
            x = images[i * mb:(i + 1) * mb]
            y = labels[i * mb:(i + 1) * mb]
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = self.model(preprocess(x))
            loss = F.cross_entropy(logits.float(), y) / self.accum_steps
            loss.backward()
            total += loss.item()
        self.last_grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm))
        self.optimizer.zero_grad(set_to_none=True)
        self.optimizer.step()
        self.scheduler.step()
        return total

    @torch.no_grad()
    def evaluate(self, model, images, labels):
        model.eval()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(preprocess(images))
        return (logits.argmax(1) == labels).float().mean().item()

    def fit(self, images, labels, steps, batch_size, gen):
        self._call("on_train_begin")
        losses = []
        for step in range(steps):
            idx = torch.randint(0, images.shape[0], (batch_size,), generator=gen)
            loss = self.train_step(images[idx], labels[idx])
            losses.append(loss)
            self._call("on_step_end", step, loss)
        self._call("on_train_end")
        return losses


def main():
    gen = torch.Generator().manual_seed(1)
    images, labels = make_images(2048 + 256, gen)
    train_x, train_y = images[:2048], labels[:2048]
    val_x, val_y = images[2048:], labels[2048:]

    model = SmallCNN(NUM_CLASSES)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.99)
    ema = EMACallback(decay=0.99)
    trainer = Trainer(model, optimizer, scheduler, accum_steps=4, max_grad_norm=5.0,
                      callbacks=[ema, LoggingCallback(ema, val_x, val_y, every=10)])
    losses = trainer.fit(train_x, train_y, steps=150, batch_size=64, gen=gen)
    print(f"final val acc {trainer.evaluate(model, val_x, val_y):.3f}")

    def fmt(v):
        return f"{v:.4f}" if math.isfinite(v) else "nan"

    print(f"initial loss {fmt(sum(losses[:5]) / 5)} final loss {fmt(sum(losses[-5:]) / 5)} steps {len(losses)}")


if __name__ == "__main__":
    main()
