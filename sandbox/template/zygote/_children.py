"""What a forked child becomes: a kernel (`_become_kernel`) or a state template, which loads a snapshot
and serves forks of that state (`_become_state_template`).

A part of the template's program (see `themisto_env.sandbox.template.zygote`): sent whole with the other
parts, it imports only the standard library, ipykernel and dill, and names of the parts before it.
"""

from __future__ import annotations

import gc
import hashlib
import os
import sys
from typing import Any

from themisto_env.sandbox.compat.in_kernel import point_dill_at_main
from themisto_env.sandbox.template.zygote._app import (
    HELPER_MODULE,
    KERNEL_ARGS,
    _drop_app,
    _finish_app,
    _keep_generator,
    _modules_since,
    _prebuild,
    _reseed,
    _warm_first_cell,
)
from themisto_env.sandbox.template.zygote._channel import _arm_wakeup, _listen, _name_process, _redirect_output
from themisto_env.sandbox.template.zygote._copy_namespaces import _isolate_copy
from themisto_env.sandbox.template.zygote._copy_uid import _settle_memory


def _become_kernel(template: Any, request: dict[str, Any]) -> None:
    """In a forked child: finish the kernel application the template built (or build one) on the request's
    connection file, and run it.

    The child's own work starts here, before any socket exists: its process, session, output, folder and
    environment. Then the application opens its sockets and starts its threads (`_finish_app`)."""
    _isolate_copy(request)  # a bwrap copy of model-written code: namespaces, folders and limits of its own
    _name_process("ipykernel")
    os.setsid()  # its own process group: the host ends what a cell started with it
    _redirect_output(request["log"])
    os.chdir(request["workdir"])
    os.environ.update(request.get("environment", {}))
    os.environ["PWD"] = request["workdir"]
    # ipykernel's parent poller: the kernel ends when its template does. The trait's default was read from the
    # environment when the template imported ipykernel (its own parent): this child's parent is the template.
    # A template that is its pid namespace's init (a bwrap template is pid 1 there) gets no poller: the
    # namespace ends with it, and a poller would take pid 1 for an orphan's reaper and end the kernel at once.
    parent = os.getppid()
    os.environ["JPY_PARENT_PID"] = str(parent)
    if template.app is not None:
        template.app.parent_handle = parent
        app = _finish_app(template.app, request["connection_file"])
    else:
        from ipykernel.kernelapp import IPKernelApp

        app = IPKernelApp.instance(user_ns=template.namespace)
        app.parent_handle = parent
        app.initialize(["-f", request["connection_file"], *KERNEL_ARGS])
    if template.namespace is not None:  # IPython hides what the namespace held at start: the state is the user's
        hidden = app.shell.user_ns_hidden
        for name in template.loaded:
            hidden.pop(name, None)
    point_dill_at_main()  # dill binds ``__main__`` when first imported: the user module now
    helper = sys.modules.get(HELPER_MODULE)
    if helper is not None:
        helper.install()
    if request.get("reseed"):
        _reseed()
    else:
        _keep_generator(app.shell, template.generator)
    if getattr(template.app, "first_cell_built", False):
        _warm_first_cell(app)  # before its memory is settled: what it allocated is the kernel's start
    if request.get("identity"):
        _settle_memory(app.shell, int(request["identity"]["memory_bytes"]))
    app.start()


def _become_state_template(template: Any, request: dict[str, Any]) -> None:
    """In a forked child: load a snapshot into a user namespace and serve forks of it."""
    parent = os.getppid()
    _name_process("themisto-state")
    _redirect_output(request["log"])
    namespace: dict[str, Any] = {"__name__": "__main__"}
    template.listener = _listen(request["socket"])
    template.wakeup = _arm_wakeup()
    template.parent, template.exited, template.namespace = parent, {}, namespace
    base, count = template.app, len(sys.modules)
    try:
        with open(request["snapshot"], "rb") as f:
            data = f.read()
        digest = hashlib.sha256(data).hexdigest()
        if digest != request["digest"]:
            raise ValueError(f"the snapshot's content hash {digest[:12]} does not match its name")
        template.loaded = _load_state(namespace, data)
    except Exception as exc:  # served as the template's error: every fork request gets it
        template.error = f"{type(exc).__name__}: {exc}"[:2000]
    # the template's module listings, with what the snapshot imported added (listing them again would touch
    # every module, unsharing its page: most of a state template's own memory)
    listed = None if base is None else _modules_since((base.kernel_modules, base.module_names), count)
    template.app = base = None
    _drop_app()  # the template's shell is over its own namespace: this state's is built over the state's
    if template.error is None:
        template.app, template.prebuild_error = _prebuild(namespace, listed)
    gc.collect()
    gc.freeze()
    template.serve()


def _load_state(namespace: dict[str, Any], data: bytes) -> list[str]:
    """Load a snapshot's bytes into ``namespace`` as the kernel's restore does, with ``__main__`` being the
    module whose dictionary it is (functions defined in cells keep it as their globals)."""
    from IPython.core import interactiveshell

    if hasattr(interactiveshell, "make_main_module_type"):  # IPython 9: a module type over the namespace
        module = interactiveshell.make_main_module_type(namespace)()
    else:  # IPython 8
        module = interactiveshell.DummyMod()
        module.__dict__ = namespace
    sys.modules["__main__"] = module
    point_dill_at_main()
    import dill

    state = dill.loads(data)
    if not isinstance(state, dict):
        raise ValueError(f"the snapshot holds a {type(state).__name__}, not a namespace")
    helper = sys.modules[HELPER_MODULE]  # the display options, as the helper's restore sets them
    helper.set_display_options(state.pop(helper.OPTIONS_KEY, {}))
    namespace.update(state)
    return sorted(state)
