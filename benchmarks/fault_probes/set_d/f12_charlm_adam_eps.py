import torch
import torch.nn as nn

torch.manual_seed(0)

words = ["the", "cat", "sat", "on", "mat", "dog", "ran", "far", "and", "fast", "red", "sun"]
g = torch.Generator().manual_seed(1)
seq = []
for _ in range(3000):
    seq.append(words[int(torch.randint(0, len(words), (1,), generator=g))])
text = " ".join(seq)
vocab = sorted(set(text))
stoi = {c: i for i, c in enumerate(vocab)}
ids = torch.tensor([stoi[c] for c in text])
V = len(vocab)


class CharLM(nn.Module):
    def __init__(self, v=V, e=32, h=96):
        super().__init__()
        self.embed = nn.Embedding(v, e)
        self.rnn = nn.GRU(e, h, batch_first=True)
        self.head = nn.Linear(h, v)

    def forward(self, x, hidden=None):
        out, hidden = self.rnn(self.embed(x), hidden)
        return self.head(out), hidden


B, T = 16, 32
n = (ids.numel() - 1) // B
streams_x = ids[: n * B].view(B, n)
streams_y = ids[1 : n * B + 1].view(B, n)

model = CharLM()
opt = torch.optim.Adam(model.parameters(), lr=3e-3, eps=1.0)
crit = nn.CrossEntropyLoss()

losses = []
steps = 200
hidden = None
pos = 0
for step in range(steps):
    if pos + T > n:
        pos = 0
        hidden = None
    x = streams_x[:, pos : pos + T]
    y = streams_y[:, pos : pos + T]
    pos += T
    if hidden is not None:
        hidden = hidden.detach()
    logits, hidden = model(x, hidden)
    loss = crit(logits.reshape(-1, V), y.reshape(-1))
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    losses.append(loss.item())


def fmt(v):
    return "nan" if v != v or v in (float("inf"), float("-inf")) else f"{v:.4f}"


ini = sum(losses[:5]) / 5
fin = sum(losses[-5:]) / 5
print(f"initial loss {fmt(ini)} final loss {fmt(fin)} steps {steps}")
