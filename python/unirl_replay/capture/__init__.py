"""Capture of real UniRL rollouts (default-off) and the CPU reference execution."""
