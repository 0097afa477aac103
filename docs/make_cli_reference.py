"""Write docs/cli.md from the commands' own --help (``--check``: exit 1 if
docs/cli.md is not what the commands say now).

    python docs/make_cli_reference.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tracedb.cli import main

OUT = Path(__file__).with_name("cli.md")


def _commands(group: click.Group, ctx: click.Context, prefix: str):
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        sub = click.Context(cmd, info_name=name, parent=ctx, terminal_width=80, max_content_width=80)
        yield f"{prefix} {name}", sub.get_help()
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, sub, f"{prefix} {name}")


def reference() -> str:
    ctx = click.Context(main, info_name="tracedb", terminal_width=80, max_content_width=80)
    parts = ["# Command reference\n",
             "Generated from each command's `--help` by `python docs/make_cli_reference.py`.\n",
             "## tracedb\n", "```\n" + ctx.get_help() + "\n```\n"]
    for title, text in _commands(main, ctx, "tracedb"):
        parts += [f"## {title}\n", "```\n" + text + "\n```\n"]
    return "\n".join(parts)


if __name__ == "__main__":
    text = reference()
    if sys.argv[1:] == ["--check"]:
        sys.exit(0 if OUT.exists() and OUT.read_text() == text else 1)
    OUT.write_text(text)
