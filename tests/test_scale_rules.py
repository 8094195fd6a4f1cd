"""Rules about scale, traced for real: a norm whose eps swamps its input's variance (BatchNorm2d's second
positional argument is eps, not momentum) is named as what shrinks the gradient, while the same net with its
momentum set by keyword is not; a zero-initialised layer is a fault only when its weights stay at zero (a ReLU
after it passes back no gradient), not when it ends a residual branch (the gradient reaches it, and it grows)."""

from __future__ import annotations

from pathlib import Path

from .conftest import trace_and_diagnose

# the loop of both CNN scripts below: 512 images, batches of 64
LOOP = '''
for step in range(STEPS):
    i = torch.randint(0, 512, (64,))
    loss = nn.functional.cross_entropy(model(x[i]), y[i])
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final loss {loss.item():.3f}")
'''

NORMS = '''
import torch
from torch import nn

torch.manual_seed(0)
x = torch.randn(512, 3, 12, 12)
y = (x[:, 0].mean((1, 2)) > 0).long() + (x[:, 1, :6].mean((1, 2)) > 0).long()


def block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout, ARGS), nn.ReLU())


model = nn.Sequential(block(3, 16), block(16, 32), block(32, 32), block(32, 32), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
''' + LOOP.replace("STEPS", "120")

RESIDUAL = '''
import torch
from torch import nn

torch.manual_seed(0)
x = torch.randn(1024, 16)
y = torch.sin(x[:, :4]).sum(1, keepdim=True) + 0.5 * x[:, 4:5] * x[:, 5:6]


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc1 = nn.Linear(width, width)
        self.fc2 = nn.Linear(width, width)

    def forward(self, h):
        return h + self.fc2(torch.relu(self.fc1(h)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(16, 64)
        self.blocks = nn.Sequential(Block(64), Block(64))
        self.out = nn.Linear(64, 1)

    def forward(self, x):
        return self.out(self.blocks(torch.relu(self.inp(x))))


model = Net()
with torch.no_grad():
    ZERO.weight.zero_()
    ZERO.bias.zero_()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(150):
    i = torch.randint(0, 1024, (64,))
    loss = nn.functional.mse_loss(model(x[i]), y[i])
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final loss {loss.item():.3f}")
'''


def _diagnose(tmp_path: Path, source: str) -> dict:
    return trace_and_diagnose(tmp_path, source)[0]


def test_a_norm_whose_eps_swamps_its_input_is_named(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, NORMS.replace("ARGS", "0.99, 1e-3"))
    cause = d["root_cause"]
    assert cause is not None, d["checked"]
    assert cause["kind"] == "vanishing_gradient" and cause["module"].endswith(".1"), d["evidence"]  # a block's BatchNorm2d
    assert "eps=0.99" in d["evidence"] and "does not normalise" in d["evidence"]


def test_the_same_norms_with_a_momentum_by_keyword_are_not(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, NORMS.replace("ARGS", "momentum=0.01"))
    assert not any("does not normalise" in f["evidence"] for f in d["findings"])
    assert d["root_cause"] is None, d["evidence"]


def test_a_zeroed_layer_that_ends_a_residual_branch_is_not_a_fault(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, RESIDUAL.replace("ZERO", "model.blocks[0].fc2"))
    assert d["root_cause"] is None, d["evidence"]
    issues = [i for layer in d["layers"] if layer["module"] == "blocks.0.fc2" for i in layer["issues"]]
    zeroed = [i for i in issues + d["findings"] if i["kind"] == "poor_initialization"]
    assert all(i["severity"] == "info" and "grew to" in i["evidence"] for i in zeroed), zeroed


def test_a_zeroed_layer_before_a_relu_stays_zero_and_is_named(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, RESIDUAL.replace("ZERO", "model.blocks[0].fc1"))
    cause = d["root_cause"]
    assert cause is not None, d["checked"]
    assert (cause["module"], cause["kind"]) == ("blocks.0.fc1", "poor_initialization"), d["evidence"]


def test_weights_initialised_tiny_everywhere_are_named_though_biases_keep_their_default(tmp_path: Path) -> None:
    """An init loop that sets every layer's weights to std 1e-3 and leaves the biases at PyTorch's default: the
    biases are most of each layer's norm, and Adam grows every layer from near zero at once. The weights' own scale
    at the first step names the first layer, not the vanishing gradients in a norm after it."""
    source = RESIDUAL.replace('''with torch.no_grad():
    ZERO.weight.zero_()
    ZERO.bias.zero_()''', '''for m in model.modules():
    if isinstance(m, nn.Linear):
        nn.init.normal_(m.weight, std=1e-3)''')
    d = _diagnose(tmp_path, source)
    cause = d["root_cause"]
    assert cause is not None, d["checked"]
    assert (cause["module"], cause["kind"]) == ("inp", "poor_initialization"), d["evidence"]
    assert "layers start this small" in d["evidence"]


RESNET = '''
import torch
from torch import nn

torch.manual_seed(0)
x = torch.randn(512, 3, 8, 8)
y = (x[:, 0].mean((1, 2)) > 0).long() + (x[:, 1, :4].mean((1, 2)) > 0).long()


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.conv1 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)

    def forward(self, h):
        return torch.relu(h + self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(h))))))


model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), Block(16), Block(16),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 3))
for name, m in model.named_modules():
    if isinstance(m, nn.BatchNorm2d) and WHICH:
        nn.init.zeros_(m.weight)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
''' + LOOP.replace("STEPS", "100")


def test_zero_gains_at_the_end_of_each_residual_branch_are_the_recipe_not_a_fault(tmp_path: Path) -> None:
    """Zero-init-residual (each block's last BatchNorm gain at zero): the gains grow, nothing is reported."""
    d = _diagnose(tmp_path, RESNET.replace("WHICH", "name.endswith('bn2')"))
    assert d["root_cause"] is None, d["evidence"]
    assert not [f for f in d["findings"] if f["kind"] == "poor_initialization" and f["severity"] == "error"], d["findings"]


def test_every_normalisation_gain_at_zero_is_named_at_the_first(tmp_path: Path) -> None:
    """Every BatchNorm gain at zero: every ReLU after one outputs 0 and nothing below the head learns. The first
    normalisation is named as poor initialisation, not the vanishing gradients it causes."""
    d = _diagnose(tmp_path, RESNET.replace("WHICH", "True"))
    cause = d["root_cause"]
    assert cause is not None, d["checked"]
    assert (cause["module"], cause["kind"]) == ("1", "poor_initialization"), d["evidence"]
    assert "normalisations start this small" in d["evidence"]


def test_one_large_std_for_every_layer_is_named_at_the_first_layer(tmp_path: Path) -> None:
    """normal_(std=1.0) on every Linear: the layers with a large fan-in start far too large, the first (fan-in 16)
    only 2.8x Kaiming's scale; as part of the chain it is where the signal starts to grow, and it is named."""
    source = RESIDUAL.replace('''with torch.no_grad():
    ZERO.weight.zero_()
    ZERO.bias.zero_()''', '''for m in model.modules():
    if isinstance(m, nn.Linear):
        nn.init.normal_(m.weight, std=1.0)''')
    d = _diagnose(tmp_path, source)
    cause = d["root_cause"]
    assert cause is not None, d["checked"]
    assert (cause["module"], cause["kind"]) == ("inp", "poor_initialization"), d["evidence"]
    assert "layers start this large" in d["evidence"]
