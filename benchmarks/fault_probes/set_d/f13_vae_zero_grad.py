import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

D, Z, K = 64, 8, 5
centers = torch.randn(K, D) * 2.0
assign = torch.randint(0, K, (4096,))
data = centers[assign] + 0.3 * torch.randn(4096, D)
data = (data - data.mean(0)) / data.std(0)


class VAE(nn.Module):
    def __init__(self, d=D, h=128, z=Z):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(d, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU())
        self.mu = nn.Linear(h, z)
        self.logvar = nn.Linear(h, z)
        self.dec = nn.Sequential(nn.Linear(z, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, d))

    def encode(self, x):
        h = self.enc(x)
        return self.mu(h), self.logvar(h)

    def decode(self, z):
        return self.dec(z)

    def forward(self, x):
        mu, logvar = self.encode(x)
        std = torch.exp(0.5 * logvar)
        z = mu + std * torch.randn_like(std)
        return self.decode(z), mu, logvar


def vae_loss(recon, x, mu, logvar, beta=1.0):
    rec = F.mse_loss(recon, x, reduction="none").sum(1).mean()
    kl = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp(), dim=1).mean()
    return (rec + beta * kl) / x.shape[1]


model = VAE()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)

losses = []
steps = 200
bs = 128
for step in range(steps):
    idx = torch.randint(0, data.shape[0], (bs,))
    x = data[idx]
    recon, mu, logvar = model(x)
    loss = vae_loss(recon, x, mu, logvar)
    loss.backward()
    opt.zero_grad()
    opt.step()
    losses.append(loss.item())


def fmt(v):
    return "nan" if v != v or v in (float("inf"), float("-inf")) else f"{v:.4f}"


ini = sum(losses[:5]) / 5
fin = sum(losses[-5:]) / 5
print(f"initial loss {fmt(ini)} final loss {fmt(fin)} steps {steps}")
