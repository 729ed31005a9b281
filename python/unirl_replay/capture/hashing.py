"""Salted, chained hashes of full token blocks: prefix structure without token ids.

The salt is a per-capture secret (``UNIRL_REPLAY_TRACE_SALT``, hex) that the driver creates and
passes to its child processes through the environment; it is never written to a trace, so the
hashes cannot be matched against a dictionary of token blocks.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from typing import List, Sequence

SALT_ENV = "UNIRL_REPLAY_TRACE_SALT"


def ensure_salt() -> bytes:
    """Create the capture salt in this process's environment (inherited by children)."""
    value = os.environ.get(SALT_ENV)
    if not value:
        value = secrets.token_hex(16)
        os.environ[SALT_ENV] = value
    return bytes.fromhex(value)


def load_salt() -> bytes:
    value = os.environ.get(SALT_ENV)
    if value:
        return bytes.fromhex(value)
    # No shared salt: hashes are still private, but not comparable across processes.
    return ensure_salt()


def block_hashes(token_ids: Sequence[int], block_size: int, salt: bytes) -> List[str]:
    """Chained hashes h_i = H_salt(h_{i-1} || block_i) over full blocks only (16 hex chars)."""
    out: List[str] = []
    prev = b""
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        block = token_ids[start : start + block_size]
        h = hashlib.blake2b(key=salt, digest_size=8)
        h.update(prev)
        h.update(b"".join(int(t).to_bytes(4, "little", signed=False) for t in block))
        prev = h.digest()
        out.append(prev.hex())
    return out
