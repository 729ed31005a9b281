"""Bound rules: values beyond what the engine can run, or beyond any real trace, stated with the bound.

A trace passing these cannot make the simulator run away (allocate per token, loop per sample) or
trip its own invariants: every sample fits its engine's ``max_model_len`` and the request's
``max_output_tokens``, counts stay under :data:`~registry.MAX_SAMPLES` /
:data:`~registry.MAX_DEPENDENCIES`, the window under :data:`~registry.MAX_WINDOW_NS` (which, with
``units.suspect_scale``, bounds every time), and each engine's KV cache holds its longest sequence
and its batch budget its longest prompt when chunked prefill is off (measured on ai-dynamo 1.6.1:
``num_kv_blocks: 1`` rejects every request silently, ``max_num_batched_tokens`` below a prompt
without chunked prefill ends in upstream's "replay invariant violated").
"""

from __future__ import annotations

from unirl_replay.contract.trace_io import MANIFEST_FILE
from unirl_replay.contract.validate.context import TraceState
from unirl_replay.contract.validate.registry import MAX_DEPENDENCIES, MAX_SAMPLES, MAX_TOKENS, MAX_WINDOW_NS
from unirl_replay.v1 import workload_pb2 as w


class BoundRules(TraceState):
    def _window_bound(self) -> None:
        if self.window_ns > MAX_WINDOW_NS:
            self.v("bound.window", MANIFEST_FILE, 0, self.m.trace_id, f"window.duration_ns = {self.window_ns} is "
                   f"longer than {MAX_WINDOW_NS} ns (30 days)")

    def _tokens(self, line: int, rid: str, engine_id: str, input_tokens: int, outputs, max_output) -> None:
        """Token bounds of one request (or warm-up: ``outputs`` empty)."""
        f = self.wfile
        eng = self.engines.get(engine_id)
        model_len = eng.max_model_len if eng is not None else 0
        top = max(outputs, default=0)
        limit = model_len or MAX_TOKENS
        if input_tokens > MAX_TOKENS or top > MAX_TOKENS:
            self.v("bound.tokens", f, line, rid, f"input_tokens {input_tokens} / output_tokens {top}: above the "
                   f"bound of {MAX_TOKENS} tokens")
        elif model_len and input_tokens + top > model_len:
            self.v("bound.model_len", f, line, rid, f"input_tokens {input_tokens} + output_tokens {top} = "
                   f"{input_tokens + top} > max_model_len {model_len} of engine {engine_id!r}")
        elif not model_len and input_tokens + top > limit:
            self.v("bound.tokens", f, line, rid, f"input_tokens + output_tokens = {input_tokens + top} above the "
                   f"bound of {MAX_TOKENS} tokens")
        if max_output is not None and top > max_output:
            self.v("bound.max_output_tokens", f, line, rid, f"output_tokens {top} > max_output_tokens {max_output}")
        if eng is not None:
            seq = min(input_tokens + top, MAX_TOKENS)
            if seq > self.longest[engine_id]:
                self.longest[engine_id] = seq
            p = min(input_tokens, MAX_TOKENS)
            if p > self.longest_prompt[engine_id]:
                self.longest_prompt[engine_id] = p

    def _request_bounds(self, line: int, r: w.Request) -> None:
        f, rid = self.wfile, r.request_id
        if r.num_samples > MAX_SAMPLES:
            self.v("bound.count", f, line, rid, f"num_samples {r.num_samples} > {MAX_SAMPLES}")
        if len(r.dependencies) > MAX_DEPENDENCIES:
            self.v("bound.count", f, line, rid, f"{len(r.dependencies)} dependencies > {MAX_DEPENDENCIES}")
        self._tokens(line, rid, r.engine_id, r.input_tokens, r.output_tokens,
                     r.max_output_tokens if r.HasField("max_output_tokens") else None)

    def _engine_capacity(self) -> None:
        for eid, e in self.engines.items():
            seq, prompt = self.longest.get(eid, 0), self.longest_prompt.get(eid, 0)
            if e.num_kv_blocks and e.block_size_tokens and e.num_kv_blocks * e.block_size_tokens < seq:
                self.v("bound.engine_capacity", MANIFEST_FILE, 0, eid, f"num_kv_blocks {e.num_kv_blocks} x "
                       f"block_size_tokens {e.block_size_tokens} = {e.num_kv_blocks * e.block_size_tokens} tokens "
                       f"cannot hold the longest sequence on this engine ({seq} tokens)")
            if e.max_num_batched_tokens and not e.enable_chunked_prefill and e.max_num_batched_tokens < prompt:
                self.v("bound.engine_capacity", MANIFEST_FILE, 0, eid, f"max_num_batched_tokens "
                       f"{e.max_num_batched_tokens} < the longest prompt on this engine ({prompt} tokens) with "
                       "chunked prefill off: the prompt can never be scheduled")
