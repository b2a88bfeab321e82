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
from collections.abc import Callable, Mapping, Sequence
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


@dataclass(frozen=True, kw_only=True, slots=True)
class Claim:
    """One thing the model says, with what it rests on."""

    text: str
    kind: ClaimKind
    refs: tuple[str, ...]
    """The evidence items it cites."""
    quote: str
    """The exact span of one cited item it rests on."""


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
    claim = {
        "type": "object",
        "properties": {
            "text": {"type": "string", "minLength": 1, "maxLength": MAX_TEXT},
            "kind": {"type": "string", "enum": [k.value for k in ClaimKind]},
            "refs": {"type": "array", "items": ref_item, "minItems": 1, "maxItems": MAX_REFS},
            "quote": {"type": "string", "minLength": 1, "maxLength": MAX_QUOTE},
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
    )


def _drop(text: str, reason: DropReason, detail: str) -> DroppedClaim:
    return DroppedClaim(text=text, reason=reason, detail=detail[:200])


def check_claims(
    claims: Sequence[Claim],
    evidence: Mapping[str, str],
    *,
    current: Callable[[str], bool],
) -> ClaimsChecked:
    """Keep each claim whose quote is found in a current evidence item it cites; drop the
    rest with why. ``evidence`` maps each ref to its content; ``current(ref)`` says
    whether that item is still current."""
    kept: list[KeptClaim] = []
    dropped: list[DroppedClaim] = []
    normalized = {ref: normalize(content) for ref, content in evidence.items()}
    for claim in claims:
        verdict = _check_one(claim, normalized, current)
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
