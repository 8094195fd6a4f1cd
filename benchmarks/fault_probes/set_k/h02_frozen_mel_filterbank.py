"""Small 1-D CNN that classifies synthetic sound clips (tones, chirps, pulses) from log-STFT features."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(0)

SR = 8000
N_FFT = 256
HOP = 128
N_CLASSES = 6


def make_clip(label, g):
    n = int(torch.randint(2400, 4001, (1,), generator=g))
    t = torch.arange(n) / SR
    r = lambda lo, hi: lo + (hi - lo) * float(torch.rand(1, generator=g))
    phase = r(0, 2 * math.pi)
    if label == 0:
        x = torch.sin(2 * math.pi * r(300, 500) * t + phase)
    elif label == 1:
        x = torch.sin(2 * math.pi * r(1200, 1600) * t + phase)
    elif label == 2:
        x = 0.6 * torch.sin(2 * math.pi * r(300, 500) * t + phase) + 0.6 * torch.sin(2 * math.pi * r(1200, 1600) * t)
    elif label == 3:
        f0, f1 = r(250, 400), r(1400, 1800)
        x = torch.sin(2 * math.pi * (f0 * t + 0.5 * (f1 - f0) / t[-1] * t ** 2) + phase)
    elif label == 4:
        f0, f1 = r(1400, 1800), r(250, 400)
        x = torch.sin(2 * math.pi * (f0 * t + 0.5 * (f1 - f0) / t[-1] * t ** 2) + phase)
    else:
        gate = (torch.sin(2 * math.pi * r(6, 10) * t) > 0).float()
        x = gate * torch.sin(2 * math.pi * r(800, 1000) * t + phase)
    x = r(0.3, 1.0) * x + 0.3 * torch.randn(n, generator=g)
    return x


class ClipDataset(Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, N_CLASSES, (n,), generator=g)
        self.clips = [make_clip(int(y), g) for y in self.labels]

    def __len__(self):
        return len(self.clips)

    def __getitem__(self, i):
        return self.clips[i], self.labels[i]


def pad_collate(batch):
    clips, labels = zip(*batch)
    lengths = torch.tensor([len(c) for c in clips])
    out = torch.zeros(len(clips), int(lengths.max()))
    for i, c in enumerate(clips):
        out[i, : len(c)] = c
    return out, torch.stack(labels), lengths


def mel_filterbank(n_freqs, n_mels, sr):
    hz_to_mel = lambda f: 2595.0 * torch.log10(1.0 + f / 700.0)
    mel_to_hz = lambda m: 700.0 * (10 ** (m / 2595.0) - 1.0)
    mels = torch.linspace(hz_to_mel(torch.tensor(0.0)), hz_to_mel(torch.tensor(sr / 2)), n_mels + 2)
    edges = mel_to_hz(mels)
    freqs = torch.linspace(0, sr / 2, n_freqs)
    lo, mid, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    up = (freqs - lo) / (mid - lo)
    down = (hi - freqs) / (hi - mid)
    return torch.clamp(torch.minimum(up, down), min=0.0)      # (n_mels, n_freqs)


class LogMel(nn.Module):
    def __init__(self, n_fft, hop, n_mels, sr):
        super().__init__()
        self.n_fft, self.hop = n_fft, hop
        self.register_buffer("window", torch.hann_window(n_fft))
        self.mel = nn.Linear(n_fft // 2 + 1, n_mels, bias=False)
        with torch.no_grad():
            self.mel.weight.copy_(mel_filterbank(n_fft // 2 + 1, n_mels, sr))
        self.mel.weight.requires_grad_(False)       # fixed filterbank, not learned

    def forward(self, wav):
        spec = torch.stft(wav, self.n_fft, self.hop, window=self.window, return_complex=True).abs()
        mel = self.mel(spec.transpose(1, 2)).transpose(1, 2)
        return torch.log(mel + 1e-6)


class AudioCNN(nn.Module):
    def __init__(self, n_classes):
        super().__init__()
        self.frontend = LogMel(N_FFT, HOP, n_mels=40, sr=SR)
        c = 40
        self.features = nn.Sequential(
            nn.Conv1d(c, 64, kernel_size=5, padding=2),
            nn.BatchNorm1d(64),
            nn.ReLU(),
            nn.Conv1d(64, 64, kernel_size=3, padding=1),
            nn.BatchNorm1d(64),
            nn.ReLU(),
            nn.Conv1d(64, 64, kernel_size=3, padding=1),
            nn.BatchNorm1d(64),
            nn.ReLU(),
            nn.AdaptiveAvgPool1d(1),
        )
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(64, n_classes))

    def forward(self, wav):
        with torch.no_grad():
            x = self.frontend(wav)
        x = self.features(x).flatten(1)
        return self.classifier(x)


train_set = ClipDataset(768, seed=1)
loader = DataLoader(train_set, batch_size=32, shuffle=True, collate_fn=pad_collate,
                    generator=torch.Generator().manual_seed(2))

model = AudioCNN(N_CLASSES)
epochs = 8
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
criterion = nn.CrossEntropyLoss()

losses = []
model.train()
for epoch in range(epochs):
    for wav, y, lengths in loader:
        logits = model(wav)
        loss = criterion(logits, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    scheduler.step()


def fmt(v):
    return f"{v:.4f}" if math.isfinite(v) else "nan"


print(f"initial loss {fmt(sum(losses[:5]) / 5)} final loss {fmt(sum(losses[-5:]) / 5)} steps {len(losses)}")
