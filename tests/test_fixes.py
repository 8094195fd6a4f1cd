"""Fixes (issue 16): offered only with their evidence, placed as valid code in every way a model is written,
and validated by a real re-run. Every run here is a real traced training run."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from gradsight.analysis.data import load
from gradsight.analysis.diagnose import analyse_run
from gradsight.fixes import library, suggest
from gradsight.fixes.edits import Edit, NoPlace, apply, check
from gradsight.fixes.evidence import PREMISES, Context, Target
from gradsight.fixes.placers import module_ref
from gradsight.script import Script
from gradsight.thresholds import Thresholds

from .conftest import run_gradsight

# premises any training script satisfies: a fix needing only these answers the diagnosis's finding itself
GENERIC = {"has_optimizer", "has_loop", "has_model", "has_scheduler", "no_scheduler", "forward_in_loop", "module_addressable",
           "module_resettable", "no_clipping", "lr_settable", "lr_not_decayed"}
# fixes whose evidence is the finding at the module (a norm that explodes, a step never taken)
FINDING_IS_EVIDENCE = {"clip-grad-norm", "lr-warmup", "call-optimizer-step", "lower-lr"}

HEALTHY = """
import torch
import torch.nn as nn

torch.manual_seed(0)
X = torch.randn(256, 8)
Y = (X[:, :4].sum(1) > 0).long()
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()
for epoch in range(6):
    for i in range(0, 256, 32):
        xb, yb = X[i:i + 32], Y[i:i + 32]
        opt.zero_grad()
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
print("final", float(loss))
"""

UNCAPPED_WARMUP = """
import torch
import torch.nn as nn

torch.manual_seed(0)
X = torch.randn(512, 8)
Y = X @ torch.randn(8, 1)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: step + 1.0)
for epoch in range(10):
    for i in range(0, 512, 32):
        xb, yb = X[i:i + 32], Y[i:i + 32]
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(xb), yb)
        loss.backward()
        opt.step()
        sched.step()
"""


def trace(tmp: Path, name: str, source: str) -> tuple[Path, Path]:
    script = tmp / f"{name}.py"
    script.write_text(textwrap.dedent(source))
    store = tmp / f"{name}.db"
    proc = run_gradsight("trace", str(script), "--output", str(store), "--quiet", cwd=tmp)
    assert store.exists(), proc.stderr
    return script, store


def fixes_of(script: Path, store: Path) -> list[dict[str, Any]]:
    data = load(str(store))
    findings, cause = analyse_run(data, Thresholds())
    return suggest(cause, findings, data, str(script), limit=0)


def runs(script: Path, edits: list[dict[str, Any]], tmp: Path) -> subprocess.CompletedProcess[str]:
    """The script with the fix applied, run plainly: it must still run."""
    patched = apply(script.read_text(), [Edit(**e) for e in edits])
    out = tmp / f"patched_{script.name}"
    out.write_text(patched)
    return subprocess.run([sys.executable, str(out)], capture_output=True, text=True, timeout=300, cwd=tmp)


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return trace(tmp_path_factory.mktemp("healthy"), "healthy", HEALTHY)


def test_library_is_large_and_every_fix_has_a_rule() -> None:
    fixes = library()
    assert len(fixes) >= 60 and len({f.id for f in fixes}) == len(fixes)
    for f in fixes:
        assert all(n in PREMISES for n in f.needs), f.id
        assert set(f.needs) - GENERIC or f.id in FINDING_IS_EVIDENCE, f"{f.id} needs no evidence of its own: {f.needs}"
        assert f.explanation and f.effect and f.validation, f.id


@pytest.mark.parametrize("fix_id", [f.id for f in library() if f.id not in FINDING_IS_EVIDENCE])
def test_no_fix_without_its_evidence(healthy: tuple[Path, Path], fix_id: str) -> None:
    """On a healthy run (constant LR, no sigmoid, no scheduler, weight decay 0, nothing frozen or detached, ...)
    a fix whose premise is false is never offered, whatever finding is claimed for it."""
    script, store = healthy
    data = load(str(store))
    s = Script(script.read_text(), str(script))
    fix = next(f for f in library() if f.id == fix_id)
    module = fix.modules[0] if fix.modules else "2"
    from gradsight.fixes import holds

    failing = holds(fix, Context(Target(fix.kinds[0], module), data, s))
    assert failing, f"{fix_id} would be offered on a healthy run (premises {fix.needs} all hold)"


@pytest.mark.parametrize("claim,fix_id", [
    ("learning_rate_too_high", "undo-lr-jump"),  # the rate is constant: no jump to undo
    ("vanishing_gradient", "relu-instead-of-sigmoid"),  # there is no sigmoid
    ("dead_units", "leaky-relu"),  # on a layer with no ReLU after it ("0" feeds one, "2" does not)
    ("learning_rate_too_low", "raise-lr"),  # the updates are not small
    ("weight_decay_too_high", "nonnegative-weight-decay"),  # weight decay is 0
])
def test_the_issues_wrong_fixes_are_not_offered(healthy: tuple[Path, Path], claim: str, fix_id: str) -> None:
    script, store = healthy
    data = load(str(store))
    s = Script(script.read_text(), str(script))
    from gradsight.fixes import holds

    fix = next(f for f in library() if f.id == fix_id)
    assert holds(fix, Context(Target(claim, fix.modules[0] if fix.modules else "2"), data, s))


RESCALED = HEALTHY.replace("opt = torch.optim", "with torch.no_grad():\n    model[2].weight.mul_(40.0)\nopt = torch.optim")


def test_a_reset_is_offered_only_for_layers_that_did_not_start_at_the_defaults(tmp_path: Path) -> None:
    """Re-initialising a layer with PyTorch's defaults changes nothing when it started at them: the premise reads
    each weight's norm at the first sampled step (the healthy run above never gets a reset: its layers are default)."""
    script, store = trace(tmp_path, "rescaled", RESCALED)
    data = load(str(store))
    s = Script(script.read_text(), str(script))
    fix = next(f for f in library() if f.id == "reset-layer-init")
    from gradsight.fixes import holds

    assert "starts_off_default" not in holds(fix, Context(Target("exploding_gradient", "2"), data, s))
    assert "starts_off_default" in holds(fix, Context(Target("exploding_gradient", "0"), data, s))
    block = next(f for f in library() if f.id == "reset-block-init")
    assert "starts_off_default" not in holds(block, Context(Target("exploding_gradient", ""), data, s))  # the model holds "2"


def test_generated_code_is_checked() -> None:
    src = "import torch\nmodel = Net()\nfor x in data:\n    loss = model(x)\n"
    bad = [Edit("t.py", 3, 3, "clip(net.parameters())\n")]  # 'net' is not defined
    assert "not defined" in (check(apply(src, bad), bad) or "")
    good = [Edit("t.py", 3, 3, "torch.manual_seed(0)\n")]
    assert check(apply(src, good), good) is None
    with pytest.raises(NoPlace):
        apply(src, [Edit("t.py", 2, 4, "x\n"), Edit("t.py", 3, 3, "y\n")])
    assert module_ref("model", "blocks.0.attn") == "model.blocks[0].attn"
    assert module_ref("model", "2.weight)\nimport os") == "model.get_submodule('2.weight)\\nimport os')"


PLACEMENT = {
    # a module-level nn.Sequential whose last layer is rescaled x50: the fix names it model[2]
    "sequential": ("""
        import torch
        import torch.nn as nn
        torch.manual_seed(0)
        X = torch.randn(512, 8)
        Y = (X[:, :4].sum(1) > 0).long()
        model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))
        with torch.no_grad():
            model[2].weight.mul_(300.0)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(8):
            for i in range(0, 512, 32):
                opt.zero_grad()
                loss = nn.functional.cross_entropy(model(X[i:i + 32]), Y[i:i + 32])
                loss.backward()
                opt.step()
        """, "model[2]"),
    # add_module after the optimizer was built: the new head is not in the optimizer
    "add_module": ("""
        import torch
        import torch.nn as nn
        torch.manual_seed(0)
        X = torch.randn(512, 8)
        Y = (X[:, :4].sum(1) > 0).long()
        net = nn.Sequential()
        net.add_module("body", nn.Linear(8, 32))
        net.add_module("act", nn.ReLU())
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        net.add_module("head", nn.Linear(32, 2))
        for epoch in range(6):
            for i in range(0, 512, 32):
                opt.zero_grad()
                loss = nn.functional.cross_entropy(net(X[i:i + 32]), Y[i:i + 32])
                loss.backward()
                opt.step()
        """, "add_param_group"),
    # an optimizer over the head only, with a OneCycleLR (which keeps state in every param group)
    "head_only_onecycle": ("""
        import torch
        import torch.nn as nn
        torch.manual_seed(0)
        X = torch.randn(512, 8)
        Y = (X[:, :4].sum(1) > 0).long()
        model = nn.Sequential()
        model.add_module("body", nn.Linear(8, 32))
        model.add_module("act", nn.ReLU())
        model.add_module("fc", nn.Linear(32, 2))
        with torch.no_grad():
            model.body.weight.mul_(0.01)
        opt = torch.optim.SGD(model.fc.parameters(), lr=0.05, momentum=0.9)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=8 * 16)
        for epoch in range(8):
            for i in range(0, 512, 32):
                opt.zero_grad()
                loss = nn.functional.cross_entropy(model(X[i:i + 32]), Y[i:i + 32])
                loss.backward()
                opt.step()
                sched.step()
        """, "model.parameters()"),
    # an own class whose forward cuts the graph after its first layer, trained from main()
    "own_class": ("""
        import torch
        import torch.nn as nn
        import torch.nn.functional as F

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc1 = nn.Linear(8, 32)
                self.fc2 = nn.Linear(32, 2)

            def forward(self, x):
                h = F.relu(self.fc1(x)).detach()
                return self.fc2(h)

        def main():
            torch.manual_seed(0)
            X = torch.randn(512, 8)
            Y = (X[:, :4].sum(1) > 0).long()
            model = Net()
            opt = torch.optim.Adam(model.parameters(), lr=1e-3)
            for epoch in range(6):
                for i in range(0, 512, 32):
                    opt.zero_grad()
                    loss = F.cross_entropy(model(X[i:i + 32]), Y[i:i + 32])
                    loss.backward()
                    opt.step()

        if __name__ == "__main__":
            main()
        """, "h = F.relu(self.fc1(x))\n"),
    # functional code: parameters in a dict, a forward function, a softmax fed to cross_entropy
    "functional": ("""
        import torch
        import torch.nn.functional as F
        torch.manual_seed(0)
        X = torch.randn(512, 8)
        Y = (X[:, :4].sum(1) > 0).long()
        params = torch.nn.ParameterDict({"w1": torch.nn.Parameter(torch.randn(32, 8) * 0.3), "b1": torch.nn.Parameter(torch.zeros(32)),
                                         "w2": torch.nn.Parameter(torch.randn(2, 32) * 0.3), "b2": torch.nn.Parameter(torch.zeros(2))})

        def forward(p, x):
            h = F.relu(F.linear(x, p["w1"], p["b1"]))
            return F.softmax(F.linear(h, p["w2"], p["b2"]), dim=1)

        opt = torch.optim.SGD(params.parameters(), lr=0.1)
        for epoch in range(8):
            for i in range(0, 512, 32):
                opt.zero_grad()
                loss = F.cross_entropy(forward(params, X[i:i + 32]), Y[i:i + 32])
                loss.backward()
                opt.step()
        """, "F.linear(h, p"),
}


@pytest.mark.parametrize("style", sorted(PLACEMENT))
def test_fix_placement_is_valid_code_for_every_way_a_model_is_written(tmp_path: Path, style: str) -> None:
    source, expect = PLACEMENT[style]
    script, store = trace(tmp_path, style, source)
    fixes = fixes_of(script, store)
    assert fixes, f"no fix for the {style} fault"
    top = fixes[0]
    assert all(Path(e["file"]) == script for e in top["edits"])
    patched = apply(script.read_text(), [Edit(**e) for e in top["edits"]])
    assert expect in patched and f"# gradsight fix '{top['id']}'" in patched, patched
    proc = runs(script, top["edits"], tmp_path)
    assert proc.returncode == 0, proc.stderr


HF = """
import torch
from transformers import BertConfig, BertForSequenceClassification

torch.manual_seed(0)
config = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                    max_position_embeddings=32, num_labels=2)
model = BertForSequenceClassification(config)
ids = torch.randint(1, 50, (128, 12))
labels = (ids[:, 0] > 25).long()
opt = torch.optim.AdamW(model.parameters(), lr=5e-4)
for p in model.bert.embeddings.parameters():
    p.requires_grad_(False)
for epoch in range(3):
    for i in range(0, 128, 16):
        out = model(input_ids=ids[i:i + 16], labels=labels[i:i + 16])
        out.loss.backward()
        opt.step()
        opt.zero_grad()
"""


def test_a_fix_for_a_module_inside_hugging_face_goes_into_the_users_script(tmp_path: Path) -> None:
    script, store = trace(tmp_path, "hf", HF)
    fixes = fixes_of(script, store)
    assert fixes
    for f in fixes:
        assert all(Path(e["file"]) == script for e in f["edits"]), f  # never site-packages
    assert runs(script, fixes[0]["edits"], tmp_path).returncode == 0


def test_validate_a_fix_that_works_and_one_that_does_not(tmp_path: Path) -> None:
    script, store = trace(tmp_path, "warmup", UNCAPPED_WARMUP)
    ids = [f["id"] for f in fixes_of(script, store)]
    assert ids and ids[0] == "cap-lambda-warmup", ids
    wrong = next(i for i in ids if i in ("reset-layer-init", "clip-grad-norm", "reset-block-init"))
    proc = run_gradsight("validate", str(store), "--fix", "cap-lambda-warmup", "--fix", wrong, "--json", "--jobs", "2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "validate: 2/2" in proc.stderr
    got = {o["fix"]: o for o in json.loads(proc.stdout)["fixes"]}
    assert got["cap-lambda-warmup"]["verdict"] == "validated", got
    assert got["cap-lambda-warmup"]["loss"] < got["cap-lambda-warmup"]["loss_before"]
    assert got[wrong]["verdict"] != "validated", got[wrong]
    # stored: diagnose lists the validated fix first, with its measured effect; the script was not touched
    d = json.loads(run_gradsight("diagnose", str(store), "--json", cwd=tmp_path).stdout)
    assert d["fixes"][0]["id"] == "cap-lambda-warmup" and d["fixes"][0]["validated"]["verdict"] == "validated"
    assert "loss" in d["fixes"][0]["validated"]["effect"]
    assert script.read_text() == textwrap.dedent(UNCAPPED_WARMUP)

TRAINER_SCHEDULER_PER_MICRO_BATCH = """
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
X = torch.randn(1024, 16)
Y = (X[:, :4].sum(1) > 0).long() + 2 * (X[:, 4:8].sum(1) > 0).long()


class Trainer:
    def __init__(self, model, optimizer, scheduler, accum=4):
        self.model, self.optimizer, self.scheduler, self.accum = model, optimizer, scheduler, accum

    def train_step(self, xb, yb):
        mb = xb.shape[0] // self.accum
        total = 0.0
        for k in range(self.accum):
            loss = F.cross_entropy(self.model(xb[k * mb:(k + 1) * mb]), yb[k * mb:(k + 1) * mb]) / self.accum
            loss.backward()
            self.scheduler.step()
            total += loss.item()
        self.optimizer.step()
        self.optimizer.zero_grad()
        return total

    def fit(self, steps):
        for step in range(steps):
            i = (step * 64) % 1024
            loss = self.train_step(X[i:i + 64], Y[i:i + 64])
        print("final", loss)


model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.98)
Trainer(model, optimizer, scheduler).fit(200)
"""

OPTIMIZER_OVER_TEACHER = """
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
X = torch.randn(1024, 16)
Y = (X[:, :4].sum(1) > 0).long() + 2 * (X[:, 4:8].sum(1) > 0).long()


def make_net(width):
    return nn.Sequential(nn.Linear(16, width), nn.ReLU(), nn.Linear(width, 4))


teacher = make_net(128)
opt = torch.optim.Adam(teacher.parameters(), lr=1e-2)
for step in range(100):
    i = (step * 64) % 1024
    opt.zero_grad()
    F.cross_entropy(teacher(X[i:i + 64]), Y[i:i + 64]).backward()
    opt.step()
teacher.requires_grad_(False)

student = make_net(32)
optimizer = torch.optim.SGD(teacher.parameters(), lr=0.05, momentum=0.9)
for step in range(150):
    i = (step * 64) % 1024
    xb, yb = X[i:i + 64], Y[i:i + 64]
    with torch.no_grad():
        soft = F.softmax(teacher(xb) / 2.0, dim=1)
    out = student(xb)
    loss = F.kl_div(F.log_softmax(out / 2.0, dim=1), soft, reduction="batchmean") + F.cross_entropy(out, yb)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print("final", float(loss))
"""

SCHEDULE_OF_ONE_EPOCH = """
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
X = torch.randn(1024, 16)
Y = (X[:, :4].sum(1) > 0).long() + 2 * (X[:, 4:8].sum(1) > 0).long()
EPOCHS, BATCH = 6, 32
steps_per_epoch = len(X) // BATCH
total_steps = steps_per_epoch
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.01, 0.5 * (1 + math.cos(math.pi * min(1.0, s / total_steps)))))
for epoch in range(EPOCHS):
    for i in range(steps_per_epoch):
        xb, yb = X[i * BATCH:(i + 1) * BATCH], Y[i * BATCH:(i + 1) * BATCH]
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
print("final", loss.item())
"""


LABELS_SMOOTHED_AWAY = """
import torch
import torch.nn as nn

torch.manual_seed(0)
X = torch.randn(1024, 16)
Y = (X[:, :4].sum(1) > 0).long() + 2 * (X[:, 4:8].sum(1) > 0).long()
SMOOTHING = 0.9
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
criterion = nn.CrossEntropyLoss(label_smoothing=SMOOTHING)
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for step in range(200):
    i = (step * 64) % 1024
    loss = criterion(model(X[i:i + 64]), Y[i:i + 64])
    opt.zero_grad()
    loss.backward()
    opt.step()
print("final", loss.item())
"""

TWO_HEADS_ONE_SOFTMAXED = """
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
X = torch.randn(1024, 16)
Y = (X[:, :4].sum(1) > 0).long() + 2 * (X[:, 4:8].sum(1) > 0).long()


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(16, 64), nn.ReLU())
        self.aux = nn.Linear(64, 1)
        self.cls = nn.Linear(64, 4)

    def forward(self, x):
        h = self.trunk(x)
        return self.aux(h), self.cls(h).softmax(dim=1)


model = TwoHeads()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for step in range(200):
    i = (step * 64) % 1024
    aux, probs = model(X[i:i + 64])
    loss = F.cross_entropy(probs, Y[i:i + 64]) + 0.1 * aux.pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("final", loss.item())
"""

ENCODER_SOFTMAX_HEAD = """
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
X = torch.randn(1024, 6, 8)
Y = (X[:, :, 0].sum(1) > 0).long() + 2 * (X[:, :, 1].sum(1) > 0).long()


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 32)
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True), 2)
        self.head = nn.Sequential(nn.LayerNorm(32), nn.Linear(32, 4), nn.Softmax(dim=-1))

    def forward(self, x):
        return self.head(self.encoder(self.inp(x)).mean(1))


model = Encoder()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for step in range(200):
    i = (step * 64) % 1024
    loss = F.cross_entropy(model(X[i:i + 64]), Y[i:i + 64])
    opt.zero_grad()
    loss.backward()
    opt.step()
print("final", loss.item())
"""

NAN_IN_TRAIN_AND_VALIDATION = """
import torch
import torch.nn as nn

torch.manual_seed(0)
X = torch.randn(1280, 8)
Y = X[:, :2].sum(1, keepdim=True)
X[torch.rand(1280) < 0.02, 3] = float("nan")  # missing readings, left as NaN
x_tr, y_tr, x_val, y_val = X[:1024], Y[:1024], X[1024:], Y[1024:]
model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
criterion = nn.MSELoss()
for step in range(150):
    i = (step * 64) % 1024
    pred = model(x_tr[i:i + 64])
    loss = criterion(pred, y_tr[i:i + 64])
    opt.zero_grad()
    loss.backward()
    opt.step()
    if (step + 1) % 50 == 0:
        with torch.no_grad():
            print("val", criterion(model(x_val), y_val).item())
print("final", loss.item())
"""

PREPROCESS_WITHOUT_255 = """
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
images = torch.randint(0, 256, (1280, 1, 8, 8), dtype=torch.uint8)
labels = (images[:, 0, :4].float().mean((1, 2)) > images[:, 0, 4:].float().mean((1, 2))).long()


def preprocess(img):
    x = img.float()
    return (x - 0.5) / 0.25  # the / 255 is missing


model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 64, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for step in range(150):
    i = (step * 64) % 1024
    loss = F.cross_entropy(model(preprocess(images[i:i + 64])), labels[i:i + 64])
    opt.zero_grad()
    loss.backward()
    opt.step()
with torch.no_grad():
    acc = (model(preprocess(images[1024:])).argmax(1) == labels[1024:]).float().mean()
print("final", loss.item(), "accuracy", acc.item())
"""

NAN_IN_AUTOENCODER_DATA = """
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
data = torch.randn(2048, 16)
data[1500, 10] = float("nan")  # one missing value
model = nn.Sequential(nn.Linear(16, 8), nn.Tanh(), nn.Linear(8, 16))
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for step in range(150):
    idx = torch.randint(0, data.shape[0], (128,))
    x = data[idx]
    loss = F.mse_loss(model(x), x)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("final", loss.item())
"""

LABELS_BY_A_RUNNING_SLICE = """
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
X = torch.randn(1024, 16)
Y = (X[:, :4].sum(1) > 0).long() + 2 * (X[:, 4:8].sum(1) > 0).long()
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for epoch in range(3):
    perm = torch.randperm(len(X))
    for i in range(0, len(X), 32):
        idx = perm[i:i + 32]
        xb, yb = X[idx], Y[i:i + 32]
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
print("final", loss.item())
"""

LOG_SOFTMAX_OVER_THE_BATCH = """
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
X = torch.randn(1024, 16)
Y = (X[:, :4].sum(1) > 0).long() + 2 * (X[:, 4:8].sum(1) > 0).long()
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for step in range(150):
    i = (step * 64) % 1024
    loss = F.nll_loss(F.log_softmax(model(X[i:i + 64]), dim=0), Y[i:i + 64])
    opt.zero_grad()
    loss.backward()
    opt.step()
print("final", loss.item())
"""

ENCODER_UNDER_NO_GRAD = """
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
X = torch.randn(1024, 16)
Y = (X[:, :4].sum(1) > 0).long() + 2 * (X[:, 4:8].sum(1) > 0).long()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
        self.head = nn.Linear(64, 4)

    @torch.no_grad()
    def encode(self, x):
        return self.encoder(x)

    def forward(self, x):
        return self.head(self.encode(x))


model = Net()
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for step in range(150):
    i = (step * 64) % 1024
    loss = F.cross_entropy(model(X[i:i + 64]), Y[i:i + 64])
    opt.zero_grad()
    loss.backward()
    opt.step()
print("final", loss.item())
"""

ZERO_GRAD_ONCE_AN_EPOCH = """
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
X = torch.randn(1024, 16)
Y = (X[:, :4].sum(1) > 0).long() + 2 * (X[:, 4:8].sum(1) > 0).long()


def build_optimizer(net, lr):
    decay = [p for n, p in net.named_parameters() if n.endswith("weight")]
    rest = [p for n, p in net.named_parameters() if not n.endswith("weight")]
    return torch.optim.SGD([{"params": decay, "weight_decay": 1e-4}, {"params": rest}], lr=lr, momentum=0.9)


model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
optimizer = build_optimizer(model, 0.05)
for epoch in range(5):
    optimizer.zero_grad()
    for i in range(0, 1024, 32):
        loss = F.cross_entropy(model(X[i:i + 32]), Y[i:i + 32])
        loss.backward()
        optimizer.step()
print("final", loss.item())
"""

WARMUP_NEVER_STEPPED = """
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
X = torch.randn(1024, 16)
Y = (X[:, :4].sum(1) > 0).long() + 2 * (X[:, 4:8].sum(1) > 0).long()
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, s / 20))
for step in range(150):
    i = (step * 64) % 1024
    loss = F.cross_entropy(model(X[i:i + 64]), Y[i:i + 64])
    opt.zero_grad()
    loss.backward()
    opt.step()
print("final", loss.item())
"""

MODEL_BUILT_AGAIN_AFTER_ITS_SCHEDULE = """
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
X = torch.randn(1024, 16)
Y = X[:, :4].sum(1, keepdim=True)
model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 1))
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=100, gamma=0.5)
model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 1))
for step in range(150):
    i = (step * 64) % 1024
    loss = F.mse_loss(model(X[i:i + 64]), Y[i:i + 64])
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
print("final", loss.item())
"""

SIGMOID_MODULE_ON_A_REGRESSION = """
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
X = torch.randn(1024, 16)
Y = torch.tanh(X[:, :4].sum(1, keepdim=True)) * 2


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
        self.sigmoid = nn.Sigmoid()

    def forward(self, x):
        return self.sigmoid(self.body(x))


model = Net()
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for step in range(150):
    i = (step * 64) % 1024
    loss = F.l1_loss(model(X[i:i + 64]), Y[i:i + 64])
    opt.zero_grad()
    loss.backward()
    opt.step()
print("final", loss.item())
"""

@pytest.mark.parametrize("name,source,fix_id", [
    # a warmup whose scheduler is never stepped: the rate stays at its first factor, 0
    ("warmup_never_stepped", WARMUP_NEVER_STEPPED, "call-scheduler-step"),
    # the model built again after its optimizer and the scheduler on it: both move after the rebuild
    ("rebuilt_with_schedule", MODEL_BUILT_AGAIN_AFTER_ITS_SCHEDULE, "rebuild-optimizer-after-model"),
    # a regression whose forward returns self.sigmoid(...): the module becomes Identity, the call stays
    ("sigmoid_module", SIGMOID_MODULE_ON_A_REGRESSION, "remove-output-sigmoid-for-regression"),
    # nll_loss given log_softmax over the batch's rows (dim=0): normalised over each row's classes instead
    ("softmax_dim", LOG_SOFTMAX_OVER_THE_BATCH, "softmax-over-classes"),
    # the encoder run by a method decorated @torch.no_grad(): the decorator is removed
    ("no_grad_method", ENCODER_UNDER_NO_GRAD, "remove-no-grad"),
    # zero_grad once an epoch, with the optimizer made by the script's own factory function
    ("zero_grad_epoch", ZERO_GRAD_ONCE_AN_EPOCH, "zero-grad-each-step"),
    # a batch's inputs taken by the shuffled index and its labels by the loop's running slice: the labels are
    # taken by the same index
    ("labels_by_slice", LABELS_BY_A_RUNNING_SLICE, "pair-labels-with-inputs"),
    # a Trainer class with accumulation: the loop over micro-batches is not the training loop, and its
    # self.scheduler.step() there runs the schedule four times too fast
    ("trainer", TRAINER_SCHEDULER_PER_MICRO_BATCH, "step-scheduler-per-optimizer-step"),
    # a student's optimizer built over its frozen teacher: the no_grad around the teacher is not the fault
    ("distill", OPTIMIZER_OVER_TEACHER, "optimizer-over-trained-model"),
    # a cosine whose horizon is one epoch's steps, read by a LambdaLR's function
    ("horizon", SCHEDULE_OF_ONE_EPOCH, "stretch-schedule"),
    # label_smoothing=0.9 through a module constant: the constant is set to 0.1
    ("smoothing", LABELS_SMOOTHED_AWAY, "typical-label-smoothing"),
    # a forward that returns two outputs, the classifier's through .softmax(): that one loses its softmax
    ("two_heads", TWO_HEADS_ONE_SOFTMAXED, "remove-softmax-before-ce"),
    # nn.Softmax last in the head of a TransformerEncoder, whose attention out_proj is never called as a module
    # (its weight is used functionally) and so comes last in the forward order: still the head's softmax is found
    ("encoder_softmax", ENCODER_SOFTMAX_HEAD, "remove-softmax-before-ce"),
    # NaN readings in the training and the validation data: both calls of the model get finite inputs
    ("nan_readings", NAN_IN_TRAIN_AND_VALIDATION, "nan-to-num-input"),
    # the script's preprocess() forgets the / 255: its result is standardised, for training and evaluation alike
    ("preprocess", PREPROCESS_WITHOUT_255, "standardize-input"),
    # a NaN in an autoencoder's data, which is its target too: the batch is made finite where it is taken
    ("nan_reconstruction", NAN_IN_AUTOENCODER_DATA, "nan-to-num-input"),
])
def test_the_first_fix_answers_the_mechanism_and_a_rerun_validates_it(tmp_path: Path, name: str, source: str, fix_id: str) -> None:
    script, store = trace(tmp_path, name, source)
    fixes = fixes_of(script, store)
    assert fixes and fixes[0]["id"] == fix_id, [f["id"] for f in fixes]
    proc = run_gradsight("validate", str(store), "--fix", fix_id, "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)["fixes"][0]
    # (a faulty run whose loss was non-finite at that step has no loss_before: the fixed one's is finite)
    assert got["verdict"] == "validated" and got["loss"] < (got["loss_before"] if got["loss_before"] is not None else math.inf), got


def test_validate_says_what_is_wrong(tmp_path: Path, healthy: tuple[Path, Path]) -> None:
    _, store = healthy
    proc = run_gradsight("validate", str(store), "--fix", "no-such-fix", cwd=tmp_path)
    assert proc.returncode == 2 and "no fix 'no-such-fix'" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_gradsight("validate", str(tmp_path / "missing.db"), cwd=tmp_path)
    assert proc.returncode == 2 and "no such file" in proc.stderr


BF16 = """
import torch
import torch.nn as nn
torch.manual_seed(0)
X = torch.randn(256, 8)
Y = (X[:, :4].sum(1) > 0).long()
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2)).to(torch.bfloat16)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
for epoch in range(5):
    for i in range(0, 256, 32):
        xb = X[i:i + 32].to(torch.bfloat16)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(xb).float(), Y[i:i + 32])
        loss.backward()
        opt.step()
"""


def test_bf16_weights_are_recorded_and_the_fix_keeps_them_in_float32(tmp_path: Path) -> None:
    """A model trained in bf16 is recorded at every step (numpy has no bf16), and the fix for its lost updates
    removes the casts of the model and of the inputs made to match it, so the fixed script runs."""
    script, store = trace(tmp_path, "bf16", BF16)
    data = load(str(store))
    assert data.n_steps == 40 and not [e for e in data.events if e.kind == "warning" and e.name == "internal_error"]
    fixes = {f["id"]: f for f in fixes_of(script, store)}
    fix = fixes["fp32-master-weights"]
    patched = apply(script.read_text(), [Edit(**e) for e in fix["edits"]])
    code = "\n".join(ln.split("#", 1)[0] for ln in patched.splitlines())  # (the fix's comments name what it removed)
    assert "bfloat16" not in code, patched
    assert runs(script, fix["edits"], tmp_path).returncode == 0


def test_a_finding_outside_the_network_has_its_line_in_the_script() -> None:
    """The editor puts an optimizer, loss or input root cause on the optimizer's construction, the loss's
    computation in the loop and the model's call on the batch."""
    s = Script(HEALTHY)
    line = {text: i + 1 for i, text in enumerate(HEALTHY.splitlines())}
    assert s.place_line("optimizer") == line["opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)"]
    assert s.place_line("loss") == line["        loss = loss_fn(model(xb), yb)"]
    assert s.place_line("input") == line["        loss = loss_fn(model(xb), yb)"]
    assert s.place_line("fc1") is None and Script("def broken(:\n").place_line("optimizer") is None


_ACCUM = """
import torch
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0, end_factor=0.0, total_iters=100)
for i in range(400):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    loss.backward()
    {before}
    if {guard}:
        opt.step()
        opt.zero_grad()
        {inside}
"""


@pytest.mark.parametrize("before, guard, inside, per_micro_batch", [
    ("sched.step()", "(i + 1) % 4 == 0", "pass", True),           # the schedule advances 4x per optimizer step
    ("pass", "(i + 1) % 4 == 0", "sched.step()", False),          # once per optimizer step
    ("sched.step()", "torch.isfinite(loss)", "pass", False),      # a step skipped on a NaN loss is not accumulation
])
def test_a_scheduler_stepped_beside_an_accumulated_step_is_per_micro_batch(before: str, guard: str, inside: str,
                                                                           per_micro_batch: bool) -> None:
    s = Script(_ACCUM.format(before=before, guard=guard, inside=inside))
    assert bool(s.scheduler_steps_per_micro_batch()) is per_micro_batch


TWO_LOSSES = """
import torch
import torch.nn as nn

torch.manual_seed(0)
X = torch.randn(512, 8)
YC = (X[:, :4].sum(1) > 0).long()
YR = X[:, 4:].sum(1)  # [N]: the regression head gives [N, 1]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 32), nn.ReLU())
        self.cls = nn.Linear(32, 2)
        self.reg = nn.Linear(32, 1)

    def forward(self, x):
        h = self.body(x)
        return self.cls(h), self.reg(h)


model = Net()
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
ce = nn.CrossEntropyLoss()
mse = nn.MSELoss()
for epoch in range(4):
    for i in range(0, 512, 32):
        logits, reg = model(X[i:i + 32])
        loss = ce(logits, YC[i:i + 32]) + 0.5 * mse(reg, YR[i:i + 32])
        opt.zero_grad()
        loss.backward()
        opt.step()
print("final", float(loss))
"""


def test_a_statement_adding_two_losses_gets_its_faulty_one_fixed_only(tmp_path: Path) -> None:
    """A cross-entropy plus an MSE whose [B, 1] prediction broadcasts against [B] targets: the reshape goes into the
    MSE call alone (viewing the logits as the class indices would crash), and the cross-entropy's integer targets
    are no reason to score the regression by cross-entropy."""
    script, store = trace(tmp_path, "two_losses", TWO_LOSSES)
    fixes = fixes_of(script, store)
    ids = [f["id"] for f in fixes]
    assert ids and ids[0] == "match-target-shape", ids
    assert "cross-entropy-for-class-indices" not in ids, ids
    snippet = fixes[0]["snippet"]
    assert "mse(reg.view_as(YR[i:i + 32]), YR[i:i + 32])" in snippet and "ce(logits, YC[i:i + 32])" in snippet, snippet
    assert runs(script, fixes[0]["edits"], tmp_path).returncode == 0


def test_an_optimizer_that_sets_its_own_rate_has_no_rate_to_change() -> None:
    """Hugging Face's Adafactor with relative_step (its default) rejects an lr: no learning-rate fix may set one."""
    src = "from transformers.optimization import Adafactor\nopt = Adafactor(model.parameters(), relative_step=True, lr=None)\n"
    assert Script(src, "t.py").lr_nodes() == []
    manual = "from transformers.optimization import Adafactor\nopt = Adafactor(model.parameters(), relative_step=False, lr=1e-3)\n"
    assert Script(manual, "t.py").lr_nodes()
