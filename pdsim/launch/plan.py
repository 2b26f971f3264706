"""A launch plan: the commands that start a scenario's deployment on real servers, node by
node, with what maps and what does not. Engine-specific builders (sglang.py, vllm.py) fill it;
script.py renders it as shell."""
from __future__ import annotations

from dataclasses import dataclass, field

# Hugging Face repositories of the bundled models (their ModelSpec ``source`` cites them);
# any other model becomes ${MODEL_PATH} unless --model-path names it.
MODEL_IDS = {
    "deepseek-v3": "deepseek-ai/DeepSeek-V3",
    "deepseek-r1": "deepseek-ai/DeepSeek-R1",
    "llama-3.1-8b": "meta-llama/Llama-3.1-8B-Instruct",
    "qwen3-235b-a22b": "Qwen/Qwen3-235B-A22B",
    "gpt2": "openai-community/gpt2",
    "llama-3.1-70b": "meta-llama/Llama-3.1-70B-Instruct",
    "llama-3.1-8b-awq": "hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4",
}


@dataclass(frozen=True)
class Command:
    """One process: ``argv`` on node ``node`` (None: the router/proxy host, node 0 unless
    ROUTER_NODE says otherwise), with environment ``env`` and a ``comment`` above it."""

    node: int | None
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    comment: str = ""
    program_len: int = 3  # leading argv items naming the program (python -m module / vllm serve MODEL)

    @property
    def options(self) -> list[str]:
        return list(self.argv[self.program_len:])


@dataclass(frozen=True)
class LaunchPlan:
    engine: str  # sglang | vllm
    versions: str  # the releases the flags were checked against
    scenario: str
    description: str
    hardware: str
    model: str
    model_path: str
    nodes: int
    commands: tuple[Command, ...]
    mapped: tuple[tuple[str, str], ...]  # (pdsim knob, what it became)
    unmapped: tuple[tuple[str, str], ...]  # (pdsim knob, why it has no launch equivalent)
    notes: tuple[str, ...] = field(default_factory=tuple)

    def on_node(self, node: int) -> list[Command]:
        return [c for c in self.commands if c.node == node]

    @property
    def router(self) -> list[Command]:
        return [c for c in self.commands if c.node is None]


def model_path(resolved, override: str | None) -> str:
    """The ``--model-path`` / ``vllm serve`` argument for the scenario's model."""
    if override:
        return override
    return MODEL_IDS.get(resolved.model.name, "${MODEL_PATH}")


def changed(spec, field_name: str) -> bool:
    """Whether a dataclass field differs from its default (so an unmapped knob matters)."""
    import dataclasses

    f = {x.name: x for x in dataclasses.fields(spec)}[field_name]
    default = f.default if f.default is not dataclasses.MISSING else (
        f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
    return getattr(spec, field_name) != default
