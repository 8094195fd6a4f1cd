"""Tiny GPT-2 language model from a config (Hugging Face transformers).

Family: decoder-only transformer, GPT2LMHeadModel built from a GPT2Config
(2 layers, 32-wide, 2 heads, tied embeddings), the model's own shifted LM loss
(`labels=input_ids`), AdamW, a linear-warmup LambdaLR stepped every batch.
Style: Hugging Face model from a config (never from_pretrained), a `main()`,
synthetic "copy" sequences: random tokens whose second half repeats the first.
"""
import torch
from transformers import GPT2Config, GPT2LMHeadModel


def copy_batch(g, batch, half, vocab):
    first = torch.randint(2, vocab, (batch, half), generator=g)
    return torch.cat([first, first], dim=1)


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    steps, warmup, batch, half, vocab = 180, 5, 16, 6, 16
    config = GPT2Config(
        vocab_size=vocab, n_positions=2 * half, n_embd=32, n_layer=2, n_head=2,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,  # zoo: dropout modules=transformer.drop,transformer.h.0.attn.attn_dropout,transformer.h.0.attn.resid_dropout,transformer.h.0.mlp.dropout,transformer.h.1.attn.attn_dropout,transformer.h.1.attn.resid_dropout,transformer.h.1.mlp.dropout config=1
    )
    model = GPT2LMHeadModel(config)  # zoo: model var=model attn=transformer.h.0.attn,transformer.h.1.attn q=transformer.h.0.attn.c_attn,transformer.h.1.attn.c_attn hf=gpt2 n_embd=32 | layer name=transformer.h.0.mlp.c_fc init=1 | layer name=transformer.h.1.mlp.c_proj init=1 | layer name=lm_head head=1
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3, weight_decay=0.0)  # zoo: optimizer var=optimizer kind=adamw | lr value=5e-3
    schedule = lambda s: min(1.0, (s + 1) / warmup)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)  # zoo: sched var=scheduler per=batch

    model.train()  # zoo: train_mode
    for step in range(steps):  # zoo: loop
        input_ids = copy_batch(g, batch, half, vocab)  # zoo: batch x=input_ids
        out = model(input_ids=input_ids, labels=input_ids)  # zoo: forward
        loss = out.loss  # zoo: loss kind=lm
        loss.backward()  # zoo: backward
        optimizer.step()  # zoo: step per=batch
        scheduler.step()  # zoo: sched_step per=batch
        optimizer.zero_grad()  # zoo: zero_grad
        if step % 20 == 0:
            print(f"step {step:3d} loss {loss.item():.3f} lr {scheduler.get_last_lr()[0]:.2e}")


if __name__ == "__main__":
    main()
