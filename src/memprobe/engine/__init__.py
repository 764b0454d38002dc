"""The Prober and what it calls at each sample: schedule, budget, guards, history,
sinks, phases, and the alarm's checks."""
