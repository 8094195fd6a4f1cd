"""A Hugging Face Trainer fine-tuning a tiny BERT from its config (no download).

    python hf_trainer.py [--gas N] [--max-grad-norm X] [--bf16] [--nan-at STEP] [--callback STORE] [--steps N]
"""
import argparse

import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback, TrainingArguments

ap = argparse.ArgumentParser()
ap.add_argument("--gas", type=int, default=1)
ap.add_argument("--max-grad-norm", type=float, default=1.0)
ap.add_argument("--bf16", action="store_true")
ap.add_argument("--nan-at", type=int, default=-1)
ap.add_argument("--callback")
ap.add_argument("--steps", type=int, default=12)
ap.add_argument("--out", default="hf-out")
args = ap.parse_args()

torch.manual_seed(0)


class Parity(Dataset):
    def __init__(self, n=512):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randint(0, 100, (n, 16), generator=g)
        self.y = self.x[:, 0] % 2

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.y[i]}


config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, num_labels=2)
model = BertForSequenceClassification(config)


class BreakAWeight(TrainerCallback):
    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step == arguments.nan_at:
            with torch.no_grad():
                model.bert.encoder.layer[0].attention.self.query.weight[0, 0] = float("nan")


arguments = args
callbacks = [BreakAWeight()]
if args.callback:
    from gradsight.integrations.hf import GradsightCallback

    callbacks.append(GradsightCallback(args.callback))
training = TrainingArguments(output_dir=args.out, per_device_train_batch_size=8, gradient_accumulation_steps=args.gas, max_steps=args.steps,
                             learning_rate=1e-3, logging_steps=1, report_to=[], save_strategy="no", use_cpu=True, bf16=args.bf16,
                             max_grad_norm=args.max_grad_norm, disable_tqdm=True, dataloader_num_workers=0)
trainer = Trainer(model=model, args=training, train_dataset=Parity(), callbacks=callbacks)
trainer.train()
print("global_step", trainer.state.global_step)
