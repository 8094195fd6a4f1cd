import math
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

N_ATTR, N_VAL = 4, 4
FILLER = list(range(1 + N_ATTR * N_VAL, 1 + N_ATTR * N_VAL + 8))
VOCAB = 1 + N_ATTR * N_VAL + len(FILLER)
PAD = 0
TXT_LEN = 8
IMG = 16
BATCH = 64
STEPS = 200

# one fixed visual pattern per (attribute, value)
patterns = torch.randn(N_ATTR, N_VAL, 3, IMG, IMG, generator=torch.Generator().manual_seed(123))
patterns = F.avg_pool2d(patterns.view(-1, 3, IMG, IMG), 3, stride=1, padding=1).view(N_ATTR, N_VAL, 3, IMG, IMG)
patterns = patterns / patterns.std()


def make_batch(gen):
    attrs = torch.randint(0, N_VAL, (BATCH, N_ATTR), generator=gen)
    images = torch.zeros(BATCH, 3, IMG, IMG)
    for a in range(N_ATTR):
        images += patterns[a, attrs[:, a]]
    images = images / N_ATTR + 0.3 * torch.randn(BATCH, 3, IMG, IMG, generator=gen)
    images = (images * 50 + 128).round().clamp(0, 255).to(torch.uint8)
    text = torch.full((BATCH, TXT_LEN), PAD, dtype=torch.long)
    for i in range(BATCH):
        toks = [1 + a * N_VAL + int(attrs[i, a]) for a in range(N_ATTR)]
        n_fill = int(torch.randint(0, TXT_LEN - N_ATTR + 1, (1,), generator=gen))
        toks += [FILLER[int(j)] for j in torch.randint(0, len(FILLER), (n_fill,), generator=gen)]
        order = torch.randperm(len(toks), generator=gen)
        text[i, :len(toks)] = torch.tensor(toks)[order]
    return images, text, attrs[:, 0]


MEAN, STD = 0.5, 0.2


def preprocess(images):
    return (images.float() / 255.0 - MEAN) / STD


class DualEncoder(nn.Module):
    def __init__(self, embed_dim=64, text_width=32):
        super().__init__()
        self.image_encoder = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
        )
        self.image_proj = nn.Linear(32 * (IMG // 4) ** 2, embed_dim)
        self.token_embedding = nn.Embedding(VOCAB, text_width, padding_idx=PAD)
        layer = nn.TransformerEncoderLayer(text_width, nhead=2, dim_feedforward=64, dropout=0.0, batch_first=True)
        self.text_encoder = nn.TransformerEncoder(layer, num_layers=1, enable_nested_tensor=False)
        self.text_proj = nn.Linear(text_width, embed_dim)
        self.logit_scale = nn.Parameter(torch.ones([]) * math.log(1 / 0.07))

    def encode_image(self, images):
        return self.image_proj(self.image_encoder(images))

    def encode_text(self, text):
        pad_mask = text == PAD
        h = self.text_encoder(self.token_embedding(text), src_key_padding_mask=pad_mask)
        keep = (~pad_mask).unsqueeze(-1).float()
        pooled = (h * keep).sum(1) / keep.sum(1)
        return self.text_proj(pooled)

    def forward(self, images, text):
        img = F.normalize(self.encode_image(images), dim=-1)
        txt = F.normalize(self.encode_text(text), dim=-1)
        scale = self.logit_scale.exp().clamp(max=100)
        return scale * img @ txt.t()


model = DualEncoder()
decay = [p for n, p in model.named_parameters() if p.ndim > 2 and "embedding" not in n]
no_decay = [p for n, p in model.named_parameters() if p.ndim < 2 or "embedding" in n]
optimizer = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
    lr=1e-3,
)

gen = torch.Generator().manual_seed(1)
losses = []
for step in range(STEPS):
    images, text, shape_ids = make_batch(gen)
    logits = model(preprocess(images), text)
    targets = torch.arange(logits.shape[0])
    loss = (F.cross_entropy(logits, targets) + F.cross_entropy(logits.t(), targets)) / 2
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())

first = sum(losses[:5]) / 5
last = sum(losses[-5:]) / 5
fmt = lambda v: f"{v:.4f}" if math.isfinite(v) else "nan"
print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")
