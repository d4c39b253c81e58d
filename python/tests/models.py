"""The models the capture is checked on, at inputs small enough for a 2-core CI machine. The factories
are also what `flexpipe capture tests/models.py:NAME` names in the end-to-end tests."""
import torch
import torchvision


def scaled_by_heads(x, heads):
    """As torchvision's Swin attention computes its scale: from the input's shape, in a function the capture
    keeps as one operator (torch.fx.wrap)."""
    width = x.shape[-1]
    return x * (width // heads) ** -0.5


torch.fx.wrap("scaled_by_heads")


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


class CausalLanguageModel(torch.nn.Module):
    """A GPT-like language model on nn.TransformerEncoder: token and position embeddings, the positions an
    index held as a buffer, a causal mask built in forward from the sequence length (or held as a
    non-persistent buffer, `mask_buffer`), which the encoder recognizes as causal by comparing values
    (static: no training step can change them), a linear head over the vocabulary."""

    def __init__(self, vocabulary=11, width=16, heads=2, layers=2, context=8, mask_buffer=False):
        super().__init__()
        self.embed = torch.nn.Embedding(vocabulary, width)
        self.position = torch.nn.Embedding(context, width)
        self.register_buffer("positions", torch.arange(context))
        if mask_buffer:
            self.register_buffer("mask", torch.nn.Transformer.generate_square_subsequent_mask(context),
                                 persistent=False)
        else:
            self.mask = None
        layer = torch.nn.TransformerEncoderLayer(width, heads, 2 * width, dropout=0.0, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = torch.nn.Linear(width, vocabulary)

    def forward(self, tokens):
        n = tokens.shape[1]
        if self.mask is None:
            mask = torch.triu(torch.full((n, n), float("-inf")), diagonal=1)
        else:
            mask = self.mask[:n, :n]
        h = self.embed(tokens) + self.position(self.positions[:n])
        return self.head(self.encoder(h, mask=mask))


def causal_language_model():
    return CausalLanguageModel()


def causal_language_model_mask_buffer():
    return CausalLanguageModel(mask_buffer=True)


class Seq2Seq(torch.nn.Module):
    """nn.Transformer as an encoder-decoder: source and target sequences of vectors, the decoder's causal
    mask made once for the target length the model is built for (a tensor constant of the forward),
    the decoder's output regressed (mse)."""

    def __init__(self, width=16, heads=2, target_length=4):
        super().__init__()
        self.target_length = target_length
        self.transformer = torch.nn.Transformer(width, heads, num_encoder_layers=2, num_decoder_layers=2,
                                                dim_feedforward=2 * width, dropout=0.0, batch_first=True)

    def forward(self, source, target):
        mask = torch.nn.Transformer.generate_square_subsequent_mask(self.target_length)
        return self.transformer(source, target, tgt_mask=mask, tgt_is_causal=True)


def seq2seq():
    return Seq2Seq()


class WhatTorchScriptDoesOtherwise(torch.nn.Module):
    """Two things TorchScript computes otherwise than eager PyTorch unless the export sees to them: a scale
    from a shape, inside a function kept as one operator (torch.jit.trace made it a float32 tensor), and a
    dropout of probability 0 (eager draws no random numbers for it, TorchScript's autodiff did) before
    stochastic depth, which draws some."""

    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(6, 6)
        self.second = torch.nn.Linear(6, 6)
        self.dropout = torch.nn.Dropout(0.0)

    def forward(self, x):
        h = self.dropout(scaled_by_heads(self.first(x), 2))
        h = torch.nn.functional.dropout(torch.tanh(h), 0.0, self.training)
        return self.second(torchvision.ops.stochastic_depth(h, 0.5, "row", self.training))


def what_torchscript_does_otherwise():
    return WhatTorchScriptDoesOtherwise()


class BuffersAndConstants(torch.nn.Module):
    """A mask and an index held as buffers (the mask not in the state_dict), a tensor constant built in
    forward: read by operators, never trained."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(6, 6)
        self.register_buffer("order", torch.tensor([5, 4, 3, 2, 1, 0]))
        self.register_buffer("mask", torch.tril(torch.ones(6, 6)), persistent=False)

    def forward(self, x):
        h = self.linear(x)[:, self.order]
        weights = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])  # made from constants alone
        return (h.unsqueeze(1) * self.mask).sum(-1) * weights


def buffers_and_constants():
    return BuffersAndConstants()


class TransposedDropout(torch.nn.Module):
    """A transposed view handed to dropout, as nn.MultiheadAttention's output (a transposed view with
    batch_first) reaches the dropout after it in nn.TransformerEncoderLayer: dropout draws its mask in the
    memory order of its input, so a cut between them must hand the dropout its input laid out as in the
    model."""

    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(4, 6)
        self.second = torch.nn.Linear(6, 3)

    def forward(self, x):
        h = self.first(x).transpose(0, 1)
        return self.second(torch.nn.functional.dropout(h, 0.5, self.training)).transpose(0, 1)


def transposed_dropout():
    return TransposedDropout()
