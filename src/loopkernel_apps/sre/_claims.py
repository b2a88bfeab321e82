"""Cited claims: what a model may say in the SRE report, checked before it is shown.

Pure, no I/O. The model may write a summary, suspected causes and next steps; each claim
cites evidence refs **and quotes the exact span** it rests on. ``check_claims`` keeps a
claim only if its quote, whitespace-normalized, is found in the content of one of the
evidence items it cites, and that evidence is current (a predicate the caller passes: the
investigator knows what is stale). A kept claim is ``suspected`` (never verified: verified
causes stay the detectors'), with its quote and the ref it was found in; a ``next_step``
always needs approval. Every dropped claim is listed with why (``DropReason``), for the
report's coverage section.

``claims_schema(refs)`` is the JSON Schema of the model's reply: bounded lengths and
counts, the refs an enum of the evidence the model was shown (so a ref it invents is
refused by constrained decoding, and by ``parse_claims`` if it gets through).

Wiring (the investigator's): show the model the evidence items with their refs, ask with
``response_schema=claims_schema(refs)`` and ``validate=False``, ``parse_claims`` the reply,
``check_claims(claims, {ref: content}, current=...)``; render ``kept`` as suspected
(with the quote) and ``dropped`` in coverage.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_CLAIMS",
    "MIN_QUOTE_CHARS",
    "Claim",
    "ClaimKind",
    "ClaimsChecked",
    "DropReason",
    "DroppedClaim",
    "KeptClaim",
    "check_claims",
    "claims_schema",
    "normalize",
    "on_object",
    "parse_claims",
]

MAX_CLAIMS = 12
MAX_TEXT = 400
MAX_QUOTE = 300
MAX_REFS = 4
MIN_QUOTE_CHARS = 12
"""A quote shorter than this (normalized), or of one word, means nothing on its own
("error", "failed") and is found in any log: such a claim is dropped."""

_SPACE = re.compile(r"\s+")


class ClaimKind(enum.StrEnum):
    SUMMARY = "summary"
    SUSPECTED_CAUSE = "suspected_cause"
    NEXT_STEP = "next_step"


class DropReason(enum.StrEnum):
    NO_REF = "no_ref"
    """The claim cites no evidence."""
    UNKNOWN_REF = "unknown_ref"
    """It cites a ref that is not one of the evidence items."""
    QUOTE_TOO_SHORT = "quote_too_short"
    """Its quote is too short to mean anything (``MIN_QUOTE_CHARS``, one word)."""
    QUOTE_NOT_FOUND = "quote_not_found"
    """The quote is in none of the cited items (after whitespace normalization)."""
    STALE_EVIDENCE = "stale_evidence"
    """The quote is found only in evidence that is no longer current."""
    MALFORMED = "malformed"
    """The reply's item is not a claim (missing fields, wrong types, unknown kind)."""
    NO_OBJECT = "no_object"
    """A claim of cause names no object (kind and name) it is the cause of trouble in."""
    NOT_ON_OBJECT = "not_on_object"
    """A claim of cause whose quote is found only in evidence that is not about the object
    it names (another pod's log, another object's events)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Claim:
    """One thing the model says, with what it rests on."""

    text: str
    kind: ClaimKind
    refs: tuple[str, ...]
    """The evidence items it cites."""
    quote: str
    """The exact span of one cited item it rests on."""
    obj: tuple[str, str] | None = None
    """A cause's object, ``(kind, name)``: what is at fault."""
    explains: tuple[str, str] | None = None
    """A cause's symptom, ``(kind, name)``: what fails *because* of ``obj``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class KeptClaim:
    """A claim whose quote was found in current cited evidence."""

    claim: Claim
    ref: str
    """The cited item the quote was found in."""
    quote: str
    """The quote, whitespace-normalized, as found."""
    status: str = "suspected"
    """Always ``suspected``: a model's claim is never verified by being quoted."""
    needs_approval: bool = False
    """True for a ``next_step``: remediation always needs a human's approval."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DroppedClaim:
    """A claim refused, and why."""

    text: str
    reason: DropReason
    detail: str


@dataclass(frozen=True, kw_only=True, slots=True)
class ClaimsChecked:
    kept: tuple[KeptClaim, ...]
    dropped: tuple[DroppedClaim, ...]


def normalize(text: str) -> str:
    """Runs of whitespace (spaces, tabs, newlines) as one space, the ends stripped."""
    return _SPACE.sub(" ", text).strip()


def claims_schema(refs: Sequence[str], *, max_claims: int = MAX_CLAIMS) -> dict[str, Any]:
    """The JSON Schema of the model's reply: ``{"claims": [{text, kind, refs, quote}]}``,
    every string bounded, ``refs`` an enum of ``refs`` (the evidence the model was shown)."""
    known = sorted(set(refs))
    ref_item: dict[str, Any] = {"type": "string", "enum": known} if known else {"not": {}}
    obj = {
        "type": "object",
        "properties": {
            "kind": {"type": "string", "minLength": 1, "maxLength": 40},
            "name": {"type": "string", "minLength": 1, "maxLength": 253},
        },
        "required": ["kind", "name"],
        "additionalProperties": False,
    }
    claim = {
        "type": "object",
        "properties": {
            "text": {"type": "string", "minLength": 1, "maxLength": MAX_TEXT},
            "kind": {"type": "string", "enum": [k.value for k in ClaimKind]},
            "refs": {"type": "array", "items": ref_item, "minItems": 1, "maxItems": MAX_REFS},
            "quote": {"type": "string", "minLength": 1, "maxLength": MAX_QUOTE},
            "object": obj,
            "explains": obj,
        },
        "required": ["text", "kind", "refs", "quote"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {"claims": {"type": "array", "items": claim, "maxItems": max_claims}},
        "required": ["claims"],
        "additionalProperties": False,
    }


def parse_claims(raw: str) -> tuple[list[Claim], list[DroppedClaim]]:
    """The claims of a model's reply (text), and the items that are not claims. A reply
    that is not ``{"claims": [...]}`` gives no claims and one ``malformed`` drop."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as err:
        return [], [_drop(raw[:80], DropReason.MALFORMED, f"the reply is not JSON: {err}")]
    items = data.get("claims") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return [], [_drop(raw[:80], DropReason.MALFORMED, 'not {"claims": [...]}')]
    claims: list[Claim] = []
    bad: list[DroppedClaim] = []
    for i, item in enumerate(items[:MAX_CLAIMS]):
        claim = _claim(item)
        if claim is None:
            bad.append(_drop(str(item)[:80], DropReason.MALFORMED, f"item {i} is not a claim"))
        else:
            claims.append(claim)
    if len(items) > MAX_CLAIMS:
        bad.append(
            _drop("", DropReason.MALFORMED, f"{len(items) - MAX_CLAIMS} claims past {MAX_CLAIMS}")
        )
    return claims, bad


def _claim(item: Any) -> Claim | None:
    if not isinstance(item, dict):
        return None
    text, kind, refs, quote = (item.get(k) for k in ("text", "kind", "refs", "quote"))
    if not isinstance(text, str) or not isinstance(quote, str) or not isinstance(refs, list):
        return None
    if kind not in {k.value for k in ClaimKind} or not all(isinstance(r, str) for r in refs):
        return None
    return Claim(
        text=text[:MAX_TEXT],
        kind=ClaimKind(kind),
        refs=tuple(refs[:MAX_REFS]),
        quote=quote[:MAX_QUOTE],
        obj=_object(item.get("object")),
        explains=_object(item.get("explains")),
    )


def _object(value: Any) -> tuple[str, str] | None:
    if not isinstance(value, dict):
        return None
    kind, name = value.get("kind"), value.get("name")
    if not isinstance(kind, str) or not isinstance(name, str) or not kind or not name:
        return None
    return kind[:40], name[:253]


def _drop(text: str, reason: DropReason, detail: str) -> DroppedClaim:
    return DroppedClaim(text=text, reason=reason, detail=detail[:200])


def check_claims(
    claims: Sequence[Claim],
    evidence: Mapping[str, str],
    *,
    current: Callable[[str], bool],
    about: Mapping[str, Collection[str]] | None = None,
) -> ClaimsChecked:
    """Keep each claim whose quote is found in a current evidence item it cites; drop the
    rest with why. ``evidence`` maps each ref to its content; ``current(ref)`` says
    whether that item is still current. With ``about`` (each ref -> the names of the
    objects that item is about: its pod, its object), a claim of cause must name its
    object, and the item its quote is found in must be about that object (``on_object``)."""
    kept: list[KeptClaim] = []
    dropped: list[DroppedClaim] = []
    normalized = {ref: normalize(content) for ref, content in evidence.items()}
    for claim in claims:
        verdict = _check_one(claim, normalized, current)
        if isinstance(verdict, KeptClaim) and about is not None:
            verdict = _check_object(verdict, about)
        if isinstance(verdict, KeptClaim):
            kept.append(verdict)
        else:
            dropped.append(verdict)
    return ClaimsChecked(kept=tuple(kept), dropped=tuple(dropped))


def _check_one(
    claim: Claim, evidence: Mapping[str, str], current: Callable[[str], bool]
) -> KeptClaim | DroppedClaim:
    if not claim.refs:
        return _drop(claim.text, DropReason.NO_REF, "the claim cites no evidence")
    unknown = [r for r in claim.refs if r not in evidence]
    if unknown:
        return _drop(claim.text, DropReason.UNKNOWN_REF, f"no evidence {unknown[0][:60]!r}")
    quote = normalize(claim.quote)
    if len(quote) < MIN_QUOTE_CHARS or " " not in quote:
        return _drop(claim.text, DropReason.QUOTE_TOO_SHORT, f"quote {quote[:40]!r}")
    found = [r for r in claim.refs if quote in evidence[r]]
    if not found:
        return _drop(
            claim.text,
            DropReason.QUOTE_NOT_FOUND,
            f"the quote is in none of {', '.join(claim.refs)[:120]}",
        )
    fresh = [r for r in found if current(r)]
    if not fresh:
        return _drop(claim.text, DropReason.STALE_EVIDENCE, f"{found[0][:60]} is no longer current")
    return KeptClaim(
        claim=claim,
        ref=fresh[0],
        quote=quote,
        needs_approval=claim.kind is ClaimKind.NEXT_STEP,
    )


def on_object(name: str, about: Collection[str], quote: str) -> bool:
    """Whether an item about ``about`` (its pod, its object), quoted as ``quote``, is
    evidence on the object ``name``: an item about one object (a pod's log or description,
    one object's events) must be about ``name`` or one of its pods (``name-…``); a
    namespace-wide listing (services, claims, nodes, all events) counts only where the
    quote itself names ``name`` as a word. Another pod's log naming it does not."""
    if about:
        return any(a == name or a.startswith(name + "-") for a in about)
    return re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", quote) is not None


def _check_object(
    kept: KeptClaim, about: Mapping[str, Collection[str]]
) -> KeptClaim | DroppedClaim:
    claim = kept.claim
    if claim.kind is not ClaimKind.SUSPECTED_CAUSE:
        return kept
    if claim.obj is None:
        return _drop(claim.text, DropReason.NO_OBJECT, "a claim of cause must name its object")
    name = claim.obj[1]
    if not on_object(name, about.get(kept.ref, ()), kept.quote):
        return _drop(
            claim.text,
            DropReason.NOT_ON_OBJECT,
            f"{kept.ref} is not about {claim.obj[0]} {name[:60]}, and the quote does not name it",
        )
    return kept
