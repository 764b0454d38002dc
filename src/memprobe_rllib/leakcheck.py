"""An offline leak check of RLlib's new API stack, in the spirit of RLlib's ``check_memory_leaks``.

```pycon
>>> from memprobe_rllib import check_rllib_leaks                  # doctest: +SKIP
>>> result = check_rllib_leaks(PPOConfig().environment("CartPole-v1"))  # doctest: +SKIP
>>> result.leak, result.suspects                                  # doctest: +SKIP
(False, {})

```

RLlib's own ``ray.rllib.utils.debug.check_memory_leaks`` needs the old API
stack (a RolloutWorker, a Policy). This one builds a ``SingleAgentEnvRunner``
from the config (or takes the algorithm's local one) and repeats, each
``repeats`` times, one component in isolation:

* ``"env"``: one episode of the runner's first sub-env: ``reset()``, then
  ``step()`` with one fixed action until the episode ends;
* ``"env_runner"``: ``sample(num_timesteps=...)`` then ``get_metrics()``;
* ``"module"``: ``forward_inference``, ``forward_exploration`` (both without
  gradients) and ``forward_train`` of a full (not inference-only) RLModule on
  one fixed batch of observations.

Each is measured with :func:`memprobe.check_leaks`: process rss and fds,
tracemalloc's bytes outside memprobe (``tracemalloc/filtered_bytes``) and its
allocation sites, the objects probe, and where glibc has ``mallinfo2`` malloc's bytes
in use (``malloc/in_use_bytes``: a native leak the process serves from heap it freed
before leaves rss flat). The heap that exists before the check
is frozen (``gc.freeze()``), so the collection before each sample and the
objects probe see only what the component allocates. A component is a suspect
when a judged bytes metric grows significantly by more than ``max_growth_bytes``
over the calls judged, whatever the floor for "growing slightly" (as
:func:`memprobe.assert_no_leak` judges, through :func:`memprobe.leaks.judge_tolerance`;
counts: any growth); its suspects are the growing sites (the user's line first:
``my_env.py:26 → numpy/_core/numeric.py:232``) and types.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from memprobe import ConfigError, MemprobeError
from memprobe.leaks import Report, check_growth_bytes, check_leaks, judge_tolerance
from memprobe.probes.malloc import supported as malloc_supported

from ._options import show

__all__ = ["COMPONENTS", "ComponentCheck", "LeakCheckResult", "check_rllib_leaks"]

#: What can be checked, in the order they run.
COMPONENTS = ("env", "env_runner", "module")

#: Repeats per component when ``repeats`` is not given.
DEFAULT_REPEATS = {"env": 40, "env_runner": 30, "module": 40}

#: Metrics that make a component a suspect. ``malloc/in_use_bytes`` (where glibc has
#: ``mallinfo2``): a native leak of a few KiB per call is served from heap the process
#: freed before (RLlib's setup leaves megabytes of it), so rss stays flat over the
#: calls judged while malloc's bytes in use grow by every byte kept.
JUDGED = (
    "tracemalloc/filtered_bytes",
    "process/rss_bytes",
    "malloc/in_use_bytes",
    "process/num_fds",
    "objects/total_count",
)


@dataclass(frozen=True)
class ComponentCheck:
    """The leak check of one component.

    :ivar component: ``"env"``, ``"env_runner"`` or ``"module"``.
    :ivar call: what one repeat did, e.g. ``"env.reset() + env.step() to the episode's end"``.
    :ivar repeats: how many times it ran.
    :ivar report: every verdict (:class:`memprobe.Report`): metrics, sites, types.
    :ivar grew: the judged metrics (short names) that grew beyond the tolerance.
    """

    component: str
    call: str
    repeats: int
    report: Report
    grew: tuple[str, ...] = ()

    @property
    def leak(self) -> bool:
        """True when a judged metric grew beyond the tolerance."""
        return bool(self.grew)

    @property
    def suspects(self) -> tuple[str, ...]:
        """Growing allocation sites (``file.py:line``) then types, leaking and fastest
        first; when the component leaks, also those growing under the floor for
        "growing slightly" (a leak over a small tolerance is made of such sites)."""
        growing = ("leak", "slight") if self.leak else ("leak",)
        return tuple(v.site or v.metric for v in (*self.report.sites, *self.report.types)
                     if v.status in growing)

    def describe(self) -> str:
        """One paragraph: the component, its verdict, what grew, the suspects."""
        head = f"{self.component} ({self.call}, {self.repeats} repeats): "
        if not self.leak:
            return head + "no leak"
        lines = [head + "LEAK in " + ", ".join(self.grew)]
        for m in self.grew:
            v = self.report.get(m)
            if v is not None:
                lines.append("  " + v.describe())
        if self.suspects:
            lines.append("  suspects: " + ", ".join(self.suspects[:5]))
        return "\n".join(lines)


@dataclass(frozen=True)
class LeakCheckResult:
    """The checks of every component, by name (``result["env"]``)."""

    checks: dict[str, ComponentCheck] = field(default_factory=dict)

    def __getitem__(self, component: str) -> ComponentCheck:
        return self.checks[component]

    @property
    def leak(self) -> bool:
        """True when any component leaks."""
        return any(c.leak for c in self.checks.values())

    @property
    def suspects(self) -> dict[str, tuple[str, ...]]:
        """``{component: sites and types}`` for the leaking components only."""
        return {name: c.suspects for name, c in self.checks.items() if c.leak}

    def __str__(self) -> str:
        return "\n".join(c.describe() for c in self.checks.values()) or "nothing checked"


class ComponentError(MemprobeError):
    """A component failed while being checked; ``component`` names it, ``message`` says how."""

    def __init__(self, component: str, message: str) -> None:
        self.component = component
        self.message = message
        super().__init__(f"{component}: {message}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.component, self.message))


# -- building the pieces --------------------------------------------------------------


def _runner(target: Any) -> tuple[Any, Any, bool]:
    """``(config, env_runner, built_here)`` from an AlgorithmConfig or an Algorithm."""
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

    if isinstance(target, AlgorithmConfig):
        config = target
        runner = None
    elif isinstance(getattr(target, "config", None), AlgorithmConfig):
        config = target.config
        runner = getattr(target, "env_runner", None)
        if runner is not None and (getattr(runner, "env", None) is None
                                   or getattr(runner, "module", None) is None):
            runner = None  # a local runner without env (remote runners do the sampling)
    else:
        raise ConfigError(
            "config", f"expected an AlgorithmConfig or an Algorithm, got {show(target)}"
        )
    if not config.enable_env_runner_and_connector_v2 or not config.enable_rl_module_and_learner:
        raise ConfigError(
            "config", "the old API stack is not supported here; use RLlib's own "
            "ray.rllib.utils.debug.check_memory_leaks for it"
        )
    if config.is_multi_agent:
        raise ConfigError("config", "multi-agent configs are not supported yet (single-agent only)")
    if runner is not None:
        return config, runner, False
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    local = config.copy(copy_frozen=False)
    local.env_runners(num_env_runners=0)
    cls = local.env_runner_cls or SingleAgentEnvRunner
    return local, cls(config=local), True


def _first_env(runner: Any) -> Any:
    vec = runner.env.unwrapped
    envs = getattr(vec, "envs", None)
    if not envs:
        raise ConfigError(
            "config.gym_env_vectorize_mode",
            f"the env check needs a sync vector env with sub-envs, got {type(vec).__name__}",
        )
    return envs[0]


def _env_episode(env: Any, max_episode_steps: int) -> Callable[[], None]:
    action = env.action_space.sample()  # one fixed action, as RLlib does (no RNG churn)
    env.reset(seed=0)

    def episode() -> None:
        env.reset()
        for _ in range(max_episode_steps):
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                break

    return episode


def _sample(runner: Any, timesteps: int | None) -> Callable[[], None]:
    def sample() -> None:
        if timesteps is None:
            runner.sample()
        else:
            runner.sample(num_timesteps=timesteps)
        runner.get_metrics()

    return sample


def _forward(config: Any, runner: Any, batch_size: int) -> Callable[[], None]:
    import numpy as np
    import torch
    import tree  # type: ignore[import-untyped]  # dm-tree ships no stubs
    from ray.rllib.utils.torch_utils import convert_to_torch_tensor

    env = runner.env.unwrapped if runner.env is not None else None
    spec = config.get_rl_module_spec(env=env, spaces=runner.get_spaces(), inference_only=False)
    module = spec.build()
    obs = tree.map_structure(
        lambda s: np.stack([s] * batch_size, axis=0), module.observation_space.sample()
    )
    batch = {"obs": convert_to_torch_tensor(obs)}

    def forward() -> None:
        with torch.no_grad():
            module.forward_inference(batch)
            module.forward_exploration(batch)
        module.forward_train(batch)

    return forward


_CALLS = {
    "env": "env.reset() + env.step(fixed action) to the episode's end",
    "env_runner": "env_runner.sample() + get_metrics()",
    "module": "module.forward_inference/forward_exploration/forward_train on one batch",
}


# -- the check ----------------------------------------------------------------------------


def check_rllib_leaks(
    target: Any,
    *,
    components: Sequence[str] = COMPONENTS,
    repeats: int | Mapping[str, int] | None = None,
    warmup: int = 5,
    max_growth_bytes: float = 256 * 1024,
    objects: bool = True,
    sample_timesteps: int | None = 64,
    batch_size: int = 10,
    max_episode_steps: int = 1000,
) -> LeakCheckResult:
    """Repeat each component of a single-agent RLlib setup and judge its memory.

    :param target: an ``AlgorithmConfig`` (new API stack) or a built ``Algorithm``
        (its local EnvRunner is used when it has an env, else one is built).
    :param components: a subset of :data:`COMPONENTS`, run in that order.
    :param repeats: calls per component (an int, or ``{component: n}``);
        default :data:`DEFAULT_REPEATS`.
    :param warmup: first calls whose samples are dropped (allocations that settle).
    :param max_growth_bytes: growth tolerated over the calls judged (after
        ``warmup``), per bytes metric: a significant growth beyond it is a leak,
        however far under the floor for "growing slightly" (16 KiB, or 0.01% of
        rss); counts (fds, objects) tolerate none.
    :param objects: also count live objects by type (cheap: the heap that
        existed before the check is frozen and not walked).
    :param sample_timesteps: ``num_timesteps`` of each ``sample()`` (None: the
        runner's default, ``rollout_fragment_length`` per env).
    :param batch_size: rows of the batch given to the module.
    :param max_episode_steps: cap on an env episode's length.
    :raises ConfigError: naming the bad option (or an old-stack / multi-agent config).
    :raises ComponentError: naming the component whose call failed.
    """
    comps = [components] if isinstance(components, str) else list(components)
    for c in comps:
        if c not in COMPONENTS:
            raise ConfigError("components", f"unknown component {c!r}; choose from {COMPONENTS}")
    reps = dict(DEFAULT_REPEATS)
    if isinstance(repeats, Mapping):
        for c, n in repeats.items():
            if c not in COMPONENTS:
                raise ConfigError("repeats", f"unknown component {c!r}; choose from {COMPONENTS}")
            reps[c] = n
    elif repeats is not None:
        reps = {c: repeats for c in COMPONENTS}
    for c in comps:
        n = reps[c]
        if not isinstance(n, int) or isinstance(n, bool) or n < warmup + 10:
            raise ConfigError(
                "repeats", f"{c}: must be an int >= warmup + 10 ({warmup + 10}), got {show(n)}"
            )
    for opt, v, low in (("warmup", warmup, 0), ("batch_size", batch_size, 1),
                        ("max_episode_steps", max_episode_steps, 1)):
        if not isinstance(v, int) or isinstance(v, bool) or v < low:
            raise ConfigError(opt, f"must be an int >= {low}, got {show(v)}")
    if sample_timesteps is not None and (
        not isinstance(sample_timesteps, int) or sample_timesteps < 1
    ):
        raise ConfigError(
            "sample_timesteps", f"must be None or an int >= 1, got {show(sample_timesteps)}"
        )
    check_growth_bytes(max_growth_bytes)

    config, runner, built = _runner(target)
    probes: dict[str, dict[str, Any]] = {"process": {}}
    if malloc_supported():
        probes["malloc"] = {}
    if objects:
        probes["objects"] = {"top": 30}
    checks: dict[str, ComponentCheck] = {}
    try:
        for c in comps:
            try:
                if c == "env":
                    fn = _env_episode(_first_env(runner), max_episode_steps)
                elif c == "env_runner":
                    fn = _sample(runner, sample_timesteps)
                else:
                    fn = _forward(config, runner, batch_size)
            except MemprobeError:
                raise
            except Exception as exc:
                raise ComponentError(c, f"could not be set up: {exc!r}") from exc
            checks[c] = _check(c, fn, reps[c], warmup, max_growth_bytes, probes)
    finally:
        if built:
            runner.stop()
        elif "env" in comps:
            _reset_episodes_at_next_sample(runner)
    return LeakCheckResult(checks)


def _reset_episodes_at_next_sample(runner: Any) -> None:
    """The algorithm's own EnvRunner, whose env was stepped behind its back: start fresh
    episodes at its next ``sample()``. RLlib has no public call for it; this sets the
    flag its ``SingleAgentEnvRunner`` reads (checked on Ray 2.60), when it has one."""
    if hasattr(runner, "_needs_initial_reset"):
        runner._needs_initial_reset = True


def _check(component: str, fn: Callable[[], None], repeats: int, warmup: int,
           max_growth_bytes: float, probes: Mapping[str, Any]) -> ComponentCheck:
    # Any significant growth is judged; judge_tolerance then holds the bytes metrics
    # to max_growth_bytes over the calls judged, whatever the floor for "slight".
    thresholds = dict.fromkeys(JUDGED, 0.0)

    def call() -> None:
        try:
            fn()
        except Exception as exc:
            raise ComponentError(component, f"{_CALLS[component]} failed: {exc!r}") from exc

    gc.collect()
    gc.freeze()  # the heap so far: not collected nor walked by the objects probe again
    try:
        report = check_leaks(call, repeats=repeats, warmup=warmup, probes=dict(probes),
                             thresholds=thresholds)
    finally:
        gc.unfreeze()
    report = judge_tolerance(report, JUDGED, max_growth_bytes)
    grew = tuple(m for m in JUDGED if (v := report.get(m)) is not None and v.leak)
    return ComponentCheck(component, _CALLS[component], repeats, report, grew)
