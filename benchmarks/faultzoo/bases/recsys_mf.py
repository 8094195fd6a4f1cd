"""Matrix-factorisation recommender on synthetic ratings.

Family: embedding model (user and item nn.Embedding factors plus per-user and
per-item biases and a global offset), rating regression with MSELoss on a
[B] target, Adagrad.
Style: flat module-level script over a "ratings table" of (user, item,
rating) tensors, manual mini-batches over a shuffled index each epoch,
RMSE printed per epoch.
"""
import torch
import torch.nn as nn

torch.manual_seed(7)
N_USERS, N_ITEMS, RANK, N_RATINGS = 200, 150, 8, 6000

# ground truth: low-rank preferences plus biases, ratings roughly on a 1-5 scale
U, V = torch.randn(N_USERS, RANK) * 0.6, torch.randn(N_ITEMS, RANK) * 0.6
users = torch.randint(0, N_USERS, (N_RATINGS,))
items = torch.randint(0, N_ITEMS, (N_RATINGS,))
ratings = 3.0 + (U[users] * V[items]).sum(1) + 0.1 * torch.randn(N_RATINGS)  # zoo: targets var=ratings kind=real


class MF(nn.Module):
    def __init__(self, n_users, n_items, rank=16):
        super().__init__()
        self.user = nn.Embedding(n_users, rank)  # zoo: layer name=user first=1 frozen=1 missing=1 init=1
        self.item = nn.Embedding(n_items, rank)  # zoo: layer name=item frozen=1 missing=1
        self.user_bias = nn.Embedding(n_users, 1)
        self.item_bias = nn.Embedding(n_items, 1)  # zoo: layer name=item_bias missing=1
        self.offset = nn.Parameter(torch.zeros(1))
        for emb in (self.user, self.item):
            nn.init.normal_(emb.weight, std=0.1)
        nn.init.zeros_(self.user_bias.weight)
        nn.init.zeros_(self.item_bias.weight)

    def forward(self, u, i):
        dot = (self.user(u) * self.item(i)).sum(dim=1)  # zoo: broadcast old="sum(dim=1)" new="sum(dim=1, keepdim=True)"
        return dot + self.user_bias(u).squeeze(1) + self.item_bias(i).squeeze(1) + self.offset  # zoo: logits


model = MF(N_USERS, N_ITEMS)  # zoo: model var=model
loss_fn = nn.MSELoss()  # zoo: criterion kind=mse
optimizer = torch.optim.Adagrad(model.parameters(), lr=0.3)  # zoo: optimizer var=optimizer kind=adagrad | lr value=0.3
batch = 256
for epoch in range(6):  # zoo: loop
    order = torch.randperm(N_RATINGS)
    total = 0.0
    for start in range(0, N_RATINGS, batch):
        idx = order[start:start + batch]
        pred = model(users[idx], items[idx])  # zoo: forward ids=1
        loss = loss_fn(pred, ratings[idx])  # zoo: loss kind=mse pred=pred target=ratings[idx]
        optimizer.zero_grad()  # zoo: zero_grad
        loss.backward()  # zoo: backward
        optimizer.step()  # zoo: step per=batch
        total += loss.item() * len(idx)
    print(f"epoch {epoch}: rmse {(total / N_RATINGS) ** 0.5:.3f}")
