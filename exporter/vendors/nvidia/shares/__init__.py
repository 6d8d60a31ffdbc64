"""Per-process shares (--sharing.mode process): each holder's own part of a shared GPU, from NVML and /proc."""
