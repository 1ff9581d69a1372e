"""The published measurements' models that the zoo lacks, in plain PyTorch, for counting costs.

benchmarks/plan/gpu_predictions.py counts each measured model's FLOPs and bytes on
this CPU. Zoo models are built from the zoo; these are the others whose
architecture the sources state exactly (benchmarks/data/measured/README.md):

- BERT-base / BERT-large encoders (Devlin et al.): 12 x 768 / 24 x 1024, heads of 64,
  feed-forward 4x, WordPiece vocabulary 30,522, at the row's sequence length, with a
  SQuAD span head (pre-training's heads differ by a vocabulary-wide projection,
  which is the MLM head here); written as the measured implementations write it
  (NVIDIA's DeepLearningExamples and Hugging Face's ``BertSelfAttention``: separate
  query, key and value projections, explicit ``matmul``, scaling, an additive mask,
  softmax and dropout), :class:`ExplicitBert`; :class:`Bert` is the same network
  from PyTorch's ``nn.TransformerEncoder``;
- NeuMF (He et al., NVIDIA DLE's NCF): MovieLens-20M's 138,493 users and 26,744 items,
  64 factors, MLP 256-256-128-64;
- Gavel's word-level LM (PyTorch's word_language_model example on Wikitext-2): a
  33,278-word vocabulary, 2-layer LSTM of 200, 35-token windows.
- Tensor2Tensor's ``resnet_cifar_15`` and ``resnet_cifar_32`` (CM-DARE's PS clusters): the
  CIFAR ResNet of He et al. — a 3x3 convolution of 16 filters, then three stages of 2 or 5
  residual blocks of 16, 32 and 64 filters (the second and third halving the image, with a
  1x1 projection on the shortcut), global pooling and 10 classes.

Each entry builds ``(model, example(batch) -> Batch, loss(model, batch))``; the
numbers are for counting, not training quality.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from rightsize.workloads.datasets import Batch

BERT_VOCAB = 30_522
NCF_USERS, NCF_ITEMS = 138_493, 26_744
LM_VOCAB, LM_BPTT = 33_278, 35


@dataclass(frozen=True)
class Built:
    """A model and how to feed it, as layer_costs and saved_activation_bytes need."""

    model: nn.Module
    example: Callable[[int], Batch]
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        inputs, target = batch
        return self.loss_fn(model(*inputs), target)

    def example_batch(self, size: int) -> Batch:
        return self.example(size)


class Bert(nn.Module):
    def __init__(self, layers: int, width: int, seq: int, pretrain: bool) -> None:
        super().__init__()
        self.tokens = nn.Embedding(BERT_VOCAB, width)
        self.positions = nn.Embedding(512, width)
        self.norm = nn.LayerNorm(width)
        block = nn.TransformerEncoderLayer(width, width // 64, 4 * width, dropout=0.1,
                                           activation="gelu", batch_first=True)  # fmt: skip
        # PyTorch's layer also drops out the feed-forward's 3072-wide hidden layer; BERT does
        # not (its dropouts: attention probabilities and each sub-layer's output): the same
        # network, not one with ~13% more memory traffic (issue 40, gpu_variants)
        block.dropout = nn.Identity()
        self.encoder = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, BERT_VOCAB if pretrain else 2)
        self.seq = seq

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        return self.head(self.encoder(self.norm(self.tokens(ids) + self.positions(positions))))


#: Ways of writing the same self-attention (benchmarks/plan/gpu_variants.py, and the test
#: that the device model times them alike): BertSelfAttention's explicit matmuls, einsum,
#: and PyTorch's fused scaled_dot_product_attention behind one fused QKV projection.
ATTENTION_STYLES = ("explicit", "einsum", "sdpa")


class ExplicitSelfAttention(nn.Module):
    """BERT's self-attention as BertSelfAttention writes it (``style="explicit"``), or the same
    computation with ``einsum`` or ``F.scaled_dot_product_attention`` (fused QKV)."""

    def __init__(self, width: int, dropout: float = 0.1, style: str = "explicit") -> None:
        super().__init__()
        self.heads, self.style, self.p = width // 64, style, dropout
        if style == "sdpa":
            self.qkv = nn.Linear(width, 3 * width)
        else:
            self.query, self.key, self.value = (nn.Linear(width, width) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, s, width = x.shape
        d = width // self.heads

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, s, self.heads, d).permute(0, 2, 1, 3)

        if self.style == "sdpa":
            q, k, v = (heads(t) for t in self.qkv(x).chunk(3, dim=-1))
            context = nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=self.p if self.training else 0.0)
        elif self.style == "einsum":
            q, k, v = heads(self.query(x)), heads(self.key(x)), heads(self.value(x))
            scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / d**0.5 + mask
            context = torch.einsum("bhqk,bhkd->bhqd", self.dropout(scores.softmax(-1)), v)
        else:
            q, k, v = heads(self.query(x)), heads(self.key(x)), heads(self.value(x))
            scores = torch.matmul(q, k.transpose(-1, -2)) / d**0.5 + mask
            context = torch.matmul(self.dropout(torch.softmax(scores, dim=-1)), v)
        return context.permute(0, 2, 1, 3).contiguous().view(b, s, width)


class ExplicitBertLayer(nn.Module):
    def __init__(self, width: int, dropout: float = 0.1, style: str = "explicit") -> None:
        super().__init__()
        self.attention = ExplicitSelfAttention(width, dropout, style)
        self.attention_out, self.attention_norm = nn.Linear(width, width), nn.LayerNorm(width)
        self.intermediate, self.output = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)
        self.output_norm, self.dropout = nn.LayerNorm(width), nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.attention_norm(x + self.dropout(self.attention_out(self.attention(x, mask))))
        hidden = nn.functional.gelu(self.intermediate(x))
        return self.output_norm(x + self.dropout(self.output(hidden)))


class ExplicitBert(nn.Module):
    def __init__(self, layers: int, width: int, seq: int, pretrain: bool,
                 style: str = "explicit", dropout: float = 0.1) -> None:  # fmt: skip
        super().__init__()
        self.tokens = nn.Embedding(BERT_VOCAB, width)
        self.positions = nn.Embedding(512, width)
        self.norm = nn.LayerNorm(width)
        self.layers = nn.ModuleList(ExplicitBertLayer(width, dropout, style)
                                    for _ in range(layers))  # fmt: skip
        self.head = nn.Linear(width, BERT_VOCAB if pretrain else 2)
        self.seq = seq

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.norm(self.tokens(ids) + self.positions(positions))
        mask = torch.zeros(ids.shape[0], 1, 1, ids.shape[1], device=ids.device)  # no padding
        for layer in self.layers:
            x = layer(x, mask)
        return self.head(x)


def bert(layers: int, width: int, seq: int, pretrain: bool = False,
         style: str = "explicit") -> Built:  # fmt: skip
    """A BERT encoder fed as the measurements ran it; ``style`` one of :data:`ATTENTION_STYLES`,
    or ``"torch"`` for nn.TransformerEncoder's."""

    def example(n: int) -> Batch:
        ids = torch.randint(0, BERT_VOCAB, (n, seq))
        target = torch.randint(0, BERT_VOCAB if pretrain else seq, (n, seq) if pretrain else (n,))
        return (ids,), target

    def loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if pretrain:
            return nn.functional.cross_entropy(out.flatten(0, 1), target.flatten())
        return nn.functional.cross_entropy(out[..., 0], target)  # the span start's logits

    if style == "torch":
        return Built(Bert(layers, width, seq, pretrain), example, loss)
    return Built(ExplicitBert(layers, width, seq, pretrain, style), example, loss)


class NeuMF(nn.Module):
    def __init__(self, factors: int = 64, mlp: tuple[int, ...] = (256, 256, 128, 64)) -> None:
        super().__init__()
        self.mf_user, self.mf_item = nn.Embedding(NCF_USERS, factors), nn.Embedding(NCF_ITEMS, factors)
        self.mlp_user = nn.Embedding(NCF_USERS, mlp[0] // 2)
        self.mlp_item = nn.Embedding(NCF_ITEMS, mlp[0] // 2)
        layers: list[nn.Module] = []
        for a, b in zip(mlp, mlp[1:], strict=False):
            layers += [nn.Linear(a, b), nn.ReLU()]
        self.mlp = nn.Sequential(*layers)
        self.out = nn.Linear(factors + mlp[-1], 1)

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        mf = self.mf_user(users) * self.mf_item(items)
        deep = self.mlp(torch.cat([self.mlp_user(users), self.mlp_item(items)], dim=1))
        return self.out(torch.cat([mf, deep], dim=1)).squeeze(1)


def ncf() -> Built:
    def example(n: int) -> Batch:
        users, items = torch.randint(0, NCF_USERS, (n,)), torch.randint(0, NCF_ITEMS, (n,))
        return (users, items), torch.randint(0, 2, (n,)).float()

    return Built(NeuMF(), example, nn.functional.binary_cross_entropy_with_logits)


class LstmLM(nn.Module):
    def __init__(self, size: int = 200) -> None:
        super().__init__()
        self.embed = nn.Embedding(LM_VOCAB, size)
        self.lstm = nn.LSTM(size, size, num_layers=2, batch_first=True)
        self.decoder = nn.Linear(size, LM_VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.lstm(self.embed(ids))[0])


def lstm_lm() -> Built:
    def example(n: int) -> Batch:
        return (torch.randint(0, LM_VOCAB, (n, LM_BPTT)),), torch.randint(0, LM_VOCAB, (n, LM_BPTT))

    def loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(out.flatten(0, 1), target.flatten())

    return Built(LstmLM(), example, loss)


class CifarBlock(nn.Module):
    def __init__(self, inputs: int, filters: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(inputs, filters, 3, stride, 1, bias=False), nn.BatchNorm2d(filters),
            nn.ReLU(), nn.Conv2d(filters, filters, 3, 1, 1, bias=False), nn.BatchNorm2d(filters),
        )  # fmt: skip
        self.shortcut = nn.Identity() if stride == 1 and inputs == filters else nn.Sequential(
            nn.Conv2d(inputs, filters, 1, stride, bias=False), nn.BatchNorm2d(filters))  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.shortcut(x))


def resnet_cifar(blocks: int) -> Built:
    layers: list[nn.Module] = [nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU()]
    inputs = 16
    for stage, filters in enumerate((16, 32, 64)):
        for i in range(blocks):
            layers.append(CifarBlock(inputs, filters, 2 if stage and not i else 1))
            inputs = filters
    model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))

    def example(batch: int) -> Batch:
        return (torch.randn(batch, 3, 32, 32),), torch.randint(0, 10, (batch,))

    return Built(model, example, nn.functional.cross_entropy)


#: Measured model name -> builder taking the row's sequence length (None where fixed).
BUILDERS: dict[str, Callable[[int | None], Built]] = {
    "bert-base-squad": lambda seq: bert(12, 768, seq or 384),
    "bert-large-squad": lambda seq: bert(24, 1024, seq or 384),
    "bert-large-pretrain": lambda seq: bert(24, 1024, seq or 128, pretrain=True),
    "ncf-neumf": lambda _seq: ncf(),
    "lstm-lm-2x200": lambda _seq: lstm_lm(),
    "resnet15-cifar": lambda _seq: resnet_cifar(2),
    "resnet32-cifar": lambda _seq: resnet_cifar(5),
}
