"""LSTM sequence classifier: which keyword does a token sequence contain?

Family: recurrent (nn.Embedding + 1-layer nn.LSTM + linear head on the last
hidden state), 4-class CrossEntropyLoss, Adam with gradient-norm clipping at 1.0.
Style: a `Trainer` class that owns the model, optimizer and loop (`fit`,
`train_step`), configuration in a dict, data made by a generator function.
"""
import torch
import torch.nn as nn

CONFIG = {"vocab": 30, "seq_len": 16, "emb": 16, "hidden": 32, "classes": 4,
          "batch": 32, "steps": 120, "lr": 1e-2, "clip": 1.0, "seed": 0}  # zoo: lr value=1e-2


def keyword_batches(cfg):
    """Random tokens 4.. with one keyword (tokens 0-3) at a random position; the keyword is the label."""
    g = torch.Generator().manual_seed(cfg["seed"])
    while True:
        x = torch.randint(cfg["classes"], cfg["vocab"], (cfg["batch"], cfg["seq_len"]), generator=g)
        y = torch.randint(0, cfg["classes"], (cfg["batch"],), generator=g)
        pos = torch.randint(0, cfg["seq_len"], (cfg["batch"],), generator=g)
        x[torch.arange(cfg["batch"]), pos] = y
        yield x, y


class LSTMClassifier(nn.Module):
    def __init__(self, vocab, emb, hidden, classes):
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb)  # zoo: layer name=embedding first=1 init=1 frozen=1
        self.lstm = nn.LSTM(emb, hidden, batch_first=True)  # zoo: layer name=lstm missing=1 init=1 sat=1 weight=weight_hh_l0
        self.head = nn.Linear(hidden, classes)  # zoo: layer name=head head=1 missing=1 init=1 new="nn.Linear(32, 4)"

    def forward(self, tokens):
        e = self.embedding(tokens)  # zoo: cut var=e upstream=embedding
        out, (h, c) = self.lstm(e)  # zoo: cut var=h upstream=embedding,lstm
        return self.head(h[-1])  # zoo: logits


class Trainer:
    def __init__(self, cfg):
        torch.manual_seed(cfg["seed"])
        self.cfg = cfg
        self.model = LSTMClassifier(cfg["vocab"], cfg["emb"], cfg["hidden"], cfg["classes"])  # zoo: model var=self.model
        self.loss_fn = nn.CrossEntropyLoss()  # zoo: criterion kind=ce
        self.opt = torch.optim.Adam(self.model.parameters(), lr=cfg["lr"])  # zoo: optimizer var=self.opt kind=adam

    def train_step(self, x, y):
        self.opt.zero_grad()  # zoo: zero_grad
        logits = self.model(x)  # zoo: forward
        loss = self.loss_fn(logits, y)  # zoo: loss kind=ce pred=logits target=y classes=4
        loss.backward()  # zoo: backward
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg["clip"])  # zoo: clip
        self.opt.step()  # zoo: step per=batch
        return loss.item()

    def fit(self):
        self.model.train()  # zoo: train_mode
        data = keyword_batches(self.cfg)
        for step in range(self.cfg["steps"]):  # zoo: loop
            x, y = next(data)  # zoo: batch x=x y=y
            loss = self.train_step(x, y)
            if step % 25 == 0 or step == self.cfg["steps"] - 1:
                print(f"step {step:4d}  loss {loss:.4f}")


if __name__ == "__main__":
    Trainer(CONFIG).fit()
