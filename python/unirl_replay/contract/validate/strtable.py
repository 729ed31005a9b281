"""Compact tables for ``validate``'s state at a million requests (issue 17: flat memory).

A dict keyed by request id costs about 150 bytes a request (the id's ``str`` object, a boxed int,
the dict slot); validate keeps one entry per request and per trajectory until the last record.
:class:`StrTable` holds distinct strings in flat arrays instead (their UTF-8 bytes, offsets,
hashes, an open-addressing index): about 40 bytes a 13-character id. The mappings below are the
dict-shaped views the rule groups read (``get``, ``in``, ``[k]``, ``[k] = v``, ``items``), so a
rule does not know which it reads: the gate's fast pass (``fast.py``) still builds plain dicts.

Exact, not probabilistic: two strings share an entry only when their UTF-8 bytes are equal (the
hash only finds the candidates). Keys are never removed. Iteration is in first-added order, as a
dict's. Lone surrogates (possible in a JSON ``\\ud800`` escape) are kept (``surrogatepass``).
"""

from __future__ import annotations

from array import array
from itertools import chain
from typing import Any, Iterator

__all__ = ["StrTable", "OrdView", "NamesView", "PackedMap", "OrdColumn", "SideColumn", "IntColumn", "PairList",
           "OrdInt", "SampleColumn", "NoIntern", "OrdPair", "OrdSet", "SideInt", "IntRows"]

_ENC = "utf-8"
_ERR = "surrogatepass"
_U64 = (1 << 64) - 1
_MISSING = object()


class StrTable:
    """Distinct strings numbered 0, 1, 2, ... in first-added order, in flat arrays.

    ``find(s)`` -> its number or -1; ``add(s)`` -> its number (new or existing); ``key(i)`` -> the
    string numbered ``i``. Probing is CPython's dict scheme (perturbed by the high hash bits) at a
    load of at most 2/3. Memory: the UTF-8 bytes, 8 bytes of offset, 8 of hash and 6-12 of index
    per string.
    """

    __slots__ = ("_blob", "_off", "_hash", "_slots", "_mask", "_lk", "_le", "_ls", "_lkb")

    def __init__(self, keys: Any = ()):
        self._blob = bytearray()
        self._off = array("q", [0])
        self._hash = array("q")
        self._mask = 7
        self._slots = array("i", [-1]) * 8
        # the last key looked up and its answer (entry, or -1 with its free slot and bytes): the rules ask
        # about one request id several times in a row (unique? enter it, its group, its outcome...)
        self._lk: str | None = None
        self._le, self._ls, self._lkb = -1, -1, None
        for k in keys:
            self.add(k)

    def __len__(self) -> int:
        return len(self._hash)

    def _probe(self, k: str) -> int:
        """The entry number of ``k`` or -1, remembered with its free slot (``_ls``) for :meth:`add`."""
        h = hash(k)
        slots, hs, mask = self._slots, self._hash, self._mask
        perturb = h & _U64
        i = perturb & mask
        kb = None
        while True:
            e = slots[i]
            if e < 0:
                self._lk, self._le, self._ls, self._lkb = k, -1, i, kb
                return -1
            if hs[e] == h:
                if kb is None:
                    kb = k.encode(_ENC, _ERR)
                off = self._off
                o = off[e]
                if off[e + 1] - o == len(kb) and self._blob.startswith(kb, o):
                    self._lk, self._le = k, e
                    return e
            perturb >>= 5
            i = (i * 5 + perturb + 1) & mask

    def find(self, k: str) -> int:
        """The number of ``k``, or -1 when it was never added (-1 for a non-``str``)."""
        if k.__class__ is not str:
            return -1
        if k == self._lk:
            return self._le
        return self._probe(k)

    def add(self, k: str) -> int:
        """The number of ``k``, adding it (the next number) when new. Raises TypeError for a non-str."""
        if k.__class__ is not str:
            raise TypeError(f"StrTable keys are str, not {type(k).__name__}")
        e = self._le if k == self._lk else self._probe(k)
        if e >= 0:
            return e
        kb = self._lkb
        e = len(self._hash)
        self._blob += kb if kb is not None else k.encode(_ENC, _ERR)
        self._off.append(len(self._blob))
        self._hash.append(hash(k))
        self._slots[self._ls] = e
        self._lk, self._le = k, e
        if 3 * (e + 1) > 2 * (self._mask + 1):
            self._grow()
        return e

    def _grow(self) -> None:
        size = (self._mask + 1) * (4 if len(self._hash) < 50_000 else 2)
        mask = size - 1
        slots = array("i", [-1]) * size
        for e, h in enumerate(self._hash):
            perturb = h & _U64
            i = perturb & mask
            while slots[i] >= 0:
                perturb >>= 5
                i = (i * 5 + perturb + 1) & mask
            slots[i] = e
        self._slots, self._mask = slots, mask

    def key(self, i: int) -> str:
        """The string numbered ``i`` (IndexError outside 0 .. len - 1)."""
        if not 0 <= i < len(self._hash):
            raise IndexError(f"StrTable entry {i} of {len(self._hash)}")
        off = self._off
        return self._blob[off[i]:off[i + 1]].decode(_ENC, _ERR)

    def __iter__(self) -> Iterator[str]:
        return (self.key(i) for i in range(len(self._hash)))


class OrdView:
    """A :class:`StrTable` read as a dict ``str -> its number`` (``traj_ord``)."""

    __slots__ = ("table",)

    def __init__(self, table: StrTable):
        self.table = table

    def get(self, k: str, default: Any = None) -> Any:
        e = self.table.find(k)
        return default if e < 0 else e

    def __getitem__(self, k: str) -> int:
        e = self.table.find(k)
        if e < 0:
            raise KeyError(k)
        return e

    def __contains__(self, k: object) -> bool:
        return self.table.find(k) >= 0  # type: ignore[arg-type]  # (-1 for a non-str)

    def __len__(self) -> int:
        return len(self.table)

    def __iter__(self) -> Iterator[str]:
        return iter(self.table)

    def __eq__(self, other: object) -> bool:  # the same ids, numbered alike
        return list(self) == list(other) if isinstance(other, OrdView) else NotImplemented

    __hash__ = None  # type: ignore[assignment]


class NamesView:
    """A :class:`StrTable` read as a list ``number -> str`` (``traj_names``)."""

    __slots__ = ("table",)

    def __init__(self, table: StrTable):
        self.table = table

    def __getitem__(self, i: int) -> str:
        return self.table.key(i)

    def __len__(self) -> int:
        return len(self.table)

    def __iter__(self) -> Iterator[str]:
        return iter(self.table)

    def __eq__(self, other: object) -> bool:  # the same ids in the same order (a list compares too)
        return list(self) == list(other) if isinstance(other, (NamesView, list)) else NotImplemented

    __hash__ = None  # type: ignore[assignment]


class PackedMap:
    """``str -> int`` for the packed request facts (``context._pack``: trajectory ordinal << 53 |
    53 low bits), negative values included (``OutcomeIdsSeen`` marks a seen id by bit inversion):
    the ordinal part (``v >> 53``) and the low part (``v & (2^53 - 1)``) in two int64 arrays, so
    ``(hi << 53) | lo`` is ``v`` again for any ``v`` with ``|v >> 53| < 2^63``."""

    __slots__ = ("keys_", "hi", "lo")
    _LOW = (1 << 53) - 1

    def __init__(self) -> None:
        self.keys_ = StrTable()
        self.hi = array("q")
        self.lo = array("q")

    def get(self, k: str, default: Any = None) -> Any:
        e = self.keys_.find(k)
        return default if e < 0 else (self.hi[e] << 53) | self.lo[e]

    def __getitem__(self, k: str) -> int:
        e = self.keys_.find(k)
        if e < 0:
            raise KeyError(k)
        return (self.hi[e] << 53) | self.lo[e]

    def __setitem__(self, k: str, v: int) -> None:
        t = self.keys_
        n = len(t)
        e = t.add(k)
        if e == n:
            self.hi.append(v >> 53)
            self.lo.append(v & self._LOW)
        else:
            self.hi[e] = v >> 53
            self.lo[e] = v & self._LOW

    def __contains__(self, k: object) -> bool:
        return self.keys_.find(k) >= 0  # type: ignore[arg-type]  # (-1 for a non-str)

    def __len__(self) -> int:
        return len(self.keys_)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys_)

    def find(self, k: str) -> int:
        """The entry number of ``k`` (-1: absent): what :class:`SideColumn` is keyed by."""
        return self.keys_.find(k)

    def items(self) -> Iterator[tuple[str, int]]:
        hi, lo, t = self.hi, self.lo, self.keys_
        return ((t.key(e), (hi[e] << 53) | lo[e]) for e in range(len(t)))

    def values(self) -> Iterator[int]:
        hi, lo = self.hi, self.lo
        return ((hi[e] << 53) | lo[e] for e in range(len(hi)))

    def keys(self) -> Iterator[str]:
        return iter(self.keys_)

    def unmark_all(self) -> None:
        """Every negative value ``v`` back to ``~v`` (``OutcomeIdsSeen.restore``) in one array pass."""
        hi, lo, low = self.hi, self.lo, self._LOW
        for e in range(len(hi)):
            if hi[e] < 0:  # v < 0 exactly when its ordinal part is (lo is never negative)
                hi[e] = ~hi[e]
                lo[e] ^= low

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PackedMap):
            return list(self.items()) == list(other.items())
        if isinstance(other, dict):
            return dict(self.items()) == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


class _Interned:
    """Values shared by many keys (group ids, (batch, engine) pairs): each distinct one once."""

    __slots__ = ("num", "vals")

    def __init__(self) -> None:
        self.num: dict[Any, int] = {}
        self.vals: list[Any] = []

    def of(self, v: Any) -> int:
        n = self.num.get(v)
        if n is None:
            n = self.num[v] = len(self.vals)
            self.vals.append(v)
        return n


class _TableValues:
    """:class:`_Interned`'s interface over a :class:`StrTable` (``str`` values only): values that are
    as many as the keys (a group id per request in a GRPO trace) cost their bytes in the table, not a
    dict entry each. ``vals[n]`` reads the string numbered ``n``."""

    __slots__ = ("table", "vals")

    def __init__(self, table: StrTable) -> None:
        self.table = table
        self.vals = NamesView(table)

    def of(self, v: str) -> int:
        return self.table.add(v)


class OrdColumn:
    """A dict ``str -> value`` whose keys are numbered by a shared :class:`StrTable` (setting a key
    adds it there, as ``TraceState._ord`` would) and whose values are interned: 4 bytes a key.
    A ``set`` value (mutable: ``sp_traj_lineage``'s several triples) goes to ``extra`` by key number.
    ``values``: a :class:`StrTable` the (then ``str``-only) values are numbered in instead of a pool
    of their own (when they are many: a group id per trajectory)."""

    __slots__ = ("table", "col", "pool", "extra", "n")

    def __init__(self, table: StrTable, values: StrTable | None = None):
        self.table = table
        self.col = array("i")
        self.pool = _Interned() if values is None else _TableValues(values)
        self.extra: dict[int, Any] = {}
        self.n = 0

    def _slot(self, k: str) -> int:
        e = self.table.find(k)
        return -1 if e < 0 or e >= len(self.col) or self.col[e] == -1 else e

    def __setitem__(self, k: str, v: Any) -> None:
        e = self.table.add(k)
        col = self.col
        if e >= len(col):
            col.extend(array("i", [-1]) * (e + 1 - len(col)))
        if col[e] == -1:
            self.n += 1
        if isinstance(v, set):
            col[e] = -2
            self.extra[e] = v
        else:
            col[e] = self.pool.of(v)
            self.extra.pop(e, None)

    def _value(self, e: int) -> Any:
        c = self.col[e]
        return self.extra[e] if c == -2 else self.pool.vals[c]

    def get(self, k: str, default: Any = None) -> Any:
        e = self._slot(k)
        return default if e < 0 else self._value(e)

    def __getitem__(self, k: str) -> Any:
        e = self._slot(k)
        if e < 0:
            raise KeyError(k)
        return self._value(e)

    def __contains__(self, k: object) -> bool:
        return self._slot(k) >= 0  # type: ignore[arg-type]

    def __len__(self) -> int:
        return self.n

    def ordinals(self) -> Iterator[int]:
        """The key numbers set, in number order."""
        col = self.col
        return (e for e in range(len(col)) if col[e] != -1)

    def has(self, e: int) -> bool:
        return 0 <= e < len(self.col) and self.col[e] != -1

    def at(self, e: int, default: Any = None) -> Any:
        return self._value(e) if self.has(e) else default

    def keys(self) -> Iterator[str]:
        key = self.table.key
        return (key(e) for e in self.ordinals())

    __iter__ = keys

    def items(self) -> Iterator[tuple[str, Any]]:
        key = self.table.key
        return ((key(e), self._value(e)) for e in self.ordinals())

    def update(self, pairs: Any) -> None:
        for k, v in pairs:
            self[k] = v

    def setdefault(self, k: str, default: Any = None) -> Any:
        """``dict.setdefault``: a ``set`` default is stored as is (``extra``), so it can be added to."""
        e = self._slot(k)
        if e >= 0:
            return self._value(e)
        self[k] = default
        return default


class SideColumn:
    """A dict ``request id -> value`` over the keys of a :class:`PackedMap` (a key must be entered
    there first), values interned: 4 bytes a request (``req_group``). Iteration: the map's order.

    ``values``: a :class:`StrTable` the (then ``str``-only) values are numbered in, as
    :class:`OrdColumn`'s. ``other``: a key not (yet) in the map is kept in a plain dict instead of
    refused (``member_group``: a SAMPLES group may list an id no request has, or one a later record
    enters); iteration then gives the map's keys first, then those, in the order they were set."""

    __slots__ = ("keys_", "col", "pool", "n", "other")

    def __init__(self, keys: PackedMap, values: StrTable | None = None, other: bool = False):
        self.keys_ = keys
        self.col = array("i")
        self.pool = _Interned() if values is None else _TableValues(values)
        self.n = 0
        self.other: dict[str, Any] | None = {} if other else None

    def __setitem__(self, k: str, v: Any) -> None:
        other = self.other
        e = self.keys_.find(k)
        if other is not None and (e < 0 or k in other):
            if k not in other:
                self.n += 1
            other[k] = v
            return
        if e < 0:
            raise KeyError(f"{k!r} is not in the request table")
        col = self.col
        if e >= len(col):
            col.extend(array("i", [-1]) * (e + 1 - len(col)))
        if col[e] == -1:
            self.n += 1
        col[e] = self.pool.of(v)

    def _slot(self, k: object) -> int:
        if k.__class__ is not str:
            return -1
        e = self.keys_.find(k)  # type: ignore[arg-type]
        return -1 if e < 0 or e >= len(self.col) or self.col[e] == -1 else e

    def get(self, k: str, default: Any = None) -> Any:
        e = self._slot(k)
        if e < 0:
            return default if self.other is None else self.other.get(k, default)
        return self.pool.vals[self.col[e]]

    def __getitem__(self, k: str) -> Any:
        e = self._slot(k)
        if e < 0:
            if self.other is not None and k in self.other:
                return self.other[k]
            raise KeyError(k)
        return self.pool.vals[self.col[e]]

    def __contains__(self, k: object) -> bool:
        return self._slot(k) >= 0 or (self.other is not None and k in self.other)

    def __len__(self) -> int:
        return self.n

    def __bool__(self) -> bool:
        return self.n > 0

    def setdefault(self, k: str, default: Any = None) -> Any:
        v = self.get(k, _MISSING)
        if v is _MISSING:
            self[k] = v = default
        return v

    def items(self) -> Iterator[tuple[str, Any]]:
        col, vals, key = self.col, self.pool.vals, self.keys_.keys_.key
        mine = ((key(e), vals[col[e]]) for e in range(len(col)) if col[e] != -1)
        if not self.other:
            return mine
        return chain(mine, list(self.other.items()))

    def keys(self) -> Iterator[str]:
        return (k for k, _ in self.items())

    __iter__ = keys

    def values(self) -> Iterator[Any]:
        return (v for _, v in self.items())


class IntColumn:
    """A ``Counter`` keyed by small non-negative ints (trajectory ordinals) in an int64 array:
    ``c[o] += 1``, ``c.get(o, 0)``; a missing key reads 0."""

    __slots__ = ("col",)

    def __init__(self, counts: Any = ()):
        self.col = array("q", counts)

    def __getitem__(self, o: int) -> int:
        return self.col[o] if 0 <= o < len(self.col) else 0

    def get(self, o: int, default: int = 0) -> int:
        return self.col[o] if 0 <= o < len(self.col) and self.col[o] else default

    def __setitem__(self, o: int, v: int) -> None:
        if o < 0:
            raise KeyError(o)
        col = self.col
        if o >= len(col):
            col.extend(array("q", [0]) * (o + 1 - len(col)))
        col[o] = v


class PairList:
    """A list of ``(int, int)`` pairs in one int64 array (``sp_claims``)."""

    __slots__ = ("flat",)

    def __init__(self) -> None:
        self.flat = array("q")

    def append(self, pair: tuple[int, int]) -> None:
        self.flat.extend(pair)

    def extend(self, pairs: Any) -> None:
        for p in pairs:
            self.flat.extend(p)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        f = self.flat
        return ((f[i], f[i + 1]) for i in range(0, len(f), 2))

    def __len__(self) -> int:
        return len(self.flat) // 2


class OrdInt:
    """A dict ``str -> int`` whose keys are numbered by a shared :class:`StrTable` (setting a key adds
    it there), the values in an int64 array: 9 bytes a key (``group_line``, ``group_unit``). Any int64
    value; with ``unsigned``, any value in 0 .. 2^64 - 1 instead (``sp_group_hash``'s sums).
    ``counter``: a missing key reads 0 (a ``Counter``); else ``[k]`` raises KeyError. Iteration: in the
    table's order of the keys set (first named, which need not be the order they were set)."""

    __slots__ = ("table", "col", "has_", "n", "counter", "unsigned")

    def __init__(self, table: StrTable, *, counter: bool = False, unsigned: bool = False):
        self.table = table
        self.col = array("q")
        self.has_ = bytearray()
        self.n = 0
        self.counter = counter
        self.unsigned = unsigned

    def _slot(self, k: object) -> int:
        e = self.table.find(k)  # type: ignore[arg-type]  # (-1 for a non-str)
        return e if 0 <= e < len(self.has_) and self.has_[e] else -1

    def __setitem__(self, k: str, v: int) -> None:
        e = self.table.add(k)
        has = self.has_
        if self.unsigned and v >= 1 << 63:
            v -= 1 << 64
        n = len(has)
        if e == n:  # the usual case: the next key
            has.append(1)
            self.col.append(v)
            self.n += 1
            return
        if e > n:
            has.extend(bytes(e + 1 - n))
            self.col.extend(array("q", [0]) * (e + 1 - n))
        if not has[e]:
            has[e] = 1
            self.n += 1
        self.col[e] = v

    def _val(self, e: int) -> int:
        v = self.col[e]
        return v + (1 << 64) if self.unsigned and v < 0 else v

    def get(self, k: str, default: Any = None) -> Any:
        e = self._slot(k)
        return default if e < 0 else self._val(e)

    def __getitem__(self, k: str) -> int:
        e = self._slot(k)
        if e < 0:
            if self.counter:
                return 0
            raise KeyError(k)
        return self._val(e)

    def __contains__(self, k: object) -> bool:
        return self._slot(k) >= 0

    def __len__(self) -> int:
        return self.n

    def ordinals(self) -> Iterator[int]:
        """The key numbers set, in number order."""
        has = self.has_
        return (e for e in range(len(has)) if has[e])

    def has(self, e: int) -> bool:
        return 0 <= e < len(self.has_) and self.has_[e] == 1

    def at(self, e: int, default: Any = None) -> Any:
        """The value of key number ``e`` (``default`` when unset): lookups between tables on one
        :class:`StrTable` by number, without the key's string."""
        return self._val(e) if self.has(e) else default

    def keys(self) -> Iterator[str]:
        key = self.table.key
        return (key(e) for e in self.ordinals())

    __iter__ = keys

    def items(self) -> Iterator[tuple[str, int]]:
        key = self.table.key
        return ((key(e), self._val(e)) for e in self.ordinals())

    def values(self) -> Iterator[int]:
        return (self._val(e) for e in self.ordinals())


class SampleColumn:
    """A dict ``request id -> tuple of its sample ids`` over the keys of a :class:`PackedMap` (a key
    must be entered there first), about 20 bytes a request in UniRL's shape (a tuple of ``str``
    costs about 100 bytes a sample).

    UniRL names the n samples a request forks from sample ``P`` ``P/0 .. P/{n-1}``
    (``Sample.fork``: ``child_id(P, j)``), and in batch GRPO ``P`` is the group's root id. Such a
    request is stored as ``P`` and n: ``P`` as its number in ``names`` (the group table: nothing
    stored) when it is there, else its UTF-8 bytes once. Any other tuple is stored sample by sample
    (every id's bytes in one buffer, 8 bytes of offset a sample). Exact either way: the derived form
    is taken only when every id equals ``f"{P}/{j}"``, and ``get`` builds the tuple again (equal,
    not the same object)."""

    __slots__ = ("keys_", "names", "col", "first", "ends", "blob", "form", "ref")

    def __init__(self, keys: PackedMap, names: StrTable | None = None):
        self.keys_ = keys
        self.names = names           # strings a derived form's P may be found in (the group ids)
        self.col = array("i")        # request entry -> its slot (-1: none)
        self.first = array("q", [0])  # slot -> its first entry's number (slot s: first[s] .. first[s + 1] - 1)
        self.ends = array("q", [0])   # entry number -> the end of its bytes (entry m: ends[m] .. ends[m + 1])
        self.blob = bytearray()
        self.form = array("i")       # slot -> 0: its entries are the ids; n > 0: P/0 .. P/{n-1}, P its one entry;
        #                              n < 0: the same with -n samples, P = names.key(ref[slot]) (no entry)
        self.ref = array("i")        # slot -> the number of P in ``names`` (form < 0), else -1

    def __setitem__(self, k: str, samples: Any) -> None:
        e = self.keys_.find(k)
        if e < 0:
            raise KeyError(f"{k!r} is not in the request table")
        col = self.col
        if e >= len(col):
            col.extend(array("i", [-1]) * (e + 1 - len(col)))
        if col[e] != -1:
            raise ValueError(f"{k!r} has its sample ids already (a request's are entered once)")
        samples = tuple(samples)
        for s in samples:
            if s.__class__ is not str:
                raise TypeError(f"sample ids are str, not {type(s).__name__}")
        blob, ends = self.blob, self.ends
        parent = _fork_parent(samples)
        ref = -1
        if parent is None:
            form = 0
            for s in samples:
                blob += s.encode(_ENC, _ERR)
                ends.append(len(blob))
        else:
            ref = self.names.find(parent) if self.names is not None else -1
            if ref >= 0:
                form = -len(samples)
            else:
                form = len(samples)
                blob += parent.encode(_ENC, _ERR)
                ends.append(len(blob))
        col[e] = len(self.first) - 1
        self.first.append(len(ends) - 1)
        self.form.append(form)
        self.ref.append(ref)

    def _slot(self, k: object) -> int:
        if k.__class__ is not str:
            return -1
        e = self.keys_.find(k)  # type: ignore[arg-type]
        return -1 if e < 0 or e >= len(self.col) else self.col[e]

    def _entry(self, m: int) -> str:
        ends = self.ends
        return self.blob[ends[m]:ends[m + 1]].decode(_ENC, _ERR)

    def _samples(self, s: int) -> tuple[str, ...]:
        form = self.form[s]
        if form == 0:
            return tuple(map(self._entry, range(self.first[s], self.first[s + 1])))
        parent = self._entry(self.first[s]) if form > 0 else self.names.key(self.ref[s])  # type: ignore[union-attr]
        return tuple(f"{parent}/{j}" for j in range(abs(form)))

    def get(self, k: str, default: Any = None) -> Any:
        s = self._slot(k)
        return default if s < 0 else self._samples(s)

    def __getitem__(self, k: str) -> tuple[str, ...]:
        s = self._slot(k)
        if s < 0:
            raise KeyError(k)
        return self._samples(s)

    def __contains__(self, k: object) -> bool:
        return self._slot(k) >= 0

    def __len__(self) -> int:
        return len(self.first) - 1

    def items(self) -> Iterator[tuple[str, tuple[str, ...]]]:
        col, key = self.col, self.keys_.keys_.key
        return ((key(e), self._samples(col[e])) for e in range(len(col)) if col[e] != -1)

    def keys(self) -> Iterator[str]:
        return (k for k, _ in self.items())

    __iter__ = keys


def _fork_parent(samples: tuple[str, ...]) -> str | None:
    """``P`` when ``samples`` is exactly ``(f"{P}/0", f"{P}/1", ...)`` (at least one), else None."""
    if not samples or not samples[0].endswith("/0"):
        return None
    parent = samples[0][:-2]
    head = parent + "/"
    for j, s in enumerate(samples):
        if s != head + str(j):
            return None
    return parent


class NoIntern:
    """``TraceState.names`` when the tables intern their values themselves (the flat tables):
    ``setdefault(k, v)`` gives ``v`` back and keeps nothing (a dict would hold every distinct group id)."""

    __slots__ = ()

    def setdefault(self, k: Any, v: Any) -> Any:
        return v

    def __len__(self) -> int:
        return 0


class OrdPair:
    """A dict ``str -> (int, int)`` (two int64s) whose keys are numbered by a shared :class:`StrTable`:
    17 bytes a key (``group_done``: completed_ns and line per group outcome). Iteration: the table's
    order of the keys set."""

    __slots__ = ("table", "a", "b", "has_", "n")

    def __init__(self, table: StrTable):
        self.table = table
        self.a = array("q")
        self.b = array("q")
        self.has_ = bytearray()
        self.n = 0

    def __setitem__(self, k: str, v: tuple[int, int]) -> None:
        e = self.table.add(k)
        x, y = v
        has = self.has_
        n = len(has)
        if e >= n:
            has.extend(bytes(e + 1 - n))
            self.a.extend(array("q", [0]) * (e + 1 - n))
            self.b.extend(array("q", [0]) * (e + 1 - n))
        if not has[e]:
            has[e] = 1
            self.n += 1
        self.a[e], self.b[e] = x, y

    def _slot(self, k: object) -> int:
        e = self.table.find(k)  # type: ignore[arg-type]  # (-1 for a non-str)
        return e if 0 <= e < len(self.has_) and self.has_[e] else -1

    def get(self, k: str, default: Any = None) -> Any:
        e = self._slot(k)
        return default if e < 0 else (self.a[e], self.b[e])

    def __getitem__(self, k: str) -> tuple[int, int]:
        e = self._slot(k)
        if e < 0:
            raise KeyError(k)
        return self.a[e], self.b[e]

    def __contains__(self, k: object) -> bool:
        return self._slot(k) >= 0

    def __len__(self) -> int:
        return self.n

    def __bool__(self) -> bool:
        return self.n > 0

    def items(self) -> Iterator[tuple[str, tuple[int, int]]]:
        has, a, b, key = self.has_, self.a, self.b, self.table.key
        return ((key(e), (a[e], b[e])) for e in range(len(has)) if has[e])

    def keys(self) -> Iterator[str]:
        return (k for k, _ in self.items())

    __iter__ = keys


class OrdSet:
    """A set of ``str`` whose members are numbered by a shared :class:`StrTable`: 1 byte a member
    (``_unique``'s set of the group outcomes seen)."""

    __slots__ = ("table", "has_", "n")

    def __init__(self, table: StrTable):
        self.table = table
        self.has_ = bytearray()
        self.n = 0

    def add(self, k: str) -> None:
        e = self.table.add(k)
        has = self.has_
        if e >= len(has):
            has.extend(bytes(e + 1 - len(has)))
        if not has[e]:
            has[e] = 1
            self.n += 1

    def __contains__(self, k: object) -> bool:
        e = self.table.find(k)  # type: ignore[arg-type]
        return 0 <= e < len(self.has_) and self.has_[e] == 1

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[str]:
        has, key = self.has_, self.table.key
        return (key(e) for e in range(len(has)) if has[e])


class SideInt:
    """A dict ``request id -> int`` (int64) over the keys of a :class:`PackedMap` (a key must be
    entered there first): 9 bytes a request (``req_done``: the measured completion of a grouped
    request). ``typecode``: the values' array type instead of int64 (``"I"``: uint32, 5 bytes a
    request: ``req_input``, a request's input tokens). Iteration: the map's order."""

    __slots__ = ("keys_", "col", "has_", "n", "tc")

    def __init__(self, keys: PackedMap, typecode: str = "q"):
        self.keys_ = keys
        self.tc = typecode
        self.col = array(typecode)
        self.has_ = bytearray()
        self.n = 0

    def __setitem__(self, k: str, v: int) -> None:
        e = self.keys_.find(k)
        if e < 0:
            raise KeyError(f"{k!r} is not in the request table")
        has = self.has_
        n = len(has)
        if e >= n:
            has.extend(bytes(e + 1 - n))
            self.col.extend(array(self.tc, [0]) * (e + 1 - n))
        if not has[e]:
            has[e] = 1
            self.n += 1
        self.col[e] = v

    def _slot(self, k: object) -> int:
        if k.__class__ is not str:
            return -1
        e = self.keys_.find(k)  # type: ignore[arg-type]
        return e if 0 <= e < len(self.has_) and self.has_[e] else -1

    def get(self, k: str, default: Any = None) -> Any:
        e = self._slot(k)
        return default if e < 0 else self.col[e]

    def __getitem__(self, k: str) -> int:
        e = self._slot(k)
        if e < 0:
            raise KeyError(k)
        return self.col[e]

    def __contains__(self, k: object) -> bool:
        return self._slot(k) >= 0

    def __len__(self) -> int:
        return self.n

    def items(self) -> Iterator[tuple[str, int]]:
        has, col, key = self.has_, self.col, self.keys_.keys_.key
        return ((key(e), col[e]) for e in range(len(has)) if has[e])


class IntRows:
    """``n`` rows of ``width`` int64 cells, rows numbered 0 .. n - 1 (trajectory ordinals), a cell
    None until set: 9 bytes a cell (the outcome pass's per-trajectory spans and slot times)."""

    __slots__ = ("w", "v", "has_")

    def __init__(self, n: int, width: int):
        self.w = width
        self.v = array("q", [0]) * (n * width)
        self.has_ = bytearray(n * width)

    def get(self, row: int, k: int) -> int | None:
        i = row * self.w + k
        return self.v[i] if self.has_[i] else None

    def set(self, row: int, k: int, x: int) -> None:
        i = row * self.w + k
        self.v[i] = x
        self.has_[i] = 1

    def __len__(self) -> int:
        return len(self.has_) // self.w if self.w else 0
