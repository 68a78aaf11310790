"""T5's bucketed relative positions, op for op as transformers' ``T5Attention._relative_position_bucket``.

For a query at position i and a key at position j, r = j - i. Bidirectional (encoder): half the
buckets for r > 0; |r| < max_exact = buckets/2 gets its own bucket, larger |r| a logarithmic one up
to ``max_distance``. Past-only (decoder): r > 0 is clipped to 0 and all buckets cover -r >= 0. The
logarithm is taken in float32, as transformers does, so the buckets agree bit for bit.
"""

from __future__ import annotations

import math

import torch


def relative_buckets(relative_position: torch.Tensor, bidirectional: bool, num_buckets: int,
                     max_distance: int) -> torch.Tensor:
    """Bucket index [same shape] of each relative position r = key - query (integer tensor)."""
    buckets = torch.zeros_like(relative_position, dtype=torch.long)
    if bidirectional:
        num_buckets //= 2
        buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    large = max_exact + (torch.log(relative_position.float() / max_exact) / math.log(max_distance / max_exact)
                         * (num_buckets - max_exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return buckets + torch.where(is_small, relative_position, large)


def relative_logit_bias(rel, query_positions: torch.Tensor, key_positions: torch.Tensor) -> torch.Tensor:
    """[H, T, S] float64: ``rel.table[bucket(j - i), h]`` for query positions i and key positions j."""
    r = key_positions[None, :].to(torch.long) - query_positions[:, None].to(torch.long)
    b = relative_buckets(r, rel.bidirectional, rel.num_buckets, rel.max_distance)
    return rel.table.to(torch.float64)[b].permute(2, 0, 1)


def unreachable_buckets(bidirectional: bool, num_buckets: int, max_distance: int) -> int:
    """Buckets no pair of positions ever uses, however long the sequence. Bidirectional bucketing
    has one: the positive half's offset + 0 would need r > 0 with |r| = 0. Beyond ``max_distance``
    every r falls in the last bucket of its side, so r in [-4 D, 4 D] (D = max(max_distance,
    num_buckets)) covers every reachable bucket."""
    D = 4 * max(max_distance, num_buckets)
    used = relative_buckets(torch.arange(-D, D + 1), bidirectional, num_buckets, max_distance).unique()
    return num_buckets - int(used.numel())
