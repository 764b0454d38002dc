"""An example memprobe plugin: the ``example`` probe."""
