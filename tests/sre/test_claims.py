"""Cited claims (``loopkernel_apps.sre._claims``): a model's claim is kept only if its quote
is found, whitespace-normalized, in current evidence it cites; every drop says why; the
reply schema bounds everything and admits only known refs."""

from __future__ import annotations

import json

import pytest

from loopkernel.models import check_reply
from loopkernel_apps.sre._claims import (
    MAX_CLAIMS,
    Claim,
    ClaimKind,
    ClaimsChecked,
    DropReason,
    check_claims,
    claims_schema,
    normalize,
    parse_claims,
)

EVIDENCE = {
    "pod/api-7f9c/events": (
        "Warning  BackOff   kubelet  Back-off restarting failed container api\n"
        'Warning  Failed    kubelet  Error: secret "db-creds" not found'
    ),
    "pod/auth-5d2b/events": (
        'Warning  Failed  kubelet  Failed to pull image "registry.local/auth:2.4":\n'
        "    rpc error: code = NotFound   desc = manifest unknown"
    ),
    "pod/old-1a/logs": "panic: connection refused to 10.0.0.7:5432",
}
CURRENT = {"pod/api-7f9c/events", "pod/auth-5d2b/events"}


def claim(quote: str, *refs: str, kind: ClaimKind = ClaimKind.SUSPECTED_CAUSE) -> Claim:
    return Claim(text="auth cannot pull its image", kind=kind, refs=refs, quote=quote)


def checked(*claims: Claim) -> ClaimsChecked:
    return check_claims(claims, EVIDENCE, current=CURRENT.__contains__)


def test_a_quote_found_across_whitespace_is_kept_as_suspected() -> None:
    quote = 'Failed to pull image "registry.local/auth:2.4": rpc error: code = NotFound desc'
    got = checked(claim(quote, "pod/api-7f9c/events", "pod/auth-5d2b/events"))
    assert not got.dropped
    (kept,) = got.kept
    assert kept.ref == "pod/auth-5d2b/events" and kept.status == "suspected"
    assert kept.quote == normalize(quote) and not kept.needs_approval


def test_a_next_step_always_needs_approval() -> None:
    step = claim('secret "db-creds" not found', "pod/api-7f9c/events", kind=ClaimKind.NEXT_STEP)
    (kept,) = checked(step).kept
    assert kept.needs_approval


@pytest.mark.parametrize(
    ("c", "reason"),
    [
        (claim("Back-off restarting failed container api"), DropReason.NO_REF),
        (claim("Back-off restarting failed container", "svc/api"), DropReason.UNKNOWN_REF),
        (claim("Failed", "pod/api-7f9c/events"), DropReason.QUOTE_TOO_SHORT),
        (claim("ImagePullBackOff!!!!!!", "pod/api-7f9c/events"), DropReason.QUOTE_TOO_SHORT),
        # in the evidence, but not in the item cited
        (claim("manifest unknown for auth", "pod/api-7f9c/events"), DropReason.QUOTE_NOT_FOUND),
        (
            claim("rpc error: code = Unavailable", "pod/auth-5d2b/events"),
            DropReason.QUOTE_NOT_FOUND,
        ),
        (claim("connection refused to 10.0.0.7", "pod/old-1a/logs"), DropReason.STALE_EVIDENCE),
    ],
)
def test_each_drop_says_why(c: Claim, reason: DropReason) -> None:
    got = checked(c)
    assert not got.kept
    (dropped,) = got.dropped
    assert dropped.reason is reason and dropped.detail


def test_the_schema_bounds_the_reply_and_admits_only_known_refs() -> None:
    schema = claims_schema(sorted(EVIDENCE))
    good = {
        "claims": [
            {
                "text": "auth's image is missing",
                "kind": "suspected_cause",
                "refs": ["pod/auth-5d2b/events"],
                "quote": "manifest unknown",
            }
        ]
    }
    check_reply(json.dumps(good), schema)
    bad_ref = {"claims": [{**good["claims"][0], "refs": ["configmap/x"]}]}
    too_long = {"claims": [{**good["claims"][0], "quote": "x" * 301}]}
    too_many = {"claims": good["claims"] * (MAX_CLAIMS + 1)}
    extra = {"claims": [{**good["claims"][0], "verified": True}]}
    for reply in (bad_ref, too_long, too_many, extra, {"claims": [{"text": "t"}]}):
        with pytest.raises(Exception, match="breaks the response schema"):
            check_reply(json.dumps(reply), schema)


def test_parse_keeps_claims_and_lists_what_is_not_one() -> None:
    raw = json.dumps(
        {
            "claims": [
                {"text": "t", "kind": "summary", "refs": ["a"], "quote": "q q q q q q q"},
                {"text": "t", "kind": "verified_cause", "refs": ["a"], "quote": "q"},
                "prose",
            ]
        }
    )
    claims, bad = parse_claims(raw)
    assert [c.kind for c in claims] == [ClaimKind.SUMMARY]
    assert [b.reason for b in bad] == [DropReason.MALFORMED] * 2
    assert parse_claims("Sure! The cause is auth.")[0] == []
    assert parse_claims("[]")[1][0].reason is DropReason.MALFORMED
