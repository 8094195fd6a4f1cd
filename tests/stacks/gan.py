"""A GAN: a generator and a discriminator, each with its own Adam."""
import torch
from torch import nn
torch.manual_seed(0)
netG = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))
netD = nn.Sequential(nn.Linear(2, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
optG = torch.optim.Adam(netG.parameters(), lr=1e-3)
optD = torch.optim.Adam(netD.parameters(), lr=1e-3)
bce = nn.BCEWithLogitsLoss()
for step in range(40):
    real = torch.randn(32, 2) * 0.5 + 2.0
    fake = netG(torch.randn(32, 4))
    d_loss = bce(netD(real), torch.ones(32, 1)) + bce(netD(fake.detach()), torch.zeros(32, 1))
    optD.zero_grad(); d_loss.backward(); optD.step()
    g_loss = bce(netD(fake), torch.ones(32, 1))
    optG.zero_grad(); g_loss.backward(); optG.step()
print("done")
