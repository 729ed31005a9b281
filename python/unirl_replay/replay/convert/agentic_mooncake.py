"""Workload -> Dynamo Replay ``agentic_mooncake`` version 2 (the primary format).

Pure: reads only workload messages (never outcomes), returns a :class:`Conversion`.

Mapping (docs/replay-mapping.md has the full table):

* play = trajectory (``play_id = trajectory_id``); an open-loop request is its own play.
* upstream request ids are ``<ordinal>|<request_id>``: the request's position in this engine's
  file order, zero-padded to a fixed width (:func:`~.common.sequence_id`). Upstream serves rows
  that arrive at the same instant in request-id string order; the prefix makes that the trace's
  order (play and session ids do not decide it and stay unprefixed).
* a ``Request`` with ``num_samples = n`` becomes n upstream rows ``<ordinal>|<request_id>#s<i>``
  (no suffix when n = 1) with identical ``hash_ids`` and the same arrival / dependencies: the n
  sequences the engine ran from one prompt.
* roots (``Arrival.observed_offset_ns``): ``not_before_ms = lead_ms + (observed - origin) / 1e6``.
* dependents (``Arrival.after_dependencies``): one upstream dependency per predecessor sample,
  ``delay_ms = external_delay_ns / 1e6`` (the SEPARATELY MEASURED external wait; 0 for
  ``DELAY_ABSENCE_NONE_BY_CONSTRUCTION``), trigger and relation copied. The observed arrival of a
  later turn is never used (the workload holds none: it would carry measured service times).
  ``not_before_ms`` = the earliest arrival the recorded root arrival and the measured waits allow:
  max over dependencies of (predecessor's bound + ``delay_ms``), with a root's bound its own
  ``not_before_ms`` (0 with lanes, where upstream ignores root arrivals). The simulated arrival
  always reaches it (every predecessor event is at or after its own bound, and IEEE addition is
  monotone), so the dependency rule alone governs arrival and results do not change; upstream modes
  that read historical arrivals (``agentic_snapshot``) accept the file.
* ``SlotPool.trajectory_slots`` -> ``agentic_lanes``; plays are written in
  ``Trajectory.start_order`` and, since upstream grants free lanes in play-id string order (not file
  order), named ``<start ordinal>|<trajectory_id>`` there (:func:`~.common.play_names`).
* warm-ups (``CacheWarmup``): prefill-only rows (``output_length 0``) in their own plays, first.
"""

from __future__ import annotations

from json.encoder import encode_basestring_ascii
from operator import itemgetter

from unirl_replay.replay.convert import arrow_rows
from unirl_replay.replay.convert.common import (
    _DUMPS, WARMUP_PREFIX, Conversion, FactSamples, HashRemap, SequenceMap, check_unique, dense_prompt_ids,
    dense_prompt_ids_columns, fill_not_before, joined_ids, json_float, ns_to_ms, ordinal_width, origin_of, play_names,
    prompt_ids, sequence_id,
)
from unirl_replay.replay.workload import EnginePlan, WorkloadIndex, plan_facts, play_id_of
from unirl_replay.v1 import common_pb2

FORMAT = "agentic_mooncake"
CHUNK = 1 << 14  # requests per chunk of written text
MODEL = "unirl-replay-target"

_TRIGGER = {common_pb2.DEPENDENCY_TRIGGER_COMPLETION: "completion",
            common_pb2.DEPENDENCY_TRIGGER_DISPATCH: "dispatch"}
_RELATION = {common_pb2.DEPENDENCY_RELATION_SEQUENCE: "sequence",
             common_pb2.DEPENDENCY_RELATION_SPAWN: "spawn",
             common_pb2.DEPENDENCY_RELATION_JOIN: "join",
             common_pb2.DEPENDENCY_RELATION_UNSPECIFIED: "sequence"}


_SECOND = itemgetter(1)


class _Ordinals(dict):
    """``{rid: k for k, rid in enumerate(order)}``, filled on the first lookup (the array row writer
    never looks one up)."""

    __slots__ = ("_order",)

    def __init__(self, order: list[str]) -> None:
        super().__init__()
        self._order = order

    def __missing__(self, key):
        if self._order is None:
            raise KeyError(key)
        self.update(zip(self._order, range(len(self._order))))
        self._order = None
        return self[key]


def header(block_size: int, digest: str = "") -> dict:
    """The v2 header line. ``hash_id_scope`` is ``local`` (the only value 1.6.1 accepts); our
    ids are remapped per engine from chained salted hashes, so sharing across plays is real."""
    return {"schema": "dynamo.agentic_mooncake", "version": 2, "block_size": block_size,
            "hash_id_scope": "local", "source": {"format": "unirl_replay.v1", "digest": digest or "unknown"}}


def warmup_rows(plan: EnginePlan, remap: HashRemap) -> list[dict]:
    """Prefill-only warm-up rows (``output_length 0``, ``not_before_ms 0``), one play each."""
    bs = plan.engine.block_size_tokens
    return [_warmup_row(w, prompt_ids(w, remap, bs)) for w in plan.warmups]


def _warmup_row(w, ids: list[int]) -> dict:
    key = WARMUP_PREFIX + w.warmup_id
    return {"request_id": key, "play_id": key, "session_id": key, "model": MODEL,
            "input_length": w.input_tokens, "output_length": 0, "hash_ids": ids, "not_before_ms": 0.0}


def convert_engine(plan: EnginePlan, index: WorkloadIndex, *, lead_ms: float = 0.0,
                   digest: str = "", include_real: bool = True) -> Conversion:
    """Convert one engine's workload to agentic_mooncake v2 rows.

    Checks (warm-up play id collisions) and the dense hash remap run here; the rows themselves are
    produced lazily (:meth:`Conversion.write` streams them), so nothing per row is held but the
    request -> ordinal map the ids are made from.

    Args:
        plan: from :func:`~unirl_replay.replay.support.check_supported` (already checked).
        index: the trace's records (for predecessors' sample counts and trajectories).
        lead_ms: warm-up lead in ms added to every root's ``not_before_ms`` (0 when cold).
        digest: workload sha256 for the header's ``source.digest``.
        include_real: False gives the warm-up-only file (to measure the lead).

    Returns:
        A :class:`Conversion`; ``sequences`` maps each upstream id to (request_id, sample).
    """
    bs = plan.engine.block_size_tokens
    facts = plan_facts(plan, index.by_id)
    warm_keys = [WARMUP_PREFIX + w.warmup_id for w in plan.warmups]
    order = [rid for play in plan.play_order for rid in plan.plays[play]] if include_real else []
    # Real upstream ids cannot collide: distinct requests have distinct fixed-width ordinal
    # prefixes, the samples of one request distinct suffixes, and a real id starts with a digit
    # (a warm-up id with "warmup:"). Play ids are unprefixed: a warm-up's play must be its own.
    width = ordinal_width(len(order))
    ordinal = _Ordinals(order)  # request id -> its position in file order (made on first lookup)
    if include_real:
        for w in warm_keys:
            if w in plan.plays:
                check_unique(set(plan.plays), w, w)
    if plan.columns is not None:  # hashes from the columns (facts hold None for them)
        ids, offsets = dense_prompt_ids_columns(plan.warmups, plan.columns, order,
                                                list(map(_SECOND, map(facts.__getitem__, order))), bs)
    else:
        ids, offsets = dense_prompt_ids([*plan.warmups, *(index.by_id[rid] for rid in order)], bs,
                                        [w.prefix.block_hashes or None for w in plan.warmups]
                                        + [facts[rid][5] for rid in order])
    del order
    origin = plan.first_arrival_ns if plan.first_arrival_ns is not None else origin_of(plan.requests)
    lanes = plan.lanes is not None
    name = play_names(plan)  # the play id written upstream (start ordinal first in lanes mode)
    bounds: dict[str, float] = {}  # not_before_ms of the current play's requests (deps never cross plays)

    def not_before(rid: str) -> float:
        if rid not in bounds:
            fill_not_before(rid, bounds, facts, lanes, lead_ms, origin)
        return bounds[rid]

    current_play: list = [None]

    def row_not_before(rid: str, play: str) -> float:
        if play is not current_play[0]:
            bounds.clear()
            current_play[0] = play
        return not_before(rid) if facts[rid][4] else lead_ms + ns_to_ms(facts[rid][3] - origin)

    def produce():
        nw = len(plan.warmups)
        for k, w in enumerate(plan.warmups):
            yield _warmup_row(w, ids[offsets[k]:offsets[k + 1]].tolist())
        if not include_real:
            return
        k = nw
        current_play[0] = None
        for play in plan.play_order:
            wp = name(play)
            for rid in plan.plays[play]:
                n, inp, outs, _t, fdeps, _h = facts[rid]
                hids = ids[offsets[k]:offsets[k + 1]].tolist()
                k += 1
                deps = []
                for prid, pn, trigger, relation, fdelay in fdeps:
                    delay = ns_to_ms(fdelay) if fdelay is not None else 0.0
                    trig, rel = _TRIGGER[trigger], _RELATION[relation]
                    pk = ordinal[prid]
                    for s in range(pn):
                        deps.append({"request_id": sequence_id(prid, s, pn, pk, width),
                                     "trigger": trig, "delay_ms": delay, "relation": rel})
                nb = row_not_before(rid, play)
                for s in range(n):
                    row = {"request_id": sequence_id(rid, s, n, k - nw - 1, width),  # k: already past rid
                           "play_id": wp, "session_id": wp, "model": MODEL, "input_length": inp, "output_length": outs[s],
                           "hash_ids": hids, "not_before_ms": nb}
                    if deps:
                        row["dependencies"] = deps
                    yield row

    def lines():
        # The same rows as produce(), written straight to JSON text (what json.JSONEncoder with
        # separators=(",", ":") makes of each row dict, byte for byte), CHUNK requests at a time;
        # hash ids are formatted vectorised (joined_ids).
        if plan.warmups:
            yield "".join(_DUMPS(row) + "\n" for row in produce_warmups())
        if not include_real:
            return
        # the same bytes assembled from arrays by pyarrow when it is installed (arrow_rows)
        fast = arrow_rows.rows_text(plan, facts, ids, offsets, len(plan.warmups), width, ordinal, lead_ms, origin,
                                    MODEL, _TRIGGER, _RELATION, name)
        if fast is not None:
            yield from fast
            return
        chunk: list[tuple[str, object]] = []
        current_play[0] = None
        k = len(plan.warmups)
        for play in plan.play_order:
            for rid in plan.plays[play]:
                chunk.append((play, rid))
                if len(chunk) == CHUNK:
                    yield _lines(chunk, k)
                    k += len(chunk)
                    chunk = []
        if chunk:
            yield _lines(chunk, k)

    def _lines(chunk, k0):
        q = encode_basestring_ascii
        model = ',"model":' + q(MODEL) + ',"input_length":'
        trig = {k: ',"trigger":' + q(v) + ',"delay_ms":' for k, v in _TRIGGER.items()}
        rel = {k: ',"relation":' + q(v) + "}" for k, v in _RELATION.items()}
        hstrs = joined_ids(ids, offsets, k0, k0 + len(chunk))
        out = []
        add = out.append
        qplay = None
        last = None
        for (play, rid), hs in zip(chunk, hstrs):
            if play is not last:
                qp = q(name(play))
                qplay = ',"play_id":' + qp + ',"session_id":' + qp
                last = play
            n, inp, outs, t, deps, _ = facts[rid]
            if deps:
                parts = []
                for prid, pn, trigger, relation, delay in deps:
                    tail = trig[trigger] + (json_float(ns_to_ms(delay)) if delay is not None else "0.0") + \
                        rel[relation]
                    pk = ordinal[prid]
                    for s in range(pn):
                        parts.append('{"request_id":' + q(sequence_id(prid, s, pn, pk, width)) + tail)
                end = '],"not_before_ms":' + json_float(row_not_before(rid, play)) + ',"dependencies":[' + \
                    ",".join(parts) + "]}\n"
            else:
                end = '],"not_before_ms":' + json_float(row_not_before(rid, play)) + "}\n"
            mid = model + str(inp) + ',"output_length":'
            end = ',"hash_ids":[' + hs + end
            k = ordinal[rid]
            for s in range(n):
                add('{"request_id":' + q(sequence_id(rid, s, n, k, width)) + qplay + mid + str(outs[s]) + end)
        return "".join(out)

    def produce_warmups():
        for k, w in enumerate(plan.warmups):
            yield _warmup_row(w, ids[offsets[k]:offsets[k + 1]].tolist())

    seqs = SequenceMap(FactSamples(facts), plan.plays, plan.play_order, warm_keys, play_id_of, include_real)
    return Conversion(trace_format=FORMAT, engine_id=plan.engine.engine_id, header=header(bs, digest),
                      sequences=seqs, warmup_keys=warm_keys, lanes=plan.lanes, block_size=bs,
                      origin_ns=origin, lead_ms=lead_ms, produce=produce, lines=lines)
