"""Tiny BERT sequence classifier from a config (Hugging Face transformers).

Family: transformer encoder, BertForSequenceClassification from a BertConfig
(2 layers, hidden 32, 2 heads), padded variable-length inputs with an
attention_mask, the model's own CrossEntropy loss (`labels=`), AdamW,
LinearLR decay stepped every batch.
Style: Hugging Face model from a config (never from_pretrained), a list of
token-id "sentences", a DataLoader with a padding `collate` function that
builds input_ids and attention_mask, a `main()`.
"""
import torch
from torch.utils.data import DataLoader
from transformers import BertConfig, BertForSequenceClassification

PAD, CLS, SEP, VOCAB, N_LABELS = 0, 1, 2, 40, 3


def make_sentences(n, seed=0):
    """Each sentence carries one 'topic word' (ids 3..5) somewhere; the topic is its label."""
    g = torch.Generator().manual_seed(seed)
    data = []
    for _ in range(n):
        length = int(torch.randint(8, 14, (1,), generator=g))
        label = int(torch.randint(0, N_LABELS, (1,), generator=g))
        words = torch.randint(6, VOCAB, (length,), generator=g)
        words[int(torch.randint(0, length, (1,), generator=g))] = 3 + label
        data.append(([CLS] + words.tolist() + [SEP], label))
    return data


def collate(batch, max_len=16):
    input_ids = torch.full((len(batch), max_len), PAD)
    for i, (ids, _) in enumerate(batch):
        input_ids[i, :len(ids)] = torch.tensor(ids)
    attention_mask = (input_ids != PAD).long()  # zoo: mask kind=padding var=attention_mask
    labels = torch.tensor([label for _, label in batch])  # zoo: targets var=labels kind=class batch=1
    return input_ids, attention_mask, labels


def main():
    torch.manual_seed(0)
    loader = DataLoader(make_sentences(480), batch_size=32, shuffle=True, collate_fn=collate)
    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=16, num_labels=N_LABELS,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = BertForSequenceClassification(config)  # zoo: model var=model attn=bert.encoder.layer.0.attention.self,bert.encoder.layer.1.attention.self hf=bert | layer name=classifier head=1 missing=1 new="torch.nn.Linear(config.hidden_size, config.num_labels)" | layer name=bert.embeddings first=1 frozen=1 | layer name=bert.encoder.layer.1 missing=1 | layer name=bert.encoder.layer.0 frozen=1
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)  # zoo: optimizer var=optimizer kind=adamw | lr value=2e-3
    epochs = 8
    scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=1.0, end_factor=0.1, total_iters=epochs * len(loader))  # zoo: sched var=scheduler per=batch
    model.train()  # zoo: train_mode
    for epoch in range(epochs):  # zoo: loop
        for input_ids, attention_mask, labels in loader:
            outputs = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)  # zoo: forward ids=1
            loss = outputs.loss  # zoo: loss kind=ce_hf
            loss.backward()  # zoo: backward
            optimizer.step()  # zoo: step per=batch
            scheduler.step()  # zoo: sched_step per=batch
            optimizer.zero_grad()  # zoo: zero_grad
        print(f"epoch {epoch}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
