import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

# synthetic stochastic block model: 4 communities, noisy node features
N, C, F_IN = 400, 4, 32
labels = torch.arange(N) % C
labels = labels[torch.randperm(N)]
p_in, p_out = 0.06, 0.004
same = labels[:, None] == labels[None, :]
probs = torch.where(same, torch.tensor(p_in), torch.tensor(p_out))
upper = torch.triu((torch.rand(N, N) < probs).float(), diagonal=1)
adj = upper + upper.t()
adj = adj + torch.eye(N)                     # self loops

centers = torch.randn(C, F_IN)
raw = 50.0 + 30.0 * (0.5 * centers[labels] + torch.randn(N, F_IN))   # raw sensor-like units
features = (raw - raw.mean(0)) / raw.std(0)

train_mask = torch.zeros(N, dtype=torch.bool)
train_mask[torch.randperm(N)[:160]] = True


class GATLayer(nn.Module):
    def __init__(self, in_dim, out_dim, heads=1, attn_dropout=0.3):
        super().__init__()
        self.heads, self.out_dim = heads, out_dim
        self.proj = nn.Linear(in_dim, heads * out_dim, bias=False)
        self.att_src = nn.Parameter(torch.empty(heads, out_dim))
        self.att_dst = nn.Parameter(torch.empty(heads, out_dim))
        nn.init.xavier_uniform_(self.att_src)
        nn.init.xavier_uniform_(self.att_dst)
        self.attn_drop = nn.Dropout(attn_dropout)
        self.bias = nn.Parameter(torch.zeros(heads * out_dim))

    def forward(self, x, adj):
        n = x.shape[0]
        h = self.proj(x).view(n, self.heads, self.out_dim)            # (N, H, D)
        s_src = (h * self.att_src).sum(-1)                              # (N, H)
        s_dst = (h * self.att_dst).sum(-1)
        e = F.leaky_relu(s_dst.t()[:, :, None] + s_src.t()[:, None, :], 0.2)   # (H, N_dst, N_src)
        e = e.masked_fill(adj[None] == 0, float("-inf"))
        alpha = torch.softmax(e, dim=-1)
        alpha = self.attn_drop(alpha)
        out = torch.einsum("hij,jhd->ihd", alpha, h)                    # (N, H, D)
        return out.reshape(n, self.heads * self.out_dim) + self.bias


class GAT(nn.Module):
    def __init__(self, in_dim, hidden, heads, n_classes):
        super().__init__()
        self.layer1 = GATLayer(in_dim, hidden, heads=heads)
        self.layer2 = GATLayer(hidden * heads, n_classes, heads=1)
        self.drop = nn.Dropout(0.3)

    def forward(self, x, adj):
        x = self.drop(x)
        x = F.elu(self.layer1(x, adj))
        x = self.drop(x)
        return self.layer2(x, adj)


model = GAT(F_IN, 8, 4, C)
opt = torch.optim.Adam(model.parameters(), lr=5e-3, weight_decay=5e-4)

losses = []
STEPS = 200
for step in range(STEPS):
    model.train()
    logits = model(features, adj)
    loss = F.cross_entropy(logits[train_mask], labels[train_mask])
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())

model.eval()
with torch.no_grad():
    pred = model(features, adj).argmax(-1)
acc = (pred[~train_mask] == labels[~train_mask]).float().mean().item()


def fmt(v):
    return "nan" if not math.isfinite(v) else f"{v:.4f}"


print(f"test accuracy {acc:.3f}")
print(f"initial loss {fmt(sum(losses[:5]) / 5)} final loss {fmt(sum(losses[-5:]) / 5)} steps {len(losses)}")
