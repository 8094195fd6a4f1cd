"""A Hugging Face model built with from_config (no download), trained for a few steps."""

import torch
from transformers import AutoModelForSequenceClassification, BertConfig

torch.manual_seed(0)
config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                    max_position_embeddings=32, num_labels=2)
model = AutoModelForSequenceClassification.from_config(config)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

for _ in range(6):
    ids = torch.randint(0, 100, (4, 16))
    labels = torch.randint(0, 2, (4,))
    optimizer.zero_grad()
    out = model(input_ids=ids, labels=labels)
    out.loss.backward()
    optimizer.step()
