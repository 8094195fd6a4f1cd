"""Dense-adjacency GCN for node classification on a synthetic community graph."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

N_NODES = 600
N_COMMUNITIES = 5
N_FEATURES = 32
HIDDEN = 32


def make_graph(gen):
    """Stochastic block model; node features are a weak noisy hint of the community."""
    sizes = torch.full((N_COMMUNITIES,), N_NODES // N_COMMUNITIES)
    labels = torch.repeat_interleave(torch.arange(N_COMMUNITIES), sizes)
    same = labels[:, None] == labels[None, :]
    prob = torch.where(same, torch.tensor(0.05), torch.tensor(0.006))
    upper = torch.triu(torch.rand(N_NODES, N_NODES, generator=gen) < prob, diagonal=1)
    adj = (upper | upper.T).float()
    centers = torch.randn(N_COMMUNITIES, N_FEATURES, generator=gen)
    feats = 0.4 * centers[labels] + torch.randn(N_NODES, N_FEATURES, generator=gen)

    # nodes were generated community by community; shuffle them so ids carry no information
    order = torch.randperm(N_NODES, generator=gen)
    adj = adj[order][:, order]
    feats = feats[order]
    labels = labels[order]
    return adj, feats, labels


def normalize_adjacency(adj):
    a = adj + torch.eye(adj.shape[0])
    deg = a.sum(1)
    d_inv_sqrt = deg.pow(-0.5)
    return d_inv_sqrt[:, None] * a * d_inv_sqrt[None, :]


class GCNLayer(nn.Module):
    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.linear = nn.Linear(in_dim, out_dim)

    def forward(self, h, a_hat):
        return a_hat @ self.linear(h)


class GCN(nn.Module):
    def __init__(self, in_dim, hidden, n_classes, dropout=0.5):
        super().__init__()
        self.conv1 = GCNLayer(in_dim, hidden)
        self.conv2 = GCNLayer(hidden, hidden)
        self.conv3 = GCNLayer(hidden, n_classes)
        self.dropout = dropout

    def forward(self, x, a_hat):
        h = F.dropout(x, p=self.dropout, training=self.training)
        h = F.relu(self.conv1(h, a_hat))
        h = F.dropout(h, p=self.dropout, training=self.training)
        h = F.relu(self.conv2(h, a_hat))
        h = F.dropout(h, p=self.dropout, training=self.training)
        return self.conv3(h, a_hat)


def main():
    gen = torch.Generator().manual_seed(3)
    adj, feats, labels = make_graph(gen)
    a_hat = normalize_adjacency(adj)

    perm = torch.randperm(N_NODES, generator=gen)
    train_idx, test_idx = perm[:120], perm[300:]
    train_mask = torch.zeros(N_NODES, dtype=torch.bool)
    train_mask[train_idx] = True
    test_mask = torch.zeros(N_NODES, dtype=torch.bool)
    test_mask[test_idx] = True
    print(f"{int(train_mask.sum())} labelled nodes, {int(test_mask.sum())} test nodes, "
          f"{int(adj.sum()) // 2} edges")

    model = GCN(N_FEATURES, HIDDEN, N_COMMUNITIES, dropout=0.5)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)

    losses = []
    for epoch in range(200):
        model.train()
        optimizer.zero_grad()
        out = model(feats, a_hat)
        loss = F.cross_entropy(out[train_mask], labels[train_mask])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (epoch + 1) % 50 == 0:
            model.eval()
            with torch.no_grad():
                pred = model(feats, a_hat).argmax(1)
            acc = (pred[test_mask] == labels[test_mask]).float().mean().item()
            print(f"epoch {epoch + 1:3d} loss {loss.item():.4f} test acc {acc:.3f}")

    def fmt(v):
        return f"{v:.4f}" if math.isfinite(v) else "nan"

    print(f"initial loss {fmt(sum(losses[:5]) / 5)} final loss {fmt(sum(losses[-5:]) / 5)} steps {len(losses)}")


if __name__ == "__main__":
    main()
