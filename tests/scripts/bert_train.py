"""A tiny BERT (transformers, built from a config: no download) trained on random tokens."""

import sys

import torch
from transformers import BertConfig, BertForSequenceClassification


def main(steps: int = 6) -> None:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=200, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64, num_labels=3)
    model = BertForSequenceClassification(config)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(steps):
        ids = torch.randint(0, 200, (8, 16))
        labels = torch.randint(0, 3, (8,))
        out = model(input_ids=ids, labels=labels)
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 6)
