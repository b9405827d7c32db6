"""Multi-turn conversation traces: the synthetic generator and a local ShareGPT-JSON reader.

A trace is a list of :class:`Request`, one per conversation turn, sorted by arrival time. A
request's ``tokens`` is its whole prompt (the previous context plus the new user message); the
model's reply (``response``) is appended to the context, so the next turn's prompt starts with this
turn's prompt and response: the prefix a prefix cache can reuse.

The synthetic generator (spec §2, "the synthetic trace generator must capture") draws for each
conversation a latent type that sets its per-turn stop hazard (types 3-5x apart, turn 0 ends more
often), writes user messages from a per-type pool of words taken from Python standard-library
modules plus cue phrases with cross-type noise (so text reveals the type and the ending only
partly), grows the context turn by turn (messages 30-120 tokens, replies 150-300), starts
conversations as a Poisson process under a concurrency cap and spaces turns by exponential think
time with mean ``tau``. Token ids are deterministic hashes of words (user text) or fresh random ids
(replies): only identity and length matter to a cache.

    >>> from lpc.trace import make_synthetic_trace
    >>> trace = make_synthetic_trace(20, seed=0)
    >>> all(a.time <= b.time for a, b in zip(trace, trace[1:]))
    True
    >>> first = trace[0]
    >>> first.turn, first.tokens.dtype.name
    (0, 'int32')
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import json
import math
import re
import zlib
from pathlib import Path

import numpy as np

__all__ = [
    "CONTINUE_CUES",
    "STOP_CUES",
    "Request",
    "check_trace",
    "load_sharegpt_json",
    "make_synthetic_trace",
    "type_hazards",
    "word_token",
]

VOCAB = 50_000

CONTINUE_CUES = (
    "this raises an error",
    "now also",
    "what about",
    "next step",
    "it still fails",
    "can you extend",
)
STOP_CUES = (
    "thanks, that's all",
    "perfect, thank you",
    "great, that works",
    "ok, done for now",
)


@dataclasses.dataclass(eq=False)
class Request:
    """One conversation turn.

    Attributes:
        time: arrival time, seconds.
        conv_id: the conversation's id.
        turn: 0-based turn index.
        tokens: the prompt's token ids (int32): the whole context so far plus this user message.
        user_texts: the user messages of this conversation up to and including this one.
        has_next: whether this turn's reply is followed by another user message (the label).
        next_time: the next turn's arrival time (``inf`` when ``has_next`` is False).
        response: the reply's token ids (int32), appended to the context after this turn.
        ctype: the latent type (synthetic traces; -1 otherwise). Never a feature.
    """

    time: float
    conv_id: int
    turn: int
    tokens: np.ndarray
    user_texts: tuple[str, ...]
    has_next: bool
    next_time: float = math.inf
    response: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int32))
    ctype: int = -1

    @property
    def sequence(self) -> np.ndarray:
        """Prompt followed by the reply: what is cached when the turn finishes."""
        return np.concatenate([self.tokens, self.response])


def check_trace(trace, name: str = "trace") -> list[Request]:
    """``trace`` as a list of Requests with non-decreasing ``time``, or a clear error."""
    if isinstance(trace, Request) or not hasattr(trace, "__iter__"):
        raise TypeError(f"{name}: expected a sequence of Request, got {type(trace).__name__}")
    trace = list(trace)
    for i, r in enumerate(trace):
        if not isinstance(r, Request):
            raise TypeError(f"{name}[{i}]: expected a Request, got {type(r).__name__}")
        if i and r.time < trace[i - 1].time:
            raise ValueError(
                f"{name}: time must not decrease, got {trace[i - 1].time!r} then {r.time!r} at index {i}"
            )
    return trace


def word_token(word: str) -> int:
    """The token id of a word: a CRC32 hash into a 50k vocabulary (deterministic across runs)."""
    return zlib.crc32(word.encode()) % VOCAB


def type_hazards(n_types: int, low: float = 0.12, high: float = 0.5) -> np.ndarray:
    """Per-type stop hazard after turns >= 1, geometrically spaced from ``low`` to ``high``."""
    if n_types == 1:
        return np.array([math.sqrt(low * high)])
    return low * (high / low) ** (np.arange(n_types) / (n_types - 1))


_WORD = re.compile(r"[A-Za-z][a-z]{2,14}")


@functools.lru_cache(maxsize=8)
def _type_pools(n_types: int, files_per_type: int) -> tuple[tuple[str, ...], ...]:
    """Word pools, one per type, from distinct groups of standard-library modules."""
    from neurips25_core.data import stdlib_files

    groups: list[list[Path]] = [[] for _ in range(n_types)]
    for f in stdlib_files():  # deterministic: sorted files, assigned by a hash of the file name
        g = zlib.crc32(f.name.encode()) % n_types
        if len(groups[g]) < files_per_type and 4_000 < f.stat().st_size < 200_000:
            groups[g].append(f)
            if all(len(x) == files_per_type for x in groups):
                break
    pools = []
    for group in groups:
        words: list[str] = []
        for f in group:
            words += [w.lower() for w in _WORD.findall(f.read_text(errors="replace"))]
        pools.append(tuple(words))
    return tuple(pools)


def _message(rng, pools, ctype, n_words, pool_noise, cue):
    noisy = rng.random(n_words) < pool_noise
    src = np.where(noisy, rng.integers(len(pools), size=n_words), ctype)
    u = rng.random(n_words)
    words = [
        pools[s][int(x * len(pools[s]))] for s, x in zip(src.tolist(), u.tolist(), strict=True)
    ]
    text = " ".join(words)
    if cue is not None:
        text = f"{text} {cue}" if rng.random() < 0.5 else f"{cue} {text}"
    return text


def make_synthetic_trace(
    n_conversations: int,
    seed: int,
    n_types: int = 6,
    tau: float = 100.0,
    max_active: int = 200,
    system_prompts: int = 0,
    *,
    arrival_rate: float | None = None,
    hazard_low: float = 0.12,
    hazard_high: float = 0.5,
    first_turn_factor: float = 1.5,
    max_turns: int = 20,
    message_tokens: tuple[int, int] = (30, 120),
    response_tokens: tuple[int, int] = (150, 300),
    pool_noise: float = 0.6,
    stop_cue_rate: float = 0.6,
    false_stop_cue_rate: float = 0.08,
    continue_cue_rate: float = 0.3,
    system_prompt_tokens: tuple[int, int] = (64, 256),
    zipf_a: float = 1.2,
    files_per_type: int = 12,
    conv_id_offset: int = 0,
) -> list[Request]:
    """A synthetic multi-turn trace with the six properties of the spec.

    Args:
        n_conversations: number of conversations (>= 1).
        seed: RNG seed; two traces with different seeds share no conversation (use distinct
            ``conv_id_offset`` too when both are simulated together).
        n_types: latent conversation types; type j stops after a turn >= 1 with probability
            ``type_hazards(n_types, hazard_low, hazard_high)[j]`` (turn 0: times
            ``first_turn_factor``).
        tau: mean think time between a reply and the next user message, seconds (> 0).
        max_active: concurrency cap: a conversation whose Poisson start finds ``max_active``
            others active waits for one to end.
        system_prompts: number of shared system prompts (0: none); conversations pick one with
            Zipf(``zipf_a``) popularity, to exercise sharing and max-pooling over owners.
        arrival_rate: conversation starts per second; default fills the cap at steady state.
        pool_noise: probability that a user word comes from a random type's pool instead of the
            conversation's own (the type shows only partly in the text).
        stop_cue_rate / false_stop_cue_rate: probability that the last / a non-last user message
            carries a "thanks, that's all"-style cue; ``continue_cue_rate``: probability of a
            "now also"-style cue on a non-last message.

    Returns:
        The requests of all conversations, sorted by arrival time (ties by conversation, turn).
    """
    if isinstance(n_conversations, bool) or not isinstance(n_conversations, int):
        raise TypeError(f"n_conversations: expected an int, got {type(n_conversations).__name__}")
    if n_conversations < 1:
        raise ValueError(f"n_conversations: expected >= 1, got {n_conversations}")
    if not isinstance(n_types, int) or n_types < 1:
        raise ValueError(f"n_types: expected an int >= 1, got {n_types!r}")
    if not isinstance(max_active, int) or max_active < 1:
        raise ValueError(f"max_active: expected an int >= 1, got {max_active!r}")
    if not isinstance(system_prompts, int) or system_prompts < 0:
        raise ValueError(f"system_prompts: expected an int >= 0, got {system_prompts!r}")
    from lpc.decay import check_tau

    tau = check_tau(tau)
    for name, val in (
        ("pool_noise", pool_noise),
        ("stop_cue_rate", stop_cue_rate),
        ("false_stop_cue_rate", false_stop_cue_rate),
        ("continue_cue_rate", continue_cue_rate),
    ):
        if not 0.0 <= val <= 1.0:
            raise ValueError(f"{name}: expected a probability in [0, 1], got {val!r}")
    for name, (lo, hi) in (
        ("message_tokens", message_tokens),
        ("response_tokens", response_tokens),
        ("system_prompt_tokens", system_prompt_tokens),
    ):
        if not 1 <= lo <= hi:
            raise ValueError(
                f"{name}: expected (low, high) with 1 <= low <= high, got {(lo, hi)!r}"
            )

    rng = np.random.default_rng(seed)
    pools = _type_pools(n_types, files_per_type)
    hazards = type_hazards(n_types, hazard_low, hazard_high)

    # Turn counts first (they set how long a conversation stays active).
    types = rng.integers(n_types, size=n_conversations)
    n_turns = np.empty(n_conversations, dtype=np.int64)
    for c in range(n_conversations):
        t = 0
        while t + 1 < max_turns:
            h = min(0.95, hazards[types[c]] * (first_turn_factor if t == 0 else 1.0))
            if rng.random() < h:
                break
            t += 1
        n_turns[c] = t + 1
    gaps = [rng.exponential(tau, size=int(k) - 1) for k in n_turns]
    if arrival_rate is None:
        mean_life = float(np.mean([g.sum() for g in gaps])) + 1.0
        arrival_rate = 0.9 * max_active / mean_life
    starts = np.cumsum(rng.exponential(1.0 / arrival_rate, size=n_conversations))

    # Concurrency cap: a start waits for a slot.
    active: list[float] = []
    begin = np.empty(n_conversations)
    for c in range(n_conversations):
        t0 = float(starts[c])
        while active and active[0] <= t0:
            heapq.heappop(active)
        if len(active) >= max_active:
            t0 = heapq.heappop(active)
        begin[c] = t0
        heapq.heappush(active, t0 + float(gaps[c].sum()))

    sys_tokens: list[np.ndarray] = []
    sys_weights = None
    if system_prompts:
        for _ in range(system_prompts):
            n = int(rng.integers(system_prompt_tokens[0], system_prompt_tokens[1] + 1))
            sys_tokens.append(rng.integers(VOCAB, VOCAB * 2, size=n).astype(np.int32))
        w = 1.0 / np.arange(1, system_prompts + 1) ** zipf_a
        sys_weights = w / w.sum()

    requests: list[Request] = []
    for c in range(n_conversations):
        ctype = int(types[c])
        cid = conv_id_offset + c
        context = (
            sys_tokens[int(rng.choice(system_prompts, p=sys_weights))]
            if system_prompts
            else np.zeros(0, np.int32)
        )
        times = begin[c] + np.concatenate([[0.0], np.cumsum(gaps[c])])
        texts: list[str] = []
        for turn in range(int(n_turns[c])):
            last = turn == n_turns[c] - 1
            cue = None
            u = rng.random()
            if (last and u < stop_cue_rate) or (not last and u < false_stop_cue_rate):
                cue = STOP_CUES[rng.integers(len(STOP_CUES))]
            elif not last and u < false_stop_cue_rate + continue_cue_rate:
                cue = CONTINUE_CUES[rng.integers(len(CONTINUE_CUES))]
            n_words = int(rng.integers(message_tokens[0], message_tokens[1] + 1))
            text = _message(rng, pools, ctype, n_words, pool_noise, cue)
            texts.append(text)
            msg = np.array([word_token(w) for w in text.split()], dtype=np.int32)
            prompt = np.concatenate([context, msg])
            n_resp = int(rng.integers(response_tokens[0], response_tokens[1] + 1))
            response = rng.integers(2 * VOCAB, 2**31 - 1, size=n_resp).astype(np.int32)
            requests.append(
                Request(
                    time=float(times[turn]),
                    conv_id=cid,
                    turn=turn,
                    tokens=prompt,
                    user_texts=tuple(texts),
                    has_next=not last,
                    next_time=float(times[turn + 1]) if not last else math.inf,
                    response=response,
                    ctype=ctype,
                )
            )
            context = np.concatenate([prompt, response])
    requests.sort(key=lambda r: (r.time, r.conv_id, r.turn))
    return requests


def load_sharegpt_json(
    path: str | Path, tau: float = 100.0, seed: int = 0, arrival_rate: float = 1.0
) -> list[Request]:
    """A trace from a local ShareGPT-format JSON file (no download).

    The file is a list of ``{"id": ..., "conversations": [{"from": "human"|"gpt", "value": ...}]}``.
    Tokens are hashed words (``word_token``); timestamps are synthetic (Poisson starts at
    ``arrival_rate``, exponential think time with mean ``tau``), as the dataset has none.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"path: {path} is not a file (only local files are read)")
    data = json.loads(path.read_text())
    if not isinstance(data, list):
        raise ValueError(f"path: expected a JSON list of conversations, got {type(data).__name__}")
    rng = np.random.default_rng(seed)
    requests: list[Request] = []
    t_start = 0.0
    for cid, conv in enumerate(data):
        turns = conv.get("conversations", []) if isinstance(conv, dict) else []
        pairs = []
        for i, m in enumerate(turns):
            if m.get("from") == "human":
                reply = (
                    turns[i + 1]["value"]
                    if i + 1 < len(turns) and turns[i + 1].get("from") == "gpt"
                    else ""
                )
                pairs.append((m.get("value", ""), reply))
        t_start += rng.exponential(1.0 / arrival_rate)
        t = t_start
        context = np.zeros(0, np.int32)
        texts: list[str] = []
        times = [t]
        for _ in pairs[1:]:
            times.append(times[-1] + rng.exponential(tau))
        for turn, (user, reply) in enumerate(pairs):
            texts.append(user)
            msg = np.fromiter((word_token(w) for w in user.split()), dtype=np.int32)
            resp = np.fromiter((word_token(w) for w in reply.split()), dtype=np.int32)
            prompt = np.concatenate([context, msg])
            last = turn == len(pairs) - 1
            requests.append(
                Request(
                    times[turn],
                    cid,
                    turn,
                    prompt,
                    tuple(texts),
                    not last,
                    times[turn + 1] if not last else math.inf,
                    resp,
                )
            )
            context = np.concatenate([prompt, resp])
    requests.sort(key=lambda r: (r.time, r.conv_id, r.turn))
    return requests
