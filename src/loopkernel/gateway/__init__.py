"""The model gateway: a separate process, the only one that reads provider credentials.

Run it with ``loopkernel gateway ...`` (or ``python -m loopkernel.gateway``); see
``docs/models.md``. The runtime never imports this package: it reaches the gateway over
HTTP (``loopkernel.models.ModelClient``). Providers come through their official SDKs
(extra ``models``); the bundled offline model through ``xllamacpp`` (extra
``local-model``).
"""

from loopkernel.gateway._config import GatewayConfig, Limits, ProviderConfig, load_config
from loopkernel.gateway._server import Gateway

__all__ = ["Gateway", "GatewayConfig", "Limits", "ProviderConfig", "load_config"]
