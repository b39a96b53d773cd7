"""The public names of [`themisto_env.bridges.openenv`][themisto_env.bridges.openenv], a line each (``__init__.py``
imports each on first use)."""

from .client import ThemistoEnvClient as ThemistoEnvClient
from .models import ThemistoAction as ThemistoAction
from .models import ThemistoObservation as ThemistoObservation
from .models import ThemistoState as ThemistoState
from .server import create_server_app as create_server_app
from .server import serve as serve
