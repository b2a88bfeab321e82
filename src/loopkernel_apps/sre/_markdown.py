"""The report in Markdown, for the engineer on call: the summary (with the answer to the
question), what was declined, the cause with its decisive quote, the chain, the proposed
remediation, missing evidence; then the other causes, facts, next steps, coverage, evidence."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

__all__ = ["render_markdown"]


def _cite(refs: Iterable[str]) -> str:
    refs = list(refs)
    return f" [{', '.join(refs)}]" if refs else ""


def render_markdown(r: dict[str, Any]) -> str:
    cov = r["coverage"]
    out = [
        f"# Investigation: {r.get('question') or ''}".rstrip(),
        "",
        f"Namespace `{r.get('namespace')}`.",
        "",
        f"**Summary.** {r['summary']}",
        "",
    ]
    out += [f"**{d}**" for d in r.get("declined", [])]
    if r.get("declined"):
        out.append("")
    verified = r["verified_causes"]
    out += ["## Cause", ""]
    if verified:
        top = verified[0]
        out += [
            f"**{top['detector']}**: {top['text']}{_cite(top['evidence'])}",
            "",
            f"> {top['quote']}",
        ]
    else:
        out.append("None verified: no detector observed a cause directly.")
    if r.get("chain"):
        out += ["", "## Chain (cause → symptom)", ""]
        out += [f"{n}. {s['text']}{_cite(s['evidence'])}" for n, s in enumerate(r["chain"], 1)]
    out += ["", "## Proposed remediation (requires approval; nothing is executed)", ""]
    out += [f"- {p['action']}" for p in r["proposed_remediation"]] or ["None."]
    out += ["", "## Missing evidence", ""]
    out += [f"- {m}" for m in r["missing_evidence"]] or ["None."]
    if len(verified) > 1:
        out += ["", "## Other verified causes", ""]
        out += [
            f"{v['rank']}. **{v['detector']}**: {v['text']}{_cite(v['evidence'])}\n"
            f"   - quote: `{v['quote']}`\n   - ranking: {v['ranking']}"
            for v in verified[1:]
        ]
    if verified:
        out += ["", f"Ranking of the cause: {verified[0]['ranking']}."]
    out += ["", "## Suspected causes", ""]
    out += [
        f"- ({s['confidence']}) {s['text']}{_cite(s['evidence'])}" for s in r["suspected_causes"]
    ] or ["None."]
    out += ["", "## Observed facts", ""]
    out += [f"- {f['text']}{_cite(f['evidence'])}" for f in r["observed_facts"]] or ["None."]
    out += ["", "## Next steps", ""]
    out += [f"- {s}" for s in r["next_steps"]] or ["None."]
    out += [
        "",
        "## Coverage",
        "",
        f"- exit: {cov['exit']} ({cov['exit_reason']}); {cov['tool_calls']} tool calls, "
        f"{cov['already_collected']} answered 'already collected'",
        f"- sources: {', '.join(cov['sources']) or 'none'}",
    ]
    for s in cov["skills"]:
        out.append(f"- playbook {s['name']}: chosen for {', '.join(s['why'])}")
    for ref in cov["refused_requests"]:
        out.append(
            f"- declined: {ref['tool']} {json.dumps(ref['args'], sort_keys=True)}: {ref['reason']}"
        )
    for f in cov["failed_tools"]:
        out.append(f"- failed: {f['tool']} {json.dumps(f['args'], sort_keys=True)}: {f['error']}")
    if cov.get("model"):
        out.append(f"- model: {cov['model']}")
    out += _claims(cov.get("claims"))
    out += ["", "## Evidence", ""]
    for e in r["evidence"]:
        cut = " (truncated)" if e["truncated"] else ""
        args = json.dumps(e["args"], sort_keys=True)
        out.append(f"- {e['ref']}: {e['tool']} {args} — {e['source']}{cut}")
    return "\n".join(out) + "\n"


def _claims(claims: dict[str, Any] | None) -> list[str]:
    """The model's claims (a run with a model only): what each kept one did, with its
    quote, and every refused one with why; none of them is a finding."""
    if claims is None:
        return []
    out = [f"- the model's claims: {claims['reason']}"] if claims.get("reason") else []
    for k in claims["kept"]:
        out.append(f"- claim kept ({k['status']}; {k['effect']}): {k['text']} [{k['ref']}]")
        out.append(f"  > {k['quote']}")
    for r in claims["refused"]:
        out.append(f"- claim refused ({r['reason']}): {r['text'][:120]} — {r['detail']}")
    return out
