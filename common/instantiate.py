"""Building an object from a config's `_target_` block with the model's own argument checks
turned into config errors (exit 2, one sentence naming the block), not a Hydra traceback."""
from __future__ import annotations

from hydra.errors import InstantiationException
from hydra.utils import instantiate

from common.config import UserError


def instantiate_checked(block, where: str, **kwargs):
    """`instantiate(block, **kwargs)`; a ValueError raised by the target's constructor (a value
    outside what the paper allows) becomes a UserError naming `where` (e.g. "method.model")."""
    try:
        return instantiate(block, **kwargs)
    except InstantiationException as err:
        if isinstance(err.__cause__, ValueError):
            raise UserError(f"{where}: {err.__cause__}", exit_code=2) from err
        raise
