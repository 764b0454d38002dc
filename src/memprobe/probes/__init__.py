"""Built-in probes, one module each, each registered as an ordinary plugin."""
