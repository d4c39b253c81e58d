"""The models the capture is checked on, at inputs small enough for a 2-core CI machine. The factories
are also what `flexpipe capture tests/models.py:NAME` names in the end-to-end tests."""
import torch
import torchvision


def resnet50():
    return torchvision.models.resnet50(num_classes=10)


def resnet18():
    return torchvision.models.resnet18(num_classes=10)


def vit_b16():
    # ViT-B/16's architecture (12 blocks, width 768, 12 heads, 16x16 patches) on a 32x32 image: 5 tokens.
    return torchvision.models.VisionTransformer(image_size=32, patch_size=16, num_layers=12, num_heads=12,
                                                hidden_dim=768, mlp_dim=3072, num_classes=10)


def transformer_encoder():
    layer = torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, batch_first=True)
    return torch.nn.TransformerEncoder(layer, num_layers=3)


class TinyUNet(torch.nn.Module):
    """Two levels down and up with skip connections: edges that cross many operators."""

    def __init__(self):
        super().__init__()
        self.down1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.down2 = torch.nn.Conv2d(8, 16, 3, padding=1, stride=2)
        self.bottom = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.up2 = torch.nn.ConvTranspose2d(16, 8, 2, stride=2)
        self.up1 = torch.nn.Conv2d(16, 8, 3, padding=1)
        self.out = torch.nn.Conv2d(8, 2, 1)

    def forward(self, x):
        a = torch.relu(self.down1(x))
        b = torch.relu(self.down2(a))
        c = torch.relu(self.bottom(b)) + b
        d = self.up2(c)
        e = torch.relu(self.up1(torch.cat([d, a], dim=1)))
        return self.out(e)


def tiny_unet():
    return TinyUNet()


class DataDependent(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        if x.sum() > 0:
            return self.linear(x)
        return x


def data_dependent():
    return DataDependent()


class GatedBlock(torch.nn.Module):
    """Traceable but for one data-dependent branch: kept whole, the rest is traced."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.linear(x) if x.mean() > 0 else -x


def partly_traceable():
    return torch.nn.Sequential(torch.nn.Linear(4, 4), GatedBlock(), torch.nn.Linear(4, 3))


def not_a_module():
    return 42


class TransformerClassifier(torch.nn.Module):
    """A small nn.TransformerEncoder classifier: tokens embedded, two encoder layers, the mean over the
    sequence, a linear head."""

    def __init__(self, dropout=0.0):
        super().__init__()
        self.embed = torch.nn.Linear(16, 32)
        layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=dropout,
                                                 batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, num_layers=2)
        self.head = torch.nn.Linear(32, 5)

    def forward(self, x):
        return self.head(self.encoder(self.embed(x)).mean(dim=1))


def transformer_classifier():
    return TransformerClassifier()


def transformer_dropout():
    """The classifier with dropout 0.1 after attention (inside it too) and in the feed-forward block: its
    masks must be the single process's whatever the schedule, the cuts and the ranks."""
    return TransformerClassifier(dropout=0.1)


class TiedLanguageModel(torch.nn.Module):
    """The output layer reuses the embedding's weight (GPT-2's tying): with a cut between them, two chunks
    hold it."""

    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Embedding(10, 8)
        self.hidden = torch.nn.Linear(8, 8)

    def forward(self, tokens):
        return torch.nn.functional.linear(torch.tanh(self.hidden(self.embedding(tokens))), self.embedding.weight)


def tied_language_model():
    return TiedLanguageModel()
