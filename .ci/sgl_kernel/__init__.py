"""Stand-in for sgl-kernel in pdsim's SGLang CPU venv.

sgl-kernel's CPU build needs SGLang's source tree, which PyPI does not carry (its wheels are CUDA
builds), and its kernels need AMX, which this host lacks; on a CPU without AMX SGLang runs its
layers' torch-native paths and never calls them. SGLang still imports the package at start-up,
so this stand-in answers every import, and any call raises, naming what was called.
"""
import importlib.abc
import importlib.machinery
import sys
import types


class Missing:
    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        return _attributes(self._name)(attr)

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self._name}: sgl-kernel is a stand-in in this venv (no CPU build); "
                           "SGLang called a kernel it calls only on AMX CPUs or GPUs")

    def __repr__(self):
        return f"<sgl-kernel stand-in {self._name}>"


def _attributes(prefix):
    """A module's ``__getattr__``: every public name is a stand-in called ``prefix.name``."""
    def getattr_(attr):
        if attr.startswith("__"):  # dunders stay real lookups: import machinery and pickling ask for them
            raise AttributeError(attr)
        return Missing(f"{prefix}.{attr}")
    return getattr_


__getattr__ = _attributes("sgl_kernel")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Every ``sgl_kernel.<sub>`` import gets a module of stand-ins (SGLang imports a dozen)."""

    def find_spec(self, fullname, path, target=None):
        if fullname.startswith("sgl_kernel."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = types.ModuleType(spec.name)
        mod.__path__ = []
        mod.__getattr__ = _attributes(spec.name)
        return mod

    def exec_module(self, module):
        """Nothing to run: create_module made the module whole."""


sys.meta_path.append(_Finder())
__version__ = "0.0.0+pdsim-standin"
