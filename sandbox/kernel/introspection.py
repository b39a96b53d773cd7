"""A kernel's introspection: typed calls of the in-kernel helper (the kernel's ``introspect`` part).

`KernelIntrospection` asks the helper (`themisto_env.sandbox.kernel.helper`) about the user's
state: variables, one variable, dataframe views, memory, sources, fingerprints, package versions; none of
it changes the user namespace, ``_``, ``Out``, the execution counter or the history. `ask` validates each
answer into its model (`themisto_env.sandbox.kernel.answers.ANSWERS`); the typed questions are the
contract's, over `ask`. The working folder is the snapshots part's (`KernelSnapshots`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from themisto_env.errors import HelperError, InfrastructureError, KernelDiedError
from themisto_env.sandbox.kernel.answers import ANSWERS
from themisto_env.sandbox.kernel.contract import MEASURE_TIMEOUT_S, IntrospectionLike
from themisto_env.sandbox.kernel.messaging import HELPER_MODULE, KernelMessaging, helper_value

#: Bounds of a measurement's answer after model-written code ran (it may be forged; the time bound is
#: `MEASURE_TIMEOUT_S`).
MEASURE_MAX_NAMES, MEASURE_MAX_ENTRY = 100_000, 10_000


class KernelIntrospection(IntrospectionLike):
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

    def ask(self, call: str, /, **args: Any) -> Any:
        """The helper's answer to ``call`` (a name of `ANSWERS`), validated into its model (see
        `IntrospectionLike.ask`)."""
        return ANSWERS[call].model_validate(self.messaging.call(call, **args))

    def variable_sizes(self) -> dict[str, int]:
        """Approximate deep size in bytes of every user variable (modules left out).

        Raises:
            HelperError: The helper failed on the user's data (the kernel is fine).
            InfrastructureError: The kernel could not answer.
        """
        return {str(name): int(size) for name, size in self.messaging.call("variable_sizes").items()}

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
