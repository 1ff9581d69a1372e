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
- Transformer-XL base and large (Dai et al.) as NVIDIA DLE's PyTorch README configures them
  for WikiText-103: relative attention over memory and segment, tied adaptive input and
  softmax (what is simplified, and why it barely changes the counted work: at
  :data:`TXL_CUTOFFS`);
- ImageNet CNNs of the published rows: ResNet-152 (the zoo's Bottleneck), ResNeXt-101 32x4d
  and SE-ResNeXt-101 32x4d (the zoo's ResNet with a grouped bottleneck), VGG-16 (the zoo's
  VGG), AlexNet and Inception-v3 as tf_cnn_benchmarks builds them.

Each is checked against its published parameter count (tests/test_gpu_models.py).

Each entry builds ``(model, example(batch) -> Batch, loss(model, batch))``; the
numbers are for counting, not training quality.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from rightsize.workloads.datasets import Batch
from rightsize.workloads.models.resnet import Bottleneck, ResNet
from rightsize.workloads.models.vgg import VGG

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


# -- Transformer-XL (Dai et al. 2019) as NVIDIA DeepLearningExamples' PyTorch/LanguageModeling/
# Transformer-XL trains it on WikiText-103 (README's parameter table; pytorch/train.py's
# wt103 adaptive softmax). What is simplified, and why the counted work barely moves:
# - the adaptive input and softmax route each token to the cluster of its word; which tokens
#   fall where is data, so each tail cluster here runs on a fixed share of the tokens, the
#   share a Zipf (exponent 1) vocabulary of 267,735 words gives it (TXL_CLUSTER_SHARES); the
#   head (the 20,000 most frequent words and 3 cluster logits) runs on every token, as in DLE;
# - the new memory (each layer's hidden states, detached, for the next segment) is not
#   copied out: a copy of one (batch, mem_len, d_model) tensor per layer, ~1% of the bytes a
#   layer moves; the memory read in (``mems``) is an input, without gradients, as in DLE.
TXL_VOCAB = 267_735
TXL_CUTOFFS = (20_000, 40_000, 200_000)  # DLE train.py: [19997, 39997, 199997] + 3 cluster ids
#: Tokens per cluster (head, then tails) under Zipf's law with exponent 1 over TXL_VOCAB words:
#: the share of the top k words is H(k)/H(V) ~ (ln k + 0.577)/(ln V + 0.577).
TXL_CLUSTER_SHARES = (0.80, 0.053, 0.123, 0.024)


@dataclass(frozen=True)
class TxlConfig:
    layers: int
    width: int  # d_model = d_embed
    heads: int
    head_width: int
    inner: int
    tgt_len: int
    mem_len: int
    div_val: int  # cluster i embeds in width // div_val**i
    dropout: float
    dropatt: float  # dropout of the attention probabilities

    def segment(self, tokens: int | None) -> TxlConfig:
        """This model at a row's segment length (Lambda runs the large one at 256 tokens): the
        memory as long as the segment, as both of DLE's configurations have it."""
        return self if tokens is None else dataclasses.replace(self, tgt_len=tokens, mem_len=tokens)


#: DLE README's table: base modified to powers of two, large the reference's hyperparameters.
TXL_BASE = TxlConfig(16, 512, 8, 64, 2048, 192, 192, 1, 0.1, 0.0)
#: The large counts 285,170,506 parameters here; the paper's Table 1 lists 257M for its large
#: WikiText-103 model. The same code counts the paper's base at its published 151M
#: (tests/test_gpu_models.py), so the gap is not in how a layer is built, and the DLE README
#: states no count to settle it: this is the README's configuration, counted as written.
TXL_LARGE = TxlConfig(18, 1024, 16, 64, 4096, 384, 384, 4, 0.2, 0.2)
#: The paper's WikiText-103 base (d_model 410, 10 heads of 41, d_inner 2100, 150 tokens):
#: the configuration whose parameter count the paper publishes (151M, Table 1).
TXL_PAPER_BASE = TxlConfig(16, 410, 10, 41, 2100, 150, 150, 1, 0.1, 0.0)


def _cluster_sizes() -> list[tuple[int, int]]:
    """(first word, words) of each cluster."""
    bounds = (0, *TXL_CUTOFFS, TXL_VOCAB)
    return [(lo, hi - lo) for lo, hi in zip(bounds, bounds[1:], strict=False)]


def _cluster_tokens(n: int) -> list[int]:
    """Tokens of each cluster among ``n``: each tail its share (at least one), the head the rest."""
    tails = [max(1, round(n * share)) for share in TXL_CLUSTER_SHARES[1:]]
    return [n - sum(tails), *tails]


class AdaptiveIO(nn.Module):
    """The adaptive input embedding and the adaptive softmax, tied as DLE ties them (the
    embeddings are the output layers' weights; the tails' projections are shared)."""

    def __init__(self, cfg: TxlConfig) -> None:
        super().__init__()
        self.width = cfg.width
        dims = [cfg.width // cfg.div_val**i for i in range(len(TXL_CUTOFFS) + 1)]
        self.embeddings = nn.ModuleList(nn.Embedding(words, dim) for (_, words), dim
                                        in zip(_cluster_sizes(), dims, strict=True))  # fmt: skip
        # div_val 1: no projections (d_embed = d_model); else one per cluster, input side,
        # and the head's output projection apart (DLE's tie_projs = [False, True, True, True])
        projected = cfg.div_val > 1
        self.in_projs = nn.ParameterList(
            nn.Parameter(torch.randn(cfg.width, dim) * 0.02) for dim in dims) if projected else None
        self.head_out_proj = nn.Parameter(torch.randn(cfg.width, dims[0]) * 0.02) if projected else None
        self.biases = nn.ParameterList(nn.Parameter(torch.zeros(words)) for _, words in _cluster_sizes())
        self.cluster_weight = nn.Parameter(torch.zeros(len(TXL_CUTOFFS), dims[0]))
        self.cluster_bias = nn.Parameter(torch.zeros(len(TXL_CUTOFFS)))

    def _proj(self, i: int, out: bool) -> torch.Tensor | None:
        if self.in_projs is None:
            return None
        return self.head_out_proj if out and i == 0 else self.in_projs[i]

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """(b, s) word ids -> (b, s, width); each cluster on its share of the tokens."""
        flat = ids.flatten()
        parts = []
        for i, (count, (_first, words)) in enumerate(zip(_cluster_tokens(flat.numel()),
                                                      _cluster_sizes(), strict=True)):  # fmt: skip
            emb = self.embeddings[i](flat[:count].remainder(words))
            proj = self._proj(i, out=False)
            parts.append(emb if proj is None else nn.functional.linear(emb, proj))
        out = torch.cat(parts)
        return (out * self.width**0.5).view(*ids.shape, self.width)

    def loss(self, hidden: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Adaptive softmax's negative log-likelihood: the head on every token, each tail
        cluster on its share."""
        h, t = hidden.reshape(-1, self.width), target.flatten()
        shares = _cluster_tokens(h.shape[0])
        proj = self._proj(0, out=True)
        head_in = h if proj is None else h @ proj
        weight = torch.cat([self.embeddings[0].weight, self.cluster_weight])
        head = nn.functional.log_softmax(
            head_in @ weight.t() + torch.cat([self.biases[0], self.cluster_bias]), dim=-1)
        nll = -head.gather(1, t.remainder(TXL_CUTOFFS[0]).unsqueeze(1)).sum()
        for i, (count, (_, words)) in enumerate(zip(shares, _cluster_sizes(), strict=True)):
            if i == 0:
                continue
            tail_in = h[:count] if (p := self._proj(i, out=True)) is None else h[:count] @ p
            tail = nn.functional.log_softmax(tail_in @ self.embeddings[i].weight.t()
                                             + self.biases[i], dim=-1)  # fmt: skip
            picked = tail.gather(1, t[:count].remainder(words).unsqueeze(1))
            column = TXL_CUTOFFS[0] + i - 1  # the head's logit of cluster i
            nll = nll - (picked + head[:count, column : column + 1]).sum()
        return nll / h.shape[0]


class RelativeAttention(nn.Module):
    """Transformer-XL's attention with relative positions (DLE's
    ``RelPartialLearnableMultiHeadAttn``): queries of the segment, keys and values of memory
    and segment, content (AC) and position (BD) scores, BD shifted, causal mask, post-norm."""

    def __init__(self, cfg: TxlConfig) -> None:
        super().__init__()
        self.heads, self.d = cfg.heads, cfg.head_width
        inner = cfg.heads * cfg.head_width
        self.qkv = nn.Linear(cfg.width, 3 * inner, bias=False)
        self.r_net = nn.Linear(cfg.width, inner, bias=False)
        self.out = nn.Linear(inner, cfg.width, bias=False)
        self.norm, self.drop = nn.LayerNorm(cfg.width), nn.Dropout(cfg.dropout)
        self.drop_attention = nn.Dropout(cfg.dropatt) if cfg.dropatt else nn.Identity()

    def forward(self, x: torch.Tensor, mem: torch.Tensor, pos: torch.Tensor,
                r_w_bias: torch.Tensor, r_r_bias: torch.Tensor) -> torch.Tensor:  # fmt: skip
        b, q_len, width = x.shape
        k_len = mem.shape[1] + q_len
        q, k, v = self.qkv(torch.cat([mem, x], dim=1)).chunk(3, dim=-1)
        q = q[:, -q_len:].view(b, q_len, self.heads, self.d)
        k, v = (t.view(b, k_len, self.heads, self.d) for t in (k, v))
        r = self.r_net(pos).view(k_len, self.heads, self.d)
        ac = torch.einsum("bihd,bjhd->bhij", q + r_w_bias, k)
        bd = _rel_shift(torch.einsum("bihd,jhd->bhij", q + r_r_bias, r))
        causal = torch.ones(q_len, k_len, dtype=torch.bool, device=x.device).triu(1 + k_len - q_len)
        scores = ((ac + bd) / self.d**0.5).masked_fill(causal, float("-inf"))
        context = torch.einsum("bhij,bjhd->bihd", self.drop_attention(scores.softmax(-1)), v)
        return self.norm(x + self.drop(self.out(context.reshape(b, q_len, -1))))


def _rel_shift(x: torch.Tensor) -> torch.Tensor:
    """The relative shift (Dai et al., appendix B): pad a zero column, re-view, drop a row."""
    b, h, q_len, k_len = x.shape
    padded = nn.functional.pad(x, (1, 0)).view(b, h, k_len + 1, q_len)
    return padded[:, :, 1:].reshape(b, h, q_len, k_len)


class TxlLayer(nn.Module):
    def __init__(self, cfg: TxlConfig) -> None:
        super().__init__()
        dropout = cfg.dropout
        self.attention = RelativeAttention(cfg)
        self.ff = nn.Sequential(nn.Linear(cfg.width, cfg.inner), nn.ReLU(), nn.Dropout(dropout),
                                nn.Linear(cfg.inner, cfg.width), nn.Dropout(dropout))  # fmt: skip
        self.norm = nn.LayerNorm(cfg.width)

    def forward(self, x: torch.Tensor, mem: torch.Tensor, pos: torch.Tensor,
                r_w_bias: torch.Tensor, r_r_bias: torch.Tensor) -> torch.Tensor:  # fmt: skip
        x = self.attention(x, mem, pos, r_w_bias, r_r_bias)
        return self.norm(x + self.ff(x))


class TransformerXL(nn.Module):
    """DLE's ``MemTransformerLM`` (attn_type 0, post-norm, tied adaptive input and softmax)."""

    def __init__(self, cfg: TxlConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.io = AdaptiveIO(cfg)
        self.layers = nn.ModuleList(TxlLayer(cfg) for _ in range(cfg.layers))
        self.r_w_bias = nn.Parameter(torch.zeros(cfg.heads, cfg.head_width))
        self.r_r_bias = nn.Parameter(torch.zeros(cfg.heads, cfg.head_width))
        self.drop = nn.Dropout(cfg.dropout)
        inv_freq = 1 / 10_000 ** (torch.arange(0.0, cfg.width, 2.0) / cfg.width)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, ids: torch.Tensor, mems: torch.Tensor) -> torch.Tensor:
        """``ids`` (b, tgt_len), ``mems`` (b, layers, mem_len, width) -> (b, tgt_len, width)."""
        k_len = ids.shape[1] + mems.shape[2]
        angles = torch.outer(torch.arange(k_len - 1, -1, -1.0, device=ids.device), self.inv_freq)
        pos = self.drop(torch.cat([angles.sin(), angles.cos()], dim=-1))
        x = self.drop(self.io.embed(ids))
        for layer, mem in zip(self.layers, mems.unbind(1), strict=True):
            x = layer(x, mem, pos, self.r_w_bias, self.r_r_bias)
        return self.drop(x)


def transformer_xl(cfg: TxlConfig) -> Built:
    model = TransformerXL(cfg)

    def example(n: int) -> Batch:
        ids = torch.randint(0, TXL_VOCAB, (n, cfg.tgt_len))
        mems = torch.randn(n, cfg.layers, cfg.mem_len, cfg.width)
        return (ids, mems), torch.randint(0, TXL_VOCAB, (n, cfg.tgt_len))

    def loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return model.io.loss(out, target)

    return Built(model, example, loss)


# -- ImageNet CNNs of the published rows, from the zoo's blocks where it has them.
def _image_classifier(model: nn.Module, size: int) -> Built:
    def example(n: int) -> Batch:
        return (torch.randn(n, 3, size, size),), torch.randint(0, 1000, (n,))

    return Built(model, example, nn.functional.cross_entropy)


class GroupedBottleneck(nn.Module):
    """ResNeXt's bottleneck (Xie et al. 2017): 1x1, grouped 3x3 of ``groups`` x ``group_width``
    per 64 planes, 1x1 expand x4; with ``squeeze`` the SE block of Hu et al. (reduction 16,
    1x1 convolutions with biases, as DLE's and Cadene's SE-ResNeXt write it)."""

    expansion = 4

    def __init__(self, in_planes: int, planes: int, stride: int = 1, downsample=None,
                 groups: int = 32, group_width: int = 4, squeeze: bool = False) -> None:  # fmt: skip
        super().__init__()
        width = planes * group_width // 64 * groups
        out = planes * self.expansion
        self.body = nn.Sequential(
            nn.Conv2d(in_planes, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 3, stride, 1, groups=groups, bias=False), nn.BatchNorm2d(width),
            nn.ReLU(inplace=True), nn.Conv2d(width, out, 1, bias=False), nn.BatchNorm2d(out))  # fmt: skip
        self.squeeze = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Conv2d(out, out // 16, 1), nn.ReLU(inplace=True),
            nn.Conv2d(out // 16, out, 1), nn.Sigmoid()) if squeeze else None  # fmt: skip
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.body(x)
        if self.squeeze is not None:
            out = out * self.squeeze(out)
        return torch.relu(out + identity)


def resnext101(squeeze: bool = False) -> nn.Module:
    """ResNeXt-101 32x4d (published 44,177,704 parameters: Cadene's pretrained-models and
    timm's ``resnext101_32x4d``) or SE-ResNeXt-101 32x4d (48,955,416: Cadene's
    ``se_resnext101_32x4d``): the zoo's ResNet with the grouped bottleneck."""
    from functools import partial

    block = partial(GroupedBottleneck, squeeze=squeeze)
    block.expansion = GroupedBottleneck.expansion  # type: ignore[attr-defined]
    return ResNet(block, (3, 4, 23, 3))  # type: ignore[arg-type]


def resnet152() -> nn.Module:
    """ResNet-152 (torchvision's published 60,192,808 parameters): the zoo's Bottleneck."""
    return ResNet(Bottleneck, (3, 8, 36, 3))


#: VGG-16, configuration D (torchvision's published 138,357,544 parameters).
VGG16_STAGES = ((64, 64), (128, 128), (256, 256, 256), (512, 512, 512), (512, 512, 512))


def alexnet() -> nn.Module:
    """AlexNet as tf_cnn_benchmarks' ``alexnet_model.py`` builds it (the published rows'
    code): 227x227 input, convolutions of 64 (11x11, stride 4, no padding), 192 (5x5), 384,
    384, 256 (3x3), three 3x3 max-pools of stride 2, 4096-4096-1000 with dropout. That is
    torchvision's AlexNet (published 61,100,840 parameters) with conv4 384 wide instead of
    256: 737,408 more, 61,838,248."""

    def conv(a: int, b: int, k: int, stride: int = 1, pad: int | None = None) -> list[nn.Module]:
        return [nn.Conv2d(a, b, k, stride, k // 2 if pad is None else pad), nn.ReLU(inplace=True)]

    return nn.Sequential(
        *conv(3, 64, 11, 4, 0), nn.MaxPool2d(3, 2), *conv(64, 192, 5), nn.MaxPool2d(3, 2),
        *conv(192, 384, 3),
        *conv(384, 384, 3), *conv(384, 256, 3), nn.MaxPool2d(3, 2), nn.Flatten(),
        nn.Linear(256 * 6 * 6, 4096), nn.ReLU(inplace=True), nn.Dropout(),
        nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Dropout(), nn.Linear(4096, 1000))  # fmt: skip


def _conv_bn(a: int, b: int, kernel, stride: int = 1, padding=0) -> nn.Sequential:
    """Inception's convolution: no bias, BatchNorm (eps 0.001), ReLU."""
    return nn.Sequential(nn.Conv2d(a, b, kernel, stride, padding, bias=False),
                         nn.BatchNorm2d(b, eps=0.001), nn.ReLU(inplace=True))  # fmt: skip


class _Branches(nn.Module):
    """An Inception module: its branches side by side, concatenated on channels."""

    def __init__(self, *branches: nn.Module) -> None:
        super().__init__()
        self.branches = nn.ModuleList(branches)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([branch(x) for branch in self.branches], dim=1)


class _Split(nn.Module):
    """Inception-v3's 'E' tail: one input, a 1x3 and a 3x1 convolution side by side."""

    def __init__(self, a: int, b: int) -> None:
        super().__init__()
        self.wide, self.tall = _conv_bn(a, b, (1, 3), padding=(0, 1)), _conv_bn(a, b, (3, 1), padding=(1, 0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.wide(x), self.tall(x)], dim=1)


def _pool_branch(inputs: int, outputs: int) -> nn.Sequential:
    return nn.Sequential(nn.AvgPool2d(3, 1, 1), _conv_bn(inputs, outputs, 1))


def _module_a(inputs: int, pool: int) -> _Branches:
    return _Branches(
        _conv_bn(inputs, 64, 1),
        nn.Sequential(_conv_bn(inputs, 48, 1), _conv_bn(48, 64, 5, padding=2)),
        nn.Sequential(_conv_bn(inputs, 64, 1), _conv_bn(64, 96, 3, padding=1), _conv_bn(96, 96, 3, padding=1)),
        _pool_branch(inputs, pool))  # fmt: skip


def _module_c(c7: int) -> _Branches:
    def seven(a: int, b: int, tall: bool) -> nn.Sequential:
        return _conv_bn(a, b, (7, 1), padding=(3, 0)) if tall else _conv_bn(a, b, (1, 7), padding=(0, 3))

    return _Branches(
        _conv_bn(768, 192, 1),
        nn.Sequential(_conv_bn(768, c7, 1), seven(c7, c7, False), seven(c7, 192, True)),
        nn.Sequential(_conv_bn(768, c7, 1), seven(c7, c7, True), seven(c7, c7, False),
                      seven(c7, c7, True), seven(c7, 192, False)),
        _pool_branch(768, 192))  # fmt: skip


def _module_e(inputs: int) -> _Branches:
    return _Branches(
        _conv_bn(inputs, 320, 1),
        nn.Sequential(_conv_bn(inputs, 384, 1), _Split(384, 384)),
        nn.Sequential(_conv_bn(inputs, 448, 1), _conv_bn(448, 384, 3, padding=1), _Split(384, 384)),
        _pool_branch(inputs, 192))  # fmt: skip


def inception_v3() -> nn.Module:
    """Inception-v3 (Szegedy et al. 2016) without the auxiliary head, as tf_cnn_benchmarks'
    ``Inceptionv3Model`` trains it by default (``auxiliary=False``), at 299x299: torchvision's
    Inception3 (published 27,161,264 parameters) less its AuxLogits (3,326,696), 23,834,568."""
    return nn.Sequential(
        _conv_bn(3, 32, 3, 2), _conv_bn(32, 32, 3), _conv_bn(32, 64, 3, padding=1),
        nn.MaxPool2d(3, 2), _conv_bn(64, 80, 1), _conv_bn(80, 192, 3), nn.MaxPool2d(3, 2),
        _module_a(192, 32), _module_a(256, 64), _module_a(288, 64),
        _Branches(_conv_bn(288, 384, 3, 2),
                  nn.Sequential(_conv_bn(288, 64, 1), _conv_bn(64, 96, 3, padding=1), _conv_bn(96, 96, 3, 2)),
                  nn.MaxPool2d(3, 2)),
        _module_c(128), _module_c(160), _module_c(160), _module_c(192),
        _Branches(nn.Sequential(_conv_bn(768, 192, 1), _conv_bn(192, 320, 3, 2)),
                  nn.Sequential(_conv_bn(768, 192, 1), _conv_bn(192, 192, (1, 7), padding=(0, 3)),
                                _conv_bn(192, 192, (7, 1), padding=(3, 0)), _conv_bn(192, 192, 3, 2)),
                  nn.MaxPool2d(3, 2)),
        _module_e(1280), _module_e(2048),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.5), nn.Linear(2048, 1000))  # fmt: skip


#: Measured model name -> builder taking the row's sequence length (None where fixed).
BUILDERS: dict[str, Callable[[int | None], Built]] = {
    "bert-base-squad": lambda seq: bert(12, 768, seq or 384),
    "bert-large-squad": lambda seq: bert(24, 1024, seq or 384),
    "bert-large-pretrain": lambda seq: bert(24, 1024, seq or 128, pretrain=True),
    "ncf-neumf": lambda _seq: ncf(),
    "lstm-lm-2x200": lambda _seq: lstm_lm(),
    "resnet15-cifar": lambda _seq: resnet_cifar(2),
    "resnet32-cifar": lambda _seq: resnet_cifar(5),
    "transformer-xl-base": lambda seq: transformer_xl(TXL_BASE.segment(seq)),
    "transformer-xl-large": lambda seq: transformer_xl(TXL_LARGE.segment(seq)),
    "resnet152": lambda size: _image_classifier(resnet152(), size or 224),
    "resnext101-32x4d": lambda size: _image_classifier(resnext101(), size or 224),
    "se-resnext101-32x4d": lambda size: _image_classifier(resnext101(squeeze=True), size or 224),
    "vgg16": lambda size: _image_classifier(VGG(VGG16_STAGES), size or 224),
    "alexnet": lambda size: _image_classifier(alexnet(), size or 227),
    "inception-v3": lambda size: _image_classifier(inception_v3(), size or 299),
}
