"""ResNet-style network with residual BasicBlocks on synthetic colour images.

Family: residual CNN (stem conv, two BasicBlocks with BatchNorm and identity /
1x1 projection shortcuts, global average pooling), 5-class CrossEntropyLoss,
SGD with Nesterov momentum and weight decay, OneCycleLR stepped every batch.
Style: torchvision-like classes (`BasicBlock`, `ResNet` with `_make_layer`),
`main()`, DataLoader, uint8 images scaled by 1/255 and normalised with fixed
per-channel constants.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

MEAN = torch.tensor([0.5, 0.5, 0.5]).view(1, 3, 1, 1)
STD = torch.tensor([0.25, 0.25, 0.25]).view(1, 3, 1, 1)


class BasicBlock(nn.Module):
    def __init__(self, c_in, c_out, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut = nn.Sequential()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, num_classes=5, width=8):
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, 1, 1, bias=False)  # zoo: layer name=stem first=1 frozen=1 missing=1
        self.bn = nn.BatchNorm2d(width)
        self.layer1 = self._make_layer(width, width, stride=1)  # zoo: layer name=layer1 missing=1 frozen=1
        self.layer2 = self._make_layer(width, 2 * width, stride=2)  # zoo: layer name=layer2 missing=1
        self.fc = nn.Linear(2 * width, num_classes)  # zoo: layer name=fc head=1 missing=1 new="nn.Linear(16, 5)"

    @staticmethod
    def _make_layer(c_in, c_out, stride):
        return nn.Sequential(BasicBlock(c_in, c_out, stride))

    def forward(self, x):
        x = F.relu(self.bn(self.stem(x)))
        x = self.layer2(self.layer1(x))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)  # zoo: logits


def synthetic_images(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 5, (n,), generator=g)
    colours = torch.rand(5, 3, 1, 1, generator=g)
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, 16), torch.linspace(-1, 1, 16), indexing="ij")
    shapes = torch.stack([xx, yy, xx * yy, xx ** 2 - yy ** 2, (xx ** 2 + yy ** 2).sqrt()]).unsqueeze(1)
    img = 0.05 * colours[labels] + 0.1 * (shapes[labels] + 1) / 2 + 0.85 * torch.rand(n, 3, 16, 16, generator=g)
    return (img.clamp(0, 1) * 255).to(torch.uint8), labels


def main():
    torch.manual_seed(0)
    images, labels = synthetic_images(512)
    x = images.float() / 255.0  # zoo: pixels
    x = (x - MEAN) / STD
    loader = DataLoader(TensorDataset(x, labels), batch_size=32, shuffle=True)  # zoo: dataset x=x y=labels
    epochs = 6
    model = ResNet()  # zoo: model var=model bn=bn,layer1.0.bn1,layer1.0.bn2,layer2.0.bn1,layer2.0.bn2,layer2.0.shortcut.1
    criterion = nn.CrossEntropyLoss()  # zoo: criterion kind=ce
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)  # zoo: optimizer var=optimizer kind=sgd
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=epochs * len(loader))  # zoo: sched var=scheduler per=batch onecycle=1 | lr value=0.1
    for epoch in range(epochs):  # zoo: loop
        model.train()  # zoo: train_mode
        for inputs, targets in loader:
            optimizer.zero_grad(set_to_none=True)  # zoo: zero_grad
            outputs = model(inputs)  # zoo: forward
            loss = criterion(outputs, targets)  # zoo: loss kind=ce pred=outputs target=targets classes=5
            loss.backward()  # zoo: backward
            optimizer.step()  # zoo: step per=batch
            scheduler.step()  # zoo: sched_step per=batch
        print(f"epoch {epoch}: loss {loss.item():.4f} lr {scheduler.get_last_lr()[0]:.4f}")


if __name__ == "__main__":
    main()
