"""``pdsim list``: bundled hardware profiles, models, example scenarios and plug-ins."""
from __future__ import annotations

import argparse


def register(sub) -> None:
    ls = sub.add_parser("list", help="bundled hardware profiles, models, example scenarios, plug-ins")
    ls.add_argument("what", nargs="?", default="all",
                    choices=["all", "hardware", "models", "scenarios", "routers", "plugins"],
                    help="what to list (default: all); plugins: every plug-in kind, built in and installed "
                         "(packages declaring the pdsim.plugins entry point)")
    ls.set_defaults(fn=run)


def run(args: argparse.Namespace) -> int:
    from ..specs import catalog

    what = args.what
    if what in ("all", "hardware"):
        print("hardware profiles:")
        for k in catalog.hardware_keys():
            hw = catalog.load_hardware_ref(k)
            g = hw.gpu
            print(f"  {k:<8} {g.name:<16} {g.bf16_tflops:>5.0f} BF16 TFLOPS {g.hbm_gib:>4.0f} GiB {g.hbm_gbps:>5.0f} GB/s HBM "
                  f"| {hw.node.gpus_per_node} GPUs/node, {hw.node.nics_per_node}x{hw.node.nic_gbit:.0f} Gb/s NICs"
                  + ("  [calibrated]" if hw.calibration else ""))
    if what in ("all", "models"):
        print("models:")
        for k in catalog.model_keys():
            m = catalog.load_model_ref(k)
            print(f"  {k:<18} {m.total_params / 1e9:7.1f}B params ({m.active_params / 1e9:.1f}B active), "
                  f"{m.attention.upper()}, KV {m.kv_bytes_per_token():,} B/token ({m.kv_dtype})")
    if what in ("all", "scenarios"):
        print("example scenarios:")
        from ..specs._convert import read_yaml

        for k in catalog.scenario_keys():
            data = read_yaml(catalog.scenarios_dir() / f"{k}.yaml") or {}
            print(f"  {k:<28} {data.get('description', '')}")
    if what == "routers":
        from ..sim.control.router import ROUTERS

        _print_kind("routers", ROUTERS)
    if what in ("all", "plugins"):
        from ..sim.resolve import REGISTRIES

        print("plug-ins (a key, an installed entry point, or package.module:ClassName with --allow-plugin):")
        for field, reg in REGISTRIES.items():
            _print_kind(field, reg)
    return 0


def _print_kind(field: str, reg) -> None:
    installed = reg.installed()
    extra = f"; installed: {', '.join(installed)}" if installed else ""
    print(f"  {field:<26} {', '.join(reg.keys())}{extra}")
