"""Knowledge distillation of a wide MLP teacher into a small MLP student on synthetic 10-class data."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)

N_FEAT, N_CLASSES = 20, 10
T = 2.0
ALPHA_CE = 0.5


def make_data(n, seed=1):
    g = torch.Generator().manual_seed(seed)
    centers = 2.2 * torch.randn(N_CLASSES, 3, N_FEAT, generator=g)
    y = torch.randint(0, N_CLASSES, (n,), generator=g)
    mode = torch.randint(0, 3, (n,), generator=g)
    x = centers[y, mode] + 1.7 * torch.randn(n, N_FEAT, generator=g)
    return x, y


def make_teacher():
    return nn.Sequential(
        nn.Linear(N_FEAT, 256), nn.ReLU(),
        nn.Linear(256, 256), nn.ReLU(),
        nn.Linear(256, N_CLASSES),
    )


def make_student():
    return nn.Sequential(
        nn.Linear(N_FEAT, 48), nn.ReLU(),
        nn.Linear(48, 48), nn.ReLU(),
        nn.Linear(48, N_CLASSES),
    )


def train_teacher(teacher, x, y, steps=150):
    opt = torch.optim.Adam(teacher.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(3)
    for _ in range(steps):
        idx = torch.randint(0, len(x), (256,), generator=g)
        opt.zero_grad()
        F.cross_entropy(teacher(x[idx]), y[idx]).backward()
        opt.step()


def distill_loss(s_logits, t_logits, labels):
    kd = F.kl_div(F.log_softmax(s_logits / T, dim=1), F.softmax(t_logits / T, dim=1),
                  reduction="batchmean") * (T * T)
    ce = F.cross_entropy(s_logits, labels)
    return kd + ALPHA_CE * ce


@torch.no_grad()
def accuracy(net, x, y):
    was_training = net.training
    net.eval()
    acc = (net(x).argmax(1) == y).float().mean().item()
    net.train(was_training)
    return acc


def fmt(v):
    return f"{v:.4f}" if math.isfinite(v) else "nan"


def main():
    x, y = make_data(5120)
    x_train, y_train, x_test, y_test = x[:4096], y[:4096], x[4096:], y[4096:]
    mu, sigma = x_train.mean(0), x_train.std(0)
    x_train, x_test = (x_train - mu) / sigma, (x_test - mu) / sigma

    teacher = make_teacher()
    train_teacher(teacher, x_train, y_train)
    teacher.requires_grad_(False)
    teacher.eval()
    print(f"teacher test acc {accuracy(teacher, x_test, y_test):.3f}")

    student = make_student()
    optimizer = torch.optim.SGD(student.parameters(), lr=0.05, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[5, 7], gamma=0.1)

    loader = DataLoader(TensorDataset(x_train, y_train), batch_size=128, shuffle=True,
                        generator=torch.Generator().manual_seed(2))
    losses = []
    for epoch in range(8):
        for xb, yb in loader:
            with torch.no_grad():
                t_logits = teacher(xb)
            s_logits = student(xb)
            loss = distill_loss(s_logits, t_logits, yb)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(student.parameters(), max_norm=0.1)
            optimizer.step()
            losses.append(loss.item())
        scheduler.step()
        print(f"epoch {epoch} loss {sum(losses[-len(loader):]) / len(loader):.4f}")

    print(f"student test acc {accuracy(student, x_test, y_test):.3f}")
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")


if __name__ == "__main__":
    main()
