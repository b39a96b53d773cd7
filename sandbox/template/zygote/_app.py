"""The kernel application: built once in the template before any fork (what holds no thread, socket or
loop), finished in each forked child; the random generators and dill's ``__main__`` in a copy.

A part of the template's program (see `themisto_env.sandbox.template.zygote`): sent whole with the other
parts, it imports only the standard library, ipykernel and dill, and names of the parts before it. What it needs
of their private names is in the shared part `themisto_env.sandbox.compat.in_kernel`.
"""

from __future__ import annotations

import contextlib
import gc
import glob
import itertools
import os
import sys
import types
from pathlib import Path
from typing import Any

from themisto_env.sandbox.compat.in_kernel import (
    forget_trait_value,
    give_kernel_module_files,
    give_shell_module_names,
    with_kernel_module_seeing,
    without_configuration,
)

#: The in-kernel helper's module name (as in kernel_messaging.HELPER_MODULE).
HELPER_MODULE = "_themisto_helper"
#: The kernel application's arguments (a child adds its connection file).
KERNEL_ARGS = ["--HistoryManager.hist_file=:memory:"]
#: How often the template runs the pure parts of a cell before it forks (CPython 3.11 specializes a function
#: after 8 calls).
WARM_RUNS = 10


def _prebuild_app(namespace: dict[str, Any] | None, modules: tuple[list[str], set[str]] | None = None) -> Any:
    """Build, before any fork, the parts of a kernel application that hold no thread, socket or loop: its
    traitlets configuration (command line, config files, profile folder), its IPython shell (magics,
    completer, prefilter, display machinery, an in-memory history, IPython's own ``storemagic``) over
    ``namespace``, and what each kernel's start would find by looking over every loaded module or for startup
    files (`ForkedKernelApp`). Returns the application; each forked child finishes it (`_finish_app`), so its
    pages stay shared. ``modules``: those lists already made (a state template's: its template's, with what
    its snapshot imported; `_listed_modules`).

    ipykernel builds the shell inside its kernel object, after the sockets; the shell is a singleton, so the
    kernel object a child makes takes this one (``shell_class.instance``) and the child only points it at
    that kernel."""
    from ipykernel.ipkernel import IPythonKernel
    from IPython.core.application import BaseIPythonApplication

    app = _forked_app_class().instance(user_ns=namespace)
    BaseIPythonApplication.initialize(app, list(KERNEL_ARGS))  # IPKernelApp.initialize's first step
    kernel_class = app.kernel_class
    if not issubclass(kernel_class, IPythonKernel):
        raise TypeError(f"a kernel class of its own ({kernel_class.__name__}): built after the fork")
    traits = kernel_class.class_traits()
    shell_class, compiler_class = traits["shell_class"].default_value, traits["compiler_class"].default_value
    if isinstance(shell_class, str) or isinstance(compiler_class, str):  # traitlets gives names for some Types
        from traitlets.utils.importstring import import_item

        shell_class = import_item(shell_class) if isinstance(shell_class, str) else shell_class
        compiler_class = import_item(compiler_class) if isinstance(compiler_class, str) else compiler_class
    shell = shell_class.instance(  # as IPythonKernel.__init__ asks for it, but the kernel, which the child makes
        parent=app,
        profile_dir=app.profile_dir,
        user_module=None,
        user_ns=namespace,
        kernel=None,
        compiler_class=compiler_class,
    )
    # What a kernel's start lists over every loaded module, listed once here (a child's own listing touches
    # every module object and name, unsharing their pages): the debugger's list of library files, and the
    # names `%reset --aggressive` keeps.
    app.kernel_modules, app.module_names = modules or _listed_modules()
    app.startup_files = _has_startup_files(app)
    if "storemagic" in app.default_extensions:  # IPython's own: a child finds it loaded
        shell.extension_manager.load_extension("storemagic")
    # the first cell's parts built here, and warmed in each child before it answers (`_warm_first_cell`)
    app.first_cell_built = True
    with contextlib.suppress(Exception):  # an IPython of other parts: they are built on the first cell
        _build_lazy_parts(shell)
    return app


def _build_lazy_parts(shell: Any) -> None:
    """Build what IPython builds on a kernel's first cell rather than at its start, the same in every copy:
    the display formatters (ten traitlets objects, and their printer tables: most of what a copy's first
    execute cost more than a later one) and the session logger object of ``%logstart`` (its module is imported
    on the first cell; no file is opened until ``%logstart``). Then run the pure parts of a cell
    (`_run_cell_parts`) `WARM_RUNS` times: CPython 3.11 specializes a function's code after a few calls,
    writing to it, which each copy would do on its own pages."""
    display = shell.display_formatter  # its formatters are lazy trait defaults, built on first access
    formatters = [*display.formatters.values(), display.ipython_display_formatter, display.mimebundle_formatter]
    unbuilt = _unbuilt_printer_tables(shell)
    try:
        for formatter in formatters:
            for name in formatter.trait_names():  # their other tables are too
                with contextlib.suppress(Exception):
                    getattr(formatter, name)
        shell.logger  # noqa: B018 - a lazy property, likewise
        for _ in range(WARM_RUNS):  # their code made adaptive here, once, rather than in every copy
            with contextlib.suppress(Exception):
                _run_cell_parts(shell)
    finally:
        _leave_lazy(unbuilt)


#: The formatters' tables whose default depends on what is imported when they are built (the plain-text
#: formatter gives ``numpy.float64`` a printer of its own only if numpy is loaded by then, and copies
#: IPython's pretty-printer registries): built by the user's first output, as in a kernel not forked.
IMPORT_DEPENDENT_TABLES = ("type_printers", "deferred_printers")


def _unbuilt_printer_tables(shell: Any) -> list[tuple[Any, str]]:
    """The formatters' `IMPORT_DEPENDENT_TABLES` not built yet: a warm-up that builds them gives them back to
    `_leave_lazy` after it, to be built again on first use, when the copy's code has imported what it imports."""
    return [
        (formatter, name)
        for formatter in shell.display_formatter.formatters.values()
        for name in IMPORT_DEPENDENT_TABLES
        if not formatter.trait_has_value(name)
    ]


def _leave_lazy(unbuilt: list[tuple[Any, str]]) -> None:
    """Drop the tables a warm-up built (`_unbuilt_printer_tables`): traitlets builds a default again when it is
    next read."""
    for formatter, name in unbuilt:
        forget_trait_value(formatter, name)


def _listed_modules() -> tuple[list[str], set[str]]:
    """Every loaded module's file (ipykernel's list for its debugger) and every loaded module's name."""
    return [m.__file__ for m in sys.modules.copy().values() if getattr(m, "__file__", None)], set(sys.modules)


def _modules_since(listed: tuple[list[str], set[str]], count: int) -> tuple[list[str], set[str]]:
    """``listed`` (`_listed_modules` when ``sys.modules`` held ``count`` modules) with the modules imported
    since added, in place: found at the end of ``sys.modules`` (a dictionary keeps its order), so that the
    modules loaded before are not touched (a state template's pages stay its template's)."""
    files, names = listed
    for name, module in itertools.islice(reversed(sys.modules.items()), max(len(sys.modules) - count, 0)):
        if name not in names:
            names.add(name)
            file = getattr(module, "__file__", None)
            if file:
                files.append(file)
    return listed


def _has_startup_files(app: Any) -> bool:
    """Whether IPython's start would run a file or a line of code of the user's (IPython's startup folders,
    `exec_lines`, `exec_files`, code or a module to run), as the template starts (a startup file added later
    runs in kernels of templates started later); ``PYTHONSTARTUP`` is read in the child (a request may set
    it)."""
    from IPython.core.shellapp import ENV_CONFIG_DIRS, SYSTEM_CONFIG_DIRS

    folders = [app.profile_dir.startup_dir] + [
        os.path.join(p, "startup") for p in (*ENV_CONFIG_DIRS, *SYSTEM_CONFIG_DIRS)
    ]
    found = any(glob.glob(os.path.join(f, "*.py")) or glob.glob(os.path.join(f, "*.ipy")) for f in folders)
    return bool(found or app.exec_lines or app.exec_files or app.file_to_run or app.code_to_run or app.module_to_run)


def _sys_unlisted() -> types.ModuleType:
    """``sys`` as ipykernel's kernel module sees it while its kernel object is made: with an empty
    ``sys.modules`` (it lists every loaded module's file there, for the debugger; the template listed them)."""
    view = types.ModuleType("sys")
    view.__dict__.update(sys.__dict__)
    view.modules = {}  # type: ignore[attr-defined]
    return view


def _forked_app_class() -> type:
    """``ForkedKernelApp``: ipykernel's application, finished in a forked child with what the template built:
    the module lists (`_prebuild_app`) and, where IPython would run no startup file, no startup step but its
    bookkeeping. Made when the application is (the program imports ipykernel only when it runs)."""
    from ipykernel.kernelapp import IPKernelApp

    class ForkedKernelApp(IPKernelApp):  # type: ignore[misc, valid-type]
        """An `IPKernelApp` whose template listed the loaded modules and looked for startup files."""

        kernel_modules: list[str]
        module_names: set[str]
        startup_files: bool

        def init_kernel(self) -> None:
            with_kernel_module_seeing(_sys_unlisted(), super().init_kernel)
            kernel = self.kernel
            give_kernel_module_files(kernel, self.kernel_modules)
            debugger = getattr(kernel, "debugger", None)
            if debugger is not None:
                debugger.kernel_modules = self.kernel_modules

        def init_code(self) -> None:
            if self.startup_files or (self.exec_PYTHONSTARTUP and os.environ.get("PYTHONSTARTUP")):
                super().init_code()
                return
            shell = self.shell  # InteractiveShellApp.init_code with nothing to run
            if self.hide_initial_ns:
                shell.user_ns_hidden.update(shell.user_ns)
            sys.stdout.flush()
            sys.stderr.flush()
            give_shell_module_names(shell, self.module_names)

    return ForkedKernelApp


def _prebuild(
    namespace: dict[str, Any] | None, modules: tuple[list[str], set[str]] | None = None
) -> tuple[Any, str | None]:
    """`_prebuild_app` and None, or None and why it failed (also in the template's log; the host warns with
    it, from the template's status): each child then builds its whole application after the fork, as
    ipykernel does."""
    try:
        return _prebuild_app(namespace, modules), None
    except Exception as exc:
        cause = f"{type(exc).__name__}: {exc}"[:2000]
        with contextlib.suppress(Exception):
            sys.stderr.write(f"themisto template: kernels build their application after the fork ({cause})\n")
        with contextlib.suppress(Exception):
            _drop_app()
        return None, cause


def _drop_app() -> None:
    """Forget a prebuilt application and its shell (the singletons), so that another can be built."""
    from ipykernel.kernelapp import IPKernelApp
    from IPython.core.interactiveshell import InteractiveShell

    for singleton in (InteractiveShell, IPKernelApp):
        if singleton.initialized():  # its class's singleton and its bases' (ZMQInteractiveShell, InteractiveShell;
            type(singleton.instance()).clear_instance()  # ForkedKernelApp's and IPKernelApp's)
    gc.collect()


def _finish_app(app: Any, connection_file: str) -> Any:
    """In a forked child: the rest of ``IPKernelApp.initialize`` on a prebuilt application (its sockets,
    heartbeat, output streams, signals, kernel object, extensions and startup code), in ipykernel's own
    order: its ``initialize`` runs with the first step, already done in the template, skipped."""
    app.connection_file = connection_file
    without_configuration(lambda: app.initialize([]))  # this child's copy of the class only
    shell = app.shell
    shell.kernel = app.kernel  # made by the kernel object in ipykernel's own order; ours predates it
    shell.parent = app.kernel
    cwd = os.getcwd()  # the shell was built in the template's folder: this kernel's own is the start
    shell.starting_dir = cwd
    shell.history_manager.dir_hist[:] = [Path(cwd)]
    return app


def _warm_first_cell(app: Any) -> None:
    """In a forked child, before it answers anything: run the pure parts of a cell's execution (transforming
    and parsing a cell, formatting a result, making and signing a message) on values of its own, so that the
    pages they write (reference counts, CPython's warm-up counters in code objects) are copied now, while the
    kernel waits (a spare), not on the user's first cell. Nothing the user can see changes: no cell runs, the
    execution count, history, namespace, streams and the random generators are untouched, nothing is sent."""
    with contextlib.suppress(Exception):
        session = app.session
        count = session.message_count
        unbuilt = _unbuilt_printer_tables(app.shell)
        try:
            _run_cell_parts(app.shell)
            session.serialize(session.msg("execute_input", {"code": "1 + 1\n", "execution_count": 1}))
        finally:
            _leave_lazy(unbuilt)
            session.message_count = count  # its messages numbered from where a kernel not warmed numbers them


def _run_cell_parts(shell: Any) -> None:
    """The pure parts of running a cell on a shell: transforming and parsing one, formatting a result."""
    code = "1 + 1\n"
    cell = shell.transform_cell(code)
    shell.should_run_async(code, transformed_cell=cell, preprocessing_exc_tuple=None)
    shell.display_formatter.format(2)


def _keep_generator(shell: Any, generator: Any) -> None:
    """Give the random module the template's state again at the copy's first cell: an idle kernel's own
    machinery may draw from it meanwhile (a spare waits a while), so copies would differ by when they ran."""
    import random

    def first_cell(*_: Any) -> None:
        random.setstate(generator)
        shell.events.unregister("pre_run_cell", first_cell)

    random.setstate(generator)
    shell.events.register("pre_run_cell", first_cell)


def _reseed() -> None:
    """Fresh seeds for the global generators a copy inherited (``random``; numpy's, where imported)."""
    import random

    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(int.from_bytes(os.urandom(4), "little"))
