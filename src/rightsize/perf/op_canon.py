"""The operations of one step as what they are, not as eager PyTorch happened to spell them.

perf/op_costs.py records every aten operation a step dispatches. The same network written
differently dispatches different memory-bound work around the same arithmetic (issue 40,
measured in benchmarks/results/gpu_variants.json): attention written with ``matmul`` and
``softmax`` scales, masks, normalises and drops out its score matrix in five kernels that
``scaled_dot_product_attention`` runs in one; ``.contiguous()`` copies Q, K and the context
for ``bmm``; ``nn.MultiheadAttention`` splits its packed projection by ``select``, whose
backward writes zero-filled copies and adds them; three Q, K, V projections launch three
GEMMs, three weight gradients and three bias sums where a fused QKV projection launches one
of each. :func:`canonical` rewrites a step's records so that each of these is counted once,
the same way, whatever the spelling — from the dispatched operations and the storages they
read and write, never from module types:

- **Attention.** A forward softmax over ``[..., sq, skv]`` that follows a batched matmul of
  shape ``(heads, sq, skv, d)`` is an attention. Every memory-bound operation on a tensor of
  its score matrix's shape (scaling, mask, softmax, dropout, in both phases), every scalar
  scaling of its Q or K (``[heads, s, d]``), and its matmuls become one ``attention`` record
  per phase: the matmuls' FLOPs, the traffic of Q, K, V and the output (and their
  gradients), and the GEMM shape. A fused kernel (``_scaled_dot_product_*``) becomes the
  same record. perf/op_timing.py times it as a GPU's attention kernels run it.
- **Layout.** Copies that only re-layout an operand (a ``clone`` whose result a GEMM,
  convolution or attention reads), the backward of views (``select_backward``,
  ``slice_backward``, a backward ``cat``/``stack`` re-assembling ``split``/``chunk``'s
  gradients) and the adds that sum those back are kind ``layout``: no traffic and no
  kernel, as when the consumer reads the strided operand itself.
- **One GEMM, one epilogue.** A separate ``add`` of a 1-D bias to a GEMM's result is the
  GEMM's epilogue (cuBLASLt fuses it; ``addmm`` already does).
- **Sibling GEMMs.** Forward GEMMs reading the same activation with the same (batch, M, K)
  — Q, K and V projected apart — are one GEMM of their summed N, as a fused projection
  runs it; in the backward, their weight gradients (reading that activation) are one GEMM
  of summed M, their input gradients (reading their weights) one of summed K whose
  accumulating adds it absorbs, and their bias sums one reduction.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable

from rightsize.perf.op_sheet import OpKind, OpRecord, attention_name, attention_parts
from rightsize.perf.op_timing import attention_gemms

#: Copies that move an operand's bytes without arithmetic.
COPY_OPS = frozenset({"clone", "copy_", "contiguous"})
#: The backward of views: gradients scattered into zeros or re-assembled from pieces.
VIEW_BACKWARD_OPS = frozenset({"select_backward", "slice_backward", "as_strided_backward"})
REASSEMBLE_OPS = frozenset({"cat", "stack"})  # in the backward: split/chunk/unbind's gradient
SCALING_OPS = frozenset({"mul", "div", "mul_", "div_"})
#: On the score matrix in the forward: an additive mask or bias, and dropout's random mask.
MASK_OPS = frozenset({"add", "add_", "masked_fill", "masked_fill_", "where"})
DROPOUT_OPS = frozenset({"bernoulli", "bernoulli_", "native_dropout", "rand_like", "uniform_"})


@dataclasses.dataclass(frozen=True)
class Attention:
    """One attention's shape: ``heads`` (batch x heads), query and key lengths, head size;
    and whether its scores are masked and dropped out."""

    heads: int
    sq: int
    skv: int
    d: int
    masked: bool = False
    dropout: bool = False

    def same_shape(self, gemm: tuple[float, ...]) -> bool:
        return tuple(int(v) for v in gemm) == (self.heads, self.sq, self.skv, self.d)

    @property
    def scores(self) -> int:
        return self.heads * self.sq * self.skv

    def owns_scores(self, record: OpRecord) -> bool:
        """A memory-bound operation on a tensor of this attention's score-matrix shape."""
        shape = record.shape
        return (not record.kind.matmul_like and len(shape) >= 2 and math.prod(shape) == self.scores
                and tuple(shape[-2:]) == (self.sq, self.skv))  # fmt: skip

    def owns_scaling(self, record: OpRecord) -> bool:
        """A scalar scaling of Q, K (or their gradients) in the heads' layout."""
        shape = record.shape
        rows = {(s, self.d) for s in (self.sq, self.skv)}
        return (record.name in SCALING_OPS and len(record.reads) == 1 and len(shape) >= 3
                and math.prod(shape[:-2]) == self.heads
                and (tuple(shape[-2:]) in rows or tuple(shape[-2:][::-1]) in rows))  # fmt: skip

    def gemms(self, phase: str) -> list[tuple[float, float, float, float]]:
        return attention_gemms(self.heads, self.sq, self.skv, self.d, phase)

    def owns_gemm(self, record: OpRecord) -> bool:
        """One of its matmuls, or one computed transposed (``dK^T = Q^T dS``)."""
        b, m, n, k = record.gemm
        gemms = self.gemms(record.phase)
        return record.kind is OpKind.GEMM and b > 1 and ((b, m, n, k) in gemms
                                                         or (b, n, m, k) in gemms)  # fmt: skip

    def record(self, phase: str, itemsize: int) -> OpRecord:
        """The attention as one operation: its matmuls' FLOPs, Q, K, V and the output read or
        written once (backward: those, the output's gradient, and Q, K, V's gradients)."""
        gemms = self.gemms(phase)
        flops = sum(2.0 * b * m * n * k for b, m, n, k in gemms)
        tensors = 2 * self.sq + 2 * self.skv if phase == "forward" else 4 * self.sq + 4 * self.skv
        moved = float(tensors * self.heads * self.d * itemsize)
        return OpRecord(attention_name(self.masked, self.dropout), OpKind.ATTENTION, phase,
                        flops, moved,
                        tuple(float(v) for v in (self.heads, self.sq, self.skv, self.d)),
                        itemsize=itemsize)  # fmt: skip


def attentions(records: list[OpRecord]) -> list[Attention]:
    """The attentions of a step: fused kernels, and forward softmaxes over a batched matmul's
    ``[..., sq, skv]`` result, with what their forward passes did to the scores."""
    found = []
    qk = {(int(r.gemm[0]), int(r.gemm[1]), int(r.gemm[2])): int(r.gemm[3])
          for r in records if r.kind is OpKind.GEMM and r.phase == "forward" and r.gemm[0] > 1}  # fmt: skip
    for r in records:
        if r.phase != "forward":
            continue
        if r.kind is OpKind.ATTENTION:
            parts = attention_parts(r.name)
            found.append(Attention(*(int(v) for v in r.gemm), "mask" in parts, "dropout" in parts))
        elif r.kind is OpKind.SOFTMAX and len(r.shape) >= 3:
            heads, sq, skv = math.prod(r.shape[:-2]), r.shape[-2], r.shape[-1]
            if (heads, sq, skv) in qk:
                bare = Attention(heads, sq, skv, qk[heads, sq, skv])
                names = {o.name for o in records if o.phase == "forward" and bare.owns_scores(o)}
                found.append(dataclasses.replace(bare, masked=bool(names & MASK_OPS),
                                                 dropout=bool(names & DROPOUT_OPS)))  # fmt: skip
    return found


def _written_by(records: Iterable[OpRecord]) -> set[int]:
    return {k for r in records for k in r.writes}


def _fold_attention(records: list[OpRecord]) -> list[OpRecord]:
    shapes = list(dict.fromkeys(attentions(records)))
    if not shapes:
        return records
    out: list[OpRecord] = []
    for r in records:
        owner = next((a for a in shapes if a.owns_gemm(r) or a.owns_scores(r) or a.owns_scaling(r)
                      or (r.kind is OpKind.ATTENTION and a.same_shape(r.gemm))), None)  # fmt: skip
        if owner is None:
            out.append(r)
            continue
        # one record per attention and phase, where its softmax (or fused kernel) ran
        anchor = r.kind is OpKind.ATTENTION or (r.kind is OpKind.SOFTMAX and owner.owns_scores(r))
        if anchor:
            out.append(owner.record(r.phase, r.itemsize))
    return out


def _as_layout(r: OpRecord) -> OpRecord:
    return dataclasses.replace(r, kind=OpKind.LAYOUT, flops=0.0, bytes=0.0,
                               gemm=(0.0, 0.0, 0.0, 0.0))  # fmt: skip


def _mark_layout(records: list[OpRecord]) -> list[OpRecord]:
    """Re-layout copies, views' backward and the adds that sum them, as kind ``layout``."""
    shapes = attentions(records)
    # a copy is a re-layout when what reads it computes on the operand (and could read it
    # strided) or is itself a re-layout (a view's gradient, re-assembled pieces)
    relayouts = [r.kind.matmul_like or any(a.owns_scaling(r) for a in shapes)
                 or r.name in VIEW_BACKWARD_OPS or (r.name in REASSEMBLE_OPS and r.phase == "backward")
                 for r in records]  # fmt: skip
    out = list(records)
    layout_keys: set[int] = set()
    for i, r in enumerate(records):
        reads = {k for k, _, _ in r.reads}
        if r.name in COPY_OPS:
            readers = [j for j in range(i + 1, len(records))
                       if set(r.writes) & {k for k, _, _ in records[j].reads}]  # fmt: skip
            layout = any(relayouts[j] for j in readers)
        elif r.name in VIEW_BACKWARD_OPS or (r.name in REASSEMBLE_OPS and r.phase == "backward"):
            layout = True
        else:
            layout = r.name in ("add", "add_") and bool(reads) and reads <= layout_keys
        if layout:
            out[i] = _as_layout(r)
            layout_keys.update(r.writes)
    return out


def _drop_bias_epilogues(records: list[OpRecord]) -> list[OpRecord]:
    """A separate 1-D bias add on a GEMM's result belongs to the GEMM."""
    gemm_out = _written_by(r for r in records if r.kind is OpKind.GEMM)

    def epilogue(r: OpRecord) -> bool:
        if r.name != "add" or len(r.reads) != 2:
            return False
        (a, _, a_dim), (b, _, b_dim) = r.reads
        return (a in gemm_out and b_dim == 1) or (b in gemm_out and a_dim == 1)

    return [r for r in records if not epilogue(r)]


def _merge(members: list[OpRecord], dim: int, shared_bytes: float = 0.0) -> OpRecord:
    """Sibling operations as one: FLOPs and bytes summed (a shared operand read once), the
    GEMM dimension ``dim`` summed."""
    first = members[0]
    gemm = list(first.gemm)
    if dim >= 0:
        gemm[dim] = sum(m.gemm[dim] for m in members)
    return dataclasses.replace(
        first, flops=sum(m.flops for m in members),
        bytes=sum(m.bytes for m in members) - (len(members) - 1) * shared_bytes,
        gemm=tuple(gemm), reads=tuple(x for m in members for x in m.reads),
        writes=tuple(k for m in members for k in m.writes))  # fmt: skip


def _sibling_groups(records: list[OpRecord]) -> list[tuple[list[int], int, float]]:
    """Forward GEMMs reading one activation at one (batch, M, K): (indices, its key, bytes)."""
    by_operand: dict[tuple, list[int]] = {}
    for i, r in enumerate(records):
        if r.kind is OpKind.GEMM and r.phase == "forward" and r.gemm[0] == 1:
            for key, nbytes, ndim in r.reads:
                if ndim >= 2:
                    by_operand.setdefault((r.name, r.gemm[1], r.gemm[3], key, nbytes), []).append(i)
    groups, taken = [], set()
    for (_, _, _, key, nbytes), members in by_operand.items():
        if len(members) > 1 and not taken & set(members):
            groups.append((members, key, nbytes))
            taken.update(members)
    return groups


def _reading(records: list[OpRecord], among: list[int], keys: set[int],
             kind: OpKind | None = None, names: frozenset[str] | None = None) -> list[int]:
    """The indices in ``among`` whose record reads one of ``keys`` (of a kind, or names)."""
    return [i for i in among if (kind is None or records[i].kind is kind)
            and (names is None or records[i].name in names)
            and keys & {k for k, _, _ in records[i].reads}]  # fmt: skip


def _merge_backward(records: list[OpRecord], drop: set[int], n: int, shared: int,
                    shared_bytes: float, weights: set[int]) -> None:
    """The backward of ``n`` merged sibling GEMMs, merged alike (in place)."""
    backward = [i for i, r in enumerate(records) if r.phase == "backward" and i not in drop]
    wgrad = _reading(records, backward, {shared}, OpKind.GEMM)  # read the shared activation
    dgrad = _reading(records, backward, weights, OpKind.GEMM)  # read the siblings' weights
    # the shared activation read once by the weight gradients; its gradient written once
    for group, dim in ((wgrad, 1), (dgrad, 3)):
        if len(group) == n:
            records[group[0]] = _merge([records[i] for i in group], dim, shared_bytes)
            drop.update(group[1:])
    # the outputs' gradients, read by the weight and input gradients, and by the bias sums
    grads = {k for i in wgrad + dgrad for k, _, _ in records[i].reads
             if k != shared and k not in weights}  # fmt: skip
    sums = _reading(records, [i for i in backward if i not in drop], grads, OpKind.REDUCTION)
    if len(sums) == n:
        records[sums[0]] = _merge([records[i] for i in sums], -1)
        drop.update(sums[1:])
    if len(dgrad) == n:  # the input gradients' accumulation is the merged GEMM's own (its K)
        partial = {k for i in dgrad for k in records[i].writes}
        drop.update(_reading(records, backward, partial, names=frozenset({"add", "add_"}))[: n - 1])


def _merge_siblings(records: list[OpRecord]) -> list[OpRecord]:
    """Q, K and V projected apart, merged as a fused projection runs them (module docstring)."""
    records = list(records)
    drop: set[int] = set()
    for members, shared, shared_bytes in _sibling_groups(records):
        weights = {k for i in members for k, _, ndim in records[i].reads if k != shared and ndim == 2}
        records[members[0]] = _merge([records[i] for i in members], 2, shared_bytes)
        drop.update(members[1:])
        _merge_backward(records, drop, len(members), shared, shared_bytes, weights)
    return [r for i, r in enumerate(records) if i not in drop]


def canonical(records: list[OpRecord]) -> list[OpRecord]:
    """One step's records, each operation counted as what it is (module docstring)."""
    records = _mark_layout(records)
    records = _fold_attention(records)
    records = _drop_bias_epilogues(records)
    return _merge_siblings(records)
