"""Healthy probe 7: matrix factorisation recommender, nn.Embedding user/item factors + biases, SparseAdam + MSE."""
import torch
import torch.nn as nn

torch.manual_seed(7)
N_USERS, N_ITEMS, RANK, N_RATINGS = 300, 200, 16, 20000
g = torch.Generator().manual_seed(7)

# ground-truth low-rank ratings on a 1..5 scale, observed sparsely
true_u = torch.randn(N_USERS, 4, generator=g)
true_i = torch.randn(N_ITEMS, 4, generator=g)
users = torch.randint(0, N_USERS, (N_RATINGS,), generator=g)
items = torch.randint(0, N_ITEMS, (N_RATINGS,), generator=g)
ratings = (3.0 + 0.6 * (true_u[users] * true_i[items]).sum(-1) + 0.1 * torch.randn(N_RATINGS, generator=g)).clamp(1, 5)


class MatrixFactorization(nn.Module):
    def __init__(self, n_users, n_items, rank):
        super().__init__()
        self.user_factors = nn.Embedding(n_users, rank, sparse=True)
        self.item_factors = nn.Embedding(n_items, rank, sparse=True)
        self.user_bias = nn.Embedding(n_users, 1, sparse=True)
        self.item_bias = nn.Embedding(n_items, 1, sparse=True)
        nn.init.normal_(self.user_factors.weight, std=0.1)
        nn.init.normal_(self.item_factors.weight, std=0.1)
        nn.init.zeros_(self.user_bias.weight)
        nn.init.zeros_(self.item_bias.weight)
        self.global_bias = 3.0

    def forward(self, u, i):
        dot = (self.user_factors(u) * self.item_factors(i)).sum(-1)
        return dot + self.user_bias(u).squeeze(-1) + self.item_bias(i).squeeze(-1) + self.global_bias


model = MatrixFactorization(N_USERS, N_ITEMS, RANK)
optimizer = torch.optim.SparseAdam(list(model.parameters()), lr=0.02)
loss_fn = nn.MSELoss()
BATCH = 256
losses = []
for epoch in range(3):
    perm = torch.randperm(N_RATINGS, generator=g)
    for b in range(0, N_RATINGS - BATCH + 1, BATCH):
        idx = perm[b:b + BATCH]
        pred = model(users[idx], items[idx])
        loss = loss_fn(pred, ratings[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    print(f"epoch {epoch} mse {loss.item():.4f}")

print(f"initial loss {sum(losses[:5]) / 5:.4f} final loss {sum(losses[-5:]) / 5:.4f} steps {len(losses)}")
