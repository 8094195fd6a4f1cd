"""Dense autoencoder reconstructing small synthetic images, with a validation pass.

Family: autoencoder (encoder and decoder as nn.Sequential attributes, 64-16-64
bottleneck), per-pixel BCEWithLogitsLoss against pixel intensities in [0, 1],
Adam, a train/validation split with random_split and a no_grad validation
loop every epoch.
Style: tutorial-style script with `train_epoch()` / `validate()` functions,
`model.eval()` for validation and `model.train()` again at each epoch.
"""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset, random_split


class AutoEncoder(nn.Module):
    def __init__(self, n_pixels=64, hidden=48, code=12):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(n_pixels, hidden),  # zoo: layer name=encoder.0 first=1 init=1 relu=encoder.0,encoder.1 frozen=1
            nn.ReLU(),
            nn.Linear(hidden, code),  # zoo: layer name=encoder.2 init=1
        )
        self.decoder = nn.Sequential(
            nn.Linear(code, hidden),  # zoo: layer name=decoder.0 init=1 relu=decoder.0,decoder.1
            nn.ReLU(),
            nn.Linear(hidden, n_pixels),  # zoo: layer name=decoder.2 head=1
        )

    def forward(self, x):
        z = self.encoder(x)  # zoo: cut var=z upstream=encoder
        return self.decoder(z)  # zoo: logits


def make_images(n, seed=0):
    """8x8 near-binary images: one horizontal and one vertical bar at random rows/columns."""
    g = torch.Generator().manual_seed(seed)
    img = torch.zeros(n, 8, 8)
    rows, cols = torch.randint(0, 8, (n,), generator=g), torch.randint(0, 8, (n,), generator=g)
    img[torch.arange(n), rows, :] = 1.0
    img[torch.arange(n), :, cols] = 1.0
    return (0.02 + 0.96 * img).reshape(n, 64)


def train_epoch(model, loader, criterion, optimizer):
    model.train()  # zoo: train_mode
    for (x,) in loader:
        optimizer.zero_grad()  # zoo: zero_grad
        recon = model(x)  # zoo: forward
        loss = criterion(recon, x)  # zoo: loss kind=bce pred=recon target=x
        loss.backward()  # zoo: backward
        optimizer.step()  # zoo: step per=batch
    return loss.item()


@torch.no_grad()
def validate(model, loader, criterion):
    model.eval()
    return sum(criterion(model(x), x).item() for (x,) in loader) / len(loader)


torch.manual_seed(0)
data = TensorDataset(make_images(1280))
train_set, val_set = random_split(data, [1024, 256], generator=torch.Generator().manual_seed(0))
train_loader = DataLoader(train_set, batch_size=32, shuffle=True)
val_loader = DataLoader(val_set, batch_size=128)
model = AutoEncoder()  # zoo: model var=model
criterion = nn.BCEWithLogitsLoss()  # zoo: criterion kind=bce
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)  # zoo: optimizer var=optimizer kind=adam | lr value=3e-3
for epoch in range(5):  # zoo: loop
    train_loss = train_epoch(model, train_loader, criterion, optimizer)
    print(f"epoch {epoch}: train {train_loss:.4f} val {validate(model, val_loader, criterion):.4f}")
