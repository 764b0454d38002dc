"""An example memprobe plugin: the ``example`` probe and the ``example_csv`` sink."""
