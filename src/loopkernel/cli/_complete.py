"""``loopkernel completion bash``: a completion script generated from the parser itself.

Commands and options come from the parser; a command's first positional is completed by
what it names: ``app`` by the installed apps' names, ``run`` (and ``delete``'s runs) by the
run ids the database holds (asked of ``loopkernel runs`` at completion time, with the
``--db`` of the line being completed), a shell by ``bash``; an option's value and the rest
by file names."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

__all__ = ["bash_completion"]

# What a positional's dest says it takes, as the script's completion kind.
_KINDS = {"app": "app", "run": "run", "runs": "runs", "shell": "shell"}


@dataclass(frozen=True)
class _Command:
    options: tuple[str, ...]  # every --option
    valued: tuple[str, ...]  # the options that take a value (the next word is theirs)
    first: str  # what the first positional takes: app, run, runs (all of them), shell, file


def _command(sub: argparse.ArgumentParser) -> _Command:
    shown = [
        a for a in sub._actions if a.help is not argparse.SUPPRESS or "--db" in a.option_strings
    ]
    options = sorted(o for a in shown for o in a.option_strings if o.startswith("--"))
    valued = sorted(
        o for a in sub._actions if a.nargs != 0 for o in a.option_strings if o.startswith("--")
    )
    positionals = [a.dest for a in sub._actions if not a.option_strings]
    first = _KINDS.get(positionals[0], "file") if positionals else "file"
    return _Command(tuple(options), tuple(valued), first)


def _words(parser: argparse.ArgumentParser) -> tuple[list[str], dict[str, _Command]]:
    """The top-level options, and each command's completion facts."""
    commands: dict[str, _Command] = {}
    top: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            commands.update((name, _command(sub)) for name, sub in action.choices.items())
        else:
            top.extend(o for o in action.option_strings if o.startswith("--"))
    return sorted(top), commands


def _app_names() -> list[str]:
    from importlib.metadata import entry_points

    return sorted({ep.name for ep in entry_points(group="loopkernel.apps")})


def bash_completion(parser: argparse.ArgumentParser) -> str:
    """A bash completion script for ``loopkernel``, generated from its parser."""
    top, commands = _words(parser)
    cases = "\n".join(
        f'        {name}) opts="{" ".join(c.options)}"; valued="{" ".join(c.valued)}"; '
        f"first={c.first} ;;"
        for name, c in sorted(commands.items())
    )
    return f"""# bash completion for loopkernel (generated: loopkernel completion bash)
_loopkernel_runs() {{
    command "${{COMP_WORDS[0]}}" "$@" runs --limit 200 2>/dev/null | cut -d' ' -f1
}}
_loopkernel() {{
    local cur prev cmd i j n opts valued first
    local -a db=()
    cur="${{COMP_WORDS[COMP_CWORD]}}"
    prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    cmd=""
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${{COMP_WORDS[i]}}" in
            --db) db=(--db "${{COMP_WORDS[i+1]}}"); ((i++)) ;;
            --db=*) db=("${{COMP_WORDS[i]}}") ;;
            --log-level) ((i++)) ;;
            -*) ;;
            *) cmd="${{COMP_WORDS[i]}}"; break ;;
        esac
    done
    if [[ -z "$cmd" ]]; then
        if [[ "$cur" == -* ]]; then
            COMPREPLY=($(compgen -W "{" ".join(top)}" -- "$cur"))
        else
            COMPREPLY=($(compgen -W "{" ".join(sorted(commands))}" -- "$cur"))
        fi
        return
    fi
    case "$cmd" in
{cases}
        *) opts=""; valued=""; first=file ;;
    esac
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$opts" -- "$cur"))
        return
    fi
    if [[ " $valued " == *" $prev "* ]]; then
        COMPREPLY=($(compgen -f -- "$cur"))  # an option's value: a path, as often as not
        return
    fi
    n=0  # the positionals before the word being completed
    for ((j = i + 1; j < COMP_CWORD; j++)); do
        case "${{COMP_WORDS[j]}}" in
            --db) db=(--db "${{COMP_WORDS[j+1]}}"); ((j++)) ;;
            --db=*) db=("${{COMP_WORDS[j]}}") ;;
            -*) [[ " $valued " == *" ${{COMP_WORDS[j]}} "* ]] && ((j++)) ;;
            *) ((n++)) ;;
        esac
    done
    case "$first:$n" in
        app:0) COMPREPLY=($(compgen -W "{" ".join(_app_names())}" -- "$cur")) ;;
        run:0 | runs:*) COMPREPLY=($(compgen -W "$(_loopkernel_runs "${{db[@]}}")" -- "$cur")) ;;
        shell:0) COMPREPLY=($(compgen -W "bash" -- "$cur")) ;;
        *) COMPREPLY=($(compgen -f -- "$cur")) ;;
    esac
}}
complete -F _loopkernel loopkernel
"""
