"""mkdocs hook: the CLI reference page, written from the ``themisto`` command line's own definitions.

At build time it walks the Typer app of `themisto_env.cli` (its groups and commands, as ``--help``
shows them) and puts, where ``docs/cli.md`` holds `MARKER`, one section per command: its help, its
usage line and a table of its arguments and options. Nothing is kept by hand: a new option is in the next build.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

MARKER = "<!-- the commands, written at build time by docs/hooks/cli_reference.py -->"
PAGE = "cli.md"


def commands(command: Any, context: Any) -> Iterator[tuple[Any, Any]]:
    """The command and every visible command under it, depth first in the order ``--help`` lists them."""
    yield command, context
    for name in getattr(command, "list_commands", lambda _ctx: [])(context):
        sub = command.get_command(context, name)
        if sub is not None and not sub.hidden:
            yield from commands(sub, type(context)(sub, info_name=name, parent=context))


def _cell(text: str) -> str:
    return " ".join(unescape(text).split()).replace("|", "\\|")


def unescape(text: str) -> str:
    """A help text as ``--help`` shows it: ``\\[`` is rich markup's escaped bracket (``themisto-env\\[ray]``)."""
    return text.replace("\\[", "[")


def command_markdown(command: Any, context: Any) -> str:
    """One command's section: heading, help, usage, and its parameters as a table."""
    path = context.command_path
    lines = [f"## `{path}`", ""]
    help_text = unescape(inspect.cleandoc(command.help or command.short_help or "").replace("\b\n", ""))
    if help_text:
        lines += [help_text, ""]
    usage = " ".join([path, *command.collect_usage_pieces(context)])
    lines += ["```text", usage, "```", ""]
    rows = []
    for param in command.get_params(context):
        if getattr(param, "hidden", False):
            continue
        record = param.get_help_record(context)
        if record is None:
            continue
        name, what = record
        rows.append(f"| `{_cell(name)}` | {_cell(what)} |")
    if rows:
        lines += ["| argument or option | what it does |", "| --- | --- |", *rows, ""]
    if hasattr(command, "list_commands"):
        subs = [name for name in command.list_commands(context) if not command.get_command(context, name).hidden]
        lines += ["Commands: " + ", ".join(f"`{path} {name}`" for name in subs) + ".", ""]
    return "\n".join(lines)


def reference() -> str:
    """The whole reference: every command of ``themisto``, the top-level one first."""
    import typer.main

    from themisto_env.cli import app, widen_help

    widen_help()
    top = typer.main.get_command(app)
    context = top.context_class(top, info_name="themisto")
    return "\n".join(command_markdown(command, ctx) for command, ctx in commands(top, context))


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"docs/{PAGE} lost its marker {MARKER!r}: the CLI reference has nowhere to go")
    return markdown.replace(MARKER, reference())
