"""`plnt completion bash`: a bash completion script generated from the argument parsers, so it
never drifts from the flags: subcommands, each one's flags, the choices of flags that have them
(``-o yaml|json``), function names for ``plnt function``, and file names elsewhere."""

from __future__ import annotations

import argparse
import shlex

from plnt_host import runtime

SCRIPT = """\
# bash completion for plnt: source <(plnt completion bash)
_plnt() {{
  local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}"
  if [[ $COMP_CWORD -eq 1 ]]; then
    COMPREPLY=($(compgen -W {commands} -- "$cur"))
    return
  fi
  local flags="" words=""
  case "${{COMP_WORDS[1]}}" in
{flag_cases}
  esac
  case "${{COMP_WORDS[1]}} $prev" in
{choice_cases}
  esac
  if [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "$flags" -- "$cur"))
  elif [[ -n "$words" ]]; then
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
  else
    COMPREPLY=($(compgen -f -- "$cur"))
  fi
}}
complete -o filenames -F _plnt plnt
"""


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _words(items: list[str]) -> str:
    return shlex.quote(" ".join(items))


def _flag_case(name: str, sub: argparse.ArgumentParser) -> str:
    """The subcommand's flags and the words its positional argument takes."""
    flags = sorted(f for a in sub._actions for f in a.option_strings)
    positional = [a for a in sub._actions if not a.option_strings and a.choices]
    words = sorted(positional[0].choices or ()) if positional else []
    if name == "function":
        words = runtime.function_names()
    return f"    {name}) flags={_words(flags)}; words={_words(words)} ;;"


def _choice_cases(name: str, sub: argparse.ArgumentParser) -> list[str]:
    """Per option of the subcommand that takes one of a few values, those values."""
    cases = []
    for action in sub._actions:
        if action.option_strings and action.choices:
            pattern = "|".join(f'"{name} {f}"' for f in action.option_strings)
            choices = _words(sorted(map(str, action.choices)))
            cases.append(f'    {pattern}) COMPREPLY=($(compgen -W {choices} -- "$cur")); return ;;')
    return cases


def bash(parser: argparse.ArgumentParser, delegated: dict[str, argparse.ArgumentParser]) -> str:
    subcommands = {**_subcommands(parser), **delegated}
    flag_cases, choice_cases = [], []
    for name, sub in sorted(subcommands.items()):
        flag_cases.append(_flag_case(name, sub))
        choice_cases += _choice_cases(name, sub)
    top = sorted(subcommands) + sorted(f for a in parser._actions for f in a.option_strings)
    return SCRIPT.format(
        commands=_words(top),
        flag_cases="\n".join(flag_cases),
        choice_cases="\n".join(choice_cases) or "    *) ;;",
    )
