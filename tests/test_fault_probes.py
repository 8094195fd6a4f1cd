"""Fault probes written apart from the zoo and the rules (benchmarks/fault_probes), traced and diagnosed for real:
one per way of failing that the probes taught the diagnosis, so that each mechanism stays. The whole set is
measured by ``benchmarks/fault_probes/run.py``."""

from __future__ import annotations

import importlib.util
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from .conftest import ROOT

_spec = importlib.util.spec_from_file_location("fault_probes_run", ROOT / "benchmarks" / "fault_probes" / "run.py")
assert _spec is not None and _spec.loader is not None
probes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(probes)

CASES = {
    "set_a/b01_cnn": "healthy: 80% of a hidden layer's units dead while the loss falls steadily",
    "set_a/h05_bce_sum": "bait: a summed loss under AdamW, whose steps do not scale with the gradient",
    "set_a/f20_weight_decay": "AdamW decay with a half-life shorter than the run",
    "set_a/f02_shuffled_images": "labels with no signal: the units die after the loss was already stuck",
    "set_b/f01_lstm_adam_lr": "Adam at lr 1: the loss ends far above where it began",
    "set_b/f08_tf_mask_inverted": "an inverted src_key_padding_mask: every query sees only the padding",
    "set_h/f03_attention_scale_inverted": "scores multiplied by sqrt(d): every attention layer ends on single keys while the loss falls",
    "set_j/b01_bert_tagging": "healthy: a BERT tagger whose sharpest heads end near one key (its other layers stay broad)",
    "set_a/f12_nan_rows": "NaN rows in the data: non-finite gradients are not missing ones",
    "set_g/b03_distill": "healthy: a teacher trained, then its student: the last phase is diagnosed, no LR jump between them",
    "set_g/b02_tcn_forecast": "healthy: raw inputs standardised inside the model's forward",
    "set_f/b03_bert": "healthy: a BERT whose gradients are tiny once its loss is near 0",
    "set_f/f07_vit_head_only_optimizer": "the optimizer built over the head only",
    "set_f/f05_vit_label_smoothing": "label_smoothing 0.9: the targets are nearly uniform",
    "set_f/f12_unet_sum_loss": "a per-pixel cross-entropy summed, under SGD",
    "set_h/f02_schedule_horizon_one_epoch": "a cosine schedule whose horizon is one epoch of the run",
    "set_h/f10_clip_norm_too_small": "clipping that cuts every SGD step 10x",
    "set_h/f14_labels_not_shuffled": "nodes reordered but not their labels: the loss stays near ln(C)",
    "set_i/f02_accum_never_steps": "accumulation over more micro-batches than an epoch holds: the optimizer never steps",
    "set_i/f06_loss_summed": "per-row cross-entropy terms summed by the script, under SGD",
    "set_i/f11_raw_coordinates": "a diffusion model given raw coordinates: its first layer embeds the timestep, not the input",
    "set_j/f02_bert_mask_inverted": "a Hugging Face BERT given an inverted attention_mask (it keeps the padding)",
    "set_j/f08_t5_lr_low": "a from-scratch T5 at a fine-tuning rate: near chance with steps a tenth of a healthy size",
    "set_j/f17_clip_class_targets": "a contrastive loss given class ids as targets instead of each row's pair",
    "set_k/f12_adam_weight_decay": "Adam's coupled decay as large as the gradient under a Gaussian NLL (no zero to measure progress from)",
    "set_k/f18_label_smoothing_09": "multi-label BCE targets smoothed to 0.45/0.55",
    "set_j/f04_bert_encoder_frozen": "a BERT built from a config and frozen as if pretrained: its random weights never train",
    "set_m/h05_ft_frozen_categories": "healthy: frozen random category embeddings (2% of the model) while the loss falls 58%",
    "set_n/f12_mlm_dropout": "a RoBERTa MLM with dropout 0.6 on every layer: its loss falls half as far",
    "set_p/h07_densenet_pixel_range": "healthy: 0-255 pixels into a stem conv whose output goes straight into BatchNorm",
    "set_p/f01_siamese_lr": "SGD at a hundredth of its rate: the loss falls to the end, 16% of its start, in tiny steps",
    "set_r/f18_pois_shuffle": "rows shuffled apart from their counts under RMSprop at 2e-3: large update ratios of small weights are no high rate",
    "set_r/f26_siren_frozen_out": "the output layer frozen at its init while the layers before it train (0.1% of the model)",
    "set_r/f10_pois_raw_features": "raw features: the Poisson loss overflows on finite outputs at step 0, the input's scale made them",
    "set_s/h05_ae_sparse_strokes": "healthy: an autoencoder of sparse strokes whose sigmoid saturates on the background while the loss falls 96%",
    "set_s/h01_wrn_raw_pixels": "healthy: 0-255 pixels into a stem conv whose output goes into GroupNorm",
    "set_u/f14_ncf_relu_output": "a ReLU on the logit: every gradient is zero from the forward, not lost by the loop",
    "set_s/f18_ae_scheduler_not_stepped": "a warmup whose scheduler is never stepped: the rate stays 0",
    "set_t/f06_gru_frozen_gru": "a from-scratch GRU frozen (74% of the model): named although the loss falls 82% on its random features",
    "set_p/f21_densenet_layer_list": "each dense block keeps its layers in a plain list: named at the blocks, not the model",
    "set_t/f25_lstm_zip_loaders": "inputs and targets in two loaders shuffled apart and zipped: the loss still falls 76%, the script shows it",
    "set_o/f12_gat_labels_shuffled": "node labels shuffled again after the graph and features were made from them",
    "set_t/f20_lstm_targets_kw": "targets in kW beside outputs near 0: the mismatch, not the exploding gradients it causes",
    "set_u/f24_dyn_weight_decay": "Adam with a coupled decay of 0.1: most weights shrink to an eighth while the loss still falls 94%",
    "set_l/h06_sr_weight_decay": "healthy: Adam with a coupled decay of 0.01 that halves most weights while the loss falls 70%",
    "set_x/h03_rank_zero_head": "healthy: a zero-initialised head blocks every gradient on the first step only",
    "set_u/f08_set_attn_dropout": "nn.MultiheadAttention(dropout=0.9): the attention's own dropout, read from its config",
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    entries = [e for e in probes.entries([], "") if e["id"] in CASES]
    assert {e["id"] for e in entries} == set(CASES)
    keep: Path = tmp_path_factory.mktemp("probes")
    with ThreadPoolExecutor(2) as pool:
        return {r["id"]: r for r in pool.map(lambda e: probes.trace_one(e, keep), entries)}


@pytest.mark.parametrize("probe", sorted(CASES))
def test_probe_is_diagnosed_right(runs: dict[str, dict[str, Any]], probe: str) -> None:
    r = runs[probe]
    v = r["verdict"]
    assert v.right, f"{probe} ({CASES[probe]}): expected {r['expected'] or 'healthy'}, got {v.got} {v.reason}"
