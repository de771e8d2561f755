"""Loading pickles without executing code: only numpy and scipy.sparse types are admitted."""
from __future__ import annotations

import importlib
import io
import pickle
from pathlib import Path

from common.config import UserError

# module -> names a data pickle may reference (numpy 1.x module paths are mapped to 2.x)
ALLOWED = {
    "numpy": {"ndarray", "dtype"},
    "numpy.core.multiarray": {"_reconstruct", "scalar"},
    "numpy._core.multiarray": {"_reconstruct", "scalar"},
    "scipy.sparse.csr": {"csr_matrix"},
    "scipy.sparse._csr": {"csr_matrix"},
    "scipy.sparse.csc": {"csc_matrix"},
    "scipy.sparse._csc": {"csc_matrix"},
    "scipy.sparse.coo": {"coo_matrix"},
    "scipy.sparse._coo": {"coo_matrix"},
}
_RENAMED = {"numpy.core.multiarray": "numpy._core.multiarray", "scipy.sparse.csr": "scipy.sparse._csr",
            "scipy.sparse.csc": "scipy.sparse._csc", "scipy.sparse.coo": "scipy.sparse._coo"}


class RefusedPickle(UserError):
    pass


class SafeUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if name not in ALLOWED.get(module, ()):
            raise RefusedPickle(f"refusing to load {module}.{name}: data pickles may contain only "
                                f"numpy arrays and scipy.sparse matrices")
        for candidate in (_RENAMED.get(module), module):
            if candidate is None:
                continue
            try:
                return getattr(importlib.import_module(candidate), name)
            except (ImportError, AttributeError):
                continue
        raise RefusedPickle(f"{module}.{name} is not available in this numpy/scipy")


def load(path: str | Path):
    """Unpickle `path` admitting only numpy/scipy.sparse types; anything else is refused."""
    path = Path(path)
    try:
        return SafeUnpickler(io.BytesIO(path.read_bytes())).load()
    except RefusedPickle as err:
        raise RefusedPickle(f"{path}: {err}") from None
    except (pickle.UnpicklingError, EOFError, ValueError) as err:
        raise UserError(f"{path} is not a readable pickle ({type(err).__name__}: {err})") from None
