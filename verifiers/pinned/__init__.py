"""Checks that compile or run the pinned code on a CPU (in the sandbox), and kb's builds of the pins for the GPU."""
