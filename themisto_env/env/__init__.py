"""The gymnasium env: one episode per trajectory, a sample's state served live, tools, then a prediction.

Owns [`ThemistoEnv`][themisto_env.env.ThemistoEnv] (``core``: the gym adapter) and its parts, each usable without gym:
the turns of an episode (``episode``: ``Episode``), the live state of a sample (``state_server``: ``StateServer``), the
scoring rule and the disposable kernels (``scorer``: ``Scorer``) and the episode's record of samples, tool
calls, budget and faults (``record``); the kind of kernel its parts share, built once (``kernel_spec``:
``env_kernel_spec``), and what serving a state or calling a tool came to (``outcomes``: ``ToolOutcome``,
``not_served``, ``state_mismatch``); its options [`EnvConfig`][themisto_env.env.EnvConfig] (``config``), its spaces
(``spaces``), the step's typed ``info`` (``info``: ``StepInfo``), the actions (``actions``:
[`Prediction`][themisto_env.env.Prediction], and [`ToolCall`][themisto_env.env.tools.ToolCall] from ``tools``), the
observation's text (``observation``) and the observation tools (``tools``). The ids ``themisto/NextCell-v0`` and
``themisto/OutputPrediction-v0`` are registered by ``import themisto_env``. Names are re-exported lazily:
importing this package imports none of its modules.
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
