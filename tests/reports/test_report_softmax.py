"""The terminal and HTML summaries say what changes the softmax beyond its scale (soft-capping,
attention sinks), since that decides which biases are live; plain models get no such line."""

from __future__ import annotations


