"""A memprobe plugin whose probe always raises (imported by the EnvRunners in the tests)."""

import memprobe


class RaisingProbe:
    """Always fails in sample()."""

    def start(self):
        pass

    def sample(self):
        raise RuntimeError("this probe always fails")

    def stop(self):
        pass


@memprobe.hookimpl
def memprobe_register_probes(register):
    register("raising", RaisingProbe)
