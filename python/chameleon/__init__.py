"""Chameleon: training under a device memory budget (docs/pytorch.md).

``chameleon.torch`` runs a PyTorch training loop under the runtime;
``Context`` and ``Handle`` are the runtime's C API in advisor mode, for
other frameworks' glue.
"""
from ._chameleon import ChameleonError, Context, Handle, dtypes

__all__ = ["ChameleonError", "Context", "Handle", "dtypes"]
