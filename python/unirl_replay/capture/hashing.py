"""Salted, chained hashes of token blocks: prefix structure without token ids.

The salt is a per-capture secret (``UNIRL_REPLAY_TRACE_SALT``, hex) that the driver creates and
passes to its child processes through the environment; it is never written to a trace (only its
identity, :func:`salt_id`, a truncated sha256), so the hashes cannot be matched against a
dictionary of token blocks.

Hash i covers tokens ``[0, min((i+1)*block, n))`` (chained like vLLM's prefix-cache block hash):
equal hashes mean equal prefixes. The last block may be partial, so a prompt of n tokens has
exactly ``ceil(n / block)`` hashes (the contract's ``PrefixBlocks`` rule; field-pitfalls 3).
"""

from __future__ import annotations

import hashlib
import os
import secrets
from typing import List, Sequence

SALT_ENV = "UNIRL_REPLAY_TRACE_SALT"
#: Written to ``TraceManifest.privacy.hash_algorithm``.
HASH_ALGORITHM = "blake2b-64-keyed-chained-uint32le-blocks"


def ensure_salt() -> bytes:
    """Create the capture salt in this process's environment (inherited by children)."""
    value = os.environ.get(SALT_ENV)
    if not value:
        value = secrets.token_hex(16)
        os.environ[SALT_ENV] = value
    return bytes.fromhex(value)


SALT_FILE = ".salt"


def load_salt(trace_dir: str | None = None) -> bytes:
    """The run's salt: ``UNIRL_REPLAY_TRACE_SALT``, else ``TRACE_DIR/raw/.salt`` (created once, mode
    0600, by the first process of the run that needs it; every later process reads the same file, so
    hashes from different engines stay comparable). The raw file is never copied into a trace."""
    value = os.environ.get(SALT_ENV)
    if value:
        return bytes.fromhex(value)
    if trace_dir:
        path = os.path.join(trace_dir, "raw", SALT_FILE)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            import time

            for _ in range(200):  # another process is writing it (32 bytes): wait for it
                text = open(path).read().strip()
                if len(text) == 32:
                    break
                time.sleep(0.01)
            value = text
        else:
            value = secrets.token_hex(16)
            os.write(fd, value.encode())
            os.close(fd)
        os.environ[SALT_ENV] = value
        return bytes.fromhex(value)
    # No shared salt: hashes are still private, but not comparable across processes.
    return ensure_salt()


def salt_id(salt: bytes) -> str:
    """Identity of a salt (first 16 hex chars of sha256 over a domain tag and the salt)."""
    return hashlib.sha256(b"unirl-replay-salt-id\0" + salt).hexdigest()[:16]


def prefix_block_hashes(token_ids: Sequence[int], block_size: int, salt: bytes) -> List[int]:
    """Chained keyed hashes ``h_i = H_salt(h_{i-1} || block_i)`` as uint64, one per block,
    the last block possibly partial: ``ceil(len(token_ids) / block_size)`` values."""
    if block_size <= 0:
        raise ValueError(f"block_size must be > 0, got {block_size}")
    out: List[int] = []
    prev = b""
    for start in range(0, len(token_ids), block_size):
        block = token_ids[start : start + block_size]
        h = hashlib.blake2b(key=salt, digest_size=8)
        h.update(prev)
        h.update(len(block).to_bytes(4, "little"))
        h.update(b"".join(int(t).to_bytes(4, "little", signed=False) for t in block))
        prev = h.digest()
        out.append(int.from_bytes(prev, "little"))
    return out
