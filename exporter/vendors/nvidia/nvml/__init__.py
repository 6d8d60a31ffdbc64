"""Source: NVML, the driver's library: MIG device lookups and the processes on each GPU."""
