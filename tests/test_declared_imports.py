"""Every package pdsim imports is declared (issue 22).

Two checks, so that an undeclared import is caught here in seconds rather than by a user on a
fresh machine (scipy once slipped through because an optional extra happened to pull it in):

- statically, every ``import`` under pdsim/, dashboards/ and calibration/microbench/, at any depth,
  names the standard library, pdsim itself, a core dependency, or (only inside a function, where
  its absence is reported as a missing extra) a package of an optional extra;
- dynamically, a subprocess imports every module under pdsim/ and dashboards/ with an import hook
  that refuses, for imports made by pdsim's own files, any top-level package that is neither the
  standard library nor a core dependency. That is what a plain ``pip install pdsim`` can import,
  whatever else happens to be installed in the environment running the tests.

And each optional extra, when absent, gives a one-line error naming it.
"""
from __future__ import annotations

import ast
import importlib.metadata as md
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")

ROOT = Path(__file__).resolve().parents[1]
OWN = {"pdsim", "dashboards"}
# calibration/microbench scripts import their sibling helper module by its bare name
MICROBENCH_SIBLINGS = {p.stem for p in (ROOT / "calibration" / "microbench").glob("*.py")}
# imported inside a try/except ImportError, each with a fallback (stated where it is imported)
GUARDED = {"deep_gemm"}
# cpu_profile.py's model-step probe runs inside the real engine's own venv (.ci/engine.sh), never pdsim's
ENGINE_VENV = {"vllm"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _dist_name(requirement: str) -> str:
    return _norm(re.split(r"[\s\[<>=!~;]", requirement.strip(), maxsplit=1)[0])


def _import_names(dists: set[str]) -> set[str]:
    """Top-level import names that the given distributions provide (installed ones by their metadata)."""
    names = {d.replace("-", "_") for d in dists}
    for top, owners in md.packages_distributions().items():
        if any(_norm(o) in dists for o in owners):
            names.add(top)
    return names


def _declared() -> tuple[set[str], dict[str, set[str]]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    core = {_dist_name(r) for r in project["dependencies"]}
    extras = {k: {_dist_name(r) for r in v} for k, v in project.get("optional-dependencies", {}).items()}
    return _import_names(core), {k: _import_names(v) for k, v in extras.items()}


def _sources() -> list[Path]:
    files = [p for d in ("pdsim", "dashboards") for p in (ROOT / d).rglob("*.py")]
    return files + sorted((ROOT / "calibration" / "microbench").glob("*.py"))


def _imports(path: Path):
    """(top-level name, line, at module level?) of every absolute import in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    parents = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node

    def module_level(node) -> bool:
        while node in parents:
            node = parents[node]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return False
        return True

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.split(".")[0], node.lineno, module_level(node)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0], node.lineno, module_level(node)


def test_every_import_is_stdlib_own_or_declared():
    core, extras = _declared()
    any_extra = set().union(*extras.values())
    stdlib = set(sys.stdlib_module_names)
    problems = []
    for path in _sources():
        rel = path.relative_to(ROOT)
        microbench = rel.parts[:2] == ("calibration", "microbench")
        for top, line, at_module_level in _imports(path):
            if top in stdlib or top in OWN or top in core or top in GUARDED or top == "__future__":
                continue
            if microbench and (top in MICROBENCH_SIBLINGS or top in ENGINE_VENV):
                continue
            if top in any_extra:
                if at_module_level and not microbench:
                    problems.append(f"{rel}:{line}: '{top}' is an optional extra's package imported at module "
                                    f"level (import it inside the function that needs it, via pdsim.extras.require)")
                continue
            problems.append(f"{rel}:{line}: '{top}' is not a declared dependency (pyproject.toml)")
    assert not problems, "\n".join(problems)


_WALK = textwrap.dedent("""
    import importlib, json, pkgutil, sys
    from pathlib import Path

    root = Path(sys.argv[1]).resolve()
    allowed = set(json.loads(sys.argv[2])) | set(sys.stdlib_module_names) | {"pdsim", "dashboards", "__future__"}
    own = (str(root / "pdsim"), str(root / "dashboards"))

    class Plain:
        # refuses what a plain install lacks, for imports made by pdsim's own files only
        def find_spec(self, name, path=None, target=None):
            top = name.split(".")[0]
            if top in allowed or "." in name:
                return None
            frame = sys._getframe(1)
            while frame is not None and frame.f_code.co_filename.startswith("<frozen"):
                frame = frame.f_back
            if frame is not None and frame.f_code.co_filename.startswith(own):
                raise ModuleNotFoundError(f"No module named {top!r} (not a declared core dependency)", name=top)
            return None

    sys.meta_path.insert(0, Plain())
    sys.path.insert(0, str(root))
    failed = {}
    names = []
    for pkg in ("pdsim", "dashboards"):
        mod = importlib.import_module(pkg)
        names.append(pkg)
        # __main__ modules run the CLI when imported; what they import is imported by the CLI itself
        names += [m.name for m in pkgutil.walk_packages(mod.__path__, pkg + ".") if not m.name.endswith("__main__")]
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # report every module, not just the first
            failed[name] = f"{type(exc).__name__}: {exc}"
    print(json.dumps({"imported": len(names), "failed": failed}))
""")


def test_every_module_imports_with_core_dependencies_only():
    core, _ = _declared()
    r = subprocess.run([sys.executable, "-c", _WALK, str(ROOT), json.dumps(sorted(core))],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["imported"] > 150, out
    assert not out["failed"], "\n".join(f"{k}: {v}" for k, v in out["failed"].items())


def test_the_hook_catches_an_undeclared_import(tmp_path):
    # the walk's own check: a pdsim module importing a package outside the core set fails it
    core, _ = _declared()
    r = subprocess.run([sys.executable, "-c", _WALK, str(ROOT), json.dumps(sorted(core - {"scipy"}))],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert "pdsim.calibrate.lsq" in out["failed"] and "scipy" in out["failed"]["pdsim.calibrate.lsq"]


_BLOCK = textwrap.dedent("""
    import sys
    sys.modules[{blocked!r}] = None  # what an absent package looks like to import and find_spec
    sys.argv = {argv!r}
""")


def _run_without(blocked: str, argv: list[str], body: str, tmp_path: Path) -> subprocess.CompletedProcess:
    code = _BLOCK.format(blocked=blocked, argv=argv) + body
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})


def _one_line(stderr: str) -> str:
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_replay_without_aiohttp_names_the_extra(tmp_path):
    r = _run_without("aiohttp", ["pdsim", "replay", "small-disagg", "--endpoint", "http://127.0.0.1:9",
                                 "--out", str(tmp_path / "o")],
                     "from pdsim.cli import main\nsys.exit(main())", tmp_path)
    assert r.returncode == 2
    assert "pip install 'pdsim[replay]'" in _one_line(r.stderr)


def test_ray_sweep_without_ray_names_the_extra(tmp_path):
    r = _run_without("ray", [], textwrap.dedent("""
        from pdsim.parallel import run_ray
        from pdsim.specs.errors import SpecError
        try:
            run_ray([], lambda *a: None, dict, progress=False)
        except SpecError as e:
            print(e, file=sys.stderr)
            sys.exit(2)
    """), tmp_path)
    assert r.returncode == 2 and "pdsim[ray]" in _one_line(r.stderr)


def test_microbenchmarks_without_torch_name_the_extra(tmp_path):
    script = ROOT / "calibration" / "microbench" / "gemm.py"
    r = _run_without("torch", [str(script), "--dry-run"], textwrap.dedent(f"""
        import runpy
        sys.path.insert(0, {str(script.parent)!r})
        runpy.run_path({str(script)!r}, run_name="__main__")
    """), tmp_path)
    assert r.returncode == 1 and "pdsim[calibration]" in _one_line(r.stderr)


def test_extras_module_names_each_extra(monkeypatch):
    from pdsim.extras import EXTRAS, MissingExtra, require

    _, extras = _declared()
    for extra, names in EXTRAS.items():
        assert set(names) <= extras[extra], (extra, names)
    monkeypatch.setitem(sys.modules, "aiohttp", None)  # what an absent package looks like to import
    with pytest.raises(MissingExtra, match=r"pdsim replay needs aiohttp.*pip install 'pdsim\[replay\]'"):
        require("aiohttp", "pdsim replay")


def test_pd_proxy_without_aiohttp_names_the_extra(tmp_path):
    r = _run_without("aiohttp", ["pd_proxy", "--prefill", "http://127.0.0.1:9", "--decode", "http://127.0.0.1:9",
                                 "--port", "9"],
                     "from pdsim.replay.pd_proxy import main\nmain()", tmp_path)
    assert r.returncode == 1 and "pip install 'pdsim[replay]'" in _one_line(r.stderr)
