"""`completion bash|zsh`: a shell completion script, generated from the CLI's own parser.

The script is a table read off the argparse tree — for each command path
(``""``, ``queue``, ``queue stats``…) its subcommands, its options and each
option's choices — and a small function that walks the words typed so far down
that table. Nothing is written by hand, so a verb or flag added to the parser is
completed with no change here, and a test holds the script to the parser.

    source <(kubectl-vigil completion bash)      # bash
    source <(kubectl-vigil completion zsh)       # zsh (through its bashcompinit)

It completes the commands `vigil` and `kubectl-vigil`. kubectl itself (1.26+) completes
`kubectl vigil <TAB>` by running an executable named `kubectl_complete-vigil` (installed beside
`kubectl-vigil`) with the words typed after `vigil`, the last one the word being completed; it
answers in cobra's format, one candidate a line and then `:4` (no file names): `candidates`,
from the same table.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
from collections.abc import Iterator
from typing import Any

SHELLS = ("bash", "zsh")
#: cobra's ShellCompDirectiveNoFileComp: the shell offers nothing but the candidates given.
NO_FILE_COMPLETION = 4
COMMANDS = ("vigil", "kubectl-vigil")


@dataclasses.dataclass(frozen=True)
class Node:
    """One command path of the parser: what may follow it."""

    path: str
    commands: tuple[str, ...]
    words: tuple[str, ...]  # subcommands, options and positional choices
    choices: tuple[tuple[str, tuple[str, ...]], ...]  # (option, its choices)


def walk(parser: argparse.ArgumentParser, path: str = "") -> Iterator[Node]:
    """Every command path under `parser`, depth first, the root (path "") first."""
    commands: list[str] = []
    words: list[str] = []
    choices: list[tuple[str, tuple[str, ...]]] = []
    children: list[tuple[str, argparse.ArgumentParser]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                commands.append(name)
                children.append((name, child))
        elif action.option_strings:
            words.extend(action.option_strings)
            if action.choices is not None:
                for option in action.option_strings:
                    choices.append((option, tuple(str(c) for c in action.choices)))
        elif action.choices is not None:
            words.extend(str(c) for c in action.choices)
    yield Node(path, tuple(commands), tuple(commands) + tuple(words), tuple(choices))
    for name, child in children:
        yield from walk(child, f"{path} {name}".strip())


def candidates(parser: argparse.ArgumentParser, words: list[str]) -> list[str]:
    """What may complete the last of `words` (the words after the command, the last one being
    typed): an option's choices right after that option, else the subcommands, options and
    choices of the command path the earlier words name."""
    nodes = {node.path: node for node in walk(parser)}
    *before, current = words or [""]
    path = ""
    for word in before:
        if word in nodes[path].commands:
            path = f"{path} {word}".strip()
    choices = dict(nodes[path].choices)
    pool = choices[before[-1]] if before and before[-1] in choices else nodes[path].words
    return [word for word in pool if word.startswith(current)]


def cobra_answer(found: list[str]) -> str:
    """`found` as kubectl's plugin completion reads it (cobra's `__complete` output)."""
    return "".join(f"{word}\n" for word in found) + f":{NO_FILE_COMPLETION}\n"


def _case(function: str, cases: list[tuple[str, tuple[str, ...]]]) -> str:
    lines = [f"{function}() {{", '  case "$1" in']
    lines += [f"    {shlex.quote(key)}) echo {shlex.quote(' '.join(values))} ;;" for key, values in cases if values]
    lines += ["  esac", "}"]
    return "\n".join(lines)


def bash_script(parser: argparse.ArgumentParser) -> str:
    """The bash completion script of `parser`'s commands."""
    nodes = list(walk(parser))
    return "\n".join([
        "# bash completion for vigil / kubectl-vigil, generated from its parser (kubectl-vigil completion bash)",
        _case("_vigil_commands", [(n.path, n.commands) for n in nodes]),
        _case("_vigil_words", [(n.path, n.words) for n in nodes]),
        _case("_vigil_choices", [(f"{n.path}|{option}", values) for n in nodes for option, values in n.choices]),
        """_vigil() {
  local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}" path="" word i
  for ((i = 1; i < COMP_CWORD; i++)); do
    word="${COMP_WORDS[i]}"
    if [[ " $(_vigil_commands "$path") " == *" $word "* ]]; then path="${path:+$path }$word"; fi
  done
  local choices
  choices="$(_vigil_choices "$path|$prev")"
  if [[ -n "$choices" ]]; then
    COMPREPLY=($(compgen -W "$choices" -- "$cur"))
  else
    COMPREPLY=($(compgen -W "$(_vigil_words "$path")" -- "$cur"))
  fi
}""",
        f"complete -F _vigil {' '.join(COMMANDS)}",
    ]) + "\n"  # fmt: skip


def zsh_script(parser: argparse.ArgumentParser) -> str:
    """The zsh completion script: the bash one, through zsh's bashcompinit."""
    return (
        "# zsh completion for vigil / kubectl-vigil, generated from its parser (kubectl-vigil completion zsh)\n"
        "autoload -U +X compinit && compinit\n"
        "autoload -U +X bashcompinit && bashcompinit\n" + bash_script(parser)
    )


def cmd_completion(args: argparse.Namespace) -> int:
    root: argparse.ArgumentParser = args.root_parser
    print(bash_script(root) if args.shell == "bash" else zsh_script(root), end="")
    return 0


def add_parsers(sub: Any, *, root: argparse.ArgumentParser) -> None:
    """Register `completion` on the CLI's subparsers; `root` is the parser the script is made from."""
    co = sub.add_parser("completion", help="print a shell completion script: source <(kubectl-vigil completion bash)")
    co.add_argument("shell", choices=SHELLS)
    co.set_defaults(func=cmd_completion, root_parser=root)
