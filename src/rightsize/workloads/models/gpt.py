"""A small GPT-style decoder-only causal transformer language model.

The architecture is GPT-2's (Radford et al., "Language Models are Unsupervised
Multitask Learners", 2019; after Vaswani et al., "Attention Is All You Need",
NeurIPS 2017): learned token and position embeddings, pre-LayerNorm blocks of
causal multi-head self-attention and a 4x GELU MLP, a final LayerNorm and a
linear language-model head. The head is deliberately *untied* from the token
embedding: a tied weight would belong to two modules, and a profiler that
attributes parameters to the modules owning them would count it twice. At the
defaults (vocab 8192, context 128, 4 layers, 4 heads, d_model 256) it has
7,386,624 parameters.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with a fused ``qkv`` projection."""

    def __init__(self, d_model: int, n_head: int, dropout: float):
        super().__init__()
        if d_model % n_head != 0:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_head ({n_head})")
        self.n_head = n_head
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.attn_dropout = dropout
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        # (N, T, C) -> (N, heads, T, head_dim), the layout SDPA expects.
        q, k, v = (z.view(n, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.attn_dropout if self.training else 0.0, is_causal=True
        )
        y = y.transpose(1, 2).contiguous().view(n, t, c)
        return self.resid_dropout(self.proj(y))


class MLP(nn.Module):
    """Position-wise feed-forward network, 4x wide with GELU."""

    def __init__(self, d_model: int, dropout: float):
        super().__init__()
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.act = nn.GELU()
        self.proj = nn.Linear(4 * d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.proj(self.act(self.fc(x))))


class Block(nn.Module):
    """Pre-LN transformer block: x + attn(ln1(x)), then x + mlp(ln2(x))."""

    def __init__(self, d_model: int, n_head: int, dropout: float):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_head, dropout)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model, dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """``tok_emb`` + ``pos_emb``, ``blocks``, ``ln_f`` and an untied ``lm_head``."""

    def __init__(
        self,
        vocab_size: int,
        block_size: int,
        n_layer: int,
        n_head: int,
        d_model: int,
        dropout: float,
    ):
        super().__init__()
        self.block_size = block_size
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(block_size, d_model)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.Sequential(*(Block(d_model, n_head, dropout) for _ in range(n_layer)))
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self._init_weights(n_layer)

    def _init_weights(self, n_layer: int) -> None:
        # GPT-2 init: N(0, 0.02) everywhere, and the projections that write into
        # the residual stream scaled by 1/sqrt(2 * n_layer) so the stream's
        # variance does not grow with depth.
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
        for block in self.blocks:
            for proj in (block.attn.proj, block.mlp.proj):
                nn.init.normal_(proj.weight, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Map token ids ``[N, T]`` (T <= block_size) to next-token logits ``[N, T, vocab]``."""
        t = idx.shape[1]
        if t > self.block_size:
            raise ValueError(f"sequence length {t} exceeds block_size {self.block_size}")
        pos = torch.arange(t, device=idx.device)
        x = self.dropout(self.tok_emb(idx) + self.pos_emb(pos))
        x = self.ln_f(self.blocks(x))
        return self.lm_head(x)


def gpt_small(
    vocab_size: int = 8192,
    block_size: int = 128,
    n_layer: int = 4,
    n_head: int = 4,
    d_model: int = 256,
    dropout: float = 0.0,
) -> GPT:
    """Build the small causal transformer LM (7,386,624 params at the defaults)."""
    return GPT(vocab_size, block_size, n_layer, n_head, d_model, dropout)
