"""Encoder-decoder nn.Transformer that learns to reverse token sequences.

Variable-length source sequences (right-padded), target = reversed source with
BOS/EOS. Teacher forcing with a causal decoder mask and key padding masks.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

PAD, BOS, EOS = 0, 1, 2
N_SYMBOLS = 10            # real tokens are 3 .. 3 + N_SYMBOLS - 1
VOCAB = 3 + N_SYMBOLS
MIN_LEN, MAX_LEN = 3, 8
D_MODEL = 64
N_HEAD = 4
N_LAYERS = 1
FF_DIM = 128
DROPOUT = 0.1
BATCH_SIZE = 64
LR = 3e-6
EPOCHS = 5
N_TRAIN = 2048
SEED = 0


def make_data(n, gen):
    src = torch.full((n, MAX_LEN), PAD, dtype=torch.long)
    tgt = torch.full((n, MAX_LEN + 2), PAD, dtype=torch.long)
    lengths = torch.randint(MIN_LEN, MAX_LEN + 1, (n,), generator=gen)
    for i in range(n):
        L = int(lengths[i])
        seq = torch.randint(3, VOCAB, (L,), generator=gen)
        src[i, :L] = seq
        tgt[i, 0] = BOS
        tgt[i, 1:L + 1] = seq.flip(0)
        tgt[i, L + 1] = EOS
    return src, tgt


class Seq2SeqTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.src_tok = nn.Embedding(VOCAB, D_MODEL, padding_idx=PAD)
        self.tgt_tok = nn.Embedding(VOCAB, D_MODEL, padding_idx=PAD)
        self.src_pos = nn.Embedding(MAX_LEN + 2, D_MODEL)
        self.tgt_pos = nn.Embedding(MAX_LEN + 2, D_MODEL)
        self.transformer = nn.Transformer(
            d_model=D_MODEL, nhead=N_HEAD, num_encoder_layers=N_LAYERS, num_decoder_layers=N_LAYERS,
            dim_feedforward=FF_DIM, dropout=DROPOUT, batch_first=True,
        )
        self.generator = nn.Linear(D_MODEL, VOCAB)

    def embed(self, tokens, tok, pos):
        positions = torch.arange(tokens.size(1), device=tokens.device).unsqueeze(0)
        return tok(tokens) + pos(positions)

    def encode(self, src):
        src_pad = src == PAD
        memory = self.transformer.encoder(self.embed(src, self.src_tok, self.src_pos), src_key_padding_mask=src_pad)
        return memory, src_pad

    def decode(self, tgt_in, memory, src_pad):
        tgt_pad = tgt_in == PAD
        tgt_mask = nn.Transformer.generate_square_subsequent_mask(tgt_in.size(1)).bool()
        out = self.transformer.decoder(
            self.embed(tgt_in, self.tgt_tok, self.tgt_pos), memory,
            tgt_mask=tgt_mask, tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad, tgt_is_causal=True,
        )
        return self.generator(out)

    def forward(self, src, tgt_in):
        memory, src_pad = self.encode(src)
        return self.decode(tgt_in, memory, src_pad)


def fmt(xs):
    v = sum(xs) / len(xs)
    return "nan" if not math.isfinite(v) else f"{v:.4f}"


def main():
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    src, tgt = make_data(N_TRAIN, gen)
    loader = DataLoader(TensorDataset(src, tgt), batch_size=BATCH_SIZE, shuffle=True, drop_last=True)

    model = Seq2SeqTransformer()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR, betas=(0.9, 0.98))

    losses = []
    for epoch in range(EPOCHS):
        model.train()
        for src_b, tgt_b in loader:
            tgt_in, tgt_out = tgt_b[:, :-1], tgt_b[:, 1:]
            logits = model(src_b, tgt_in)
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), tgt_out.reshape(-1), ignore_index=PAD)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            losses.append(loss.item())
        print(f"epoch {epoch} loss {losses[-1]:.4f}")

    print(f"initial loss {fmt(losses[:5])} final loss {fmt(losses[-5:])} steps {len(losses)}")


if __name__ == "__main__":
    main()
