"""A kernel's introspection: typed calls of the in-kernel helper (the kernel's ``introspect`` part).

`KernelIntrospection` asks the helper (`themisto_env.sandbox.kernel.helper`) about the user's
state: variables, one variable, dataframe views, memory, sources, fingerprints, package versions; none of
it changes the user namespace, ``_``, ``Out``, the execution counter or the history. Each answer is
validated into a model of `themisto_env.sandbox.kernel.answers`. The working folder is the snapshots
part's (`KernelSnapshots`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from themisto_env.errors import HelperError, InfrastructureError, KernelDiedError
from themisto_env.sandbox.kernel.answers import (
    FrameView,
    FrameViewName,
    MemoryReport,
    NamespaceState,
    SourceText,
    VariableDetail,
    VariableListing,
)
from themisto_env.sandbox.kernel.contract import MEASURE_TIMEOUT_S
from themisto_env.sandbox.kernel.messaging import HELPER_MODULE, KernelMessaging, helper_value

#: Bounds of a measurement's answer after model-written code ran (it may be forged; the time bound is
#: `MEASURE_TIMEOUT_S`).
MEASURE_MAX_NAMES, MEASURE_MAX_ENTRY = 100_000, 10_000


class KernelIntrospection:
    """A kernel's introspection calls (`kernel.introspect`), through its messaging part.

    Args:
        messaging: The kernel's messaging part (its process part holds the run directory, the launcher and
            the limits).
    """

    def __init__(self, messaging: KernelMessaging) -> None:
        self.messaging = messaging
        self.process = messaging.process

    # -- the user namespace: none of it changes it, ``_``, ``Out``, the counter or the history ----------

    def memory_bytes(self) -> int | None:
        """Resident memory of the kernel process."""
        memory = self.process.launcher.memory_bytes()
        return memory if memory is not None else self.messaging.call("kernel_memory")

    def list_variables(self, *, limit: int = 100, known: Mapping[str, int] | None = None) -> VariableListing:
        """The user's variables sorted by name, with type, size, and shape or length (modules left out).

        Args:
            limit: The most rows to return (``total`` counts them all).
            known: Sizes to report as they are instead of measuring them (the recorded ones a tool shows
                anyway: measuring deep sizes is most of the call's cost).

        Raises:
            HelperError: The helper failed on the user's data (the kernel is fine).
            InfrastructureError: The kernel could not answer (it died, or stopped answering).
        """
        extra = {"known": dict(known)} if known else {}
        return VariableListing.model_validate(self.messaging.call("list_variables", limit=limit, **extra))

    def inspect_variable(self, name: str, *, max_chars: int = 2000) -> VariableDetail:
        """One variable: type, shape, length, size, dtype(s) and its repr cut to ``max_chars``.

        A ``__repr__`` that raises is answered in `VariableDetail.repr` (``<repr failed: ...>``).

        Raises:
            UnknownNameError: No user variable is called ``name`` (the message names the nearest ones).
            HelperError: The helper failed on the user's object (a ``__len__`` that raises, ...; the kernel
                is fine).
            InfrastructureError: The kernel could not answer.
        """
        return VariableDetail.model_validate(self.messaging.call("inspect_variable", name=name, max_chars=max_chars))

    def dataframe(self, name: str, view: FrameViewName = "head", *, n: int = 5, max_chars: int = 4000) -> FrameView:
        """``head(n)``, ``info()`` or ``describe()`` of a pandas DataFrame or Series, as text.

        Args:
            name: The variable's name.
            view: Which view.
            n: How many rows ``head`` shows (1 to 50).
            max_chars: The longest text returned (a marker says how much was cut).

        Raises:
            UnknownNameError: No user variable is called ``name``.
            IntrospectionRefused: ``name`` is not a DataFrame or Series, or ``view`` is not a view.
            HelperError: pandas raised on the user's frame (``describe()`` of a frame without columns,
                ...; the kernel is fine).
            InfrastructureError: The kernel could not answer.
        """
        return FrameView.model_validate(
            self.messaging.call("dataframe", name=name, view=view, n=n, max_chars=max_chars)
        )

    def memory(self, *, top: int = 20, known: Mapping[str, int] | None = None) -> MemoryReport:
        """The kernel's resident memory, the user variables' total size and the ``top`` largest ones
        (the sizes in ``known`` reported as they are, not measured).

        Raises:
            HelperError: The helper failed on the user's data (the kernel is fine).
            InfrastructureError: The kernel could not answer.
        """
        extra = {"known": dict(known)} if known else {}
        return MemoryReport.model_validate(self.messaging.call("memory", top=top, **extra))

    def variable_sizes(self) -> dict[str, int]:
        """Approximate deep size in bytes of every user variable (modules left out).

        Raises:
            HelperError: The helper failed on the user's data (the kernel is fine).
            InfrastructureError: The kernel could not answer.
        """
        return {str(name): int(size) for name, size in self.messaging.call("variable_sizes").items()}

    def source(self, name: str, *, max_chars: int = 4000) -> SourceText:
        """The source of a function or class (of a bound method's function; of another object's class).

        Raises:
            UnknownNameError: No user variable is called ``name``.
            IntrospectionRefused: Python has no source for it (a class defined in a cell, a builtin, a
                kernel restored from a snapshot, ...).
            HelperError: The helper failed on the user's object (the kernel is fine).
            InfrastructureError: The kernel could not answer.
        """
        return SourceText.model_validate(self.messaging.call("source", name=name, max_chars=max_chars))

    def namespace_state(self) -> NamespaceState:
        """What introspection must never change: user names with object ids and types, ``_``, ``Out``'s
        keys, the execution counter and the history's length (comparable within one kernel process).

        Raises:
            HelperError: The helper failed on the user's data (``Out`` rebound to a non-dict, ...).
            InfrastructureError: The kernel could not answer.
        """
        return NamespaceState.model_validate(self.messaging.call("state_fingerprint"))

    def fingerprint(self) -> dict[str, str]:
        """The user namespace's fingerprint: per name ``type|shape-or-length|content-hash`` (the hash
        where cheap). Equal in two kernels in the same state, in any process; see
        `themisto_env.sandbox.kernel.helper.namespace_fingerprint`.

        Raises:
            InfrastructureError: The kernel could not answer.
        """
        try:
            return dict(self.messaging.call("namespace_fingerprint"))
        except HelperError as exc:  # the helper guards every value: this is a bug, not user data
            raise InfrastructureError(str(exc)) from exc

    def package_versions(self, names: Sequence[str]) -> dict[str, str]:
        """The versions of these distributions installed where the kernel runs (``absent`` if not)."""
        try:
            return dict(self.messaging.call("package_versions", names=list(names)))
        except HelperError as exc:
            raise InfrastructureError(str(exc)) from exc

    def loaded_distributions(self) -> dict[str, str]:
        """Installed distributions (name: version) whose modules the kernel has imported so far."""
        try:
            return dict(self.messaging.call("loaded_distributions"))
        except HelperError as exc:
            raise InfrastructureError(str(exc)) from exc

    def preload(self, modules: Sequence[str]) -> None:
        """Import these modules (those installed) without binding any user name: a warm kernel's
        namespace is as empty as a new one's."""
        if modules:
            try:
                self.messaging.call("preload", modules=list(modules), timeout_s=self.process.limits.start_timeout_s)
            except HelperError as exc:
                raise InfrastructureError(str(exc)) from exc

    def seal(self) -> str:
        """Seal the measuring side before model-written code runs: a private copy of the helper, with
        the builtins as they are now, kept under a random token (returned) that later code cannot guess.
        See `sealed_fingerprint`."""
        try:
            return str(self.messaging.call("seal"))
        except HelperError as exc:
            raise InfrastructureError(str(exc)) from exc

    def sealed_fingerprint(
        self, token: str, canary: dict[str, object], *, timeout_s: float = MEASURE_TIMEOUT_S
    ) -> dict[str, str]:
        """Plant ``canary`` names (plain values: str, int) and take the namespace fingerprint with the
        helper sealed under ``token``, in one request. The caller checks the canaries' entries: a
        measuring side that later code froze or replaced cannot know them.

        The answer comes from code that may have been tampered with: anything but a bounded mapping of
        names to fingerprint strings is refused.

        Raises:
            KernelDiedError: The kernel died meanwhile.
            InfrastructureError: The measurement failed (the sealed helper is gone, broken or lying in a
                malformed way, or it ran past ``timeout_s``).
        """
        plant = "\n".join(f"{name} = {value!r}" for name, value in canary.items())
        expression = (
            f"__import__('sys').modules[{HELPER_MODULE!r}].SEALED[{token!r}]['call']('namespace_fingerprint', '{{}}')"
        )
        reply, _, timed_out, _, _ = self.messaging.run(
            plant,
            silent=True,
            store_history=False,
            timeout_s=timeout_s,
            user_expressions={"fp": expression},
            interrupt=False,
        )
        if timed_out:
            raise InfrastructureError("the sealed fingerprint did not come back in time")
        if reply.get("status") != "ok":
            raise InfrastructureError(f"planting the canaries failed: {reply.get('ename')}: {reply.get('evalue')}")
        try:
            answer = helper_value("namespace_fingerprint", reply.get("user_expressions", {}).get("fp", {}))
        except KernelDiedError:
            raise
        except Exception as exc:  # whatever a tampered helper makes of its answer
            raise InfrastructureError(f"the sealed fingerprint could not be read: {exc}") from exc
        if not (
            isinstance(answer, dict)
            and len(answer) <= MEASURE_MAX_NAMES
            and all(
                isinstance(k, str) and isinstance(v, str) and len(k) + len(v) <= MEASURE_MAX_ENTRY
                for k, v in answer.items()
            )
        ):
            raise InfrastructureError("the sealed fingerprint is not a mapping of names to fingerprints")
        return answer
