"""A launch plan as shell: one annotated script that runs the part of one node
(``./launch.sh 0``, ``./launch.sh router``), or one script per node.

Node addresses come from the environment (``NODE_0=10.0.0.1 ...``); the script refuses to
start without the ones it needs. Arguments holding a ``${VAR}`` are double-quoted so the shell
substitutes them (inside JSON too); every other argument is quoted with shlex.
"""
from __future__ import annotations

import re
import shlex

from .plan import Command, LaunchPlan

_VAR = re.compile(r"\$\{(\w+)\}")


def quote(arg: str) -> str:
    """Shell-quote ``arg``, keeping ``${VAR}`` references live."""
    if "${" not in arg:
        return shlex.quote(arg)
    parts = []
    pos = 0
    for m in _VAR.finditer(arg):
        parts.append(_dq(arg[pos:m.start()]))
        parts.append(m.group(0))
        pos = m.end()
    parts.append(_dq(arg[pos:]))
    return '"' + "".join(parts) + '"'


def _dq(text: str) -> str:
    """Escape text for the inside of a double-quoted shell word."""
    return re.sub(r'([\\"$`])', r"\\\1", text)


def command_line(c: Command, indent: str = "  ") -> str:
    env = "".join(f"{k}={quote(v)} " for k, v in c.env)
    words = [quote(a) for a in c.argv]
    lines, line = [], indent + env + " ".join(words[:c.program_len])
    for w in words[c.program_len:]:
        if w.startswith("--") or w.startswith("'--"):
            lines.append(line)
            line = indent + "    " + w
        else:
            line += " " + w
    lines.append(line)
    return " \\\n".join(lines) + " &"


def _variables(plan: LaunchPlan) -> list[str]:
    names = sorted({v for c in plan.commands for a in c.argv + tuple(x for _k, x in c.env)
                    for v in _VAR.findall(a)}, key=lambda n: (not n.startswith("NODE_"), len(n), n))
    out = []
    for n in names:
        if n == "MODEL_PATH":
            out.append(': "${MODEL_PATH:?set MODEL_PATH to the model (a Hugging Face id or a local folder)}"')
        else:
            out.append(f': "${{{n}:?set {n} to the address of node {n[5:]}}}"' if n.startswith("NODE_")
                       else f': "${{{n}:?set {n}}}"')
    return out


def _header(plan: LaunchPlan) -> list[str]:
    lines = [f"# pdsim launch: {plan.scenario}" + (f" ({plan.description})" if plan.description else ""),
             f"# {plan.versions}; {plan.model} ({plan.model_path}) on {plan.nodes} node(s) of {plan.hardware}",
             "# Each node runs its own part; node addresses come from the environment:",
             "#   NODE_0=10.0.0.1 NODE_1=10.0.0.2 ... ./launch.sh <node index>   (and ./launch.sh router)"]
    for n in plan.notes:
        lines.append(f"# note: {n}")
    if plan.unmapped:
        lines.append("# pdsim knobs set in this scenario with no launch equivalent:")
        lines += [f"#   {k}: {why}" for k, why in plan.unmapped]
    return lines


def render(plan: LaunchPlan) -> str:
    """The annotated script: ``launch.sh NODE`` starts node NODE's processes, ``launch.sh router``
    the router or proxy."""
    out = ["#!/usr/bin/env bash"] + _header(plan) + ["set -euo pipefail",
                                                    'PART="${1:?usage: launch.sh <node index> | router}"']
    out += _variables(plan)
    out.append('case "$PART" in')
    for node in range(plan.nodes):
        cmds = plan.on_node(node)
        if not cmds:
            continue
        out.append(f"  {node})")
        for c in cmds:
            out.append(f"    # {c.comment}")
            out.append(command_line(c, "    "))
        out.append("    ;;")
    if plan.router:
        out.append("  router)")
        for c in plan.router:
            out.append(f"    # {c.comment}")
            out.append(command_line(c, "    "))
        out.append("    ;;")
    out += ['  *) echo "unknown part: $PART (a node index or router)" >&2; exit 2 ;;', "esac", "wait", ""]
    return "\n".join(out)


def render_per_node(plan: LaunchPlan) -> dict[str, str]:
    """{file name: script}: ``node<i>.sh`` per node and ``router.sh``."""
    files = {}
    parts = [(f"node{n}.sh", plan.on_node(n)) for n in range(plan.nodes)] + [("router.sh", plan.router)]
    for name, cmds in parts:
        if not cmds:
            continue
        sub = LaunchPlan(**{**plan.__dict__, "commands": tuple(cmds)})
        body = ["#!/usr/bin/env bash", *_header(plan), f"# this file: {name}", "set -euo pipefail", *_variables(sub)]
        for c in cmds:
            body += [f"# {c.comment}", command_line(c, "")]
        files[name] = "\n".join(body + ["wait", ""])
    return files


def commands_of(script: str) -> list[list[str]]:
    """The commands of a rendered script, each as argv (env assignments and ``&`` removed), with
    ``${VAR}`` left as written: what a test feeds to the flag checker."""
    out = []
    joined = script.replace("\\\n", " ")
    for line in joined.splitlines():
        line = line.strip()
        if not line.endswith("&") or line.startswith("#"):
            continue
        words = shlex.split(line[:-1], posix=True)
        while words and re.match(r"^\w+=", words[0]):
            words.pop(0)
        out.append(words)
    return out
